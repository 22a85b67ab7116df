"""Split-K partial sums read back from L2 where they fit (issue 33 item 2, `Gpu.l2_bytes`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from shardwise import presets
from shardwise.physics import gemm

H100 = presets.gpu("h100-sxm5-80gb")


def _time(gpu, m: float, n: float, k: float) -> float:
    peak, eta = gpu.peak_flops_per_s_16bit, gpu.matmul_efficiency
    return float(gemm.gemm_time_s(m, n, k, 1, 2.0 * (m * k + k * n), 2.0, gpu, peak, eta))


def test_partials_that_fit_in_l2_are_read_at_l2_bandwidth():
    hbm = 3.0e12
    capacity, l2_bw = gemm.l2_of(H100)
    assert capacity == 50e6  # H100 whitepaper
    assert float(l2_bw) == pytest.approx(5120 * 1.755e9 * H100.memory_efficiency)
    fits = gemm.partial_sums_bw(0.5 * capacity, capacity, l2_bw, hbm)
    spills = gemm.partial_sums_bw(2.0 * capacity, capacity, l2_bw, hbm)
    assert float(fits) == pytest.approx(float(l2_bw)) and float(spills) == hbm
    # a GPU without a published L2 keeps HBM bandwidth
    capacity, l2_bw = gemm.l2_of(presets.gpu("mi300x"))
    assert float(gemm.partial_sums_bw(1.0, capacity, l2_bw, hbm)) == hbm


def test_a_thin_split_k_gemm_gets_cheaper_and_a_big_one_does_not_move(monkeypatch):
    """Llama 3 70B's QKV GEMM at tensor parallelism 8 on a 512-token serving iteration (N = 1280,
    K = 8192: 40 tiles for 132 SMs) uses split-K: its reduction now runs at L2 bandwidth. A
    training GEMM has many tiles, never splits, and keeps its time; on Hopper only its stream-K
    fix-up (a few MB, test_gemm_warpgroup.py) reads L2, so the tiles alone are compared here."""
    monkeypatch.setattr(gemm, "STREAM_K_KERNELS", frozenset())
    thin_l2, big_l2 = _time(H100, 512, 1280, 8192), _time(H100, 8192, 8192, 8192)
    no_l2 = replace(H100, l2_bytes=0.0, l2_bandwidth_bytes_per_s=0.0)
    thin_hbm, big_hbm = _time(no_l2, 512, 1280, 8192), _time(no_l2, 8192, 8192, 8192)
    assert thin_l2 < 0.95 * thin_hbm
    assert big_l2 == big_hbm


def test_a_huge_split_k_workspace_spills_to_hbm(monkeypatch):
    """A wide output whose partial sums exceed L2 gains nothing from it (same time with or without
    its L2; tiles without stream-K, whose own fix-up fits), arrays broadcast as scalars do."""
    monkeypatch.setattr(gemm, "STREAM_K_KERNELS", frozenset())
    m, n, k = 512.0, 65536.0, 65536.0  # one split's fp32 partials: 134 MB > 50 MB
    with_l2 = _time(H100, m, n, k)
    assert with_l2 == _time(replace(H100, l2_bytes=0.0, l2_bandwidth_bytes_per_s=0.0), m, n, k)
    ms = np.array([8.0, 512.0])
    out = gemm.gemm_time_s(ms, 8192.0, 8192.0, 1, 2.0 * (ms * 8192 + 8192**2), 2.0, H100, 1e15, 0.7)
    assert np.shape(out) == (2,)


def test_a_swept_l2_prices_each_gpu_as_alone():
    """`l2_bytes` and `l2_bandwidth_bytes_per_s` may be arrays like any spec field: each element priced
    as a GPU with that L2 (the split-K partials' rate picked per element)."""
    gpus = [replace(H100, l2_bytes=c) for c in (0.0, 50e6, 1e9)]
    swept = replace(H100, l2_bytes=np.array([0.0, 50e6, 1e9]))
    for m in (np.array([1.0, 8192.0, 1.0]), np.array([[1.0], [512.0]])):
        ms = np.broadcast_to(m, np.broadcast_shapes(np.shape(m), (3,)))
        got = gemm.gemm_time_s(m, 4096.0, 4096.0, 1.0, 2.0 * (m * 4096 + 4096**2), 2.0, swept, 989.4e12, 0.682)
        for j, gpu in enumerate(gpus):
            mj = ms[..., j]
            one = gemm.gemm_time_s(mj, 4096.0, 4096.0, 1.0, 2.0 * (mj * 4096 + 4096**2), 2.0, gpu, 989.4e12, 0.682)
            assert np.allclose(np.asarray(got)[..., j], one, rtol=1e-12, atol=0)


def test_a_swept_l2_reaches_a_whole_estimate():
    """Through estimate_training_step (physics.kernels stacks a layer's GEMMs by the GPU's shapes):
    each element as the GPU with that L2 alone."""
    from shardwise import Plan, Scenario, estimate_training_step

    system = presets.system("dgx-h100")
    model, plan = presets.model("llama3-8b"), Plan(tp=2, dp=4, global_batch=16)
    for field in ("l2_bytes", "l2_bandwidth_bytes_per_s"):
        values = np.array([0.0, getattr(H100, field)])
        swept = estimate_training_step(Scenario(model, system.with_(gpu=replace(H100, **{field: values})), plan))
        for j, v in enumerate(values):
            alone = estimate_training_step(Scenario(model, system.with_(gpu=replace(H100, **{field: v})), plan))
            assert float(np.asarray(swept.step_time_s)[j]) == pytest.approx(float(alone.step_time_s), rel=1e-12)
