"""Time of one GEMM on one GPU from its shape: tiles, waves and per-tile fixed costs.

A GEMM C[M x N] = A[M x K] B[K x N] runs as output tiles of tm x tn, one thread block per
tile, at most one tile per SM at a time (NVIDIA, "Matrix Multiplication Background User's
Guide", sections "Tile quantization" and "Wave quantization"; Narayanan et al. 2021 Sec. 3.4):

    tiles = ceil(M / tm) * ceil(N / tn) * batch * split_k
    waves = ceil(tiles / SMs)
    t_tile = t_fill + 2 tm tn (K / split_k) / (F_sm * eta) + tm tn c_out / (BW_sm * eta_mem)
    T = waves * t_tile (+ the split-K reduction)

F_sm and BW_sm are the GPU's dense peak and HBM bandwidth divided by its SMs; eta the fraction
of peak a tile's main loop reaches (the GPU's `matmul_efficiency`); t_fill the exposed latency
of a tile's first operand loads (about one HBM round trip); c_out the bytes per output element
the epilogue moves (2 for a 16-bit output; 8 when the weight gradient is accumulated into an
fp32 main_grad, read and written: Megatron's gradient-accumulation fusion). Short K makes the
fill and the epilogue a large share of a tile (the short-K penalty); a tile count just above a
multiple of the SMs leaves the last wave mostly idle (wave quantization); an M or N just above a
multiple of the tile is padded (tile quantization).

The tile shapes are cuBLAS-like candidates (256x128, 128x256, 128x128), each also with split-K
2, 4, 8 or 16 (the partial sums are written in fp32 and reduced): that fills the SMs when there
are few tiles (decoding's thin GEMMs) or evens out a last wave that is nearly empty. The partial
sums are written and read back at the L2 bandwidth where all the splits' partials fit in L2
(`Gpu.l2_bytes`: the reduction reads what the GEMM just wrote, still resident), otherwise at HBM's. The
fastest is taken, as cuBLAS's heuristics aim to. The memory roof (every operand read once,
the output written once) bounds each GEMM kernel from below; a kernel of its own before or after
it (split-K's reduction, stream-K's workspace reset) runs on the same stream and cannot hide
under its HBM stream, so it is added after the roof: T = max(T_gemm, roof) + T_other + t_kernel,
t_kernel what the GEMM's kernel pays once on the GPU whatever its tiles (`kernel_fixed_s`): the
drain of its last stores (every GPU) and, on Hopper and Blackwell, its TMA descriptors fetched
before the first load, one memory round trip each (0.5 + 0.5 us); a CUDA graph does not remove
them (it shortens the launch gap, `Gpu.kernel_launch_s`, priced apart). A GPU without a known SM
count falls back to the plain roofline at `matmul_efficiency`.

Hopper (`Gpu.gemm_kernels` "sm90") and Blackwell (with Hopper, "sm100") run GEMMs as CUTLASS
3.x's persistent warp-specialized kernels do (NVIDIA CUTLASS docs, "CUTLASS 3.x kernel schedules",
`KernelTmaWarpSpecializedPingpong`):
  - Hopper, 64-row tiles (64x128, 64x256): one warpgroup's wgmma is M = 64 (PTX ISA, `wgmma.mma_async`
    shapes m64nNk16), and the ping-pong schedule gives each of an SM's two consumer warpgroups
    its own output tile: two 64-row tiles are resident per SM, each at half the SM's rate
    (`resident` = 2). Per SM that is the rate of a 128-row tile, padded to 64 rows instead of
    128 and quantized in waves of 2 x SMs tiles. Blackwell's tcgen05 MMA keeps its accumulator
    in tensor memory, 128 lanes per SM; an M = 64 MMA fills half of them (PTX ISA, tcgen05
    data-path layouts), so a 64-row tile runs at half the SM's rate with nothing beside it: no
    faster than a 128-row tile. Blackwell keeps the three large tiles.
  - Hopper and Blackwell, stream-K (Osama et al. 2023, "Stream-K: Work-centric Parallel Decomposition for Dense
    Matrix-Matrix Multiplication on the GPU", PPoPP; CUTLASS's sm90/sm100 stream-K tile
    scheduler, `tile_scheduler_params.h`): where the last wave is not full, the tiles of the
    last full wave and of the partial one are split along K evenly over the SMs instead of run
    whole (their data-parallel + stream-K hybrid), each unit doing at least `STREAM_K_MIN_ITERS`
    k-iterations of `STREAM_K_TILE_K` (CUTLASS's `min_iters_per_sk_unit_`). Each unit that
    shares a tile writes its fp32 partial tile to a workspace and the tile's owner reads it
    back (the fix-up), at L2 bandwidth where the workspace fits in L2; the barrier flags are
    zeroed before each run (CUTLASS's `zero_workspace`, a cudaMemsetAsync: one more launch).
    CUTLASS's heuristic takes stream-K when the partial wave is under half full; here the
    faster of the two is taken.
Other GPUs keep the three large tiles and split-K (cuBLAS's Ampere kernel choice is not published).
An earlier trial of 64-row tiles and stream-K (no fix-up, one resident tile) was not kept
(leave-one-source-out 8.34% -> 8.36%). This version, after the refit (H100 scale 0.885 -> 0.870,
GB300 0.98 -> 0.975): leave-one-source-out 7.02% -> 7.05% (leave Megatron-Core out: 10.2% ->
11.1%, its H100 runs then unfitted and faster), TensorRT-LLM serving (`validate inference`) 8.2%
-> 9.0% (predicted faster; its FP4 Blackwell rows 12.0% -> 13.3%), TP(k)/TP(k/2) serving ratios
on NVLink 10.4% -> 8.2%; XLA's GEMM table (`tools/gemm_shapes.py`) H100 8.0% -> 8.0%, B200 5.1%
-> 4.6% about their medians.

A GPU with a measured GEMM table (`Gpu.gemm_table`, from `shardwise measure micro`) prices its
16-bit GEMMs from the table instead (`table_time_s`): the rate of the nearest measured shape, the
distance taken in log m x batch, log n and log k (a GEMM twice as tall is as far as one twice as
deep), bounded below by the memory roof. A measurement already holds the tiles, the waves and the
library's kernel choice that the model above estimates.
"""

