"""Why the planner's best plan wins: its neighbours (one choice changed) and what each pays."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardwise.analyses.plan_excluded import FEWEST_WHOLE, excluded_by, searched_mask
from shardwise.analyses.plan_search import TIE_TOLERANCE
from shardwise.analyses.planner import PlanSearch
from shardwise.engines.result import TrainingEstimate, tp_comm_name
from shardwise.errors import SpecError
from shardwise.specs import Plan, Recompute, Scenario, Schedule

PARTS = {
    "compute": "compute",
    "tp_comm": "TP communication",
    "ep_comm": "EP all-to-all",
    "pp_p2p": "pipeline sends",
    "pp_bubble": "pipeline bubble",
    "dp_comm": "DP communication",
    "embedding_sync": "embedding sync (first and last stage)",
    "optimizer": "optimizer",
    "overhead": "fixed overheads",
}
MEMORY_PARTS = ("weights", "gradients", "optimizer", "activations", "buffers", "allocator", "reserved")


@dataclass(frozen=True)
class Alternative:
    """A plan next to the best one and what it costs (relative to the best)."""

    change: str  # what differs, e.g. "tp=16, dp=8"
    step_time_s: float
    relative: float  # (alternative - best) / best, in the search's objective (positive: worse)
    fits_in_memory: bool  # in the GPU's memory, as predict's and plan's rows (review 40 #7: was `fits`)
    # with --memory-headroom kept free too, the search's filter, as the rows' (review 42 F6: `fits_in_memory`
    # meant this here); a neighbour that fits only without the headroom says so in `reason`
    fits_with_headroom: bool
    reason: str
    excluded: str | None = None  # why the search did not consider it, if it did not
    # searched and better on the estimates printed, yet ranked below the best: why (`ranked_below`)
    ranked_below: str | None = None
    framework_cannot: bool = False  # `excluded` is what the stack cannot run, not a limit of the search

    @property
    def in_space(self) -> bool:
        """Allowed by the search's constraints."""
        return self.excluded is None


def _value(est: TrainingEstimate, name: str) -> float:
    return float(np.asarray(getattr(est, name)))


def _gb(x: float) -> str:
    return f"{x / 1e9:.0f} GB"


SIGNIFICANT = 0.15  # a part is named when it moves by this share of all the parts' movement
SAME_COST = "no measurable difference"  # `compare` where no part moves by SAME of the step
SPREAD_COST = "spread over several parts, none alone worth naming"  # the step moves, no one part does


def _part_change(name: str, delta_s: float, base_s: float) -> str:
    rel = delta_s / base_s if base_s > 0 else np.inf
    pct = f" ({rel:+.0%})" if 0.005 <= abs(rel) < 3 else ""
    return f"{name} {'+' if delta_s > 0 else '-'}{_seconds(abs(delta_s))}{pct}"


