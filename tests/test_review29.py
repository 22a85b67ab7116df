"""What review 29 (a fresh user's pass over the CLI) found: each a test that failed before the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

H100_8B = ["--model", "llama3-8b", "--system", "dgx-h100"]


def test_throughput_objective_names_its_tie_rule_and_the_why_agrees(cli):
    """Row 3 (more tok/s per GPU) under row 1: the header says rates within 0.5% tie and rank by step
    time, and the why says the better-rate neighbour lost the tie (it was searched: not 'outside')."""
    args = ["plan", *H100_8B, "--nodes", "4", "--global-batch", "64", "--objective", "throughput-per-gpu"]
    code, out, err = cli([*args, "--top", "3"])
    assert code == 0, err
    assert "rates within 0.5%" in " ".join(out.split())
    why = [line for line in out.splitlines() if "better but" in line]
    assert why and not any("outside the search" in line for line in why)
    assert any("a tie (rates within 0.5%" in line for line in why)


def test_first_and_last_without_a_pipeline_are_refused_naming_the_plan(cli):
    """`serve --plan tp=1,first=4` priced the plan and dropped first=4 without a word; crossover
    refused it as 'plan: first/last_stage_layers need pp > 1' without saying which --plan."""
    for command in ("serve", "crossover"):
        code, _, err = cli([command, *H100_8B, "--plan", "tp=1,first=4"])
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "--plan 'tp=1,first=4': first= " in err and "needs pp > 1" in err
    code, _, err = cli(["serve", *H100_8B, "--plan", "tp=4,pp=2,first=12,last=20"])
    assert code == 0, err


def test_crossover_decode_says_which_request_and_all_reduce_it_prices(cli, tmp_path):
    """crossover --workload decode's TPOT (prompts of the sequence length, plain NCCL) sat beside
    serve's (512-token prompts, TensorRT-LLM's custom all-reduce) with nothing saying they differ."""
    plot = str(tmp_path / "c.png")
    args = ["crossover", *H100_8B, "--plan", "tp=8", "--plan", "tp=4", "--workload", "decode", "--plot", plot]
    code, out, err = cli(args)
    assert code == 0, err
    said = " ".join(out.split())
    assert "prompts of the sequence length 8192" in said and "all-reduce by NCCL, no engine's custom kernel" in said
    code, out, _ = cli(["crossover", "--help"])
    assert "512-token prompts" in " ".join(out.split())


@pytest.mark.slow
def test_serve_md_target_search_prose_holds(cli):
    """docs/commands/serve.md quoted 493 tokens/s per GPU, 24 in flight and tp=8's 289 after the search
    had moved to 501, 25 and 304; the prose now names layouts only, which this checks."""
    text = " ".join((Path(__file__).parents[1] / "docs" / "commands" / "serve.md").read_text().split())
    claim = "27 layouts searched, the best `tp=1,ep=16`"
    assert claim in text and "the ep 1 layouts' best, `tp=8`" in text and "493" not in text
    code, out, err = cli(["serve", "--model", "deepseek-v3", "--system", "dgx-h200", "--num-gpus", "16",
                          "--weight-precision", "fp8", "--ttft-max", "2s", "--tpot-max", "50ms", "--json"])  # fmt: skip
    assert code == 0, err
    found = json.loads(out)
    options = [o for o in found["options"] if o["meets"]]
    assert found["layouts"]["searched"] == 27 and options[0]["plan"] == "tp=1,ep=16"
    dense = [o for o in options if "ep=" not in o["plan"]]
    assert dense[0]["plan"] == "tp=8" and options[0]["tokens_per_s_per_gpu"] > 1.5 * dense[0]["tokens_per_s_per_gpu"]


def test_plan_prints_its_rows_on_stdout_with_dash(cli):
    """`plan -o -` was refused ('this option writes a file, not stdout') where sweep and crossover
    print their CSV: now the CSV alone, the same rows a file gets."""
    job = ["plan", *H100_8B, "--global-batch", "32"]
    code, out, err = cli([*job, "-o", "-"])
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("gpus,tp,pp,dp,") and all(line.count(",") == lines[0].count(",") for line in lines)
    code, _, err = cli([*job, "-o", "-", "--json"])
    assert code == 2 and "give --json or -o -, not both" in err


def test_timeline_says_what_a_fraction_of_micro_batches_in_flight_is(cli, tmp_path):
    """--vpp 3 printed 'peak micro-batches in flight' as 10.3333: model chunks held / v. Now the
    chunks (Megatron-Core's interleaved warm-up on the first of 8 stages: (8 - 1) x 2 + (3 - 1) x 8,
    plus the one in its steady state: 31) and the micro-batches they make."""
    job = ["timeline", "--model", "llama3-70b", "--system", "dgx-h100", "--nodes", "4", "--tp", "4", "--pp", "8"]
    code, out, err = cli([*job, "--vpp", "3", "--global-batch", "64", "--no-plot"])
    assert code == 0, err
    assert "peak in flight: chunks (micro-batches)" in out and "31 (10.33)" in out and "10.3333" not in out
    code, out, err = cli([*job, "--global-batch", "64", "--no-plot"])
    assert code == 0 and "peak micro-batches in flight" in out and "chunks" not in out


def test_serve_json_memory_parts_add_up_to_the_total(cli):
    """serve --json listed weights and kv_cache only: 8.07 of 10.22 GB at tp=2 (the runtime reserve
    left out)."""
    code, out, err = cli(["serve", *H100_8B, "--plan", "tp=2", "--plan", "tp=4,pp=2", "--json"])
    assert code == 0, err
    for plan in json.loads(out)["plans"]:
        memory = plan["memory_bytes"]
        assert memory["runtime_reserve"] == 2 * 1024**3
        assert sum(v for k, v in memory.items() if k != "total") == memory["total"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--tp", "3"], "plan: --tp 3: the model's 32 heads are not divisible by tp=3"),
        (["--dp", "3"], "plan: --dp 3: the global batch 32 is not divisible by dp=3"),
        (["--pp", "64"], "plan: --pp 64: pp=64 is more stages than the 32 layers"),
        (["--cp", "3"], "plan: --cp 3: cp=3 does not divide the 8 GPUs"),
        (["--shard-group", "3"], "plan: --shard-group 3: a shard group divides the data-parallel ranks"),
    ],
)
def test_plan_names_the_first_rule_a_fixed_value_breaks(cli, args, message):
    """`plan --tp 3` / `--dp 3` / `--pp 64` got one generic 'no valid layout' where predict names the
    problem; `--shard-group 3` on 8 GPUs searched ZeRO-0 alone without a word."""
    code, out, err = cli(["plan", *H100_8B, "--global-batch", "32", *args])
    assert (code, out) == (2, "") and len(err.strip().splitlines()) == 1, err
    assert message in err and "no valid layout" not in err


def test_a_width_range_holding_one_head_multiple_is_refused(cli):
    """`crossover --vary hidden=100..200` became the one width 128 without a word."""
    code, out, err = cli(["crossover", "--vary", "hidden=100..200", "--no-plot"])
    assert (code, out) == (2, "") and "holds only 128" in err


def test_serve_past_the_sequence_length_says_so_in_the_result(cli):
    """`serve --input-len 200000` on llama3-8b (8,192) priced it after a stdout note only: the
    header says it, and the JSON's notes carry it."""
    args = ["serve", *H100_8B, "--plan", "tp=8", "--input-len", "200000"]
    code, out, err = cli(args)
    assert code == 0, err
    assert "(beyond llama3-8b's sequence length 8,192)" in " ".join(out.split())  # its serving context (review 43)
    code, out, _ = cli([*args, "--json"])
    assert any("more than llama3-8b's sequence length 8,192" in n for n in json.loads(out)["notes"])


def test_the_network_header_and_note_say_line_rate_and_sustained(cli):
    """README's plan: the header's '1.56 GB/s per GPU' (12.5 GB/s line rate over 8 GPUs) beside the
    note's '10 GB/s sustained' (1.25 per GPU), neither saying which it was."""
    args = ["plan", "--model", "llama3-8b", "--system", "dgx-a100", "--nodes", "2", "--inter-link", "eth-100g",
            "--nics-per-node", "1", "--global-batch", "256", "--top", "1"]  # fmt: skip
    code, out, err = cli(args)
    assert code == 0, err
    assert "1 NIC per server of 8 GPUs: 1.56 GB/s per GPU nominal" in " ".join(out.split())
    assert "1 x eth-100g (12.5 GB/s nominal, 10 GB/s sustained per direction" in err
