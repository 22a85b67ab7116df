"""FSDP2's copies on the compute stream (`physics.stack.per_param_sharding_bytes`): the
all-gather's copy-out of every gathered weight and the reduce-scatter's copy-in of every gradient,
priced as memory-bound kernels of a layer, the embedding and the output layer, only under
per-parameter sharding (FSDP2's `fully_shard`) with ZeRO-3 over more than one rank.

A mixture-of-experts layer's routed experts are FSDP2-sharded over the ranks that hold the same
experts, the expert-data-parallel group (`Plan.expert_dp`), and the rest of the layer (attention,
norms, router, shared experts) over the data-parallel group (`Plan.zero_ranks`), each copied where
its group has more than one rank (or, where the stack wraps them there, one: below):

- torchtitan (torchtitan/models/llama4/infra/parallelize.py `apply_fsdp`, deepseek_v3's the same;
  pytorch/torchtitan@05a6cb38): with ep > 1 `fully_shard(transformer_block.moe.experts,
  mesh=edp_mesh)` -- "the routed experts are sharded with the remaining edp_mesh", "the router and
  the shared experts are sharded together with the TransformerBlock" -- its own unit; with ep = 1
  the experts sit in the block's unit over the data-parallel mesh. It wraps them over an edp mesh
  of one rank too, which torch's FSDP2 still copies (pytorch/pytorch torch/distributed/fsdp/
  _fully_shard/_fsdp_param_group.py `wait_for_unshard`: `tensor.copy_(sharded_data)` where
  `world_size == 1`; _fsdp_collectives.py `foreach_reduce`: the chunk_cat copy-in, then
  `reduce_output.copy_`): `Plan.fsdp2_expert_mesh_of_one`, priced as the copies over more ranks.
- NeMo AutoModel (nemo_automodel/components/moe/parallelizer.py `apply_fsdp`,
  NVIDIA-NeMo/Automodel@005f6639): with ep > 1 the experts are left out of the block's unit
  (`ignored_params`) and `fully_shard(moe_module.experts, mesh=ep_shard_mesh)` only where that mesh
  (dp x cp / ep ranks) has more than one rank (`ep_shard_enabled`); with ep = 1 they are in the block.

Both paths, once a micro-batch (`sharding_copies`) and once a step (`step_copies_s`), count these.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from shardwise.arrays import any_true, as_array, as_bool
from shardwise.engines.costs import StageCost, add_costs
from shardwise.physics import memory as mem
from shardwise.physics.compute import memory_s
from shardwise.physics.microbatch import fsdp2_kept_gathered, plan_deferred_sync
from shardwise.physics.params import layer_params_split, moe_layer_params_per_gpu
from shardwise.physics.stack import ALL_GATHER_COPY_OUT_PASSES, per_param_sharding_bytes
from shardwise.specs import Model, Plan, Scenario
from shardwise.specs._checks import Number
from shardwise.specs.hardware import is_fp8

# Bytes per weight that FSDP2 gathers and copies out under torchao's FP8 all-gather
# (`Plan.fp8_recipe` "tensorwise_fp8_all_gather", torchao/float8/fsdp_utils.py
# `WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather`: the FP8 data, one byte each)
FP8_GATHERED_BYTES = 1.0


class Copies(NamedTuple):
    """FSDP2's copies in one micro-batch: a dense layer, the embedding, the output layer, and a
    mixture-of-experts layer (None for a dense model)."""

    layer: StageCost
    emb: StageCost
    head: StageCost
    moe: StageCost | None


def _sharded(model: Model, plan: Plan) -> tuple[np.ndarray, np.ndarray]:
    """(the dense weights, the routed experts) that FSDP2 wraps and so copies: per-parameter
    sharding, ZeRO-3, and more than one data-parallel rank (`zero_ranks`); the experts under ep > 1
    their own unit over more than one expert-data-parallel rank (`expert_dp`), or over one where
    the stack wraps them there (`Plan.fsdp2_expert_mesh_of_one`), under ep = 1 in the block's unit
    (module docstring)."""
    fsdp2 = np.asarray(plan.per_param_sharding, dtype=bool) & (np.asarray(plan.zero_stage) == 3)
    dense = fsdp2 & (np.asarray(plan.zero_ranks) > 1)
    if not model.is_moe:
        return dense, np.zeros_like(fsdp2)
    own = (np.asarray(plan.expert_dp) > 1) | np.asarray(plan.fsdp2_expert_mesh_of_one, dtype=bool)
    return dense, np.where(np.asarray(plan.ep) > 1, fsdp2 & own, dense)


class UnitWeights(NamedTuple):
    """Weights on one GPU that FSDP2 copies in a micro-batch, by unit (0 where it copies none)."""

    layer: Number  # a dense layer's block
    emb: Number  # the word embedding
    head: Number  # the output layer (0 when tied)
    moe_block: Number  # an MoE layer's block: attention, norms, router, shared experts (its experts at ep 1)
    moe_experts: Number  # its routed experts' own unit (ep > 1)


def copied_weights(model: Model, plan: Plan) -> UnitWeights:
    """What each unit's copies count (`_sharded`, module docstring): the per-micro-batch path's."""
    dense, experts = _sharded(model, plan)
    matrices, replicated = layer_params_split(model)
    word = model.vocab * model.hidden / plan.tp
    head = np.where(model.tied_embeddings, 0.0, word)
    layer, emb, head = (np.where(dense, x, 0.0) for x in (matrices / plan.tp + replicated, word, head))
    if not model.is_moe:
        return UnitWeights(layer, emb, head, 0.0, 0.0)
    other, routed = moe_layer_params_per_gpu(model, plan.tp, plan.ep, plan.expert_tp)
    own = np.asarray(plan.ep) > 1  # the experts' own unit; in the block's at ep 1
    block = np.where(dense, other, 0.0) + np.where(experts & ~own, routed, 0.0)
    return UnitWeights(layer, emb, head, block, np.where(experts & own, routed, 0.0))


def copied_stage_weights(model: Model, plan: Plan, params: Number, experts: Number = 0.0) -> Number:
    """Of a stage's `params` on one GPU, `experts` of them routed experts, the ones FSDP2 copies
    (`_sharded`): the once-a-step path's, the same as `copied_weights` summed over the stage."""
    dense, routed = _sharded(model, plan)
    x = np.asarray(experts, dtype=float)
    return np.where(dense, np.asarray(params, dtype=float) - x, 0.0) + np.where(routed, x, 0.0)


