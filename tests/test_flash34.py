"""FlashAttention-3 (Hopper) and FlashAttention-4 (Blackwell) as attention kernels
(`physics.attention_flash34`): their ramps against the published kernel benchmarks they were read from,
their place between FlashAttention-2 and cuDNN in a training step, the refusal off their GPUs, and the
published runs that ran them."""

import csv
from importlib import resources

import numpy as np
import pytest

from shardwise import presets
from shardwise.analyses.public_stacks import execution
from shardwise.engines.training import estimate_training_step
from shardwise.errors import SpecError
from shardwise.physics import attention as at
from shardwise.physics import attention_flash34 as fa34
from shardwise.physics import attention_kernels as ak
from shardwise.requests.training import TrainingRequest

# Shah et al. 2024 (FlashAttention-3), H100 SXM5, BF16, head dim 128, batch x length = 16k tokens:
# FlashAttention-3's TFLOP/s at 512, 1k, 2k, 4k, 8k, 16k (Fig. 4 forward, Fig. 5 backward)
LENGTHS = np.array([512, 1024, 2048, 4096, 8192, 16384])
FA3_PLAIN = (467, 565, 625, 638, 646, 648)
FA3_CAUSAL = (292, 423, 521, 579, 602, 616)
FA3_BACKWARD = (316, 424, 501, 542, 559, 561)
H100_MAMF = 794.5
B200_MAMF = 1745.0
# Dao-AILab/flash-attention PR #2280 (sm100, head dim 128, batch 4 x 8k x 16 heads): forward non-causal,
# causal; backward (2-CTA) non-causal, causal
FA4_8K = (1534.8, 1418.1, 1359.8, 1208.6)
# PR #2605's B200 table: FA4 forward non-causal, head dim 128, 1k-16k
FA4_SWEEP = (975, 1131, 1256, 1289, 1330)


def test_flash3_ramp_follows_the_papers_forward_backward_and_causal_points():
    p = fa34.FLASH3_HOPPER
    plain = H100_MAMF * p.forward_efficiency * at.ramp(LENGTHS, p.forward_overhead_tokens)
    assert np.all(np.abs(plain / FA3_PLAIN - 1) < 0.05)
    causal = H100_MAMF * p.forward_efficiency / at.forward_slowdown(LENGTHS, LENGTHS, 1, p)
    assert np.all(np.abs(causal[1:] / FA3_CAUSAL[1:] - 1) < 0.07)  # 512: 313 against 292
    back = H100_MAMF * p.backward_efficiency * at.ramp(LENGTHS, p.backward_overhead_tokens)
    assert np.all(np.abs(back / FA3_BACKWARD - 1) < 0.04)
    # the shared ramp (FlashAttention-2, cuDNN: L0 = 100) would miss FA3's short sequences by more
    shared = H100_MAMF * p.forward_efficiency * at.ramp(LENGTHS, at.FORWARD_TILE_OVERHEAD_TOKENS)
    assert shared[0] / FA3_PLAIN[0] - 1 == pytest.approx(0.193, abs=0.005)  # docs/model.md: 19% too fast at 512


def test_flash4_on_blackwell_follows_its_published_b200_points():
    p = fa34.FLASH4_BLACKWELL
    fwd, fwd_c, _bwd, bwd_c = FA4_8K
    # the forward plateau (read from PR #2280's 8k point) against the paper's abstract, "up to 1613 TFLOPs/s"
    assert B200_MAMF * p.forward_efficiency == pytest.approx(1613, rel=0.01)
    # the 8k points at the ramp's own L0 (fitted on PR #2605's sweep, not on these): within 2% of PR #2280's
    l0 = fit_overhead(np.array([1024, 2048, 4096, 8192, 16384]), FA4_SWEEP)
    assert l0 == pytest.approx(p.forward_overhead_tokens, rel=0.05)
    assert B200_MAMF * p.forward_efficiency * at.ramp(8192, l0) == pytest.approx(fwd, rel=0.02)
    causal = B200_MAMF * p.forward_efficiency / at.forward_slowdown(8192, 8192, 1, p)
    causal_bwd = B200_MAMF * p.backward_efficiency / at.backward_slowdown(8192, 8192, 1, p)
    assert causal == pytest.approx(fwd_c, rel=0.01) and causal_bwd == pytest.approx(bwd_c, rel=0.01)
    assert causal_bwd / causal == pytest.approx(bwd_c / fwd_c, rel=0.02)  # the backward's own causal loss
    # the ramp's shape against PR #2605's sweep (a slower B200): relative to its 16k point
    s = np.array([1024, 2048, 4096, 8192, 16384])
    shape = at.ramp(s, p.forward_overhead_tokens) / at.ramp(16384, p.forward_overhead_tokens)
    assert np.all(np.abs(shape / (np.array(FA4_SWEEP) / FA4_SWEEP[-1]) - 1) < 0.02)
    # the abstract's 1613 TFLOP/s at the longest sequences within 2%
    assert B200_MAMF * p.forward_efficiency * at.ramp(32768, p.forward_overhead_tokens) == pytest.approx(1613, rel=0.02)


