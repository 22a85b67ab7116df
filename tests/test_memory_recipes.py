"""Memory-only recipe settings: the loss kernel (`Plan.loss_kernel`) and the caching allocator's
expandable segments (`Plan.expandable_segments`), and the published runs whose recipes set them
(`analyses.public_memory_recipes`)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shardwise import presets
from shardwise.errors import SpecError


def _memory(model, **plan):
    from shardwise.engines.training import training_memory
    from shardwise.specs import Plan, Scenario

    p = Plan(**plan)
    cluster = presets.system("dgx-h100").with_(gpus_per_node=min(8, int(p.tp * p.pp * p.dp * p.cp)))
    return training_memory(Scenario(presets.model(model), cluster, p))


def test_expandable_segments_take_away_the_allocators_share_and_nothing_else():
    from shardwise.physics.memory import ALLOCATOR_FRAGMENTATION, EXPANDABLE_SEGMENTS_FRAGMENTATION

    base = _memory("llama3-8b", dp=8, global_batch=8, zero_stage=1)
    grown = _memory("llama3-8b", dp=8, global_batch=8, zero_stage=1, expandable_segments=True)
    assert EXPANDABLE_SEGMENTS_FRAGMENTATION < ALLOCATOR_FRAGMENTATION
    assert float(base.allocator_bytes) == pytest.approx(ALLOCATOR_FRAGMENTATION * float(base.activations_bytes))
    assert float(grown.allocator_bytes) == pytest.approx(
        EXPANDABLE_SEGMENTS_FRAGMENTATION * float(grown.activations_bytes)
    )
    assert float(grown.activations_bytes) == float(base.activations_bytes)
    drop = float(base.total_bytes) - float(grown.total_bytes)
    assert drop == pytest.approx(float(base.allocator_bytes) - float(grown.allocator_bytes))
    assert drop > 0


def test_expandable_segments_broadcast_over_an_array_of_plans():
    on = np.array([False, True])
    both = _memory("llama3-8b", dp=8, global_batch=8, zero_stage=1, expandable_segments=on)
    assert np.asarray(both.allocator_bytes).shape == (2,)
    assert np.asarray(both.allocator_bytes)[0] > 0 and np.asarray(both.allocator_bytes)[1] == 0.0


def test_transformer_engines_loss_keeps_only_the_16_bit_logits():
    """pp = 1: Megatron's loss holds 6 B a logit, the eager one 12; TE's parallel_cross_entropy 2
    (the logits, gradient written in place), so the activations fall by exactly the difference."""
    from shardwise.physics.memory import TE_CROSS_ENTROPY_LOGIT_BYTES

    m = presets.model("llama3-8b")
    logits = m.seq_len * m.vocab
    assert TE_CROSS_ENTROPY_LOGIT_BYTES == 2.0
    for framework, stack_bytes in (("megatron-core", 6.0), ("fsdp", 12.0)):
        kw = {"dp": 8, "global_batch": 8, "zero_stage": 1, "framework": framework}
        own, te = _memory("llama3-8b", **kw), _memory("llama3-8b", loss_kernel="te", **kw)
        diff = float(own.activations_bytes) - float(te.activations_bytes)
        assert diff == pytest.approx((stack_bytes - TE_CROSS_ENTROPY_LOGIT_BYTES) * logits)


def test_transformer_engines_loss_never_adds_memory_and_an_unknown_kernel_is_refused():
    from shardwise.physics.memory_stacks import TE_CROSS_ENTROPY_LOGIT_BYTES, stack_memory

    for name in ("megatron-core", "nanotron", "fsdp", "maxtext", "someone-elses-stack"):
        own, te = stack_memory(name), stack_memory(name, "te")
        assert te.logits_bytes_per_element == min(own.logits_bytes_per_element, TE_CROSS_ENTROPY_LOGIT_BYTES)
    from shardwise.specs import Plan

    with pytest.raises(SpecError, match="loss_kernel 'liger' is not allowed; choose stack, te"):
        Plan(loss_kernel="liger")


def test_memory_settings_do_not_move_the_step_time():
    from shardwise.engines.training import estimate_training_step
    from shardwise.specs import Plan, Scenario

    cluster = presets.system("dgx-h100")
    times = []
    for extra in ({}, {"loss_kernel": "te", "expandable_segments": True}):
        plan = Plan(dp=8, global_batch=64, zero_stage=1, **extra)
        times.append(
            float(np.asarray(estimate_training_step(Scenario(presets.model("llama3-8b"), cluster, plan)).step_time_s))
        )
    assert times[0] == times[1]


def _rows(**match):
    from shardwise.analyses import public_validation

    return [
        r
        for r in public_validation.raw_rows()
        if not public_validation.skip_reason(r) and all(r.get(k) == v for k, v in match.items())
    ]


def test_megatron_bridge_405b_on_gb200_at_fp8_fits_with_its_launchers_expandable_segments():
    """Megatron-Bridge sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True for Llama 3.1 405B on
    GB200 at FP8 (v0.1.0rc4 setup_experiment.py .. the flat recipes): those runs ran, and the
    estimate now fits them; Llama 3 70B with Megatron-FSDP, where the launcher removes it, keeps
    the allocator's share."""
    from shardwise.analyses import public_validation
    from shardwise.engines.training import training_memory

    source = "GitHub NVIDIA-NeMo/Megatron-Bridge docs/performance-summary"
    rows = [r for r in _rows(model="llama3-405b", system="gb200-nvl72", fsdp="0") if r["source"].startswith(source)]
    fp8 = [r for r in rows if r["precision"] in ("fp8", "mxfp8")]
    assert len(fp8) >= 6
    for row in fp8:
        scn = public_validation.scenario_for(row)
        assert bool(scn.plan.expandable_segments) and scn.plan.loss_kernel == "te"
        assert float(training_memory(scn).total_bytes) < float(scn.cluster.gpu.memory_bytes), row["id"]
    fsdp = [r for r in _rows(model="llama3-70b", system="gb200-nvl72") if r["source"].startswith(source)]
    fsdp = [r for r in fsdp if r["fsdp"] not in ("", "0")]
    assert fsdp and not any(bool(public_validation.scenario_for(r).plan.expandable_segments) for r in fsdp)


