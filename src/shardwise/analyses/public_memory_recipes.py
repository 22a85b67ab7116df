"""What the recipes of published runs set about memory beyond the layout: the loss kernel
(`Plan.loss_kernel`), PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (`Plan.expandable_segments`)
and the optimizer's state (`Plan.optimizer_state`), which change memory alone, the layers whose
activations are offloaded to the host (`offloaded_layers`) and the activation checkpointing a recipe
turns on where the row's own columns leave it out (`full_recompute`, which costs the recomputation's
time too), each read in the launch script or recipe that produced the rows, at the rows' versions.
Nothing here is fitted.
"""

from __future__ import annotations

from dataclasses import dataclass

MEGATRON_BRIDGE = "GitHub NVIDIA-NeMo/Megatron-Bridge docs/performance-summary"
NEMO_DOCS = "docs.nvidia.com/nemo-framework/user-guide/latest/performance/performance"
DGXC = "GitHub NVIDIA/dgxc-benchmarking "
SKILL_STUDY = "GitHub NVIDIA-NeMo/Megatron-Bridge skills/nemo-mbridge-perf-activation-recompute/"


@dataclass(frozen=True)
class RecipeFact:
    """The rows a recipe reading covers: the source starts with `source`, the model name with
    `model` (empty: any), the system is one of `systems` (empty: any) and none of `skip_systems`,
    the precision one of `precisions` (empty: any), `framework_version` is `version` (empty: any),
    the row was first seen at one of the commits `first_seen` (empty: any; dgxc-benchmarking's rows
    carry "first seen <commit>");
    `with_fsdp` False leaves out rows with Megatron-FSDP (`fsdp` > 0)."""

    source: str
    model: str = ""
    systems: tuple[str, ...] = ()
    precisions: tuple[str, ...] = ()
    version: str = ""
    skip_systems: tuple[str, ...] = ()
    with_fsdp: bool = True
    first_seen: tuple[str, ...] = ()

    def covers(self, row: dict[str, str]) -> bool:
        system, fsdp = row.get("system", ""), (row.get("fsdp") or "0") not in ("", "0")
        return (
            row["source"].startswith(self.source)
            and (row.get("model") or "").startswith(self.model)
            and (not self.systems or system in self.systems)
            and system not in self.skip_systems
            and (not self.precisions or row.get("precision") in self.precisions)
            and (not self.version or row.get("framework_version") == self.version)
            and (self.with_fsdp or not fsdp)
            and (
                not self.first_seen
                or any(row.get("commit_or_version", "").startswith(f"first seen {c}") for c in self.first_seen)
            )
        )


