"""FlashAttention-3 (Hopper) and FlashAttention-4 (CuTe DSL, Blackwell) as attention kernels
(`Plan.attention_kernel` "flash3", "flash4"): on which GPUs each runs, and its speed against the GPU's
GEMMs by sequence length, head dimension, causal mask, forward and backward, in the tile-overhead ramp
of `physics.attention` (a call whose query tiles see W keys runs at W / (W + L0) of the plateau; under
a causal mask W = s / 2, half a tile more is wasted on the diagonal and the plateau is P_causal of the
non-causal one). Every number is read from published kernel benchmarks, none from training runs.

FlashAttention-3 on Hopper (`cuda_arch` 90): Shah et al. 2024 (arXiv 2407.08608 v1; Fig. 4
forward and Fig. 5 backward, Fig. 5-6 in later versions), H100 SXM5 at 1830 MHz, BF16, batch x length
= 16k tokens, hidden 2048 (32 / 16 / 8 heads of 64 / 128 / 256), TFLOP/s at 512, 1k, 2k, 4k, 8k, 16k:
- forward, non-causal, head dim 128: 467, 565, 625, 638, 646, 648. In time, 1 / eta = (1 + L0 / W) / P:
  least squares over the six gives L0 = 215 keys, P = 671; L0 taken 200 (range 150-310: head dims 64
  and 256 fit 276 and 312), and P at L0 = 200, the geometric mean of eta (s + 200) / s: 666 TFLOP/s,
  against the H100's MAMF 794.5 (the 0.75 of the fused kernels, `FLASH_RELATIVE_EFFICIENCY`, is cuDNN's
  595-617 of it): FLASH3_HOPPER forward 0.84 (unit: fraction; range 0.82-0.85). Twice FlashAttention-2's
  and cuDNN's L0 (106 and 116 on the same figure's points): FA3's warp-specialised pipeline takes longer
  to fill per query tile, and runs each tile at 1.8x FA2's rate.
- causal, head dim 128: 292, 423, 521, 579, 602, 616; with L0 = 200 the causal ramp reproduces them
  within 7% at 1k-16k (313 at 512) at P_causal = 0.96 (FA2 and cuDNN: 0.92, `physics.attention`).
- backward, non-causal, head dim 128 (on the 2.5x-forward FLOP count of the paper): 316, 424, 501, 542,
  559, 561: L0 = 442 (taken 440, range 400-450; 2.2x the forward's, as `physics.attention`'s 220 / 100),
  P = 595: 595 / 794.5 = 0.75 of the GEMMs on that count (unit: fraction; range 0.71-0.75).
- head dimension (16k tokens): forward non-causal 497 / 648 / 756 at 64 / 128 / 256 (0.77, 1, 1.17),
  backward 474 / 561 at 64 / 128 (0.845); head dim 256's backward is not plotted (128's kept, 1). FA3
  computes at its next template, 64, 96, 128, 192 or 256 (hopper/flash_api.cpp `round_up_headdim`).
FlashAttention-3's own code is Hopper's: its kernels for 9.x and up are built for sm_90a alone (hopper/setup.py
`-gencode arch=compute_90a,code=sm_90a`, arch-specific code that Blackwell does not load, while its
ARCH_SWITCH sends every arch from 90 up to them); where else it runs: below.

FlashAttention-4 on data-centre Blackwell (`cuda_arch` 100), B200, BF16, head dim 128:
- plateau: Zadouri et al. 2026 (arXiv 2603.05451, abstract) "up to 1613 TFLOPs/s (71% utilization)"
  forward; Dao-AILab/flash-attention PR #2280 (2026-02-27, "[Cute,Sm100,Bwd] Fix and enable 2CTA path
  for hdim 128 backward"), batch 4 x 8k tokens x 16 heads: forward 1534.8 non-causal, 1418.1 causal;
  backward (2-CTA) 1359.8 and 1208.6. At L0 below, 1534.8 x (8192 + 410) / 8192 = 1611 against B200's
  MAMF 1745: FLASH4_BLACKWELL forward 0.92 (unit: fraction; range 0.76-0.93: the low end PR #2605's
  B200 table, 1330 at 16k, a slower clock or build); it gives 1591 at 32k, the paper's 1613 within 2%.
- ramp: PR #2605 (2026, "Bump nvidia-cutlass-dsl to >=4.5.2", its B200 table: MFU against
  benchmarks/benchmark_attn.py's B200 peak 2.25e15), FA4 forward non-causal head dim 128, batch x length
  = 32k: 975, 1131, 1256, 1289, 1330 at 1k-16k: L0 = 409, taken 410 (range 300-480; head dim 64 fits
  481): about FA3's in time per tile at 2.4x its rate. Backward L0 2.2x the forward's, as FA3's and
  the fused kernels': 900 (assumed, range 600-1000; no backward sweep was found).
- backward plateau: 1359.8 x (8192 + 900) / 8192 = 1509 on the 2.5x count: 0.865 of the MAMF.
- causal plateau: PR #2280's causal over non-causal at 8k, each over its own ramp, forward 0.924 x 0.952
  / 0.896 and backward 0.889 x 0.901 / 0.810: 0.98 and 0.99; P_causal 0.98 (range 0.95-0.99).
- head dimension: PR #2605's B200 table, head dim 64 non-causal at 16k 879 against 128's 1330: 0.66
  (backward taken the same, no figure); head dim 256 (its own 2-CTA kernel) taken at 128's (no same-
  machine figure); FA4 computes at the head dimension itself (flash_attn/cute/interface.py
  `_validate_head_dims`: 8-128 in steps of 8, 192 x 128, 256 x 256 on sm100), no padding priced.
B300 and GB300 (Blackwell Ultra, twice the exponential units) take B200's figures: a lower bound.
Where each runs (`cuda_arch`: the compute capability x 10, read from the GPU's fields, which hold none
of its own), as the kernels' own code decides:
- FlashAttention-3 (hopper/setup.py): sm_90a kernels alone for 9.x and up, which Blackwell does not load:
  refused on sm100 and sm120. Its build's sm80 kernels (Ampere, Ada; left out with
  FLASH_ATTENTION_DISABLE_SM80) run when flash_attn_interface is called directly: mma.sync kernels of
  FlashAttention-2's design, priced as "flash2" with a note; Hugging Face Transformers refuses
  attn_implementation "flash_attention_3" below 9.0 (modeling_utils `_flash_attn_3_can_dispatch`,
  "Flash Attention 3 requires compute capability >= 9.0"), so the stacks that reach it through
  Transformers (`HF_STACKS`) are refused there.
- FlashAttention-4 (flash-attn-4 4.0 betas, fa4-v4.0.0.beta22 flash_attn/cute/interface.py): the forward
  asserts compute capability 8.x-12.x, the backward 9.x-12.x: on sm80-89 it cannot train (refused). On
  Hopper it picks its sm90 kernels (flash_fwd_sm90.py, FlashAttention-3's design by its authors), priced
  at FlashAttention-3's figures: no published H100 speed of its own was found, and its sm90 backward is
  still moving (PR #2889, open after beta22: hdim 256 backward 373 -> 530 TFLOP/s), an assumption. On
  sm120 (RTX 50x0, RTX PRO 6000) it runs flash_fwd_sm120.py / flash_bwd_sm120.py, which subclass the sm80
  kernels (FlashAttention-2's mma.sync design): no published sm120 FA4 figure exists, so it is priced as
  "flash2" on that GPU with a note.
- AMD GPUs have no CUDA compute capability: both are CUDA kernels; ROCm runs FlashAttention-2 on Composable
  Kernel ("flash2") or AOTriton under PyTorch SDPA ("sdpa-flash2").
- Head dimensions: FlashAttention-3 takes 8-256 in multiples of 8 (hopper/flash_api.cpp: max_headdim 256,
  "head_size should be a multiple of 8"); FlashAttention-4 the same on sm90, and on sm100 8-128 in steps of
  8, 192 (with a 128 value head, DeepSeek's MLA; the value head is not checked) and 256 (its own kernel)
  (`_validate_head_dims`). Others are refused (`head_dim_refusal`).
- Context parallelism: neither package has a ring of its own (Hugging Face / accelerate's context
  parallelism goes through SDPA); with cp > 1 the ring priced is Transformer Engine's (`physics.context`),
  each chunk's attention at this kernel's speed, as `requests.attention` notes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardwise.specs import Gpu
from shardwise.specs._checks import Number

FLASH34_KERNELS = ("flash3", "flash4")


@dataclass(frozen=True)
class FlashProfile:
    """One kernel's speed on one GPU generation (module docstring): plateau efficiencies relative to a
    large GEMM (forward; backward on the 2.5x-forward FLOP count), the ramp's per-tile overhead in keys
    and causal plateau, and its speed by head dimension as a fraction of head dim 128's."""

    forward_efficiency: float
    backward_efficiency: float
    forward_overhead_tokens: float
    backward_overhead_tokens: float
    causal_plateau: float
    head_dims: tuple[float, ...]
    head_dim_forward: tuple[float, ...]
    head_dim_backward: tuple[float, ...]
    templates: tuple[float, ...] = ()  # the head dimensions the kernel computes at (empty: its own)


