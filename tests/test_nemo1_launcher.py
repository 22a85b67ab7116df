"""NeMo 24.07's performance summary priced with the NeMo 1 launcher configuration each row ran
(`analyses.public_nemo1_launcher`: NeMo-Framework-Launcher tag 24.07's model YAMLs and example scripts)."""

from __future__ import annotations

import pytest

from shardwise.analyses import public_nemo1_launcher as launcher
from shardwise.analyses import public_validation as pv
from shardwise.specs.plan import Recompute


def _rows() -> dict[tuple[str, str], dict[str, str]]:
    return {
        (r["model"], r["workload"]): r
        for r in pv.raw_rows()
        if r["source"].startswith("GitHub NVIDIA/NeMo docs/source/performance/performance_summary")
        and r["framework_version"] == "24.07"
    }


def _plan(row: dict[str, str]):
    return pv.scenario_for(pv.public_moe.resolved(row)).plan


def test_every_row_of_the_summary_has_its_launcher_recipe():
    rows = _rows()  # GPT-3 175B's two rows share a key
    assert len(rows) == 17 and all(launcher.recipe(r) is not None for r in rows.values())
    assert launcher.recipe({**rows["gpt3-5b", "pretrain"], "framework_version": "24.05"}) is None


@pytest.mark.parametrize(
    ("model", "workload", "state", "bf16_grads"),
    [
        ("gpt3-5b", "pretrain", "fp32-remainders", True),  # fp32 Adam beside O2 bf16 weights; script's bf16 grads
        ("nemotron-22b", "pretrain", "fp32-remainders", False),  # no grad_sync_dtype anywhere: fp32
        ("nemotron4-340b", "pretrain", "bf16", True),  # the YAML's dtype bf16
        ("llama2-7b", "sft", "bf16", True),  # sft.yaml's dtype bf16
        ("llama2-7b", "lora", "fp32", False),  # fused_adam: the stack's
    ],
)
def test_the_optimizer_follows_the_launcher(model, workload, state, bf16_grads):
    plan = _plan(_rows()[model, workload])
    assert plan.optimizer_state == state and bool(plan.grad_reduce_bf16) is bf16_grads


def _gpt175(num_gpus: int) -> dict[str, str]:
    return next(
        r
        for r in pv.raw_rows()
        if r["model"] == "gpt3-175b" and r["framework_version"] == "24.07" and int(r["num_gpus"]) == num_gpus
    )


def test_overlaps_and_recomputation_follow_the_launcher():
    rows = _rows()
    # 128 GPUs: no file has the row's layout; the tag's 175b.yaml (ub_tp_comm_overlap False since
    # 2023-09, its tp_overlap config the row's TP 4, MBS 1, 2048 tokens) holds
    gpt175 = _plan(_gpt175(128))
    assert bool(gpt175.sequence_parallel) and not bool(gpt175.tp_comm_overlap) and bool(gpt175.overlap_p2p)
    # 512 GPUs: 64 nodes, MBS 2, GBS 2048, TP 4, PP 8, VP 6 is launcher main's 175b_mlperf.yaml (overlap on)
    mlperf = _gpt175(512)
    assert launcher.recipe(mlperf) is launcher.MATCHED["gpt3-175b", 512, 2, 2048, 4, 8, 6]
    assert bool(_plan(mlperf).tp_comm_overlap) and bool(_plan(mlperf).grad_reduce_bf16)
    assert launcher.recipe({**mlperf, "mbs": "1"}) is launcher.RECIPES["gpt3-175b", "pretrain"]
    assert bool(_plan(rows["llama3-70b", "pretrain"]).tp_comm_overlap)
    # the row keeps the YAML's TP 8, MBS 1, 4096 tokens: its ub_tp_comm_overlap False holds;
    # selective recomputation, batched blocking p2p
    nemotron = _plan(rows["nemotron4-340b", "pretrain"])
    assert nemotron.recompute == Recompute.SELECTIVE and not bool(nemotron.overlap_p2p)
    assert bool(nemotron.sequence_parallel) and not bool(nemotron.tp_comm_overlap)
    lora70 = _plan(rows["llama2-70b", "lora"])  # sft.yaml: no sequence parallelism, so NeMo drops ub
    assert not bool(lora70.sequence_parallel) and not bool(lora70.tp_comm_overlap)


def test_the_launcher_turns_nvls_off():
    """config.yaml env_vars NCCL_NVLS_ENABLE: 0 (tag 24.07): NCCL does not reduce in the NVSwitch,
    and its NVLS buffers are not allocated."""
    row = _rows()["llama3-70b", "pretrain"]
    scn = pv.scenario_for(row)
    assert not bool(scn.cluster.nvls)
    other = next(r for r in pv.raw_rows() if r["source"].startswith("GitHub NVIDIA-NeMo/Megatron-Bridge docs/perf"))
    assert bool(pv.scenario_for(pv.public_moe.resolved(other)).cluster.nvls)


def test_the_scripts_virtual_stages_complete_the_fine_tuning_layouts():
    """The summary prints no VP for its pipelined fine-tuning rows; the scripts set it (13B SFT 10,
    70B SFT 20, 70B LoRA none), so those rows are priced, not skipped."""
    rows = _rows()
    scripts = {("llama2-13b", "sft"): 10, ("llama2-70b", "sft"): 20, ("llama2-70b", "lora"): 1}
    for (model, workload), vp in scripts.items():
        row = rows[model, workload]
        assert row["vp"] == "" and not pv.skip_reason(row)
        assert int(_plan(row).vpp) == vp
    other = {**rows["llama2-70b", "sft"], "source": "GitHub elsewhere"}
    assert pv.skip_reason(other) == "layout incomplete"


def test_the_peft_scripts_pack_their_data():
    """Every PEFT script sets `peft.model.data.train_ds.packed_sequence=true`: SFT and LoRA rows are
    priced as packs of SQuAD documents in Llama 2's tokens; pre-training is not packed."""
    rows = _rows()
    for workload in ("sft", "lora"):
        for model in ("llama2-7b", "llama2-13b", "llama2-70b"):
            assert int(_plan(rows[model, workload]).packed_document_len) == 245
    assert int(_plan(rows["llama2-7b", "pretrain"]).packed_document_len) == 0
    assert launcher.packed_document_len({**rows["llama2-7b", "sft"], "framework_version": "24.05"}) == 0
