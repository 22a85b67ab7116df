"""What the recipes of published Megatron-Core runs leave off of the framework preset's
communication overlaps (`presets/frameworks.yaml` megatron-core: Transformer Engine's userbuffers
TP overlap, `Plan.tp_comm_overlap`, and the distributed optimizer's parameter all-gather behind the
next forward, `Plan.overlap_param_gather`), each read in the launch script and recipe that produced
the rows, at the rows' versions. Nothing here is fitted.
"""

from __future__ import annotations

from shardwise.analyses.public_memory_recipes import DGXC, RecipeFact
from shardwise.physics.hf_gpt2 import HF_TRAINER_ZERO1_STEP_BYTES

# Runs whose recipe builds no MegatronCommOverlapCallback, so Megatron-Core's defaults hold:
# ModelParallelConfig.tp_comm_overlap = False (megatron/core/model_parallel_config.py) and the
# recipe's own DistributedDataParallelConfig(overlap_param_gather=False).
NO_OVERLAP_RECIPES = (
    # dgxc-benchmarking nemotronh/ (launch.sh: FW_VERSION 25.04.01; setup.sh: NEMO_COMMIT 7a8f1cc7bc,
    # at 68eaf7e117 and every later commit that keeps the table) runs NeMo's
    # scripts/performance/llm/pretrain_nemotronh_56b.py, which calls `pretrain_recipe()` without
    # performance_mode (every other pretrain_*.py of that commit but deepseek_v3 passes
    # performance_mode=True). nemo/collections/llm/recipes/nemotronh_56b.py adds
    # MegatronCommOverlapCallback(tp_comm_overlap=True) in `performance_optimizations` alone, and
    # its trainer's DDP config sets overlap_param_gather=False; launch.sh passes no overlap flag and
    # utils.py set_primary_perf_configs turns none on.
    RecipeFact(DGXC + "nemotronh/", model="nemotron-h"),
)

# LoRA runs whose recipe builds no MegatronCommOverlapCallback either. dgxc-benchmarking ft_llama3/
# (NeMo 24.12 = v2.1.0; setup.sh@741c886025 builds the recipe from NeMo 25ec4e9894 with
# callbacks_11961.patch, a None guard; llama3_finetune.py: finetune_recipe(peft_scheme="lora",
# performance_mode=True), and `get_comm_overlap_callback_idx` finds none to adjust):
# nemo/collections/llm/recipes/llama3_{8b,70b}.py `finetune_performance_optimizations` appends
# MegatronCommOverlapCallback for full fine-tuning (peft_scheme "none") alone. Without it Megatron-Core's
# ModelParallelConfig defaults hold (launch.sh mounts Megatron-LM b997545c94: megatron/core/
# model_parallel_config.py tp_comm_overlap False line 158, overlap_p2p_comm False line 245,
# batch_p2p_comm True line 250) -- the callback is what sets overlap_p2p_comm for vp > 1
# (nemo/lightning/pytorch/callbacks/megatron_comm_overlap.py@v2.1.0) -- so the interleaved schedule's
# pipeline sends block the stage (`Plan.overlap_p2p` False) and, where a stage boundary crosses
# servers, wait for the network: Megatron's rank order is tp-cp-ep-dp-pp, so a stage is tp x dp
# ranks (4 at tp 2, dp 2: two stages to an 8-GPU server) and only the boundaries between servers
# cross (half of them at 16 GPUs, all at 32); the model prices every send at the slowest boundary.
# Without the callback the data-parallel overlaps are MegatronStrategy's defaults (off: the gradient
# reduce and parameter gather wait for the step's end); not applied, as for rank-16 QKV adapters
# the data-parallel traffic is the adapters' gradients alone (about 25 million parameters for the 70B,
# tens of MB against seconds of step), negligible beside the step.
LORA_NO_CALLBACK_RECIPES = (RecipeFact(DGXC + "ft_llama3/"),)

# Megatron runs whose launch leaves every overlap at its default, off: no --overlap-grad-reduce,
# --overlap-param-gather or --tp-comm-overlap (megatron/training/arguments.py defaults False), so the
# data-parallel gradient reduce-scatter also waits for the backward pass to end. FlagPerf's Megatron cases
# (FlagOpen/FlagPerf @1b5a0303): training/benchmarks/llama3_8B/megatron/pretrain_llama3.sh and
# llama3_70B/megatron/pretrain_llama3.sh (Megatron-LM core_v0.6.0), llama2_70B/megatron/megatron_main.sh
# (FlagScale 26cd664), aquila2_7b/flagscale/flagscale_main.sh (FlagScale ed55532); the nvidia
# training_adapter.sh files add nothing but FP8 flags. ms-swift's `megatron sft` (9d297f99a:
# swift/megatron/argument/megatron_args.py sets all three False; examples/train/megatron/base_to_chat.sh
# turns none on). Only their Megatron-Core rows: the same sources' DeepSpeed runs overlap as ZeRO does.
FLAGPERF = "GitHub FlagOpen/FlagPerf training/nvidia/"
NO_OVERLAP_LAUNCHES = (
    *(
        RecipeFact(FLAGPERF + case + "/")
        for case in ("llama3_8B-megatron", "llama3_70B-megatron", "llama2_70B-megatron", "aquila2_7b-flagscale")
    ),
    RecipeFact("GitHub modelscope/ms-swift docs/source_en/Megatron-SWIFT/"),
)

