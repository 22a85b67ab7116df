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
the logits (2 T h V / t) one forward pass is 24 b s l h^2 (1 + s/(6h) + V/(12 l h)). Eq. 3 of
Narayanan et al. 2021, 96 B s l h^2 (1 + s/(6h) + V/(16 l h)), is not 4x this: its layers run 4
passes (forward, recomputed forward, backward = 2x forward) but its logit term 3 (no recomputation),
so Eq. 3 / 4 leaves the logits at V/(16 l h); Korthikanti et al. 2022 App. A's 3-pass model count,
72 B s l h^2 (1 + s/(6h) + V/(12 l h)), is 3x this one forward.

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

from dataclasses import replace

import numpy as np

from shardwise.physics.layer_parts import (  # noqa: F401 (re-exported: the names the engines and tests read here)
    DROPOUT_MASK_BYTES,
    ELEMENTWISE_KERNELS,
    MEGATRON_YARN_ROPE_KERNELS,
    MEGATRON_YARN_ROPE_PASSES,
    ROPE_KERNELS,
    Gemm,
    LayerForward,
    block_elementwise_parts,
    causal_share,
    dense_mlp_gemms,
    engine_elementwise_kernels,
    gemm,
    input_gradient,
    kv_heads_held,
    softmax_traffic_bytes,
    weight_gradient,
)
from shardwise.physics.mamba import hybrid_layer_forward
from shardwise.physics.mla import mla_layer_forward
from shardwise.specs import Model
from shardwise.specs._checks import Number

