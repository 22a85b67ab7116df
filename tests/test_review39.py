"""Review 39 (this session's own diff): serve's fit hints name formats the engine runs, a row that
does not fit says so in the table, and a static-only engine's refusal says what to drop."""

from __future__ import annotations

H100_70B = ["--model", "llama3-70b", "--system", "dgx-h100"]


def test_fit_hints_name_only_weight_formats_the_engine_runs(cli):
    code, out, err = cli(["serve", *H100_70B, "--plan", "tp=1", "--framework", "llama.cpp"])
    assert code == 0, err
    line = next(x for x in out.splitlines() if "would fit with" in x)
    assert "fp8" not in line and "int4" not in line and "q8_0" in line
    code, out, err = cli(["serve", *H100_70B, "--plan", "tp=1"])
    assert "--weight-precision fp8" in out  # TensorRT-LLM runs FP8 on an H100


def test_a_row_that_does_not_fit_says_so_in_the_table(cli):
    code, out, err = cli(["serve", *H100_70B, "--plan", "tp=1", "--plan", "tp=8"])
    assert code == 0, err
    assert "[does not fit]" in " ".join(out.split())  # rich read it as a markup tag and dropped it


def test_a_static_only_engine_is_not_told_to_drop_batching_static(cli):
    code, out, err = cli(["serve", *H100_70B, "--plan", "tp=8", "--framework", "pytorch", "--requests", "100"])
    assert code == 2 and out == ""
    assert "pytorch runs static batches only: drop --requests" in err and "drop --batching static" not in err
