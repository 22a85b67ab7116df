"""Hybrid Mamba-2 models (Nemotron-H): a Mamba-2 mixer's forward work on one TP rank, and one
layer of the mean of a hybrid pattern.

A Mamba-2 mixer (Dao & Gu 2024, "Transformers are SSMs", Sec. 7 and Fig. 6; Megatron-Core
megatron/core/ssm/mamba_mixer.py `MambaMixer`), with H heads of P channels (d_inner = H P), state
N, G groups of B and C, convolution width K, chunk Q, T = b s tokens, t = tp:

    in_proj    T x h  by  h x (2 H P + 2 G N + H)/t   column-parallel: z, x, B, C and dt
    conv1d     depthwise, K taps over the (H P + 2 G N)/t channels of x, B, C (causal_conv1d)
    SSD        the chunked scan, mamba_ssm's five Triton kernels (`ssd_kernels`)
    gated norm RMSNorm(y * silu(z)) over H P/t (`RMSNormGated`), one kernel
    out_proj   T x H P/t  by  H P/t x h                row-parallel

Megatron splits the heads and the groups over TP (in_proj column-parallel, out_proj
row-parallel): the mixer's TP communication is attention's, one all-reduce (or all-gather +
reduce-scatter with sequence parallelism) each way.

A hybrid layer holds one mixer (`specs.model`): a Mamba-2 mixer, self-attention or an MLP, each
behind one pre-norm and one residual add. `hybrid_layer_forward` prices the layer of the mean of
the pattern: each kind of work weighted by its share of the layers (`Model.hybrid_shares`), so l of
these layers cost what the pattern's layers cost together (exact for the whole model; a pipeline
stage is priced as l/p mean layers, not its own slice of the pattern: docs/model.md).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from shardwise.physics.layer_parts import LayerForward, MambaForward, block_elementwise_parts, gemm, kv_heads_held
from shardwise.specs import Model
from shardwise.specs._checks import Number

# The causal depthwise conv1d (with SiLU) and the RMSNorm: the mixer's memory-bound kernels (the
# gating by silu(z) runs in the chunk scan's epilogue, `mamba_forward`).
MAMBA_ELEMENTWISE_KERNELS = 2
# The SSD kernels' tensor-core rate as a fraction of the GPU's sustained 16-bit GEMM rate (unit:
# fraction; range 0.15-0.25): each of the five kernels is priced as a roofline, max(FLOPs at this
# rate, bytes at the HBM rate) + a launch (`ssd_kernels`). Fitted on ONE public H100 point: vLLM
# PR #27299 (microbenchmark on one H100, the mamba_ssm-derived Triton forward kernels "Original",
# 128 heads of 64, state 128, 1 group, the model's chunk 256): 1.26e7 tokens/s at 8192 tokens,
# 0.649 ms; 0.183 gives 0.649 ms, rounded to 0.18 (0.660 ms, 1.24e7 tokens/s). The same value gives
# 1.21e7 at 4096 tokens and 1.26e7 at 16384 against the PR's measured 1.21e7 and 1.29e7 (not
# fitted). (0.19 before the states passed between chunks were priced in 16 bits, `ssd_kernels`.)
SSD_GEMM_FRACTION = 0.18
# fp32 intermediates of the scan: the chunk states (H N P per chunk) and C B^T (G Q^2 per chunk)
SSD_FP32_BYTES = 4.0


def in_proj_width(model: Model) -> int:
    """z, x, B, C and dt: 2 H P + 2 G N + H (megatron/core/ssm/mamba_mixer.py `in_proj`)."""
    return 2 * model.mamba_inner + 2 * model.mamba_groups * model.mamba_state + model.mamba_heads


def ssd_kernels(model: Model, tokens: Number, tp: Number, e: float) -> tuple[tuple[Number, Number], ...]:
    """(FLOPs, bytes) of each of the chunked scan's five kernels on one TP rank (Dao & Gu 2024
    Sec. 6, the SSD algorithm with chunk Q; mamba_ssm/ops/triton/ssd_combined.py
    `_mamba_chunk_scan_combined_fwd`), per token, H/t heads of P, G/t groups of N:

        dA cumsum      read dt (e), write dt and its cumulative sum (fp32)
        chunk state    B^T x per chunk and head, 2 N P FLOPs; read x, B, dt, dA; write the
                       chunk's fp32 state (H N P per chunk: 4 H N P / Q bytes a token)
        state passing  read the fp32 states, write the states passed in 16 bits (the recurrence
                       between chunks; `_state_passing_fwd(..., out_dtype=C.dtype)`, mamba_ssm
                       v2.2.x, for the matmul that reads them)
        C B^T          per chunk and group, 2 Q N FLOPs; read B and C, write it fp32 (G Q a token)
        chunk scan     (C B^T o L) x within the chunk, 2 Q P, and C times the state passed in,
                       2 N P, per head; read x, C, C B^T, the 16-bit states, dt, dA; write y

    The state passing's own FLOPs (N P per chunk and head, 1/Q of a token's) are left out."""
    h, p, n, g, q = model.mamba_heads, model.mamba_head_dim, model.mamba_state, model.mamba_groups, model.mamba_chunk
    f32 = SSD_FP32_BYTES
    states = f32 * h * n * p / q
    passed = e * h * n * p / q  # the states passed between chunks, in the activations' 16 bits
    dt = 2 * f32 * h  # dt after softplus and its cumulative sum, fp32
    per_token = (
        (0.0, e * h + dt),
        (2.0 * h * n * p, e * (h * p + g * n) + dt + states),
        (0.0, states + passed),
        (2.0 * g * q * n, 2 * e * g * n + f32 * g * q),
        (h * (2.0 * q * p + 2 * n * p), e * (2 * h * p + g * n) + f32 * g * q + passed + dt),
    )
    return tuple((tokens * f / tp, tokens * b / tp) for f, b in per_token)


def ssd_backward_kernels(model: Model, tokens: Number, tp: Number, e: float) -> tuple[tuple[Number, Number], ...]:
    """(FLOPs, bytes) of each kernel of the chunked scan's backward on one TP rank
    (mamba_ssm/ops/triton/ssd_combined.py `_mamba_chunk_scan_combined_bwd`), per token: the
    forward's dA cumsum, C B^T, chunk states and state passing recomputed; dstates (C^T dout per
    chunk, 2 N P a head); the state passing backward (states and dstates read, both written in
    16 bits for the products that follow); dx (2 Q P + 2 N P a head); dB from the states
    (2 N P); dC (2 N P); d(C B^T) (2 Q P); the two C B^T backward products (2 Q N a group each);
    the stable ddA (2 Q P); the cumsum backward. Three products of 2 Q P and five of 2 N P per
    head against the forward's one and two: about 3x the forward's FLOPs. The gating's backward
    (`_chunk_scan_bwd_dz`, 6e H P a token) is among the mixer's memory-bound work, priced at twice
    the forward's (`mamba_forward`; docs/model.md checks the two against each other)."""
    h, p, n, g, q = model.mamba_heads, model.mamba_head_dim, model.mamba_state, model.mamba_groups, model.mamba_chunk
    f32 = SSD_FP32_BYTES
    x, bc = e * h * p, e * g * n  # x, dout or dx; B, C, dB or dC
    states = f32 * h * n * p / q
    dt = 2 * f32 * h
    cb = f32 * g * q
    qp, np_, qn = 2.0 * h * q * p, 2.0 * h * n * p, 2.0 * g * q * n
    recomputed = ((0.0, e * h + dt), (qn, 2 * bc + cb), (np_, x + bc + dt + states), (0.0, 2 * states))
    per_token = (
        *recomputed,
        (np_, bc + dt / 2 + x + states),  # dstates
        (0.0, 3 * states),  # state passing backward
        (qp + np_, 3 * x + bc + cb + dt + states / 2 + f32 * h),  # dx, ddt
        (np_, x + dt + states / 2 + 2 * bc),  # dB
        (np_, states / 2 + dt + x + 2 * bc),  # dC
        (qp, 2 * x + dt + cb),  # d(C B^T)
        (qn, 3 * bc + cb),  # dB += d(C B^T) C
        (qn, 3 * bc + cb),  # dC += d(C B^T)^T B
        (qp, 2 * x + dt + cb + f32 * h),  # stable ddA
        (0.0, 3 * dt),  # cumsum backward
    )
    return tuple((tokens * f / tp, tokens * b / tp) for f, b in per_token)


