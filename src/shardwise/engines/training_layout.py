"""What a training step computes without reading the global batch (`Layout`): the stage costs
per micro-batch with their sends, the pipeline's per-stage times, the parameters, the data-parallel
collectives' prices and the optimizer step, kept per layout so that a plan asked for at another
global batch prices only the pipeline's makespan, the data-parallel exposure and the memory
(`engines.training.estimate_each_training_step`); the step's memory kept per layout and
micro-batches in flight."""

from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass
from functools import reduce
from types import MappingProxyType
from typing import ClassVar

import numpy as np

from shardwise.arrays import any_true, as_array, as_bool, as_float, ifelse, maximum, one_value, plus, where
from shardwise.engines.costs import FIELDS, StageCost, add_costs
from shardwise.engines.data_parallel import (
    COLLECTIVE_READS,
    StagePrices,
    stage_collective_prices,
    zero_collectives,
)
from shardwise.engines.distinct import evaluate_grouped, rows_of
from shardwise.engines.dp_step import data_parallel_exposed_s
from shardwise.engines.fsdp2_copies import sharding_copies, step_copies_s
from shardwise.engines.moe import model_moe_split, stage_expert_params, stage_params
from shardwise.engines.recompute_whole import recomputed_stages, whole_layer_extra
from shardwise.engines.stage_assembly import Stages, stages
from shardwise.engines.training_stages import (
    PER_MICRO_BATCH_IGNORES,
    STAGES,
    micro_batch_stages,
    stage_key,
    stage_sends_per_micro_batch_s,
)
from shardwise.errors import SpecError
from shardwise.physics import fp8_recipes, offload
from shardwise.physics.collectives import Fabric
from shardwise.physics.compute import cast_bytes_per_element, memory_s
from shardwise.physics.lora import trainable_params
from shardwise.physics.memory import grad_bytes_per_param, weight_bytes_per_param
from shardwise.physics.microbatch import handshake_shares
from shardwise.physics.topology import placement
from shardwise.specs import Model, Plan, Scenario, Schedule
from shardwise.specs._checks import Number
from shardwise.specs.hardware import Gpu, is_fp8, is_nvfp4
from shardwise.specs.memo import Memo
from shardwise.specs.stages import StageSplit

Triple = tuple[Number, Number, Number]  # first, fullest middle and last stage

# Megatron-LM's fp16/bf16 optimizer (megatron/core/optimizer/optimizer.py,
# `Float16OptimizerWithFloat16Params`), bytes per parameter: copy 16-bit grads to fp32 (2 + 4),
# unscale and inf-check (4), gradient norm (4), fused Adam (read p, m, v, g: 16; write p, m, v: 12),
# copy fp32 weights back to 16-bit (4 + 2). 48 bytes per parameter at HBM speed.
OPTIMIZER_TRAFFIC_BYTES_PER_PARAM = 48.0
# Kernel launches charged to that optimizer step: a project estimate (its passes run as a few
# multi-tensor kernels, Apex/Transformer Engine `multi_tensor_apply`), not a count.
OPTIMIZER_KERNELS = 4
# Of those bytes, what a step's gradient passes move per parameter where they run over every local
# gradient under ZeRO-1, not the rank's shard (`Plan.zero1_grad_all_reduce`, nanotron): its
# clip_grad_norm reads every fp32 gradient buffer for the per-tensor norms ("In case of FP32 Grad
# Accum, We need to clip all fp32 grads", 4 B) and scales each in place (mul_, 4 + 4), and
# FP32GradientAccumulator.zero_grad zeroes the whole contiguous fp32 buffer (4)
# (huggingface/nanotron src/nanotron/optim/clip_grads.py, optim/gradient_accumulator.py, 0e0a27ea).
# Unit: bytes per parameter; 16 of the 48 (the Adam update and the copy back stay on the shard).
UNSHARDED_GRAD_PASS_BYTES = 16.0


