"""Predicted against 900 public training runs (NVIDIA DGX Cloud benchmarking, Megatron-Bridge and
NeMo performance summaries, ...): `data/public_training_runs.csv`, normalised from the published
tables with their source columns (see `data/PUBLIC_RUNS.md`).

Each row either becomes a `Scenario` (model preset, system preset, the published layout, the
framework preset's execution flags; for mixture-of-experts rows the preset and expert tensor
parallelism of `public_moe`) or is skipped with the reason (hybrid Mamba models, FP4, LoRA, a
framework without a preset, an incomplete layout). Errors are in step
time: throughput rows convert exactly (step = global batch x sequence / (tokens/s/GPU x GPUs)).

Metrics per table (one table per public source):
- MAPE and bias (mean signed error) of the step time;
- ranking: within each group (one model, one system, one GPU count, one sequence length) the
  distinct layouts are ranked by tokens/s per GPU, measured and predicted: Spearman's rho per
  group with at least 3 layouts (mean over groups), and the share of layout pairs ordered right
  (all groups with 2 or more; pairs measured within 1% of each other are left out, pairs the
  model predicts exactly tied count half, as in Harrell's concordance index);
- a flat baseline beside the model: Eq. 3 FLOPs (Narayanan et al. 2021; the model FLOPs of
  three passes plus what recomputation repeats) at one fixed fraction of the GPU's dense peak
  in the run's precision (FP8 runs: the FP8 peak), that fraction set on Narayanan et al. 2021
  Table 1 alone (`baseline_fraction`).

Rows carry the split made before any tuning (`split`: dev or holdout, by a hash of the group, so
a group's layouts stay together). Nothing in the cost model is fitted to either; the dev rows are
the ones looked at while developing, the holdout rows are reported apart.
"""

from __future__ import annotations

from collections import defaultdict
from functools import cache

import numpy as np

from shardwise.analyses import public_moe
from shardwise.analyses.public_runs import (  # noqa: F401 (the names callers and tests read here)
    _published_twice,
    as_int,
    label,
    layout_key,
    measured_step_s,
    raw_rows,
    request_for,
    scenario_for,
    skip_reason,
    source_flops_per_step,
    source_of,
)
from shardwise.analyses.public_scores import (  # noqa: F401 (the names callers and tests read here)
    PublicRow,
    TableSummary,
    spearman,
    summarize,
)
from shardwise.errors import SpecError


@cache
def baseline_fraction() -> float:
    """The flat baseline's fraction of peak: Narayanan et al. 2021 Table 1's mean measured
    TFLOP/s per GPU (Eq. 3, recomputation included) over the A100's 312 TFLOP/s."""
    from shardwise.analyses.validation import measured_runs
    from shardwise.analyses.validation import scenario_for as t1_scenario

    fractions = []
    for run_id, row in measured_runs().items():
        if row["group"] == "narayanan21_table1":
            gpu = t1_scenario(run_id).cluster.gpu
            fractions.append(float(row["tflops_per_gpu"]) * 1e12 / float(gpu.peak_flops_per_s_16bit))
    return float(np.mean(fractions))


def baseline_step_s(est, n_gpus: int) -> float:
    gpu, precision = est.scenario.cluster.gpu, est.scenario.plan.precision
    peak = float(gpu.peak_flops_per_s(precision))
    return float(est.hardware_flops_per_step) / (n_gpus * peak * baseline_fraction())