def ssd_flops(model: Model, tokens: Number, tp: Number) -> Number:
    """The chunked scan's FLOPs on one TP rank: 2 Q N a token per group (C B^T), 2 Q P + 4 N P per
    head (the chunk's output, its state, the output from the state passed in; `ssd_kernels`)."""
    return sum(f for f, _ in ssd_kernels(model, tokens, tp, 2.0))


def mamba_forward(
    model: Model,
    tokens: Number,
    tp: Number,
    e: float,
    weight_bytes: Number | None = None,
    share: Number = 1.0,
    batch: Number = 1,
) -> MambaForward:
    """One Mamba-2 mixer's forward work on `tokens` tokens of `batch` sequences, split by `tp`
    (module docstring), on Megatron-Core's training path (megatron/core/ssm/mamba_mixer.py
    `_ssm_training`: mamba_ssm's `mamba_split_conv1d_scan_combined` without its RMSNorm, then the
    mixer's own norm):

        conv1d      read x, B, C, write them convolved (causal_conv1d_fwd, SiLU fused)
        gating      the chunk scan multiplies by silu(z) in its epilogue: it reads z and writes
                    the ungated output beside the gated one (`_chunk_scan_fwd`, out and out_x)
        norm        the grouped RMSNorm reads and writes the gated output (one Triton kernel)

    and what training adds beyond the forward's kernels:

        recompute   `MambaSplitConv1dScanCombinedFn.backward` runs causal_conv1d_fwd again (it
                    saves zxbcdt, not the convolved xBC): the conv1d's bytes once more, one kernel
        copies      `rearrange(zxBCdt, "l b d -> b l d").contiguous()` before the scan and
                    `rearrange(y, "b l d -> l b d").contiguous()` after it copy the in_proj output
                    and the scan's output where a micro-batch holds more than one sequence (with
                    one, [s, 1, h] is already contiguous as [1, s, h]: no copy); in the backward the
                    in_proj's output gradient comes back permuted and is made contiguous for its
                    GEMMs: one copy of the in_proj width."""
    w = e if weight_bytes is None else weight_bytes
    inner = model.mamba_inner
    width = in_proj_width(model)
    conv_channels = inner + 2 * model.mamba_groups * model.mamba_state
    in_proj = gemm(tokens, width / tp, model.hidden, e, weight_bytes=w)
    out_proj = gemm(tokens, model.hidden, inner / tp, e, weight_bytes=w)
    conv = 2 * e * tokens * conv_channels / tp  # read x, B, C; write them convolved
    gating = 2 * e * tokens * inner / tp  # z read, the ungated output written (chunk scan's epilogue)
    norm = 2 * e * tokens * inner / tp  # the gated output read, the normalised one written
    several = np.asarray(batch) > 1
    copy_f = np.where(several, 2 * e * tokens * (width + inner) / tp, 0.0)
    copy_b = np.where(several, 2 * e * tokens * width / tp, 0.0)
    return MambaForward(
        in_proj,
        out_proj,
        ssd_kernels(model, tokens, tp, e),
        ssd_backward_kernels(model, tokens, tp, e),
        conv + gating + norm,
        share,
        recompute=(conv, 1.0),
        copies_forward=(copy_f, np.where(several, 2.0, 0.0)),
        copies_backward=(copy_b, np.where(several, 1.0, 0.0)),
    )


