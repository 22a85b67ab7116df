"""The numeric recipes of NVIDIA's, IBM's and torchao's published runs: which reduced their gradients in
bf16 and which FP8 scaling each ran (`Plan.grad_reduce_bf16`, `Plan.fp8_recipe`), each read in the
recipe that produced the row. Nothing here is fitted."""

from __future__ import annotations

from shardwise.analyses.public_row import PRESETS, notes

# Published runs of NVIDIA's recipes that keep the gradient buffers and reduce them in bf16
# (`Plan.grad_reduce_bf16`), each read in the recipe that produced the row: (text in the row's
# source, the commit or container its recipe was read at (the first commit in `commit_or_version`,
# or `framework_version`; empty: any), the precisions it holds for (empty: bf16 and FP8 alike)).
# Where a source's recipe is not known at the row's version (dgxc-benchmarking's deepseek_v3,
# llama4, grok1/README.md; NeMo's long-sequence tables), nothing is set: the model keeps fp32
# gradients. NeMo's 24.07 performance summary: its launcher's grad_sync_dtype, per model
# (`public_nemo1_launcher`).
BF16_GRADIENT_RECIPES = (
    # Megatron-Bridge scripts/performance: `mixed_precision.grad_reduce_in_fp32 = False` and
    # `ddp.grad_reduce_in_fp32 = False` (configs/llama/llama31_llm_pretrain.py
    # set_llama31_common_configs at v0.4.0; its configs since 2025-09, perf_recipes/_common.py now)
    ("GitHub NVIDIA-NeMo/Megatron-Bridge docs/performance-summary", "", ()),
    # dgxc-benchmarking's NeMo 1 launcher YAMLs (llama3.1/llama3.1_{8b,70b,405b}.yaml,
    # nemotron/nemotron4-{15b,340b}-synth.yaml, nemo_megatron/gpt3_175b_hydra.yaml,
    # grok1/grok1_314b.yaml, read at the rows' first and last commits): `optim.grad_sync_dtype: bf16`,
    # the gradient buffer of Apex's distributed_fused_adam in that dtype, and for
    # mcore_distributed_optim (grok1) Megatron-Core's grad_reduce_in_fp32 = (grad_sync_dtype ==
    # "fp32") (NeMo megatron_gpt_model.py, v2.0.0 line 553)
    *(
        (f"GitHub NVIDIA/dgxc-benchmarking {readme}", commit, ())
        for readme in ("llama3.1/README_8b.md", "llama3.1/README_70b.md", "llama3.1/README_405b.md")
        for commit in ("35a9aecc8d", "8f5cbb3799", "e6afea3aea")
    ),
    ("GitHub NVIDIA/dgxc-benchmarking nemotron/README_340b.md", "35a9aecc8d", ()),
    ("GitHub NVIDIA/dgxc-benchmarking nemotron/README_340b.md", "e6afea3aea", ()),
    # (nemotron4-15b-synth.yaml at 8f5cbb3799 .. 1b9bb6b3cf is mcore_distributed_optim without a
    # grad_sync_dtype: fp32, so the rows first seen there and at e6afea3aea .. 1b9bb6b3cf are left)
    ("GitHub NVIDIA/dgxc-benchmarking nemotron/README_15b.md", "35a9aecc8d", ()),
    ("GitHub NVIDIA/dgxc-benchmarking nemotron/README_15b.md", "e6afea3aea,last seen e6afea3aea", ()),
    *(
        ("GitHub NVIDIA/dgxc-benchmarking nemo_megatron/README_175b.md", commit, ())
        for commit in ("35a9aecc8d", "8f5cbb3799", "e6afea3aea", "741c886025")
    ),
    *(
        ("GitHub NVIDIA/dgxc-benchmarking grok1/README_314b.md", commit, ())
        for commit in ("35a9aecc8d", "8f5cbb3799", "e6afea3aea")
    ),
    # dgxc-benchmarking's NeMo 2 scripts, BF16 and FP8 alike: llama3.1/pretrain_llama31.py at
    # 741c886025 and 85380ffe02 (NeMo 25.02.01) and NeMo's scripts/performance/llm/
    # pretrain_nemotron4_{15b,340b}.py (the nemotron/gsw_nemo.patch of those commits finds them in the
    # 25.02.01 container, blobs b01b5cfd0 and a6cc46b5e, first at NeMo d26ad52fa4), and from 68eaf7e117
    # (NeMo 25.04.01; setup.sh pins NeMo 7a8f1cc7bc, b4148d2169, 6f2c6fdaff) NeMo's
    # pretrain_llama31_405b.py and pretrain_nemotron4_*.py, build `pretrain_recipe(performance_mode=True)`,
    # whose pretrain_performance_optimizations sets `recipe.trainer.plugins.grad_reduce_in_fp32 = False`
    # (nemo/collections/llm/recipes/llama3_8b.py, llama3_70b.py, llama31_405b.py, nemotron4_15b.py,
    # nemotron4_340b.py from v2.2.0 and at those commits), and the plugin's dtype config overrides the
    # DDP config's grad_reduce_in_fp32=True (nemo/lightning/pytorch/strategies/megatron_strategy.py
    # `connect`: update_config_with_dtype_overrides); FP8 sets it again ("plugins =
    # bf16_with_fp8_mixed(); plugins.grad_reduce_in_fp32 = False", utils.py set_primary_perf_configs)
    *(
        (f"GitHub NVIDIA/dgxc-benchmarking {readme}", commit, ())
        for readme in ("llama3.1/README.md", "nemotron/README.md")
        for commit in ("741c886025", "85380ffe02", "68eaf7e117", "60d6fd33ba")
    ),
    # dgxc-benchmarking nemotronh/ (from 68eaf7e117, NeMo 7a8f1cc7bc): pretrain_nemotronh_56b.py builds
    # the recipe without performance_mode, but set_primary_perf_configs's FP8 branch sets
    # grad_reduce_in_fp32 = False (scripts/performance/utils.py line 437); the table is FP8 only
    ("GitHub NVIDIA/dgxc-benchmarking nemotronh/README.md", "68eaf7e117", ("fp8",)),
    # dgxc-benchmarking ft_llama3/llama3_finetune.py at 741c886025 and 85380ffe02: grad_reduce_in_fp32
    # = False after the precision branch, for BF16 and FP8
    ("GitHub NVIDIA/dgxc-benchmarking ft_llama3/", "741c886025", ()),
    # NeMo's performance pages: 25.07 ran NeMo 2.4's scripts/performance (helpers.py
    # set_precision_configs: grad_reduce_in_fp32 = False for every dtype); 25.04 NeMo 2.3's
    # (utils.py set_primary_perf_configs: in the FP8 branch only)
    ("docs.nvidia.com/nemo-framework/user-guide/latest/performance/performance", "25.07", ()),
    ("docs.nvidia.com/nemo-framework/user-guide/latest/performance/performance", "25.04", ("fp8",)),
    # Megatron-Bridge's activation-recompute study (skills/nemo-mbridge-perf-activation-recompute/
    # SKILL.md, 067f987df; each row changing only recompute_modules): Nemotron 3 Nano ran "the native
    # 16-H100 BF16 performance recipe", perf_recipes/nemotronh/h100/nemotronh.py
    # nemotron_3_nano_pretrain_16gpu_h100_bf16_config, which calls _benchmark_common: grad_reduce_in_fp32
    # = False (perf_recipes/_common.py); Moonlight 16B "the Moonlight 16B BF16 pretraining recipe" at
    # Bridge 600d069b8, recipes/moonlight/h100/moonlight_16b.py moonlight_16b_pretrain_8gpu_h100_bf16_config:
    # mixed_precision and ddp grad_reduce_in_fp32 = False. Its FP8 rows, Llama 3 70B SFT on 32 H100 from
    # Bridge PR #3107, ran the performance harness's llama3_70b_sft_config_h100
    # (scripts/performance/configs/llama/llama3_llm_finetune.py, read at Bridge 0b928cd3), whose
    # gradients are bf16 too (the same runs' memory rows in public_memory_evidence.csv say so)
    ("GitHub NVIDIA-NeMo/Megatron-Bridge skills/nemo-mbridge-perf-activation-recompute/", "", ()),
    # IBM fms-fsdp (PyTorch FSDP1): config/training.py mixed_precision = True, so utils/train_utils.py
    # get_policies takes policies/mixed_precision.py bfSixteen, MixedPrecision(reduce_dtype=torch.bfloat16),
    # the same at each commit its README's rows were read at (0d319983, 4ffb9bdf, ed74fd5d)
    ("GitHub foundation-model-stack/fms-fsdp", "", ("bf16",)),
)


