"""NVFP4 training as Transformer Engine's NVFP4BlockScaling recipe runs it: the GEMMs at the FP4 rate
(capped by the operand byte rate), the casts counted by hand for one Llama 3 8B layer, the weights
cast once a step, the saved input's bytes, the refusals and the public rows it now prices."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shardwise import presets
from shardwise.analyses import public_runs
from shardwise.emit.megatron import _precision
from shardwise.engines.training import estimate_training_step
from shardwise.engines.training_layout import optimizer_time_s
from shardwise.engines.training_memory import fp8_input_bytes
from shardwise.errors import SpecError
from shardwise.physics.casts import NVFP4_CAST_BYTES_PER_ELEMENT, cast_bytes_per_element
from shardwise.physics.compute import layer_times, linears_times
from shardwise.physics.flops import layer_forward
from shardwise.physics.layer_parts import Gemm
from shardwise.specs import Plan, Scenario
from shardwise.specs.hardware import NVFP4_OPERAND_RATE_RATIO, NVFP4_SM103_RATE_RATIO

TOKENS = 8192
H, Q, KV, F = 4096, 4096, 1024, 14336  # Llama 3 8B: hidden, query width, key/value width, MLP width
INPUTS = TOKENS * (H + Q + H + F)  # what wqkv, wo, w13 and w2 read
OUTPUTS = TOKENS * ((Q + 2 * KV) + H + 2 * F + H)  # the output gradients cast in the backward


def _seconds(n_bytes: float, gpu, kernels: int) -> float:
    return n_bytes / (gpu.memory_bandwidth_bytes_per_s * gpu.memory_efficiency) + kernels * gpu.kernel_launch_s


def test_the_cast_bytes_are_an_amax_pass_and_one_cast_into_both_layouts():
    # read 2 (amax, with the RHT's), read 2 again, write 4 bits + an E4M3 scale per 16 twice
    assert NVFP4_CAST_BYTES_PER_ELEMENT == pytest.approx(2 + 2 + 2 * (0.5 + 1 / 16)) == 5.125
    assert cast_bytes_per_element("nvfp4") == 5.125


@pytest.mark.parametrize(
    ("gpu_name", "peak_ratio", "rate"),
    [
        ("gb200", 2.0, NVFP4_OPERAND_RATE_RATIO),
        ("gb300", 3.0, NVFP4_SM103_RATE_RATIO),
        ("b300-sxm-270gb", 14 / 4.5, NVFP4_SM103_RATE_RATIO),
    ],
)
def test_a_gemm_in_nvfp4_runs_at_the_fp4_peak_capped_by_the_operand_byte_rate(gpu_name, peak_ratio, rate):
    gpu = presets.gpu(gpu_name)
    assert gpu.peak_flops_per_s("nvfp4") == gpu.peak_flops_per_s_fp4
    assert gpu.peak_flops_per_s_fp4 == pytest.approx(peak_ratio * gpu.peak_flops_per_s_fp8)
    cap = min(1.0, rate / peak_ratio)
    assert gpu.matmul_efficiency_for("nvfp4") == pytest.approx(gpu.matmul_efficiency_fp8 * cap)
    # a large GEMM: the main loop dominates, so NVFP4 runs ~1.78x FP8's rate on SM100, ~1.98x on
    # Blackwell Ultra (never its peak ratio)
    m = n = k = 16384
    g = Gemm(2.0 * m * n * k, 0.0, m, n, k)
    fp8, nvfp4 = (linears_times([g], gpu, p, backward=False)[0].forward_s for p in ("fp8", "nvfp4"))
    assert 1.5 < float(fp8) / float(nvfp4) <= rate * 1.01
    assert float(nvfp4) >= 2.0 * m * n * k / (gpu.peak_flops_per_s_fp4 * gpu.matmul_efficiency_for("nvfp4"))


def test_blackwell_ultras_nvfp4_rate_reproduces_transformer_engines_b300_profile():
    """TE docs/examples/gemm_profiling (B300, pre-quantised, the 12 GEMMs of a hidden-4096 layer at
    15,872 tokens): FP8 current scaling 6.812 ms, NVFP4 3.764 ms a layer, 1.81x; the tile model at
    NVFP4_SM103_RATE_RATIO gives it within 1%, at the SM100 byte rate 1.66x (9% short)."""
    gpu = presets.gpu("b300-sxm-270gb")
    shapes = [(15872, 4096, 12288), (15872, 4096, 4096), (15872, 4096, 16384), (15872, 16384, 4096)]
    shapes += [(15872, 12288, 4096), (15872, 4096, 4096), (15872, 16384, 4096), (15872, 4096, 16384)]
    shapes += [(4096, 15872, 12288), (4096, 15872, 4096), (4096, 15872, 16384), (16384, 15872, 4096)]
    gs = [Gemm(2.0 * m * k * n, 0.0, m, n, k) for m, k, n in shapes]  # M x K x N, as the profile
    fp8, nvfp4 = (sum(float(t.forward_s) for t in linears_times(gs, gpu, p, backward=False)) for p in ("fp8", "nvfp4"))
    assert fp8 / nvfp4 == pytest.approx(6.812 / 3.764, rel=0.01)


def test_each_linear_layers_input_and_output_gradient_are_cast_by_two_kernels():
    model = presets.model("llama3-8b", seq_len=TOKENS)
    gpu = presets.gpu("gb200")
    fwd = layer_forward(model, 1, 1, False, 2.0)
    lt = layer_times(fwd, gpu, "nvfp4", True, False, "sdpa-flash2")
    assert float(lt.cast_f_s) == pytest.approx(_seconds(5.125 * INPUTS, gpu, 8))
    assert float(lt.cast_b_s) == pytest.approx(_seconds(5.125 * OUTPUTS, gpu, 8))
    # the attention core stays in 16 bits (the recipe's fp8_dpa is off)
    bf16 = layer_times(fwd, gpu, "bf16", True, False, "sdpa-flash2")
    assert float(lt.attention_s) == pytest.approx(float(bf16.attention_s))


def _scenario(precision: str) -> Scenario:
    plan = Plan(tp=2, pp=1, dp=4, global_batch=32, precision=precision)
    return Scenario(presets.model("llama3-8b", seq_len=TOKENS), presets.system("dgx-b200"), plan)


def test_the_weights_are_cast_once_a_step_and_the_saved_input_is_the_columnwise_fp4_copy():
    nv = _scenario("nvfp4")
    bf16 = replace(nv, plan=replace(nv.plan, precision="bf16"))
    n = 1e9
    gpu = nv.cluster.gpu
    extra = float(optimizer_time_s(nv, n)) - float(optimizer_time_s(bf16, n))
    assert extra == pytest.approx(_seconds(5.125 * n, gpu, 1))  # amax, then both layouts, 16x16 2D scales
    assert fp8_input_bytes(nv.plan) == pytest.approx(0.5 + 1 / 16)
    assert fp8_input_bytes(bf16.plan) == 0.0


def test_a_step_in_nvfp4_is_faster_than_in_mxfp8_on_blackwell():
    steps = {p: float(estimate_training_step(_scenario(p)).step_time_s) for p in ("bf16", "mxfp8", "nvfp4")}
    assert steps["nvfp4"] < steps["mxfp8"] < steps["bf16"]


def test_nvfp4_without_fp4_tensor_cores_is_refused_on_one_line(cli):
    argv = ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", "64"]
    code, out, err = cli([*argv, "--precision", "nvfp4"])
    assert code == 2 and out == ""
    assert (
        err.strip()
        == "error: precision: nvfp4 needs FP4 tensor cores (Blackwell); gpu 'h100-sxm5-80gb' has none; use fp8"
    )


def test_a_bad_precision_name_is_refused_on_one_line(cli):
    argv = ["predict", "--model", "llama3-8b", "--system", "gb200-nvl72", "--global-batch", "64"]
    code, out, err = cli([*argv, "--precision", "nvfp5"])
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "'nvfp5' is not one of" in err and "'nvfp4'" in err
    with pytest.raises(
        SpecError, match=r"plan: precision 'fp4x' is not allowed; choose bf16, fp16, fp8, mxfp8 or nvfp4"
    ):
        Plan(precision="fp4x")


def test_the_public_nvfp4_llama_rows_are_priced():
    rows = {r["id"]: r for r in public_runs.raw_rows()}
    for pub in ("PUB-0121", "PUB-0122", "PUB-0128", "PUB-0129"):  # Llama 3 70B / 405B, GB300 and GB200
        assert rows[pub]["precision"] == "nvfp4"
        assert public_runs.skip_reason(rows[pub]) == ""
        assert public_runs.request_for(rows[pub]).precision == "nvfp4"


def test_megatron_launch_flags_name_the_nvfp4_recipe():
    assert _precision("nvfp4") == ("--bf16", "--fp4-format", "e2m1", "--fp4-recipe", "nvfp4")


def test_nvfp4_rows_never_set_a_gpu_scale():
    """NVFP4's GEMM rate is derived from FP8's, unmeasured on GB200/GB300: its rows are priced and
    validated but take no part in the sustained-efficiency fit (`analyses.loso.UNFITTED_PRECISIONS`)."""
    from shardwise.analyses import loso

    rows = loso.priced_rows()
    nvfp4 = [p for p in rows if p.precision == "nvfp4"]
    assert nvfp4 and any(p.row.split == "dev" for p in nvfp4)
    assert not any(p.sets_scale for p in nvfp4)
    without = loso.fit_scales([p for p in rows if p.precision != "nvfp4"])
    assert loso.fit_scales(list(rows)) == without


def test_serving_fp4_gemms_take_the_same_operand_rate_cap_as_training():
    """One physics for FP4 GEMMs: serving's fp4 runs at FP8's efficiency capped by the operand
    byte rate, as training's nvfp4 does (`Gpu.matmul_efficiency_for`)."""
    for name, rate in (("b200-sxm-180gb", NVFP4_OPERAND_RATE_RATIO), ("gb200", NVFP4_OPERAND_RATE_RATIO),
                       ("gb300", NVFP4_SM103_RATE_RATIO)):  # fmt: skip
        gpu = presets.gpu(name)
        cap = min(1.0, rate * gpu.peak_flops_per_s_fp8 / gpu.peak_flops_per_s_fp4)
        assert cap < 1.0
        assert gpu.matmul_efficiency_for("fp4") == pytest.approx(gpu.matmul_efficiency_fp8 * cap)
        assert gpu.matmul_efficiency_for("fp4") == pytest.approx(gpu.matmul_efficiency_for("nvfp4"))