# Runs whose launcher sets expandable segments.
EXPANDABLE_SEGMENT_RECIPES = (
    # Megatron-Bridge, Llama 3.1 405B pretraining on GB200 at FP8 (current scaling, MX):
    # scripts/performance/setup_experiment.py (v0.1.0rc4: `llama31 405b gb200, fp8_recipe cs or mx`, and
    # DeepSeek-V3 BF16 on GB200 without token drop, "OOM if not set": no 25.09 row),
    # perf_plugins.py _set_model_specific_environment_variables (v0.2.0 - v0.4.2; gb300 too from
    # v0.4.0), utils/executors.py PERF_ENV_VARS for every recipe but those with nccl_ub or Llama with
    # Megatron-FSDP (commit 6f24c71f3, v0.5.0 on), the flat recipes' env_vars
    # (src/megatron/bridge/perf_recipes/llama/gb200/llama31.py at 067f987df). Llama 3 70B with
    # Megatron-FSDP does not set it (6f24c71f3 `remove_allocator_env_vars`; nothing before v0.4.2 names
    # it either).
    RecipeFact(MEGATRON_BRIDGE, "llama3-405b", ("gb200-nvl72",), ("fp8", "mxfp8"), with_fsdp=False),
    # The same function names more runs as versions go (containers: 26.02 = v0.3.0, 26.02.01 = v0.3.1,
    # 26.04 = v0.4.0, 26.04.01 = v0.4.2, `public_dense_recipes`): Llama 3.1 405B FP8 / MXFP8 on GB300 and
    # DeepSeek-V3 pretraining on GB200 from v0.4.0 (H100 from v0.3.0, no row there), DeepSeek-V3 on B200,
    # Llama 3.1 405B NVFP4 on GB200 and Llama 3 70B MXFP8 pretraining on GB300 at v0.4.2
    # (perf_plugins.py _set_model_specific_environment_variables at each tag)
    *(
        RecipeFact(MEGATRON_BRIDGE, model, systems, precisions, version, with_fsdp=False)
        for model, systems, precisions, versions in (
            ("llama3-405b", ("gb300-nvl72",), ("fp8", "mxfp8"), ("26.04", "26.04.01")),
            ("deepseek-v3", ("gb200-nvl72",), (), ("26.04", "26.04.01")),
            ("deepseek-v3", ("dgx-b200",), (), ("26.04.01",)),
            ("llama3-405b", ("gb200-nvl72",), ("nvfp4",), ("26.04.01",)),
            ("llama3-70b", ("gb300-nvl72",), ("mxfp8",), ("26.04.01",)),
        )
        for version in versions
    ),
    # v0.5.0 and v0.5.1 (26.06, 26.06.01): utils/executors.py PERF_ENV_VARS sets it for every Slurm run,
    # and perf_plugins.py takes it out again where the workload config sets nccl_ub or runs Llama with
    # Megatron-FSDP (`remove_allocator_env_vars`; the only nccl_ub configs are Llama 3 70B BF16 with FSDP
    # on GB300): every row without FSDP
    *(RecipeFact(MEGATRON_BRIDGE, version=version, with_fsdp=False) for version in ("26.06", "26.06.01")),
    # 26.08 (the summary's commit 4ab94dfad, in v0.6.0): the flat recipes' env_vars
    # (src/megatron/bridge/perf_recipes/{deepseek,qwen,gpt_oss,nemotronh}/gb{200,300}/*.py) set it in every
    # DeepSeek-V3 and Qwen3 MoE recipe, GPT-OSS 120B's and Nemotron 3 Nano's on GB200 and GB300
    *(
        RecipeFact(MEGATRON_BRIDGE, model, ("gb200-nvl72", "gb300-nvl72"), version="26.08")
        for model in ("deepseek-v3", "qwen3-", "gpt-oss-120b", "nemotron-3-nano")
    ),
    # NeMo 2.4 (container 25.07) scripts/performance/executors.py: PERF_ENV_VARS
    # ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True" on every GPU but B200 (commit
    # ab020f6a72 "perf scripts 25.07 refactor"; NeMo 2.3 / 25.04 has none)
    RecipeFact(NEMO_DOCS, version="25.07", skip_systems=("dgx-b200",)),
    # Megatron-Bridge's activation-recompute study (skills/nemo-mbridge-perf-activation-recompute/
    # SKILL.md at 067f987df): Nemotron 3 Nano ran "the native 16-H100 BF16 performance recipe", whose
    # env_vars set it (perf_recipes/nemotronh/h100/nemotronh.py nemotron_3_nano_pretrain_16gpu_h100_bf16_config),
    # Moonlight 16B its BF16 pretraining recipe at Bridge 600d069b8, whose env_vars are
    # COMMON_RECIPE_ENV_VARS (recipes/moonlight/h100/moonlight_16b.py, recipes/utils/environment_utils.py)
    RecipeFact(SKILL_STUDY, precisions=("bf16",)),
)

