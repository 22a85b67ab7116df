"""How fast a fused attention kernel runs on one GPU, relative to its GEMMs: FlashAttention-2
(the flash-attn package, also as Transformer Engine's FlashAttention backend, "te-flash2", which
Megatron-Core runs with NVTE_FUSED_ATTN=0; PyTorch SDPA's copy; ROCm's AOTriton), forward and backward, the
precision attention runs in, and PyTorch's eager ring bookkeeping under context parallelism.
`physics.compute.layer_times` prices a layer's attention with these; `physics.attention` holds
the fused kernel's ramp below its plateau.
"""

from __future__ import annotations

import numpy as np

from shardwise.physics import attention_flash34 as fa34
from shardwise.physics.kernels import memory_s
from shardwise.physics.layer_parts import LayerForward
from shardwise.specs import Gpu
from shardwise.specs._checks import Number, SpecError
from shardwise.specs.hardware import is_narrow
from shardwise.specs.plan_choices import FLASH2_KERNELS

# A fused attention kernel's forward plateau (long, non-causal sequences; `physics.attention` prices
# the ramp below it) relative to a large GEMM: cuDNN's fused attention 595-617 TFLOP/s on H100 SXM5
# against its MAMF 794.5 (Shah et al. 2024, Fig. 4): 0.75-0.78, taken 0.75 (unit: fraction; range
# 0.72-0.78). FlashAttention-2 where a GPU carries no `flash2_efficiency` of its own takes it too.
# (It was first read from Dao 2023's "50-73 % of A100 peak forward vs ~87 % for a large GEMM"; the
# 50 % are short and causal shapes, which the ramp now prices: FA2's A100 plateau, 73 % of peak
# against MAMF's 86.9 %, is 0.84, the A100 presets' `flash2_efficiency`.) Its backward recomputes the
# scores and does 5 GEMM-sized products against 2 forward (Dao 2023, Sec. 3.1.2): 2.5x the FLOPs,
# run at up to 63 % of peak against the forward's 73 % (Dao 2023, Sec. 4.1), so 2.5 x 73/63 =
# 2.9x the forward's time.
FLASH_RELATIVE_EFFICIENCY = 0.75
FLASH_BACKWARD_RATIO = 2.5 * 73.0 / 63.0
# PyTorch SDPA's flash backend ("sdpa-flash2") runs PyTorch's own build of FlashAttention-2
# (aten/src/ATen/native/transformers/cuda/flash_attn), slower on Hopper than the flash-attn
# package whose speeds `flash2_efficiency` carries (Shah et al. 2024, Fig. 4-5). Its speed as a
# fraction of upstream FlashAttention-2's at the same shape, H100 SXM5, BF16, head dim 128:
# - forward (unit: fraction; range 0.78-0.90): SDPA's flash forward, non-causal, batch 128 x 8
#   heads, 287, 293, 298, 288, 304 TFLOP/s at 1k-16k tokens (pytorch/benchmark PR #2296,
#   tritonbench flash_attention, commit d5f0a12) against FA2's 350, 362, 368, 370, 370: 0.78-0.82;
#   1 x 24 heads x 4608 tokens, 329 TFLOP/s (pytorch/pytorch#142132, tritonbench, PyTorch 2.6
#   nightly) against FA2's ~368 at 4k: 0.89. Taken 0.82.
# - backward (unit: fraction; range 0.60-0.95): SDPA's flash backward at Llama-3-8B training
#   shapes (32 heads, head dim 128, causal), 183 TFLOP/s (pytorch/pytorch#135431, H100) against
#   upstream FA2's causal backward modelled at 260-280 (322 TFLOP/s non-causal plateau x
#   `physics.attention.CAUSAL_PLATEAU` x its ramp at 4-8k): 0.65-0.70; huggingface/transformers
#   PR #48163 measures cuDNN's SDPA 1.7-2.3x faster than SDPA's flash for Hopper training shapes
#   (forward + backward), where cuDNN runs ~1.6x upstream FA2 (Shah et al. 2024: 595-617 vs 370
#   forward, 516 vs 322 backward): SDPA flash at 0.70-0.94 of upstream, with the forward above a
#   backward of 0.67-0.99. Taken 0.70.
# Applied where FA2 runs below the fused kernels (a GPU whose own `flash2_efficiency` is below
# FLASH_RELATIVE_EFFICIENCY: Hopper, Blackwell by assumption); on Ampere SDPA's copy and upstream run
# the same sm80 kernels (none of the figures above is an Ampere one), factor 1.
SDPA_FLASH_FORWARD_FRACTION = 0.82
SDPA_FLASH_BACKWARD_FRACTION = 0.70
# On ROCm SDPA's flash backend is AOTriton (`Gpu.sdpa_flash_backend` "aotriton"), not a copy of the
# kernels whose speed `flash2_efficiency` carries there (ROCm's CK FlashAttention-2, the flash-attn
# package's ROCm build). Its speed as a fraction of CK's at the same shape (unit: fraction):
# - backward (range 0.45-0.60): AOTriton's own operator tuning database (ROCm/aotriton tag 0.11b,
#   v3python/rules/op_database.sqlite3, table FLASH$op_attn_bwd, gpu gfx942_mod0: MI300X) times each
#   backward backend at bf16, head dim 128, no dropout or bias; its TFLOPS column is the forward's
#   4 b h s^2 d over the backward's time (test/mptune/flash/db_benchmark.py), causal or not. The
#   Triton kernels (backend 0, split dK/dV and dQ, what 0.10b runs: its AITER assembly backend
#   came in 0.11b) give 53.6 / 62.4 / 44.9 / 60.5 causal and 42.6 / 44.9 / 43.4 / 45.7
#   non-causal at 1k / 2k / 4k / 8k tokens: 18.2 ms per Llama-3-8B layer (32 heads) causal at 8k
#   where `mi300x`'s CK backward (194-206 TFLOP/s non-causal at 16k, ROCm/flash-attention#142) with
#   the causal ramp of `physics.attention` takes 8.1: AOTriton / CK 0.60 / 0.56 / 0.35 / 0.45
#   causal, 0.67 / 0.64 / 0.58 / 0.60 non-causal (tests/test_rocm.py recomputes them). The tuner
#   times 8 x 12 heads, but from 4k tokens 3 x 4 and, causal, 2 x 2 (test/optune_flash.py, to fit
#   the memory): the causal 4k and 8k cells run a dQ grid of 256-512 workgroups on 304 CUs, a
#   training call's 32 heads 8x more. Taken: the 8k non-causal cell (12 heads, 0.60) times what
#   the mask costs AOTriton beyond CK's ramp where the grids are full (1k, 2k: 0.90, 0.88): 0.53.
#   The database is 0.11b's (Triton compiler of 2025-08-05); the pytorch/ao MI300X rows ran 0.10b
#   (PyTorch 2.9.0.dev20250811; compiler of 2025-05-21), same kernels. PyTorch 2.5's nightly ran
#   it at 19.9 TFLOP/s (pytorch/pytorch#135431, before 0.7b).
# - forward: no public figure for AOTriton's Triton forward on MI300X was found; taken 1 (CK's
#   speed), range 0.5-1.
# AOTriton 0.11b (pytorch/pytorch PR #161754, 2025-08-29) dispatches AITER's assembly backward on
# gfx942 (backend 2 in the database: 176-180 at 8k, about 3x the Triton kernels), "over 500 TFLOPS
# training performance" by its release notes: builds with it run faster than this.
AOTRITON_FORWARD_FRACTION = 1.0
AOTRITON_BACKWARD_FRACTION = 0.53
# PyTorch SDPA's memory-efficient backend ("sdpa-mem-efficient": xFormers' CUTLASS kernels, which SDPA
# runs from sm50 where its flash backend cannot, sdp_utils.cpp check_mem_efficient_hardware_support;
# `requests.attention` picks it before sm80): its speed as a fraction of FlashAttention-2's at the
# fused kernels' plateau (unit: fraction). No V100 figure was found; A100 fp16 ones carried over:
# xFormers' CUTLASS forward 5% slower than FlashAttention (1) on average and its backward 55% slower
# (facebookresearch/xformers PR #362, 2022-08-10, the kernels SDPA took), and FlashAttention-2 "around
# 2x" FlashAttention's speed (Dao 2023, abstract; 1.7-3.0x in its Fig. 4-7): forward 0.95 / 2 = 0.48
# (range 0.32-0.56), backward 1 / 1.55 / 2 = 0.32 (range 0.21-0.38).
MEM_EFFICIENT_FORWARD_FRACTION = 0.95 / 2.0
MEM_EFFICIENT_BACKWARD_FRACTION = 1.0 / 1.55 / 2.0
# FlashAttention-2's plateau against the head dimension on Hopper (`Gpu.gemm_kernels` "sm90"), as a
# fraction of its head-dim-128 speed, which `flash2_efficiency` carries (unit: fraction). Shah et al.
# 2024 (FlashAttention-3) Fig. 4 (forward) and Fig. 5 (backward), H100 SXM5, BF16, the flash-attn
# package's FA2, batch x length = 16k tokens, hidden 2048: forward non-causal 324 / 370 / 326 TFLOP/s
# at head dim 64 / 128 / 256 (16k tokens; 321 / 368 / 323 at 4k), causal 299 / 335 / 298: 0.87-0.89
# of head dim 128's at 64 and at 256, taken 0.88; backward non-causal 291 / 322 at 64 / 128 (279 /
# 310 at 4k, 287 / 318 at 8k): 0.90 (range 0.90-0.91); head dim 256's backward is not plotted (128's
# kept). Between the points linear in the head dimension (the kernel's, `flash2_padded_head_dim`), outside
# them the end point. Other GPUs: 1 but the padding
# (B200's FA2 runs head dim 64 at its head-dim-128 speed, Dao-AILab/flash-attention#1589 and
# meta-pytorch/tritonbench PR #171, `presets/gpus.yaml`; no A100 figure read).
FLASH2_HEAD_DIMS = (64.0, 128.0, 256.0)
FLASH2_HEAD_DIM_FORWARD = (0.88, 1.0, 0.88)
FLASH2_HEAD_DIM_BACKWARD = (0.90, 1.0, 1.0)
# FlashAttention-2's backward does 2.5x the forward's FLOPs (Dao 2023, Sec. 3.1.2; the FLOP count
# of its benchmark scripts); a GPU's `flash2_backward_efficiency` is its backward TFLOP/s on that
# count over the GEMMs', and the backward's time FLASH_BACKWARD_RATIO x the forward FLOPs at
# `flash2_backward_efficiency` x FLASH_BACKWARD_RATIO / FLASH_BACKWARD_FLOPS of the GEMMs' rate.
FLASH_BACKWARD_FLOPS = 2.5


