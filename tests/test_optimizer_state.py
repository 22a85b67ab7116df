"""What published runs' recipes keep that the default count over-counts: the optimizer's state
(`Plan.optimizer_state`), the gradients of NVIDIA's performance-mode recipes, and what NeMo
Automodel's activation checkpointing keeps a layer (`StackMemory.full_recompute_kept_hidden`)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shardwise.errors import SpecError
from shardwise.physics import memory as mem
from shardwise.specs import Plan

GIB = 2**30


def _rows(**match: str) -> list[dict[str, str]]:
    from shardwise.analyses import public_validation

    return [
        r
        for r in public_validation.raw_rows()
        if not public_validation.skip_reason(r) and all(r.get(k) == v for k, v in match.items())
    ]


def _memory(model: str, **plan: object) -> dict[str, float]:
    from shardwise import presets
    from shardwise.engines.training import training_memory
    from shardwise.specs import Scenario

    p = Plan(dp=8, global_batch=8, **plan)  # type: ignore[arg-type]
    scn = Scenario(presets.model(model), presets.system("dgx-h100"), p)
    return {k: float(np.asarray(v)) for k, v in training_memory(scn).as_dict().items()}


def test_the_optimizer_states_bytes_per_parameter():
    assert mem.optimizer_bytes_per_param() == 12.0
    assert mem.optimizer_bytes_per_param("fp32-remainders") == 10.0  # int16 remainder + two fp32 moments
    assert mem.optimizer_bytes_per_param("bf16") == 4.0  # two bf16 moments, no master
    # the remainders need bf16 weights: fp16 keeps its fp32 master
    assert mem.optimizer_bytes_per_param("fp32-remainders", "fp16") == 12.0
    assert mem.master_weight_bytes("fp32-remainders") == 2.0 and mem.master_weight_bytes("bf16") == 0.0
    n, dp = 1e9, 8
    assert mem.model_state_bytes(n, dp, 1, "bf16", optimizer_state="fp32-remainders") == (2e9, 4e9, 10e9 / dp)
    assert mem.model_state_bytes(n, dp, 1, "bf16", True, "bf16") == (2e9, 2e9, 4e9 / dp)


def test_an_unknown_optimizer_state_is_refused():
    with pytest.raises(
        SpecError, match="optimizer_state 'adam8bit' is not allowed; choose fp32, fp32-remainders, bf16"
    ):
        Plan(optimizer_state="adam8bit")


def test_the_optimizer_state_changes_the_optimizer_row_alone():
    base = _memory("llama3-8b", zero_stage=1)
    low = _memory("llama3-8b", zero_stage=1, optimizer_state="fp32-remainders")
    assert low["optimizer"] == pytest.approx(base["optimizer"] * 10 / 12)
    for key in ("weights", "gradients", "activations", "buffers", "allocator", "reserved"):
        assert low[key] == pytest.approx(base[key]), key


def test_fsdps_fp32_shards_keep_their_fp32_state_under_the_remainders():
    """Under ZeRO-3 a torchtitan / FSDP parameter is the fp32 master itself: the remainders need
    bf16 weights beside an fp32 optimizer, so the model state does not change."""
    own = _memory("llama3-8b", framework="torchtitan", zero_stage=3)
    other = _memory("llama3-8b", framework="torchtitan", zero_stage=3, optimizer_state="fp32-remainders")
    for key in ("weights", "gradients", "optimizer"):
        assert other[key] == pytest.approx(own[key]), key


def test_fsdps_pure_bf16_shards_are_the_bf16_parameters():
    """A bf16 optimizer state on an FSDP stack is pure bf16 training: the shard is the bf16
    parameter (its own master), its gradient cast back to bf16, the moments bf16: 2 + 2 + 4 bytes
    a parameter against the fp32 shard's 4 + 4 + 8."""
    own = _memory("llama3-8b", framework="torchtitan", zero_stage=3)
    pure = _memory("llama3-8b", framework="torchtitan", zero_stage=3, optimizer_state="bf16")
    for key in ("weights", "gradients", "optimizer"):
        assert pure[key] == pytest.approx(own[key] / 2), key
    # the same on ZeRO-1, where the stack keeps no fp32 shard: only the optimizer state changes
    assert _memory("llama3-8b", framework="torchtitan", zero_stage=1, optimizer_state="bf16")["weights"] == (
        pytest.approx(_memory("llama3-8b", framework="torchtitan", zero_stage=1)["weights"])
    )


