"""Your own measured runs against the model (`shardwise validate --runs FILE`): how far it misses
them before you calibrate (or with a calibration), whether its 80% intervals hold them, and
whether it ranks your layouts as they measured.

The runs are `shardwise calibrate`'s CSV (`calibration.runs`: training or serving runs, one
measurement each). Each run is priced as `predict` prices it, uncalibrated or with the fitted
values of a calibration, with the interval `predict` would print (`calibration.intervals.spread`:
the stack's leave-one-source-out spread uncalibrated, the fit's own with a calibration). Per group
(the CSV's `group` or `source` column; without one, or where every run has a group of its own, the
stack): runs, MAPE, bias, the share inside
the 80% interval. Training runs of one model on one cluster, GPU count, sequence length, stack and
group with at least `ranking.MIN_LAYOUTS` distinct layouts are ranked by tokens/s per GPU
(`analyses.ranking`: Spearman's rho, top-1 regret). Nothing is fitted here.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardwise.analyses.ranking import DENSE, MOE, GroupRanking, Measured, rank_groups

ALL = "all runs"


@dataclass(frozen=True)
class RunCheck:
    """One run: what was measured, what the model says, and its 80% interval."""

    run_id: str
    where: str
    group: str
    stack: str
    metric: str
    measured: float
    predicted: float
    low: float
    high: float
    label: str
    fits_in_memory: bool | None = None  # in memory as the model counts it (training runs; None: serving)

    @property
    def error(self) -> float:
        """(predicted - measured) / measured."""
        return self.predicted / self.measured - 1.0

    @property
    def covered(self) -> bool:
        return self.low <= self.measured <= self.high


@dataclass(frozen=True)
class GroupCheck:
    """The runs of one group (or all of them)."""

    name: str
    stacks: str
    runs: int
    mape: float
    bias: float
    coverage: float
    median_half_width: float  # the 80% interval's median half-width, relative (log)


@dataclass(frozen=True)
class RunsReport:
    runs: tuple[RunCheck, ...]
    groups: tuple[GroupCheck, ...]  # one per group, then ALL where there are several
    rankings: tuple[GroupRanking, ...]
    basis: str  # where the intervals come from


def _layout(plan: Any, training: bool) -> str:
    """The run as `plan` prints it: tp, pp, dp (cp, vpp, ep), and for training the micro-batch, the
    global batch, ZeRO, recomputation and precision (runs that differ in any are different layouts)."""
    parts = [f"tp{plan.tp}", f"pp{plan.pp}", f"dp{plan.dp}"]
    parts += [f"{k}{v}" for k, v in (("cp", plan.cp), ("vpp", plan.vpp), ("ep", plan.ep)) if v != 1]
    if not training:
        return " ".join(parts)
    recompute = getattr(plan.recompute, "name", str(plan.recompute)).lower()
    precision = getattr(plan.precision, "value", plan.precision)
    extra = [f"mb{plan.micro_batch}", f"gbs{plan.global_batch}", f"zero{plan.zero_stage}", f"recompute {recompute}"]
    return " ".join([*parts, *extra, str(precision)])


def _workload(run: Any) -> str:
    """A serving run's requests (prompt + new tokens, how many at once); "" for training."""
    w = getattr(run.case, "workload", None)
    return "" if w is None else f", {int(w.input_len)}+{int(w.output_len)} tokens x {int(w.batch)} at once"


def _fits(run: Any) -> bool | None:
    """Whether a training run fits in its GPUs' memory as the model counts it (None: serving)."""
    if run.metric != "step_time_s":
        return None
    from shardwise.engines.training import training_memory

    scn = run.scenario
    return bool(training_memory(scn).total_bytes <= scn.cluster.gpu.memory_bytes)


def _summary(name: str, runs: list[RunCheck]) -> GroupCheck:
    err = np.array([r.error for r in runs])
    half = np.array([np.log(r.high / r.low) / 2 for r in runs])
    return GroupCheck(
        name=name,
        stacks=", ".join(sorted({r.stack for r in runs})),
        runs=len(runs),
        mape=float(np.mean(np.abs(err))),
        bias=float(np.mean(err)),
        coverage=float(np.mean([r.covered for r in runs])),
        median_half_width=float(np.median(half)),
    )


def _rankings(runs: list[Any], checks: list[RunCheck], grouped: bool) -> list[GroupRanking]:
    """Training runs ranked by tokens/s per GPU within their (group where `grouped`, model, cluster,
    GPUs, sequence length, stack) group."""
    measured = []
    for run, c in zip(runs, checks, strict=True):
        if c.metric != "step_time_s":
            continue
        scn = run.scenario
        tokens = float(scn.plan.global_batch) * float(scn.model.seq_len) / float(scn.cluster.num_gpus)
        # as validate public names a group ('llama3-8b on 8 x dgx-h100' read as 8 systems)
        where = f"{scn.model.name}, {scn.cluster.name}, {scn.cluster.num_gpus} GPUs, seq {scn.model.seq_len}"
        key = f"{c.group}: {where}" if grouped and c.group else where
        measured.append(
            Measured(
                group=key,
                stack=c.stack,
                kind=MOE if scn.model.is_moe else DENSE,
                layout=c.label,
                label=c.label,
                measured_tokens_per_s=tokens / c.measured,
                predicted_tokens_per_s=tokens / c.predicted,
            )
        )
    return rank_groups(measured)


def check_runs(runs: list[Any], fitted: Any = None) -> RunsReport:
    """Each of `runs` (`calibration.runs.Run`) priced uncalibrated (`fitted` None) or with a
    calibration's fit (`calibration.fit.Fit`), against its measurement."""
    from shardwise.calibration.intervals import predict_with_spread

    t, spread = predict_with_spread(fitted, [r.case for r in runs])
    low, high = spread.bounds(t)
    checks = [
        RunCheck(
            run_id=r.run_id,
            where=r.where,
            group=r.group,
            stack=r.scenario.plan.framework if r.metric == "step_time_s" else "serving",
            metric=r.metric,
            measured=float(r.measured),
            predicted=float(t[i]),
            low=float(low[i]),
            high=float(high[i]),
            label=_layout(r.scenario.plan, r.metric == "step_time_s") + _workload(r),
            fits_in_memory=_fits(r),
        )
        for i, r in enumerate(runs)
    ]
    by: dict[str, list[RunCheck]] = defaultdict(list)
    # by the runs' groups, unless each run is its own (a source column citing each run apart): by stack
    grouped = any(c.group for c in checks) and len({c.group for c in checks}) < len(checks)
    for c in checks:
        by[(c.group or "(no group)") if grouped else c.stack].append(c)
    groups = [_summary(name, cs) for name, cs in by.items()]
    if len(groups) > 1:
        groups.append(_summary(ALL, checks))
    return RunsReport(tuple(checks), tuple(groups), tuple(_rankings(runs, checks, grouped)), spread.basis)