def fit_overhead(lengths, tflops):
    """L0 of the ramp by least squares in time: 1 / eta = (1 + L0 / s) / P is linear in 1 / s."""
    slope, intercept = np.polyfit(1.0 / lengths, 1.0 / np.asarray(tflops, dtype=float), 1)
    return slope / intercept


def test_head_dimension_and_templates():
    p = fa34.FLASH3_HOPPER
    f64, b64 = fa34.head_dim_factors(p, 64)
    assert float(f64) == pytest.approx(497 / 648) and float(b64) == pytest.approx(474 / 561)
    f80, _ = fa34.head_dim_factors(p, 80)  # computed at the 96 template: 80 / 96 of its speed
    assert float(f80) == pytest.approx(80 / 96 * np.interp(96, (64, 128), (497 / 648, 1.0)))
    assert [float(x) for x in fa34.head_dim_factors(p, 128)] == [1.0, 1.0]
    f4, _ = fa34.head_dim_factors(fa34.FLASH4_BLACKWELL, 96)  # no padding on Blackwell
    assert float(f4) == pytest.approx(np.interp(96, (64, 128), (879 / 1330, 1.0)))


def test_each_kernel_runs_where_its_code_does():
    h100, h200, b200, gb300 = (presets.gpu(n) for n in ("h100-sxm5-80gb", "h200-sxm-141gb", "b200-sxm-180gb", "gb300"))
    assert fa34.profile(h100, "flash3") is fa34.FLASH3_HOPPER and fa34.profile(h200, "flash3") is fa34.FLASH3_HOPPER
    assert fa34.profile(b200, "flash4") is fa34.FLASH4_BLACKWELL and fa34.profile(gb300, "flash4") is not None
    assert fa34.profile(h100, "flash4") is fa34.FLASH3_HOPPER  # its sm90 kernels: FA3's design
    arch = {n: fa34.cuda_arch(presets.gpu(n)) for n in ("a100-sxm4-80gb", "rtx-3090", "l40s", "rtx-5090", "mi300x")}
    assert arch == {"a100-sxm4-80gb": 80, "rtx-3090": 80, "l40s": 89, "rtx-5090": 120, "mi300x": 0}
    # refused, each with its own reason
    cases = {
        ("b200-sxm-180gb", "flash3", ""): "sm_90a",
        ("rtx-pro-6000", "flash3", ""): "sm_90a",
        ("a100-sxm4-80gb", "flash4", ""): "backward asserts compute capability 9.x-12.x",
        ("l40s", "flash4", ""): "backward asserts",
        ("a100-sxm4-80gb", "flash3", "hf-transformers"): "Hugging Face",
        ("mi300x", "flash3", ""): "AMD GPU",
        ("mi300x", "flash4", ""): "AMD GPU",
    }
    for (name, kernel, stack), why in cases.items():
        gpu = presets.gpu(name)
        text = fa34.refusal(gpu, kernel, stack)
        assert why in text and name in text and not fa34.as_flash2(gpu, kernel, stack)
    assert fa34.alternatives(presets.gpu("mi300x")) == ("flash2", "sdpa-flash2")
    # run as FlashAttention-2's code: flash-attn-4 on sm120, FA3's sm80 build called directly
    for name, kernel in (("rtx-5090", "flash4"), ("rtx-pro-6000", "flash4"), ("a100-sxm4-80gb", "flash3")):
        gpu = presets.gpu(name)
        assert fa34.as_flash2(gpu, kernel) and not fa34.refusal(gpu, kernel)
        assert ak.priced_kernel(gpu, kernel) == "flash2"
    with pytest.raises(SpecError, match="sm_90a"):
        ak.attention_relative_efficiency(b200, "flash3")


def test_flash4_on_rtx_blackwell_is_priced_as_flashattention2_with_a_note(cli):
    argv = ["predict", "--model", "llama3.1-8b", "--gpu", "rtx-pro-6000", "--intra-link", "pcie5", "--num-gpus", "8"]
    argv += ["--global-batch", "16"]
    code4, out4, err4 = cli([*argv, "--attention-kernel", "flash4"])
    code2, out2, err2 = cli([*argv, "--attention-kernel", "flash2"])
    assert code4 == code2 == 0 and "flash_fwd_sm120.py" in out4 + err4 and "sm120" not in out2 + err2
    step = [next(line for line in o.splitlines() if "step time" in line) for o in (out4, out2)]
    assert step[0] == step[1]