def attention_precision(precision: str) -> str:
    """Attention runs in 16 bits when training in FP8 (Transformer Engine's FP8 recipes cast the
    linear layers' inputs; its fused attention stays BF16 unless FP8 attention is asked for)."""
    return "bf16" if is_narrow(precision) else precision


def flash34_profile(gpu: Gpu, kernel: str) -> fa34.FlashProfile | None:
    """FlashAttention-3/4's profile on `gpu` (`physics.attention_flash34`); None for the other kernels.
    A GPU the kernel does not run on is refused (`requests.attention` names the flag first)."""
    if kernel not in fa34.FLASH34_KERNELS or fa34.as_flash2(gpu, kernel):
        return None
    p = fa34.profile(gpu, kernel)
    if p is None:
        use = " or ".join(fa34.alternatives(gpu))
        raise SpecError(f"plan: attention_kernel {kernel}: {fa34.refusal(gpu, kernel)}; use {use}")
    return p


def priced_kernel(gpu: Gpu, kernel: str) -> str:
    """The kernel priced for `kernel` on `gpu`: "flash2" where FlashAttention-3/4's package runs
    FlashAttention-2's code there (`physics.attention_flash34.as_flash2`), else `kernel` itself."""
    return "flash2" if kernel in fa34.FLASH34_KERNELS and fa34.as_flash2(gpu, kernel) else kernel


