"""Review 44's leftover 1: a GPU file `like:` a built-in carries that built-in's fitted efficiency,
and its 80% interval now carries that fit's term too (it was looked up by the file's own name and
given the widest, "fitted on no published run"); a file that changes what the fit measured is
widened as the built-ins that differ so are (`calibration.spreads.gpu_term`), and says so."""

from __future__ import annotations

import math

import pytest

from shardwise import presets
from shardwise.calibration import spreads


def _gpu(tmp_path, text: str):
    path = tmp_path / "g.yaml"
    path.write_text("name: my-gpu\n" + text)
    return presets.gpu(str(path))


@pytest.mark.parametrize(
    ("text", "like", "kind"),
    [
        ("like: h100-sxm5-80gb\nmemory: 94GB\nhost_link: 64GB/s\n", "h100-sxm5-80gb", "h100-sxm5-80gb"),
        ("like: h100-sxm5-80gb\nmemory_bandwidth: 3350GB/s\n", "h100-sxm5-80gb", "h100-sxm5-80gb"),  # same value
        ("like: h200-sxm-141gb\n", "h200-sxm-141gb", "h200-sxm-141gb"),  # a sibling stays one
        ("like: mi300x\n", "mi300x", "mi300x"),  # fitted on nothing stays so
        ("like: h100-sxm5-80gb\nmemory_bandwidth: 4.8TB/s\n", "h100-sxm5-80gb", "h200-sxm-141gb"),
        ("like: h100-sxm5-80gb\ntdp: 500W\n", "h100-sxm5-80gb", "h200-sxm-141gb"),
        ("like: h100-sxm5-80gb\npeak_16bit: 756TFLOPS\n", "h100-sxm5-80gb", "mi300x"),
        ("like: h100-sxm5-80gb\nmatmul_efficiency: 0.8\n", "h100-sxm5-80gb", "mi300x"),
        ("like: h200-sxm-141gb\nsm_count: 114\n", "h200-sxm-141gb", "mi300x"),
    ],
)
def test_a_like_gpu_takes_the_interval_of_the_fit_it_carries(tmp_path, text, like, kind):
    mine = _gpu(tmp_path, text)
    assert mine.fit_name == like
    # before: every file GPU took the unfitted term, as mi300x's (0.29 where the H100's is 0.094)
    want = spreads.uncalibrated_log_sd(kind, "megatron-core")
    assert spreads.uncalibrated_log_sd(mine, "megatron-core") == pytest.approx(want)
    assert spreads.uncalibrated_log_sd(mine.name, "megatron-core") == pytest.approx(
        spreads.uncalibrated_log_sd("mi300x", "megatron-core")
    )  # by its name alone it is unknown: the identity travels on the spec


def test_the_interval_text_says_which_case_applies(tmp_path):
    same = spreads.gpu_basis(_gpu(tmp_path, "like: h100-sxm5-80gb\nmemory: 94GB\n"))
    assert "h100-sxm5-80gb's fitted efficiency included" in same and "no field its fit measured changed" in same
    sib = spreads.gpu_basis(_gpu(tmp_path, "like: h100-sxm5-80gb\nmemory_bandwidth: 4TB/s\n"))
    assert "taken from the h100-sxm5-80gb's fit" in sib and "memory_bandwidth changed" in sib
    new = spreads.gpu_basis(_gpu(tmp_path, "like: h100-sxm5-80gb\npeak_16bit: 756TFLOPS\nsm_count: 114\n"))
    assert "fitted on no published run" in new and "peak_16bit, sm_count changed" in new
    assert "fit did not measure that" in new
    assert "which no published run fitted either" in spreads.gpu_basis(_gpu(tmp_path, "like: mi300x\n"))


def test_predict_prints_the_carried_interval(tmp_path, cli):
    path = tmp_path / "g.yaml"
    path.write_text("name: my-h100\nlike: h100-sxm5-80gb\nmemory: 94GB\n")
    args = ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--tp", "2", "--global-batch", "64", "--json"]
    import json

    code, out, err = cli([*args, "--gpu", str(path)])
    assert code == 0, err
    mine = json.loads(out)
    code, out, err = cli([*args, "--gpu", "h100-sxm5-80gb"])
    base = json.loads(out)
    lo, hi = mine["step_time_s_low"], mine["step_time_s_high"]
    assert math.isclose(lo, base["step_time_s_low"]) and math.isclose(hi, base["step_time_s_high"])