def bf16_gradients(row: dict[str, str]) -> bool:
    """Whether a public run's recipe reduced its gradients in bf16 (`BF16_GRADIENT_RECIPES`)."""
    if row.get("precision") == "fp16":
        return False
    return any(recipe_matches(row, *fact) for fact in BF16_GRADIENT_RECIPES)


def recipe_matches(row: dict[str, str], source: str, version: str, precisions: tuple[str, ...]) -> bool:
    """Whether a row is one a recipe fact covers: its source starts with `source`, its version is
    `version` (the first commit it was seen at, and the last where a comma adds one, or its
    `framework_version`) and its precision one of `precisions` (empty: any)."""
    if not row["source"].startswith(source) or (precisions and row.get("precision") not in precisions):
        return False
    if not version:
        return True
    first, _, last = version.partition(",")
    seen = row.get("commit_or_version", "")
    if row.get("framework_version") == first:
        return True
    return seen.startswith(f"first seen {first}") and (not last or last in seen)


# torchao.float8 recipes a row's notes name (`fp8_scaling=`), as `Plan.fp8_recipe` names them
TORCHAO_SCALINGS = ("tensorwise", "rowwise", "rowwise_with_gw_hp")


def fp8_recipe(row: dict[str, str]) -> str:
    """The FP8 recipe a row states (`Plan.fp8_recipe`): its torchao `fp8_scaling=` (tensorwise with
    `fp8_allgather=on` is FSDP2's FP8 all-gather), torchao's default (tensorwise) where it names
    `fp8_lib=torchao` alone; empty where it states neither (the framework's)."""
    if row.get("precision") not in ("fp8", "mxfp8"):
        return ""
    n = notes(row)
    scaling = n.get("fp8_scaling", "")
    if scaling not in TORCHAO_SCALINGS:
        scaling = "tensorwise" if n.get("fp8_lib") == "torchao" else ""
    if scaling == "tensorwise" and n.get("fp8_allgather") == "on":
        return "tensorwise_fp8_all_gather"
    if not scaling and te_current_scaling(row):
        return "te_current"
    return scaling