# Runs whose recipe computes the loss with Transformer Engine's parallel_cross_entropy
# (Megatron-Core cross_entropy_loss_fusion, on by default in Megatron-Bridge's GPTModelProvider and
# NeMo 2's GPTConfig, with cross_entropy_fusion_impl="te").
TE_LOSS_RECIPES = (
    # Megatron-Bridge's performance scripts: configs/llama3/llama3_{8b,70b}_llm_pretrain.yaml and
    # llama31/llama31_405b_llm_pretrain.yaml (v0.1.0rc4), utils/helpers.py set_common_perf_overrides
    # (v0.2.0) and utils/overrides.py (v0.3.0 - v0.6.0) for every recipe, perf_recipes/_common.py
    # _benchmark_common (default "te", which llama/common.py _llama_benchmark_common keeps; 067f987df)
    RecipeFact(MEGATRON_BRIDGE, "llama3"),
    # NeMo 2.4 (25.07) scripts/performance/helpers.py set_perf_optimization_configs, every recipe
    # (commit ab020f6a72; NeMo 2.3's scripts set it for DeepSeek V3 and Llama 4 alone)
    RecipeFact(NEMO_DOCS, version="25.07"),
    # dgxc-benchmarking's NeMo 2 runs in the 25.04 containers (llama3.1/, nemotron/, nemotronh/ from
    # 68eaf7e117: setup.sh pins NeMo 7a8f1cc7bc, b4148d2169, 6f2c6fdaff): scripts/performance/utils.py
    # set_primary_perf_configs sets `recipe.model.config.cross_entropy_fusion_impl = "te"` for every
    # recipe (line 374), cross_entropy_loss_fusion being on in GPTConfig, NemotronConfig and SSMConfig
    *(
        RecipeFact(DGXC + readme, first_seen=("68eaf7e117", "60d6fd33ba"))
        for readme in ("llama3.1/README.md", "nemotron/README.md", "nemotronh/README.md")
    ),
)


# NeMo 24.07's performance summary (NeMo 1 launcher): its optimizer, gradient dtype and the rest of its
# launcher configuration are `public_nemo1_launcher`'s.