def test_predict_takes_the_optimizer_state_flag(cli):
    args = ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--num-gpus", "8", "--global-batch", "8"]
    code, out, err = cli([*args, "--json"])
    assert code == 0, err
    code, out2, err = cli([*args, "--optimizer-state", "bf16", "--json"])
    assert code == 0, err
    assert json.loads(out) != json.loads(out2)
    code, out, err = cli([*args, "--optimizer-state", "fp8"])
    assert code == 2 and "fp8" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("source", "seen", "precision", "fsdp", "state"),
    [
        # NeMo 1's Nemotron-4 340B recipe: Apex DistributedFusedAdam with dtype bf16
        ("dgxc-benchmarking nemotron/README_340b.md", "first seen 35a9aecc8d (2025-05-21)", "bf16", "0", "bf16"),
        ("dgxc-benchmarking nemotron/README_340b.md", "first seen e6afea3aea (2025-05-21)", "bf16", "0", "bf16"),
        # FP8 sets fp8_params, which stores the params beside the bf16 moments: not modelled, the default
        ("dgxc-benchmarking nemotron/README_340b.md", "first seen 35a9aecc8d (2025-05-21)", "fp8", "0", ""),
        # NeMo 1's other distributed_fused_adam recipes: store_param_remainders
        (
            "dgxc-benchmarking llama3.1/README_405b.md",
            "first seen 8f5cbb3799 (2025-05-21)",
            "bf16",
            "0",
            "fp32-remainders",
        ),
        # ... not 8f5cbb3799's Nemotron-4 15B (mcore_distributed_optim)
        ("dgxc-benchmarking nemotron/README_15b.md", "first seen 8f5cbb3799 (2025-05-21)", "bf16", "0", ""),
        # NeMo 2 in the 25.04 containers: the precision-aware optimizer for BF16
        ("dgxc-benchmarking llama3.1/README.md", "first seen 68eaf7e117 (2025-06-10)", "bf16", "0", "fp32-remainders"),
        ("dgxc-benchmarking llama3.1/README.md", "first seen 68eaf7e117 (2025-06-10)", "fp8", "0", ""),
        ("dgxc-benchmarking llama3.1/README.md", "first seen 741c886025 (2025-05-21)", "bf16", "0", ""),
        # Megatron-Bridge: BF16 without Megatron-FSDP, which turns the precision-aware optimizer off
        ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md", "", "bf16", "0", "fp32-remainders"),
        ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md", "", "bf16", "64", ""),
        ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md", "", "fp8", "0", ""),
    ],
)
def test_each_recipe_sets_its_optimizer_state(source, seen, precision, fsdp, state):
    from shardwise.analyses import public_memory_recipes

    row = {"source": f"GitHub NVIDIA/{source}" if "dgxc" in source else f"GitHub {source}"}
    row.update({"commit_or_version": seen, "precision": precision, "fsdp": fsdp, "model": "", "system": ""})
    assert public_memory_recipes.optimizer_state(row) == state


def test_dgxc_benchmarkings_25_04_runs_use_tes_loss_and_their_25_02_runs_do_not():
    from shardwise.analyses import public_memory_recipes

    def row(seen: str, readme: str = "llama3.1/README.md") -> dict[str, str]:
        return {"source": f"GitHub NVIDIA/dgxc-benchmarking {readme}", "commit_or_version": f"first seen {seen} (x)"}

    assert public_memory_recipes.loss_kernel(row("68eaf7e117")) == "te"
    assert public_memory_recipes.loss_kernel(row("60d6fd33ba", "nemotronh/README.md")) == "te"
    assert public_memory_recipes.loss_kernel(row("741c886025")) == ""


