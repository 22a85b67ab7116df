"""tools/gpu_microbench.py: its shapes and FLOP models by hand, and a quick CPU run end to end."""

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from script_module import load_script

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "gpu_microbench.py"


def _load():
    return load_script("tools/gpu_microbench.py", "gpu_microbench")


mb = _load()


def test_llama3_8b_layers_split_megatron_style_over_tp8():
    assert mb.layer_gemms(mb.LLAMA3_8B, 8) == [
        ("qkv", (32 + 2 * 8) * 128 // 8, 4096),
        ("proj", 4096, 32 * 128 // 8),
        ("fc1", 2 * 14336 // 8, 4096),
        ("fc2", 4096, 14336 // 8),
    ]


def test_the_backward_gemms_swap_the_dimensions_of_the_forward():
    M, N, K = 64, 768, 4096
    assert mb.gemm_mnk("fwd", M, N, K) == (64, 768, 4096)
    assert mb.gemm_mnk("dgrad", M, N, K) == (64, 4096, 768)  # dx[M,K] = dy[M,N] w[N,K]
    assert mb.gemm_mnk("wgrad", M, N, K) == (768, 4096, 64)  # dw[N,K] = dy^T x: K = the tokens


def test_every_layer_gemm_is_listed_small_token_counts_first():
    cases = mb.gemm_cases(mb.FULL)
    assert len(cases) == 9 * 2 * 4 * 4 * 3
    assert [c["tokens"] for c in cases] == sorted(c["tokens"] for c in cases)


def test_causal_attention_counts_half_and_the_backward_two_and_a_half_forwards():
    full = mb.attn_flops(2, 1024, 32, 128, False, "fwd")
    assert full == 4 * 2 * 1024**2 * 32 * 128
    assert mb.attn_flops(2, 1024, 32, 128, True, "fwd") == full / 2
    assert mb.attn_flops(2, 1024, 32, 128, True, "fwd+bwd") == 3.5 * full / 2


def test_the_optimizer_list_is_llama_like():
    shapes = mb.llama_like_shapes(*mb.FULL.optim_shape)
    n_params = sum(math.prod(s) for s in shapes)
    assert len(shapes) == 9 * 32 + 3
    assert 1.0e9 < n_params < 1.2e9


def test_a_section_not_known_is_refused_in_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--sections", "gemm,nope", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr == "gpu_microbench.py: error: --sections: unknown nope; allowed: " + ",".join(mb.SECTIONS) + "\n"


def test_a_spent_budget_still_writes_device_json_and_exits_0(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--budget-s", "0", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    info = json.loads((tmp_path / "device.json").read_text())
    assert info["workers"]["gemm"]["note"] == "not run: budget spent"
    assert not list(tmp_path.glob("*.csv"))


def _rows(path):
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_a_quick_cpu_run_measures_gemms_and_elementwise_kernels(tmp_path):
    pytest.importorskip("torch")
    args = ["--device", "cpu", "--quick", "--sections", "gemm,elementwise", "--out", str(tmp_path)]
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["device.json", "elementwise.csv", "gemm.csv"]
    assert "gemm bf16 median fraction of peak" in proc.stdout

    gemm = _rows(tmp_path / "gemm.csv")
    assert {r["status"] for r in gemm} == {"ok"}
    layers = [r for r in gemm if r["kind"] == "layer"]
    assert len(layers) == len(mb.gemm_cases(mb.QUICK))  # bf16 only: no FP8 on a CPU
    for r in layers:
        m, n, k = int(r["m"]), int(r["n"]), int(r["k"])
        assert int(r["flops"]) == 2 * m * n * k
        assert float(r["tflops"]) == pytest.approx(2 * m * n * k / float(r["time_s"]) / 1e12, rel=1e-4)
    fwd = {(r["model"], r["layer"], r["tp"], r["tokens"]): r for r in layers if r["op"] == "fwd"}
    for r in layers:
        if r["op"] == "wgrad":
            f = fwd[(r["model"], r["layer"], r["tp"], r["tokens"])]
            assert (r["m"], r["n"], r["k"]) == (f["n"], f["k"], f["m"])

    ew = _rows(tmp_path / "elementwise.csv")
    measured = {(r["op"], r["pass"]) for r in ew if r["status"] == "ok"}
    assert {("copy", "fwd"), ("rmsnorm_hf", "fwd"), ("rmsnorm_hf", "bwd"), ("swiglu", "bwd")} <= measured
    assert ("residual_add", "bwd") not in measured  # the backward of an add launches nothing
    assert {r["status"] for r in ew if r["pass"] == "compile"} == {"skipped"}  # no compile under --quick

    info = json.loads((tmp_path / "device.json").read_text())
    assert info["torch"]
    assert info["workers"]["gemm"]["note"] == "done"
