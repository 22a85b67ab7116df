"""The rows of tools/data/public_runs/colossalai_llama2.csv and litgpt_thunder.csv (issue #32: Colossal-AI's
Gemini and litgpt's Lightning Fabric FSDP1), as tools/import_public_runs.py writes them into
data/public_training_runs.csv (PUBLIC_RUNS_OTHER_STACKS.md)."""

from __future__ import annotations

import csv
from importlib import resources

import pytest

FIRST = 1370  # the rows before these two tables (test_public_runs_data.py's count)


@pytest.fixture(scope="module")
def new() -> list[dict[str, str]]:
    text = resources.files("shardwise.data").joinpath("public_training_runs.csv").read_text(encoding="utf-8")
    return list(csv.DictReader(text.splitlines()))[FIRST:]


def test_colossalai_llama2_row_is_gemini_zero3_with_every_layer_checkpointed(new):
    """README's result line: 24.26 samples/s on 32 A800, 16 x 4,096 tokens per GPU -> 21.1 s a step; its
    TFLOPS/GPU counts the recompute (2 N tokens (3 + 1)) and is left out of the metric."""
    from shardwise.analyses import public_runs, public_stacks

    r = new[0]
    assert r["source"] == "GitHub hpcaitech/ColossalAI examples/language/llama2/README.md"
    assert (r["framework"], r["model"], r["system"], r["num_gpus"]) == ("colossalai", "llama2-7b", "hgx-a800", "32")
    layout = (r["dp"], r["fsdp"], r["mbs"], r["gbs"], r["seq_len"], r["recompute"])
    assert layout == ("32", "32", "16", "512", "4096", "full")
    assert (r["metric"], r["measured"], r["model_tflops_per_gpu"]) == ("step_time_s", "21.1047", "")
    assert abs(16 * 32 / 24.26 - float(r["measured"])) < 1e-4
    assert "offload" not in r["parse_notes"]  # placement static: every chunk on the GPUs
    assert public_runs.skip_reason(r) == ""
    assert public_stacks.zero_stage(r, None) == 3
    assert public_stacks.execution(r) == ("colossalai", {"attention_kernel": "flash2", "flash_attention": True})


def test_litgpt_thunder_fsdp_rows_are_priced_and_ddp_rows_are_not(new):
    """The eager and torch.compile rows of the table's two versions: FSDP1 FULL_SHARD over 8 A100 40GB
    (one micro-batch a step: the timed iteration is the step) priced with the fsdp preset, bf16
    reduce-scatters (Fabric's bf16-true); DDP and one-GPU rows kept with framework pytorch (no preset)."""
    from shardwise.analyses import public_runs, public_stacks

    rows = new[1:10]
    assert [(r["framework"], r["num_gpus"], r["gbs"], r["measured"]) for r in rows] == [
        ("fsdp", "8", "32", "0.46088"), ("fsdp", "8", "32", "0.31871"),
        ("pytorch", "8", "32", "0.53528"), ("pytorch", "8", "32", "0.34819"),
        ("pytorch", "1", "4", "0.44988"), ("pytorch", "1", "4", "0.32022"),
        ("fsdp", "8", "32", "0.45657"), ("pytorch", "8", "32", "0.56946"), ("pytorch", "1", "4", "0.44765"),
    ]  # fmt: skip
    same = ("tinyllama-1.1b", "dgx-a100-40gb", "4", "2048", "1")
    assert all((r["model"], r["system"], r["mbs"], r["seq_len"], r["ga"]) == same for r in rows)
    fsdp = [r for r in rows if r["framework"] == "fsdp"]
    assert [public_runs.skip_reason(r) for r in fsdp] == ["", "", ""]
    eager = {"attention_kernel": "sdpa-flash2", "flash_attention": True, "grad_reduce_bf16": True}
    assert [public_stacks.execution(r) for r in fsdp] == [
        ("fsdp", eager),
        ("fsdp", {"eager_kernels": False, **eager}),
        ("fsdp", eager),
    ]
    assert all(public_runs.skip_reason(r).startswith("framework 'pytorch'") for r in rows if r not in fsdp)