def test_a_layer_checkpointed_in_two_parts_keeps_four_hidden_widths():
    from shardwise import presets
    from shardwise.specs import Recompute

    model = presets.model("llama3-8b")
    whole = mem.layer_activation_bytes(model, 1, 2, True, Recompute.FULL, True, 2.0)
    assert whole == pytest.approx(2.0 * model.seq_len * model.hidden / 2)
    parts = mem.layer_activation_bytes(model, 1, 2, True, Recompute.FULL, True, 2.0, full_kept_hidden=4.0)
    assert parts == pytest.approx(4 * whole)
    assert mem.stack_memory("nemo-automodel").full_recompute_kept_hidden == 4.0
    assert mem.stack_memory("megatron-core").full_recompute_kept_hidden == 1.0


def test_automodels_70b_and_32b_recipes_recompute_and_its_one_gpu_lora_ones_do_not():
    from shardwise.analyses import public_validation

    source = "GitHub NVIDIA-NeMo/Automodel docs/performance-summary"
    rows = [r for r in _rows() if r["source"].startswith(source)]
    big = [r for r in rows if r["model"] in ("llama3-70b", "qwen2.5-32b")]
    small = [r for r in rows if r["model"] in ("llama3-8b", "qwen2.5-7b")]
    assert len(big) >= 10 and len(small) >= 2
    assert all(public_validation.scenario_for(r).plan.recompute == 2 for r in big)
    assert not any(public_validation.scenario_for(r).plan.recompute == 2 for r in small)


def test_automodels_moe_benchmark_configs_checkpoint_every_block_but_gpt_oss_120bs():
    """examples/benchmark/configs/*_te_deepep.yaml set activation_checkpointing at the rows' commits
    (GPT-OSS 20B's when its figure was first published); gptoss_120b_te_deepep.yaml never does."""
    from shardwise.analyses import public_memory_recipes, public_moe, public_validation

    source = "GitHub NVIDIA-NeMo/Automodel docs/performance-summary"
    rows = {
        r["model"]: r
        for r in map(public_moe.resolved, public_validation.raw_rows())
        if r["source"].startswith(source) and r["moe"] == "yes"
    }
    for model in ("deepseek-v3", "kimi-k2", "qwen3-30b-a3b", "gpt-oss-20b", "nemotron-3-nano-30b-a3b"):
        assert public_memory_recipes.full_recompute(rows[model]), model
        assert public_validation.scenario_for(rows[model]).plan.recompute == 2, model
    assert not public_memory_recipes.full_recompute(rows["gpt-oss-120b"])
    # their own model classes train in pure bf16 under torch.optim.Adam, GPT-OSS 120B's too
    for model in ("deepseek-v3", "kimi-k2", "qwen3-30b-a3b", "gpt-oss-20b", "gpt-oss-120b", "nemotron-3-nano-30b-a3b"):
        assert public_validation.scenario_for(rows[model]).plan.optimizer_state == "bf16", model
    dense = [r for r in _rows() if r["source"].startswith(source) and r["model"] == "llama3-70b"]
    assert dense and all(public_memory_recipes.optimizer_state(r) == "" for r in dense)


def test_automodels_moe_blocks_are_checkpointed_whole(monkeypatch):
    """moe/parallelizer.py `apply_ac` wraps each whole decoder block: an MoE model keeps the block's
    input (1 hidden width), a dense model of the same stack its four."""
    import dataclasses

    from shardwise import presets
    from shardwise.physics import memory_stacks

    automodel = mem.stack_memory("nemo-automodel")
    qwen = presets.model("qwen3-30b-a3b")
    assert automodel.kept_hidden(qwen) == 1.0
    assert automodel.kept_hidden(presets.model("llama3-70b")) == 4.0
    assert mem.stack_memory("megatron-core").kept_hidden(qwen) == 1.0
    kw = dict(framework="nemo-automodel", zero_stage=3, recompute="full", ep=8)
    whole = _memory("qwen3-30b-a3b", **kw)["activations"]
    as_dense = dataclasses.replace(automodel, moe_full_recompute_kept_hidden=None)
    monkeypatch.setitem(memory_stacks.STACKS, "nemo-automodel", as_dense)
    apart = _memory("qwen3-30b-a3b", **kw)["activations"]
    assert apart - whole == pytest.approx(3 * 2.0 * qwen.seq_len * qwen.hidden * qwen.layers)


