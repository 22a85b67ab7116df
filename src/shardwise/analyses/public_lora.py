"""What each public LoRA run's recipe ran with, read from the recipe at the version the row cites:
the adapters' rank and targets, whether the data was packed (and the documents' length), and
recomputation where the row leaves it out. `public_runs.request_for` prices a LoRA row
with these; a row of a source not listed keeps Megatron-Bridge's defaults (`physics.lora`).

Per source (the files at the tags named; nothing here was set from the rows' step times):

- NVIDIA dgxc-benchmarking ft_llama3 (README_8b.md / README_70b.md, NeMo container 24.12 =
  NeMo v2.1.0; ft_llama3/llama3_finetune.py calls `finetune_recipe(peft_scheme="lora",
  performance_mode=True)` on `SquadDataModule`): nemo/collections/llm/recipes/llama3_8b.py sets
  `peft.dim = 8`, llama3_70b.py `peft.dim = 16`; `finetune_performance_optimizations` sets
  `peft.target_modules = ['linear_qkv']`; `packed_sequence` defaults to `performance_mode`, so
  SQuAD is packed into `packed_sequence_size = seq_length` = 4096 tokens.
- NVIDIA NeMo performance docs (docs/source/performance/performance_summary.md at 9c5c5e9709,
  NeMo 24.07, NeMo 1): "we use SQuAD-v1.1 dataset, and the inputs are packed to 4096 tokens";
  the 24.07 scripts (NeMo-Framework-Launcher@24.07 examples/peft/llama/h100/*_lora.sh) run
  `peft=llama/sft`, whose launcher_scripts/conf/peft/llama/sft.yaml sets `lora_tuning.adapter_dim: 32`
  and no `target_modules`, whose default is the QKV layer alone (NeMo r2.0.0rc1
  nemo/collections/nlp/parts/peft_config.py, `get_target_modules(default=("attention_qkv",))`).
- NVIDIA-NeMo Megatron-Bridge performance summary, 26.06 container (= Bridge v0.5.0, see
  `public_moe.A2A_OVERLAP`): scripts/performance/configs/llama/llama3_llm_finetune.py builds
  `llama3_70b_peft_config(peft_scheme="lora")` (src/megatron/bridge/recipes/llama/llama3.py:
  `peft_cfg.dim = 16`) and overrides `target_modules = ["linear_qkv"]`; the recipe's dataset is
  packed SQuAD, but scripts/performance/utils/overrides.py replaces it with
  `create_mock_dataset_config` unless `--data squad_packed` is given, and `--data` defaults to
  "mock" (argument_parser.py): the summary does not say which ran, so the launcher's default --
  full 4096-token sequences, not packed -- is priced.
- NVIDIA-NeMo Automodel performance summary (docs/performance-summary.md, "All benchmarks use
  mock data", "full sequences with no padding"): examples/llm_finetune/*_peft_benchmark*.yaml set
  `peft.match_all_linear: true` (adapters on q, k, v, o, gate, up and down: the same four
  layers' shapes, run as seven HF linears) and `dim: 16`; the pipelined ones (pp_size 4,
  `layers_per_stage: 2` at 507bfb7514 and 8473ee64c0) and the FSDP2 ones of Llama 3 70B and
  Qwen2.5-32B (2013a4dd6e) set `activation_checkpointing: true` (every layer's attention and MLP
  recomputed, `public_memory_recipes.CHECKPOINTED_RECIPES`); the one-GPU Llama 3.1 8B and Qwen2.5-7B
  ones (llama3_1_8b_peft_benchmark.yaml, qwen2_5_7b_peft_benchmark.yaml) do not. The pipelined ones run
  one torch.distributed.pipelining schedule per local batch (nemo_automodel/recipes/llm/
  train_ft.py: `n_microbatches = local_batch_size // pp_microbatch_size`, then gradient
  accumulation over global_batch_size / (local_batch_size x dp) local batches), so each step has
  that many pipeline flushes (`Plan.pipeline_flushes`): local_batch_size 4 for Llama 3 70B on one
  server and 8 on two (custom_llama3_3_70b_instruct_peft_benchmark[_2nodes].yaml), 8 for
  Qwen2.5-32B on one and two (qwen2_5_32b_peft_benchmark[_2nodes].yaml), pp_microbatch_size 1,
  global_batch_size 32 (the same at 507bfb7514 and 8473ee64c0).
  Kernels, read from the config at the commit each row was first published at (not by model
  name; `AUTOMODEL_CONFIGS`): configs that load `NeMoAutoModelForCausalLM.from_pretrained` got the
  Hugging Face model classes until Automodel registered its own Llama and Qwen2 (272c9d74b,
  2026-01-05, "expose llama and qwen2 to model registery"; at 507bfb7514 components/models/llama/
  model.py and qwen2/model.py have no `ModelClass`): the one-GPU Llama 3.1 8B and Qwen2.5-7B ones
  and Qwen2.5-32B's pipelined ones of 152e63204b and 507bfb7514. On that path
  nemo_automodel/_transformers/auto_model.py@507bfb7514 `from_pretrained` defaults to
  `use_liger_kernel=True` (switched off only under TP or CP, `_apply_preload_overrides`) and
  `attn_implementation="flash_attention_2"`: Liger's fused RMSNorm, SwiGLU and rotary kernels
  (`_apply_liger_kernel_to_instance`) and the flash-attn package (pyproject.toml's `cuda` extra,
  flash-attn<=2.8.3, beside transformer-engine 2.8.0) -- fused element-wise kernels
  (`Plan.eager_kernels` off) and `attention_kernel` flash2. The custom Llama 3.3 70B configs built
  the model with `build_llama_model` (eager HF-style RMSNorm and SwiGLU) at b3c51c3289 and
  507bfb7514, and load `NeMoAutoModelForCausalLM.from_pretrained` from 8473ee64c0 on, after
  272c9d74b: AutoModel's own Llama, whose norms since 822effa167 are
  `initialize_rms_norm_module(backend.rms_norm)`, `BackendConfig.rms_norm` "te" where Transformer
  Engine is installed (components/models/common/te_utils.py:50@8473ee64c0: fused norms), its
  SwiGLU (`act_fn(gate) * up`) and rotary (llama/rope_utils.py) eager, its attention
  `ALL_ATTENTION_FUNCTIONS[config._attn_implementation]` with from_pretrained's default
  "flash_attention_2": priced with the flash-attn kernel and the stack's eager element-wise
  kernels (a request has no switch for fused norms beside an eager SwiGLU and rotary, so the TE
  norms' saving is not priced). With
  transformer-engine installed `patch_linear_module` turns `use_triton` off (lora.py: `if HAS_TE:
  use_triton = False`), so the adapters run as eager `LinearLoRA` (two nn.Linear and an add).
  The rows first published at 2013a4dd6e (2026-04-10, "FSDP2 w weight prefetching and async TP
  optimization") run that commit's configs, every workload alike: the LoRA ones
  custom_llama3_3_70b_instruct_peft_benchmark[_2nodes].yaml and
  custom_qwen2_5_32b_peft_benchmark[_2nodes].yaml, the pretraining one
  examples/llm_pretrain/custom_llama3_1_70b_pretrain_benchmark_8nodes.yaml, all with `distributed.
  enable_compile: true` (per-layer torch.compile of the decoder layers, components/distributed/
  fsdp2.py `maybe_compile`: its element-wise ops fused, `Plan.eager_kernels` off; the attention
  stays the "TE" kernel the table states). The Llama 3.3 70B LoRA ones also set
  `enable_async_tensor_parallel: true` with `sequence_parallel: true`: components/distributed/
  parallelizer.py sets `torch._inductor.config._micro_pipeline_tp` and enables symmetric memory for
  the TP group, so Inductor rewrites each all-gather -> matmul and matmul -> reduce-scatter into
  fused_all_gather_matmul / fused_matmul_reduce_scatter, the collective decomposed and overlapped
  with the matmul's chunks -- priced as `Plan.tp_comm_overlap`, as the torchtitan emitter prices
  torchtitan's async TP (`emit.torchtitan._compile`). The Qwen2.5-32B ones set `sequence_parallel:
  false` and no async TP.

SQuAD v1.1's documents: Hugging Face datasets/squad/dataset_infos.json gives the train split as
79,317,110 bytes in 87,599 rows, 905 bytes a row (its id, title, context, question and answer;
NeMo's prompt "Context: ... Question: ... Answer: ..." drops the id and title and adds about as
many characters), and English text runs at about 4 characters per token for the Llama 3 and
GPT-4-class byte-pair tokenizers, so a packed document is about 905 / 4 = 226 tokens (range
190-260 for 3.5-4.8 characters per token). NeMo 1's SQuAD files (Llama 2's tokenizer, about 3.7
characters per token) are about 905 / 3.7 = 245 tokens: NeMo 24.07's rows (LoRA and SFT alike,
`public_nemo1_launcher.packed_document_len`) use 245, the Llama 3 ones 226; the attention of either
is a small part of a 4096-token pack.
"""