@cache
def validate_public() -> tuple[PublicRow, ...]:
    """Every public row, predicted or skipped with its reason."""
    from shardwise.analyses.progress import tick
    from shardwise.engines.training import estimate_training_step

    out = []
    for raw in raw_rows():
        tick()  # one of 2 x rows (`priced_rows` prices each again)
        row = public_moe.resolved(raw)
        reason = skip_reason(row)
        pred = base = meas = float("nan")
        if not reason:
            try:
                scn = scenario_for(row)
            except SpecError as exc:
                reason = f"not a valid layout for shardwise: {exc}"
            else:
                est = estimate_training_step(scn)
                meas = measured_step_s(row, source_flops_per_step(row, scn, float(est.model_flops_per_step)))
                pred = float(est.step_time_s)
                base = baseline_step_s(est, int(row["num_gpus"]))
        out.append(
            PublicRow(
                run_id=row["id"],
                source=source_of(row),
                locator=row["locator"],
                label=label(row),
                group=row["group"],
                layout=layout_key(row),
                split=row["split"],
                measured_step_s=meas,
                predicted_step_s=pred,
                baseline_step_s=base,
                tokens_per_step=float(row["gbs"] or "nan") * float(row["seq_len"] or "nan"),
                num_gpus=as_int(row["num_gpus"], 0) or 0,
                skip=reason,
                moe=row["moe"] == "yes",
                lora=row["workload"] == "lora",
            )
        )
    return tuple(out)


def summaries(split: str | None = None) -> list[TableSummary]:
    """One summary per public source of dense runs and one for all of them, one for the
    mixture-of-experts runs and one for the LoRA fine-tuning runs (all sources), on `split` rows
    (None: all)."""
    rows = [r for r in validate_public() if split is None or r.split == split]
    dense = [r for r in rows if not r.moe and not r.lora]
    by_source: dict[str, list[PublicRow]] = defaultdict(list)
    for r in dense:
        by_source[r.source].append(r)
    out = [summarize(name, rs) for name, rs in sorted(by_source.items())]
    out.append(summarize("all public sources", dense))
    out.append(summarize(MOE_TABLE, [r for r in rows if r.moe]))
    out.append(summarize(LORA_TABLE, [r for r in rows if r.lora]))
    return out


MOE_TABLE = "mixture of experts (all sources)"
LORA_TABLE = "LoRA fine-tuning (all sources)"


@cache
def round_one_rows() -> tuple[PublicRow, ...]:
    """Narayanan et al. 2021 Table 1 and Korthikanti et al. 2022 Table 5 as step times, with the
    flat baseline, so they sit in the same table (split: the table's name)."""
    from shardwise.analyses.validation import measured_runs, plan_label
    from shardwise.analyses.validation import scenario_for as run_scenario

    out = []
    for run_id, row in measured_runs().items():
        if row["group"] not in ("narayanan21_table1", "korthikanti22_table5"):
            continue
        scn = run_scenario(run_id)
        from shardwise.engines.training import estimate_training_step

        est = estimate_training_step(scn)
        n = int(np.asarray(scn.plan.num_gpus))
        if row["group"] == "narayanan21_table1":  # TFLOP/s per GPU (Eq. 3) -> seconds per step
            measured = float(est.hardware_flops_per_step) / (float(row["tflops_per_gpu"]) * 1e12 * n)
            name = "Narayanan et al. 2021 Table 1"
        else:
            measured = float(row["step_time_s"])
            name = "Korthikanti et al. 2022 Table 5"
        out.append(
            PublicRow(
                run_id=run_id,
                source=name,
                locator=row["locator"],
                label=f"{scn.model.name}, {n} GPUs, {plan_label(scn.plan)}",
                group=f"{row['group']}|{scn.model.name}|{n}",
                layout=plan_label(scn.plan),
                split=name,
                measured_step_s=measured,
                predicted_step_s=float(est.step_time_s),
                baseline_step_s=baseline_step_s(est, n),
                tokens_per_step=float(scn.plan.global_batch) * float(scn.model.seq_len),
                num_gpus=n,
            )
        )
    return tuple(out)


def skip_counts(split: str | None = None) -> dict[str, int]:
    """How many rows were skipped, by reason (the first clause of the reason)."""
    counts: dict[str, int] = defaultdict(int)
    for r in validate_public():
        if r.skip and (split is None or r.split == split):
            counts[first_clause(r.skip)] += 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def first_clause(reason: str) -> str:
    """A skip reason up to its first ':', less a parenthesis that colon leaves open ('... save
    (launch.sh: --max_steps 30)' -> '... save'): the counts' text has balanced brackets."""
    head = reason.split(":")[0]
    while head.count("(") > head.count(")"):
        head = head[: head.rfind("(")].rstrip()
    return head
