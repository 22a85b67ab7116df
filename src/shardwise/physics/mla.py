"""One layer's forward work with multi-head latent attention (DeepSeek-V2 Sec. 2.1; Megatron-Core
`MLASelfAttention`), per TP rank: training, where the keys and values are expanded from the
latent, and decoding, which works on the cached latent (`physics.flops.layer_forward` calls it
for a model with `kv_lora_rank`).
"""

from __future__ import annotations

import numpy as np

from shardwise.physics.layer_parts import (
    ELEMENTWISE_KERNELS,
    ROPE_KERNELS,
    Gemm,
    LayerForward,
    block_elementwise_bytes,
    causal_share,
    dense_mlp_gemms,
    gemm,
    softmax_traffic_bytes,
)
from shardwise.specs import Model
from shardwise.specs._checks import Number


def mla_layer_forward(
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
    mlp_up, mlp_down = dense_mlp_gemms(model, tokens, f, t, e, w)
    heads_per_rank = batch * a / t
    scores = gemm(s_q, s_kv, d + r, e, heads_per_rank)
    context = gemm(s_q, v, s_kv, e, heads_per_rank)
    softmax_bytes = softmax_traffic_bytes(model, heads_per_rank * s_q * s_kv, e)
    flash_bytes = batch * e * (s_q * (qk + a * v) + s_kv * (qk + a * v)) / t  # Q, O; K, V read
    flash = Gemm(scores.flops + context.flops, flash_bytes)
    latent_norms = 2 * e * tokens * (ql + kl)
    rope = 2 * e * tokens * (a * r / t + r)  # the queries' and the shared key's rotary parts
    elementwise = block_elementwise_bytes(model, tokens, t, sequence_parallel, e, f) + latent_norms + rope
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
        causal_share(s_q, s_kv, cp),
        elementwise,
        kernels,
        e * tokens * h,
        extra=tuple(extra),
        has_mlp=np.asarray(f) > 0,
        cp=cp,
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
    """One decoded token per sequence through a latent-attention layer (see `mla_layer_forward`)."""
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
    mlp_up, mlp_down = dense_mlp_gemms(model, tokens, f, t, e, w)
    per_seq_heads = batch * heads
    scores = gemm(1, s_kv, kl + r, e, per_seq_heads)
    context = gemm(1, kl, s_kv, e, per_seq_heads)
    cache = batch * s_kv * (kl + r) * e_kv  # read once for all heads
    flash = Gemm(scores.flops + context.flops, cache + 2 * e * per_seq_heads * (kl + r))
    elementwise = block_elementwise_bytes(model, tokens, t, False, e, f) + 2 * e * tokens * (ql + kl + 2 * r)
    return LayerForward(
        q_proj,
        attn_out,
        mlp_up,
        mlp_down,
        scores,
        context,
        softmax_traffic_bytes(model, per_seq_heads * s_kv, e),
        flash,
        1.0,
        elementwise,
        ELEMENTWISE_KERNELS + ROPE_KERNELS + (2 if ql else 1),
        e * tokens * h,
        extra=tuple(extra),
        has_mlp=np.asarray(f) > 0,
    )