from __future__ import annotations

from dataclasses import dataclass

# SQuAD v1.1 training documents in tokens (module docstring: 905 bytes a row / 4 bytes a token).
SQUAD_DOCUMENT_TOKENS = 226
# the same documents in Llama 2's 32k SentencePiece tokens (905 bytes / 3.7 bytes a token): NeMo 24.07
SQUAD_DOCUMENT_TOKENS_LLAMA2 = 245


@dataclass(frozen=True)
class LoraRecipe:
    """One LoRA run's adapters, data, recomputation and schedule: rank, `Plan.lora_targets`,
    `Plan.packed_document_len` (0: not packed), the recomputation ("" where the row's own) and
    `Plan.pipeline_flushes`."""

    rank: int
    targets: str
    document_len: int
    recompute: str
    source: str  # the recipe file and tag, for the report
    flushes: int = 1


ALL_FOUR = "qkv,proj,fc1,fc2"
NEMO2_FT = "NVIDIA/NeMo v2.1.0 nemo/collections/llm/recipes/llama3_{}.py (dgxc ft_llama3, NeMo 24.12)"
NEMO1 = "NeMo-Framework-Launcher@24.07 conf/peft/llama/sft.yaml; NeMo r2.0.0rc1 nlp/parts/peft_config.py (NeMo 24.07)"
BRIDGE = "Megatron-Bridge v0.5.0 scripts/performance/configs/llama/llama3_llm_finetune.py (26.06)"
AUTOMODEL = "NVIDIA-NeMo/Automodel examples/llm_finetune/*_peft_benchmark*.yaml"
# What NeMo AutoModel's benchmark config of each row ran, read from the config at the commit the row was
# first published at (`_first_seen_commit`), for every workload of that commit (module docstring):
# (first-seen commit, model, workload) -> the request's kernel and overlap settings. A row not listed,
# or one without a first-seen commit, keeps the stack preset's (unknown: no fused kernels assumed).
_HF = {"eager_kernels": False, "attention_kernel": "flash2"}  # HF classes + Liger + flash-attn (< 272c9d74b)
_OWN_LLAMA = {"attention_kernel": "flash2"}  # own Llama: TE RMSNorm, eager SwiGLU/rotary, flash_attention_2
# enable_compile: per-layer torch.compile (attention: the row's stated "TE" kernel, `public_stacks`)
_COMPILED = {"eager_kernels": False}
AUTOMODEL_CONFIGS: dict[tuple[str, str, str], dict[str, object]] = {
    ("b3c51c3289", "llama3-70b", "lora"): {},  # build_llama_model: eager HF-style RMSNorm and SwiGLU
    ("507bfb7514", "llama3-70b", "lora"): {},
    ("152e63204b", "qwen2.5-32b", "lora"): _HF,  # NeMoAutoModelForCausalLM before 272c9d74b
    ("507bfb7514", "qwen2.5-32b", "lora"): _HF,
    ("507bfb7514", "llama3-8b", "lora"): _HF,
    ("507bfb7514", "qwen2.5-7b", "lora"): _HF,
    ("8473ee64c0", "llama3-70b", "lora"): _OWN_LLAMA,  # from_pretrained -> AutoModel's own Llama
    # 2013a4dd6e: enable_compile true; the Llama 3.3 70B LoRA configs enable_async_tensor_parallel true
    # (Inductor's micro-pipelined all-gather/reduce-scatter matmuls, `Plan.tp_comm_overlap`) with
    # sequence_parallel true, the Qwen2.5-32B ones sequence_parallel false and no async TP
    ("2013a4dd6e", "llama3-70b", "lora"): {**_COMPILED, "tp_comm_overlap": True},
    ("2013a4dd6e", "qwen2.5-32b", "lora"): {**_COMPILED, "sequence_parallel": False},
    # examples/llm_pretrain/custom_llama3_1_70b_pretrain_benchmark_8nodes.yaml: enable_compile: True
    # (its attention stays the row's stated Transformer Engine one)
    ("2013a4dd6e", "llama3-70b", "pretrain"): {"eager_kernels": False},
    # The MoE benchmark configs (examples/benchmark/configs/*_te_deepep.yaml, `parallelizer:
    # nemo_automodel.components.moe.parallelizer.parallelize_model`) at pp 1 before 8134b0c03 (2025-11-11):
    # `apply_fsdp` wraps the blocks, the embedding, the head and the inner `model.model` but not the outer
    # ForCausalLM (no `fully_shard_default(model)`), and train_ft.py's `get_sync_ctx(model, is_optim_step)`
    # turns FSDP2's gradient sync off only `if isinstance(model, FSDPModule)`: a no-op on the outer model,
    # so every micro-batch reduce-scatters (components/distributed/utils.py, moe/parallelizer.py at
    # 89e3a9fdd6 and 8d9bfb90e3; benchmark.py calls `_forward_backward_step` per micro-batch). 8134b0c03
    # wraps the outer model, and from 1645e6123 `defer_fsdp_grad_sync` (default True) keeps the deferral:
    # the Nemotron 3 Nano benchmark config (nemotron_nano_v3_te_deepep.yaml, bb0c0bfb08) sets no
    # `defer_fsdp_grad_sync`, so its row keeps the preset's last-micro-batch. Pipelined rows (DeepSeek-V3,
    # Kimi K2) sync in torch's pipeline schedule, not here.
    **{
        (commit, model, "pretrain"): {"fsdp2_grad_sync": "every-micro-batch"}
        for commit, model in (
            ("89e3a9fdd6", "qwen3-30b-a3b"),
            ("89e3a9fdd6", "gpt-oss-20b"),
            ("89e3a9fdd6", "gpt-oss-120b"),
            ("8d9bfb90e3", "qwen3-30b-a3b"),
        )
    },
}
# Automodel's pipelined LoRA benchmarks: (model, GPUs) -> step_scheduler.local_batch_size (docstring)
AUTOMODEL_LOCAL_BATCH = {("llama3-70b", 8): 4, ("llama3-70b", 16): 8, ("qwen2.5-32b", 8): 8, ("qwen2.5-32b", 16): 8}


