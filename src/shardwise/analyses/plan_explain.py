"""Why the planner's best plan wins: its neighbours (one choice changed at a time) and the cost
each of them pays, and how two plans differ (used to compare with published runs)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardwise.analyses.planner import PlanSearch
from shardwise.engines.result import TrainingEstimate
from shardwise.engines.training import estimate_training_step
from shardwise.errors import SpecError
from shardwise.specs import Plan, Recompute, Scenario, Schedule

PARTS = {
    "compute": "compute",
    "tp_comm": "TP communication",
    "pp_p2p": "pipeline sends",
    "pp_bubble": "pipeline bubble",
    "dp_comm": "DP communication",
    "optimizer": "optimizer",
}
MEMORY_PARTS = ("weights", "gradients", "optimizer", "activations")


@dataclass(frozen=True)
class Alternative:
    """A plan next to the best one and what it costs (relative to the best)."""

    change: str  # what differs, e.g. "tp=16, dp=8"
    step_time_s: float
    relative: float  # (alternative - best) / best, in the search's objective (positive: worse)
    fits: bool
    in_space: bool  # allowed by the search's constraints
    reason: str


def _value(est: TrainingEstimate, name: str) -> float:
    return float(np.asarray(getattr(est, name)))


def _gb(x: float) -> str:
    return f"{x / 1e9:.0f} GB"


def compare(best: TrainingEstimate, other: TrainingEstimate, capacity_bytes: float) -> str:
    """Where `other` loses (or gains) time or memory against `best`, in one phrase."""
    gpus = int(np.asarray(other.scenario.plan.num_gpus))
    b_parts = {k: float(np.asarray(v)) for k, v in best.breakdown.as_dict().items()}
    o_parts = {k: float(np.asarray(v)) for k, v in other.breakdown.as_dict().items()}
    delta = {k: o_parts[k] - b_parts[k] for k in PARTS}
    worst = max(delta, key=lambda k: delta[k])
    best_gain = min(delta, key=lambda k: delta[k])
    mem = float(np.asarray(other.memory.total_bytes))
    notes = []
    if mem > capacity_bytes:
        b_mem, o_mem = best.memory.as_dict(), other.memory.as_dict()
        part = max(MEMORY_PARTS, key=lambda k: float(np.asarray(o_mem[k])) - float(np.asarray(b_mem[k])))
        notes.append(f"needs {_gb(mem)} per GPU (> {_gb(capacity_bytes)}; {part} "
                     f"{_gb(float(np.asarray(o_mem[part])))})")
    if delta[worst] > 0:
        rel = delta[worst] / b_parts[worst] if b_parts[worst] > 0 else np.inf
        grow = f" ({rel:+.0%})" if rel < 3 else ""
        phrase = f"{PARTS[worst]} +{_seconds(delta[worst])}{grow}"
        if worst == "tp_comm" and int(np.asarray(other.scenario.plan.tp)) > int(other.scenario.cluster.gpus_per_node):
            phrase += ", the TP group crosses servers"
        notes.append(phrase)
    if delta[best_gain] < 0 and best_gain != worst:
        notes.append(f"saves {_seconds(-delta[best_gain])} of {PARTS[best_gain]}")
    if gpus != int(np.asarray(best.scenario.plan.num_gpus)):
        notes.append(f"on {gpus} GPUs")
    return "; ".join(notes) or "the same cost"


def _seconds(s: float) -> str:
    from shardwise.units import format_seconds

    return format_seconds(s)


def _variants(plan: Plan, layers: int) -> list[tuple[str, dict[str, object]]]:
    """One or two choices of `plan` changed at a time (GPU count kept)."""
    tp, pp, dp, mb, v = (int(np.asarray(x)) for x in (plan.tp, plan.pp, plan.dp, plan.micro_batch, plan.vpp))
    sched, rc, sp, z = Schedule(int(plan.schedule)), Recompute(int(plan.recompute)), bool(plan.sequence_parallel), int(
        np.asarray(plan.zero_stage)
    )
    out: list[tuple[str, dict[str, object]]] = []
    if dp % 2 == 0:
        out += [(f"tp={tp * 2}, dp={dp // 2}", {"tp": tp * 2, "dp": dp // 2}),
                (f"pp={pp * 2}, dp={dp // 2}", {"pp": pp * 2, "dp": dp // 2})]
    if tp % 2 == 0:
        out.append((f"tp={tp // 2}, dp={dp * 2}", {"tp": tp // 2, "dp": dp * 2}))
        out.append((f"tp={tp // 2}, pp={pp * 2}", {"tp": tp // 2, "pp": pp * 2}))
    if pp % 2 == 0:
        out.append((f"pp={pp // 2}, dp={dp * 2}", {"pp": pp // 2, "dp": dp * 2}))
        out.append((f"tp={tp * 2}, pp={pp // 2}", {"tp": tp * 2, "pp": pp // 2}))
    out.append((f"micro-batch {mb * 2}", {"micro_batch": mb * 2}))
    if mb > 1:
        out.append((f"micro-batch {mb // 2}", {"micro_batch": mb // 2}))
    if pp > 1:
        for s in (Schedule.ONE_F_ONE_B, Schedule.ZB_H1, Schedule.GPIPE):
            if s != sched:
                out.append((f"schedule {s.label}", {"schedule": s, "vpp": 1}))
        for vv in (v * 2, v // 2 if v > 2 else 2) if sched == Schedule.INTERLEAVED else (2,):
            if vv != v or sched != Schedule.INTERLEAVED:
                out.append((f"interleaved, v={vv}", {"schedule": Schedule.INTERLEAVED, "vpp": vv}))
    for r in Recompute:
        if r != rc and not (r == Recompute.SELECTIVE and bool(plan.flash_attention)):
            out.append((f"recompute {r.label}", {"recompute": r}))
    if tp > 1:
        out.append((f"sequence parallel {'off' if sp else 'on'}", {"sequence_parallel": not sp}))
    if dp > 1:
        for zz in (z - 1, z + 1):
            if 0 <= zz <= 3:
                out.append((f"ZeRO-{zz}", {"zero_stage": zz}))
    seen, unique = set(), []
    for label, change in out:
        if label not in seen:
            seen.add(label)
            unique.append((label, change))
    return unique


def _in_space(search: PlanSearch, plan: Plan) -> bool:
    cols = search.columns
    gpus = int(np.asarray(plan.num_gpus))
    mask = cols["gpus"] == gpus
    for name in ("tp", "pp", "dp", "vpp", "micro_batch", "schedule", "recompute", "zero_stage"):
        mask &= cols[name] == int(np.asarray(getattr(plan, name)))
    mask &= cols["sequence_parallel"].astype(bool) == bool(plan.sequence_parallel)
    return bool(mask.any())


def alternatives(search: PlanSearch, index: int) -> list[Alternative]:
    """The best plan's neighbours, each evaluated, best first."""
    scn = search.scenario(index)
    best = estimate_training_step(scn)
    capacity = float(scn.cluster.gpu.memory_bytes) - search.space.memory_headroom_bytes
    base_score = _score(search, best)
    out = []
    for label, change in _variants(scn.plan, scn.model.layers):
        try:
            alt_scn = Scenario(scn.model, scn.cluster, scn.plan.with_(**change))
        except SpecError:
            continue
        est = estimate_training_step(alt_scn)
        fits = float(np.asarray(est.memory.total_bytes)) <= capacity
        rel = (base_score - _score(search, est)) / abs(base_score)
        reason = compare(best, est, capacity)
        out.append(Alternative(label, _value(est, "step_time_s"), rel, fits, _in_space(search, alt_scn.plan), reason))
    return sorted(out, key=lambda a: (not a.fits, a.relative))


def _score(search: PlanSearch, est: TrainingEstimate) -> float:
    if search.space.objective == "time":
        return -_value(est, "step_time_s")
    return _value(est, "tokens_per_s") / int(np.asarray(est.scenario.plan.num_gpus))


def describe(alt: Alternative) -> str:
    """'tp=16, dp=4: +38% (TP communication +3.1 s, the TP group crosses servers)'."""
    if alt.relative < 0:
        why = "does not fit" if not alt.fits else "outside the search space (your constraints)"
        return f"{alt.change}: {-alt.relative:.1%} better but {why}: {alt.reason}"
    verdict = f"+{alt.relative:.1%}" if alt.relative > 5e-4 else "the same"
    fits = "" if alt.fits else ", does not fit"
    outside = "" if alt.in_space else ", outside your constraints"
    return f"{alt.change}: {verdict}{fits}{outside} ({alt.reason})"