FLASH3_HOPPER = FlashProfile(
    forward_efficiency=666.0 / 794.5,
    backward_efficiency=595.0 / 794.5,
    forward_overhead_tokens=200.0,
    backward_overhead_tokens=440.0,
    causal_plateau=0.96,
    head_dims=(64.0, 128.0, 256.0),
    head_dim_forward=(497.0 / 648.0, 1.0, 756.0 / 648.0),
    head_dim_backward=(474.0 / 561.0, 1.0, 1.0),
    templates=(64.0, 96.0, 128.0, 192.0, 256.0),
)
FLASH4_BLACKWELL = FlashProfile(
    forward_efficiency=1534.8 * (8192.0 + 410.0) / 8192.0 / 1745.0,
    backward_efficiency=1359.8 * (8192.0 + 900.0) / 8192.0 / 1745.0,
    forward_overhead_tokens=410.0,
    backward_overhead_tokens=900.0,
    causal_plateau=0.98,
    head_dims=(64.0, 128.0, 256.0),
    head_dim_forward=(879.0 / 1330.0, 1.0, 1.0),
    head_dim_backward=(879.0 / 1330.0, 1.0, 1.0),
)
# the compute capabilities x 10 (`cuda_arch`) each kernel runs its own code on, and its profile there
PROFILES = {
    "flash3": {90: FLASH3_HOPPER},
    "flash4": {90: FLASH3_HOPPER, 100: FLASH4_BLACKWELL},
}
# the stacks that reach FlashAttention-3 through Hugging Face Transformers' attn_implementation (DeepSpeed on
# a Hugging Face model, as stas00/ml-engineering's rows): refused below 9.0 by Transformers
HF_STACKS = ("hf-transformers", "deepspeed")
AMD_KERNELS = ("flash2", "sdpa-flash2")  # what the project prices on ROCm: CK's FlashAttention-2, AOTriton
NVIDIA_KERNELS = ("flash2", "fused")