@dataclass(frozen=True)
class Layout:
    """What `estimate_each_training_step` computes without reading the global batch. Over many
    plans priced per group (`engines.distinct.evaluate_grouped`), each field is gathered back
    when first read: the step never reads the diagnostics' fields, nor the memory's unless asked."""

    ELEMENTWISE_PROPERTIES: ClassVar[bool] = True  # (no properties: fields gathered when read)

    fabric: Fabric
    place: dict[str, Number]
    p: Number
    v: Number
    split: StageSplit
    moe_split: StageSplit | None
    first: StageCost
    middle: StageCost
    last: StageCost
    extra: Stages | None
    c_first: Number
    c_mid: Number
    c_last: Number
    c_mid_sum: Number
    f_mid_sum: Number  # the middle stages' forward passes with half their sends and overheads (`pipeline_1f1b`)
    v_whole: Number
    zb: Number
    w_stage: Number | None
    p2p: Number
    overlap: Number
    mb_over: Number
    hand_end: Number  # the stack's host work around a first or last stage's sends (nanotron's handshakes)
    hand_mid: Number  # ... and a middle stage's
    params: Triple
    expert_params: Triple
    trained: Triple
    prices: StagePrices
    optimizer_s: Number
    dp: tuple[Number, Number] | None  # the data-parallel exposure where it reads no batch (ZeRO-0/1)


# Every plan field but the global batch (the only one that sets the number of micro-batches).
_LAYOUT_FIELDS = operator.attrgetter(*(f.name for f in dataclasses.fields(Plan) if f.name != "global_batch"))
LAYOUTS = Memo("training layouts")


def layout_key(scn: Scenario) -> tuple[object, ...]:
    """What `_layout_terms` reads: the model, the cluster and every plan field but the global
    batch, which a mixture of experts' stage costs read too (Megatron-Core's combined 1F1B pairs
    micro-batches: `engines.moe.combined_1f1b`). Unhashable for an array-valued plan."""
    plan = scn.plan
    return (scn.model, scn.cluster, _LAYOUT_FIELDS(plan), plan.global_batch if scn.model.is_moe else None)


# The plan field `_layout_terms` does not read (a dense model's): many plans that differ only in it
# (a random draw of batches) have their layout terms priced once per group (`evaluate_grouped`).
LAYOUT_IGNORES = frozenset({("plan", "global_batch")})


def _grouped_layer_extra(scn: Scenario) -> StageCost:
    """`recompute_whole.whole_layer_extra` priced once per group of plans that share their per-micro-batch costs."""
    return evaluate_grouped(whole_layer_extra, scn, PER_MICRO_BATCH_IGNORES)


def recomputed_layer_stages(scn: Scenario) -> Stages | None:
    """`recompute_whole.recomputed_stages` (what the layers recomputed whole add to each stage), priced only
    for the plans that recompute layers whole (a planner's few over the memory, taken as rows:
    `engines.distinct.rows_of`) and 0 for the others, which add none of it (their 0 layers times a
    layer's extra). A field that is 0 for every plan priced stays a scalar 0."""
    layers = np.asarray(scn.plan.recompute_layers)
    rows = np.flatnonzero(layers > 0) if layers.ndim == 1 else None
    part = rows_of(scn, rows) if rows is not None and 0 < rows.size < layers.size else None
    if part is None:
        return recomputed_stages(scn, scn.split, _grouped_layer_extra)
    found = recomputed_stages(part, part.split, _grouped_layer_extra)
    if found is None:
        return None

    def spread(value: Number) -> Number:
        if np.ndim(value) == 0 and float(value) == 0.0:
            return value
        out = np.zeros(layers.size)
        out[rows] = np.broadcast_to(np.asarray(value, dtype=float), rows.shape)
        return out

    return Stages(*(StageCost(*(spread(getattr(c, f)) for f in FIELDS)) for c in found))


def layout_terms_of(scn: Scenario) -> Layout:
    """`_layout_terms`, over many plans priced once per group of those that differ only in the
    global batch (a dense model's; a mixture of experts' read it)."""
    batch = scn.plan.global_batch
    if scn.model.is_moe or type(batch) is not np.ndarray or batch.size < 2:  # nothing the groups would share
        return _layout_terms(scn)
    return evaluate_grouped(_layout_terms, scn, LAYOUT_IGNORES)