def attention_relative_efficiency(gpu: Gpu, kernel: str) -> Number:
    """A fused attention kernel's forward efficiency relative to the GPU's GEMMs (`physics.stack`;
    FlashAttention-3/4 its profile's, `physics.attention_flash34`)."""
    p = flash34_profile(gpu, kernel)
    if p is not None:
        return p.forward_efficiency
    if kernel in FLASH2_KERNELS:
        own = np.asarray(gpu.flash2_efficiency, dtype=float)
        upstream = np.where(own > 0, own, FLASH_RELATIVE_EFFICIENCY)
        if kernel == "sdpa-flash2":
            return upstream * sdpa_flash_fractions(gpu)[0]
        return upstream
    if kernel == "sdpa-mem-efficient":
        return FLASH_RELATIVE_EFFICIENCY * MEM_EFFICIENT_FORWARD_FRACTION
    return FLASH_RELATIVE_EFFICIENCY


def sdpa_flash_fractions(gpu: Gpu) -> tuple[Number, Number]:
    """(forward, backward) speed of PyTorch SDPA's flash backend as a fraction of the flash-attn
    package's on this GPU (`SDPA_FLASH_FORWARD_FRACTION`): below 1 where FA2 has its own, lower
    efficiency, below the fused kernels' (Hopper, Blackwell), 1 elsewhere (Ampere, where FA2 is
    native and faster: its sm80 kernels are SDPA's too); on ROCm AOTriton's against CK's
    (`AOTRITON_FORWARD_FRACTION`)."""
    if gpu.sdpa_flash_backend == "aotriton":
        return AOTRITON_FORWARD_FRACTION, AOTRITON_BACKWARD_FRACTION
    own = np.asarray(gpu.flash2_efficiency, dtype=float)
    hopper = (own > 0) & (own < FLASH_RELATIVE_EFFICIENCY)
    return np.where(hopper, SDPA_FLASH_FORWARD_FRACTION, 1.0), np.where(hopper, SDPA_FLASH_BACKWARD_FRACTION, 1.0)