from __future__ import annotations

import math

import numpy as np

from shardwise.specs import GemmTable, Gpu
from shardwise.specs._checks import Number

# Output-tile shapes (rows, columns, tiles resident per SM) and split-K factors tried (module
# docstring): a project choice of cuBLAS-like candidates, since cuBLAS's own heuristics are not
# published. Hopper adds the ping-pong 64-row tiles, two resident per SM.
Tiles = tuple[tuple[int, int, int], ...]
TILES: Tiles = ((256, 128, 1), (128, 256, 1), (128, 128, 1))
WARPGROUP_TILES = (*TILES, (64, 128, 2), (64, 256, 2))
# Which GPUs take warpgroup MMAs (wgmma, sm90) with M = 64 per warpgroup, and whose libraries run
# persistent stream-K kernels (CUTLASS 3.x sm90 and sm100 tile schedulers): `Gpu.gemm_kernels`, a
# trait of each GPU preset (gpus.yaml), so a GPU described in a YAML file of its own gets them too.
WARPGROUP_KERNELS = frozenset({"sm90"})
STREAM_K_KERNELS = frozenset({"sm90", "sm100"})
# Stream-K: K depth of one k-iteration (CUTLASS sm90's 16-bit tile shapes are tm x tn x 64) and
# the fewest k-iterations one stream-K unit takes (`min_iters_per_sk_unit_` = 8, CUTLASS
# tile_scheduler_params.h). A range: 64-128 (128 for 8-bit operands, not told apart here).
STREAM_K_TILE_K = 64.0
STREAM_K_MIN_ITERS = 8.0
SPLIT_K = (2.0, 4.0, 8.0, 16.0)
# L2 per GPU: `Gpu.l2_bytes` and `Gpu.l2_bandwidth_bytes_per_s`, set in gpus.yaml with their
# sources (A100: 40 MB at 5120 bytes/clock and 1410 MHz; GH100: 50 MB, A100's bytes/clock at 1755
# MHz). GPUs without them (Blackwell, AMD, consumer cards) read partial sums at HBM bandwidth.
# Exposed latency of a tile's first loads before its main loop runs: one HBM round trip is
# 0.5-0.8 us on A100/H100 (Jia et al. 2018/2019 "Dissecting the NVIDIA Volta/Turing GPU
# architecture via microbenchmarking": global-memory latency ~ 400-1000 cycles).
TILE_FILL_S = 0.5e-6
# What one GEMM kernel pays once, on the GPU, whatever its tiles (`kernel_fixed_s`; added after the
# memory roof: it runs before the first operand load or after the last store, never beside them).
# A CUDA graph removes the host's launch and shortens the gap between kernels (`Gpu.kernel_launch_s`,
# engines/serving.py RUNTIMES) but not these: they are the kernel's own time, in any runtime.
#  - the drain: the last wave's output tiles are stored and made visible before the grid completes
#    (a CTA's stores reach L2 and the grid's completion waits for them): one memory round trip, as
#    TILE_FILL_S (0.2-0.8 us: an L2 hit to an HBM miss, Jia et al. 2018/2019). Every GPU.
#  - the tensor-map fetch (Hopper and Blackwell, `TMA_KERNELS`): a CUTLASS 3.x / cuBLAS sm90 and sm100
#    kernel prefetches its TMA descriptors (`prefetch.tensormap`, 128 bytes each, passed as kernel
#    parameters in memory) at its start, and no TMA load of an operand can issue before its
#    descriptor has arrived: one more dependent round trip ahead of the first tile's fill (CUTLASS
#    sm90 kernels, `prefetch_tma_descriptor` before the producer's first load; PTX ISA
#    `cp.async.bulk.tensor` reads the tensor map from memory). Same range. Ampere's cp.async takes
#    plain addresses from the kernel's parameters, already in its constant bank at launch.
# Not priced: the grid's launch and completion on the device, which a chain of empty kernels in a
# CUDA graph measures at 0.58 us per kernel, gap included (ahrefs/ocannl#488, RTX 5070 Ti, CUDA
# 13.3): `kernel_launch_s` (1 us under graphs, 3 us eager) already holds it.
GEMM_DRAIN_S = 0.5e-6
TMA_DESCRIPTOR_S = 0.5e-6
TMA_KERNELS = STREAM_K_KERNELS  # TMA loads: the same CUTLASS 3.x kernels
SPLIT_K_PARTIAL_BYTES = 4.0  # fp32 partial sums, written once and read once by the reduction
# Split-K is tried where SPLIT_K_PROBE_TILE x SPLIT_K_PROBE_TILE tiles (the smallest of TILES)
# make at most SPLIT_K_WAVES waves: a project choice that keeps the search to the thin GEMMs.
SPLIT_K_WAVES = 4
SPLIT_K_PROBE_TILE = 128.0
# Arrays of at most this many elements price all tile candidates (and split-K factors) at once,
# larger ones one at a time (`gemm_time_s`): a speed setting of the code, not of the model (the
# numbers are the same either way; measured break-even about 1,000 on H100 and A100 presets).
STACK_MAX_ELEMENTS = 512