def hybrid_layer_forward(
    model: Model,
    twin: LayerForward,
    batch: Number,
    tp: Number,
    sequence_parallel: Number,
    e: float,
    tokens: Number,
    weight_bytes: Number | None = None,
) -> LayerForward:
    """The mean layer of a hybrid model's pattern on one TP rank: the attention work of `twin`
    (the model's layer as attention + MLP, `Model.transformer_twin`) weighted by the attention
    share, its MLP by the MLP share, a Mamba-2 mixer by the Mamba share; one pre-norm and one
    residual add per layer (half an attention + MLP layer's two), the MLP's activation and the
    attention's rotary embedding by their shares, the mixer's conv1d and gated norm by its."""
    m, a, p = model.hybrid_shares
    f = model.hybrid_mlp_width
    norms, residuals, activation, split = block_elementwise_parts(model, tokens, tp, sequence_parallel, e, f)
    kv_dim = kv_heads_held(model.kv_heads, tp) * model.head_dim
    rope = 0.0 if model.learned_positions else 2 * e * tokens * (model.q_dim + kv_dim) / tp
    mamba = mamba_forward(model, tokens, tp, e, weight_bytes, share=m, batch=batch)
    elementwise = 0.5 * (norms + residuals) * split + p * activation + a * rope + m * mamba.elementwise_bytes
    kernels = 2.0 + p + (0.0 if model.learned_positions else a) + m * MAMBA_ELEMENTWISE_KERNELS
    return replace(
        twin,
        elementwise_bytes=elementwise,
        elementwise_kernels=kernels,  # type: ignore[arg-type]
        has_mlp=p,
        eager_elementwise_bytes=None,
        attention_share=a,
        mamba=mamba,
    )


