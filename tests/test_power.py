"""Tensor-core throughput at the power limit (physics/power.py): a GEMM benchmark carried from
B200 to GB200, B300 and GB300 by SM count and board power, and the presets that rest on it."""

import numpy as np
import pytest

from shardwise import presets, units
from shardwise.errors import SpecError
from shardwise.loaders import gpu_from_dict
from shardwise.physics.power import DVFS_EXPONENT, power_limited_ratio, sustained_clock_hz

B200 = presets.gpu("b200-sxm-180gb")
MHZ = 1e6


def blackwell(sms: int, watts: float, peak_16bit: float = 2.25e15):
    return B200.with_(name="x", sm_count=sms, tdp_w=watts, peak_flops_per_s_16bit=peak_16bit)


def test_gb300_against_b200_by_hand():
    # (160 / 148)^(2/3) x (1400 / 1000)^(1/3) x 2.25 / 2.5
    by_hand = 1.05337 * 1.11869 * 0.9
    assert power_limited_ratio(presets.gpu("gb300"), B200) == pytest.approx(by_hand, rel=1e-4)


def test_the_same_gpu_or_one_without_a_power_limit_keeps_its_efficiency():
    assert power_limited_ratio(B200, B200) == pytest.approx(1.0)
    assert power_limited_ratio(B200.with_(tdp_w=0.0), blackwell(160, 1400.0)) == 1.0


def test_more_power_never_lowers_the_rate_and_more_sms_at_one_power_run_slower_clocks():
    watts = np.array([800.0, 1000.0, 1200.0, 1400.0])
    ratios = [float(power_limited_ratio(blackwell(148, w), B200)) for w in watts]
    assert ratios == sorted(ratios) and ratios[0] < 1.0 < ratios[-1]
    wide = blackwell(160, 1000.0)
    assert power_limited_ratio(wide, B200) > 1.0  # more SMs: more FLOPs per clock
    assert sustained_clock_hz(wide, B200, 1580 * MHZ) < 1580 * MHZ  # but each at a lower clock


def test_a_clock_limited_part_would_scale_with_its_sms_alone():
    # alpha -> infinity: power no longer sets the clock, the rate is SMs x the same clock
    ratio = power_limited_ratio(blackwell(160, 1400.0), B200, exponent=1e9)
    assert ratio == pytest.approx(160 / 148, rel=1e-6)
    assert DVFS_EXPONENT == 3.0


def test_sustained_clocks_stay_below_each_parts_boost_clock():
    # B200 holds ~1580 MHz at 1000 W under back-to-back attention (flashinfer PR #2899); carried to
    # the other parts, the clock must stay below what they can boost to, or they would not be
    # power-limited: GB200 2062 MHz (VeOmni PR #986), B300 2032 MHz (sglang PR #28460), GB300
    # 2070 MHz locked (facebookexperimental/triton PR #2023)
    boost = {"gb200": 2062, "b300-sxm-270gb": 2032, "gb300": 2070}
    for name, max_mhz in boost.items():
        f = float(sustained_clock_hz(presets.gpu(name), B200, 1580 * MHZ)) / MHZ
        assert 1580 < f < max_mhz, name


def test_blackwell_presets_carry_b200s_efficiency_to_their_power_limit():
    # B200 takes GB200's fitted scale and B300 GB300's (same silicon): the efficiencies of each
    # pair differ only by the power-limit ratio (to the presets' three decimals)
    pairs = (("gb200", "b200-sxm-180gb"), ("gb300", "b300-sxm-270gb"))
    for fitted, sibling in pairs:
        a, b = presets.gpu(fitted), presets.gpu(sibling)
        expected = float(power_limited_ratio(a, B200) / power_limited_ratio(b, B200))
        assert a.matmul_efficiency / b.matmul_efficiency == pytest.approx(expected, abs=0.004), fitted
        assert a.matmul_efficiency_fp8 / b.matmul_efficiency_fp8 == pytest.approx(expected, abs=0.004), fitted


def test_a_power_limited_b200_runs_its_tensor_cores_at_the_cube_root_of_the_power_share():
    # the torchao team's "power limited" B200s, taken at 750 W: B200's efficiencies x (750/1000)^(1/3)
    limited = presets.gpu("b200-750w")
    ratio = float(power_limited_ratio(limited, B200))
    assert ratio == pytest.approx(0.75 ** (1.0 / 3.0)) and ratio == pytest.approx(0.909, abs=5e-4)
    assert limited.matmul_efficiency == pytest.approx(B200.matmul_efficiency * ratio, abs=6e-4)
    assert limited.matmul_efficiency_fp8 == pytest.approx(B200.matmul_efficiency_fp8 * ratio, abs=6e-4)
    same = ("peak_flops_per_s_16bit", "memory_bandwidth_bytes_per_s", "sm_count", "flash2_efficiency", "memory_bytes")
    assert all(getattr(limited, f) == getattr(B200, f) for f in same)
    assert presets.system("dgx-b200-750w").gpu == limited


def test_tdp_is_read_with_its_unit():
    assert units.parse_watts("1.4kW") == pytest.approx(1400.0)
    assert units.parse_watts("700 W") == pytest.approx(700.0)
    gpu = gpu_from_dict("x", {"peak_16bit": 1e15, "memory": "80GB", "memory_bandwidth": "3TB/s", "tdp": "1.2kW"})
    assert gpu.tdp_w == pytest.approx(1200.0)
    with pytest.raises(SpecError, match="tdp"):
        gpu_from_dict("x", {"peak_16bit": 1e15, "memory": "80GB", "memory_bandwidth": "3TB/s", "tdp": "1.2kJ"})


def test_arrays_in_arrays_out():
    # a grid of power limits and exponents in one call, each element as its own scalar call
    watts = np.array([[1000.0], [1400.0]])
    exponents = np.array([2.0, 3.0, 4.0])
    grid = power_limited_ratio(blackwell(160, watts, 2.5e15), B200, exponent=exponents)
    assert grid.shape == (2, 3)
    for i, w in enumerate(watts[:, 0]):
        for j, a in enumerate(exponents):
            assert grid[i, j] == pytest.approx(float(power_limited_ratio(blackwell(160, w, 2.5e15), B200, a)))


def test_leonardos_a100_carries_the_80gb_parts_efficiency_to_its_higher_power_limit():
    # Leonardo's A100-SXM-64GB boards run at 448-479 W (nvidia-smi on its nodes; 465 W taken), the
    # A100-SXM4-80GB whose fitted scale they take at 400 W: same SMs and peak, so their sustained
    # tensor rate is the 80 GB part's x (465 / 400)^(1/3) (presets to three decimals)
    leonardo, dgx = presets.gpu("a100-sxm4-64gb"), presets.gpu("a100-sxm4-80gb")
    assert float(leonardo.tdp_w) == 465.0 and float(dgx.tdp_w) == 400.0
    ratio = float(power_limited_ratio(leonardo, dgx))
    assert ratio == pytest.approx((465.0 / 400.0) ** (1.0 / 3.0)) and 1.05 < ratio < 1.052
    assert leonardo.matmul_efficiency == pytest.approx(dgx.matmul_efficiency * ratio, abs=6e-4)
    same = ("peak_flops_per_s_16bit", "sm_count", "l2_bytes", "l2_bandwidth_bytes_per_s")
    assert all(getattr(leonardo, f) == getattr(dgx, f) for f in same)
