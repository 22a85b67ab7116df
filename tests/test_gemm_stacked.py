"""`physics.gemm.gemm_time_s` prices its tile candidates (and split-K factors) on leading axes
where the arrays are small (`STACK_MAX_ELEMENTS`): the same numbers, to the bit, as one candidate
at a time (issue 38, the explorer's serving tab). The reference below is the loop as it was."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from shardwise import presets
from shardwise.physics import gemm
from shardwise.physics.gemm import (
    SPLIT_K,
    SPLIT_K_PARTIAL_BYTES,
    SPLIT_K_PROBE_TILE,
    SPLIT_K_WAVES,
    STREAM_K_KERNELS,
    STREAM_K_TILE_K,
    TILE_FILL_S,
    TILES,
    WARPGROUP_KERNELS,
    WARPGROUP_TILES,
    _whole_tiles,
    kernel_fixed_s,
    l2_of,
    partial_sums_bw,
)

GPUS = ("h100-sxm5-80gb", "h200-sxm-141gb", "a100-sxm4-80gb", "b200-sxm-180gb", "gb300", "mi300x", "l40s")


def loop_time_s(m, n, k, batch, operand_bytes, out_bytes, gpu, peak_flops_per_s, efficiency):
    """gemm_time_s as it was: one tile candidate, then one split-K factor, at a time."""
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
    best = None
    for tm, tn, resident in tiles:
        work = 2.0 * tm * tn * k / f_sm + tm * tn * out_bytes / bw_sm
        t = _whole_tiles(np.ceil(m / tm) * np.ceil(n / tn) * batch, work, n_sm, resident, tm * tn, memory_roof, sk)
        best = t if best is None else np.minimum(best, t)
    few = np.ceil(m / SPLIT_K_PROBE_TILE) * np.ceil(n / SPLIT_K_PROBE_TILE) * batch <= SPLIT_K_WAVES * n_sm
    if np.any(few):
        shape = np.broadcast_shapes(np.shape(best), np.shape(few))
        flat = np.array(np.broadcast_to(best, shape), dtype=float).reshape(-1)
        mask = np.broadcast_to(few, shape).reshape(-1)

        def pick(x):
            return np.broadcast_to(np.asarray(x, dtype=float), shape).reshape(-1)[mask]

        sm_, sn, sk_, sb, so = pick(m), pick(n), pick(k), pick(batch), pick(out_bytes)
        s_nsm, s_fsm, s_bw, s_roof, s_l2_bw = pick(n_sm), pick(f_sm), pick(bw), pick(memory_roof), pick(l2_bw)
        partial_bytes = sm_ * sn * sb * SPLIT_K_PARTIAL_BYTES
        final = sm_ * sn * sb * so / s_bw + gpu.kernel_launch_s
        sub = flat[mask]
        reduce_s = [
            split * partial_bytes / partial_sums_bw(split * partial_bytes, l2_capacity, s_l2_bw, s_bw)
            for split in SPLIT_K
        ]
        for tm, tn, resident in tiles:
            base_tiles = np.ceil(sm_ / tm) * np.ceil(sn / tn) * sb
            main = resident * 2.0 * tm * tn * sk_ / s_fsm
            for split, r_s in zip(SPLIT_K, reduce_s, strict=True):
                t = np.ceil(base_tiles * split / (s_nsm * resident)) * (TILE_FILL_S + main / split) + r_s
                sub = np.minimum(sub, np.maximum(t, s_roof) + r_s + final)
        flat[mask] = sub
        best = flat.reshape(shape)
    return np.where(sms > 0, best + kernel_fixed_s(gpu), np.maximum(plain, memory_roof))


def shapes(rng: np.random.Generator, rows: int, cols: int) -> tuple[np.ndarray, ...]:
    """GEMM shapes from decoding's thin ones (split-K, stream-K) to training's large ones."""
    m = rng.choice([1, 2, 7, 33, 64, 100, 128, 255, 500, 1024, 3000, 8192, 20000], size=(rows, 1)).astype(float)
    n = rng.choice([64, 128, 257, 1024, 1280, 4096, 7168, 28672], size=(1, cols)).astype(float)
    k = rng.choice([64, 100, 1024, 8192, 28672], size=(rows, cols)).astype(float)
    return m, n, k


def bits(x) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(x, dtype=float)).view(np.uint64)


@pytest.mark.parametrize("name", GPUS)
@pytest.mark.parametrize("stack_max", [0, 512, 10**9])  # one by one, as shipped, all at once
def test_stacked_candidates_are_the_loops_numbers_to_the_bit(name, stack_max, monkeypatch):
    monkeypatch.setattr(gemm, "STACK_MAX_ELEMENTS", stack_max)
    gpu = presets.gpu(name)
    rng = np.random.default_rng(7)
    peak, eta = gpu.peak_flops_per_s_16bit, gpu.matmul_efficiency
    for rows, cols in ((1, 1), (3, 4), (40, 60)):
        m, n, k = shapes(rng, rows, cols)
        for batch, out_bytes in ((1.0, 2.0), (8.0, 8.0)):
            operand = 2.0 * batch * (m * k + k * n)
            args = (m, n, k, batch, operand, out_bytes, gpu, peak, eta)
            stacked, looped = gemm.gemm_time_s(*args), loop_time_s(*args)
            assert np.shape(stacked) == np.shape(looped)
            assert np.array_equal(bits(stacked), bits(looped)), (name, rows, cols, batch)
    # one shape at a time, plain numbers
    for mm, nn, kk in ((1.0, 8192.0, 8192.0), (512.0, 1280.0, 8192.0), (8192.0, 8192.0, 8192.0)):
        args = (mm, nn, kk, 1.0, 2.0 * (mm * kk + kk * nn), 2.0, gpu, peak, eta)
        assert bits(gemm.gemm_time_s(*args)) == bits(loop_time_s(*args))


def test_a_gpu_holding_arrays_broadcasts_behind_the_candidates():
    """A calibration's GPU may hold arrays (one value per draw): the candidates' leading axis
    stays ahead of them."""
    h100 = presets.gpu("h100-sxm5-80gb")
    gpu = dataclasses.replace(h100, memory_efficiency=np.array([0.7, 0.8, 0.9]))
    m = np.array([[1.0], [64.0], [4096.0], [20000.0]])[..., None]  # (4, 1, 1) against the GPU's (3,)
    args = (m, 4096.0, 8192.0, 1.0, 2.0 * (m * 8192.0 + 8192.0 * 4096.0), 2.0, gpu, 9.89e14, 0.8)
    stacked, looped = gemm.gemm_time_s(*args), loop_time_s(*args)
    assert np.shape(stacked) == (4, 1, 3)
    assert np.array_equal(bits(stacked), bits(looped))