def test_no_dgxc_benchmarking_or_automodel_run_is_called_out_of_memory():
    """They ran: each of their dense rows fits the GPU now (30 published runs were called out of
    memory before the recipes' optimizer state, gradients, loss and checkpointing were read; 18 of
    them dgxc-benchmarking's and NeMo Automodel's). Their mixture-of-experts rows, counted since the
    check fills in their presets, are not all there yet (1 of dgxc's 53; 5 of Automodel's 8, 8 before
    its benchmark configs' activation checkpointing was read)."""
    from shardwise.analyses import memory_published

    fits = {f.source: f for f in memory_published.published_runs_fit()}
    assert fits["NVIDIA dgxc-benchmarking"].runs > 300
    assert fits["NVIDIA dgxc-benchmarking"].moe_runs > 0
    for source in ("NVIDIA dgxc-benchmarking", "NVIDIA-NeMo Automodel"):
        assert fits[source].called_oom - fits[source].moe_called_oom == 0
    oom = set(fits["NVIDIA-NeMo Automodel"].oom_ids)
    assert not oom & {"PUB-0848", "PUB-0849", "PUB-0852"}  # DeepSeek-V3 and GPT-OSS 20B, checkpointed


def test_the_memory_evidence_recall_holds():
    """The out-of-memory runs of the evidence are still called out of memory (3 of 5)."""
    from shardwise.analyses import memory_validation

    summary = memory_validation.validate_memory()
    assert sum(not r.fits for r in summary.oom) >= 3
    assert summary.false_oom_rate == 0.0


def test_bf16_moments_beside_the_master_or_its_remainders():
    """Megatron-Core's precision-aware optimizer with bf16 exp_avg and exp_avg_sq: 4 + 4 bytes with
    Megatron-Core's fp32 master (FP8 current scaling, MXFP8), 2 + 4 with TE's remainders; fp16 keeps
    its fp32 master."""
    assert mem.optimizer_bytes_per_param("fp32-bf16-moments") == 8.0
    assert mem.optimizer_bytes_per_param("fp32-remainders-bf16-moments") == 6.0
    assert mem.optimizer_bytes_per_param("fp32-remainders-bf16-moments", "fp16") == 8.0
    base = _memory("llama3-8b", zero_stage=1)
    for state, share in (("fp32-bf16-moments", 8 / 12), ("fp32-remainders-bf16-moments", 6 / 12)):
        assert _memory("llama3-8b", zero_stage=1, optimizer_state=state)["optimizer"] == pytest.approx(
            base["optimizer"] * share
        )


def test_bridges_deepseek_v3_rows_keep_bf16_moments():
    """recipes/deepseek/deepseek_v3.py (v0.2.0 - v0.5.1): exp_avg and exp_avg_sq in bf16 under the
    precision-aware optimizer; MXFP8 rows keep Megatron-Core's fp32 master, the BF16 ones TE's
    remainders; the release that dropped the file (26.08) is not read."""
    from shardwise.analyses import public_memory_recipes, public_moe, public_validation

    rows = [
        r
        for r in map(public_moe.resolved, public_validation.raw_rows())
        if r["source"].startswith(public_memory_recipes.MEGATRON_BRIDGE) and r["model"] == "deepseek-v3"
    ]
    states = {(r["precision"], r["framework_version"]): public_memory_recipes.optimizer_state(r) for r in rows}
    assert states[("mxfp8", "26.04.01")] == "fp32-bf16-moments"
    assert states[("bf16", "25.11")] == "fp32-remainders-bf16-moments"
    assert states[("mxfp8", "26.08")] == ""


def test_emit_megatron_writes_bf16_moments():
    from shardwise import presets
    from shardwise.emit import emit
    from shardwise.specs import Scenario

    plan = Plan(dp=8, global_batch=8, zero_stage=1, optimizer_state="fp32-bf16-moments")
    launch = emit(Scenario(presets.model("llama3-8b"), presets.system("dgx-h100"), plan), "megatron")
    args = [a for group in launch.args for a in group]
    assert "--use-precision-aware-optimizer" in args
    assert args[args.index("--exp-avg-dtype") + 1] == "bf16" and args[args.index("--exp-avg-sq-dtype") + 1] == "bf16"