def _layout_terms(scn: Scenario) -> Layout:
    """The part of the step that does not read the global batch (nor the number of
    micro-batches it sets): the groups' placement, the stage costs per micro-batch with their
    sends, the pipeline's per-stage times, the parameters, the collectives' prices and the
    optimizer step."""
    model, cluster, plan = scn.model, scn.cluster, scn.plan
    fabric = Fabric.of(cluster)
    place = placement(plan, cluster.gpus_per_node, experts=model.is_moe)
    p, v = as_float(plan.pp), as_float(plan.vpp)
    split = scn.split

    moe_split = model_moe_split(model, split) if model.is_moe else None
    if model.is_moe:  # an MoE layer's expert groups depend on dp: priced for every plan
        (first, middle, last, middle_sum), sends = micro_batch_stages(scn, fabric, place, split)
    else:
        (first, middle, last, middle_sum), sends = STAGES.get_or_compute(
            stage_key(scn), lambda: evaluate_grouped(micro_batch_stages, scn, PER_MICRO_BATCH_IGNORES)
        )
    # FSDP2's copies read dp and the ZeRO stage, which the shared stage costs do not: added here
    copies = sharding_copies(scn)  # an MoE layer's own: its routed experts' unit (`fsdp2_copies`)
    moe_copies = None if copies is None or copies.moe is None else (copies.moe, moe_split)
    extra = None if copies is None else stages(split, copies.layer, copies.emb, copies.head, moe_copies)
    if extra is not None:
        own = (first, middle, last, middle_sum)
        first, middle, last, middle_sum = (add_costs(a, b) for a, b in zip(own, extra, strict=True))
    # layers recomputed whole: their count reads vpp too; what one adds, the per-micro-batch fields
    whole = recomputed_layer_stages(scn)
    if whole is not None:
        own = (first, middle, last, middle_sum)
        first, middle, last, middle_sum = (add_costs(a, b) for a, b in zip(own, whole, strict=True))
    # Pipeline sends: blocking ones (Megatron's 1F1B) sit on the stage's critical path; overlapped
    # ones (interleaved with --overlap-p2p-communication) run beside compute and only matter
    # when they are longer than it. One send over the slowest boundary (across nodes when the PP
    # group spans nodes).
    crosses = place["pp"] < plan.pp
    send_s = ifelse(p > 1, ifelse(crosses, sends.across_s, sends.within_s), 0.0)
    p2p = stage_sends_per_micro_batch_s(scn, send_s)
    overlap = as_bool(plan.overlap_p2p)

    def with_sends(total: Number) -> Number:
        return where(overlap, maximum(total, p2p), total + p2p)

    # the stack's fixed cost per micro-batch (0 unless calibrated) is on every stage's own time
    mb_over = as_float(cluster.micro_batch_overhead_s)
    c_first, c_mid, c_last = (plus(with_sends(s.total_s), mb_over) for s in (first, middle, last))
    n_mid = maximum(p - 2, 0.0)
    c_mid_sum = where(overlap, maximum(middle_sum.total_s, n_mid * p2p), middle_sum.total_s + n_mid * p2p)
    c_mid_sum = plus(c_mid_sum, n_mid * mb_over)
    # the stack's host work around its sends and receives, the GPU idle (nanotron's handshakes;
    # `physics.microbatch`): a middle stage's count, half on the first and last stage
    hand_end: Number = 0.0
    hand_mid: Number = 0.0
    if any_true(as_array(plan.p2p_host_ops) > 0):
        hand = v * as_float(plan.p2p_host_ops) * as_float(plan.host_kernel_s)
        end, mid = handshake_shares(p)
        hand_end, hand_mid = end * hand, mid * hand
        c_first, c_mid, c_last = c_first + hand_end, c_mid + hand_mid, c_last + hand_end
        c_mid_sum = c_mid_sum + n_mid * hand_mid
    f_mid_sum = middle_sum.forward_s + (c_mid_sum - middle_sum.total_s) / 2  # half c's extra on the forwards
    # Each model chunk holds whole layers: a stage of L layers in v chunks has chunks of up to
    # ceil(L / v) layers (12 layers in 5 chunks: 3, 3, 2, 2, 2), and the fill and drain pass the
    # largest, so the bubble divides by L / ceil(L / v) (4 there), not by v.
    fullest = maximum(maximum(split.first, where(p > 2, split.middle_max, 0.0)), where(p > 1, split.last, 0.0))
    v_whole = where(v > 1, fullest / np.ceil(fullest / v), v)
    zb = as_array(plan.schedule) == Schedule.ZB_H1
    w_stage = where(p > 2, middle.weight_grad_s, first.weight_grad_s) if any_true(zb) else None
    params, expert_params = stage_params_of(model, plan, split)
    trained = trainable_of(model, plan, split, params)
    prices = _collective_prices(scn, fabric, place, params, expert_params, trained)
    optimizer_s = reduce(
        maximum,
        (optimizer_time_s(scn, n, x, w) for n, x, w in zip(trained, expert_params, params, strict=True)),
    )
    dp = None
    z = plan.zero_stage
    if one_value(z) and int(z) < 2:
        # ZeRO-0/1 reduce (and gather) once per step: their exposure reads no number of
        # micro-batches (NaN would show in every number it gave)
        stage_costs = (first, middle, last)  # ZeRO-0/1: no stage is paced (`dp_step.paced_cost`)
        dp = data_parallel_exposed_s(scn, fabric, place, trained, stage_costs, np.nan, v, expert_params, params, prices)
    return Layout(
        fabric,
        place,
        p,
        v,
        split,
        moe_split,
        first,
        middle,
        last,
        extra,
        c_first,
        c_mid,
        c_last,
        c_mid_sum,
        f_mid_sum,
        v_whole,
        zb,
        w_stage,
        p2p,
        overlap,
        mb_over,
        hand_end,
        hand_mid,
        params,
        expert_params,
        trained,
        prices,
        optimizer_s,
        dp,
    )


