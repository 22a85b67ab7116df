"""What selective recomputation redoes of one layer: Megatron's attention core, torchtitan's
op-level policy, a JAX remat policy, or Megatron-Core's per-module list (`recompute_modules`)."""

from __future__ import annotations

import numpy as np

from shardwise.arrays import any_true, as_bool
from shardwise.engines.tp_overlap import TpComm
from shardwise.physics import remat, remat_partition
from shardwise.physics.compute import (
    LayerTimes,
    linear_times,
    memory_s,
)
from shardwise.physics.flops import (
    ROPE_KERNELS,
    LayerForward,
)
from shardwise.specs import Model, Recompute, Scenario
from shardwise.specs._checks import Number


def selective_recompute_s(lt: LayerTimes, model: Model, policy: str) -> Number:
    """What recompute="selective" redoes of one layer under the stack's `policy`: Megatron's
    attention core, torchtitan's op-level policy (`op_sac_s`) or a JAX remat policy
    (`physics.remat`)."""
    if policy == "op":
        return op_sac_s(lt, model)
    if policy in remat.RECOMPUTED:
        parts = (lt.qkv.forward_s, lt.proj.forward_s, lt.up.forward_s, lt.attention_s, lt.elementwise_s)
        # a weight cast at every use is no dot a policy saves: the rematerialised layer casts again
        return remat.recompute_s(policy, *parts) + lt.weight_cast_s
    return lt.attention_core_s


def module_recompute_s(lt: LayerTimes, fwd: LayerForward, scn: Scenario, moe_layer: bool) -> Number:
    """What recompute="selective" redoes of one layer's attention and dense part under Megatron-Core's
    `recompute_modules` (`Plan.recompute_modules`; megatron/core/transformer/transformer_layer.py,
    multi_latent_attention.py, core_v0.15-0.16; the routed experts' moe_act and moe are in
    `engines.moe.experts_cost`), each module's forward once more:

    - core_attn: the attention core (`LayerTimes.attention_core_s`);
    - layernorm: the norms that are modules of their own -- Transformer Engine fuses a dense layer's
      two into the QKV and MLP-up linears (TELayerNormColumnParallelLinear, IdentityOp norms, not
      recomputed), an MoE layer keeps its pre-MLP norm for the router, latent attention its input
      norm for the down-projections: one read and one write of the rank's b s h / t activations each;
    - mla_up_proj: latent attention's query and key-value up-projections and the rotary parts;
    - mlp (dense layers) and shared_experts (MoE layers): the MLP's two GEMMs and its activation.
    """
    model, plan, gpu = scn.model, scn.plan, scn.cluster.gpu
    modules = plan.recompute_modules
    sp = np.asarray(plan.sequence_parallel, dtype=bool)
    rank_bytes = fwd.tp_message_bytes / np.where(sp, np.asarray(plan.tp, dtype=float), 1.0)  # e b s h / t
    total: Number = 0.0
    if "core_attn" in modules:
        total = total + lt.attention_core_s
    norms = int(moe_layer) + int(bool(model.kv_lora_rank))
    if "layernorm" in modules and norms:
        total = total + memory_s(norms * 2 * rank_bytes, gpu, kernels=norms)
    if "mla_up_proj" in modules and model.kv_lora_rank and fwd.extra:
        kv_up = linear_times(fwd.extra[-1], gpu, plan.precision).forward_s
        e, tokens = plan.bytes_per_element, fwd.tp_message_bytes / (plan.bytes_per_element * model.hidden)
        rope = 2 * e * tokens * (model.heads * model.rope_head_dim / plan.tp + model.rope_head_dim)
        total = total + lt.qkv.forward_s + kv_up + memory_s(rope, gpu, kernels=ROPE_KERNELS)
    if ("shared_experts" if moe_layer else "mlp") in modules:
        gate = 2 if model.gated_mlp else 1
        activation = (gate + 1) * fwd.mlp_down.m * fwd.mlp_down.k * plan.bytes_per_element  # b s x f / t in and out
        total = total + lt.up.forward_s + lt.down.forward_s + memory_s(activation, gpu, kernels=1)
    return total


def op_sac_s(lt: LayerTimes, model: Model) -> Number:
    """What torchtitan's op-level selective checkpointing recomputes in the backward pass: every
    second matrix multiply of the layer (wk, wo and w3 of wq, wk, wv, wo, w1, w3, w2; a plain MLP's
    w2) and all element-wise work (`physics.stack`). wk is its share of the fused QKV GEMM."""
    q, kv = model.heads * model.head_dim, model.kv_heads * model.head_dim
    k_share = kv / (q + 2 * kv)
    mlp = lt.up.forward_s / 2 if model.gated_mlp else lt.down.forward_s
    return lt.elementwise_s + k_share * lt.qkv.forward_s + lt.proj.forward_s + mlp


def partitioned_checkpoint_s(
    scn: Scenario, comm: TpComm, fwd: LayerForward, rc: Number
) -> tuple[Number, Number, Number]:
    """(forward copies, backward copies, backward TP all-gather) of DeepSpeed's partitioned
    checkpoints on one fully recomputed layer and micro-batch (`physics.remat_partition`), all on the
    compute stream; zeros where the plan does not partition or does not recompute whole layers."""
    plan, gpu = scn.plan, scn.cluster.gpu
    if not any_true(as_bool(plan.partition_activations)):
        return 0.0, 0.0, 0.0
    t, sp = np.asarray(plan.tp, dtype=float), np.asarray(plan.sequence_parallel, dtype=bool)
    on = as_bool(plan.partition_activations) & (np.asarray(rc) == Recompute.FULL)
    x = np.where(sp, fwd.tp_message_bytes / t, fwd.tp_message_bytes)  # the checkpointed input, e b s h (/ t)
    f_bytes, b_bytes = remat_partition.passes_bytes(x, t, on)
    gathered = remat_partition.gathered_bytes(x, t, on)
    # kernels: the clone; the zero-fill, the copy in and one copy out per rank of the list
    forward = np.where(f_bytes > 0, memory_s(f_bytes, gpu, 1), 0.0)
    backward = np.where(b_bytes > 0, memory_s(b_bytes, gpu, 2 + t), 0.0)
    return forward, backward, np.where(gathered > 0, comm.group.all_gather(gathered), 0.0)