def _gathered_bytes(plan: Plan) -> float:
    """Bytes a gathered weight takes: its 16-bit (or FP8) bytes, 1 under torchao's FP8 all-gather."""
    if plan.fp8_recipe == "tensorwise_fp8_all_gather" and is_fp8(plan.precision):
        return FP8_GATHERED_BYTES
    return mem.weight_bytes_per_param(plan.precision)


def sharding_copies(scn: Scenario) -> Copies | None:
    """FSDP2's copies (`physics.stack.per_param_sharding_bytes`) in one micro-batch, as compute
    of one layer, of the embedding, of the output layer and of a mixture-of-experts layer (None
    where no plan has them): memory-bound kernels on the compute stream, one set per FSDP2 unit.
    They read dp, cp, shard_group and zero_stage, which the per-micro-batch stage costs do not
    (`engines.training_stages.PER_MICRO_BATCH_IGNORES`): the step adds them to those. An MoE
    layer copies its attention, norms, router and shared experts over the data-parallel group and
    its GPU's routed experts (experts / ep, 1 / etp of each) over the expert-data-parallel one, a
    unit of their own under ep > 1 (module docstring); frozen weights (LoRA) have no gradient to
    copy in, nor does a micro-batch under deferred gradient sync, and weights kept gathered through
    the step are not copied out again (`step_copies_s` prices those once a step)."""
    model, plan, gpu = scn.model, scn.plan, scn.cluster.gpu
    z3 = as_array(plan.zero_stage) == 3
    if not any_true(as_bool(plan.per_param_sharding) & z3):
        return None  # (one plan of plain numbers without them: no numpy call)
    dense, experts = _sharded(model, plan)
    if not np.any(dense | experts):
        return None
    kept = fsdp2_kept_gathered(plan.per_param_sharding, plan.pp)  # nothing copied each micro-batch, no kernel
    w, g = mem.weight_bytes_per_param(plan.precision), mem.grad_bytes_per_param(plan.precision, plan.grad_reduce_bf16)
    gathered = _gathered_bytes(plan)
    copied_in = (np.asarray(plan.lora_rank) == 0) & ~np.asarray(plan_deferred_sync(plan), dtype=bool)

    def part(weights: Number, unit: Number) -> StageCost:
        """The copies of `weights` where FSDP2 copies that `unit` (none where they stay gathered)."""
        f_bytes, b_bytes = per_param_sharding_bytes(weights, gathered, g, np.where(copied_in, weights, 0.0), w)
        each = ~kept & np.asarray(unit, dtype=bool)
        forward, backward = memory_s(f_bytes, gpu), memory_s(b_bytes, gpu, kernels=2)
        return StageCost(np.where(each, forward, 0.0), np.where(each, backward, 0.0), 0.0, 0.0)

    units = copied_weights(model, plan)
    # a tied output layer's unit (the final norm, torchtitan's [norm, output]) still launches its copies
    layer, emb, head = (part(x, dense) for x in (units.layer, units.emb, units.head))
    if not model.is_moe:
        return Copies(layer, emb, head, None)
    own = np.asarray(plan.ep) > 1
    moe = add_costs(part(units.moe_block, dense | (experts & ~own)), part(units.moe_experts, experts & own))
    return Copies(layer, emb, head, moe)