def recipe(row: dict[str, str]) -> LoraRecipe | None:
    """The LoRA recipe of a public row (module docstring), None where its source is not listed."""
    source, model = row["source"], row["model"]
    if "dgxc-benchmarking ft_llama3/" in source:
        rank = 8 if model == "llama3-8b" else 16
        return LoraRecipe(rank, "qkv", SQUAD_DOCUMENT_TOKENS, "", NEMO2_FT.format("8b" if rank == 8 else "70b"))
    if "NVIDIA/NeMo docs/source/performance/performance_summary.md" in source:
        return LoraRecipe(32, "qkv", SQUAD_DOCUMENT_TOKENS_LLAMA2, "", NEMO1)
    if "Megatron-Bridge docs/performance-summary" in source:
        return LoraRecipe(16, "qkv", 0, "", BRIDGE)
    if "Automodel docs/performance-summary" in source:  # kernels: `automodel_settings`
        if int(row["pp"] or 1) == 1:  # the FSDP2 ones' checkpointing: `public_memory_recipes`
            return LoraRecipe(16, ALL_FOUR, 0, "", AUTOMODEL)
        local = AUTOMODEL_LOCAL_BATCH.get((model, int(row["num_gpus"])))
        flushes = int(row["gbs"]) // (local * int(row["dp"])) if local else 1
        return LoraRecipe(16, ALL_FOUR, 0, "full", AUTOMODEL, max(flushes, 1))
    return None


def automodel_settings(row: dict[str, str]) -> dict[str, object]:
    """The request settings NeMo AutoModel's config ran with at the row's first-seen commit
    (`AUTOMODEL_CONFIGS`), for any workload; empty for other sources, unlisted or undated rows."""
    if "Automodel docs/performance-summary" not in row["source"]:
        return {}
    first = _first_seen_commit(row)
    return dict(AUTOMODEL_CONFIGS.get((first, row["model"], row["workload"]), {})) if first else {}


def _first_seen_commit(row: dict[str, str]) -> str | None:
    """The first commit the row's table was read at ("first <sha> (<date>), ..." in
    `commit_or_version`), None where none is given."""
    words = row.get("commit_or_version", "").split()
    return words[words.index("first") + 1] if "first" in words[:-1] else None