def cuda_arch(gpu: Gpu) -> int:
    """The GPU's CUDA compute capability x 10 as the flash-attn packages read it, from its fields (none
    holds it): 0 for AMD (ROCm, none); 100 data-centre Blackwell (`gemm_kernels` sm100), 90 Hopper (sm90);
    else 120 with MX block scales (RTX Blackwell), 89 with FP8 (Ada), 80 with the fused kernels (Ampere),
    70 before. A Hopper or Blackwell GPU file without `gemm_kernels` reads as 89 or 120."""
    if gpu.vendor != "nvidia":
        return 0
    if gpu.gemm_kernels == "sm100":
        return 100
    if gpu.gemm_kernels == "sm90":
        return 90
    if bool(gpu.mxfp8):
        return 120
    if float(np.max(gpu.peak_flops_per_s_fp8)) > 0:
        return 89
    return 80 if bool(gpu.flash_attention) else 70


def profile(gpu: Gpu, kernel: str) -> FlashProfile | None:
    """`kernel`'s profile on `gpu` (None: not FlashAttention-3/4, or a GPU it has no priced code for)."""
    return PROFILES[kernel].get(cuda_arch(gpu)) if kernel in PROFILES else None


def as_flash2(gpu: Gpu, kernel: str, framework: str = "", forward_only: bool = False) -> str:
    """Why `kernel` runs FlashAttention-2's code on `gpu` under `framework` and is priced as "flash2" (a
    note's clause; empty: it does not). `forward_only` (serving): FlashAttention-4's sm80 forward, which
    training cannot use (`refusal`), runs there too."""
    arch = cuda_arch(gpu)
    if forward_only and kernel == "flash4" and arch in (80, 89):
        return "flash-attn-4's sm80 forward is FlashAttention-2's design (flash_attn/cute/interface.py)"
    if kernel == "flash4" and arch == 120:
        return (
            "flash-attn-4 runs its sm120 kernels there (flash_fwd_sm120.py, flash_bwd_sm120.py: FlashAttention-2's "
            "mma.sync design); no published sm120 FlashAttention-4 speed, priced at flash2's on that GPU"
        )
    if kernel == "flash3" and arch in (80, 89) and framework not in HF_STACKS:
        return (
            "flash_attn_interface called directly runs FlashAttention-3's sm80 build there (mma.sync, "
            "FlashAttention-2's design), priced at flash2's; Hugging Face's flash_attention_3 refuses below "
            "compute capability 9.0"
        )
    return ""


