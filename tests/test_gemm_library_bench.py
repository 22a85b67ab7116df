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
    key = dict(model="x", layer="qkv", tp=1, tokens=4096, m=4096, n=6144, k=4096)
    fc1 = {**key, "layer": "fc1", "n": 28672}
    rows = [
        dict(backend="cublas", op="fwd", time_s=1.0, **key),
        dict(backend="cublaslt", op="fwd", time_s=0.9, **key),
        dict(backend="cublas", op="fwd", time_s=2.0, **fc1),
        dict(backend="cublaslt", op="fwd", time_s=2.2, **fc1),
        dict(backend="cublaslt", op="fwd", time_s=3.0, **fc1),  # a second run of fc1
        dict(backend="te", op="fwd", error="TypeError: no", **key),
    ]
    text = gl.summary(rows)
    # fc1 once, at its median time 2.6 over cublas's 2.0: the median of 0.9 and 1.3
    assert "cublaslt  fwd      4096 tokens: 1.100 (2 shapes, 3 timings)" in text
    assert text.startswith("6 rows, 2 distinct shapes (op, M, N, K)")
    assert "te " not in text  # a back end that refused every shape has no ratio


def test_the_summary_counts_a_shape_timed_twice_once():
    """Two layers (or a rerun) with one GEMM shape in one pass are one shape in the summary line, its
    timings pooled (review 31: they were counted, and weighed, as two); the same M, N, K in another
    pass (another operand layout) is another GEMM, on its own line."""
    same = dict(model="x", tp=1, tokens=4096, m=4096, n=4096, k=4096)
    rows = []
    for layer, lt in (("proj", 0.5), ("other", 0.7)):  # one shape timed twice, by two layers
        rows += [dict(backend="cublas", op="fwd", layer=layer, time_s=1.0, **same)]
        rows += [dict(backend="cublaslt", op="fwd", layer=layer, time_s=lt, **same)]
    fc1 = dict(model="x", layer="fc1", tp=1, tokens=4096, m=4096, n=28672, k=4096)
    rows += [dict(backend="cublas", op="fwd", time_s=1.0, **fc1), dict(backend="cublaslt", op="fwd", time_s=1.5, **fc1)]
    rows += [dict(backend="cublas", op="dgrad", layer="proj", time_s=1.0, **same)]
    rows += [dict(backend="cublaslt", op="dgrad", layer="proj", time_s=0.8, **same)]
    text = gl.summary(rows)
    assert text.startswith("8 rows, 3 distinct shapes (op, M, N, K)")
    # proj's shape once at 0.6 (the median of 0.5 and 0.7), fc1 at 1.5: their median 1.05, not 0.7 of three
    assert "cublaslt  fwd      4096 tokens: 1.050 (2 shapes, 3 timings)" in text
    assert "cublaslt  dgrad    4096 tokens: 0.800 (1 shape)" in text


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