# Fields the data-parallel collectives do not read (`engines.data_parallel.COLLECTIVE_READS`).
COLLECTIVE_IGNORES = frozenset(("plan", f.name) for f in dataclasses.fields(Plan) if f.name not in COLLECTIVE_READS)
_COLLECTIVE_FIELDS = tuple(sorted(COLLECTIVE_READS))
# One configuration's prices, kept under what they read (`specs.memo`): plans that differ only in
# the batch, recomputation, the schedule or the overlaps share them.
_COLLECTIVES = Memo("data-parallel collective prices")


def _collective_prices(
    scn: Scenario,
    fabric: Fabric,
    place: dict[str, Number],
    params: Triple,
    expert_params: Triple,
    trained: Triple,
) -> StagePrices:
    """`engines.data_parallel.stage_collective_prices` of the stages (trained parameters reduced,
    held ones gathered), priced once per group of plans that differ only in fields they do not
    read (a million random plans over a few dozen layouts: a few dozen groups); one
    configuration's kept under those fields."""
    plan = scn.plan
    names = zero_collectives(plan.zero_stage)  # of every plan, not of a group's representative

    def prices(one: Scenario) -> StagePrices:
        if one is scn:  # priced as given (one configuration, or plans that do not group)
            return stage_collective_prices(scn, fabric, place, trained, expert_params, params, names)
        return collective_prices_of(one, names)

    key = (scn.model, scn.cluster, names, *(getattr(plan, name) for name in _COLLECTIVE_FIELDS))

    def priced() -> StagePrices:  # read-only: a kept answer is shared
        return tuple(
            (MappingProxyType(dense), None if routed is None else MappingProxyType(routed))  # type: ignore[misc]
            for dense, routed in evaluate_grouped(prices, scn, COLLECTIVE_IGNORES)
        )

    return _COLLECTIVES.get_or_compute(key, priced)  # type: ignore[no-any-return]


def collective_prices_of(scn: Scenario, names: tuple[str, ...]) -> StagePrices:
    """`_collective_prices` of a scenario from its fields alone (its stages' parameters, groups
    and links): the collectives `names` of each stage. Reads only COLLECTIVE_READS of the plan."""
    model, plan = scn.model, scn.plan
    split = scn.split
    held, routed = stage_params_of(model, plan, split)
    place = placement(plan, scn.cluster.gpus_per_node, experts=model.is_moe)
    trained = trainable_of(model, plan, split, held)
    return stage_collective_prices(scn, Fabric.of(scn.cluster), place, trained, routed, held, names)


def stage_params_of(model: Model, plan: Plan, split: StageSplit) -> tuple[Triple, Triple]:
    """Parameters on one GPU of the first, fullest middle and last stage, and the routed-expert
    ones among them."""
    return stage_params(model, plan, split), stage_expert_params(model, plan, split)


def trainable_of(model: Model, plan: Plan, split: StageSplit, params: Triple) -> Triple:
    """The parameters with gradients on those stages: all of them, or LoRA's adapters
    (`physics.lora.trainable_params`)."""
    layers = (split.first, split.middle_max, split.last)
    e = plan.bytes_per_element
    return tuple(  # type: ignore[return-value]
        trainable_params(model, plan.tp, plan.lora_rank, e, n, x, plan.lora_targets)
        for n, x in zip(layers, params, strict=True)
    )


