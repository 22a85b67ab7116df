"""The compute precisions a GPU spec prices: bytes per element, which are FP8 and FP4, and the
measured ratios between their GEMM rates (`specs.hardware.Gpu` reads them)."""

from __future__ import annotations

from shardwise.precisions import FP4_PRECISIONS, FP4_TRAINING_PRECISIONS, FP8_PRECISIONS

# Bytes per element of each supported compute precision (MXFP8's one-byte scale per 32 elements
# is priced where the tensors are quantised, `physics.compute`).
PRECISION_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "mxfp8": 1.0,
    "fp4": 0.5,
    "nvfp4": 0.5,
}

# A block-scaled (MXFP8) GEMM against a per-tensor-scaled FP8 one of the same shape: Transformer
# Engine's published GEMM profile of one Llama-like layer on B300 with pre-quantised operands,
# 6.812 ms (FP8 tensorwise) vs 7.161 ms (MXFP8) (TransformerEngine docs/examples/gemm_profiling).
MXFP8_GEMM_RELATIVE = 6.812 / 7.161
# An NVFP4 GEMM's tensor cores take their operands at the byte rate an FP8 GEMM's do: an NVFP4 element
# is 0.5 + 1/16 bytes (4 bits and an E4M3 scale per 16) against FP8's 1, so its main loop reaches at most
# 1 / 0.5625 = 1.78x the FP8 main loop's FLOP rate, and never more than its peak ratio allows. Unit:
# FLOP-rate ratio; range 1.78-1.81. Check: Transformer Engine's GEMM profile on B300 (pre-quantised
# operands, the 12 GEMMs of one hidden-4096 layer at 15,872 tokens, docs/examples/gemm_profiling,
# TE d0067d0): FP8 per-tensor 6.812 ms, NVFP4 3.764 ms, 1.81x, for a peak ratio of 3.1 (14 / 4.5 PF).
# GB200 / B200 (ratio 2) reach 1.78x, GB300 (3) 1.78x: `matmul_efficiency_for` caps the efficiency.
NVFP4_OPERAND_RATE_RATIO = 1.0 / (0.5 + 1.0 / 16.0)
# Blackwell Ultra (SM103: B300, GB300; FP4 peak 3x FP8's, where SM100's is 2x) runs its FP4 main loop
# faster than that byte rate allows: the tile model (`physics.gemm`) reproduces the same TE profile's
# 1.81x (6.812 / 3.764 ms, pre-quantised, 12 GEMMs of a hidden-4096 layer at 15,872 tokens, B300)
# only with an FP4:FP8 main-loop ratio of 1.98 (fprop 1.91, dgrad 1.96, wgrad 2.04: the range); at
# 1.78 it gives 1.66. Unit: FLOP-rate ratio; fitted on that one profile (no public row). About the
# FP4 data's own byte rate, 1 / 0.5 = 2 (SM103's block-scaled MMA reads the scale factors from tensor
# memory, not with the operands: PTX tcgen05.mma ... block_scale, scales copied in by tcgen05.cp).
# SM100 keeps NVFP4_OPERAND_RATE_RATIO: B200's NVFP4 GEMMs measure 5.37-5.50 PFLOP/s at 6144-8192
# cubed (pytorch/ao PR #2427, bench_matmul.py --recipe nvfp4), 1.72-1.76x its FP8 microbenchmark
# rate here (MAMF 0.776 x 0.978 x 4.5 PF = 3.13 PF), not 2x.
NVFP4_SM103_RATE_RATIO = 1.98
# An FP4 peak at least this many times the FP8 peak marks Blackwell Ultra's FP4 tensor cores (B300
# 14 / 4.5, GB300 15 / 5; B200 and GB200 2).
SM103_FP4_PEAK_RATIO = 2.5


def is_fp8(precision: str) -> bool:
    """An FP8 recipe (either scaling): 1-byte GEMM operands, 16-bit activations between layers."""
    return precision in FP8_PRECISIONS


def is_narrow(precision: str) -> bool:
    """GEMMs on quantised operands (FP8 or FP4) with 16-bit activations between layers."""
    return precision in FP8_PRECISIONS or precision in FP4_PRECISIONS or precision in FP4_TRAINING_PRECISIONS


def is_nvfp4(precision: str) -> bool:
    """NVFP4 training (Transformer Engine's NVFP4BlockScaling): 4-bit GEMM operands, 16-bit
    activations between layers."""
    return precision in FP4_TRAINING_PRECISIONS
