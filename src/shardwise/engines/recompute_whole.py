"""What recomputing some layers of each stage whole (`Plan.recompute_layers`, Megatron-LM's
--recompute-method block) adds to a training step: a layer's cost under full recomputation less
its cost under the plan's own, on the stages' recomputed layers (`specs.stages.recomputed_split`)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from shardwise.arrays import any_true, as_array
from shardwise.engines.context_parallel import CpComm, cp_step_s, micro_batch_view
from shardwise.engines.costs import FIELDS, StageCost, layer_cost
from shardwise.engines.stage_assembly import Stages, stages
from shardwise.engines.tp_overlap import TpComm, tp_comm
from shardwise.physics.collectives import Fabric
from shardwise.specs import Recompute, Scenario
from shardwise.specs._checks import Number
from shardwise.specs.stages import StageSplit, recomputed_split


def recomputed_layer_extra(
    scn: Scenario, comm: TpComm, kv_len: Number, cp_step: Number | CpComm = 0.0
) -> StageCost | None:
    """What recomputing a training layer whole (`Plan.recompute_layers`) adds to it: its cost under
    full recomputation (the forward again, its TP collectives and kernels, before the backward)
    less its cost under the plan's recomputation (0 where that is already full). None where no
    plan recomputes whole layers. `scn` is one CP rank's view (`context_parallel`), attending to
    `kv_len` tokens (the whole sequence)."""
    plan = scn.plan
    if not any_true(as_array(plan.recompute_layers) > 0):
        return None
    base, _ = layer_cost(scn, comm, kv_len=kv_len, cp=plan.cp, cp_step=cp_step)
    whole, _ = layer_cost(scn, comm, kv_len=kv_len, cp=plan.cp, cp_step=cp_step, recompute=Recompute.FULL)
    return StageCost(*(getattr(whole, f) - getattr(base, f) for f in FIELDS))


def whole_layer_extra(scn: Scenario) -> StageCost:
    """`recomputed_layer_extra` for every configuration of `scn` (the whole scenario, placed as
    the step places it), whether or not it recomputes layers whole."""
    from shardwise.engines.distinct import flat_count, rows_of
    from shardwise.physics.topology import placement

    # many plans: each twice in one scenario, priced once under its own recomputation and once
    # under full (one layer's pricing over 2n plans instead of two over n: the same numbers)
    n = flat_count(scn) or 0
    twice = rows_of(scn, np.tile(np.arange(n), 2)) if n > 1 else None
    own = scn if twice is None else twice
    fabric = Fabric.of(own.cluster)
    place = placement(own.plan, own.cluster.gpus_per_node, experts=own.model.is_moe)
    local = micro_batch_view(own)  # as the layers it recomputes are priced
    comm, cp_step = tp_comm(local, fabric, place["tp"]), cp_step_s(own, fabric, place)
    plan = local.plan
    if twice is not None:
        rc = np.concatenate([np.broadcast_to(np.asarray(scn.plan.recompute), (n,)), np.full(n, int(Recompute.FULL))])
        both, _ = layer_cost(local, comm, kv_len=own.model.seq_len, cp=plan.cp, cp_step=cp_step, recompute=rc)

        def extra(f: str) -> Number:
            value = getattr(both, f)
            if np.ndim(value) == 0:
                return value - value
            return value[n:] - value[:n]

        return StageCost(*(extra(f) for f in FIELDS))
    base, _ = layer_cost(local, comm, kv_len=scn.model.seq_len, cp=plan.cp, cp_step=cp_step)
    whole, _ = layer_cost(local, comm, kv_len=scn.model.seq_len, cp=plan.cp, cp_step=cp_step, recompute=Recompute.FULL)
    return StageCost(*(getattr(whole, f) - getattr(base, f) for f in FIELDS))


def recomputed_stages(
    scn: Scenario, split: StageSplit, price: Callable[[Scenario], StageCost] | None = None
) -> Stages | None:
    """What the layers recomputed whole (`Plan.recompute_layers`, `specs.stages.recomputed_split`)
    add to each stage's micro-batch (None where no plan has them). Their count reads vpp, which
    the per-micro-batch stage costs do not (`engines.training_stages.PER_MICRO_BATCH_IGNORES`): the step
    adds them to those, as it adds FSDP2's copies."""
    plan = scn.plan
    if not any_true(as_array(plan.recompute_layers) > 0):
        return None
    # `price`: `whole_layer_extra`, or the step's way of pricing it once per group of plans that
    # share their per-micro-batch costs (`engines.training_layout`)
    extra = (price or whole_layer_extra)(scn)
    nil = StageCost(0.0, 0.0, 0.0, 0.0)
    return stages(recomputed_split(split, plan.vpp, plan.recompute_layers), extra, nil, nil)  # type: ignore[arg-type]
