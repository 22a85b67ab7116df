"""Time of a linear layer's three GEMMs on one GPU and of the casts around them.

Each linear layer Y = X W becomes dX = dY W^T (an m x n @ n x k product) and dW = X^T dY
(k x m @ m x n, K = the tokens) in the backward pass, each timed with its own shape, so the
backward is about, not exactly, twice the forward (Narayanan et al. 2021 Sec. 5.1). The weight
gradient is accumulated into the fp32 main_grad inside the GEMM (Megatron's gradient-accumulation
fusion, 8 bytes per weight per micro-batch in the epilogue) or, without fusion, written in 16 bits
and added by a separate kernel. In FP8 (and FP4) the GEMMs read 1-byte (0.5625-byte) operands; the
casts that quantise them: `physics.casts`; torchao's FP8 recipes as `physics.fp8_recipes` describes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from shardwise.physics import fp8_recipes
from shardwise.physics.casts import NVFP4_BYTES_PER_ELEMENT
from shardwise.physics.gemm_align import CUDA_CORE_SHARE, on_cuda_cores
from shardwise.physics.kernels import gemms_s, memory_s
from shardwise.physics.layer_parts import Gemm, input_gradient, weight_gradient
from shardwise.specs import Gpu
from shardwise.specs._checks import Number
from shardwise.specs.hardware import is_fp8, is_nvfp4


@dataclass(frozen=True)
class GemmTimes:
    """One linear layer's three GEMMs on one GPU: forward Y = XW, input gradient dX = dY W^T,
    weight gradient dW = X^T dY (accumulated into the fp32 main_grad or written in 16 bits)."""

    forward_s: Number
    input_grad_s: Number
    weight_grad_s: Number


# The gradients' times where only the forward is priced (`linears_times(..., backward=False)`,
# serving): NaN, so that a sum that reads one by mistake shows it instead of counting nothing.
NOT_PRICED = float("nan")


# Weight gradient accumulated into Megatron's fp32 main_grad inside the GEMM (gradient
# accumulation fusion, `fused_weight_gradient_mlp_cuda.wgrad_gemm_accum_fp32` in
# megatron/core/tensor_parallel/layers.py): 4 bytes read + 4 written per weight; without it the
# GEMM writes a 16-bit gradient and a separate kernel adds it to main_grad (read 2 + 4, write 4).
FUSED_ACCUMULATE_BYTES = 8.0
UNFUSED_GRAD_BYTES = 2.0
UNFUSED_ACCUMULATE_BYTES = 10.0


def linear_times(
    g: Gemm,
    gpu: Gpu,
    precision: str,
    fused_accumulation: Number = True,
    accumulate_bytes: Number = UNFUSED_ACCUMULATE_BYTES,
    backward: bool = True,
    cublas_before_11: Number = False,
) -> GemmTimes:
    """Forward, input-gradient and weight-gradient GEMMs of one linear layer (`backward` False:
    the forward alone, as `linears_times`)."""
    args = (fused_accumulation, accumulate_bytes)
    return linears_times((g,), gpu, precision, *args, backward=backward, cublas_before_11=cublas_before_11)[0]


def linears_times(
    gs: Sequence[Gemm],
    gpu: Gpu,
    precision: str,
    fused_accumulation: Number = True,
    accumulate_bytes: Number = UNFUSED_ACCUMULATE_BYTES,
    fp8_recipe: str = "te",
    backward: bool = True,
    cublas_before_11: Number = False,
) -> list[GemmTimes]:
    """`linear_times` of each linear layer, their GEMMs priced together (`gemms_s`); without
    fused accumulation a separate kernel adds the 16-bit gradient to the fp32 accumulator,
    moving `accumulate_bytes` per weight (`physics.microbatch`). A torchao FP8 recipe's GEMMs as
    `physics.fp8_recipes` describes them. `backward` False (inference): the forward GEMMs alone
    are priced, the same numbers; the two gradients are NaN (`NOT_PRICED`), so that a sum that
    reads one by mistake shows it. `cublas_before_11`: a layer with a dimension not a multiple of 16
    bytes runs its GEMMs on the CUDA cores (`physics.gemm_align`)."""
    if is_fp8(precision) and fp8_recipes.is_torchao(fp8_recipe):
        return _torchao_linears_times(gs, gpu, precision, fused_accumulation, accumulate_bytes, fp8_recipe, backward)
    fused = np.asarray(fused_accumulation, dtype=bool)
    if is_fp8(precision):  # operands read as 1-byte FP8, outputs in 16 bits
        gs = [g._replace(a_bytes=1.0, b_bytes=1.0) for g in gs]
    elif precision == "fp4":  # activations quantised to NVFP4; the weights as stored
        gs = [g._replace(a_bytes=NVFP4_BYTES_PER_ELEMENT) for g in gs]
    elif is_nvfp4(precision):  # both operands of all three GEMMs in NVFP4, outputs in 16 bits
        gs = [g._replace(a_bytes=NVFP4_BYTES_PER_ELEMENT, b_bytes=NVFP4_BYTES_PER_ELEMENT) for g in gs]
    if not backward:
        fwd = _aligned_or_not(gs, gemms_s(gs, gpu, precision), gpu, precision, cublas_before_11)
        return [GemmTimes(t, NOT_PRICED, NOT_PRICED) for t in fwd]
    # one framework for all plans (a scalar): price only its kind of weight-gradient accumulation
    kinds = [bool(fused)] if fused.ndim == 0 else [True, False]
    accumulate = {True: FUSED_ACCUMULATE_BYTES, False: UNFUSED_GRAD_BYTES}
    per_layer = [(g, input_gradient(g), *(weight_gradient(g, accumulate[kind]) for kind in kinds)) for g in gs]
    flat = [x for layer in per_layer for x in layer]
    times = _aligned_or_not(flat, gemms_s(flat, gpu, precision), gpu, precision, cublas_before_11)
    per = 2 + len(kinds)  # forward, input gradient, one weight gradient per kind
    out = []
    for i, g in enumerate(gs):
        fwd, dx, *dw = times[i * per : (i + 1) * per]
        if False in kinds:  # the 16-bit gradient is added to main_grad by a separate kernel (none at 0 bytes)
            plain = kinds.index(False)
            add_kernels = np.asarray(accumulate_bytes) > 0
            dw[plain] = dw[plain] + memory_s(accumulate_bytes * g.batch * g.k * g.n, gpu, kernels=add_kernels)
        out.append(GemmTimes(fwd, dx, dw[0] if len(dw) == 1 else np.where(fused, dw[0], dw[1])))
    return out


def _aligned_or_not(
    gs: Sequence[Gemm], times: list[Number], gpu: Gpu, precision: str, cublas_before_11: Number
) -> list[Number]:
    """`times` of the GEMMs `gs`, those that leave the tensor cores (`gemm_align.on_cuda_cores`)
    priced again at the CUDA cores' share of the tensor rate, with the same tile model."""
    if not np.any(cublas_before_11):  # the hot path: every library since CUDA 11
        return times
    slow = [on_cuda_cores(g.m, g.n, g.k, g.a_bytes, cublas_before_11) for g in gs]
    if not any(np.any(x) for x in slow):
        return times
    cores = replace(gpu, peak_flops_per_s_16bit=gpu.peak_flops_per_s_16bit * CUDA_CORE_SHARE)
    cuda_core_times = gemms_s(gs, cores, precision)
    return [np.where(x, c, t) for x, c, t in zip(slow, cuda_core_times, times, strict=True)]


