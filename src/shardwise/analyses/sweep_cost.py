"""How long a sweep streamed to a file takes (`shardwise sweep -o FILE`), estimated before it starts
(review 47 #7: a 64-million-configuration CSV ran for over 10 minutes with no word, where a comment
promised "about 2 minutes per 1e9"). The estimate is the CPU time of one free core: evaluation per
configuration (grid point x link x plan), plus formatting and writing per cell of the table (row x
column). It is a guide, good to about a factor 2 (the model, the schedule and a calibration's interval
move the evaluation; a busy machine stretches the wall time by its load).

Measured on the project's machine (2 shared cores; `/usr/bin/time` user + sys, median of 3, less the
0.47 s a one-point sweep takes to start), `sweep --model llama3.1-8b --system dgx-h100` over batch x
seq_len x bandwidth, 2026-12-07:
- evaluation: tp=8 (no pipeline) 6.4M points in memory 1.45 s -> 0.15 us a configuration; pp=8 640k
  points in memory 2.9 s -> 3.8 us (the pipeline's per-stage and per-micro-batch terms, and their
  temporaries: a third of it system time).
- CSV: tp=8, 640k rows x 15 columns, 3.66 s -> 0.32 us a cell (each float formatted as text); three
  plans (tp=8, pp=8, tp=2 pp=4), 640k rows x 31 columns, 11.0 s less 4.6 s in memory -> 0.32 us.
- Parquet (pyarrow, columnar, binary): tp=8, 6.4M rows x 15 columns, 6.35 s -> 0.05 us a cell;
  pp=8, 640k x 15, 3.45 s less 2.9 s -> 0.06 us; the three plans, 5.95 s less 4.6 s -> 0.07 us.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

EVAL_S_PER_CONFIGURATION = 0.15e-6  # a plan without a pipeline (tp=8 above)
EVAL_PIPELINE_S_PER_CONFIGURATION = 3.8e-6  # a plan with pp > 1 (pp=8 above)
WRITE_S_PER_CELL = {".csv": 0.32e-6, ".parquet": 0.06e-6}  # CSV on stdout (`-o -`) as a .csv file
# the table's columns (`SweepResult.columns`): link, the variables, winner_plan, margin, framework; per
# plan time_s, its low and high, fits_in_memory, valid, and recompute, zero_stage, sequence_parallel;
# with --breakdown each term's time (BREAKDOWN_TERMS, `engines.result.StepBreakdown`)
SHARED_COLUMNS, PLAN_COLUMNS, BREAKDOWN_TERMS = 4, 8, 10
# a streamed sweep estimated above this is refused unless --yes (the wait a user would not expect
# from a command that prints nothing until it ends)
REFUSE_ABOVE_S = 600.0


def sweep_seconds(rows: int, variables: int, plans: Sequence[Any], fmt: str, breakdown: bool = False) -> float:
    """The CPU seconds of one free core to evaluate and write `rows` (grid points x links) rows of
    `plans` (each with a `pp`; "all" counts as a pipeline) over `variables` --vary variables to a
    `fmt` (".csv" or ".parquet") table."""
    piped = sum(1 for p in plans if str(getattr(p, "pp", 1)) == "all" or int(getattr(p, "pp", 1)) > 1)
    evaluate = rows * (piped * EVAL_PIPELINE_S_PER_CONFIGURATION + (len(plans) - piped) * EVAL_S_PER_CONFIGURATION)
    columns = SHARED_COLUMNS + variables + len(plans) * (PLAN_COLUMNS + BREAKDOWN_TERMS * breakdown)
    return evaluate + rows * columns * WRITE_S_PER_CELL.get(fmt, WRITE_S_PER_CELL[".csv"])


def duration_words(seconds: float) -> str:
    """'40 s', '12 min', '3.5 h': an estimate's order, without false precision."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
