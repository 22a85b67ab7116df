"""Whether the planner's search considered a plan, and if not why (`excluded_by`): the search's
limits (--max-tp, --tp-across-nodes, ...), the stack's axes, and the values a flag fixed. Split from
`plan_explain` (review 42 F10: the module reached 401 lines); `plan_explain` re-exports these names."""

from __future__ import annotations

import numpy as np

from shardwise.analyses.planner import PlanSearch
from shardwise.specs import Plan


def searched_mask(search: PlanSearch, plan: Plan) -> np.ndarray:
    """Which of the search's plans are `plan` (a mask; its layer split aside, and recomputing no layer
    whole matching the search's fewest that fit)."""
    cols = search.columns
    mask = cols["gpus"] == int(np.asarray(plan.num_gpus))
    for name in ("tp", "pp", "dp", "vpp", "micro_batch", "schedule", "recompute", "zero_stage", "ep", "cp"):
        mask &= cols[name] == int(np.asarray(getattr(plan, name)))
    mask &= cols["shard_group"] == int(np.asarray(plan.shard_group))
    whole = int(np.asarray(plan.recompute_layers))  # a plan over the memory was searched as its fewest that fit
    mask &= (cols["recompute_layers"] == whole) | (whole == 0)
    return mask & (cols["sequence_parallel"].astype(bool) == bool(plan.sequence_parallel))


# why a searched plan with layers recomputed whole is not in the table: said of a neighbour that fits
# (one that does not would have had more layers recomputed, or none that fit: `alternatives`)
FEWEST_WHOLE = "the search takes the fewest layers recomputed whole that fit"


def excluded_by(search: PlanSearch, plan: Plan) -> str | None:
    """Why the search did not consider `plan` (None if it did)."""
    if searched_mask(search, plan).any():
        return None
    sp = search.space
    tp, pp, mb, v, z = (int(np.asarray(getattr(plan, k))) for k in ("tp", "pp", "micro_batch", "vpp", "zero_stage"))
    if sp.tp_within_node and tp > int(search.cluster.gpus_per_node) and sp.tp is None:
        return "TP across servers is off (--tp-across-nodes)"
    if sp.max_tp is not None and tp > sp.max_tp:
        return f"beyond --max-tp {sp.max_tp}"
    if sp.micro_batch is None and mb > sp.max_micro_batch:
        return f"beyond the micro-batch limit {sp.max_micro_batch} (--max-micro-batch)"
    if sp.vpp is None and v > sp.max_vpp:
        return f"beyond the virtual-stage limit {sp.max_vpp} (--max-vpp)"
    if sp.vpp is None and v > 1 and pp > 1:  # the search interleaves where v divides a stage's layers
        from shardwise.analyses.plan_space import stage_splits

        units = [u for _, _, u in stage_splits(int(search.model.layers), pp) if u > 0]
        if not any(u % v == 0 for u in units):
            held = f"a stage's {units[0]} layers" if units else "the stages' uneven layers"
            return f"v={v} does not divide {held} (searched where it does; --vpp {v} allows uneven chunks)"
    from shardwise.analyses.search_space import stack_of
    from shardwise.presets.stack_defaults import missing_axes, not_in_stack

    stack, shown = stack_of(sp), str(sp.execution.get("framework") or "")
    if missing_axes(stack, plan):  # the axes the stack lacks before the search's own limits
        return not_in_stack(stack, plan, searched=True, shown_as=shown)
    from shardwise.analyses.search_space import pipeline_zero_stages

    piped = pipeline_zero_stages(sp)
    if pp > 1 and piped is not None and z not in piped:  # the stack's own limit, not the search's
        return not_in_stack(stack, plan, searched=True, shown_as=shown)
    if pp > 1 and z >= 2 and not sp.zero_with_pipeline:
        return "ZeRO-2/3 with a pipeline is off (--zero-with-pp)"
    cannot = not_in_stack(stack, plan, searched=True, shown_as=shown)
    if cannot:  # what the stack cannot run before how the search narrows what it can (zb-h1 under Megatron)
        return cannot
    blocks, hybrid = sp.features()
    if int(np.asarray(plan.shard_group)) > 0 and sp.shard_group is None and z not in hybrid:
        return f"{shown or stack} does not shard hybrid at ZeRO-{z}"
    if int(np.asarray(plan.recompute_layers)) > 0 and not blocks and sp.recompute_layers is None:
        return f"{shown or stack} does not recompute some layers whole"
    if int(np.asarray(plan.recompute_layers)) > 0 and blocks:
        return FEWEST_WHOLE
    outside = _outside_values(sp, plan)
    reason = f"outside the values searched ({outside})" if outside else "not among the searched plans"
    return reason


# a plan field and the `plan` flag (or the framework's own limit) that fixes its searched values
_VALUE_FLAGS = {
    **{k: f"--{k}" for k in ("tp", "pp", "dp", "vpp", "schedule", "recompute", "ep", "cp")},
    **{"micro_batch": "--micro-batch", "sequence_parallel": "--sequence-parallel", "zero_stage": "--zero"},
    "shard_group": "--shard-group",
}


def _outside_values(sp: object, plan: Plan) -> str:
    """The flags whose searched values leave `plan` out ('--tp, --schedule'; set by the user or by the
    framework's limits), '' where none does."""
    from shardwise.analyses.search_space import RECOMPUTE_NAMES, SCHEDULE_NAMES

    out = []
    for name, flag in _VALUE_FLAGS.items():
        allowed = getattr(sp, name)
        if allowed is None or (name == "schedule" and int(np.asarray(plan.pp)) == 1):  # no pipeline, no schedule
            continue
        value: object = int(np.asarray(getattr(plan, name)))
        if name == "schedule":
            value = SCHEDULE_NAMES[int(value)]  # type: ignore[call-overload]
        elif name == "recompute":
            value = RECOMPUTE_NAMES[int(value)]  # type: ignore[call-overload]
        elif name == "sequence_parallel":
            value = bool(value)
        if value not in allowed:
            out.append(flag)
    return ", ".join(out)
