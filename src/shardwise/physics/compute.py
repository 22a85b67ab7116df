"""Time of compute kernels on one GPU: a roofline with an achievable peak and a launch gap.

    T_op = max(F / (peak * eta_mm), Q / (BW * eta_mem)) + t_launch

F FLOPs, Q bytes moved; eta_mm the GPU's achievable fraction of dense peak for large GEMMs
(measured "maximum achievable matmul FLOPS", Bekman's ml-engineering MAMF table), eta_mem the
achievable fraction of HBM bandwidth. Small or thin matrices fall under the memory roof on
their own (a GEMM's bytes grow relative to its FLOPs), and every kernel pays a launch gap, so
tiny operations are slower per FLOP than large ones without a per-shape fudge factor.

Backward passes (Narayanan et al. 2021 Sec. 5.1: "the backward pass is twice the forward"):
each GEMM Y = X W becomes dX = dY W^T and dW = X^T dY, the same shapes, so 2x the forward
time; memory-bound kernels read the saved input and the incoming gradient and write the
outgoing one, BACKWARD_MEMORY_RATIO x the forward traffic.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardwise.physics.flops import Gemm, LayerForward
from shardwise.specs import Gpu
from shardwise.specs._checks import Number

BACKWARD_GEMM_RATIO = 2.0  # dX and dW per forward GEMM
BACKWARD_MEMORY_RATIO = 2.0  # read input + gradient, write gradient vs read + write forward
# FlashAttention-2 reaches 50-73 % of A100 peak forward vs ~87 % for a large GEMM
# (Dao 2023, Fig. 5; MAMF): about 0.75 of the GEMM efficiency. Its backward recomputes the
# scores and does 5 GEMM-sized products against 2 forward (Dao 2023, Sec. 3.1.2): 2.5x.
FLASH_RELATIVE_EFFICIENCY = 0.75
FLASH_BACKWARD_RATIO = 2.5


def roofline_s(flops: Number, n_bytes: Number, gpu: Gpu, precision: str, efficiency: Number = 1.0) -> Number:
    """max(compute, memory) for one kernel, plus its launch gap."""
    compute = flops / (gpu.peak_flops_per_s(precision) * gpu.matmul_efficiency_for(precision) * efficiency)
    memory = n_bytes / (gpu.memory_bandwidth_bytes_per_s * gpu.memory_efficiency)
    return np.maximum(compute, memory) + gpu.kernel_launch_s


def memory_s(n_bytes: Number, gpu: Gpu, kernels: Number = 1) -> Number:
    """Memory-bound kernels: bytes at the achievable HBM bandwidth plus one gap per kernel."""
    return n_bytes / (gpu.memory_bandwidth_bytes_per_s * gpu.memory_efficiency) + kernels * gpu.kernel_launch_s


def gemm_s(g: Gemm, gpu: Gpu, precision: str) -> Number:
    return roofline_s(g.flops, g.bytes, gpu, precision)


@dataclass(frozen=True)
class LayerTimes:
    """Forward / backward / recompute times of one layer on one GPU, split by kind of work.

    Seconds, arrays broadcast with the inputs. `attention_core_s` is what selective
    recomputation redoes; `column_gemm_s` the forward GEMMs of the column-parallel layers (QKV and
    MLP up): their input-gradient and their weight-gradient GEMMs each take as long, and TP
    collectives of the backward pass can hide behind them.
    """

    gemm_s: Number
    attention_s: Number
    elementwise_s: Number
    backward_s: Number
    attention_core_s: Number
    column_gemm_s: Number

    @property
    def forward_s(self) -> Number:
        return self.gemm_s + self.attention_s + self.elementwise_s


def layer_times(fwd: LayerForward, gpu: Gpu, precision: str, flash: Number) -> LayerTimes:
    """Roofline times of every kernel of one layer (see the module docstring for the ratios)."""
    flash = np.asarray(flash, dtype=bool)
    gemms = sum(gemm_s(g, gpu, precision) for g in fwd.gemms)
    softmax = memory_s(fwd.softmax_bytes, gpu, kernels=2)
    bmm = gemm_s(fwd.scores, gpu, precision) + gemm_s(fwd.context, gpu, precision)
    fused = roofline_s(
        fwd.flash.flops * fwd.causal_fraction, fwd.flash.bytes, gpu, precision, FLASH_RELATIVE_EFFICIENCY
    )
    attention = np.where(flash, fused, bmm + softmax)
    elementwise = memory_s(fwd.elementwise_bytes, gpu, fwd.elementwise_kernels)
    attention_bwd = np.where(
        flash, FLASH_BACKWARD_RATIO * fused, BACKWARD_GEMM_RATIO * bmm + BACKWARD_MEMORY_RATIO * softmax
    )
    backward = BACKWARD_GEMM_RATIO * gemms + attention_bwd + BACKWARD_MEMORY_RATIO * elementwise
    return LayerTimes(
        gemm_s=gemms,
        attention_s=attention,
        elementwise_s=elementwise,
        backward_s=backward,
        # Selective recomputation redoes the attention core only; FlashAttention stores no
        # scores, so there is nothing left for it to recompute (its backward already does).
        attention_core_s=np.where(flash, 0.0, bmm + softmax),
        column_gemm_s=gemm_s(fwd.qkv, gpu, precision) + gemm_s(fwd.mlp_up, gpu, precision),
    )
