"""Memory per GPU: weights, gradients, optimizer state, activations.

Model state (Rajbhandari et al. 2020, ZeRO, Sec. 3.1; mixed-precision Adam): 16-bit weights,
gradients in the reduction dtype (Megatron-LM accumulates and reduces BF16 gradients in fp32,
FP16 ones in fp16), and 12 bytes of fp32 master weight, momentum and variance per parameter.
ZeRO stage 1 partitions the optimizer state over data-parallel ranks, stage 2 also the
gradients, stage 3 also the weights.

Activations (Korthikanti et al. 2022, Sec. 4 and Table 2), bytes per layer per micro-batch,
with e = 2 and 1-byte dropout masks, s sequence, b micro-batch, h hidden, a heads, t = tp:

    no parallelism               s b h (34 + 5 a s / h)
    tensor parallel              s b h (10 + 24/t + 5 a s / (h t))
    tensor + sequence parallel   s b h (34 + 5 a s / h) / t
    selective recomputation      drops the 5 a s / h term (the attention scores)
    full recomputation           2 s b h (the layer input; / t with sequence parallelism)

`layer_activation_bytes` builds these from the tensor inventory (GQA, gated MLPs, no dropout
and FlashAttention change the counts) and `tests/test_memory.py` checks the table.
The first pipeline stage holds the most micro-batches (Korthikanti Sec. 4.2.3): m for GPipe,
min(p, m) for 1F1B, and p v + p - 1 model chunks of l/(p v) layers for the interleaved schedule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from shardwise.physics.flops import DROPOUT_MASK_BYTES
from shardwise.specs import Model, Recompute, Schedule
from shardwise.specs._checks import Number
from shardwise.units import GIB

# Adam: fp32 master weight, momentum, variance (Rajbhandari et al. 2020, ZeRO, Sec. 3.1: K = 12).
OPTIMIZER_BYTES_PER_PARAM = 12.0
# FlashAttention keeps one fp32 log-sum-exp per query and head for its backward pass
# (Dao 2023, FlashAttention-2, Sec. 3.1.1 and Algorithm 1: the statistic L).
FLASH_STATS_BYTES = 4.0
# The logits the loss keeps are fp32: 4 s b V / t bytes (Korthikanti et al. 2022 Sec. 4.3;
# Megatron-LM casts them in megatron/core/tensor_parallel/cross_entropy.py).
LOGITS_BYTES_PER_ELEMENT = 4.0
# CUDA context, cuBLAS workspaces, NCCL buffers and allocator slack: typically 1-3 GB on
# A100/H100 training jobs. Counted so that "fits" leaves real headroom. A project estimate with
# no published source: calibrate it against a job's measured overhead.
RUNTIME_RESERVED_BYTES = 2.0 * GIB


def weight_bytes_per_param(precision: str) -> float:
    """16-bit weights (fp8 training keeps 16-bit weights and casts per GEMM)."""
    return 2.0


def grad_bytes_per_param(precision: str) -> float:
    """fp32 gradient buffers for BF16 and FP8 (Megatron-LM forces fp32 accumulation for BF16),
    fp16 gradients for FP16 (Megatron-LM 2021 default)."""
    return 2.0 if precision == "fp16" else 4.0


def layer_activation_bytes(
    model: Model,
    batch: Number,
    tp: Number,
    sequence_parallel: Number,
    recompute: Number,
    flash_attention: Number,
    bytes_per_element: float,
    ffn: Number | None = None,
) -> Number:
    """Activations one layer keeps for its backward pass, per micro-batch, on one GPU (`ffn`: the
    width of its dense MLP, as in `physics.flops.layer_forward`)."""
    s, h, a, kv, d = model.seq_len, model.hidden, model.heads, model.kv_heads, model.head_dim
    f = model.ffn_hidden if ffn is None else ffn
    e, t, b = bytes_per_element, tp, batch
    sbh = s * b * h
    mask = DROPOUT_MASK_BYTES if model.dropout else 0.0
    gate = 2 if model.gated_mlp else 1
    # Replicated across TP ranks unless sequence-parallel: two norm inputs, the QKV and MLP
    # inputs (norm outputs), two hidden-dropout masks.
    replicated = (4 * e + 2 * mask) * sbh
    # Split across TP ranks: Q, K, V, attention output, MLP up output, activation output.
    sbq = s * b * model.q_dim  # queries and the attention output (sbh unless head_dim is set apart)
    split = e * (sbq + 2 * s * b * kv * d + sbq + gate * s * b * f + s * b * f) / t
    # The attention scores: softmax output, dropout mask and output (Korthikanti's 5 a s^2 b).
    scores_std = (e + ((mask + e) if model.dropout else 0.0)) * a * s * s * b / t
    scores_flash = FLASH_STATS_BYTES * a * s * b / t
    scores = np.where(np.asarray(flash_attention, dtype=bool), scores_flash, scores_std)
    sp = np.asarray(sequence_parallel, dtype=bool)
    rep = np.where(sp, replicated / t, replicated)
    rc = np.asarray(recompute)
    full = np.where(sp, e * sbh / t, e * sbh)
    flash = np.asarray(flash_attention, dtype=bool)
    scores_kept = np.where(rc == Recompute.SELECTIVE, np.where(flash, scores_flash, 0.0), scores)
    kept = rep + split + scores_kept
    return np.where(rc == Recompute.FULL, full, kept)


def routed_expert_activation_bytes(
    model: Model, tokens: Number, etp: Number, imbalance: Number, bytes_per_element: float, recompute: Number
) -> Number:
    """What a mixture-of-experts layer's routed experts keep for the backward pass on the busiest
    rank, for `tokens` routed tokens (c = tokens x k x imbalance copies): the permuted tokens sent
    and received (gathered over etp), the expert MLP's up-projection and activation outputs, the
    expert outputs to un-permute, and the fp32 router probabilities. Nothing under full
    recomputation (the layer's input is counted with the layer)."""
    e, h, f = bytes_per_element, model.hidden, model.expert_ffn_hidden
    gate = 2 if model.gated_mlp else 1
    copies = tokens * model.experts_per_token * imbalance
    kept = e * copies * (h * (2 + etp) + (gate + 1) * f) + 4.0 * tokens * model.experts  # fp32 probabilities
    return np.where(np.asarray(recompute) == Recompute.FULL, 0.0, kept)


def layers_in_flight(
    stage_layers: Number, pp: Number, vpp: Number, micro_batches: Number, schedule: Number, stage_index: Number
) -> Number:
    """Layer-micro-batches of activations that stage `stage_index` (holding `stage_layers`
    layers) keeps at its peak."""
    p, v, m, i = pp, vpp, micro_batches, stage_index
    per_stage = stage_layers
    gpipe = m * per_stage
    one_f_one_b = np.minimum(p - i, m) * per_stage
    # Megatron-LM interleaved warm-up: 2 (p - i - 1) + (v - 1) p chunk forwards, plus one.
    chunks = np.minimum(2 * (p - i - 1) + (v - 1) * p + 1, m * v)
    interleaved = chunks * stage_layers / v
    sched = np.asarray(schedule)
    # ZB-H1 keeps 1F1B's peak on the first stage (Qi et al. 2023 Sec. 3.1); the later stages hold
    # up to p micro-batches' inputs while their deferred weight gradients wait, still <= stage 0.
    zb_h1 = np.minimum(p, m) * per_stage
    return np.select(
        [sched == Schedule.GPIPE, sched == Schedule.INTERLEAVED, sched == Schedule.ZB_H1],
        [gpipe, interleaved, zb_h1],
        one_f_one_b,
    )


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes on one GPU (the fullest pipeline stage)."""

    # every property is a function of the same element's fields (`engines.distinct._lazy`)
    ELEMENTWISE_PROPERTIES: ClassVar[bool] = True

    weights_bytes: Number
    gradients_bytes: Number
    optimizer_bytes: Number
    activations_bytes: Number
    reserved_bytes: Number

    @property
    def total_bytes(self) -> Number:
        return (
            self.weights_bytes
            + self.gradients_bytes
            + self.optimizer_bytes
            + self.activations_bytes
            + self.reserved_bytes
        )

    def as_dict(self) -> dict[str, Number]:
        return {
            "weights": self.weights_bytes,
            "gradients": self.gradients_bytes,
            "optimizer": self.optimizer_bytes,
            "activations": self.activations_bytes,
            "reserved": self.reserved_bytes,
            "total": self.total_bytes,
        }


def zero_shards(dp: Number, zero_stage: Number) -> tuple[Number, Number, Number]:
    """Over how many ranks ZeRO shards the (weights, gradients, optimizer state): dp from stage
    3, 2 and 1 on, else 1 (Rajbhandari et al. 2020)."""
    z = np.asarray(zero_stage)
    return np.where(z >= 3, dp, 1), np.where(z >= 2, dp, 1), np.where(z >= 1, dp, 1)


def model_state_bytes(params: Number, dp: Number, zero_stage: Number, precision: str) -> tuple[Number, Number, Number]:
    """(weights, gradients, optimizer) bytes for `params` parameters under a ZeRO stage."""
    return sharded_state_bytes(params, zero_shards(dp, zero_stage), precision)


def sharded_state_bytes(
    params: Number, shards: tuple[Number, Number, Number], precision: str
) -> tuple[Number, Number, Number]:
    """`model_state_bytes` with the ZeRO `shards` (`zero_shards`) already known."""
    w, g, o = shards
    weights = params * weight_bytes_per_param(precision) / w
    grads = params * grad_bytes_per_param(precision) / g
    optim = params * OPTIMIZER_BYTES_PER_PARAM / o
    return weights, grads, optim