def optimizer_time_s(
    scn: Scenario, n_params: Number, n_expert: Number = 0.0, n_weights: Number | None = None
) -> Number:
    """The Adam update of `n_params` parameters (divided by dp x cp, or the shard group, under ZeRO >= 1; the
    `n_expert` routed-expert ones among them by expert_dp) at HBM speed; in FP8 and NVFP4 training also the
    once-per-step cast of every local weight (`n_weights`, default `n_params`; more under LoRA,
    whose frozen weights are cast too) to FP8 in both layouts
    (`physics.casts.cast_bytes_per_element`), which the first micro-batch caches for the rest
    (Transformer Engine's; a torchao recipe casts the weights at every use instead, in the layers'
    casts: `physics.fp8_recipes`). With `Plan.offload_optimizer` that share of the update runs on
    the host CPU instead, with its copies (`physics.offload.optimizer_host_s`). With
    `Plan.zero1_grad_all_reduce` under ZeRO >= 1 the gradient passes' UNSHARDED_GRAD_PASS_BYTES run
    over all `n_params`; FSDP2's once-a-step copies (`fsdp2_copies.step_copies_s`); `Plan.optimizer_step_bytes`."""
    plan = scn.plan
    sharded = as_array(plan.zero_stage) >= 1
    shards = as_array(plan.zero_ranks)  # the distributed optimizer shards over dp x cp (or the shard group)
    expert_shards = ifelse(sharded, plan.expert_dp, 1) if scn.model.is_moe else 1
    local = (n_params - n_expert) / ifelse(sharded, shards, 1) + n_expert / expert_shards
    gpu = scn.cluster.gpu
    own = as_array(plan.optimizer_step_bytes)  # the stack's own count where it states one
    traffic = local * np.where(own > 0, own, OPTIMIZER_TRAFFIC_BYTES_PER_PARAM)
    whole = as_bool(plan.zero1_grad_all_reduce) & sharded
    if any_true(whole):  # nanotron's gradient passes over every local gradient (UNSHARDED_GRAD_PASS_BYTES)
        traffic = traffic + ifelse(whole, (n_params - local) * UNSHARDED_GRAD_PASS_BYTES, 0.0)
    update = memory_s(traffic, gpu, kernels=OPTIMIZER_KERNELS)
    if any_true(as_array(plan.offload_optimizer) > 0):
        update = _with_host_optimizer(plan, gpu, local, update)
    update = update + step_copies_s(scn, n_params, n_weights, n_expert)  # FSDP2's, on the GPU whatever is offloaded
    # Transformer Engine's PyTorch path caches each weight's FP8 / NVFP4 copies across the step's
    # micro-batches (its JAX path casts at every use instead: `physics.compute.layer_times`)
    cached = fp8_recipes.is_te(plan.fp8_recipe) and not fp8_recipes.casts_weights_per_use(plan.fp8_recipe)
    if not (is_fp8(plan.precision) and cached) and not is_nvfp4(plan.precision):
        return update
    weights = n_params if n_weights is None else n_weights
    per_weight = cast_bytes_per_element(plan.precision, plan.fp8_recipe, gpu.fp8_any_layout)
    return update + memory_s(per_weight * weights, gpu)


def _with_host_optimizer(plan: Plan, gpu: Gpu, local: Number, update: Number) -> Number:
    """`update` (the GPU's Adam over `local` parameters) with `plan.offload_optimizer` of it on the
    host CPU (`physics.offload.optimizer_host_s`); a GPU without its host's rates cannot say."""
    share = plan.offload_optimizer
    missing = (as_array(gpu.host_link_bytes_per_s) <= 0) | (as_array(gpu.host_adam_params_per_s) <= 0)
    if any_true((as_array(share) > 0) & missing):
        raise SpecError(
            f"gpu {gpu.name!r}: offload_optimizer needs host_link (bytes/s to host memory) and host_adam (parameters "
            "per second the host's CPU Adam gives this GPU); give them in a GPU YAML file"
        )
    grad, weight = grad_bytes_per_param(plan.precision, plan.grad_reduce_bf16), weight_bytes_per_param(plan.precision)
    host = offload.optimizer_host_s(local, share, grad, weight, gpu.host_link_bytes_per_s, gpu.host_adam_params_per_s)
    return update * (1.0 - as_array(share)) + host