# Vocab-parallel cross-entropy in fp32 (megatron/core/tensor_parallel/cross_entropy.py casts the
# logits with .float()): write and re-read fp32 copies (max, exp-sum, log-prob) and write the fp32
# gradient, about 12 bytes per logit besides reading the 16-bit logits. A project estimate.
CROSS_ENTROPY_FP32_BYTES_PER_LOGIT = 12.0


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
    yarn_rotary_eager: Number = False,
    engine_kernels: Number = 0,
    fused_residual_norms: Number = 0,
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
    path's rotary embedding moves what its eager ATen kernels move (`physics.stack`); where
    `yarn_rotary_eager` a YaRN model's (`Model.yarn_rope`) moves what Megatron-Core's unfused one moves
    (`physics.layer_parts.MEGATRON_YARN_ROPE_PASSES`).
    `engine_kernels` > 0: a serving engine's count of the kernels this dense attention layer
    launches in all (`Plan.serving_layer_kernels`), its element-wise kernels the rest
    (`layer_parts.engine_elementwise_kernels`); `fused_residual_norms`: how many of its two residual
    adds run in one kernel with the norm after them (read x and the residual, write both: 4e per
    element where an add and a norm apart move 3e + 2e), 0 to 2."""
    if model.is_hybrid:  # the mean layer of its pattern, from the attention + MLP twin's
        # (the MLP is the mean layer's own, `Model.hybrid_mlp_width`: an E layer's shared experts
        # are in it, its routed experts priced per E layer by `engines.moe`, so `ffn` is not read)
        twin = layer_forward(model.transformer_twin, batch, tp, sequence_parallel, bytes_per_element, q_len, kv_len,
                             weight_bytes, kv_bytes, cp, model.hybrid_mlp_width, document_len=document_len)  # fmt: skip
        tokens = batch * (model.seq_len if q_len is None else q_len)
        return hybrid_layer_forward(model, twin, batch, tp, sequence_parallel, bytes_per_element, tokens, weight_bytes)
    if model.kv_lora_rank:
        mla = mla_layer_forward(model, batch, tp, sequence_parallel, bytes_per_element, q_len, kv_len,
                                weight_bytes, cp, ffn, kv_bytes)  # fmt: skip
        return _packed(mla, document_len)
    s_q = model.seq_len if q_len is None else q_len
    s_kv = s_q if kv_len is None else kv_len
    h, a, d = model.hidden, model.heads, model.head_dim
    kv = kv_heads_held(model.kv_heads, tp)  # with tp above the KV heads (serving) one replica per rank
    f = model.ffn_hidden if ffn is None else ffn
    q = a * d  # = h unless the model sets head_dim apart
    e, t = bytes_per_element, tp
    tokens = batch * s_q

    w = e if weight_bytes is None else weight_bytes
    e_kv = e if kv_bytes is None else kv_bytes
    qkv = gemm(tokens, (q + 2 * kv * d) / t, h, e, weight_bytes=w)
    attn_out = gemm(tokens, h, q / t, e, weight_bytes=w)
    mlp_up, mlp_down = dense_mlp_gemms(model, tokens, f, t, e, w)
    heads_per_rank = batch * a / t
    scores = gemm(s_q, s_kv, d, e, heads_per_rank)
    context = gemm(s_q, d, s_kv, e, heads_per_rank)
    softmax_bytes = softmax_traffic_bytes(model, heads_per_rank * s_q * s_kv, e)
    flash_bytes = batch * (e * 2 * s_q * q + e_kv * 2 * s_kv * kv * d) / t  # Q, O; the K and V read
    flash = Gemm(scores.flops + context.flops, flash_bytes)
    # the last s_q of s_kv tokens (inference); with context parallelism each rank holds 1/cp of
    # every sequence in two balanced chunks, so it computes half of its s_q x s_kv rectangle
    causal_fraction = causal_share(s_q, s_kv, cp)
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
    if model.yarn_rope and not model.learned_positions and np.any(yarn_rotary_eager):
        on = np.asarray(yarn_rotary_eager, dtype=bool)
        unfused = MEGATRON_YARN_ROPE_PASSES * e * tokens * (q + kv * d) / t
        more = MEGATRON_YARN_ROPE_KERNELS - ROPE_KERNELS
        if on.ndim == 0:
            rope, kernels = unfused, kernels + more
        else:
            rope, kernels = np.where(on, unfused, rope), kernels + more * on
    if np.any(np.asarray(engine_kernels) > 0):
        kernels = engine_elementwise_kernels(engine_kernels, kernels)
    norms, residuals, activation, split = block_elementwise_parts(model, tokens, t, sequence_parallel, e, f)
    residuals = residuals - np.asarray(fused_residual_norms, dtype=float) * e * tokens * h
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
    if model.sliding_window:
        out = _windowed(out, model, batch, s_q, s_kv, e, e_kv, t, cp)
    return _packed(out, document_len)


def window_share(s_q: Number, s_kv: Number, window: Number, cp: Number = 1) -> Number:
    """The share of the s_q x s_kv score rectangle a causal kernel with a sliding window of
    `window` tokens computes: the queries are the last s_q of s_kv positions and position p
    (from 1) sees min(p, w) keys, so the rectangle holds S(s_kv) - S(s_kv - s_q) scores, with
    S(n) = n (n + 1) / 2 up to n = w and w (w + 1) / 2 + (n - w) w beyond (Beltagy et al. 2020,
    Sec. 3.1: O(n w) instead of O(n^2)). With w >= s_kv this is `causal_share`'s
    1 - (s_q - 1) / (2 s_kv). With context parallelism a rank's queries are spread over the whole
    sequence (two balanced chunks): the mean over all s_kv positions."""
    s_q, s_kv = np.asarray(s_q, dtype=float), np.asarray(s_kv, dtype=float)
    w = np.asarray(window, dtype=float)
    ring = np.asarray(cp) > 1

    def seen(n: Number) -> Number:
        return np.where(n <= w, n * (n + 1) / 2, w * (w + 1) / 2 + (n - w) * w)

    first = np.where(ring, 0.0, s_kv - s_q)
    queries = np.where(ring, s_kv, s_q)
    return (seen(s_kv) - seen(first)) / (queries * s_kv)


def _windowed(
    fwd: LayerForward, model: Model, batch: Number, s_q: Number, s_kv: Number, e: float, e_kv: Number,
    t: Number, cp: Number,
) -> LayerForward:  # fmt: skip
    """`fwd` as the mean of its full and sliding-window layers (`Model.sliding_share`): a windowed
    layer's fused kernel computes `window_share` of the score rectangle and reads the keys and
    values of at most w + s_q positions (a decoded token: the last w). The standard (unfused)
    path still multiplies the whole rectangle, masked (as the packed documents')."""
    w = model.sliding_window
    keys_read = np.minimum(np.asarray(s_kv, dtype=float), w + np.asarray(s_q, dtype=float) - 1)
    kv_dim = kv_heads_held(model.kv_heads, t) * model.head_dim
    flash_bytes = batch * (e * 2 * s_q * model.q_dim + e_kv * 2 * keys_read * kv_dim) / t
    return replace(
        fwd,
        sliding_share=model.sliding_share,
        window_fraction=window_share(s_q, s_kv, w, cp),
        window_flash=Gemm(fwd.flash.flops, flash_bytes),
        window_cut=w < np.asarray(s_kv),
    )


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
    share = length / s_kv * causal_share(length, length, 1)
    return replace(
        fwd,
        causal_fraction=np.where(packed, share, fwd.causal_fraction),
        document_len=np.where(packed, length, s_kv),
    )


def kv_cache_elements_per_token(model: Model, tp: Number) -> Number:
    """Elements one token keeps in the KV cache per layer on one TP rank: keys and values of its
    KV heads, 2 k d / t, at least one head's 2 d (tp above the KV heads replicates them:
    `kv_heads_held`); with multi-head latent attention the latent and the rotary key,
    kv_lora + r, whole on every TP rank (vLLM's and SGLang's MLA cache: one latent for all heads)."""
    if model.kv_lora_rank:
        return model.kv_lora_rank + model.rope_head_dim + 0.0 * np.asarray(tp)
    return 2 * kv_heads_held(model.kv_heads, tp) * model.head_dim / np.asarray(tp, dtype=float)


def kv_cache_tokens(model: Model, context: Number) -> Number:
    """Tokens a sequence of `context` tokens keeps in the KV cache of the model's mean layer: every
    token in a full-attention layer, the last `sliding_window` in a windowed one (`Model.sliding_share`;
    vLLM's hybrid KV-cache manager, SGLang's SWA pool, TensorRT-LLM's cyclic window and llama.cpp's
    SWA cache free what falls out of the window)."""
    if not model.sliding_window:
        return context
    share = model.sliding_share
    return (1.0 - share) * np.asarray(context) + share * np.minimum(context, model.sliding_window)


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
