"""`shardwise sweep`: a grid over several variables, every plan on every link."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import click

from shardwise.cli.experiment_options import experiment_options
from shardwise.cli.options import alias_option
from shardwise.cli.output import STDOUT, output_option

OUTPUT_FORMATS = (".csv", ".parquet")

PROGRESS_MIN_POINTS = 500_000  # show a progress bar from this many configurations
PROGRESS_MIN_ROWS = 200_000  # ... and while writing a CSV of this many rows
ESTIMATE_FROM_S = 10.0  # a streamed sweep estimated at this long or longer says so first (stderr)
PROGRESS_LINE_S = 30.0  # ... and, where no bar is drawn (stderr piped), a progress line this often


@click.command()
@experiment_options
@click.option(
    "--vary",
    "varies",
    multiple=True,
    required=True,
    metavar="NAME=VALUES",
    help="A variable of the grid (repeat): batch, bandwidth, latency, layers, hidden, seq_len, gpus, "
    "peak_flops, hbm_bandwidth, with LO..HI[:N|:xF] or a list.",
)
@output_option(
    OUTPUT_FORMATS, "the grid, one row per link and point (Parquet needs pyarrow)", old=("--csv", "--out"), stdout="CSV"
)
@alias_option(
    "--plot",
    "map_path",
    old=("--map",),
    metavar="FILE",
    help="Winner map (.png/.svg/.pdf) for a two-variable grid: fastest plan per cell, one panel per link.",
)
@click.option(
    "--no-plot", is_flag=True, help="Do not write a figure (even with --plot), as crossover's and sensitivity's."
)
@click.option(
    "--breakdown",
    is_flag=True,
    help="With -o: also each plan's time per term (TERM_s[PLAN] columns: compute, tp_comm, pp_bubble, ...).",
)
@click.option("--no-progress", is_flag=True, help="Never show a progress bar (nor, piped, the periodic progress line).")
@click.option(
    "--yes",
    is_flag=True,
    help="Run a sweep to -o FILE estimated at over 10 minutes (refused without it; the estimate is printed "
    "on stderr before any sweep of 10 s or more).",
)
@click.option("--json", "as_json", is_flag=True, help="Print a summary as JSON.")
def sweep(
    varies: tuple[str, ...],
    output_path: str | None,
    map_path: str | None,
    no_plot: bool,
    breakdown: bool,
    no_progress: bool,
    yes: bool,
    as_json: bool,
    **options: Any,
) -> None:
    """Evaluate every --plan on every --intra-link over the outer product of the --vary grids.

    \b
    Examples:
      shardwise sweep --vary batch=1..64 --vary bandwidth=1GB/s..900GB/s:40 \\
          --intra-link NVLink=nvlink3 --intra-link PCIe=pcie4 --plot winner.png -o grid.csv
      shardwise sweep --vary batch=1..64 --vary layers=8..192:24 --vary seq_len=512,2048,8192 -o grid.parquet
      shardwise sweep --system dgx-h100 --vary batch=1..64 --vary seq_len=1024,4096 -o -
    """
    from shardwise.cli import output
    from shardwise.cli.options import check_output_path, echo_notes
    from shardwise.errors import SpecError
    from shardwise.requests.compare import ExperimentRequest, SweepRequest

    if breakdown and output_path is None:
        raise SpecError("--breakdown adds columns to the table: give -o FILE too")
    if no_plot:  # as crossover's and sensitivity's --no-plot: no figure, whatever --plot says
        map_path = None
    request = SweepRequest(ExperimentRequest.from_options(options), varies, breakdown)
    grid = request.grid()
    if map_path is not None and len(grid) != 2:
        raise SpecError(f"--plot needs exactly two --vary variables (got {len(grid)})")
    output.check(output_path, OUTPUT_FORMATS)
    if map_path is not None:
        check_output_path(map_path, (".png", ".svg", ".pdf"), "--plot")
    if as_json and output_path == STDOUT:
        raise SpecError("give --json or -o -, not both (both print)")
    from shardwise.analyses.sweep import MAX_STREAMED
    from shardwise.cli.render import progress_console

    built = request.experiment.build()  # the grid's size before anything is evaluated
    total_configs = request.configurations(built.experiment)
    show_progress = not (no_progress or as_json) and total_configs >= PROGRESS_MIN_POINTS
    if output_path == STDOUT:  # CSV rows on stdout: no progress bar or summary among them
        show_progress = False
    if output_path is not None and map_path is None:  # rows go to the file block by block
        estimate_s = _estimate(request, built.experiment, output_path, total_configs, yes)
        lines = not no_progress and estimate_s >= ESTIMATE_FROM_S and not progress_console().is_terminal
        answer = _stream(request, built, output_path, total_configs, show_progress, lines)
    else:
        hint = f"; or give -o FILE without --plot: a file takes up to {MAX_STREAMED:,}"
        if show_progress:
            from shardwise.cli.render import progress_bar

            with progress_bar(total_configs, "evaluating") as advance:
                answer = request.run(progress=advance, hint=hint, built=built)
        else:
            answer = request.run(hint=hint, built=built)
        if output_path is not None:
            _write(answer.result, output_path, show_progress)
    echo_notes(answer.notes)
    if map_path is not None:
        from shardwise import plots

        plots.save(plots.winner_map(answer.result), map_path)
    if output_path == STDOUT:
        return
    from shardwise import export

    summary = answer.as_dict()
    if as_json:
        click.echo(export.dumps(summary))
        return
    _print(summary, output_path, map_path)


def _estimate(request: Any, exp: Any, path: str, total: int, yes: bool) -> float:
    """The streamed sweep's estimated seconds (`analyses.sweep_cost`), said on stderr from
    ESTIMATE_FROM_S; above `REFUSE_ABOVE_S` refused in one line unless --yes."""
    from pathlib import Path

    from shardwise.analyses import sweep_cost
    from shardwise.analyses.sweep import MAX_STREAMED, check_size
    from shardwise.errors import SpecError

    check_size(total, limit=MAX_STREAMED)  # too large even with --yes: said first

    fmt = ".csv" if path == STDOUT else Path(path).suffix.lower()
    rows = total // max(1, len(exp.plans))
    seconds = sweep_cost.sweep_seconds(rows, len(request.grid()), exp.plans, fmt, request.breakdown)
    about = f"about {sweep_cost.duration_words(seconds)} of one free core"
    if seconds > sweep_cost.REFUSE_ABOVE_S and not yes:
        faster = ""
        if fmt == ".csv":
            quicker = sweep_cost.sweep_seconds(rows, len(request.grid()), exp.plans, ".parquet", request.breakdown)
            faster = f", and -o FILE.parquet about {sweep_cost.duration_words(quicker)}"
        raise SpecError(
            f"--yes: this sweep writes {total:,} configurations to {path}, {about} (over "
            f"{sweep_cost.REFUSE_ABOVE_S / 60:.0f} min); give --yes to run it (fewer values, plans or links take "
            f"less{faster})"
        )
    if seconds >= ESTIMATE_FROM_S:
        click.echo(
            f"sweep: {total:,} configurations to {path}, {about} (estimate; a busy machine takes longer)", err=True
        )
    return seconds


def _stream(request: Any, built: Any, path: str, total: int, show_progress: bool, lines: bool = False) -> Any:
    """The sweep written to `path` as it is evaluated (`SweepRequest.stream`): memory stays that
    of one block, whatever the grid. A plan invalid everywhere leaves no file. `lines`: a progress
    line on stderr every PROGRESS_LINE_S where no bar is drawn (stderr not a terminal)."""
    from shardwise.cli.render import progress_bar

    with (
        _writer(path) as write,
        progress_bar(total, f"evaluating, writing {path}", disable=not show_progress) as advance,
    ):
        return request.stream(write, progress=_with_lines(advance, total) if lines else advance, built=built)


def _with_lines(advance: Any, total: int) -> Any:
    """`advance`, and a line on stderr when PROGRESS_LINE_S have passed since the last one:
    'sweep: 12,000,000 of 64,000,000 configurations (19%) in 2 min; about 9 min left'."""
    import time

    from shardwise.analyses.sweep_cost import duration_words

    start = last = time.monotonic()
    done = 0

    def step(n: int = 1) -> None:
        nonlocal done, last
        advance(n)
        done += n
        now = time.monotonic()
        if now - last >= PROGRESS_LINE_S and done < total:
            last, spent = now, now - start
            left = spent * (total - done) / max(done, 1)
            click.echo(
                f"sweep: {done:,} of {total:,} configurations ({done / total:.0%}) in {duration_words(spent)}; "
                f"about {duration_words(left)} left",
                err=True,
            )

    return step


def _writer(path: str) -> Any:
    """`tables.columns_writer` for a file; for `-`, `_stdout_rows`."""
    from shardwise.tables import columns_writer

    return _stdout_rows() if path == STDOUT else columns_writer(path)


@contextlib.contextmanager
def _stdout_rows() -> Iterator[Any]:
    """CSV rows for `-o -`, written block by block to a temporary file (memory stays that of one
    block) and printed when the sweep ends without an error, as a file appears only then: a plan
    invalid everywhere prints its one line and no rows before it."""
    import shutil
    import sys
    import tempfile

    from shardwise.tables import _CsvBlocks

    with tempfile.TemporaryFile("w+", encoding="utf-8", newline="") as fh:
        yield _CsvBlocks(fh).write
        fh.seek(0)
        shutil.copyfileobj(fh, sys.stdout)


def _write(result: Any, path: str, show_progress: bool) -> None:
    """Write the grid, with a progress bar for a large CSV (it is written in chunks)."""
    from shardwise.tables import write_columns

    columns = dict(result.columns())
    if path == STDOUT:
        with _writer(path) as write:
            write(columns)
        return
    rows = len(next(iter(columns.values())))
    if not show_progress or rows < PROGRESS_MIN_ROWS:
        write_columns(columns, path)
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from shardwise.cli.render import progress_console

    where = progress_console()
    with Progress(
        TextColumn(f"writing {path}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        transient=True,
        disable=not where.is_terminal,
        console=where,
    ) as bar:
        task = bar.add_task("write", total=rows)
        write_columns(columns, path, progress=lambda done, _: bar.update(task, completed=done))


def _print(summary: dict[str, Any], out_path: str | None, map_path: str | None) -> None:
    from rich.table import Table

    from shardwise.cli.render import console

    out = console()
    from shardwise.analyses.experiment import DISPLAY_SCALE, DISPLAY_UNIT

    grid = " x ".join(  # the JSON's SI ranges in the units the other tables show
        f"{name} {lo * DISPLAY_SCALE.get(name, 1):g}..{hi * DISPLAY_SCALE.get(name, 1):g}{DISPLAY_UNIT.get(name, '')} "
        f"({n} values)"
        for name, (lo, hi, n) in summary["variables"].items()
    )
    out.print(f"grid: {grid}")
    out.print(_stack_line(summary))
    out.print(f"{summary['configurations']:,} configurations evaluated in {summary['seconds']:.2f} s")
    table = Table(title="grid cells won by each plan", title_justify="left", header_style="bold")
    table.add_column("link")
    plans = [p for p in next(iter(summary["winner_cells"].values())) if p != "none valid"]
    for p in [*plans, "none valid"]:
        table.add_column(p, justify="right")
    invalid, beside = summary.get("invalid_cells", {}), summary.get("wins_beside_invalid", {})
    for link, counts in summary["winner_cells"].items():
        table.add_row(link, *(f"{counts[p]:,}" for p in [*plans, "none valid"]))
        if any(invalid.get(link, {}).values()):  # review 43 #2: won among fewer plans, and where invalid
            table.add_row("  of which beside an invalid plan", *(f"{beside[link][p]:,}" for p in plans), "")
            table.add_row("  invalid (not priced)", *(f"{invalid[link][p]:,}" for p in plans), "")
    out.print(table)
    out.print(
        "[dim]a plan that does not fit in GPU memory wins no cell unless --ignore-memory; none valid: no plan "
        "valid there that may win[/]"
    )
    if any(n for counts in invalid.values() for n in counts.values()):
        out.print(
            "[dim]invalid: the plan's layout cannot run that point (e.g. the batch does not split over its "
            "data-parallel ranks x micro-batch); it is neither out of memory nor a loss, and the plans valid "
            "there are compared without it: 'beside an invalid plan' counts those wins[/]"
        )
    if out_path:
        out.print(f"grid written to {out_path}")
    if map_path:
        out.print(f"winner map: {map_path}")


def _stack_line(summary: dict[str, Any]) -> str:
    """The stack and what each training plan recomputes (`SweepResult.as_dict`'s `framework`,
    `recompute_source` and `recompute_by_plan`): "priced under torchtitan; recompute (torchtitan's
    default where a plan says none): tp=8 every-second-layer, pp=8 full"."""
    line = f"priced under {summary['framework']}"
    by_plan = {p: r for p, r in summary.get("recompute_by_plan", {}).items() if r}
    if by_plan:
        source = "--recompute" if summary.get("recompute_source") == "--recompute" else "the stack's default"
        plans = ", ".join(f"{p} {r}" for p, r in by_plan.items())
        line += f"; recompute ({source} where a plan's recompute= key does not say): {plans}"
    own = summary.get("stack_layout")  # a training step: the layouts priced (review 45 #2)
    if own:
        from shardwise.requests.experiment import AS_WRITTEN

        sp = "on" if own["sequence_parallel"] else "off"
        line += (
            f"; {AS_WRITTEN[:-1]}: {summary['framework']}'s sp={sp} where tp > 1 and zero={own['zero_stage']}; "
            "add them to a --plan to price them)"
        )
    return line
