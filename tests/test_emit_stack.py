"""`--emit` prices under the stack the emitted tool runs (`requests.emit_stack`; review 29: `--emit
deepspeed` and `--emit torchtitan` kept Megatron-Core's price beside the other tool's launch)."""

from __future__ import annotations

import json

JOB = ["--model", "llama3-8b", "--system", "dgx-h100", "--nodes", "2", "--global-batch", "32"]


def _json(cli, args: list[str]) -> tuple[dict, str]:
    code, out, err = cli([*args, "--json"])
    assert code == 0, err
    return json.loads(out), err


def test_predict_emit_deepspeed_prices_megatron_deepspeed_with_flash_attention(cli):
    emitted, err = _json(cli, ["predict", *JOB, "--zero", "3", "--emit", "deepspeed"])
    own, _ = _json(cli, ["predict", *JOB, "--zero", "3", "--framework", "megatron-deepspeed", "--flash-attention"])
    core, _ = _json(cli, ["predict", *JOB, "--zero", "3"])
    assert emitted["step_time_s"] == own["step_time_s"] != core["step_time_s"]
    assert emitted["memory_bytes"] == own["memory_bytes"]
    assert "--use-flash-attn-v2" in emitted["launch"]["argv"]  # what it was priced with
    assert emitted["launch"]["priced_framework"] == "megatron-deepspeed"
    assert "priced under megatron-deepspeed" in err
    assert "--framework megatron-deepspeed --flash-attention" in emitted["command"]  # the command that prices it
    code, out, err = cli(["predict", *JOB, "--zero", "3", "--emit", "deepspeed"])
    assert code == 0 and "launch this plan with deepspeed (master), priced under megatron-deepspeed:" in out


def test_predict_emit_deepspeed_without_flash_attention_names_the_flag(cli):
    code, _, err = cli(["predict", *JOB, "--zero", "3", "--framework", "megatron-deepspeed", "--emit", "deepspeed"])
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "--flash-attention (the launch then asks for it)" in err


def test_another_framework_named_keeps_its_price_and_says_so(cli):
    emitted, err = _json(cli, ["predict", *JOB, "--zero", "3", "--framework", "fsdp", "--emit", "torchtitan"])
    # fsdp's price of the plan the launch runs: llama3_8b's own activation checkpointing, SelectiveAC
    # (`emit_stack.launch_recompute`), which the command that prices it states
    own, _ = _json(cli, ["predict", *JOB, "--zero", "3", "--framework", "fsdp", "--recompute", "selective"])
    assert emitted["step_time_s"] == own["step_time_s"]
    assert "--recompute selective" in emitted["command"] and emitted["recompute_source"] == "--emit torchtitan"
    assert "the times are --framework fsdp's, not those of torchtitan-compile" in err
    code, out, _ = cli(["predict", *JOB, "--zero", "3", "--framework", "fsdp", "--emit", "torchtitan"])
    assert code == 0
    assert "priced under fsdp (--framework), not torchtitan-compile:" in out


def test_plan_emit_torchtitan_searches_under_torchtitan_compile(cli):
    emitted, err = _json(cli, ["plan", *JOB, "--top", "2", "--emit", "torchtitan"])
    own, _ = _json(cli, ["plan", *JOB, "--top", "2", "--framework", "torchtitan-compile"])
    assert [p["step_time_s"] for p in emitted["plans"]] == [p["step_time_s"] for p in own["plans"]]
    assert "priced under torchtitan-compile" in err
    assert "--compile.enable" in emitted["launch"]["argv"]
    eager, _ = _json(cli, ["plan", *JOB, "--top", "1", "--framework", "torchtitan", "--emit", "torchtitan"])
    assert "--compile.no-enable" in eager["launch"]["argv"]


def test_emit_megatron_is_priced_as_before(cli):
    emitted, err = _json(cli, ["predict", *JOB, "--zero", "3", "--emit", "megatron"])
    core, _ = _json(cli, ["predict", *JOB, "--zero", "3"])
    assert emitted["step_time_s"] == core["step_time_s"] and "priced under" not in err


def test_plan_emit_searches_only_the_zero_stages_the_tool_implements(cli):
    """review33: `plan --zero 1 --emit torchtitan` picked a ZeRO-1 plan under torchtitan-compile while
    its neighbour lines said the stack implements ZeRO 0, 2, 3 only (FSDP2 has no ZeRO-1)."""
    code, out, err = cli(["plan", *JOB, "--tp", "2", "--zero", "1", "--top", "1", "--emit", "torchtitan"])
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert "--zero 1: not allowed with --emit torchtitan" in err and "ZeRO 0, 2, 3 only" in err
    some, err = _json(cli, ["plan", *JOB, "--tp", "2", "--zero", "0,1,2", "--top", "3", "--emit", "torchtitan"])
    assert {p["zero_stage"] for p in some["plans"]} <= {0, 2}
    assert "ZeRO 1 not searched (torchtitan-compile implements ZeRO 0, 2, 3 only)" in err
    mega, _ = _json(cli, ["plan", *JOB, "--tp", "2", "--zero", "1", "--top", "1", "--emit", "megatron"])
    assert mega["plans"][0]["zero_stage"] == 1  # Megatron's distributed optimizer


def test_the_emit_stack_note_reads_plainly(cli):
    code, _, err = cli(["plan", *JOB, "--top", "1", "--emit", "torchtitan"])
    assert code == 0
    assert (
        "priced under torchtitan-compile, the stack torchtitan's launch runs (as if --framework torchtitan-compile "
        "were given); to price under another stack, name it with --framework" in err
    )
    assert "counts as none named" not in err
