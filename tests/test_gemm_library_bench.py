"""tools/gemm_library_bench.py: its shapes and summary by hand, and a quick CPU run end to end."""

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from script_module import load_script

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "gemm_library_bench.py"


def _load():
    return load_script("tools/gemm_library_bench.py", "gemm_library_bench")


gl = _load()


@pytest.mark.parametrize("op", ["fwd", "dgrad", "wgrad"])
def test_te_operands_are_the_linear_whose_gemm_is_timed(op):
    tokens, n_out, k_in = 4096, 6144, 4096
    m, n, k = gl.gemm_mnk(op, tokens, n_out, k_in)
    assert gl.linear_dims(op, m, n, k) == (n_out, k_in, tokens)


def test_the_full_grid_is_every_layer_gemm_of_both_llamas_at_training_token_counts():
    shapes = gl.cases(quick=False)
    assert len(shapes) == 3 * 2 * 4 * 4 * 3  # tokens x models x TP x layers x ops
    assert {c["tokens"] for c in shapes} == {4096, 8192, 16384}
    big = [c for c in shapes if c["model"] == "llama3-70b" and c["tp"] == 1 and c["layer"] == "fc1"]
    assert {(c["op"], c["m"], c["n"], c["k"]) for c in big if c["tokens"] == 4096} == {
        ("fwd", 4096, 2 * 28672, 8192),
        ("dgrad", 4096, 8192, 2 * 28672),
        ("wgrad", 2 * 28672, 8192, 4096),
    }


def test_the_summary_is_the_median_time_ratio_to_cublas():
    key = dict(model="x", layer="qkv", tp=1, tokens=4096)
    rows = [
        dict(backend="cublas", op="fwd", time_s=1.0, **key),
        dict(backend="cublaslt", op="fwd", time_s=0.9, **key),
        dict(backend="cublas", op="fwd", time_s=2.0, **{**key, "layer": "fc1"}),
        dict(backend="cublaslt", op="fwd", time_s=2.2, **{**key, "layer": "fc1"}),
        dict(backend="cublaslt", op="fwd", time_s=3.0, **{**key, "layer": "fc1"}),  # a second run of fc1
        dict(backend="te", op="fwd", error="TypeError: no", **key),
    ]
    text = gl.summary(rows)
    assert "cublaslt  fwd      4096 tokens: 1.100 (3 shapes)" in text  # median of 0.9, 1.1, 1.5
    assert "te " not in text  # a back end that refused every shape has no ratio


@pytest.mark.slow
def test_a_quick_cpu_run_writes_a_row_per_shape(tmp_path):
    pytest.importorskip("torch")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with (tmp_path / "gemm_library.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(gl.cases(quick=True))  # cublas only: no cuBLASLt or TE on a CPU
    for r in rows:
        assert r["error"] == ""
        m, n, k = int(r["m"]), int(r["n"]), int(r["k"])
        assert float(r["tflops"]) == pytest.approx(2 * m * n * k / float(r["time_s"]) / 1e12, rel=1e-4)
    assert (tmp_path / "device.json").exists()
