"""Time of one kernel on one GPU: GEMMs from their shape by the tile/wave model of
`physics.gemm` (or the GPU's measured GEMM table), everything else by a roofline with an
achievable peak and a launch gap:

    T_op = max(F / (peak * eta_mm), Q / (BW * eta_mem)) + t_launch

F FLOPs, Q bytes moved; eta_mm the GPU's achievable fraction of dense peak, eta_mem the
achievable fraction of HBM bandwidth. `physics.compute` composes a layer from these.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from shardwise.physics.gemm import gemm_time_s, kernel_fixed_s, table_time_s
from shardwise.physics.layer_parts import Gemm
from shardwise.specs import Gpu
from shardwise.specs._checks import Number

# The precisions a measured GEMM table (`Gpu.gemm_table`, timed in 16 bits) prices.
SIXTEEN_BIT = ("bf16", "fp16")


def roofline_s(flops: Number, n_bytes: Number, gpu: Gpu, precision: str, efficiency: Number = 1.0) -> Number:
    """max(compute, memory) for one kernel, plus its launch gap."""
    compute = flops / (gpu.peak_flops_per_s(precision) * gpu.matmul_efficiency_for(precision) * efficiency)
    memory = n_bytes / (gpu.memory_bandwidth_bytes_per_s * gpu.memory_efficiency)
    return np.maximum(compute, memory) + gpu.kernel_launch_s


def memory_s(n_bytes: Number, gpu: Gpu, kernels: Number = 1) -> Number:
    """Memory-bound kernels: bytes at the achievable HBM bandwidth plus one gap per kernel."""
    return n_bytes / (gpu.memory_bandwidth_bytes_per_s * gpu.memory_efficiency) + kernels * gpu.kernel_launch_s


def gemm_s(g: Gemm, gpu: Gpu, precision: str) -> Number:
    """One GEMM kernel: the tile/wave model of `physics.gemm` when the shape is known (a measured
    GEMM table instead for 16-bit GEMMs where the GPU has one), else the roofline; plus the launch
    gap."""
    return gemms_s((g,), gpu, precision)[0]


# GEMMs whose broadcast shape has at most this many elements are priced in one stacked call of
# the tile model (a layer's dozen GEMMs cost one call's numpy overhead instead of twelve); larger
# ones one by one, where stacking would broadcast their scalar dimensions to full arrays.
STACK_MAX_ELEMENTS = 4096


# Weight-only quantised GEMMs (weights stored narrower than the 16-bit activations they multiply,
# dequantised in the kernel) of few rows (tokens) are not run as tensor-core tiles padded to 128
# rows. llama.cpp (ggml/src/ggml-cuda): up to `MMVQ_MAX_BATCH_SIZE` = 8 tokens `mul_mat_vec_q`
# (mmvq.cuh; for the experts, `MUL_MAT_ID` with their ids), one dot product per weight row over all
# the tokens, the weights read once; above, `mul_mat_q` (mmq.cuh), whose tile is 128 weight rows by
# mmq_x tokens, mmq_x picked from 8 to 128 in steps of 8 (of 16 from 48: `mmq_get_granularity`) for
# the fewest tiles: the tokens padded to 8 or 16, not to 128. llama.cpp's experts are not: MMQ with ids
# sizes the tile from the whole micro-batch (`physics.mmq_ids`, where `Gpu.mmq_token_tiles`).
MATVEC_MAX_ROWS = 8
NARROW_TILE_MAX_ROWS = 128  # mmq_x_max with tensor cores (Turing and later)
NARROW_TILE_GRANULARITY = ((48, 8.0), (NARROW_TILE_MAX_ROWS, 16.0))  # (below this many tokens, step)


def weight_only_s(g: Gemm, gpu: Gpu, precision: str) -> Number:
    """A weight-only quantised GEMM of at most `NARROW_TILE_MAX_ROWS` rows: its bytes, and its FLOPs
    on the rows padded to the token tile's step (none up to `MATVEC_MAX_ROWS`: a matrix-vector
    kernel), by the roofline at the 16-bit tensor rate, plus a GEMM kernel's fixed time
    (`physics.gemm`)."""
    m = np.asarray(g.m, dtype=float)
    step = np.where(m < NARROW_TILE_GRANULARITY[0][0], NARROW_TILE_GRANULARITY[0][1], NARROW_TILE_GRANULARITY[1][1])
    rows = np.where(m <= MATVEC_MAX_ROWS, m, np.ceil(m / step - 1e-6) * step)  # m: an expectation, not whole
    flops = g.flops * rows / np.where(m > 0, m, 1.0)
    out_bytes = m * g.n * g.batch * g.out_bytes
    return roofline_s(flops, g.operand_bytes + out_bytes, gpu, precision) + kernel_fixed_s(gpu)


def _weight_only_narrow(g: Gemm, precision: str) -> Number:
    """Where `g` is a weight-only quantised GEMM of at most `NARROW_TILE_MAX_ROWS` rows (`weight_only_s`)."""
    if precision not in SIXTEEN_BIT or not np.any(np.asarray(g.b_bytes) < np.asarray(g.a_bytes)):
        return False
    return (np.asarray(g.b_bytes) < np.asarray(g.a_bytes)) & (np.asarray(g.m) <= NARROW_TILE_MAX_ROWS)


def gemms_s(gs: Sequence[Gemm], gpu: Gpu, precision: str) -> list[Number]:
    """`gemm_s` of each GEMM, all in one precision; the same numbers as one call each (the model
    is elementwise), with the small ones priced together (STACK_MAX_ELEMENTS); a weight-only
    quantised GEMM of few rows by its own kernels (`weight_only_s`)."""
    out = _tiled_s(gs, gpu, precision)
    for i, g in enumerate(gs):
        narrow = _weight_only_narrow(g, precision)
        if np.any(narrow):
            out[i] = np.where(narrow, weight_only_s(g, gpu, precision), out[i])
    return out


def _tiled_s(gs: Sequence[Gemm], gpu: Gpu, precision: str) -> list[Number]:
    """`gemms_s` by the tile model (or the GPU's table), every GEMM."""
    out: list[Number] = [0.0] * len(gs)
    shaped = []
    for i, g in enumerate(gs):
        if np.all(np.asarray(g.m) == 0):
            out[i] = roofline_s(g.flops, g.bytes, gpu, precision)
        else:
            shaped.append(i)
    if not shaped:
        return out
    fields = [(gs[i].m, gs[i].n, gs[i].k, gs[i].batch, gs[i].operand_bytes, gs[i].out_bytes) for i in shaped]
    # each GEMM's time takes the shape of its fields and the GPU's (a calibration's GPU may hold arrays)
    read = (gpu.peak_flops_per_s(precision), gpu.matmul_efficiency_for(precision), gpu.memory_bandwidth_bytes_per_s)
    l2 = (gpu.l2_bytes, gpu.l2_bandwidth_bytes_per_s)  # split-K's partials (`physics.gemm.l2_of`)
    by_gpu = [np.shape(x) for x in (*read, gpu.memory_efficiency, gpu.sm_count, gpu.kernel_launch_s, *l2)]
    owns = [np.broadcast_shapes(*by_gpu, *(np.shape(x) for x in f)) for f in fields]
    shape = np.broadcast_shapes(*owns)
    if len(shaped) > 1 and int(np.prod(shape)) <= STACK_MAX_ELEMENTS:
        stacked = np.empty((6, len(fields), *shape))
        for row, f in enumerate(fields):
            for j, x in enumerate(f):
                stacked[j, row] = x
        times = _shaped_s(*stacked, gpu, precision)
        for row, (i, own) in enumerate(zip(shaped, owns, strict=True)):
            lead = (0,) * (len(shape) - len(own))
            out[i] = times[(row, *lead, *(slice(0, 1) if d == 1 else slice(None) for d in own))]
    else:
        for i, f in zip(shaped, fields, strict=True):
            out[i] = _shaped_s(*f, gpu, precision)
    return out


def _shaped_s(
    m: Number, n: Number, k: Number, batch: Number, operand_bytes: Number, out_bytes: Number, gpu: Gpu, precision: str
) -> Number:
    """A GEMM of known shape: the tile model, or the GPU's measured table in 16 bits; plus the
    launch gap."""
    peak, eff = gpu.peak_flops_per_s(precision), gpu.matmul_efficiency_for(precision)
    if gpu.gemm_table is not None and precision in SIXTEEN_BIT:
        bw = gpu.memory_bandwidth_bytes_per_s * gpu.memory_efficiency
        roof = (operand_bytes + m * n * batch * out_bytes) / bw
        return table_time_s(gpu.gemm_table, m, n, k, batch, roof, peak, eff) + gpu.kernel_launch_s
    return gemm_time_s(m, n, k, batch, operand_bytes, out_bytes, gpu, peak, eff) + gpu.kernel_launch_s