def _whole_tiles(
    tiles: Number,
    work: Number,
    n_sm: Number,
    resident: int,
    area: int,
    roof: Number,
    sk: tuple[Number, tuple[float, Number, Number], Number] | None,
) -> Number:
    """Seconds of `tiles` output tiles of `area` elements, each `work` seconds at a whole SM's
    rate (main loop and epilogue), `resident` per SM at 1/resident of its rate: whole waves
    (waves x (fill + resident x work)), or with `sk` = (k-iterations per tile, (L2 capacity
    bytes, L2 bytes/s, HBM bytes/s), setup seconds) the faster of that and the data-parallel +
    stream-K hybrid (module docstring): whole waves but the last full one run as tiles, the rest
    of the tiles' k-iterations spread evenly over the stream-K units, plus one fill, the fix-up
    of the partial tiles, and the setup (the barrier workspace zeroed before each run: CUTLASS's
    `zero_workspace`, a cudaMemsetAsync, priced as one more launch). Each kernel takes at least
    the memory `roof`; the setup runs before the GEMM's kernel and adds to it."""
    slots = n_sm * resident
    t_tile = TILE_FILL_S + resident * work
    whole = np.maximum(np.ceil(tiles / slots) * t_tile, roof)
    if sk is None:
        return whole
    k_iters, fixup_bw, setup_s = sk
    dp_waves = np.maximum(np.floor(tiles / slots) - 1.0, 0.0)
    sk_tiles = tiles - dp_waves * slots
    units = np.minimum(n_sm, np.maximum(np.floor(sk_tiles * k_iters / STREAM_K_MIN_ITERS), 1.0))
    workspace = units * (area * SPLIT_K_PARTIAL_BYTES)  # at most one partial tile per unit
    fixup = 2.0 * workspace / partial_sums_bw(workspace, *fixup_bw)
    hybrid = np.maximum(dp_waves * t_tile + TILE_FILL_S + sk_tiles * work / units + fixup, roof)
    return np.minimum(whole, hybrid + setup_s)


