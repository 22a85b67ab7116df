"""Which of the best plan's neighbours the framework cannot run at all (`stack_cannot_run`), as
against those a limit of the search left out that a flag lifts: `plan` lists the first apart, under
"not runnable on <framework>" (review 41), so a planner does not read them as options.
"""

from __future__ import annotations

import numpy as np

from shardwise.analyses.plan_search import PlanSearch
from shardwise.specs import Plan


def stack_cannot_run(search: PlanSearch, plan: Plan) -> str | None:
    """Why the framework cannot run `plan` at all, in words (None where it can): an axis, ZeRO stage
    or schedule outside its preset (`presets.stack_defaults.not_in_stack`), hybrid sharding or layers
    recomputed whole where it has none; as against a limit of the search that a flag lifts."""
    from shardwise.analyses.search_space import stack_of
    from shardwise.presets.stack_defaults import not_in_stack

    sp, z = search.space, int(np.asarray(plan.zero_stage))
    shown = str(sp.execution.get("framework") or "")
    stack = not_in_stack(stack_of(sp), plan, searched=True, shown_as=shown)
    if stack:
        return stack
    blocks, hybrid = sp.features()
    if int(np.asarray(plan.shard_group)) > 0 and sp.shard_group is None and z not in hybrid:
        return f"{shown or stack_of(sp)} does not shard hybrid at ZeRO-{z}"
    if int(np.asarray(plan.recompute_layers)) > 0 and not blocks and sp.recompute_layers is None:
        return f"{shown or stack_of(sp)} does not recompute some layers whole"
    return None
