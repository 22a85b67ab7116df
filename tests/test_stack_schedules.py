"""Each stack's preset names the pipeline schedules its code runs (review 47 #2): under
megatron-core, the default, `plan` ranked ZB-H1 first for Llama 3.1 405B on 128 H100, a schedule
Megatron-LM does not run (its own --emit megatron re-priced it as 1F1B)."""

from __future__ import annotations

import json

import pytest

from shardwise.presets.stack_defaults import framework_schedules


@pytest.mark.parametrize(
    ("stack", "schedules"),
    [
        ("megatron-core", ("1f1b", "interleaved")),
        ("megatron-lm-2022", ("1f1b", "interleaved")),
        ("megatron-lm-2021", ("1f1b", "interleaved")),
        ("megatron-deepspeed", ("1f1b", "zb-h1")),
        ("deepspeed", ("1f1b",)),
        ("torchtitan", ("gpipe", "1f1b", "interleaved")),
        ("torchtitan-compile", ("gpipe", "1f1b", "interleaved")),
        ("nanotron", ("gpipe", "1f1b")),
    ],
)
def test_each_stack_names_the_schedules_its_code_runs(stack, schedules):
    assert framework_schedules(stack) == schedules


def test_plan_under_megatron_core_ranks_only_schedules_megatron_runs(cli):
    args = ["plan", "--model", "llama3.1-405b", "--system", "dgx-h100", "--nodes", "16", "--global-batch", "512"]
    code, out, err = cli([*args, "--json"])
    assert code == 0, err
    data = json.loads(out)
    assert {p["schedule"] for p in data["plans"]} <= {"1f1b", "interleaved"}
    code, out, err = cli(args)
    assert code == 0, err
    ranked = out.partition("why:")[0]
    assert "zb-h1" not in ranked and "gpipe" not in ranked


@pytest.mark.parametrize(("stack", "schedule"), [("megatron-core", "zb-h1"), ("megatron-lm-2022", "gpipe")])
def test_predict_notes_a_schedule_megatron_does_not_run_and_prices_it_as_asked(cli, stack, schedule):
    base = ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", "64", "--pp", "2"]
    code, out, err = cli([*base, "--framework", stack, "--schedule", schedule])
    assert code == 0, err
    assert f"{stack} runs the 1f1b, interleaved pipeline schedules, not {schedule}; priced as asked" in err
    assert f", {schedule}," in out  # priced as asked
    code, _out, err = cli([*base, "--framework", "megatron-deepspeed", "--schedule", "zb-h1"])
    assert code == 0 and "priced as asked" not in err  # --enable-zbh1-pipeline