# Public FP8 runs of Transformer Engine under per-tensor current scaling (`Plan.fp8_recipe`
# "te_current"): rows whose precision says so ("FP8-CS", "current scaling"), and Megatron-Bridge's
# performance summaries from 25.11 on, whose scripts/performance offer no other per-tensor FP8 recipe
# (argument_parser.py `--compute_dtype` choices bf16, fp8_cs, fp8_mx, fp8_sc since 2025-11-21, and
# `--fp8_recipe` cs by default from 2025-11-11; utils/precision.py `fp8_cs`:
# bf16_with_fp8_current_scaling_mixed with first_last_layers_bf16 False). Before that (25.09) the
# default was ds, delayed scaling; NeMo 2's scripts/performance default to ds as well
# (argument_parser.py `--fp8_recipe` default "ds", utils.py set_primary_perf_configs: bf16_with_fp8_mixed),
# which dgxc-benchmarking's NeMo 2 launchers keep (nemotronh/launch.sh passes no --fp8_recipe, so its
# Nemotron-H 56B runs are delayed-scaling FP8 in every layer, whatever the model recipe's plugin).
TE_CURRENT_SCALING_RECIPES = tuple(
    ("GitHub NVIDIA-NeMo/Megatron-Bridge docs/performance-summary", version, ("fp8",))
    for version in ("25.11", "26.02", "26.02.01", "26.04", "26.04.01", "26.06", "26.06.01", "26.08")
)


def te_current_scaling(row: dict[str, str]) -> bool:
    """Whether a public FP8 run's recipe is Transformer Engine's current scaling
    (`TE_CURRENT_SCALING_RECIPES`)."""
    if row.get("precision") != "fp8" or PRESETS.get(row.get("framework", "")) != "megatron-core":
        return False
    raw = row.get("precision_raw", "").lower()
    if "current scaling" in raw or raw == "fp8-cs":
        return True
    return any(recipe_matches(row, *fact) for fact in TE_CURRENT_SCALING_RECIPES)