def test_only_rows_whose_recipe_names_te_loss_get_it():
    from shardwise.analyses import public_validation

    dgxc = [r for r in _rows(model="llama3-8b") if "dgxc-benchmarking" in r["source"]]
    assert dgxc and all(public_validation.scenario_for(r).plan.loss_kernel == "stack" for r in dgxc)


def test_predict_takes_the_memory_flags(cli):
    args = ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--num-gpus", "8", "--global-batch", "8"]
    code, out, err = cli([*args, "--json"])
    assert code == 0, err
    code, out2, err = cli([*args, "--loss-kernel", "te", "--expandable-segments", "--json"])
    assert code == 0, err
    assert json.loads(out) != json.loads(out2)
    code, out, err = cli([*args, "--loss-kernel", "liger"])
    assert code == 2 and "liger" in err and "Traceback" not in err


def test_nemo_2_4s_performance_scripts_set_both_and_nemo_2_3s_neither():
    """NeMo 2.4 (25.07) scripts/performance: TE's loss for every recipe and expandable segments on
    every GPU but B200; the 25.04 rows (NeMo 2.3) keep the stack's loss and the allocator's share."""
    from shardwise.analyses import public_validation

    source = "docs.nvidia.com/nemo-framework/user-guide/latest/performance/performance"
    rows = [r for r in _rows() if r["source"].startswith(source)]
    new = [public_validation.scenario_for(r).plan for r in rows if r["framework_version"] == "25.07"]
    old = [public_validation.scenario_for(r).plan for r in rows if r["framework_version"] == "25.04"]
    assert new and all(p.loss_kernel == "te" and bool(p.expandable_segments) for p in new)
    assert old and not any(p.loss_kernel == "te" or bool(p.expandable_segments) for p in old)