def _torchao_linears_times(
    gs: Sequence[Gemm],
    gpu: Gpu,
    precision: str,
    fused_accumulation: Number,
    accumulate_bytes: Number,
    recipe: str,
    backward: bool = True,
) -> list[GemmTimes]:
    """torchao.float8's GEMMs (`physics.fp8_recipes`): row-wise scales' CUTLASS forward at
    ROWWISE_FORWARD_FRACTION of cuBLAS, the weight gradient rescaled by hand, or computed in 16
    bits (rowwise_with_gw_hp)."""
    out = linears_times(gs, gpu, precision, fused_accumulation, accumulate_bytes, backward=backward)
    if not fp8_recipes.rowwise_gemms(recipe, precision):
        return out
    if not backward:
        return [GemmTimes(t.forward_s / fp8_recipes.ROWWISE_FORWARD_FRACTION, NOT_PRICED, NOT_PRICED) for t in out]
    if fp8_recipes.sixteen_bit_weight_gradient(recipe, precision):
        wgrad = [t.weight_grad_s for t in linears_times(gs, gpu, "bf16", fused_accumulation, accumulate_bytes)]
    else:
        wgrad = [t.weight_grad_s for t in out]
    kernels = 1 if recipe == "rowwise" else 0  # the rescale (rowwise_with_gw_hp: none)
    rescale = [memory_s(fp8_recipes.rescale_bytes(recipe, precision, g.batch * g.k * g.n), gpu, kernels) for g in gs]
    return [
        GemmTimes(t.forward_s / fp8_recipes.ROWWISE_FORWARD_FRACTION, t.input_grad_s, w + r)
        for t, w, r in zip(out, wgrad, rescale, strict=True)
    ]