def step_copies_s(scn: Scenario, trained: Number, weights: Number | None = None, experts: Number = 0.0) -> Number:
    """Seconds a stage's FSDP2 copies take once a step (0 where none is): under deferred gradient
    sync the reduce-scatter's copy-in of its `trained` weights, the last micro-batch's
    `foreach_reduce` copying the gradient accumulated in the reduce dtype into its input (read and
    write g bytes: 8 B a weight at fp32, 4 at bf16, where a micro-batch that reduces reads its
    16-bit gradient: `sharding_copies`); with the weights kept gathered (pp > 1), the all-gather's
    copy-out of all its `weights` (default `trained`), once. `experts`: the routed-expert weights
    among both (trained alike: no LoRA with experts), copied only where FSDP2 shards them over more
    than one rank, as the rest only where it shards that (`sharding_copies`, module docstring)."""
    plan = scn.plan
    if not any_true(as_bool(plan.per_param_sharding) & (as_array(plan.zero_stage) == 3)):
        return 0.0  # (one plan of plain numbers without them: no numpy call)
    dense, routed = _sharded(scn.model, plan)
    copying = dense | routed
    deferred = copying & np.asarray(plan_deferred_sync(plan), dtype=bool)
    kept = copying & fsdp2_kept_gathered(plan.per_param_sharding, plan.pp)
    if not (np.any(deferred) or np.any(kept)):
        return 0.0
    g = mem.grad_bytes_per_param(plan.precision, plan.grad_reduce_bf16)
    held = trained if weights is None else weights
    copy_in = np.where(deferred, 2.0 * g * copied_stage_weights(scn.model, plan, trained, experts), 0.0)
    copied_out = copied_stage_weights(scn.model, plan, held, experts)
    copy_out = np.where(kept, ALL_GATHER_COPY_OUT_PASSES * _gathered_bytes(plan) * copied_out, 0.0)
    return np.where(deferred | kept, memory_s(copy_in + copy_out, scn.cluster.gpu), 0.0)