def compare(
    best: TrainingEstimate, other: TrainingEstimate, capacity_bytes: float, gpu_bytes: float | None = None
) -> str:
    """Where `other` loses (or gains) time or memory against `best`, in one phrase: every part of
    the step that moves by at least SIGNIFICANT of the total movement, costs first. `capacity_bytes`
    is what the search lets a plan use (the GPU's memory less the headroom); given the GPU's own
    `gpu_bytes`, a plan between the two is said to be within the headroom (it fits, as predict says)."""
    b_parts = {k: float(np.asarray(v)) for k, v in best.breakdown.as_dict().items()}
    o_parts = {k: float(np.asarray(v)) for k, v in other.breakdown.as_dict().items()}
    plans = (best.scenario.plan, other.scenario.plan)  # the context-parallel ring is in tp_comm
    names = {**PARTS, "tp_comm": tp_comm_name([p.tp for p in plans], [p.cp for p in plans])}
    delta = {k: o_parts.get(k, 0.0) - b_parts.get(k, 0.0) for k in PARTS}  # embedding_sync: predict's key
    moved = sum(abs(d) for d in delta.values())
    notes = []
    mem = float(np.asarray(other.memory.total_bytes))
    if gpu_bytes is not None and capacity_bytes < mem <= gpu_bytes:
        notes.append(
            f"within the memory headroom: needs {mem / 1e9:.1f} GB per GPU of {gpu_bytes / 1e9:.1f} GB, "
            f"{capacity_bytes / 1e9:.1f} GB usable ({(gpu_bytes - capacity_bytes) / 1e9:.1f} GB kept free, "
            "--memory-headroom)"
        )
    elif mem > capacity_bytes:
        b_mem, o_mem = best.memory.as_dict(), other.memory.as_dict()
        grow = {k: float(np.asarray(o_mem[k])) - float(np.asarray(b_mem[k])) for k in MEMORY_PARTS}
        part = max(grow, key=lambda k: grow[k])
        notes.append(f"needs {_gb(mem)} per GPU (> {_gb(capacity_bytes)}; {part} {grow[part] / 1e9:+.0f} GB)")
    # a part is named where it moves by SIGNIFICANT of the movement and by at least SAME of the best
    # step: below, its line's relative time prints 0.0% ("saves 1.42e-05 ns of pipeline bubble")
    floor_s = SAME * float(np.asarray(best.step_time_s))
    if moved > 0:
        least = max(SIGNIFICANT * moved, floor_s)
        costs = sorted((k for k in PARTS if delta[k] >= least), key=lambda k: -delta[k])
        gains = sorted((k for k in PARTS if -delta[k] >= least), key=lambda k: delta[k])
        for k in costs:
            phrase = _part_change(names[k], delta[k], b_parts[k])
            if k == "tp_comm" and int(np.asarray(other.scenario.plan.tp)) > int(other.scenario.cluster.gpus_per_node):
                phrase += ", the TP group crosses servers"
            notes.append(phrase)
        if gains:
            notes.append("saves " + ", ".join(f"{_seconds(-delta[k])} of {names[k]}" for k in gains))
    gpus = int(np.asarray(other.scenario.plan.num_gpus))
    if gpus != int(np.asarray(best.scenario.plan.num_gpus)):
        notes.append(f"on {gpus} GPUs")
    if notes:
        return "; ".join(notes)
    total_s = abs(float(np.asarray(other.step_time_s)) - float(np.asarray(best.step_time_s)))
    return SAME_COST if total_s < floor_s else SPREAD_COST


def _seconds(s: float) -> str:
    from shardwise.units import format_seconds

    return format_seconds(s)


