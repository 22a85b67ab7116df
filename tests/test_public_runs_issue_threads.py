"""The rows of tools/data/public_runs/issue_threads.csv (issue #32 item 2: measurements posted in GitHub
pull-request threads with their configuration: torchtitan's Llama 3.1 405B bring-up, lit-llama's first FSDP
timing, ATorch's Llama 2 7B table), as tools/import_public_runs.py writes them (PUBLIC_RUNS_OTHER_STACKS.md)."""

from __future__ import annotations

import csv
from importlib import resources

import pytest

FIRST = 1380  # the rows before this table (test_public_runs_data.py's count)

# compute_llama2_training_flops (dlrover atorch/examples/llama2/example_utils.py at a47b949b) for one 4,096-token
# sequence of the Llama-2-7B shape under checkpointing: 4 passes of the layers' matmuls, 3 of the logits
H, V, FFN, LAYERS, SEQ = 4096, 32000, 11008, 32, 4096
HW_FLOPS_A_SEQUENCE = LAYERS * (8 * SEQ * H * H + 4 * SEQ * SEQ * H + 6 * SEQ * H * FFN) * 4 + 2 * SEQ * H * V * 3


@pytest.fixture(scope="module")
def new() -> list[dict[str, str]]:
    text = resources.files("shardwise.data").joinpath("public_training_runs.csv").read_text(encoding="utf-8")
    return list(csv.DictReader(text.splitlines()))[FIRST:]


def test_torchtitan_405b_row_is_tp8_fsdp16_eager_with_full_checkpointing(new):
    """PR #481's 'wps: 109 mfu: 29%' on 128 GPUs with llama3_405b.toml at its merge commit; the MFU is the
    405B's at 109 tokens/s (6 N + 12 L H Q T a token over 989 TFLOP/s), not the 70B's."""
    from shardwise.analyses import public_runs, public_stacks

    r = new[0]
    assert (r["framework"], r["framework_version"], r["model"], r["system"]) == (
        "torchtitan", "torchtitan:487135814", "llama3-405b", "dgx-h100"
    )  # fmt: skip
    layout = (r["num_gpus"], r["tp"], r["pp"], r["dp"], r["fsdp"], r["mbs"], r["gbs"], r["seq_len"], r["recompute"])
    assert layout == ("128", "8", "1", "16", "16", "2", "32", "8192", "full")
    assert (r["metric"], r["measured"]) == ("tokens_per_s_per_gpu", "109")
    n_no_embedding = 405.85e9 - 128256 * 16384
    assert abs((6 * n_no_embedding + 12 * 126 * 128 * 128 * 8192) * 109 / 989e12 - 0.29) < 0.005
    assert public_runs.skip_reason(r) == ""
    assert public_stacks.execution(r) == ("torchtitan", {"attention_kernel": "sdpa-flash2", "flash_attention": True})


def test_lit_llama_row_is_the_llama2_7b_shape_at_its_2048_block(new):
    r = new[1]
    assert (r["framework"], r["model"], r["system"], r["num_gpus"]) == ("fsdp", "llama2-7b", "dgx-a100-40gb", "4")
    assert (r["mbs"], r["ga"], r["gbs"], r["seq_len"], r["recompute"]) == ("5", "6", "120", "2048", "full")
    assert "approximate" in r["parse_notes"]


def test_atorch_rows_step_times_follow_from_their_printed_hardware_tflops(new):
    """The table prints TFLOP/s with the recomputed forward (HFU = TFLOP/s / 312); the step is
    gbs x the count of a sequence / (TFLOP/s x GPUs)."""
    rows = new[2:]
    printed = [204.67, 197.22, 196.04, 195.14, 190.27, 159.19, 155.73, 154.84, 154.44, 153.93]
    assert len(rows) == len(printed)
    for r, tflops in zip(rows, printed, strict=True):
        step = int(r["gbs"]) * HW_FLOPS_A_SEQUENCE / (tflops * 1e12 * int(r["num_gpus"]))
        assert r["metric"] == "step_time_s" and abs(float(r["measured"]) - step) < 1e-3
        assert f"hfu={round(tflops / 312 * 100, 1)}" in r["parse_notes"]
        assert (r["model"], r["seq_len"], r["recompute"]) == ("llama2-7b", "4096", "full")
    assert [r["framework"] for r in rows] == ["fsdp"] * 4 + ["megatron-deepspeed"] * 6


def test_atorch_ds3d_rows_are_priced_with_eager_kernels_and_never_set_a_scale(new):
    """ATorch's DS 3D runs Hugging Face's Llama layers (eager norms and rotary) under DeepSpeed's pipeline
    engine: priced with eager element-wise kernels, and, as eager PyTorch, kept out of the efficiency fit."""
    from shardwise.analyses import loso, public_stacks

    ds3d = [r for r in new if r["framework"] == "megatron-deepspeed"]
    assert all("kernels=hf-eager" in r["parse_notes"] for r in ds3d)
    preset, plan = public_stacks.execution(ds3d[0])
    assert preset == "megatron-deepspeed" and plan["eager_kernels"] is True
    assert plan["sequence_parallel"] is False and plan["attention_kernel"] == "flash2"
    ids = {r["id"] for r in ds3d}
    priced = [p for p in loso.priced_rows() if p.row.run_id in ids]
    assert priced and all(p.eager and not p.sets_scale for p in priced)
    assert any(p.sets_scale for p in loso.priced_rows() if p.gpu == priced[0].gpu)  # their GPU is fitted by others
