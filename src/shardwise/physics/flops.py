"""FLOPs and bytes moved by the operations of one transformer layer, per tensor-parallel rank.

Notation as in `specs.model`; b is the micro-batch (sequences), T = b * s_q tokens, t = tp,
e bytes per activation element. A GEMM of (M x K) by (K x N) does 2 M N K FLOPs and moves
e (M K + K N + M N) bytes (inputs and output, once each).

Forward GEMMs of a Megatron-LM layer (Shoeybi et al. 2019, Fig. 3; Narayanan et al. 2021 Eq. 3):

    QKV        T x h  by  h x (q + 2 k d)/t        (k = a for multi-head attention; q = a d = h
                                                   unless the model sets d apart)
    scores     (b a/t) batches of s_q x d by d x s_kv
    context    (b a/t) batches of s_q x s_kv by s_kv x d
    attn out   T x q/t by q/t x h
    MLP up     T x h  by  h x f/t   (x 2 for a gated MLP)
    MLP down   T x f/t by f/t x h

For GPT (k = a, f = 4h) the layer is 24 T h^2 / t + 4 b s^2 h / t FLOPs, so with l layers and
the logits (2 T h V / t) one forward pass is 24 b s l h^2 (1 + s/(6h) + V/(12 l h)): Eq. 3 of
Narayanan et al. 2021 divided by its factor 4 (forward, backward = 2x forward, recomputation).

Memory-bound traffic (bytes read + written) of the other kernels, following the activation
inventory of Korthikanti et al. 2022 Sec. 4.1 (LayerNorm 4sbh, dropout masks sbh, softmax and
its dropout 5as^2b): LayerNorm/RMSNorm read and write T h e each; a fused bias-dropout-add
reads two T h tensors, writes one and a 1-byte mask; bias+GeLU reads and writes T f/t
(SwiGLU reads 2 T f/t); the fused scale-mask-softmax reads and writes each score, its dropout
reads, writes and stores a 1-byte mask. Without sequence parallelism the norms, residual adds
and hidden dropouts are replicated on every TP rank; with it they are split by t
(Korthikanti et al. 2022 Sec. 4.2.2).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
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
# Context parallelism splits each sequence into 2 cp chunks and gives rank r chunks r and
# 2 cp - 1 - r, which balances the causal mask: every rank computes half of its s_q x s_kv
# rectangle (Megatron-LM `get_batch_on_this_cp_rank`, megatron/training/utils.py).
CP_CAUSAL_FRACTION = 0.5
# Vocab-parallel cross-entropy in fp32 (megatron/core/tensor_parallel/cross_entropy.py casts the
# logits with .float()): write and re-read fp32 copies (max, exp-sum, log-prob) and write the fp32
# gradient, about 12 bytes per logit besides reading the 16-bit logits. A project estimate.
CROSS_ENTROPY_FP32_BYTES_PER_LOGIT = 12.0


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

    @property
    def gemms(self) -> tuple[Gemm, ...]:
        return (self.qkv, self.attn_out, self.mlp_up, self.mlp_down)

    @property
    def model_flops(self) -> Number:
        """Megatron-convention FLOPs (full s_q x s_kv attention), as used by MFU."""
        linears = sum(g.flops for g in (*self.gemms, *self.extra))
        return linears + self.scores.flops + self.context.flops


def layer_forward(
    model: Model,
    batch: Number,
    tp: Number,
    sequence_parallel: Number,
    bytes_per_element: float,
    q_len: Number | None = None,
    kv_len: Number | None = None,
    weight_bytes: Number | None = None,
    kv_bytes: Number | None = None,
    cp: Number = 1,
    ffn: Number | None = None,
    eager: Number = False,
    eager_rotary: Number = False,
    document_len: Number = 0,
) -> LayerForward:
    """Forward work of one layer for `batch` sequences of `q_len` new tokens attending to
    `kv_len` tokens (training: both equal the model's sequence length). `document_len` > 0
    (training, packed sequences: `Plan.packed_document_len`) splits each sequence into documents
    of that many tokens, each attending causally to itself alone (Transformer Engine's THD
    attention with cu_seqlens): the fused kernel computes s / L triangles of L x L instead of one
    of s x s, a share L / s of the work, at the efficiency of L-token calls; the standard
    (unfused) path still multiplies the whole s x s score matrix, masked block-diagonally. Inference may store the
    weights (`weight_bytes` per element) and the KV cache (`kv_bytes`) narrower than activations.
    `ffn` is the width of the layer's dense, TP-split MLP (default the model's; a mixture-of-experts
    layer passes its shared experts' width, 0 without them: `physics.moe` prices the experts).
    Where `eager` (a stack running element-wise work as eager kernels) the same work's eager bytes
    are counted too (`eager_elementwise_bytes`; None otherwise); where `eager_rotary` the fused
    path's rotary embedding moves what its eager ATen kernels move (`physics.stack`)."""
    if model.kv_lora_rank:
        mla = _mla_layer_forward(model, batch, tp, sequence_parallel, bytes_per_element, q_len, kv_len,
                                 weight_bytes, cp, ffn, kv_bytes)  # fmt: skip
        return _packed(mla, document_len)
    s_q = model.seq_len if q_len is None else q_len
    s_kv = s_q if kv_len is None else kv_len
    h, a, kv, d = model.hidden, model.heads, model.kv_heads, model.head_dim
    f = model.ffn_hidden if ffn is None else ffn
    q = a * d  # = h unless the model sets head_dim apart
    e, t = bytes_per_element, tp
    tokens = batch * s_q

    w = e if weight_bytes is None else weight_bytes
    e_kv = e if kv_bytes is None else kv_bytes
    qkv = gemm(tokens, (q + 2 * kv * d) / t, h, e, weight_bytes=w)
    attn_out = gemm(tokens, h, q / t, e, weight_bytes=w)
    mlp_up, mlp_down = _mlp_gemms(model, tokens, f, t, e, w)
    heads_per_rank = batch * a / t
    scores = gemm(s_q, s_kv, d, e, heads_per_rank)
    context = gemm(s_q, d, s_kv, e, heads_per_rank)
    softmax_bytes = _softmax_bytes(model, heads_per_rank * s_q * s_kv, e)
    flash_bytes = batch * (e * 2 * s_q * q + e_kv * 2 * s_kv * kv * d) / t  # Q, O; the K and V read
    flash = Gemm(scores.flops + context.flops, flash_bytes)
    # the last s_q of s_kv tokens (inference); with context parallelism each rank holds 1/cp of
    # every sequence in two balanced chunks, so it computes half of its s_q x s_kv rectangle
    causal_fraction = _causal_fraction(s_q, s_kv, cp)
    rope = 0.0 if model.learned_positions else 2 * e * tokens * (q + kv * d) / t
    kernels = ELEMENTWISE_KERNELS + (0 if model.learned_positions else ROPE_KERNELS)
    if np.any(eager_rotary) and not model.learned_positions:
        from shardwise.physics.stack import COMPILED_COMPLEX_ROPE_KERNELS, EAGER_ROPE_BYTES_PER_ELEMENT

        on = np.asarray(eager_rotary, dtype=bool)
        aten = EAGER_ROPE_BYTES_PER_ELEMENT * tokens * (q + kv * d) / t
        compiled = ELEMENTWISE_KERNELS + COMPILED_COMPLEX_ROPE_KERNELS
        if on.ndim == 0:
            rope, kernels = aten, compiled
        else:
            rope, kernels = np.where(on, aten, rope), np.where(on, compiled, kernels)
    norms, residuals, activation, split = _block_elementwise_parts(model, tokens, t, sequence_parallel, e, f)
    elementwise = (norms + residuals) * split + activation + rope
    eager_bytes = None
    if np.any(eager):
        from shardwise.physics.stack import eager_elementwise_bytes

        rope_width = 0.0 if model.learned_positions else q + kv * d
        # LayerNorm is one ATen kernel in eager PyTorch too (F.layer_norm); RMSNorm is composed of ops
        rms = 1.0 if model.rmsnorm else 0.0
        eager_bytes = eager_elementwise_bytes(
            rms * norms / (2 * e) * split,  # elements through the norms (a fused norm moves 2e each)
            tokens * rope_width / t,
            activation,
            (residuals + (1.0 - rms) * norms) * split,
            model.gated_mlp,
        )
    out = LayerForward(
        qkv,
        attn_out,
        mlp_up,
        mlp_down,
        scores,
        context,
        softmax_bytes,
        flash,
        causal_fraction,
        elementwise,
        kernels,
        e * tokens * h,
        has_mlp=np.asarray(f) > 0,
        eager_elementwise_bytes=eager_bytes,
        cp=cp,
    )
    return _packed(out, document_len)


def _packed(fwd: LayerForward, document_len: Number) -> LayerForward:
    """`fwd` of sequences packed with documents of `document_len` tokens (> 0; 0: as it is): the
    fused kernel computes each document's causal L x L triangle, L / s of the s x s rectangle's
    work at L x L's causal share (`layer_forward`)."""
    doc = np.asarray(document_len)
    if not np.any(doc > 0):
        return fwd
    s_q, s_kv = fwd.scores.m, fwd.scores.n
    packed = doc > 0
    length = np.where(packed, np.minimum(doc, s_q), s_q)
    share = length / s_kv * _causal_fraction(length, length, 1)
    return replace(
        fwd,
        causal_fraction=np.where(packed, share, fwd.causal_fraction),
        document_len=np.where(packed, length, s_kv),
    )


def _mla_decode_forward(
    model: Model,
    batch: Number,
    tp: Number,
    e: float,
    kv_len: Number | None,
    weight_bytes: Number | None,
    ffn: Number | None,
    kv_bytes: Number | None,
) -> LayerForward:
    """One decoded token per sequence through a latent-attention layer (see `_mla_layer_forward`)."""
    s_kv = 1 if kv_len is None else kv_len
    h, a, d, r, v = model.hidden, model.heads, model.head_dim, model.rope_head_dim, model.v_head_dim
    ql, kl = model.q_lora_rank, model.kv_lora_rank
    f = model.ffn_hidden if ffn is None else ffn
    t, tokens = tp, batch
    w = e if weight_bytes is None else weight_bytes
    e_kv = e if kv_bytes is None else kv_bytes
    heads = a / t
    extra = [
        gemm(tokens, kl + r, h, e, weight_bytes=w),  # the new token's latent and rotary key
        gemm(tokens, kl, d, e, batch=heads, weight_bytes=w),  # queries into the latent space
        gemm(tokens, v, kl, e, batch=heads, weight_bytes=w),  # outputs out of it
    ]
    if ql:
        extra.insert(0, gemm(tokens, ql, h, e, weight_bytes=w))
    q_proj = gemm(tokens, a * (d + r) / t, ql or h, e, weight_bytes=w)
    attn_out = gemm(tokens, h, a * v / t, e, weight_bytes=w)
    mlp_up, mlp_down = _mlp_gemms(model, tokens, f, t, e, w)
    per_seq_heads = batch * heads
    scores = gemm(1, s_kv, kl + r, e, per_seq_heads)
    context = gemm(1, kl, s_kv, e, per_seq_heads)
    cache = batch * s_kv * (kl + r) * e_kv  # read once for all heads
    flash = Gemm(scores.flops + context.flops, cache + 2 * e * per_seq_heads * (kl + r))
    elementwise = _block_elementwise_bytes(model, tokens, t, False, e, f) + 2 * e * tokens * (ql + kl + 2 * r)
    return LayerForward(
        q_proj,
        attn_out,
        mlp_up,
        mlp_down,
        scores,
        context,
        _softmax_bytes(model, per_seq_heads * s_kv, e),
        flash,
        1.0,
        elementwise,
        ELEMENTWISE_KERNELS + ROPE_KERNELS + (2 if ql else 1),
        e * tokens * h,
        extra=tuple(extra),
        has_mlp=np.asarray(f) > 0,
    )


def kv_cache_elements_per_token(model: Model, tp: Number) -> Number:
    """Elements one token keeps in the KV cache per layer on one TP rank: keys and values of its
    KV heads, 2 k d / t; with multi-head latent attention the latent and the rotary key,
    kv_lora + r, whole on every TP rank (vLLM's and SGLang's MLA cache: one latent for all heads)."""
    if model.kv_lora_rank:
        return model.kv_lora_rank + model.rope_head_dim + 0.0 * np.asarray(tp)
    return 2 * model.kv_heads * model.head_dim / np.asarray(tp, dtype=float)


def _mlp_gemms(model: Model, tokens: Number, f: Number, t: Number, e: float, w: Number) -> tuple[Gemm, Gemm]:
    """The dense MLP's up-projection (two for a gated MLP) and down-projection, split by t."""
    gate = 2 if model.gated_mlp else 1
    return gemm(tokens, gate * f / t, model.hidden, e, weight_bytes=w), gemm(
        tokens, model.hidden, f / t, e, weight_bytes=w
    )


def _softmax_bytes(model: Model, score_elems: Number, e: float) -> Number:
    """Scale-mask-softmax over the scores (read and write), and its dropout (read, write, mask)."""
    drop = DROPOUT_MASK_BYTES if model.dropout else 0.0
    return score_elems * (2 * e + ((2 * e + drop) if model.dropout else 0.0))


def _causal_fraction(s_q: Number, s_kv: Number, cp: Number) -> Number:
    """The share of the s_q x s_kv score rectangle a causal kernel computes: the last s_q of s_kv
    tokens (inference); with context parallelism each rank holds 1/cp of every sequence in two
    balanced chunks, so it computes half of its rectangle."""
    return np.where(np.asarray(cp) > 1, CP_CAUSAL_FRACTION, 1.0 - (s_q - 1) / (2.0 * s_kv))


def _block_elementwise_parts(
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


def _block_elementwise_bytes(
    model: Model, tokens: Number, t: Number, sequence_parallel: Number, e: float, f: Number
) -> Number:
    """The fused kernels' bytes of `_block_elementwise_parts`."""
    norms, residuals, activation, split = _block_elementwise_parts(model, tokens, t, sequence_parallel, e, f)
    return (norms + residuals) * split + activation


def _mla_layer_forward(
    model: Model,
    batch: Number,
    tp: Number,
    sequence_parallel: Number,
    e: float,
    q_len: Number | None,
    kv_len: Number | None,
    weight_bytes: Number | None,
    cp: Number,
    ffn: Number | None,
    kv_bytes: Number | None = None,
) -> LayerForward:
    """A layer with multi-head latent attention (DeepSeek-V2 Sec. 2.1; Megatron-Core
    `MLASelfAttention`), per TP rank, with d = head_dim, r = rope_head_dim, v = v_head_dim:

        query down   T x h by h x q_lora           (replicated on every TP rank; absent without a
        query up     T x q_lora by q_lora x a(d+r)/t   query latent: one T x h by h x a(d+r)/t)
        KV down      T x h by h x (kv_lora + r)    (replicated)
        KV up        T x kv_lora by kv_lora x a(d+v)/t
        scores       (b a/t) batches of s_q x (d+r) by (d+r) x s_kv;  context: s_q x s_kv by s_kv x v
        attn out     T x a v/t by a v/t x h

    In training the keys and values are expanded from the latent, so the attention core is
    multi-head attention with a query/key dimension of d + r and a value dimension of v. The two
    latent RMSNorms read and write their latents.

    Decoding (one new token per sequence) works on the cached latent instead (DeepSeek-V2
    Sec. 2.1.2's absorbed projections, as vLLM's and SGLang's MLA decode and FlashMLA run it):
    each head's query is multiplied into the latent space (d x kv_lora per head) and its output
    out of it (kv_lora x v), so attention reads each sequence's cache of kv_lora + r elements per
    token once for all heads: scores (b a/t) batches of 1 x (kv_lora + r) by (kv_lora + r) x s_kv,
    context 1 x s_kv by s_kv x kv_lora."""
    s_q = model.seq_len if q_len is None else q_len
    if np.ndim(s_q) == 0 and s_q == 1:
        return _mla_decode_forward(model, batch, tp, e, kv_len, weight_bytes, ffn, kv_bytes)
    s_kv = s_q if kv_len is None else kv_len
    h, a, d, r, v = model.hidden, model.heads, model.head_dim, model.rope_head_dim, model.v_head_dim
    ql, kl = model.q_lora_rank, model.kv_lora_rank
    f = model.ffn_hidden if ffn is None else ffn
    t, tokens = tp, batch * s_q
    w = e if weight_bytes is None else weight_bytes
    qk = a * (d + r)
    extra = [gemm(tokens, kl + r, h, e, weight_bytes=w), gemm(tokens, a * (d + v) / t, kl, e, weight_bytes=w)]
    if ql:
        extra.insert(0, gemm(tokens, ql, h, e, weight_bytes=w))
        q_proj = gemm(tokens, qk / t, ql, e, weight_bytes=w)
    else:
        q_proj = gemm(tokens, qk / t, h, e, weight_bytes=w)
    attn_out = gemm(tokens, h, a * v / t, e, weight_bytes=w)
    mlp_up, mlp_down = _mlp_gemms(model, tokens, f, t, e, w)
    heads_per_rank = batch * a / t
    scores = gemm(s_q, s_kv, d + r, e, heads_per_rank)
    context = gemm(s_q, v, s_kv, e, heads_per_rank)
    softmax_bytes = _softmax_bytes(model, heads_per_rank * s_q * s_kv, e)
    flash_bytes = batch * e * (s_q * (qk + a * v) + s_kv * (qk + a * v)) / t  # Q, O; K, V read
    flash = Gemm(scores.flops + context.flops, flash_bytes)
    latent_norms = 2 * e * tokens * (ql + kl)
    rope = 2 * e * tokens * (a * r / t + r)  # the queries' and the shared key's rotary parts
    elementwise = _block_elementwise_bytes(model, tokens, t, sequence_parallel, e, f) + latent_norms + rope
    kernels = ELEMENTWISE_KERNELS + ROPE_KERNELS + (2 if ql else 1)
    return LayerForward(
        q_proj,
        attn_out,
        mlp_up,
        mlp_down,
        scores,
        context,
        softmax_bytes,
        flash,
        _causal_fraction(s_q, s_kv, cp),
        elementwise,
        kernels,
        e * tokens * h,
        extra=tuple(extra),
        has_mlp=np.asarray(f) > 0,
        cp=cp,
    )


def logits_forward(
    model: Model,
    batch: Number,
    tp: Number,
    bytes_per_element: float,
    q_len: Number | None = None,
    weight_bytes: Number | None = None,
) -> Gemm:
    """Output projection T x h by h x V/t (Narayanan et al. 2021: 2 b s h V per forward pass)."""
    tokens = batch * (model.seq_len if q_len is None else q_len)
    return gemm(tokens, model.vocab / tp, model.hidden, bytes_per_element, weight_bytes=weight_bytes)


def cross_entropy_bytes(model: Model, batch: Number, tp: Number, bytes_per_element: float) -> Number:
    """Vocab-parallel cross-entropy in fp32: read the logits, write and re-read fp32 copies
    (max, exp-sum, log-prob), and write the fp32 gradient: about (e + 12) bytes per logit."""
    return (bytes_per_element + CROSS_ENTROPY_FP32_BYTES_PER_LOGIT) * batch * model.seq_len * model.vocab / tp
