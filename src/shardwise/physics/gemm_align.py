"""Tensor cores and unaligned GEMM dimensions: where a library leaves the tensor cores (`Plan.cublas_before_11`).

NVIDIA, "Matrix Multiplication Background User's Guide", section "Tensor Core Requirements" (the
table by library version), and the "Linear/Fully-Connected Layers User's Guide" (its Transformer
case study, Figure 7: the output layer's vocabulary 33,708 against 33,712, V100-SXM2, cuBLAS 10.1
and 11.0): with cuBLAS before 11.0 (CUDA 10.x) a 16-bit GEMM runs on the tensor cores only where
M, N and K (and the leading dimensions) are multiples of 8 elements, 16 bytes; otherwise cuBLAS
falls back to kernels on the CUDA cores ("these layers use 32-bit CUDA cores instead of Tensor
Cores as a fallback option", NVIDIA developer blog "Tips for Optimizing GPU Performance Using
Tensor Cores", 2019). From cuBLAS 11.0 the tensor cores are used "always but most efficient with
multiples of 8": unaligned operands load in narrower pieces; no measured factor of that loss is at
hand, so it is not priced (1.0; the guide's Figure 7(b) shows a loss, its bars are not in its text).

The fallback's rate: PyTorch computes a 16-bit GEMM in fp32 (`at::cuda::blas::gemm<at::Half>`,
cublasGemmEx with a 32-bit compute type), so the CUDA cores' FMA rate applies. A CUDA 10.x cuBLAS
runs on Volta and Turing at most (CUDA 10.2 targets up to sm_75), whose SM holds 64 FP32 lanes
beside 8 tensor cores of 64 FMA per clock each (NVIDIA Tesla V100 whitepaper, 2017: 15.7 fp32 and
125 tensor TFLOP/s at 1530 MHz; Turing T4: 8.1 and 65): 64 / 512 = 1/8 of the tensor rate, the
same tiles and efficiency otherwise.

A GEMM's three passes (Y = XW, dX = dY W^T, dW = X^T dY) share its three dimensions, so all three
leave the tensor cores together: GPT-2's LM head (50,257 outputs, tied to the word embedding) does
on every pass. Megatron pads its vocabulary to a multiple of 128 x tp (`make_vocab_size_divisible_by`,
megatron/training/tokenizer `_vocab_size_with_padding`); Hugging Face Transformers does not.
"""

from __future__ import annotations

import numpy as np

from shardwise.specs._checks import Number

# Bytes an operand's dimension must be a multiple of for the tensor cores under cuBLAS < 11.0: 8
# 16-bit elements, 16 8-bit ones (the guide's table; unit: bytes; FP16 8, INT8 16 elements).
TENSOR_CORE_ALIGN_BYTES = 16.0
# The CUDA cores' FP32 FMA rate as a share of the 16-bit tensor rate on the GPUs a cuBLAS < 11.0
# runs on (Volta, Turing): 64 FP32 lanes against 8 x 64 tensor FMAs per SM per clock (unit:
# fraction; V100 15.7 / 125 TFLOP/s, T4 8.1 / 65: 0.125 either way).
CUDA_CORE_SHARE = 64.0 / 512.0


def tensor_core_aligned(m: Number, n: Number, k: Number, bytes_per_element: Number) -> Number:
    """Whether an (m x k) @ (k x n) GEMM of `bytes_per_element` operands has every dimension a
    multiple of TENSOR_CORE_ALIGN_BYTES (m, n, k may be fractional shares: a split vocabulary of
    50,257 / 2 is not aligned)."""
    step = TENSOR_CORE_ALIGN_BYTES / np.asarray(bytes_per_element, dtype=float)

    def whole(d: Number) -> Number:  # a whole number of steps, to rounding
        r = np.mod(np.asarray(d, dtype=float), step)
        return np.isclose(r, 0.0) | np.isclose(r, step)

    return whole(m) & whole(n) & whole(k)


def on_cuda_cores(m: Number, n: Number, k: Number, bytes_per_element: Number, cublas_before_11: Number) -> Number:
    """Whether the GEMM runs on the CUDA cores: a cuBLAS before 11.0 and a dimension not aligned."""
    return np.asarray(cublas_before_11, dtype=bool) & ~tensor_core_aligned(m, n, k, bytes_per_element)
