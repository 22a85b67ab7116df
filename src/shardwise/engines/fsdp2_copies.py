"""FSDP2's copies on the compute stream (`physics.stack.per_param_sharding_bytes`): the
all-gather's copy-out of every gathered weight and the reduce-scatter's copy-in of every gradient,
priced as memory-bound kernels of a layer, the embedding and the output layer, only under
per-parameter sharding (FSDP2's `fully_shard`) with ZeRO-3 over more than one rank."""

from __future__ import annotations

import numpy as np

from shardwise.arrays import any_true, as_array, as_bool
from shardwise.engines.costs import StageCost
from shardwise.physics import memory as mem
from shardwise.physics.compute import memory_s
from shardwise.physics.microbatch import fsdp2_kept_gathered, plan_deferred_sync
from shardwise.physics.params import layer_params_split
from shardwise.physics.stack import ALL_GATHER_COPY_OUT_PASSES, per_param_sharding_bytes
from shardwise.specs import Plan, Scenario
from shardwise.specs._checks import Number
from shardwise.specs.hardware import is_fp8

# Bytes per weight that FSDP2 gathers and copies out under torchao's FP8 all-gather
# (`Plan.fp8_recipe` "tensorwise_fp8_all_gather", torchao/float8/fsdp_utils.py
# `WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather`: the FP8 data, one byte each)
FP8_GATHERED_BYTES = 1.0


def _copying(plan: Plan) -> np.ndarray:
    """Plans whose FSDP2 copies run: per-parameter sharding, ZeRO-3, more than one rank."""
    return (
        np.asarray(plan.per_param_sharding, dtype=bool)
        & (np.asarray(plan.zero_stage) == 3)
        & (np.asarray(plan.zero_ranks) > 1)
    )


def _deferred(plan: Plan) -> np.ndarray:
    """Plans whose FSDP2 gradient sync is off until the last micro-batch
    (`physics.microbatch.fsdp2_deferred_sync`: pp > 1, or `Plan.fsdp2_grad_sync` "last-micro-batch"):
    their copy-in runs once a step."""
    return _copying(plan) & plan_deferred_sync(plan)


def _kept(plan: Plan) -> np.ndarray:
    """Plans whose FSDP2 weights stay gathered through the step: under pipeline parallelism
    torchtitan and NeMo AutoModel turn reshard_after_forward off and the pipeline stage turns
    reshard_after_backward off (`physics.memory_stacks.PP_FSDP_SOURCE`): one gather, and one
    copy-out, a step."""
    return _copying(plan) & fsdp2_kept_gathered(plan.per_param_sharding, plan.pp)


def _gathered_bytes(plan: Plan) -> float:
    """Bytes a gathered weight takes: its 16-bit (or FP8) bytes, 1 under torchao's FP8 all-gather."""
    if plan.fp8_recipe == "tensorwise_fp8_all_gather" and is_fp8(plan.precision):
        return FP8_GATHERED_BYTES
    return mem.weight_bytes_per_param(plan.precision)


def sharding_copies(scn: Scenario) -> tuple[StageCost, StageCost, StageCost] | None:
    """FSDP2's copies (`physics.stack.per_param_sharding_bytes`) in one micro-batch, as compute
    of one layer, of the embedding and of the output layer (None where no plan has them):
    memory-bound kernels on the compute stream, only under per-parameter sharding with ZeRO-3
    over more than one rank. They read dp, cp, shard_group and zero_stage, which the per-micro-batch stage costs
    do not (`engines.training_stages.PER_MICRO_BATCH_IGNORES`): the step adds them to those. A
    mixture-of-experts layer is counted with the dense layer's weights (its experts are not
    priced here); frozen weights (LoRA) have no gradient to copy in, nor does a micro-batch under
    deferred gradient sync, and weights kept gathered through the step are not copied out again
    (`step_copies_s` prices those once a step)."""
    model, plan, gpu = scn.model, scn.plan, scn.cluster.gpu
    z3 = as_array(plan.zero_stage) == 3
    if not any_true(as_bool(plan.per_param_sharding) & z3 & (as_array(plan.zero_ranks) > 1)):
        return None  # (one plan of plain numbers without them: no numpy call)
    on = _copying(plan)
    if not np.any(on):
        return None
    each = on & ~_kept(plan)  # kept gathered: nothing copied each micro-batch, no kernel (`step_copies_s`)
    w, g = mem.weight_bytes_per_param(plan.precision), mem.grad_bytes_per_param(plan.precision, plan.grad_reduce_bf16)
    gathered = np.where(_kept(plan), 0.0, _gathered_bytes(plan))  # copied out each micro-batch
    copied_in = (np.asarray(plan.lora_rank) == 0) & ~_deferred(plan)
    matrices, replicated = layer_params_split(model)
    word = model.vocab * model.hidden / plan.tp
    held = (matrices / plan.tp + replicated, word, np.where(model.tied_embeddings, 0.0, word))

    def part(weights: Number) -> StageCost:
        f_bytes, b_bytes = per_param_sharding_bytes(weights, gathered, g, np.where(copied_in, weights, 0.0), w)
        forward, backward = memory_s(f_bytes, gpu), memory_s(b_bytes, gpu, kernels=2)
        return StageCost(np.where(each, forward, 0.0), np.where(each, backward, 0.0), 0.0, 0.0)

    layer, emb, head = (part(x) for x in held)
    return layer, emb, head


def step_copies_s(scn: Scenario, trained: Number, weights: Number | None = None) -> Number:
    """Seconds a stage's FSDP2 copies take once a step (0 where none is): under deferred gradient
    sync the reduce-scatter's copy-in of its `trained` weights, the last micro-batch's
    `foreach_reduce` copying the gradient accumulated in the reduce dtype into its input (read and
    write g bytes: 8 B a weight at fp32, 4 at bf16, where a micro-batch that reduces reads its
    16-bit gradient: `sharding_copies`); with the weights kept gathered (pp > 1), the all-gather's
    copy-out of all its `weights` (default `trained`), once."""
    plan = scn.plan
    if not any_true(as_bool(plan.per_param_sharding) & (as_array(plan.zero_stage) == 3)):
        return 0.0  # (one plan of plain numbers without them: no numpy call)
    deferred, kept = _deferred(plan), _kept(plan)
    if not (np.any(deferred) or np.any(kept)):
        return 0.0
    g = mem.grad_bytes_per_param(plan.precision, plan.grad_reduce_bf16)
    held = np.asarray(trained if weights is None else weights, dtype=float)
    copy_in = np.where(deferred, 2.0 * g * np.asarray(trained, dtype=float), 0.0)
    copy_out = np.where(kept, ALL_GATHER_COPY_OUT_PASSES * _gathered_bytes(plan) * held, 0.0)
    return np.where(deferred | kept, memory_s(copy_in + copy_out, scn.cluster.gpu), 0.0)