def test_megatron_is_told_the_loss_kernel_and_the_allocator_setting(cli):
    args = ["plan", "--model", "llama3-8b", "--system", "dgx-h100", "--num-gpus", "8", "--global-batch", "16"]
    code, out, err = cli([*args, "--top", "1", "--emit", "megatron"])
    assert code == 0, err
    assert "--cross-entropy-fusion-impl" not in out and "expandable_segments" not in out
    code, out, err = cli([*args, "--loss-kernel", "te", "--expandable-segments", "--top", "1", "--emit", "megatron"])
    assert code == 0, err
    assert "--cross-entropy-loss-fusion --cross-entropy-fusion-impl te" in out
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in out


def test_torchtitan_refuses_transformer_engines_loss(cli):
    args = ["plan", "--model", "llama3-8b", "--system", "dgx-h100", "--num-gpus", "8", "--global-batch", "16"]
    code, _, err = cli(
        [*args, "--framework", "torchtitan", "--loss-kernel", "te", "--top", "1", "--emit", "torchtitan"]
    )
    assert code == 2 and "--loss-kernel te" in err and "Traceback" not in err


def test_an_eager_loss_on_bf16_logits_keeps_8_bytes_a_logit_and_flash_attn_training_2():
    """PyTorch's cross-entropy on 16-bit logits without the fp32 cast ("eager-bf16"): the logits,
    the saved log-softmax and its two gradients at 2 B each, 8 where the cast makes it 12; a stack
    whose own loss keeps less is priced at the named kernel's too. flash-attention's training
    scripts run Apex's xentropy with inplace_backward: the saved logits alone, 2."""
    from shardwise.physics.memory_stacks import EAGER_BF16_LOGIT_BYTES, TE_CROSS_ENTROPY_LOGIT_BYTES, stack_memory

    assert stack_memory("fsdp", "eager-bf16").logits_bytes_per_element == EAGER_BF16_LOGIT_BYTES == 8.0
    # the named kernel's bytes replace the stack's, also where its own fused loss keeps fewer
    assert stack_memory("megatron-core", "eager-bf16").logits_bytes_per_element == EAGER_BF16_LOGIT_BYTES
    assert stack_memory("nanotron", "eager-bf16").saved_logits_bytes_per_element == 2.0
    assert stack_memory("flash-attn-trainer").logits_bytes_per_element == TE_CROSS_ENTROPY_LOGIT_BYTES
    m = presets.model("llama3-8b")
    kw = {"dp": 8, "global_batch": 8, "zero_stage": 3, "framework": "fsdp"}
    own, eager = _memory("llama3-8b", **kw), _memory("llama3-8b", loss_kernel="eager-bf16", **kw)
    diff = float(own.activations_bytes) - float(eager.activations_bytes)
    assert diff == pytest.approx((12.0 - EAGER_BF16_LOGIT_BYTES) * m.seq_len * m.vocab)


def test_an_eager_bf16_loss_whose_logits_are_freed_before_the_backward_keeps_6_bytes_a_logit():
    """A Lightning training_step that returns the loss alone (hpcaitech's GPTLitModule): the logits are
    gone before the backward, so the peak is the logits, the shift's copy and log_softmax's output in the
    forward, or the saved output and two gradients in the backward: 6 B a logit, 2 fewer than where the
    caller holds the logits; 2 saved either way."""
    from shardwise.physics.memory_losses import EAGER_BF16_FREED_LOGIT_BYTES
    from shardwise.physics.memory_stacks import EAGER_BF16_LOGIT_BYTES, stack_memory

    freed = stack_memory("deepspeed", "eager-bf16-freed")
    assert freed.logits_bytes_per_element == EAGER_BF16_FREED_LOGIT_BYTES == EAGER_BF16_LOGIT_BYTES - 2 == 6.0
    held_saved = stack_memory("deepspeed", "eager-bf16").saved_logits_bytes_per_element
    assert freed.saved_logits_bytes_per_element == held_saved == 2.0
    m = presets.model("gpt2-xl")
    kw = {"dp": 4, "micro_batch": 4, "global_batch": 16, "zero_stage": 3, "framework": "deepspeed"}
    held, gone = (_memory("gpt2-xl", loss_kernel=k, **kw) for k in ("eager-bf16", "eager-bf16-freed"))
    diff = float(held.activations_bytes) - float(gone.activations_bytes)
    assert diff == pytest.approx(2.0 * m.seq_len * 4 * m.vocab)