def _variants(
    plan: Plan, layers: int, context_parallel: bool = False, server_ranks: int = 0
) -> list[tuple[str, dict[str, object]]]:
    """One or two choices of `plan` changed at a time (GPU count kept); cp only where the search
    has it (`context_parallel`); a hybrid shard group of `server_ranks` (a server's dp x cp ranks)."""
    tp, pp, dp, mb, v = (int(np.asarray(x)) for x in (plan.tp, plan.pp, plan.dp, plan.micro_batch, plan.vpp))
    sched, rc, sp, z = (
        Schedule(int(plan.schedule)),
        Recompute(int(plan.recompute)),
        bool(plan.sequence_parallel),
        int(np.asarray(plan.zero_stage)),
    )
    out: list[tuple[str, dict[str, object]]] = []
    if dp % 2 == 0:
        out += [
            (f"tp={tp * 2}, dp={dp // 2}", {"tp": tp * 2, "dp": dp // 2}),
            (f"pp={pp * 2}, dp={dp // 2}", {"pp": pp * 2, "dp": dp // 2}),
        ]
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
            out.append((f"recompute {r.label}", {"recompute": r, "recompute_layers": 0}))
    whole = int(np.asarray(plan.recompute_layers))
    if whole > 0 and rc != Recompute.FULL:  # a layer more or less of each chunk recomputed whole
        out += [(f"recompute the first {n} layers whole" if n else "no layer recomputed whole", {"recompute_layers": n})
                for n in (whole - 1, whole + 1)]  # fmt: skip
    if tp > 1:
        out.append((f"sequence parallel {'off' if sp else 'on'}", {"sequence_parallel": not sp}))
    ep, cp = int(np.asarray(plan.ep)), int(np.asarray(plan.cp))
    out += [(f"ep={e}", {"ep": e}) for e in (ep * 2, ep // 2) if e >= 1 and e != ep and plan.etp]
    if context_parallel:
        out += [(f"cp={cp * 2}, dp={dp // 2}", {"cp": cp * 2, "dp": dp // 2})] if dp % 2 == 0 else []
        out += [(f"cp={cp // 2}, dp={dp * 2}", {"cp": cp // 2, "dp": dp * 2})] if cp > 1 else []
    group = int(np.asarray(plan.shard_group))
    if dp > 1:
        for zz in (z - 1, z + 1):
            if 0 <= zz <= 3:
                out.append((f"ZeRO-{zz}", {"zero_stage": zz, **({"shard_group": 0} if zz == 0 else {})}))
    if group > 0:
        out.append(("sharded over every data-parallel rank", {"shard_group": 0}))
    elif z >= 1 and 2 <= server_ranks < dp * cp:
        out.append((f"hybrid sharding over {server_ranks} ranks (a server's)", {"shard_group": server_ranks}))
    seen, unique = set(), []
    for label, change in out:
        if label not in seen:
            seen.add(label)
            unique.append((label, change))
    return unique


def normalised(plan: Plan) -> Plan:
    """A plan as the search stores it: no ZeRO without data parallelism, no sequence parallelism
    without tensor parallelism, 1F1B without a pipeline."""
    changes: dict[str, object] = {}
    if int(np.asarray(plan.dp)) == 1 and int(np.asarray(plan.zero_stage)) != 0:
        changes["zero_stage"] = 0
    if int(np.asarray(plan.tp)) == 1 and bool(plan.sequence_parallel):
        changes["sequence_parallel"] = False
    if int(np.asarray(plan.pp)) == 1 and (int(plan.schedule) != int(Schedule.ONE_F_ONE_B) or int(plan.vpp) != 1):
        changes.update(schedule=Schedule.ONE_F_ONE_B, vpp=1)
    return plan.with_(**changes) if changes else plan


def stack_zero(search: PlanSearch, plan: Plan) -> int:
    """The ZeRO stage a neighbour takes where it raises dp x cp from 1 (the best plan's, stored as
    ZeRO-0, means nothing there): the stack's default (its preset's `zero_stage`, what predict
    prices), within what the search lets that plan run (--zero or the stack's `zero_stages`; ZeRO-1
    at most under a pipeline unless --zero-with-pp), else the nearest stage below it that it lets
    run (review 47 #3: a neighbour of a dp = 1 best plan was priced at ZeRO-0, its optimizer whole)."""
    from shardwise import presets
    from shardwise.analyses.search_space import pipeline_zero_stages, stack_of

    default = int(presets.framework(stack_of(search.space))["zero_stage"])
    space = search.space
    piped, pp = pipeline_zero_stages(space), int(np.asarray(plan.pp))
    allowed = [
        z
        for z in (space.zero_stage or (0, 1, 2, 3))
        if (space.zero_with_pipeline or pp == 1 or z <= 1) and (piped is None or pp == 1 or z in piped)
    ]
    below = [z for z in allowed if z <= default]
    return max(below) if below else min(allowed, default=0)


def stack_schedule(search: PlanSearch, plan: Plan) -> Schedule:
    """The schedule a neighbour takes where it starts a pipeline (the best plan's pp = 1 is stored as
    1F1B, meaning none): the stack's default under a pipeline (`framework_schedule`: MaxText's and
    Paxml's gpipe, else 1f1b), or the first schedule the search runs there where that is not one."""
    from shardwise.analyses.search_space import stack_of
    from shardwise.presets.stack_defaults import framework_schedule

    label = framework_schedule(stack_of(search.space), int(np.asarray(plan.pp))) or "1f1b"
    allowed = [s for s in (search.space.schedule or ()) if s != "interleaved"]
    if allowed and label not in allowed:
        label = allowed[0]
    return next(s for s in Schedule if s.label == label)


def replicas(plan: Plan) -> int:
    """The data-parallel ranks that ZeRO shards over (dp x cp)."""
    return int(np.asarray(plan.dp)) * int(np.asarray(plan.cp))


def with_pp(change: dict[str, object], plan: Plan, model: object = None, rule: str = "even") -> dict[str, object]:
    """A neighbour with another pp splits its layers automatically (the best plan's first/last
    counts belong to its own pp); under a stack with its own split `rule` (`plan_space.split_options`)
    a neighbour with another pp or virtual stages takes the split the stack runs there: its own at
    one model chunk, the automatic one interleaved."""
    out = change
    if "pp" in change and change["pp"] != plan.pp:
        out = {**change, "first_stage_layers": 0, "last_stage_layers": 0}
    pp, v = int(np.asarray(out.get("pp", plan.pp))), int(np.asarray(out.get("vpp", plan.vpp)))
    if rule == "even" or model is None or (pp, v) == (int(np.asarray(plan.pp)), int(np.asarray(plan.vpp))):
        return out
    from shardwise.analyses.plan_space import stack_counts

    counts = stack_counts(rule, model, pp) if v == 1 else None  # type: ignore[arg-type]
    return {**out, "first_stage_layers": counts[0] if counts else 0, "last_stage_layers": counts[-1] if counts else 0}


def _variants_for_gpus(search: PlanSearch, plan: Plan) -> list[tuple[str, dict[str, object], int]]:
    """Twice or half the data parallelism on as many more or fewer GPUs (throughput per GPU only)."""
    if search.space.objective == "time":
        return []
    dp, n, mb = (int(np.asarray(getattr(plan, k))) for k in ("dp", "num_gpus", "micro_batch"))
    counts = set(search.columns["gpus"].tolist())
    out: list[tuple[str, dict[str, object], int]] = []
    if n * 2 in counts and search.global_batch % (dp * 2 * mb) == 0:
        out.append((f"dp={dp * 2} on {n * 2} GPUs", {"dp": dp * 2}, n * 2))
    if dp % 2 == 0 and n // 2 in counts:
        out.append((f"dp={dp // 2} on {n // 2} GPUs", {"dp": dp // 2}, n // 2))
    return out


def alternatives(search: PlanSearch, index: int) -> list[Alternative]:
    """The best plan's neighbours, each evaluated, best first."""
    from shardwise.analyses.plan_runnable import stack_cannot_run
    from shardwise.analyses.plan_space import stack_split_rule
    from shardwise.analyses.planner import cluster_for, confirmed_estimate

    scn = search.scenario(index)
    best = confirmed_estimate(scn)
    gpu_bytes = float(scn.cluster.gpu.memory_bytes)
    capacity = gpu_bytes - search.space.memory_headroom_bytes
    base_score = _score(search, best)
    gpus = int(np.asarray(scn.plan.num_gpus))
    searched_cp = bool(np.any(search.columns["cp"] > 1)) or search.space.cp is not None
    server_ranks = int(np.asarray(scn.cluster.gpus_per_node)) // int(np.asarray(scn.plan.tp))
    variants = [
        (label, change, gpus) for label, change in _variants(scn.plan, scn.model.layers, searched_cp, server_ranks)
    ]
    rule = stack_split_rule(search.space)
    # the search's overlap of pipeline sends (None: the interleaved schedule's alone, `Plan.overlap_p2p`),
    # not the best plan's resolved value: a neighbour with another schedule is the plan the search priced
    overlap = search.space.execution.get("overlap_p2p")
    out = []
    for label, change, n in variants + _variants_for_gpus(search, scn.plan):
        try:
            plan = normalised(scn.plan.with_(**with_pp(change, scn.plan, scn.model, rule))).with_(overlap_p2p=overlap)
            if replicas(scn.plan) == 1 < replicas(plan) and "zero_stage" not in change:
                plan = plan.with_(zero_stage=stack_zero(search, plan))
            if int(np.asarray(scn.plan.pp)) == 1 < int(np.asarray(plan.pp)) and "schedule" not in change:
                plan = plan.with_(schedule=stack_schedule(search, plan))
            est = confirmed_estimate(Scenario(scn.model, cluster_for(search.cluster, n), plan))
        except SpecError:  # not a valid layout (a mixture of experts whose ep no longer folds, ...)
            continue
        mem = float(np.asarray(est.memory.total_bytes))
        fits, usable = mem <= gpu_bytes, mem <= capacity  # predict's test; the search's (the headroom kept)
        rel = (base_score - _score(search, est)) / abs(base_score)
        excluded, below = excluded_by(search, plan), None
        if excluded == FEWEST_WHOLE and not usable:  # review 34: said of ZeRO-0, micro-batch 2, gpipe that do not fit
            excluded = None
        if excluded is None and usable and rel < 0:  # searched and better here, yet ranked below: say why
            below = ranked_below(search, index, plan, rel, _value(est, "step_time_s") > _value(best, "step_time_s"))
        cannot, why = stack_cannot_run(search, plan) if excluded else None, compare(best, est, capacity, gpu_bytes)
        step = _value(est, "step_time_s")
        out.append(Alternative(label, step, rel, fits, usable, why, cannot or excluded, below, bool(cannot)))
    return sorted(out, key=lambda a: (not a.fits_with_headroom, a.relative))


SAME = 5e-4  # a relative difference that prints as 0.0%: `describe` calls the neighbour the same
TIE_MARGIN = TIE_TOLERANCE / (1 - TIE_TOLERANCE)  # a better rate ties the best's when best >= it x (1 - tolerance)


def ranked_below(search: PlanSearch, index: int, plan: Plan, relative: float, slower: bool) -> str | None:
    """Why the search ranked `plan` (searched, fitting, `relative` better than the best plan `index` on
    the estimates the why prints, `slower` a step) below the best: the tie rule of `PlanSearch.ranked`
    only where the printed rates are within its tolerance, else the search's own figure, which may be
    another estimate (the closed form of a plan the simulator did not re-time, `plan_confirm`). None
    where the printed difference rounds to nothing (`describe` calls it the same)."""
    from shardwise.analyses.plan_confirm import simulable

    tie = f"a tie (rates within {TIE_TOLERANCE:.1%} of the best rank by step time)"
    rate = search.space.objective != "time"
    if rate and slower and -relative <= TIE_MARGIN:
        return tie
    if -relative < SAME:
        return None
    mask = searched_mask(search, plan)
    split = (search.columns["first_stage_layers"] == int(np.asarray(plan.first_stage_layers))) & (
        search.columns["last_stage_layers"] == int(np.asarray(plan.last_stage_layers))
    )
    found = np.flatnonzero(mask & split) if (mask & split).any() else np.flatnonzero(mask)
    score = search.score
    j = int(found[np.argmax(score[found])])
    if not np.isfinite(score[j]):
        return "the search's memory estimate drops it"
    searched_rel = (score[index] - score[j]) / abs(score[index])  # positive: worse, as `Alternative.relative`
    steps = [search.row(k)["step_time_s"] for k in (index, j)]
    simulated = search.simulated is not None and bool(search.simulated[j])
    closed = ""
    if simulable(plan) and not simulated:  # the search ranked it on the closed form, the why prints the simulator's
        closed = " (the closed form: the simulator re-times the plans near the top)"
    if rate and steps[1] > steps[0] and -searched_rel <= TIE_MARGIN:
        return f"{tie} on the search's estimate, {-searched_rel:.1%} better there{closed}"
    if searched_rel <= 0:
        return "ranked below on an equal estimate (the search's order)"
    worse = "fewer tokens/s per GPU" if rate else "slower"
    return f"the search's estimate has it {searched_rel:.1%} {worse}{closed}"


def _score(search: PlanSearch, est: TrainingEstimate) -> float:
    if search.space.objective == "time":
        return -_value(est, "step_time_s")
    return _value(est, "tokens_per_s") / int(np.asarray(est.scenario.plan.num_gpus))


def describe(alt: Alternative) -> str:
    """'tp=16, dp=4: +38%, TP across servers is off (TP communication +3.1 s, the TP group crosses servers)'."""
    note = alt.excluded or alt.ranked_below
    outside = f", {note}" if note else ""
    reason = "" if alt.reason == SAME_COST else f" ({alt.reason})"
    if alt.relative < -SAME:  # what the stack lacks (review 34: ZeRO-1 under torchtitan) before the memory
        memory = [] if alt.fits_in_memory else ["does not fit"]  # within the headroom: `reason` says so
        if alt.fits_in_memory and not alt.fits_with_headroom and not alt.excluded:
            memory = ["the search drops it"]
        why = " and ".join([*([alt.excluded] if alt.excluded else []), *memory])
        return f"{alt.change}: {-alt.relative:.1%} better but {why or note or 'outside the search'}: {alt.reason}"
    verdict = f"+{alt.relative:.1%}" if alt.relative > SAME else "the same"
    fits = "" if alt.fits_in_memory else ", does not fit"
    return f"{alt.change}: {verdict}{fits}{outside}{reason}"
