"""The serving rules that differ by the model file an engine runs (`specs.Model.architecture`,
Hugging Face's model_type): SGLang's Mixtral / Grok files without data-parallel attention, vLLM's
files that read its sequence-parallel MoE and those whose layer reduce-scatters attention's output
at pp = 1. Priced in `engines.dp_dense`; docs/serving.md, docs/model.md "The architecture field"."""

from __future__ import annotations

import numpy as np

from shardwise.engines.dp_attention import dp_attention
from shardwise.specs import Model, Plan
from shardwise.specs._checks import Number

# Architectures (`Model.architecture`, Hugging Face's model_type) whose SGLang model files have no
# data-parallel attention path: models/mixtral.py and grok.py (no LayerCommunicator; Mixtral's
# embedding split over the whole TP group). The presets mixtral-8x7b, mixtral-8x22b and grok-1; a
# config.json of either under any name. A model whose architecture is None (a YAML file or flags
# that state none) is priced as the other files are, with the path: the name is a label, not
# matched (`no_dp_attention_block`).
NO_DP_ATTENTION_ARCHITECTURES = frozenset({"mixtral", "grok-1"})
# vLLM's sequence-parallel MoE is opt-in per model file: read in vLLM 0.34.0 (the PyPI wheel,
# vllm-0.34.0-cp38-abi3; `VLLM_SEQUENCE_PARALLEL_VERSION`), a file runs it where its MoE block
# passes `is_sequence_parallel=parallel_config.use_sequence_parallel_moe` to FusedMoE (FusedMoE's
# own default is False: model_executor/layers/fused_moe/layer.py, sp_size 1) and chunks its tokens
# (`sequence_parallel_chunk`) before it and all-gathers them after. The Hugging Face model_types
# whose architecture class the registry (model_executor/models/registry.py) maps to such a file,
# with the file (paths under vllm/), each read. Of the 38 MoE model files in model_executor/models,
# 22 do not (mixtral.py, dbrx.py, phimoe.py, glm4_moe.py, ernie45_moe.py, qwen2_moe.py's
# Qwen2MoeSparseMoeBlock, granitemoeshared.py, ...), and Grok's file is gone (registry: removed in
# 0.24). Files that read it whose model_type the wheel does not state (hub remote code: AXK1.py,
# alice_ai.py, interns1_pro.py, interns2_mobius.py, k2_horizon.py, mimo_v2.py, openpangu.py, zaya.py,
# the transformers/moe.py backend; packages dots3_note, muse_spark, qwen4_exp, glm5next) are not
# listed: they, and every other architecture not listed here, take the rule of an unknown one
# (`vllm_sequence_parallel_file`: multi-head latent attention, DeepSeek's file's mark).
VLLM_SEQUENCE_PARALLEL_VERSION = "0.34"
VLLM_SEQUENCE_PARALLEL_MOE = {
    "deepseek": "model_executor/models/deepseek_v2.py",  # DeepseekForCausalLM(DeepseekV2ForCausalLM)
    "deepseek_v2": "model_executor/models/deepseek_v2.py",  # DeepseekV2MoE (DeepseekV2ForCausalLM)
    "deepseek_v3": "model_executor/models/deepseek_v2.py",  # DeepseekV3ForCausalLM, Moonlight's too
    "kimi_k2": "model_executor/models/deepseek_v2.py",  # Kimi K2's config: DeepseekV3ForCausalLM
    "deepseek_v32": "models/deepseek_v32/nvidia/model.py",  # DeepseekV32ForCausalLM
    # GLM-5: GlmMoeDsaForCausalLM, the package's DeepseekV32ForCausalLM (models/deepseek_v32/__init__.py;
    # its model.py tests config.model_type == "glm_moe_dsa")
    "glm_moe_dsa": "models/deepseek_v32/nvidia/model.py",
    "qwen3_moe": "model_executor/models/qwen3_moe.py",  # Qwen3MoeSparseMoeBlock
    "qwen3_vl_moe": "model_executor/models/qwen3_vl_moe.py",  # qwen3_moe.py's Qwen3MoeSparseMoeBlock
    "qwen3_next": "model_executor/models/qwen3_next.py",  # Qwen3NextSparseMoeBlock
    # Qwen3.5 MoE: Qwen3_5Moe{ForCausalLM,ForConditionalGeneration}; the decoder layer tests
    # config.model_type == "qwen3_5_moe_text" (the wrapper's text_config)
    "qwen3_5_moe": "models/qwen3_5/nvidia/model.py",
    "qwen3_5_moe_text": "models/qwen3_5/nvidia/model.py",
    "gpt_oss": "model_executor/models/gpt_oss.py",  # MLPBlock
    "llama4": "model_executor/models/mllama4.py",  # its language model is llama4.py's Llama4ForCausalLM
    "llama4_text": "model_executor/models/llama4.py",  # Llama4MoE
    "granitemoe": "model_executor/models/granitemoe.py",  # GraniteMoeMoE (GraniteMoeForCausalLM)
    "nemotron_h": "model_executor/models/nemotron_h.py",  # NemotronHMoE
}
# vLLM's DeepSeek files, whose layer runs the MoE sequence-parallel itself at pp = 1
# (`vllm_layer_sequence_parallel`): deepseek_v2.py for DeepseekForCausalLM, DeepseekV2ForCausalLM
# and DeepseekV3ForCausalLM (vllm/model_executor/models/registry.py @0002bff0 and in 0.34.0), whose
# configs state model_type deepseek, deepseek_v2 and deepseek_v3 (Moonlight's too), and Kimi K2's
# (model_type kimi_k2 beside DeepseekV3ForCausalLM); DeepseekV32ForCausalLM (deepseek_v32) and GLM-5's
# GlmMoeDsaForCausalLM (glm_moe_dsa) in vllm/models/deepseek_v32/nvidia/model.py in 0.34.0, whose
# decoder layer reduce-scatters attention's output the same way (`sp_reduce_scatter`,
# `already_sequence_parallel=True`).
VLLM_DEEPSEEK_ARCHITECTURES = frozenset(
    {"deepseek", "deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "glm_moe_dsa"}
)
# Qwen's files that do the same at pp = 1 (`use_attn_reduce_scatter_for_moe`, vLLM 0.34.0):
# qwen3_next.py `_should_use_sequence_parallel` (every layer an MoE: num_experts > 0, no
# mlp_only_layers, decoder_sparse_step 1) and models/qwen3_5/nvidia/model.py (its MoE layers,
# model_type qwen3_5_moe_text): attention's o_proj with `reduce_results=False`,
# `tensor_model_parallel_reduce_scatter` before the MoE, `already_sequence_parallel=True`.
VLLM_QWEN_REDUCE_SCATTER_ARCHITECTURES = frozenset({"qwen3_next", "qwen3_5_moe", "qwen3_5_moe_text"})


def no_dp_attention_block(model: Model) -> bool:
    """Whether `model` runs a Mixtral / Grok MoE block (its architecture one of
    `NO_DP_ATTENTION_ARCHITECTURES`); False where the architecture is unknown (None)."""
    return model.architecture in NO_DP_ATTENTION_ARCHITECTURES


def vllm_deepseek_file(model: Model) -> Number:
    """Whether vLLM runs `model` with its DeepSeek file (`VLLM_DEEPSEEK_ARCHITECTURES`); where the
    architecture is not one of `VLLM_SEQUENCE_PARALLEL_MOE` (unknown, None, or named but not listed),
    whether the model has multi-head latent attention (DeepSeek's file is the one with it among the
    MoE files that read the sequence-parallel MoE)."""
    if model.architecture in VLLM_SEQUENCE_PARALLEL_MOE:
        return np.asarray(model.architecture in VLLM_DEEPSEEK_ARCHITECTURES)
    return np.asarray(model.kv_lora_rank) > 0


def vllm_sequence_parallel_file(model: Model) -> Number:
    """Whether vLLM runs `model` with a model file that reads its sequence-parallel MoE
    (`VLLM_SEQUENCE_PARALLEL_MOE`, by the architecture); where the architecture is not listed
    (unknown, None, or named but not listed: the same fallback), DeepSeek's rule
    (`vllm_deepseek_file`: multi-head latent attention)."""
    if model.architecture in VLLM_SEQUENCE_PARALLEL_MOE:
        return np.asarray(True)
    return vllm_deepseek_file(model)


def vllm_sequence_parallel_moe(model: Model, plan: Plan) -> Number:
    """Where vLLM runs its sequence-parallel MoE: data-parallel attention with tp > 1 under its
    allgather_reducescatter backend (`ParallelConfig.use_sequence_parallel_moe`, vLLM 0.34), in the
    model files that read it (`vllm_sequence_parallel_file`: deepseek_v2.py, qwen3_moe.py, gpt_oss.py,
    llama4.py among the presets' architectures; not mixtral.py). Each rank of a TP group takes T / tp of
    the group's tokens (`sequence_parallel_chunk`) and the experts' outputs are all-gathered over tp
    after the MoE (`DeepseekV2MoE.forward`, `Qwen3MoeSparseMoeBlock.forward`); the shared experts
    are built with `disable_tp`, whole on every GPU, and run on that chunk beside the routed ones.
    DeepSeek, Qwen3-Next and Qwen3.5 at pp = 1 instead reduce-scatter attention's output
    (`vllm_layer_sequence_parallel`).
    Its dense MLPs, embedding and output layer stay split over tp (`DeepseekV2MLP`,
    `VocabParallelEmbedding`, `ParallelLMHead`)."""
    if not model.is_moe or plan.moe_dispatcher != "allgather":
        return np.asarray(False)
    on = np.asarray(dp_attention(plan), dtype=bool) & (np.asarray(plan.tp) > 1)
    return on & np.asarray(vllm_sequence_parallel_file(model), dtype=bool)


def vllm_layer_sequence_parallel(model: Model, plan: Plan) -> Number:
    """Where vLLM's layer runs the MoE sequence-parallel itself (deepseek_v2.py
    `DeepseekV2DecoderLayer`, `use_sequence_parallel_moe` and pp = 1 and an MoE layer): attention's
    output reduce-scattered over tp (`reduce_results=False`, `tensor_model_parallel_reduce_scatter`)
    instead of all-reduced, the MoE told `already_sequence_parallel` (no all-gather after it), and
    the next layer all-gathers its input before attention: a reduce-scatter and an all-gather a layer
    in place of an all-reduce and an all-gather. DeepSeek's file by the model's architecture
    (`vllm_deepseek_file`: DeepSeek-V2/V3, Kimi K2, Moonlight, GLM-5 among the presets), and Qwen's
    (`VLLM_QWEN_REDUCE_SCATTER_ARCHITECTURES`: Qwen3-Next where every layer is an MoE, Qwen3.5 MoE)."""
    on = vllm_sequence_parallel_moe(model, plan)
    all_moe = (np.asarray(model.dense_layers) == 0) & (np.asarray(model.moe_every) <= 1)
    qwen = model.architecture in VLLM_QWEN_REDUCE_SCATTER_ARCHITECTURES
    qwen_on = (all_moe | (model.architecture != "qwen3_next")) if qwen else np.asarray(False)
    return on & (np.asarray(plan.pp) == 1) & (vllm_deepseek_file(model) | qwen_on)