# Runs whose optimizer keeps less than an fp32 master and fp32 moments (`Plan.optimizer_state`):
# (state, the rows). Megatron-FSDP rows are left out: Megatron-Bridge turns the precision-aware
# optimizer off with it (scripts/performance/utils/helpers.py set_megatron_fsdp_overrides, v0.2.0).
OPTIMIZER_STATE_RECIPES = (
    # dgxc-benchmarking's NeMo 1 launcher, Nemotron-4 340B (nemotron/nemotron4-340b-synth.yaml at
    # 35a9aecc8d and e6afea3aea: optim distributed_fused_adam, `dtype: bf16`): NeMo's
    # megatron_base_model.py setup_optimization (v2.0.0) passes dtype bf16 to Apex's DistributedFusedAdam
    # and, the optimizer's dtype being the model's, store_params False: bf16 moments and no master. The
    # BF16 rows only: configure.sh sets model.fp8_params for FP8, which stores the (bf16) params too.
    (
        "bf16",
        RecipeFact(DGXC + "nemotron/README_340b.md", precisions=("bf16",), first_seen=("35a9aecc8d", "e6afea3aea")),
    ),
    # the same launcher's other distributed_fused_adam recipes (llama3.1/llama3.1_{8b,70b,405b}.yaml,
    # nemotron/nemotron4-15b-synth.yaml; not 8f5cbb3799's nemotron4-15b, mcore_distributed_optim): fp32
    # state with bf16 O2 weights, so store_param_remainders True (setup_optimization); BF16 rows only,
    # as above
    *(
        ("fp32-remainders", RecipeFact(DGXC + readme, precisions=("bf16",), first_seen=commits))
        for readme, commits in (
            ("llama3.1/README_8b.md", ("35a9aecc8d", "8f5cbb3799", "e6afea3aea")),
            ("llama3.1/README_70b.md", ("35a9aecc8d", "8f5cbb3799", "e6afea3aea")),
            ("llama3.1/README_405b.md", ("35a9aecc8d", "8f5cbb3799", "e6afea3aea")),
            ("nemotron/README_15b.md", ("35a9aecc8d", "e6afea3aea")),
        )
    ),
    # dgxc-benchmarking's NeMo 2 runs in the 25.04 containers (llama3.1/ and nemotron/ from 68eaf7e117:
    # setup.sh pins NeMo 7a8f1cc7bc / 6f2c6fdaff / b4148d2169 and Megatron-Core 7094270c6 / 64cb6bd7a,
    # core_r0.12.0): scripts/performance/utils.py set_primary_perf_configs sets
    # `recipe.optim.config.use_precision_aware_optimizer = True` for BF16, whose TE FusedAdam gets
    # store_param_remainders (megatron/core/optimizer/__init__.py, TE >= 2.1)
    *(
        (
            "fp32-remainders",
            RecipeFact(DGXC + readme, precisions=("bf16",), first_seen=("68eaf7e117", "60d6fd33ba"), with_fsdp=False),
        )
        for readme in ("llama3.1/README.md", "nemotron/README.md")
    ),
    # Megatron-Bridge's DeepSeek-V3 recipe (src/megatron/bridge/recipes/deepseek/deepseek_v3.py,
    # v0.2.0 to v0.5.1 = containers 25.11 to 26.06.01; the performance scripts build on it and keep its
    # optimizer): use_precision_aware_optimizer True, main_params_dtype fp32, exp_avg_dtype and
    # exp_avg_sq_dtype bf16. Under MXFP8 Megatron-Core keeps the fp32 master shard itself (8 B); under
    # BF16 TE's FusedAdam keeps it as remainders (6 B) (`physics.memory.OPTIMIZER_STATE_BYTES`).
    # Before the generic BF16 entry below, which it refines.
    *(
        (state, RecipeFact(MEGATRON_BRIDGE, "deepseek-v3", precisions=(precision,), version=version, with_fsdp=False))
        for precision, state, versions in (
            ("mxfp8", "fp32-bf16-moments", ("25.11", "26.02", "26.02.01", "26.04", "26.04.01", "26.06", "26.06.01")),
            ("bf16", "fp32-remainders-bf16-moments", ("25.11",)),
        )
        for version in versions
    ),
    # Megatron-Bridge's recompute study of Moonlight 16B (SKILL.md: "The Moonlight 16B BF16 pretraining
    # recipe ran on 8 H100", Bridge 600d069b8): recipes/moonlight/h100/moonlight_16b.py
    # moonlight_16b_pretrain_8gpu_h100_bf16_config, "precision-aware optimizer with bf16 gradients/
    # moments", main_params_dtype fp32 under BF16: TE's remainders. (Nemotron 3 Nano's perf recipe
    # sets fp32 moments and turns the precision-aware optimizer off, which run_script.py turns back on
    # for BF16 Adam: left at the stack's fp32.)
    ("fp32-remainders-bf16-moments", RecipeFact(SKILL_STUDY, "moonlight-16b", precisions=("bf16",))),
    # Megatron-Bridge's performance scripts: `use_precision_aware_optimizer = True` for BF16
    # (run_script.py v0.1.0rc4, utils/helpers.py v0.2.0, utils/overrides.py v0.3.0 - v0.6.0,
    # run_script.py at 067f987df)
    ("fp32-remainders", RecipeFact(MEGATRON_BRIDGE, precisions=("bf16",), with_fsdp=False)),
    # NeMo 2.4 (25.07) scripts/performance/helpers.py: the same for BF16 (line 208)
    ("fp32-remainders", RecipeFact(NEMO_DOCS, precisions=("bf16",), version="25.07", with_fsdp=False)),
    # NeMo Automodel's mixture-of-experts pre-training rows train in pure bf16: its own model classes
    # build every parameter at the config's torch_dtype (bf16 by default and in these checkpoints) and
    # `initialize_weights` ends with `self.to(dtype)`, dtype bf16 (nemo_automodel/components/models/
    # {deepseek_v3,qwen3_moe,gpt_oss}/model.py at 89e3a9fdd6, 822effa167 and bb0c0bfb08; Kimi K2 runs
    # the DeepSeek-V3 class; nemotron_v3/model.py at cb9765441e), FSDP2 shards those bf16 parameters
    # and the benchmark configs' optimizer is torch.optim.Adam, whose moments take the parameter's
    # dtype (examples/benchmark/configs/*_te_deepep.yaml, examples/llm_benchmark/ by cb9765441e): a
    # bf16 shard, its bf16 gradient, bf16 moments (`Plan.optimizer_state` "bf16")
    *(
        ("bf16", RecipeFact("GitHub NVIDIA-NeMo/Automodel docs/performance-summary", model))
        for model in ("deepseek-v3", "kimi-k2", "qwen3-30b-a3b", "gpt-oss-20b", "gpt-oss-120b", "nemotron-3-nano")
    ),
)


