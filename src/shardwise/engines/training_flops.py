"""FLOPs of one training step: the model's (Megatron's convention, 3 passes) and the hardware's
(with recomputation), and the causally masked part of the attention square."""

from __future__ import annotations

import numpy as np

from shardwise.engines.moe_op_sac import op_sac_expert_masks
from shardwise.physics.flops import LayerForward, layer_forward, logits_forward
from shardwise.physics.moe import experts_forward
from shardwise.physics.params import total_params
from shardwise.specs import Model, Plan, Recompute, Scenario
from shardwise.specs._checks import Number
from shardwise.specs.stages import recomputed_split


def masked_attention_flops_per_step(scn: Scenario) -> Number:
    """The causally masked part of the attention square in the model FLOPs (3 passes, all GPUs):
    what a causal model does not need (`TrainingEstimate.masked_attention_flops_per_step`), with
    packed sequences everything outside the documents' own triangles too, with sliding-window
    layers everything outside their windows."""
    model, plan = scn.model, scn.plan
    one = layer_forward(model, 1, 1, False, plan.bytes_per_element, cp=plan.cp, document_len=plan.packed_document_len)
    masked = (1.0 - one.mean_causal_fraction) * _attention_core_flops(one)
    return plan.global_batch * 3 * model.layers * masked


def _attention_core_flops(one: LayerForward) -> Number:
    """A layer's attention-core FLOPs (Q K^T and P V), a hybrid mean layer's weighted by the share
    of attention layers (`physics.mamba`)."""
    core = one.scores.flops + one.context.flops
    return core if one.mamba is None else one.attention_share * core


def _scan_flops(one: LayerForward) -> Number:
    """A hybrid mean layer's SSD scan FLOPs (weighted by the Mamba-2 share; 0 for other layers)."""
    return 0.0 if one.mamba is None else one.mamba.share * one.mamba.ssd_flops


def layers_model_flops(model: Model, bytes_per_element: float) -> Number:
    """Forward FLOPs of every layer for one sequence (Megatron's convention): a mixture-of-experts
    layer counts its attention, shared experts, router and experts_per_token routed experts."""
    dense = layer_forward(model, 1, 1, False, bytes_per_element).model_flops
    if not model.is_moe:
        return model.layers * dense
    shared = model.shared_experts * model.expert_ffn_hidden
    attention = layer_forward(model, 1, 1, False, bytes_per_element, ffn=shared).model_flops
    routed = experts_forward(model, model.seq_len, 1, 1, bytes_per_element).model_flops
    n_moe = model.moe_layers
    return (model.layers - n_moe) * dense + n_moe * (attention + routed)


def op_sac_flops(model: Model, one: LayerForward) -> Number:
    """Forward FLOPs torchtitan's op-level selective checkpointing recomputes in one layer for one
    sequence (`engines.recompute_costs.op_sac_s`): wk (its share of the QKV GEMM), wo and w3 (a
    plain MLP's w2) of wq, wk, wv, wo, w1, w3, w2; the element-wise work it also redoes is no
    matmul FLOPs."""
    q, kv = model.heads * model.head_dim, model.kv_heads * model.head_dim
    mlp = one.mlp_up.flops / 2 if model.gated_mlp else one.mlp_down.flops
    return kv / (q + 2 * kv) * one.qkv.flops + one.attn_out.flops + mlp * one.has_mlp


def op_sac_layers_flops(model: Model, one: LayerForward, plan: Plan) -> Number:
    """`op_sac_flops` of every layer for one sequence: an MoE layer's attention and shared experts
    (its MLP in the count), and its router and routed experts whole -- the gate is forced to
    recompute and `_grouped_mm` is not in the save set -- less w2's grouped GEMM where a compiled
    block saves the combine's all-to-all (`engines.moe_op_sac.op_sac_expert_masks`)."""
    if not model.is_moe:
        return model.layers * op_sac_flops(model, one)
    e = plan.bytes_per_element
    shared = layer_forward(model, 1, 1, False, e, ffn=model.shared_experts * model.expert_ffn_hidden)
    ef = experts_forward(model, model.seq_len, 1, 1, e)
    routed = ef.model_flops - op_sac_expert_masks(plan)[2] * ef.down.flops
    n_moe = model.moe_layers
    return (model.layers - n_moe) * op_sac_flops(model, one) + n_moe * (op_sac_flops(model, shared) + routed)