@pytest.mark.parametrize(("gpu", "kernel", "head_dim", "refused"), [
    ("b200-sxm-180gb", "flash4", 160, True),  # sm100: 8-128, 192 (MLA), 256
    ("b200-sxm-180gb", "flash4", 192, False),
    ("b200-sxm-180gb", "flash4", 256, False),
    ("h100-sxm5-80gb", "flash4", 160, False),  # sm90: 8-256
    ("h100-sxm5-80gb", "flash3", 320, True),
    ("h100-sxm5-80gb", "flash3", 100, True),  # not a multiple of 8
    ("h100-sxm5-80gb", "flash3", 128, False),
])  # fmt: skip
def test_head_dims_the_kernels_reject_are_refused(gpu, kernel, head_dim, refused):
    g = presets.gpu(gpu)
    assert bool(fa34.head_dim_refusal(g, kernel, head_dim)) == refused
    if refused:
        with pytest.raises(SpecError, match=f"head dimension {head_dim}"):
            ak.flash2_head_dim_factors(g, kernel, np.array([128.0, head_dim]))


def test_the_framework_files_kernel_is_refused_without_naming_a_flag_the_command_lacks(cli, tmp_path):
    fw = tmp_path / "fw3.yaml"
    fw.write_text("like: fsdp\nattention_kernel: flash3\n")
    argv = ["sweep", "--model", "llama3-8b", "--system", "dgx-b200", "--plan", "tp=1"]
    code, _out, err = cli([*argv, "--vary", "seq_len=2048,8192", "--framework", str(fw)])
    assert code == 2 and "attention_kernel: flash2 or fused in the framework file" in err
    assert "--attention-kernel" not in err and err.count("\n") == 1


def test_context_parallel_flash3_names_the_ring_priced(cli):
    argv = ["predict", "--model", "llama3.1-8b", "--system", "dgx-h100", "--global-batch", "16", "--seq-len", "32768"]
    code, out, err = cli([*argv, "--cp", "2", "--attention-kernel", "flash3"])
    assert code == 0 and "Transformer Engine's ring is priced" in out + err


CASE = dict(model="llama3.1-8b", nodes=1, global_batch=8, seq_len=8192, framework="deepspeed", zero=2)


def _step(system, kernel):
    request = TrainingRequest(**{**CASE, "system": system, "attention_kernel": kernel})
    return float(estimate_training_step(request.scenario()).step_time_s)


def test_flash3_on_hopper_runs_between_cudnn_and_above_flashattention2():
    """FA3 at 666 TFLOP/s against cuDNN's 0.75 x 794.5 = 596 and FA2's 370 (Shah et al. 2024 Fig. 4)."""
    fa2, fused, fa3 = (_step("dgx-h200", k) for k in ("flash2", "fused", "flash3"))
    assert fa3 < fused < fa2


def test_flash4_on_blackwell_is_faster_than_cudnn_and_far_faster_than_flashattention2():
    fa2, fused, fa4 = (_step("dgx-b200", k) for k in ("flash2", "fused", "flash4"))
    assert fa4 < fused < fa2


@pytest.mark.parametrize(
    ("system", "kernel", "needs"),
    [("dgx-b200", "flash3", "sm_90a"), ("dgx-a100", "flash4", "backward asserts"), ("mi300x-8x", "flash3", "AMD")],
)
def test_the_refusal_off_its_gpu_is_one_line_and_exit_2(cli, system, kernel, needs):
    argv = ["predict", "--model", "llama3.1-8b", "--system", system, "--attention-kernel", kernel]
    code, _out, err = cli([*argv, "--global-batch", "16"])
    assert code == 2 and err.startswith(f"error: --attention-kernel {kernel}: {kernel} cannot run here")
    assert needs in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_no_flash_attention_is_not_refused():
    request = TrainingRequest(**{**CASE, "system": "dgx-a100", "attention_kernel": "flash3", "flash_attention": False})
    assert not bool(request.scenario().plan.flash_attention)


def test_the_ml_engineering_rows_run_flashattention_3_and_4():
    """stas00/ml-engineering's bench_decompose.py picks flash_attention_3 on sm90 and flash_attention_4 on
    sm100 (tools/data/public_runs/deepspeed_h200_b200.csv, the importer's `attention=` note): its two
    priced ZeRO-2 rows are priced with flash3 on the H200 and flash4 on the B200."""
    with resources.files("shardwise.data").joinpath("public_training_runs.csv").open(encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r["source"].startswith("GitHub stas00/ml-engineering")]
    zero2 = [r for r in rows if "offload=" not in r["parse_notes"]]
    assert [(r["system"], execution(r)[1]["attention_kernel"]) for r in zero2] == [
        ("dgx-h200", "flash3"),
        ("dgx-b200", "flash4"),
    ]


def test_the_attention_kernel_lists_of_the_fields_and_the_plan_are_one():
    from shardwise.requests.fields import ATTENTION_KERNEL_CHOICES
    from shardwise.specs.plan_choices import ATTENTION_KERNELS

    assert ATTENTION_KERNEL_CHOICES == ATTENTION_KERNELS


def test_a_head_dimension_flash4_rejects_on_b200_is_one_line_exit_2(cli):
    argv = ["predict", "--model", "gpt-530b", "--system", "dgx-b200", "--nodes", "64", "--tp", "8", "--pp", "8"]
    code, _out, err = cli([*argv, "--global-batch", "512", "--attention-kernel", "flash4"])
    assert code == 2 and "head dimension 160" in err and err.count("\n") == 1 and "Traceback" not in err