def optimizer_state(row: dict[str, str]) -> str:
    """The optimizer state a public run's recipe keeps (`OPTIMIZER_STATE_RECIPES`), else "" (the stack's)."""
    return next((state for state, fact in OPTIMIZER_STATE_RECIPES if fact.covers(row)), "")


# Runs whose loss is PyTorch's eager cross-entropy on the 16-bit logits, no fp32 cast (`Plan.loss_kernel`
# "eager-bf16", `physics.memory_stacks.EAGER_BF16_LOGIT_BYTES`): Modalities (src/modalities/
# loss_functions.py CLMCrossEntropyLoss at 8a9b6617, the scaling tables' commit, on the bf16 logits of
# its BF_16 FSDP MixedPrecision), and NeMo Automodel's mixture-of-experts benchmark configs, every
# one of which sets `loss_fn: MaskedCrossEntropy` with `fp32_upcast: false` (examples/benchmark/configs/
# *.yaml at 89e3a9fdd6, 822effa167 and bb0c0bfb08; examples/llm_benchmark/ at cb9765441e), on the
# bf16 logits of its pure-bf16 models (`OPTIMIZER_STATE_RECIPES`)
EAGER_BF16_LOSS_RECIPES = (
    RecipeFact("GitHub Modalities/modalities"),
    *(
        RecipeFact("GitHub NVIDIA-NeMo/Automodel docs/performance-summary", model)
        for model in ("deepseek-v3", "kimi-k2", "qwen3-30b-a3b", "gpt-oss-20b", "gpt-oss-120b", "nemotron-3-nano")
    ),
)


def loss_kernel(row: dict[str, str]) -> str:
    """The loss kernel a public run's recipe names (`TE_LOSS_RECIPES`: "te", `EAGER_BF16_LOSS_RECIPES`:
    "eager-bf16"), else "" (the stack's)."""
    if any(fact.covers(row) for fact in TE_LOSS_RECIPES):
        return "te"
    return "eager-bf16" if any(fact.covers(row) for fact in EAGER_BF16_LOSS_RECIPES) else ""


def expandable_segments(row: dict[str, str]) -> bool:
    """Whether a public run's launcher set expandable segments (`EXPANDABLE_SEGMENT_RECIPES`)."""
    return any(fact.covers(row) for fact in EXPANDABLE_SEGMENT_RECIPES)


def plan_settings(row: dict[str, str]) -> dict[str, object]:
    """The Plan keyword arguments the row's recipe sets here (`loss_kernel`, `expandable_segments`,
    `optimizer_state`)."""
    out: dict[str, object] = {}
    if optimizer_state(row):
        out["optimizer_state"] = optimizer_state(row)
    if loss_kernel(row):
        out["loss_kernel"] = loss_kernel(row)
    if expandable_segments(row):
        out["expandable_segments"] = True
    return out


# Published runs whose recipe offloads the activations of some layers to the host (Megatron-Core's
# cpu_offloading_num_layers, priced as `Plan.offload_activation_layers`): (text in the row's source,
# model, system, tp, micro-batch, layers offloaded). All run Megatron-FSDP (the row's `fsdp` > 0).
ACTIVATION_OFFLOAD_RECIPES = (
    # Megatron-Bridge scripts/performance, Llama 3 70B FP8 current scaling at micro-batch 2:
    # configs/llama3/llama3_70b_llm_pretrain.yaml gb200 fp8_cs (v0.1.0rc4, NeMo 25.09: 40 layers),
    # configs/llama3/workload_base_configs.py (v0.2.0) and configs/llama/llama3_workload_base_configs.py
    # LLAMA3_70B_PRETRAIN_CONFIG_{GB300,GB200}_FP8_CS_V1/V2 (v0.3.0 - v0.4.2): 20 on GB300, 40 on GB200
    ("GitHub NVIDIA-NeMo/Megatron-Bridge docs/performance-summary", "llama3-70b", "gb300-nvl72", 1, 2, 20),
    ("GitHub NVIDIA-NeMo/Megatron-Bridge docs/performance-summary", "llama3-70b", "gb200-nvl72", 1, 2, 40),
    # Llama 3.1 405B on GB200 at tp 2 with FSDP: configs/llama31/llama31_405b_llm_pretrain.yaml gb200
    # fp8_ds and fp8_cs (v0.1.0rc4, NeMo 25.09): 95 layers; NeMo 2.4 (25.07)
    # scripts/performance/recommended_model_configs/model_configs_gb200.csv llama31 405b fp8: 95
    ("GitHub NVIDIA-NeMo/Megatron-Bridge docs/performance-summary", "llama3-405b", "gb200-nvl72", 2, 1, 95),
    (
        "docs.nvidia.com/nemo-framework/user-guide/latest/performance/performance",
        "llama3-405b",
        "gb200-nvl72",
        2,
        1,
        95,
    ),
)