# DeepSpeed ZeRO-1 runs of DeepSpeed 0.5, whose stage 1 never overlapped its gradient reduction:
# deepspeedai/DeepSpeed @7567c76c (v0.5.7) runtime/engine.py `_configure_zero_optimizer` sets
# overlap_comm = False for stage 1 ("Overlap and contiguous grads are meaningless in stage 1 and are
# ignored"; runtime/zero/constants.py's default is False for stages 1-2 anyway), and stage2.py's
# `reduce_gradients` all-reduces the buckets after the backward. DeepSpeedExamples' autotuning examples
# (2467552b, 2021-11-13; training/autotuning/hf/dsconfigs/ds_config_fp16_z1.json: stage 1 and fp16
# alone; autotuning's fast mode tunes the stage and micro-batch alone; every published row is stage 1).
# The same step gathers the updated 16-bit parameters before it returns (stage2.py `step`: after the
# fp32-to-fp16 copy, "gather the updated weights from everyone", dist.all_gather per bucket of
# allgather_bucket_size), so the next forward waits for the gather: overlap_param_gather off too.
# Stage 1 also turns contiguous_gradients off (engine.py, the same lines), so stage2.py's
# `reduce_ipg_grads` takes `buffered_reduce_fallback(None, ...)`: `allreduce_bucket` flattens each
# bucket, div_ by the world size, dist.all_reduce (rank None) and copies the result back into every
# gradient: the whole gradient all-reduced, not reduce-scattered (`Plan.zero1_grad_all_reduce`; its
# unsharded passes are priced at nanotron's 16 bytes per parameter: DeepSpeed's flatten, div_ and
# copy-back move 12 in fp16, and torch.distributed's list all-gather in `step` (a flat buffer, each
# rank's shard copied out: ProcessGroupNCCL::allgather before torch 1.13) 4 more).
NO_OVERLAP_COMM_CONFIGS = (RecipeFact("GitHub deepspeedai/DeepSpeedExamples training/autotuning/hf/"),)
# Their model is Hugging Face Transformers 4.12.0's GPT2LMHeadModel (run_clm.py --model_name_or_path
# gpt2, gpt2-medium, gpt2-large, gpt2-xl; the rows' framework column): `Plan.hf_gpt2_ops`; its Trainer's
# AdamW under DeepSpeed's stage-1 step (the config names no optimizer): `Plan.optimizer_step_bytes`.
HF_GPT2_CONFIGS = (RecipeFact("GitHub deepspeedai/DeepSpeedExamples training/autotuning/hf/gpt2"),)
# Other runs of transformers' GPT2LMHeadModel, whose eager chain (the scores scaled, masked by torch.where
# and the additive mask, soft-maxed and dropped out in passes of their own; gelu_new's eight kernels) is
# that of 4.12 in the 2022 releases too: hpcaitech's Lightning benchmark builds it from a GPT2Config
# (hpcaitech/ColossalAI-Pytorch-lightning benchmark/gpt/model.py GPTLMModel @395762e0) under DeepSpeed
# ZeRO-3 and Colossal-AI Gemini; their optimizers are fused (FusedAdam, HybridAdam: same file). Its loss
# (GPTLMLoss, same file) is nn.CrossEntropyLoss on the shifted 16-bit logits the fp16 model returns (labels
# are not passed to the model, so no fp32 cast), and GPTLitModule.training_step returns the loss alone, so
# the logits are gone before Lightning's backward: `Plan.loss_kernel` "eager-bf16-freed" (6 bytes a logit:
# `physics.memory_losses.EAGER_BF16_FREED_LOGIT_BYTES`). Its DeepSpeed rows run Lightning's
# DeepSpeedStrategy(stage=3) defaults (Lightning-AI/pytorch-lightning 00328e8251b7
# pytorch_lightning/strategies/deepspeed.py: reduce_bucket_size 200_000_000 where DeepSpeed's own is 5e8;
# no stage3_* key, so DeepSpeed's): `Plan.zero3_buckets` reduce 2e8.
HF_GPT2_MODELS = (RecipeFact("GitHub hpcaitech/ColossalAI-Pytorch-lightning benchmark/gpt/"),)
LIGHTNING_ZERO3_BUCKETS = "reduce=2e8"


def plan_settings(row: dict[str, str]) -> dict[str, object]:
    """The Plan keyword arguments that turn off what the row's recipe leaves off
    (`NO_OVERLAP_LAUNCHES`, `NO_OVERLAP_COMM_CONFIGS` with `HF_GPT2_CONFIGS`, `HF_GPT2_MODELS`, `NO_OVERLAP_RECIPES`,
    `LORA_NO_CALLBACK_RECIPES`); empty for the others."""
    if row["framework"] == "megatron-core" and any(fact.covers(row) for fact in NO_OVERLAP_LAUNCHES):
        return {"tp_comm_overlap": False, "overlap_param_gather": False, "overlap_grad_reduce": False}
    if row["framework"] == "deepspeed" and any(fact.covers(row) for fact in NO_OVERLAP_COMM_CONFIGS):
        gpt2 = any(fact.covers(row) for fact in HF_GPT2_CONFIGS)
        return {
            "overlap_grad_reduce": False,
            "overlap_param_gather": False,
            "zero1_grad_all_reduce": True,
            "hf_gpt2_ops": gpt2,
            "optimizer_step_bytes": HF_TRAINER_ZERO1_STEP_BYTES if gpt2 else 0.0,
        }
    if any(fact.covers(row) for fact in HF_GPT2_MODELS):
        lightning_ds = {"zero3_buckets": LIGHTNING_ZERO3_BUCKETS} if row["framework"] == "deepspeed" else {}
        return {"hf_gpt2_ops": True, "loss_kernel": "eager-bf16-freed", **lightning_ds}
    if any(fact.covers(row) for fact in NO_OVERLAP_RECIPES):
        return {"tp_comm_overlap": False, "overlap_param_gather": False}
    if row.get("workload") == "lora" and any(fact.covers(row) for fact in LORA_NO_CALLBACK_RECIPES):
        return {"tp_comm_overlap": False, "overlap_p2p": False}
    return {}
