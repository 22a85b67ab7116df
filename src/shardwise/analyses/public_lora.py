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
  NeMo-Framework-Launcher launcher_scripts/conf/peft/llama/squad.yaml sets `lora_tuning.
  adapter_dim: 32` and no `target_modules`, whose default is the QKV layer alone (NeMo r2.0.0rc1
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
  Kernels: the configs that load `NeMoAutoModelForCausalLM.from_pretrained` (the one-GPU Llama
  3.1 8B and Qwen2.5-7B ones, Qwen2.5-32B's pipelined ones) got the Hugging Face model classes
  until Automodel registered its own Llama and Qwen2 (272c9d74b, 2026-01-05, "expose llama and
  qwen2 to model registery"; at 507bfb7514 components/models/llama/model.py and qwen2/model.py
  have no `ModelClass`). On that path nemo_automodel/_transformers/auto_model.py@507bfb7514
  `from_pretrained` defaults to `use_liger_kernel=True` (switched off only under TP or CP,
  `_apply_preload_overrides`) and `attn_implementation="flash_attention_2"`: Liger's fused
  RMSNorm, SwiGLU and rotary kernels (`_apply_liger_kernel_to_instance`) and the flash-attn
  package (pyproject.toml's `cuda` extra, flash-attn<=2.8.3, beside transformer-engine 2.8.0)
  -- fused element-wise kernels (`Plan.eager_kernels` off) and `attention_kernel` flash2. The
  rows that appeared before 2026-01-05 were measured so. The custom Llama 3.3 70B configs
  (`build_llama_model`, eager HF RMSNorm and SwiGLU) keep the stack's eager kernels. With
  transformer-engine installed `patch_linear_module` turns `use_triton` off (lora.py: `if HAS_TE:
  use_triton = False`), so the adapters run as eager `LinearLoRA` (two nn.Linear and an add).
  The FSDP2 tp 2 rows first published at 2013a4dd6e (2026-04-10, "FSDP2 w weight prefetching and
  async TP optimization") run custom_llama3_3_70b_instruct_peft_benchmark[_2nodes].yaml and
  custom_qwen2_5_32b_peft_benchmark[_2nodes].yaml of that commit, which set `distributed.
  enable_compile: true` (per-layer torch.compile of the decoder layers, components/distributed/
  config.py: its element-wise ops fused, `Plan.eager_kernels` off) and, for Qwen2.5-32B,
  `sequence_parallel: false` (the Llama 3.3 70B ones true).

SQuAD v1.1's documents: Hugging Face datasets/squad/dataset_infos.json gives the train split as
79,317,110 bytes in 87,599 rows, 905 bytes a row (its id, title, context, question and answer;
NeMo's prompt "Context: ... Question: ... Answer: ..." drops the id and title and adds about as
many characters), and English text runs at about 4 characters per token for the Llama 3 and
GPT-4-class byte-pair tokenizers, so a packed document is about 905 / 4 = 226 tokens (range
190-260 for 3.5-4.8 characters per token). NeMo 1's SQuAD files (Llama 2's tokenizer, about 3.7
characters per token) would be about 245; the attention of either is a small part of a 4096-token
pack, so one length serves both.
"""

from __future__ import annotations

from dataclasses import dataclass

# SQuAD v1.1 training documents in tokens (module docstring: 905 bytes a row / 4 bytes a token).
SQUAD_DOCUMENT_TOKENS = 226


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
    # the stack's kernels where the recipe's model code differs from the preset's (None: the preset's)
    eager_kernels: bool | None = None
    attention_kernel: str | None = None
    sequence_parallel: bool | None = None


ALL_FOUR = "qkv,proj,fc1,fc2"
NEMO2_FT = "NVIDIA/NeMo v2.1.0 nemo/collections/llm/recipes/llama3_{}.py (dgxc ft_llama3, NeMo 24.12)"
NEMO1 = "NeMo-Framework-Launcher conf/peft/llama/squad.yaml; NeMo r2.0.0rc1 nlp/parts/peft_config.py (NeMo 24.07)"
BRIDGE = "Megatron-Bridge v0.5.0 scripts/performance/configs/llama/llama3_llm_finetune.py (26.06)"
AUTOMODEL = "NVIDIA-NeMo/Automodel examples/llm_finetune/*_peft_benchmark*.yaml"
# Automodel registered its own Llama and Qwen2 classes (272c9d74b): rows first published before
# ran the Hugging Face classes with Liger kernels and flash-attn (module docstring)
AUTOMODEL_OWN_MODELS = "2026-01-05"
# the Automodel LoRA configs that build the model through NeMoAutoModelForCausalLM (not build_llama_model)
AUTOMODEL_AUTO_CLASS = ("llama3-8b", "qwen2.5-7b", "qwen2.5-32b")
# the FSDP2 tp 2 LoRA configs published at 2013a4dd6e compile each decoder layer (module docstring)
AUTOMODEL_COMPILED = "2026-04-10"
# Automodel's pipelined LoRA benchmarks: (model, GPUs) -> step_scheduler.local_batch_size (docstring)
AUTOMODEL_LOCAL_BATCH = {("llama3-70b", 8): 4, ("llama3-70b", 16): 8, ("qwen2.5-32b", 8): 8, ("qwen2.5-32b", 16): 8}


def recipe(row: dict[str, str]) -> LoraRecipe | None:
    """The LoRA recipe of a public row (module docstring), None where its source is not listed."""
    source, model = row["source"], row["model"]
    if "dgxc-benchmarking ft_llama3/" in source:
        rank = 8 if model == "llama3-8b" else 16
        return LoraRecipe(rank, "qkv", SQUAD_DOCUMENT_TOKENS, "", NEMO2_FT.format("8b" if rank == 8 else "70b"))
    if "NVIDIA/NeMo docs/source/performance/performance_summary.md" in source:
        return LoraRecipe(32, "qkv", SQUAD_DOCUMENT_TOKENS, "", NEMO1)
    if "Megatron-Bridge docs/performance-summary" in source:
        return LoraRecipe(16, "qkv", 0, "", BRIDGE)
    if "Automodel docs/performance-summary" in source:
        hf = model in AUTOMODEL_AUTO_CLASS and _first_seen(row) < AUTOMODEL_OWN_MODELS
        kernels = {"eager_kernels": False, "attention_kernel": "flash2"} if hf else {}
        if int(row["pp"] or 1) == 1:  # the FSDP2 ones' checkpointing: `public_memory_recipes`
            if _first_seen(row) >= AUTOMODEL_COMPILED:
                sp = False if model == "qwen2.5-32b" else None
                return LoraRecipe(16, ALL_FOUR, 0, "", AUTOMODEL, eager_kernels=False, sequence_parallel=sp)
            return LoraRecipe(16, ALL_FOUR, 0, "", AUTOMODEL, **kernels)
        local = AUTOMODEL_LOCAL_BATCH.get((model, int(row["num_gpus"])))
        flushes = int(row["gbs"]) // (local * int(row["dp"])) if local else 1
        return LoraRecipe(16, ALL_FOUR, 0, "full", AUTOMODEL, max(flushes, 1), **kernels)
    return None


def _first_seen(row: dict[str, str]) -> str:
    """The date (YYYY-MM-DD) of the first commit the row's table was read at ("first <sha>
    (<date>), ..." in `commit_or_version`); "" where none is given."""
    text = row.get("commit_or_version", "")
    start = text.find("(", text.find("first"))
    return text[start + 1 : start + 11] if "first" in text and start >= 0 else ""