def _fits(row) -> bool:
    from shardwise.analyses import public_validation
    from shardwise.engines.training import training_memory

    scn = public_validation.scenario_for(public_validation.public_moe.resolved(row))
    return float(training_memory(scn).total_bytes) < float(scn.cluster.gpu.memory_bytes)


def test_the_recipes_read_for_the_runs_once_called_out_of_memory():
    """Megatron-Bridge 25.09's DeepSeek-V3 on H100 (run_script.py: recompute mla_up_proj and mlp, the
    layout Et|(tt|)*30mL, one MTP module), NeMo 24.07's Nemotron-4 340B (the launcher's
    distributed_fused_adam with dtype and grad_sync_dtype bf16), Modalities' and NeMo Automodel's MoE
    losses on bf16 logits: each row takes its recipe and the runs that ran fit; the other NeMo 24.07
    pre-training rows keep Apex's fp32 state as remainders beside the bf16 weights
    (`public_nemo1_launcher`)."""
    from shardwise.analyses import public_validation

    def plan(row):
        return public_validation.scenario_for(public_validation.public_moe.resolved(row)).plan

    by_id = {r["id"]: r for r in public_validation.raw_rows()}
    dsv3 = by_id["PUB-0296"]
    assert plan(dsv3).recompute_modules == ("mla_up_proj", "mlp") and int(plan(dsv3).mtp_layers) == 1
    nemotron = by_id["PUB-0311"]
    assert plan(nemotron).optimizer_state == "bf16" and bool(plan(nemotron).grad_reduce_bf16)
    others = [r for r in _rows(framework_version="24.07") if r["id"] != "PUB-0311" and r["workload"] == "pretrain"]
    pretrain = [r for r in others if r["source"] == nemotron["source"]]  # fp32 Adam, bf16 weights: remainders
    assert pretrain and all(plan(r).optimizer_state == "fp32-remainders" for r in pretrain)
    modalities = [r for r in public_validation.raw_rows() if r["source"].startswith("GitHub Modalities/modalities")]
    assert modalities and all(plan(r).loss_kernel == "eager-bf16" for r in modalities[:5])
    automodel = [
        r
        for r in public_validation.raw_rows()
        if r["source"].startswith("GitHub NVIDIA-NeMo/Automodel") and r["moe"] == "yes"
        if not public_validation.skip_reason(public_validation.public_moe.resolved(r))
    ]
    assert automodel and all(plan(r).loss_kernel == "eager-bf16" for r in automodel)
    for rid in ("PUB-0296", "PUB-0311", "PUB-1043", "PUB-1113", "PUB-1169", "PUB-1174"):
        assert _fits(by_id[rid]), rid