def attention_backward_relative_efficiency(gpu: Gpu, kernel: str) -> Number:
    """The efficiency, relative to the GPU's GEMMs, at which `layer_times` prices a fused attention
    kernel's backward (FLASH_BACKWARD_RATIO x the forward's FLOPs): the forward's, or for
    FlashAttention-2 where the GPU carries a backward figure of its own (`flash2_backward_efficiency`,
    `FLASH_BACKWARD_FLOPS`) that one; SDPA's build times its backward fraction."""
    p = flash34_profile(gpu, kernel)
    if p is not None:  # its backward plateau, on the 2.5x count, as time at FLASH_BACKWARD_RATIO x the forward FLOPs
        return p.backward_efficiency * FLASH_BACKWARD_RATIO / FLASH_BACKWARD_FLOPS
    forward = attention_relative_efficiency(gpu, kernel)
    if kernel == "sdpa-mem-efficient":
        return FLASH_RELATIVE_EFFICIENCY * MEM_EFFICIENT_BACKWARD_FRACTION
    if kernel not in FLASH2_KERNELS:
        return forward
    f_frac, b_frac = sdpa_flash_fractions(gpu) if kernel == "sdpa-flash2" else (1.0, 1.0)
    own = np.asarray(gpu.flash2_backward_efficiency, dtype=float)
    upstream = np.where(own > 0, own * FLASH_BACKWARD_RATIO / FLASH_BACKWARD_FLOPS, forward / np.asarray(f_frac))
    return upstream * b_frac


