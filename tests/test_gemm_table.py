"""A measured GEMM table (`Gpu.gemm_table`, written by `measure micro`): 16-bit GEMMs are priced
at the rate of the nearest measured shape."""

import numpy as np
import pytest

from shardwise import loaders
from shardwise.physics.compute import gemm_s
from shardwise.physics.flops import gemm
from shardwise.specs import SpecError

GPU = {
    "peak_16bit": "100 TFLOPS",
    "memory": "80GB",
    "memory_bandwidth": "2TB/s",
    "matmul_efficiency": 0.5,
    "peak_fp8": "200 TFLOPS",
    "gemm_table": [
        {"m": 1024, "n": 4096, "k": 4096, "rate": "40 TFLOPS"},
        {"m": 64, "n": 4096, "k": 4096, "rate": "10 TFLOPS"},
    ],
}


def _gpu(**changes):
    return loaders.gpu_from_dict("measured", {**GPU, **changes})


def test_a_measured_shape_runs_at_its_measured_rate():
    gpu = _gpu()
    for m, rate in ((1024, 40e12), (64, 10e12)):
        t = gemm_s(gemm(m, 4096, 4096, 2.0), gpu, "bf16")
        assert float(t) == pytest.approx(2 * m * 4096 * 4096 / rate + gpu.kernel_launch_s)


def test_other_shapes_take_the_nearest_measured_rate_and_arrays_price_alike():
    gpu = _gpu()
    m = np.array([32.0, 100.0, 700.0, 8192.0])
    t = gemm_s(gemm(m, 4096, 4096, 2.0), gpu, "bf16")
    rates = np.array([10e12, 10e12, 40e12, 40e12])  # 100 is nearer 64 than 1024 in log terms
    assert np.allclose(t, 2 * m * 4096 * 4096 / rates + gpu.kernel_launch_s)
    for i, mi in enumerate(m):
        assert float(gemm_s(gemm(mi, 4096, 4096, 2.0), gpu, "bf16")) == pytest.approx(t[i])


def test_the_table_scales_with_the_efficiency_and_leaves_fp8_to_the_model():
    base, calibrated = _gpu(), _gpu().with_(matmul_efficiency=0.25)  # as a calibration halving it would
    g = gemm(1024, 4096, 4096, 2.0)
    slow = float(gemm_s(g, calibrated, "bf16")) - base.kernel_launch_s
    assert slow == pytest.approx(2 * (float(gemm_s(g, base, "bf16")) - base.kernel_launch_s))
    no_table = loaders.gpu_from_dict("plain", {k: v for k, v in GPU.items() if k != "gemm_table"})
    g8 = gemm(1024, 4096, 4096, 1.0)
    assert float(gemm_s(g8, base, "fp8")) == float(gemm_s(g8, no_table, "fp8"))


def test_a_memory_bound_shape_keeps_the_memory_roof():
    gpu = _gpu(gemm_table=[{"m": 1, "n": 4096, "k": 4096, "rate": "100 TFLOPS"}], matmul_efficiency=1.0)
    g = gemm(1, 4096, 4096, 2.0)
    assert float(gemm_s(g, gpu, "bf16")) - gpu.kernel_launch_s == pytest.approx(float(g.bytes) / (2e12 * 0.85))


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ([], "give a list of {m, n, k, rate}"),
        ([{"m": 1, "n": 2, "k": 3}], "gemm_table[0]"),
        ([{"m": 1.5, "n": 2, "k": 3, "rate": "1 TFLOPS"}], "not a whole number"),
        ([{"m": 1, "n": 2, "k": 3, "rate": "fast"}], "is not a compute rate"),
        ([{"m": 0, "n": 2, "k": 3, "rate": "1 TFLOPS"}], "gemm_table: m"),
    ],
)
def test_a_bad_table_names_the_entry_and_what_is_allowed(table, message):
    with pytest.raises(SpecError, match="gemm_table") as err:
        _gpu(gemm_table=table)
    assert message in str(err.value) and "\n" not in str(err.value)