def offloaded_layers(row: dict[str, str]) -> int:
    """Layers whose activations the row's recipe offloads to the host (`ACTIVATION_OFFLOAD_RECIPES`), 0 if none."""
    try:
        fsdp, tp, mbs = (int(float(row.get(k) or 0)) for k in ("fsdp", "tp", "mbs"))
    except ValueError:
        return 0
    facts = (f for f in ACTIVATION_OFFLOAD_RECIPES if row["source"].startswith(f[0]) and fsdp > 0)
    return next((f[5] for f in facts if (row.get("model"), row.get("system"), tp, mbs) == f[1:5]), 0)


# Published runs whose recipe checkpoints every layer (recomputation "full"; what a layer then keeps is
# its stack's `StackMemory.full_recompute_kept_hidden`) where the row's `recompute` column is empty.
CHECKPOINTED_RECIPES = (
    # NeMo Automodel's performance summary: the Llama 3 70B and Qwen2.5-32B benchmark configs it names
    # set `distributed.activation_checkpointing: true` (examples/llm_pretrain/
    # custom_llama3_1_70b_pretrain_benchmark_8nodes.yaml, examples/llm_finetune/llama3_3/
    # custom_llama3_3_70b_instruct_peft_benchmark[_2nodes].yaml and qwen/[custom_]qwen2_5_32b_peft_benchmark
    # [_2nodes].yaml at 507bfb7514, 8473ee64c0 and 2013a4dd6e, pipelined and FSDP2 alike;
    # examples/llm_benchmark/ at cb9765441e); the one-GPU Llama 3.1 8B and Qwen2.5-7B LoRA configs do not
    *(
        RecipeFact("GitHub NVIDIA-NeMo/Automodel docs/performance-summary", model)
        for model in ("llama3-70b", "qwen2.5-32b")
    ),
    # its mixture-of-experts pre-training rows: the configs the summary links
    # (examples/benchmark/configs/{deepseek_v3_te_deepep[_1024],kimi_k2_te_deepep,
    # qwen3_moe_30b_te_deepep,nemotron_nano_v3_te_deepep}.yaml) set `parallelizer.activation_checkpointing:
    # true` at every commit the rows span (89e3a9fdd6 to 822effa167; Nemotron V3 Nano bb0c0bfb08 to
    # cb9765441e, examples/llm_benchmark/ by then), which nemo_automodel/components/moe/parallelizer.py
    # `apply_ac` turns into a checkpoint_wrapper round every decoder block. gptoss_20b_te_deepep.yaml set
    # it when its row was first published (89e3a9fdd6, the figure unchanged since) and dropped it at
    # 8df18da35 (2025-11-10): the published run is taken as the first. gptoss_120b_te_deepep.yaml never
    # sets it: not listed.
    *(
        RecipeFact("GitHub NVIDIA-NeMo/Automodel docs/performance-summary", model)
        for model in ("deepseek-v3", "kimi-k2", "qwen3-30b-a3b", "gpt-oss-20b", "nemotron-3-nano")
    ),
)


def full_recompute(row: dict[str, str]) -> bool:
    """Whether a public run's recipe checkpoints every layer (`CHECKPOINTED_RECIPES`)."""
    return any(fact.covers(row) for fact in CHECKPOINTED_RECIPES)