def flops_per_step(scn: Scenario) -> tuple[Number, Number]:
    """Model FLOPs (3 passes) and hardware FLOPs (+ recomputation) of one step, all GPUs. LoRA
    (`Plan.lora_rank`) computes no weight gradient of the frozen linear layers and output layer
    (one pass of their FLOPs less; the adapters' own FLOPs, r / h of the layers', are left out)."""
    model, plan = scn.model, scn.plan
    one = layer_forward(model, 1, 1, False, plan.bytes_per_element)
    layers_fwd = layers_model_flops(model, plan.bytes_per_element)
    logits = logits_forward(model, 1, 1, plan.bytes_per_element).flops
    per_seq = 3 * (layers_fwd + logits)
    if np.any(np.asarray(plan.lora_rank) > 0):  # dense models only (specs.expert_rules.lora_rule)
        frozen = model.layers * (one.model_flops - _attention_core_flops(one) - _scan_flops(one)) + logits
        per_seq = np.where(np.asarray(plan.lora_rank) > 0, per_seq - frozen, per_seq)
    rc = np.asarray(plan.recompute)
    redo = np.select(
        [rc == Recompute.FULL, rc == Recompute.SELECTIVE],
        [layers_fwd, model.layers * _attention_core_flops(one)],
        0.0,
    )
    redo = np.where((rc == Recompute.SELECTIVE) & np.asarray(plan.flash_attention, dtype=bool), 0.0, redo)
    if plan.selective_policy == "op":  # torchtitan's op-level SAC redoes every second matmul
        redo = np.where(rc == Recompute.SELECTIVE, op_sac_layers_flops(model, one, plan), redo)
    if np.any(np.asarray(plan.recompute_layers) > 0):  # those layers' forward again, the others' as rc says
        whole = recomputed_split(scn.split, plan.vpp, plan.recompute_layers).total / model.layers
        redo = np.where(rc == Recompute.FULL, redo, whole * layers_fwd + (1.0 - whole) * redo)
    return plan.global_batch * per_seq, plan.global_batch * (per_seq + redo)


def fused_attention_recompute_flops(scn: Scenario) -> Number:
    """The attention forward that selective recomputation reruns under a fused kernel (all GPUs):
    Megatron-Core checkpoints its core attention whatever the kernel
    (`_checkpointed_attention_forward`; `engines.recompute_costs.selective_recompute_s` prices
    it), so HFU counts that forward again, the part of the square the causal kernel computes.
    `flops_per_step` leaves it out of the hardware FLOPs, which the flat baseline of `validate
    public` prices (Eq. 3 knows no such recomputation). Counted for the `attention` policy with no
    `recompute_modules` or with `core_attn` among them, in the layers not recomputed whole; the
    other modules' redone work is not counted."""
    model, plan = scn.model, scn.plan
    if plan.selective_policy != "attention" or (plan.recompute_modules and "core_attn" not in plan.recompute_modules):
        return 0.0
    one = layer_forward(model, 1, 1, False, plan.bytes_per_element, cp=plan.cp, document_len=plan.packed_document_len)
    redo = plan.global_batch * model.layers * one.mean_causal_fraction * _attention_core_flops(one)
    if np.any(np.asarray(plan.recompute_layers) > 0):  # those layers are rerun whole (counted in flops_per_step)
        redo = redo * (1.0 - recomputed_split(scn.split, plan.vpp, plan.recompute_layers).total / model.layers)
    on = (np.asarray(plan.recompute) == Recompute.SELECTIVE) & np.asarray(plan.flash_attention, dtype=bool)
    return np.where(on, redo, 0.0)


def maxtext_flops_per_step(model: Model, global_batch: Number) -> Number:
    """The FLOPs per step behind the TFLOP/s MaxText printed in 2024 (all GPUs): 6 x every
    parameter x tokens (embedding tables and norms included, PaLM App. B) plus the causal half of
    the attention square, 6 x heads x head_dim x layers x s^2 per sequence.

    Source: AI-Hypercomputer/maxtext MaxText/maxtext_utils.py calculate_tflops_training_per_device
    at efb6d9e4 (2024-04-09), the commit of the A3 README table: learnable_weight_tflops = 6 x
    num_model_parameters x max_target_length x per_device_batch_size, causal_attention_tflops =
    12 x num_query_heads x num_decoder_layers x head_dim x max_target_length^2 x
    per_device_batch_size / 2. Megatron's count (`flops_per_step`) leaves the input embedding out
    and counts the whole s x s square: for Llama-2-7B at s = 4096, 5.6% more than this one."""
    s = model.seq_len
    weights = 6.0 * total_params(model) * s
    attention = 6.0 * model.q_dim * model.layers * s * s
    return global_batch * (weights + attention)


def megatron_deepspeed_flops_per_step(model: Model, global_batch: Number) -> Number:
    """The FLOPs per step behind the TFLOP/s Megatron-DeepSpeed printed from July 2022 to August
    2024, on its 3-pass count: 72 B s l h^2 (1 + s / 6h + V / 16 l h), all GPUs.

    Source: deepspeedai/Megatron-DeepSpeed megatron/utils.py throughput_calculator at cc3a94c6
    (2023-09-18; the same line from 62bc4562, 2022-07-11, to b7b2d5ef, 2024-08-19, which replaced it
    with a count of every GEMM's MACs): flops_per_iteration = 24 x checkpoint_activations_factor x
    B x s x l x h^2 x (1 + s / (6 h) + V / (16 l h)), V the padded vocabulary, the factor 4 under
    activation checkpointing and 3 without it. Narayanan et al. 2021 Eq. 3's logit term V / 16 l h
    counts the logit GEMM's 3 passes inside the factor 4 (2 B s h V each); the calculator keeps it
    at both factors, so its 3-pass count holds 4.5 B s h V of logits where Megatron's
    (`flops_per_step`) holds 6. The public rows store its 4-pass figures x 3/4 (`tflops_count=recompute`,
    data/PUBLIC_RUNS.md): this count x 3/4 x 4/3 is the same 3-pass count."""
    s, h, layers = model.seq_len, model.hidden, model.layers
    return 72.0 * global_batch * s * layers * h * h * (1.0 + s / (6.0 * h) + model.vocab / (16.0 * layers * h))
