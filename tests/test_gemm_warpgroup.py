"""GEMM tiles as Hopper and Blackwell run them (issue 33 item 2, `physics.gemm`): ping-pong 64-row
tiles, two resident per SM (Hopper), and the data-parallel + stream-K hybrid (Osama et al. 2023;
Hopper and Blackwell)."""

from __future__ import annotations

import numpy as np
import pytest

from shardwise import presets
from shardwise.physics import gemm

H100 = presets.gpu("h100-sxm5-80gb")
A100 = presets.gpu("a100-sxm4-80gb")
# Llama 3 70B's four linear GEMMs at tensor parallelism 8, (N, K): QKV, attention output, gate+up, down
LLAMA70B_TP8 = ((1280, 8192), (8192, 1024), (7168, 8192), (8192, 3584))


def _time(gpu, m: float, n: float, k: float, batch: float = 1.0) -> float:
    peak, eta = gpu.peak_flops_per_s_16bit, gpu.matmul_efficiency
    return float(gemm.gemm_time_s(m, n, k, batch, 2.0 * batch * (m * k + k * n), 2.0, gpu, peak, eta))


def _layer(gpu, tokens: float) -> float:
    return sum(_time(gpu, tokens, n, k) for n, k in LLAMA70B_TP8)


def test_hopper_takes_the_warpgroup_tiles_and_ampere_keeps_its_own():
    # the GPUs' traits (gpus.yaml): every Hopper preset runs sm90 kernels, every data-centre
    # Blackwell sm100 (the 750 W B200 too), the rest the generic tiles
    kernels = {name: presets.gpu(name).gemm_kernels for name in presets.names("gpus")}
    hopper = {"h100-sxm5-80gb", "h100-sxm5-64gb", "h100-pcie-80gb", "h100-meta", "h800-sxm5-80gb", "h200-sxm-141gb"}
    blackwell = {"b200-sxm-180gb", "b200-750w", "gb200", "b300-sxm-270gb", "gb300"}
    assert {n for n, k in kernels.items() if k == "sm90"} == hopper
    assert {n for n, k in kernels.items() if k == "sm100"} == blackwell
    assert "sm90" in gemm.WARPGROUP_KERNELS and "sm100" not in gemm.WARPGROUP_KERNELS
    # Blackwell streams K but keeps 128-row tiles (an M = 64 tcgen05 MMA fills half its lanes)
    assert {"sm90", "sm100"} == gemm.STREAM_K_KERNELS and "generic" not in gemm.STREAM_K_KERNELS
    assert (64, 128, 2) in gemm.WARPGROUP_TILES and all(tm >= 128 for tm, _, _ in gemm.TILES)
    # every GH100 preset has the GH100 L2 for its stream-K fix-up and split-K partials
    assert all(gemm.l2_of(presets.gpu(g))[0] == 50e6 for g in ("h100-sxm5-80gb", "h100-meta", "h200-sxm-141gb"))


def test_a_decode_step_past_128_sequences_has_no_cliff_on_hopper():
    """Issue 33: one sequence more than 128 cost Llama 3 70B's TP-8 layer 23% more on H100 (a
    second 128-row tile everywhere); with 64-row tiles and stream-K it costs a few percent.
    The A100 keeps 128-row tiles: there the step stays (its kernels are not modelled anew)."""
    assert _layer(H100, 129) / _layer(H100, 128) < 1.05
    assert _layer(A100, 129) / _layer(A100, 128) > 1.3


def test_stream_k_evens_out_the_last_wave(monkeypatch):
    """661 tiles of 128 x 256 on 132 SMs: five full waves and one tile. Whole tiles take a sixth
    wave (+10%); stream-K spreads the last full wave and the lone tile over every SM."""
    m, n, k = 128.0 * 661, 256.0, 8192.0
    with_sk = _time(H100, m, n, k) / _time(H100, m - 128, n, k)
    monkeypatch.setattr(gemm, "STREAM_K_KERNELS", frozenset())
    without = _time(H100, m, n, k) / _time(H100, m - 128, n, k)
    assert with_sk < 1.02 < 1.08 < without


def test_64_row_tiles_pad_to_64_rows(monkeypatch):
    """A GEMM of 63 x 64 rows costs 63/64 of one of 64 x 64 rows with 64-row tiles; with only
    128-row tiles both are padded to 4096 rows and cost the same."""
    n, k = 8192.0, 8192.0
    ratio = _time(H100, 4032, n, k) / _time(H100, 4096, n, k)
    assert ratio == pytest.approx(4032 / 4096, rel=2e-3)
    monkeypatch.setattr(gemm, "WARPGROUP_TILES", gemm.TILES)
    assert _time(H100, 4032, n, k) == pytest.approx(_time(H100, 4096, n, k), rel=1e-9)


def test_stream_k_pays_its_fix_up_and_workspace_reset(monkeypatch):
    """Stream-K is not free: without the fix-up traffic and the workspace reset (one launch) a
    thin, deep GEMM that only stream-K balances would be cheaper."""
    m, n, k = 512.0, 1280.0, 65536.0  # 4 x 10 tiles of 128 x 128 for 132 SMs, no split-K can help more
    priced = _time(H100, m, n, k)
    monkeypatch.setattr(gemm, "SPLIT_K_PARTIAL_BYTES", 0.0)
    free_fixup = _time(H100, m, n, k)
    assert free_fixup < priced
    assert _time(H100.with_(kernel_launch_s=0.0), m, n, k) < free_fixup


def test_gemm_time_stays_monotone_on_hopper():
    """More rows, columns or depth never make a GEMM faster, with stream-K and two tile heights
    (the fastest candidate is taken, each candidate is monotone)."""
    rng = np.random.default_rng(1)
    for _ in range(150):
        m, n, k = (int(x) for x in rng.integers(1, 20000, 3))
        base = _time(H100, m, n, k)
        for grown in ((m + 1, n, k), (m, n + 1, k), (m, n, k + 1), (2 * m, n, k)):
            assert _time(H100, *grown) >= base * (1 - 1e-12), (m, n, k, grown)


def test_a_second_kernel_does_not_hide_under_the_weight_stream():
    """Llama 3 70B's QKV GEMM at TP 8 on 16 decoding sequences streams 21 MB of weights: whatever
    spreads it over the SMs (stream-K's workspace reset, split-K's reduction) is a kernel of its
    own before or after that stream, so each microsecond of launch cost is paid in full."""
    m, n, k = 16.0, 1280.0, 8192.0
    roof = 2.0 * (m * k + k * n + m * n) / (H100.memory_bandwidth_bytes_per_s * H100.memory_efficiency)
    base = _time(H100, m, n, k)
    slower = _time(H100.with_(kernel_launch_s=H100.kernel_launch_s + 2e-6), m, n, k)
    assert base > roof + H100.kernel_launch_s * 0.99
    assert slower - base == pytest.approx(2e-6, rel=1e-6)
