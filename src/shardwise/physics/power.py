"""Tensor-core throughput at the board's power limit: carrying a GEMM benchmark to a sibling GPU.

A datasheet's dense peak is SMs x FLOPs per SM per clock x *a* clock, and on Blackwell the
quoted clocks differ from part to part: 2.5 PFLOP/s BF16 is 148 SMs x 8192 x 2.06 GHz on GB200
but 160 SMs x 8192 x 1.91 GHz on GB300; 2.25 PFLOP/s is 148 x 8192 x 1.86 GHz on B200 and
160 x 8192 x 1.72 GHz on B300. Under sustained tensor-core work none of them holds that clock:
the board's power limit sets it (a B200 at its 1000 W limit falls from its 1965 MHz boost to
about 1580 MHz within ~5 ms of back-to-back attention kernels, flashinfer-ai/flashinfer PR
#2899). Dynamic power is P = N C V^2 f (N SMs switching a capacitance C at clock f and voltage
V), and near the top of the voltage-frequency curve V rises about in proportion to f, so at the
limit

    N f^alpha = const x P   =>   f = f_ref (P / P_ref x N_ref / N)^(1/alpha)
    rate = N f  ∝  N^(1 - 1/alpha) P^(1/alpha)

alpha the DVFS exponent (3 for V ∝ f; 2 where the voltage sits at its floor). A GPU whose GEMM
efficiency (fraction of *its* datasheet peak) is carried over from a sibling's benchmark, same
tensor cores per SM, then reaches

    eta = eta_ref x (N / N_ref)^(1 - 1/alpha) x (P / P_ref)^(1/alpha) x (peak_ref / peak)

of its peak. Static power, HBM and NVLink draw are left out (they would make the power ratios
of the larger parts larger still). Where either GPU lacks a power limit the ratio is 1.
"""

from __future__ import annotations

import numpy as np

from shardwise.specs import Gpu
from shardwise.specs._checks import Number

# CMOS dynamic power P = a C V^2 f (N. Weste and D. Harris, "CMOS VLSI Design", 4th ed., ch. 5),
# with V proportional to f near the top of the voltage-frequency curve, where a GPU at its power
# limit runs: P ∝ f^3. Unit: none; range 1 (voltage held fixed: P ∝ f) to 3; taken 3.
DVFS_EXPONENT = 3.0


def power_limited_ratio(gpu: Gpu, reference: Gpu, exponent: Number = DVFS_EXPONENT) -> Number:
    """The fraction of its 16-bit datasheet peak `gpu` sustains, relative to the fraction
    `reference` sustains, when both run tensor-core work at their power limits (same tensor
    cores per SM; the module docstring). 1 where either lacks `tdp_w` or `sm_count`."""
    a = np.asarray(exponent, dtype=float)
    n, n_ref = np.asarray(gpu.sm_count, dtype=float), np.asarray(reference.sm_count, dtype=float)
    p, p_ref = np.asarray(gpu.tdp_w, dtype=float), np.asarray(reference.tdp_w, dtype=float)
    known = (n > 0) & (n_ref > 0) & (p > 0) & (p_ref > 0)
    n, n_ref = np.where(known, n, 1.0), np.where(known, n_ref, 1.0)
    p, p_ref = np.where(known, p, 1.0), np.where(known, p_ref, 1.0)
    peaks = np.asarray(reference.peak_flops_per_s_16bit, dtype=float) / np.asarray(gpu.peak_flops_per_s_16bit)
    ratio = (n / n_ref) ** (1.0 - 1.0 / a) * (p / p_ref) ** (1.0 / a) * peaks
    return np.where(known, ratio, 1.0)


def sustained_clock_hz(
    gpu: Gpu, reference: Gpu, reference_clock_hz: Number, exponent: Number = DVFS_EXPONENT
) -> Number:
    """The clock `gpu` holds at its power limit, from the one `reference` was measured at there:
    f = f_ref (P / P_ref x N_ref / N)^(1/alpha)."""
    a = np.asarray(exponent, dtype=float)
    per_sm = (np.asarray(gpu.tdp_w, dtype=float) / gpu.sm_count) / (np.asarray(reference.tdp_w) / reference.sm_count)
    return np.asarray(reference_clock_hz, dtype=float) * per_sm ** (1.0 / a)
