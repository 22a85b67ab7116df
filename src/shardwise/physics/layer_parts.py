"""The parts `physics.flops` builds one layer's forward work from: a GEMM's FLOPs and bytes
(`Gemm`) and its two backward products, the record of a layer's work on one TP rank
(`LayerForward`), and what standard and latent attention (`physics.mla`) share: the dense MLP's
GEMMs, the softmax's traffic, the causal share of the score matrix, the element-wise kernels'
bytes (the inventory of Korthikanti et al. 2022 Sec. 4.1; see `physics.flops`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from shardwise.specs import Model
from shardwise.specs._checks import Number

DROPOUT_MASK_BYTES = 1.0  # Megatron-LM stores dropout masks as uint8 (Korthikanti et al. 2022 Sec. 4.1)
# Memory-bound kernels of one layer's forward: two norms, two fused bias-dropout-adds and the
# activation (Megatron-Core's fused kernels: megatron/core/fusions/fused_layer_norm.py,
# fused_bias_dropout.py, fused_bias_gelu.py / fused_bias_swiglu.py); rotary embeddings add one
# (the fused RoPE of megatron/core/models/common/embeddings/rope_utils.py). A project count.
ELEMENTWISE_KERNELS = 5
ROPE_KERNELS = 1
# A YaRN rotary embedding (`Model.yarn_rope`) under Megatron-Core (`Plan.yarn_rotary_eager`) runs the
# unfused `_apply_rotary_pos_emb_bshd` on q and on k (megatron/core/models/common/embeddings/rope_utils.py,
# core_v0.14.0 to 0.18): `_rotate_half` (chunk; neg of one half: read and write 1/2 each; cat: read and
# write 1), `* sin_` and `t * cos_` (read and write 1 each), their sum (read 2, write 1) and `torch.cat((t,
# t_pass))` with an empty t_pass (read and write 1): 12 passes over q and k forward, in their 16 bits, where
# the fused kernel makes 2. Kernels per tensor: those 6, and cos, sin, the mscale multiplies and the casts
# of the [s, 1, 1, d] frequencies (6, tiny). The backward by `physics.compute.BACKWARD_MEMORY_RATIO` (24
# passes; its autograd graph reads 17: the two multiplies, the neg, the chunk's cat, the sum of the two
# branches, and the two slices' zero-filled gradients and their sum).
MEGATRON_YARN_ROPE_PASSES = 12.0
MEGATRON_YARN_ROPE_KERNELS = 2 * 12
# A serving engine's own count of the kernels one dense layer launches (`Plan.serving_layer_kernels`,
# `engines.engine_kernels`) holds the layer's matrix products and its attention kernel, which the
# model prices apart (the QKV, output, up and down GEMMs, each with its own gap and any split-K
# reduction, and one fused attention kernel): the rest are its element-wise kernels.
PRICED_GEMM_KERNELS = 4
PRICED_ATTENTION_KERNELS = 1
# Context parallelism splits each sequence into 2 cp chunks and gives rank r chunks r and
# 2 cp - 1 - r, which balances the causal mask: every rank computes half of its s_q x s_kv
# rectangle (Megatron-LM `get_batch_on_this_cp_rank`, megatron/training/utils.py).
CP_CAUSAL_FRACTION = 0.5


def kv_heads_held(kv_heads: Number, tp: Number) -> Number:
    """KV heads a TP group of `tp` ranks holds, its replicas counted: the model's `kv_heads` split
    by tp, or with tp above them `tp` (serving only: each rank holds one KV head, each head
    replicated tp / kv_heads times; vLLM's QKVParallelLinear `num_kv_head_replicas`, its
    `ModelConfig.get_num_kv_heads` `max(1, total_num_kv_heads // tp)` heads per rank; SGLang's
    QKVParallelLinear the same; trtllm-bench's sizing `max(tp, num_kv_heads)` heads).
    A rank's K and V projections, KV cache and KV reads are those of `kv_heads_held / tp` heads.
    Training never runs tp above the KV heads (`specs.rules.kv_training_rule`): there it is kv_heads."""
    if type(kv_heads) is int and type(tp) is int:  # one plan: Python's max (numpy's value)
        return max(kv_heads, tp)
    return np.maximum(kv_heads, tp)


class Gemm(NamedTuple):
    """FLOPs and bytes of `batch` (m x k) @ (k x n) products; the shape is what the tile model of
    `physics.gemm` needs (m = 0: no shape known, a plain roofline). `a_bytes`/`b_bytes` are the
    bytes per element of the two operands, `out_bytes` what the epilogue moves per output element."""

    flops: Number
    bytes: Number
    m: Number = 0
    n: Number = 0
    k: Number = 0
    batch: Number = 1
    a_bytes: Number = 2.0
    b_bytes: Number = 2.0
    out_bytes: Number = 2.0

    @property
    def operand_bytes(self) -> Number:
        return self.batch * (self.a_bytes * self.m * self.k + self.b_bytes * self.k * self.n)


def gemm(m: Number, n: Number, k: Number, e: Number, batch: Number = 1, weight_bytes: Number | None = None) -> Gemm:
    """`batch` independent (m x k) @ (k x n) products: 2 m n k FLOPs each. The (k x n) operand is
    a weight stored with `weight_bytes` per element (default e: an activation, as in attention)."""
    w = e if weight_bytes is None else weight_bytes
    return Gemm(2.0 * batch * m * n * k, batch * (e * (m * k + m * n) + w * k * n), m, n, k, batch, e, w, e)


def input_gradient(g: Gemm) -> Gemm:
    """dX = dY W^T for a forward Y[m x n] = X[m x k] W[k x n]: an (m x n) @ (n x k) product."""
    return g._replace(n=g.k, k=g.n, a_bytes=g.a_bytes, b_bytes=g.b_bytes)


def weight_gradient(g: Gemm, accumulate_bytes: Number) -> Gemm:
    """dW = X^T dY: a (k x m) @ (m x n) product whose epilogue moves `accumulate_bytes` per
    weight element (8 for fp32 main_grad read and written, 2 for a 16-bit gradient written)."""
    flops = g.flops
    operand = g.batch * g.a_bytes * (g.m * g.k + g.m * g.n)
    return Gemm(
        flops,
        operand + g.batch * accumulate_bytes * g.k * g.n,
        g.k,
        g.n,
        g.m,
        g.batch,
        g.a_bytes,
        g.a_bytes,
        accumulate_bytes,
    )


@dataclass(frozen=True)
class MambaForward:
    """One Mamba-2 mixer's forward work on one TP rank, and the share of a mean layer it is."""

    in_proj: Gemm
    out_proj: Gemm
    ssd: tuple[tuple[Number, Number], ...]  # (FLOPs, bytes) of each SSD kernel (`ssd_kernels`)
    ssd_backward: tuple[tuple[Number, Number], ...]  # and of its backward (`ssd_backward_kernels`)
    elementwise_bytes: Number  # conv1d, the gating by z and the RMSNorm
    share: Number = 1.0
    # the training path's memory-bound work beyond the forward's kernels (`physics.mamba`): the
    # conv1d's forward redone in the backward, and the layout copies between [s, b, h] and
    # [b, s, h] where the micro-batch holds more than one sequence: (bytes, kernels) each pass
    recompute: tuple[Number, Number] = (0.0, 0.0)
    copies_forward: tuple[Number, Number] = (0.0, 0.0)
    copies_backward: tuple[Number, Number] = (0.0, 0.0)

    @property
    def ssd_flops(self) -> Number:
        return sum(f for f, _ in self.ssd)

    @property
    def flops(self) -> Number:
        return self.in_proj.flops + self.out_proj.flops + self.ssd_flops


@dataclass(frozen=True)
class LayerForward:
    """One layer's forward work on one TP rank (all fields broadcast together)."""

    qkv: Gemm
    attn_out: Gemm
    mlp_up: Gemm
    mlp_down: Gemm
    scores: Gemm  # Q K^T, materialised (standard attention)
    context: Gemm  # P V
    softmax_bytes: Number  # scale-mask-softmax (+ dropout) traffic on the score matrix
    flash: Gemm  # the same attention as one fused kernel that never writes the scores
    causal_fraction: Number  # share of the score matrix a causal flash kernel computes
    elementwise_bytes: Number  # norms, residual adds, dropouts, activation, RoPE
    elementwise_kernels: int
    tp_message_bytes: Number  # b s_q h e: what each TP all-reduce / gather carries
    # linear layers with no TP collective of their own (multi-head latent attention's down- and
    # key-value up-projections), after the four above
    extra: tuple[Gemm, ...] = ()
    has_mlp: Number = True  # False: the layer's MLP is not dense (a mixture of experts without shared experts)
    # the same element-wise work run as one eager PyTorch kernel per op (`physics.stack`; None: as fused)
    eager_elementwise_bytes: Number | None = None
    cp: Number = 1  # context-parallel ranks: the attention runs as cp ring steps (`physics.attention`)
    # packed sequences: the tokens of one document, within which attention runs causally (None: the
    # whole sequence is one document; `Plan.packed_document_len`)
    document_len: Number | None = None
    # a hybrid model's mean layer (`physics.mamba.hybrid_layer_forward`): the share of its layers
    # that are self-attention (weighting qkv, attn_out and the attention core), and its Mamba-2
    # mixer with the share of Mamba-2 layers (None: an ordinary layer); `has_mlp` is the MLP share
    attention_share: Number = 1.0
    mamba: MambaForward | None = None
    # sliding-window attention (`Model.sliding_window`): the share of the layers that are windowed,
    # the share of the score rectangle such a layer's fused kernel computes, and its fused kernel's
    # work and bytes (the keys and values it reads capped at the window; None: no window)
    sliding_share: Number = 0.0
    window_fraction: Number = 0.0
    window_flash: Gemm | None = None
    window_cut: Number = False  # the window ends inside the keys (w < s_kv)

    @property
    def mean_causal_fraction(self) -> Number:
        """The share of the score rectangle the fused kernel computes in the mean layer: full
        layers their causal share, windowed layers `window_fraction`."""
        return (1.0 - self.sliding_share) * self.causal_fraction + self.sliding_share * self.window_fraction

    @property
    def gemms(self) -> tuple[Gemm, ...]:
        return (self.qkv, self.attn_out, self.mlp_up, self.mlp_down)

    @property
    def mixer_share(self) -> Number:
        """The layers' share with a TP-split mixer (attention or Mamba-2): 1 for an ordinary layer."""
        return 1.0 if self.mamba is None else self.attention_share + self.mamba.share

    @property
    def model_flops(self) -> Number:
        """Megatron-convention FLOPs (full s_q x s_kv attention), as used by MFU; a hybrid's mean
        layer weights each mixer's by its share (the SSD scan's chunked FLOPs among the Mamba-2
        mixer's)."""
        if self.mamba is not None:
            a, mlp = self.attention_share, self.has_mlp
            attention = self.qkv.flops + self.attn_out.flops + self.scores.flops + self.context.flops
            extra = sum(g.flops for g in self.extra)
            return (
                a * attention
                + mlp * (self.mlp_up.flops + self.mlp_down.flops)
                + extra
                + self.mamba.share * self.mamba.flops
            )
        linears = sum(g.flops for g in (*self.gemms, *self.extra))
        return linears + self.scores.flops + self.context.flops


def dense_mlp_gemms(model: Model, tokens: Number, f: Number, t: Number, e: float, w: Number) -> tuple[Gemm, Gemm]:
    """The dense MLP's up-projection (two for a gated MLP) and down-projection, split by t."""
    gate = 2 if model.gated_mlp else 1
    return gemm(tokens, gate * f / t, model.hidden, e, weight_bytes=w), gemm(
        tokens, model.hidden, f / t, e, weight_bytes=w
    )


def softmax_traffic_bytes(model: Model, score_elems: Number, e: float) -> Number:
    """Scale-mask-softmax over the scores (read and write), and its dropout (read, write, mask)."""
    drop = DROPOUT_MASK_BYTES if model.dropout else 0.0
    return score_elems * (2 * e + ((2 * e + drop) if model.dropout else 0.0))


def causal_share(s_q: Number, s_kv: Number, cp: Number) -> Number:
    """The share of the s_q x s_kv score rectangle a causal kernel computes: the last s_q of s_kv
    tokens (inference); with context parallelism each rank holds 1/cp of every sequence in two
    balanced chunks, so it computes half of its rectangle."""
    return np.where(np.asarray(cp) > 1, CP_CAUSAL_FRACTION, 1.0 - (s_q - 1) / (2.0 * s_kv))


def block_elementwise_parts(
    model: Model, tokens: Number, t: Number, sequence_parallel: Number, e: float, f: Number
) -> tuple[Number, Number, Number, Number]:
    """(norm bytes, residual-add bytes, activation bytes, split) of a layer's element-wise work:
    two norms and two residual adds with their dropouts (split by t under sequence parallelism:
    the norm and residual bytes are multiplied by `split`) and the MLP's activation on its T x f/t
    output."""
    h = model.hidden
    drop = DROPOUT_MASK_BYTES if model.dropout else 0.0
    split = np.where(np.asarray(sequence_parallel, dtype=bool), 1.0 / t, 1.0)
    norms = 2 * (2 * e * tokens * h)
    residuals = 2 * ((3 * e + drop) * tokens * h)
    activation = ((2 if model.gated_mlp else 1) + 1) * e * tokens * f / t
    return norms, residuals, activation, split


def engine_elementwise_kernels(layer_kernels: Number, own: Number) -> Number:
    """The element-wise kernels of a dense layer whose engine launches `layer_kernels` in all
    (`PRICED_GEMM_KERNELS` and `PRICED_ATTENTION_KERNELS` of them priced apart); `own` (the
    stack's fused count) where `layer_kernels` is 0."""
    engine = np.maximum(np.asarray(layer_kernels, dtype=float) - PRICED_GEMM_KERNELS - PRICED_ATTENTION_KERNELS, 0.0)
    return np.where(np.asarray(layer_kernels) > 0, engine, own)


def block_elementwise_bytes(
    model: Model, tokens: Number, t: Number, sequence_parallel: Number, e: float, f: Number
) -> Number:
    """The fused kernels' bytes of `block_elementwise_parts`."""
    norms, residuals, activation, split = block_elementwise_parts(model, tokens, t, sequence_parallel, e, f)
    return (norms + residuals) * split + activation