def hybrid_layer_activation_bytes(model: Model, standard, tokens: Number, tp: Number, sp: Number, e: float,
                                  recompute: Number, fp8_input_bytes: float) -> Number:  # fmt: skip
    """Activations the mean layer of a hybrid pattern keeps for its backward pass, one micro-batch
    on one GPU. `standard(ffn)` is `physics.memory_activations.layer_activation_bytes` of the
    model's attention + MLP twin with a dense MLP of width ffn: attention alone is standard(0), less
    one sublayer's norm input, linear input and dropout mask; the MLP alone is standard(f) - standard(0)
    plus that sublayer's replicated part. A Mamba-2 layer keeps, on Megatron-Core's default path
    (megatron/core/ssm/mamba_mixer.py `use_mem_eff_path`: mamba_ssm's
    `mamba_split_conv1d_scan_combined` with checkpoint_lvl 1, which recomputes the conv1d and the
    gated norm in the backward): the norm input and the in_proj input (replicated unless
    sequence-parallel), and split by TP the in_proj output (z, x, B, C, dt), the scan's ungated
    output (`out_x`), the RMSNorm's input (the gated output: Megatron-Core's `_ssm_training` norms
    after the fused function, `mamba_forward`) and out_proj's input (the norm's output; FP8 under
    Transformer Engine's FP8). Full recomputation keeps every kind's layer input alone, as
    `standard` does."""
    from shardwise.specs import Recompute

    m, a, p = model.hybrid_shares
    c = fp8_input_bytes if fp8_input_bytes else e
    drop = 1.0 if model.dropout else 0.0
    sp_split = np.where(np.asarray(sp, dtype=bool), 1.0 / np.asarray(tp, dtype=float), 1.0)
    one_sublayer = (e + c + drop) * tokens * model.hidden * sp_split
    attention = standard(0) - one_sublayer
    mlp = standard(model.hybrid_mlp_width) - standard(0) + one_sublayer
    inner = model.mamba_inner
    kept = e * (in_proj_width(model) + 2 * inner) + c * inner
    mamba = (e + c) * tokens * model.hidden * sp_split + tokens * kept / tp
    full = standard(model.hybrid_mlp_width)
    mean = a * attention + p * mlp + m * mamba
    return np.where(np.asarray(recompute) == Recompute.FULL, full, mean)