_CANDIDATES: dict[tuple[Tiles, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}


def _candidates(tiles: Tiles, nd: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, columns, tiles resident per SM) of each tile candidate, as float arrays on a leading
    axis ahead of `nd` broadcast axes (built once per candidates and rank, read-only)."""
    got = _CANDIDATES.get((tiles, nd))
    if got is None:
        arrays = [np.asarray([t[i] for t in tiles], dtype=float).reshape(-1, *(1,) * nd) for i in range(3)]
        for a in arrays:
            a.flags.writeable = False
        got = _CANDIDATES[tiles, nd] = (arrays[0], arrays[1], arrays[2])
    return got


def kernel_fixed_s(gpu: Gpu) -> float:
    """Seconds one GEMM kernel pays once on the GPU, beside its tiles' waves: the drain of its last
    stores, and on Hopper and Blackwell its TMA descriptors fetched before the first load
    (`GEMM_DRAIN_S`, `TMA_DESCRIPTOR_S`)."""
    return GEMM_DRAIN_S + (TMA_DESCRIPTOR_S if gpu.gemm_kernels in TMA_KERNELS else 0.0)


def l2_of(gpu: Gpu) -> tuple[Number, Number]:
    """(L2 capacity bytes, L2 bandwidth at the GPU's streaming efficiency) from the GPU's fields;
    (0, 0) where not given."""
    capacity = gpu.l2_bytes if np.ndim(gpu.l2_bytes) else float(gpu.l2_bytes)
    l2_bw, eff = gpu.l2_bandwidth_bytes_per_s, gpu.memory_efficiency
    if np.ndim(l2_bw) == 0 and np.ndim(eff) == 0:  # the hot path: plain floats, no arrays built
        return capacity, float(l2_bw) * float(eff)
    return capacity, np.asarray(l2_bw, dtype=float) * np.asarray(eff, dtype=float)


def partial_sums_bw(workspace_bytes: Number, l2_capacity_bytes: Number, l2_bw: Number, hbm_bw: Number) -> Number:
    """Bytes/s at which split-K's fp32 partial sums are written and read back: L2's where the
    whole workspace fits in it, else HBM's."""
    return np.where(workspace_bytes <= l2_capacity_bytes, np.maximum(l2_bw, hbm_bw), hbm_bw)


def gemm_time_s(
    m: Number,
    n: Number,
    k: Number,
    batch: Number,
    operand_bytes: Number,
    out_bytes: Number,
    gpu: Gpu,
    peak_flops_per_s: Number,
    efficiency: Number,
) -> Number:
    """Seconds of `batch` independent (m x k) @ (k x n) products (see the module docstring).

    `operand_bytes`: bytes read from memory for A and B (all batches); `out_bytes`: bytes the
    epilogue moves per output element. Includes the kernel's own fixed time on the GPU
    (`kernel_fixed_s`); excludes the kernel launch gap.
    """
    m, n, k, batch = (np.asarray(x, dtype=float) for x in (m, n, k, batch))
    flops = 2.0 * m * n * k * batch
    bw = gpu.memory_bandwidth_bytes_per_s * gpu.memory_efficiency
    memory_roof = (operand_bytes + m * n * batch * out_bytes) / bw
    sms = np.asarray(gpu.sm_count, dtype=float)
    plain = flops / (peak_flops_per_s * efficiency)
    if not np.any(sms > 0):
        return np.maximum(plain, memory_roof)
    n_sm = np.where(sms > 0, sms, 1.0)
    f_sm = peak_flops_per_s * efficiency / n_sm
    bw_sm = bw / n_sm
    tiles = WARPGROUP_TILES if gpu.gemm_kernels in WARPGROUP_KERNELS else TILES
    l2_capacity, l2_bw = l2_of(gpu)
    stream_k = gpu.gemm_kernels in STREAM_K_KERNELS
    sk = (np.ceil(k / STREAM_K_TILE_K), (l2_capacity, l2_bw, bw), gpu.kernel_launch_s) if stream_k else None
    # small arrays (one call's numpy overhead dominates): the tile candidates on a leading axis,
    # all at once; large ones: one candidate at a time (the temporaries stay small). The same
    # element-wise operations either way, so the same numbers; the fastest is a minimum, exact in
    # any order.
    # every input is in one of these (the roof: m, n, batch, the bytes; `plain`: k; the SMs' rate)
    reach = (memory_roof, plain, f_sm, l2_bw, l2_capacity, gpu.kernel_launch_s)
    stacked = math.prod(np.broadcast_shapes(*(np.shape(x) for x in reach))) <= STACK_MAX_ELEMENTS
    if stacked:
        tm, tn, resident = _candidates(tiles, max(np.ndim(x) for x in reach))
        work = 2.0 * tm * tn * k / f_sm + tm * tn * out_bytes / bw_sm
        n_tiles = np.ceil(m / tm) * np.ceil(n / tn) * batch
        best = np.minimum.reduce(_whole_tiles(n_tiles, work, n_sm, resident, tm * tn, memory_roof, sk), axis=0)
    else:
        rows = {tm: np.ceil(m / tm) for tm in {t[0] for t in tiles}}
        cols = {tn: np.ceil(n / tn) for tn in {t[1] for t in tiles}}
        best = None
        for tm, tn, resident in tiles:
            work = 2.0 * tm * tn * k / f_sm + tm * tn * out_bytes / bw_sm
            t = _whole_tiles(rows[tm] * cols[tn] * batch, work, n_sm, resident, tm * tn, memory_roof, sk)
            best = t if best is None else np.minimum(best, t)
    # split-K can only pay where there are few waves; price it there alone (decoding's thin
    # GEMMs, small attention blocks), not on the whole array
    few = np.ceil(m / SPLIT_K_PROBE_TILE) * np.ceil(n / SPLIT_K_PROBE_TILE) * batch <= SPLIT_K_WAVES * n_sm
    if np.any(few):
        shape = np.broadcast_shapes(np.shape(best), np.shape(few))
        flat = np.array(np.broadcast_to(best, shape), dtype=float).reshape(-1)
        mask = np.broadcast_to(few, shape).reshape(-1)

        def pick(x: Number) -> np.ndarray:
            return np.broadcast_to(np.asarray(x, dtype=float), shape).reshape(-1)[mask]

        sm_, sn, sk_, sb, so = pick(m), pick(n), pick(k), pick(batch), pick(out_bytes)
        s_nsm, s_fsm, s_bw, s_roof = pick(n_sm), pick(f_sm), pick(bw), pick(memory_roof)
        s_l2_bw, s_l2 = pick(l2_bw), pick(l2_capacity)
        final = sm_ * sn * sb * so / s_bw + gpu.kernel_launch_s
        # a matrix-vector kernel (`Gpu.matvec_max_rows`) splits K inside itself: no partials, no reduction kernel
        reduce = np.where(sm_ * sb <= gpu.matvec_max_rows, 0.0, 1.0)
        sub = flat[mask]
        # every tile candidate at once for small arrays, one at a time (its splits stacked) for large
        for group in (tiles,) if stacked else tuple((t,) for t in tiles):
            sub = _split_k(sub, group, sm_, sn, sk_, sb, s_nsm, s_fsm, s_bw, s_roof, s_l2_bw, s_l2, final, reduce)
        flat[mask] = sub
        best = flat.reshape(shape)
    return np.where(sms > 0, best + kernel_fixed_s(gpu), np.maximum(plain, memory_roof))


def _split_k(
    best: np.ndarray,
    tiles: Tiles,
    m: np.ndarray,
    n: np.ndarray,
    k: np.ndarray,
    batch: np.ndarray,
    n_sm: np.ndarray,
    f_sm: np.ndarray,
    bw: np.ndarray,
    roof: np.ndarray,
    l2_bw: np.ndarray,
    l2_capacity: np.ndarray,
    final: np.ndarray,
    reduce: np.ndarray,
) -> np.ndarray:
    """`best` (seconds of the GEMMs picked, 1-D) or a split-K candidate where faster: each of the
    `tiles` candidates and splits at once, on two leading axes: the split's partials written and
    read back, its tiles in waves (element by element the same operations whatever the grouping);
    `reduce` 0: a matrix-vector kernel's split, reduced inside the kernel (no partials, no second kernel).

    The fastest tile candidate of each split is taken from its waves alone, before the partials,
    the roof and the reduction kernel are added: those do not depend on the tile, and each step
    after the waves (a rounded sum, a maximum) is non-decreasing in them, so f(min waves) =
    min f(waves) to the bit, with fewer passes over the (tiles x splits x GEMMs) array."""
    tm, tn, resident = _candidates(tiles, 2)
    split = np.reshape(SPLIT_K, (-1, 1))
    partial_bytes = m * n * batch * SPLIT_K_PARTIAL_BYTES  # one split's fp32 partial sums
    # each split's partials written once (by the GEMM's kernel) and read once (by the reduction's)
    r_s = reduce * split * partial_bytes / partial_sums_bw(split * partial_bytes, l2_capacity, l2_bw, bw)
    base_tiles = np.ceil(m / tm) * np.ceil(n / tn) * batch
    main = resident * 2.0 * tm * tn * k / f_sm
    waves = np.ceil(base_tiles * split / (n_sm * resident)) * (TILE_FILL_S + main / split)
    candidates = np.maximum(np.minimum.reduce(waves, axis=0) + r_s, roof) + r_s + reduce * final
    return np.minimum(best, np.minimum.reduce(candidates, axis=0))


def table_time_s(
    table: GemmTable,
    m: Number,
    n: Number,
    k: Number,
    batch: Number,
    memory_roof_s: Number,
    peak_flops_per_s: Number,
    efficiency: Number,
) -> Number:
    """Seconds of `batch` (m x k) @ (k x n) products at the measured rate of the table's nearest
    shape (module docstring): 2 m n k batch / (peak x efficiency x relative rate), at least the
    memory roof. Excludes the kernel launch gap."""
    m, n, k, batch = (np.asarray(x, dtype=float) for x in (m, n, k, batch))
    lm, ln, lk = np.log(np.maximum(m * batch, 1.0)), np.log(np.maximum(n, 1.0)), np.log(np.maximum(k, 1.0))
    best = rate = None
    for tm, tn, tk, r in zip(table.m, table.n, table.k, table.relative_rate, strict=True):
        d = (lm - np.log(tm)) ** 2 + (ln - np.log(tn)) ** 2 + (lk - np.log(tk)) ** 2
        if best is None:
            best, rate = d, np.full(np.shape(d), r)
        else:
            closer = d < best
            best, rate = np.where(closer, d, best), np.where(closer, r, rate)
    achieved = np.minimum(np.asarray(efficiency) * rate, 1.0)  # never above the peak
    return np.maximum(2.0 * m * n * k * batch / (peak_flops_per_s * achieved), memory_roof_s)
