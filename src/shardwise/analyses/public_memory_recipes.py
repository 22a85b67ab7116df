"""What the recipes of published runs set that changes memory alone: the loss kernel
(`Plan.loss_kernel`) and PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (`Plan.expandable_segments`),
each read in the launch script or recipe that produced the rows, at the rows' versions. Nothing
here is fitted.
"""

from __future__ import annotations

# (text the row's source starts with, model, system, precisions): runs whose launcher sets expandable
# segments. Megatron-Bridge's Llama 3.1 405B pretraining on GB200 at FP8 (current scaling, MX):
# scripts/performance/setup_experiment.py (v0.1.0rc4: `llama31 405b gb200, fp8_recipe cs or mx`),
# perf_plugins.py _set_model_specific_environment_variables (v0.2.0 - v0.4.2: `llama31_405b`
# pretrain on gb200 (v0.3.0 on: gb300 too) with fp8_cs / fp8_mx), utils/executors.py PERF_ENV_VARS
# for every recipe but those with nccl_ub or Llama with Megatron-FSDP (commit 6f24c71f3, v0.5.0 on)
# and the flat recipes' env_vars (src/megatron/bridge/perf_recipes/llama/gb200/llama31.py at
# 067f987df). Llama 3 70B with Megatron-FSDP does not set it (6f24c71f3: `remove_allocator_env_vars`),
# and GB300 only from v0.3.0, whose rows the table does not tell apart: neither is listed.
EXPANDABLE_SEGMENT_RECIPES = (
    ("GitHub NVIDIA-NeMo/Megatron-Bridge docs/performance-summary", "llama3-405b", "gb200-nvl72", ("fp8", "mxfp8")),
)


def expandable_segments(row: dict[str, str]) -> bool:
    """Whether a public run's launcher set expandable segments (`EXPANDABLE_SEGMENT_RECIPES`); rows
    with Megatron-FSDP (`fsdp` > 0) are left out."""
    if (row.get("fsdp") or "0") not in ("", "0"):
        return False
    key = (row.get("model"), row.get("system"))
    return any(
        row["source"].startswith(source) and key == (model, system) and row.get("precision") in precisions
        for source, model, system, precisions in EXPANDABLE_SEGMENT_RECIPES
    )


# (text the row's source starts with, model name prefix): runs whose recipe computes the loss with
# Transformer Engine's parallel_cross_entropy (Megatron-Core cross_entropy_loss_fusion, on by default
# in Megatron-Bridge's GPTModelProvider, with cross_entropy_fusion_impl="te"). Megatron-Bridge's
# performance scripts: scripts/performance/configs/llama3/llama3_{8b,70b}_llm_pretrain.yaml and
# llama31/llama31_405b_llm_pretrain.yaml (v0.1.0rc4), utils/helpers.py set_common_perf_overrides
# (v0.2.0) and utils/overrides.py (v0.3.0 - v0.6.0) for every recipe, perf_recipes/_common.py
# _benchmark_common (default "te", which llama/common.py _llama_benchmark_common keeps; at 067f987df).
TE_LOSS_RECIPES = (("GitHub NVIDIA-NeMo/Megatron-Bridge docs/performance-summary", "llama3"),)


def loss_kernel(row: dict[str, str]) -> str:
    """The loss kernel a public run's recipe names (`TE_LOSS_RECIPES`: "te"), else "" (the stack's)."""
    model = row.get("model") or ""
    hit = any(row["source"].startswith(source) and model.startswith(prefix) for source, prefix in TE_LOSS_RECIPES)
    return "te" if hit else ""


def plan_settings(row: dict[str, str]) -> dict[str, object]:
    """The Plan keyword arguments the row's recipe sets here (`loss_kernel`, `expandable_segments`)."""
    out: dict[str, object] = {}
    if loss_kernel(row):
        out["loss_kernel"] = loss_kernel(row)
    if expandable_segments(row):
        out["expandable_segments"] = True
    return out