def refusal(gpu: Gpu, kernel: str, framework: str = "") -> str:
    """Why `gpu` cannot run `kernel` (for training) in one clause (empty: it can, the kernel is another,
    or it runs as FlashAttention-2, `as_flash2`)."""
    if kernel not in PROFILES or profile(gpu, kernel) is not None or as_flash2(gpu, kernel, framework):
        return ""
    arch = cuda_arch(gpu)
    if arch == 0:
        why = (
            f"gpu {gpu.name!r} is an AMD GPU (ROCm: no CUDA compute capability); {kernel} is a CUDA kernel, and ROCm "
            "runs FlashAttention-2 on Composable Kernel (flash2) or AOTriton under PyTorch SDPA (sdpa-flash2)"
        )
    elif kernel == "flash3" and arch >= 100:
        why = (
            f"FlashAttention-3's kernels for 9.x and up are built for sm_90a alone (flash-attention hopper/setup.py), "
            f"which gpu {gpu.name!r} (sm{arch}) does not load"
        )
    elif kernel == "flash3":
        why = (
            f"framework {framework!r} reaches it through Hugging Face Transformers, which refuses flash_attention_3 "
            f"below compute capability 9.0 (gpu {gpu.name!r}: sm{arch})"
        )
    else:
        why = (
            f"flash-attn-4 runs only its forward on gpu {gpu.name!r} (sm{arch}): its backward asserts compute "
            "capability 9.x-12.x (flash_attn/cute/interface.py), so it cannot train there"
        )
    if arch not in (0, 90, 100):  # read from the GPU's fields (`cuda_arch`)
        why += f"; sm{arch} read from its fields: a Hopper or Blackwell GPU file sets gemm_kernels sm90 or sm100"
    return f"{kernel} cannot run here: {why}"


def alternatives(gpu: Gpu) -> tuple[str, ...]:
    """The attention kernels to name instead of a refused FlashAttention-3/4 (`refusal`)."""
    return AMD_KERNELS if cuda_arch(gpu) == 0 else NVIDIA_KERNELS


# Latent attention (DeepSeek's MLA) served absorbed scores a 576-wide key: a 64-wide rotary part
# and the 512-wide latent. FlashAttention-3's Hopper kernels take it as head dimension 64 with a
# 512-wide `qv` (hopper/instantiations flash_fwd_hdim64_512_*, `flash_attn_with_kvcache(qv=...)`),
# the path SGLang's fa3 backend runs DeepSeek through on Hopper: accepted there, priced at 256's factors.
MLA_ABSORBED_HEAD_DIM = 576


def head_dim_refusal(gpu: Gpu, kernel: str, head_dim: Number) -> str:
    """Why `kernel` rejects `head_dim` on `gpu` in one clause (empty: it takes it, or it is unknown, 0):
    the kernels' own lists (module docstring)."""
    d = np.atleast_1d(np.asarray(head_dim, dtype=float))
    d = d[d > 0]
    arch = cuda_arch(gpu)
    if profile(gpu, kernel) is None or d.size == 0:
        return ""
    if kernel == "flash4" and arch == 100:
        ok = (d % 8 == 0) & (((d >= 8) & (d <= 128)) | (d == 192) | (d == 256))
        allowed = "8-128 in steps of 8, 192 (with a 128 value head) or 256 on sm100 (flash_attn/cute/interface.py)"
    else:  # and latent attention's absorbed 576 (a 64-wide q/k with a 512-wide qv; MLA_ABSORBED_HEAD_DIM)
        ok = ((d % 8 == 0) & (d >= 8) & (d <= 256)) | ((d == MLA_ABSORBED_HEAD_DIM) & (arch == 90))
        allowed = "8-256 in steps of 8 (hopper/flash_api.cpp, flash_attn/cute/interface.py)"
    if bool(np.all(ok)):
        return ""
    return f"{kernel} does not take head dimension {d[~ok][0]:g} on gpu {gpu.name!r}: it takes {allowed}"


def head_dim_factors(p: FlashProfile, head_dim: Number) -> tuple[Number, Number]:
    """(forward, backward) speed at `head_dim` as a fraction of head dim 128's: the kernel's template
    (`FlashProfile.templates`; the extra columns count for nothing, d / template) at that template's speed,
    linear between the figure's head dimensions, the end points outside; 1 where none is known (0)."""
    d = np.asarray(head_dim, dtype=float)
    known = d > 0
    at = d
    if p.templates:
        t = np.asarray(p.templates)
        at = t[np.minimum(np.searchsorted(t, d), len(t) - 1)]
        at = np.maximum(at, d)  # above the largest template: its own (priced, not refused)
    useful = np.where(known, d / np.where(known, at, 1.0), 1.0)
    forward = np.where(known, np.interp(at, p.head_dims, p.head_dim_forward), 1.0)
    backward = np.where(known, np.interp(at, p.head_dims, p.head_dim_backward), 1.0)
    return forward * useful, backward * useful
