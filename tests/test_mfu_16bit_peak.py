"""An FP8 plan's MFU divides by the FP8 dense peak; `mfu_16bit_peak` gives it against the 16-bit
peak too (JSON and predict's table), as published FP8 MFU often is."""

import json

import pytest

ARGS = ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--nodes", "1", "--tp", "2"]
ARGS += ["--pp", "1", "--global-batch", "16"]


def test_fp8_mfu_against_both_peaks(cli):
    code, out, err = cli([*ARGS, "--precision", "fp8", "--json"])
    assert code == 0, err
    data = json.loads(out)
    est = data.get("estimate", data)
    from shardwise import presets

    gpu = presets.system("dgx-h100").gpu
    ratio = float(gpu.peak_flops_per_s_fp8) / float(gpu.peak_flops_per_s_16bit)
    assert ratio == pytest.approx(2.0, rel=0.01)  # H100 SXM: 1979 against 989 dense TFLOP/s
    assert est["mfu_16bit_peak"] == pytest.approx(est["mfu"] * ratio, rel=1e-12)


def test_bf16_mfu_is_the_same_on_both_and_the_table_line_shows_only_for_fp8(cli):
    code, out, err = cli([*ARGS, "--json"])
    assert code == 0, err
    est = json.loads(out)
    est = est.get("estimate", est)
    assert est["mfu_16bit_peak"] == est["mfu"]
    code, table, err = cli(ARGS)
    assert code == 0 and "16-bit peak" not in table
    code, table, err = cli([*ARGS, "--precision", "fp8"])
    assert code == 0, err
    assert "MFU against 16-bit peak" in table and "(above: against the fp8 peak)" in table