def test_megatron_bridge_rows_take_expandable_segments_where_their_release_sets_them():
    """Megatron-Bridge's launcher by release: perf_plugins.py v0.4.0 adds DeepSeek-V3 on GB200
    (26.04), v0.5.x's executor sets it for every run but nccl_ub or Llama with Megatron-FSDP (26.06,
    26.06.01), 26.08's flat recipes for DeepSeek-V3 and Qwen3 MoE; 25.11 (v0.2.0) names Llama 3.1 405B
    on GB200 alone, and no release sets it for Llama 3 70B with Megatron-FSDP."""
    from shardwise.analyses import public_memory_recipes as recipes
    from shardwise.analyses import public_validation

    source = "GitHub NVIDIA-NeMo/Megatron-Bridge docs/performance-summary"
    rows = [public_validation.public_moe.resolved(r) for r in public_validation.raw_rows()]
    rows = [r for r in rows if r["source"].startswith(source) and not public_validation.skip_reason(r)]

    def on(version, model, system):
        picked = [r for r in rows if (r["framework_version"], r["model"], r["system"]) == (version, model, system)]
        assert picked, (version, model, system)
        return {recipes.expandable_segments(r) for r in picked}

    assert on("26.04", "deepseek-v3", "gb200-nvl72") == {True}
    assert on("26.02.01", "deepseek-v3", "gb200-nvl72") == {False}  # v0.3.1: H100 alone
    assert on("25.11", "deepseek-v3", "gb300-nvl72") == {False}
    assert on("26.06", "qwen3-30b-a3b", "dgx-h100") == {True}
    assert on("26.06", "llama3-70b", "dgx-h100") == {True}
    assert on("26.08", "qwen3-235b-a22b", "gb300-nvl72") == {True}
    fsdp = [r for r in rows if r["model"] == "llama3-70b" and r["fsdp"] not in ("", "0")]
    assert fsdp and not any(recipes.expandable_segments(r) for r in fsdp)


def test_torchtitans_launcher_sets_expandable_segments_and_a_row_may_say_otherwise():
    """torchtitan's run_train.sh sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (a5e57e4a9,
    2024-10-22): its presets carry it, so the reserved peak a torchtitan run logs is the allocated one;
    the memory evidence's run of pytorch/pytorch#129721 (2024-06-27), before that commit, keeps the
    allocator's share."""
    from shardwise.analyses import memory_validation
    from shardwise.engines.training import training_memory

    for name in ("torchtitan", "torchtitan-compile"):
        assert presets.framework(name)["expandable_segments"] is True
    assert "expandable_segments" not in presets.framework("megatron-core")
    rows = [r for r in memory_validation.raw_rows() if "torchtitan" in r["framework"]]
    early = [r for r in rows if "#129721" in r["source"]]
    later = [r for r in rows if "#929" in r["source"]]
    assert len(early) == 1 and len(later) == 1
    for row, expandable in ((early[0], False), (later[0], True)):
        scn, kind = memory_validation.scenario(row)
        assert kind == "reserved" and bool(scn.plan.expandable_segments) is expandable
        share = float(np.asarray(training_memory(scn).as_dict()["allocator"]))
        assert (share > 0) is not expandable


@pytest.mark.parametrize("kernel", ["eager-bf16", "eager-bf16-freed"])
@pytest.mark.parametrize("tool", ["megatron", "deepspeed", "torchtitan"])
def test_emitters_whose_loss_cannot_run_an_eager_bf16_loss_refuse_it(cli, tool, kernel):
    args = ["plan", "--model", "llama3-8b", "--system", "dgx-h100", "--num-gpus", "8", "--global-batch", "16"]
    framework = {"megatron": "megatron-core", "deepspeed": "megatron-deepspeed", "torchtitan": "torchtitan"}[tool]
    code, _, err = cli([*args, "--framework", framework, "--loss-kernel", kernel, "--top", "1", "--emit", tool])
    assert code == 2 and f"--loss-kernel {kernel}" in err and "Traceback" not in err


def test_deepspeeds_refusal_of_what_megatron_refuses_too_says_what_to_plan(cli):
    args = ["plan", "--model", "llama3-8b", "--system", "dgx-h100", "--num-gpus", "8", "--global-batch", "16"]
    code, _, err = cli([*args, "--framework", "megatron-deepspeed", "--loss-kernel", "eager-bf16", "--top", "1",
                        "--emit", "deepspeed"])  # fmt: skip
    assert code == 2 and "plan without --loss-kernel" in err and "use --emit megatron" not in err