def flash2_head_dim_factors(gpu: Gpu, kernel: str, head_dim: Number) -> tuple[Number, Number]:
    """(forward, backward) speed of a FlashAttention-2 kernel at `head_dim` as a fraction of its
    head-dim-128 plateau: the kernel runs at the head dimension rounded up to its next template
    (`flash2_padded_head_dim`), whose extra columns are work that counts for nothing (d / rounded, every
    GPU), at that template's speed (`FLASH2_HEAD_DIM_FORWARD`, Hopper only); 1 for other kernels and
    where no head dimension is known (0). FlashAttention-3/4: their own templates and figures
    (`physics.attention_flash34.head_dim_factors`)."""
    p = flash34_profile(gpu, kernel)
    if p is not None:
        why = fa34.head_dim_refusal(gpu, kernel, head_dim)
        if why:
            raise SpecError(f"model: {why}; use attention_kernel {' or '.join(fa34.alternatives(gpu))}")
        return fa34.head_dim_factors(p, head_dim)
    if kernel not in FLASH2_KERNELS:
        return 1.0, 1.0
    d = np.asarray(head_dim, dtype=float)
    known = d > 0
    rounded = flash2_padded_head_dim(d)
    useful = np.where(known, d / np.where(known, rounded, 1.0), 1.0)
    if gpu.gemm_kernels != "sm90":
        return useful, useful
    forward = np.where(known, np.interp(rounded, FLASH2_HEAD_DIMS, FLASH2_HEAD_DIM_FORWARD), 1.0)
    backward = np.where(known, np.interp(rounded, FLASH2_HEAD_DIMS, FLASH2_HEAD_DIM_BACKWARD), 1.0)
    return forward * useful, backward * useful


def flash2_padded_head_dim(head_dim: Number) -> Number:
    """The head dimension FlashAttention-2 computes at: rounded up to a multiple of 32 up to 128, of
    64 above (Dao-AILab/flash-attention csrc/flash_attn/flash_api.cpp, `head_size_rounded =
    round_multiple(head_size, head_size <= 128 ? 32 : 64)`, which picks the kernel template; PyTorch
    SDPA's copy the same). FA2 refuses head dimensions above 256; those are priced at their own
    rounding (an assumption: such a run falls back to another kernel)."""
    d = np.asarray(head_dim, dtype=float)
    step = np.where(d <= 128, 32.0, 64.0)
    return np.ceil(d / step) * step


def torch_ring_s(fwd: LayerForward, gpu: Gpu) -> tuple[Number, Number]:
    """(forward, backward) seconds of PyTorch's eager ring bookkeeping in one layer: per ring step
    after the first and once per layer, the bytes per element of the rank's attention output that
    `physics.attention` counts (0 without context parallelism)."""
    from shardwise.physics import attention as at

    steps = np.maximum(np.asarray(fwd.cp, dtype=float) - 1, 0.0)
    out = fwd.attn_out.m * fwd.attn_out.k  # tokens x the rank's query heads x head dim
    on = steps > 0
    f_bytes = steps * at.TORCH_RING_FORWARD_BYTES + at.TORCH_RING_FORWARD_LAYER_BYTES
    b_bytes = steps * at.TORCH_RING_BACKWARD_BYTES + at.TORCH_RING_BACKWARD_LAYER_BYTES
    f_kernels = steps * at.TORCH_RING_FORWARD_KERNELS + at.TORCH_RING_FORWARD_LAYER_KERNELS
    b_kernels = steps * at.TORCH_RING_BACKWARD_KERNELS + at.TORCH_RING_BACKWARD_LAYER_KERNELS
    forward, backward = memory_s(f_bytes * out, gpu, f_kernels), memory_s(b_bytes * out, gpu, b_kernels)
    return np.where(on, forward, 0.0), np.where(on, backward, 0.0)
