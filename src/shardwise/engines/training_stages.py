"""One micro-batch's costs on each pipeline stage and its sends between stages: what the closed
form (`engines.training`) and the simulator (`engines.simulated`) both price per micro-batch,
kept per configuration under the plan fields they read (all but PER_MICRO_BATCH_IGNORES)."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from typing import NamedTuple

from shardwise.arrays import any_true, as_array, as_bool, as_float, ifelse, maximum
from shardwise.engines.context_parallel import cp_step_s, micro_batch_view
from shardwise.engines.costs import StageCost, layer_cost
from shardwise.engines.moe import moe_layers
from shardwise.engines.mtp import with_mtp
from shardwise.engines.stage_assembly import Stages, stages
from shardwise.engines.stage_ends import embedding_cost, head_cost
from shardwise.engines.stage_sends import stage_send_time_s
from shardwise.engines.tp_overlap import tp_comm
from shardwise.engines.training_memory import fp8_input_bytes
from shardwise.errors import SpecError
from shardwise.physics import memory as mem
from shardwise.physics import offload
from shardwise.physics.collectives import Fabric
from shardwise.physics.hf_gpt2 import gelu_new_saved_elements
from shardwise.physics.microbatch import pipeline_transfers
from shardwise.physics.remat_partition import kept_fraction
from shardwise.physics.topology import placement
from shardwise.specs import Plan, Scenario
from shardwise.specs._checks import Number
from shardwise.specs.memo import Memo
from shardwise.specs.stages import StageSplit

# After every blocking batched send/receive Megatron-LM calls torch.cuda.synchronize()
# (megatron/core/pipeline_parallel/p2p_communication.py, "to protect against race condition when
# using batch_isend_irecv"): the GPU's queue runs dry and waits for the host to launch the next
# kernel, about one PyTorch collective call's host latency (the 20 us the link presets use).
PIPELINE_SYNC_S = 20e-6


def stage_sends_per_micro_batch_s(scn: Scenario, send_s: Number) -> Number:
    """What pipeline sends add to one stage's micro-batch: 2 v transfers (activations forward,
    gradients backward, per model chunk; 4 v where blocking sends and receives run one after
    another, `physics.microbatch.pipeline_transfers`) and, when blocking, a device sync after
    each batched send/receive."""
    plan = scn.plan
    v = as_float(plan.vpp)
    blocking = ~as_bool(plan.overlap_p2p)
    sync = ifelse(as_bool(plan.pipeline_sync), PIPELINE_SYNC_S, 0.0)
    transfers = pipeline_transfers(plan.p2p_serial, blocking)
    return ifelse(as_array(plan.pp) > 1, v * (transfers * send_s + 2 * ifelse(blocking, sync, 0.0)), 0.0)


# Fields a micro-batch's stage costs do not read (`micro_batch_stages`): plans that differ only in
# these share them, so the planner prices them once per group (`engines.distinct.evaluate_grouped`).
PER_MICRO_BATCH_IGNORES = frozenset(
    ("plan", name)
    for name in (
        "dp",
        "vpp",
        "schedule",
        "zero_stage",
        "shard_group",
        "recompute_layers",  # what layers recomputed whole add is priced apart (`recompute_whole.recomputed_stages`)
        "global_batch",
        "overlap_grad_reduce",
        "overlap_param_gather",
        "zero1_grad_all_reduce",
        "aligned_chunk_sync",  # read only by the data-parallel exposure (`DpComm.exposed_s`)
        "scan_unpipelined",  # read only by the data-parallel exposure (`dp_step.scan_edges_s`)
    )
) | {("cluster", "nodes")}


_STAGE_FIELDS = tuple(f.name for f in dataclasses.fields(Plan) if ("plan", f.name) not in PER_MICRO_BATCH_IGNORES)


def stage_key(scn: Scenario) -> tuple[object, ...]:
    """What one configuration's per-micro-batch stage costs read: the model, the cluster and
    every plan field but PER_MICRO_BATCH_IGNORES (unhashable for an array-valued plan)."""
    plan = scn.plan
    return (scn.model, scn.cluster, *(getattr(plan, name) for name in _STAGE_FIELDS))


class StageSends(NamedTuple):
    """One pipeline send of a micro-batch's activations between neighbouring stages in one node
    and across nodes (`engines.stage_sends.stage_send_time_s`)."""

    within_s: Number
    across_s: Number


def micro_batch_stages(
    scn: Scenario, fabric: Fabric | None = None, place: dict[str, Number] | None = None, split: StageSplit | None = None
) -> tuple[Stages, StageSends]:
    """One micro-batch's costs on the first, fullest middle and last stage (and all middle stages
    together) and a pipeline send: its layers (with their TP and CP communication), the
    embedding and the output layer. For a dense model they read none of PER_MICRO_BATCH_IGNORES."""
    model, cluster, plan = scn.model, scn.cluster, scn.plan
    fabric = Fabric.of(cluster) if fabric is None else fabric
    place = placement(plan, cluster.gpus_per_node, experts=model.is_moe) if place is None else place
    split = scn.split if split is None else split
    local = micro_batch_view(scn)  # one CP rank's tokens (the scenario itself without CP)
    comm = tp_comm(local, fabric, place["tp"])
    cp_step = cp_step_s(scn, fabric, place)
    layer, _ = layer_cost(local, comm, kv_len=model.seq_len, cp=plan.cp, cp_step=cp_step)
    emb = embedding_cost(local, comm)
    head = head_cost(local, comm)
    moe = moe_layers(local, comm, fabric, place, split, model.seq_len, plan.cp, cp_step, training=True)
    head = with_mtp(head, local, comm, layer if moe is None else moe[0])  # multi-token prediction, last stage
    sends = StageSends(stage_send_time_s(local, fabric, comm, False), stage_send_time_s(local, fabric, comm, True))
    out = stages(split, layer, emb, head, moe)
    if any_true(as_array(plan.offload_activation_layers) > 0):
        out = with_offload(out, local, split, layer, moe)
    return out, sends


def with_offload(
    out: Stages, local: Scenario, split: StageSplit, layer: StageCost, moe: tuple[StageCost, StageSplit] | None
) -> Stages:
    """`out` with each stage's activation copies to and from host memory that its layers' compute
    does not hide (`offload_times`; `local`: one CP rank's scenario)."""
    n_moe = moe[1] if moe is not None else StageSplit(split.pp, 0.0, 0.0, 0.0, 0.0, 0.0)
    moe_layer = moe[0] if moe is not None else None

    def stage(cost: StageCost, layers: Number, moe_layers: Number) -> StageCost:
        forward_s, backward_s = offload_times(local, layers, layer, moe_layers, moe_layer)
        return replace(cost, offload_forward_s=forward_s, offload_backward_s=backward_s)

    return Stages(
        stage(out.first, split.first, n_moe.first),
        stage(out.middle, split.middle_max, n_moe.middle_max),
        stage(out.last, split.last, n_moe.last),
        stage(out.middle_sum, split.middle_total, n_moe.middle_total),
    )


def offload_times(
    local: Scenario, layers: Number, layer: StageCost, moe_layers: Number = 0.0, moe_layer: StageCost | None = None
) -> tuple[Number, Number]:
    """(forward, backward) seconds per micro-batch that a stage of `layers` layers (`moe_layers`
    of them `moe_layer`, counted at the stage's mean layer time) spends on activation copies its
    compute does not hide (`physics.offload`); `local`: one CP rank's scenario."""
    model, plan, gpu = local.model, local.plan, local.cluster.gpu
    if any_true((as_array(plan.offload_activation_layers) > 0) & (as_array(gpu.host_link_bytes_per_s) <= 0)):
        raise SpecError(
            f"gpu {gpu.name!r}: host_link is not given, so offload_activation_layers cannot be priced; give the "
            "GPU's copy rate to host memory (e.g. host_link: 55GB/s) in a GPU YAML file"
        )
    act = mem.layer_activation_bytes(
        model,
        plan.micro_batch,
        plan.tp,
        plan.sequence_parallel,
        plan.recompute,
        plan.flash_attention,
        plan.bytes_per_element,
        None,
        plan.selective_policy,
        mem.stack_memory(plan.memory_stack_key).extra_saved_elements(model)
        + gelu_new_saved_elements(model, None, plan.hf_gpt2_ops),
        plan.recompute_modules,
        fp8_input_bytes(plan),
        mem.stack_memory(plan.memory_stack_key).kept_hidden(model) * kept_fraction(plan.tp, plan.partition_activations),
    )
    c, n = offload.copy_s(act, gpu.host_link_bytes_per_s), plan.offload_activation_layers
    t_f, t_b = layer.forward_s, layer.backward_s
    if moe_layer is not None:  # the stage's mean layer
        share = moe_layers / maximum(as_float(layers), 1.0)
        t_f, t_b = t_f + share * (moe_layer.forward_s - t_f), t_b + share * (moe_layer.backward_s - t_b)
    return offload.exposed_copy_s(layers, n, c, t_f), offload.exposed_copy_s(layers, n, c, t_b)


# One configuration's per-micro-batch stage costs (`specs.memo`), which plans that differ only in
# PER_MICRO_BATCH_IGNORES share.
STAGES = Memo("per-micro-batch stage costs")
