"""The recipe facts of Megatron-Bridge's published mixture-of-experts runs that their tables do not
print: what each run recomputes and its pipeline layout, per (model, system, precision, container),
listed by tools/moe_recipes.py from the recipes at each release's tag (`analyses.public_moe` reads
them)."""

from __future__ import annotations

# What the recipes of the same Bridge runs recompute (Megatron-Core's selective `recompute_modules`,
# `Plan.recompute_modules`; empty: nothing), found as A2A_OVERLAP is: the recipe's recompute_modules
# where its WorkloadBaseConfig names them (utils/overrides.py `_set_recompute_overrides` then sets
# the granularity "selective"), else the family's setting -- DeepSeek-V3's and Kimi K2's scripts
# select "selective" with no modules, which Megatron-Core's TransformerConfig makes ["core_attn"];
# Qwen3's, GPT-OSS's and Nemotron 3 Nano's recompute nothing (tools/moe_recipes.py BASE_RECOMPUTE,
# with the files). Listed by tools/moe_recipes.py (with the recipes one layout setting from a row's
# where none has its layout: GPT-OSS 25.11 and 26.02.01 B200, 25.11 H100, DeepSeek-V3 25.11 GB200
# BF16), less the empty entries it adds from 2026-12 on (Nemotron 3 Nano off H100, and those
# layout-near rows), whose tables state no recomputation either; other rows keep their table's column.
# Added by hand (tools/moe_recipes.py reads the WorkloadBaseConfig files of 25.11 on): 25.09's
# DeepSeek-V3 on H100, whose scripts/performance/run_script.py (v0.1.0rc3 and v0.1.0rc4 alike) sets
# `recipe.model.recompute_modules = ["mla_up_proj", "mlp"]` for h100 (pp 8, vp 4: the row's layout).
RECOMPUTE_MODULES: dict[tuple[str, str, str, str], tuple[str, ...]] = {
    ("deepseek-v3", "dgx-h100", "fp8", "25.09"): ("mla_up_proj", "mlp"),
    ("deepseek-v3", "dgx-b200", "mxfp8", "25.11"): ("mla_up_proj",),
    ("deepseek-v3", "dgx-b200", "mxfp8", "26.02"): ("mla_up_proj",),
    ("deepseek-v3", "dgx-b200", "mxfp8", "26.02.01"): ("mla_up_proj",),
    ("deepseek-v3", "dgx-b200", "mxfp8", "26.04"): ("mla_up_proj",),
    ("deepseek-v3", "dgx-b200", "mxfp8", "26.04.01"): ("mla_up_proj", "mlp"),
    ("deepseek-v3", "dgx-b300", "mxfp8", "26.02"): ("mla_up_proj",),
    ("deepseek-v3", "dgx-b300", "mxfp8", "26.02.01"): ("mla_up_proj",),
    ("deepseek-v3", "dgx-b300", "mxfp8", "26.04"): ("mla_up_proj",),
    ("deepseek-v3", "dgx-b300", "mxfp8", "26.04.01"): ("mla_up_proj",),
    ("deepseek-v3", "dgx-b300", "mxfp8", "26.06"): ("mla_up_proj",),
    ("deepseek-v3", "gb200-nvl72", "bf16", "25.11"): ("mla_up_proj",),
    ("deepseek-v3", "gb200-nvl72", "mxfp8", "26.02"): ("mla_up_proj",),
    ("deepseek-v3", "gb200-nvl72", "mxfp8", "26.02.01"): ("mla_up_proj",),
    ("deepseek-v3", "gb200-nvl72", "mxfp8", "26.04"): ("mlp",),
    ("deepseek-v3", "gb200-nvl72", "mxfp8", "26.04.01"): ("mlp",),
    ("deepseek-v3", "gb200-nvl72", "mxfp8", "26.06"): ("mla_up_proj",),
    ("deepseek-v3", "gb200-nvl72", "mxfp8", "26.06.01"): ("mla_up_proj",),
    ("deepseek-v3", "gb300-nvl72", "mxfp8", "26.02"): ("mla_up_proj",),
    ("deepseek-v3", "gb300-nvl72", "mxfp8", "26.02.01"): ("mla_up_proj",),
    ("deepseek-v3", "gb300-nvl72", "mxfp8", "26.04"): ("mla_up_proj",),
    ("deepseek-v3", "gb300-nvl72", "mxfp8", "26.04.01"): ("mla_up_proj",),
    ("deepseek-v3", "gb300-nvl72", "mxfp8", "26.06"): (),
    ("deepseek-v3", "gb300-nvl72", "mxfp8", "26.06.01"): (),
    ("gpt-oss-120b", "dgx-b200", "bf16", "25.11"): ("layernorm", "moe_act"),
    ("gpt-oss-120b", "dgx-b200", "bf16", "26.02"): ("layernorm", "moe_act"),
    ("gpt-oss-120b", "dgx-b200", "bf16", "26.02.01"): ("layernorm", "moe_act"),
    ("gpt-oss-120b", "dgx-b200", "bf16", "26.04"): ("layernorm", "moe_act"),
    ("gpt-oss-120b", "dgx-b200", "bf16", "26.04.01"): ("layernorm", "moe_act"),
    ("gpt-oss-120b", "dgx-b300", "bf16", "26.02"): (),
    ("gpt-oss-120b", "dgx-b300", "bf16", "26.04"): (),
    ("gpt-oss-120b", "dgx-b300", "bf16", "26.04.01"): (),
    ("gpt-oss-120b", "dgx-b300", "mxfp8", "26.06"): (),
    ("gpt-oss-120b", "dgx-h100", "bf16", "25.11"): ("layernorm", "moe_act"),
    ("gpt-oss-120b", "dgx-h100", "bf16", "26.02"): ("layernorm", "moe_act"),
    ("gpt-oss-120b", "dgx-h100", "bf16", "26.02.01"): ("layernorm", "moe_act"),
    ("gpt-oss-120b", "dgx-h100", "bf16", "26.04"): ("layernorm", "moe_act"),
    ("gpt-oss-120b", "dgx-h100", "bf16", "26.04.01"): ("layernorm", "moe_act"),
    ("gpt-oss-120b", "gb200-nvl72", "bf16", "26.02"): ("layernorm", "moe_act"),
    ("gpt-oss-120b", "gb200-nvl72", "bf16", "26.02.01"): ("layernorm", "moe_act"),
    ("gpt-oss-120b", "gb200-nvl72", "bf16", "26.04"): ("layernorm", "moe_act"),
    ("gpt-oss-120b", "gb200-nvl72", "bf16", "26.04.01"): ("layernorm", "moe_act"),
    ("gpt-oss-120b", "gb200-nvl72", "mxfp8", "26.06"): (),
    ("gpt-oss-120b", "gb200-nvl72", "mxfp8", "26.06.01"): (),
    ("gpt-oss-120b", "gb300-nvl72", "bf16", "26.02"): (),
    ("gpt-oss-120b", "gb300-nvl72", "bf16", "26.02.01"): (),
    ("gpt-oss-120b", "gb300-nvl72", "bf16", "26.04"): (),
    ("gpt-oss-120b", "gb300-nvl72", "bf16", "26.04.01"): (),
    ("gpt-oss-120b", "gb300-nvl72", "mxfp8", "26.06"): (),
    ("gpt-oss-120b", "gb300-nvl72", "mxfp8", "26.06.01"): (),
    ("kimi-k2", "gb300-nvl72", "mxfp8", "26.02.01"): ("mla_up_proj",),
    ("kimi-k2", "gb300-nvl72", "mxfp8", "26.04"): ("mla_up_proj",),
    ("kimi-k2", "gb300-nvl72", "mxfp8", "26.04.01"): ("mla_up_proj",),
    ("kimi-k2", "gb300-nvl72", "mxfp8", "26.06"): ("mla_up_proj",),
    **{
        ("nemotron-3-nano-30b-a3b", "dgx-h100", "fp8", v): ("moe", "layernorm", "core_attn", "moe_act")
        for v in ("26.02.01", "26.04", "26.04.01", "26.06")
    },
    ("qwen3-235b-a22b", "dgx-b200", "mxfp8", "26.02"): (),
    ("qwen3-235b-a22b", "dgx-b200", "mxfp8", "26.04.01"): (),
    ("qwen3-235b-a22b", "dgx-b300", "mxfp8", "26.02"): (),
    ("qwen3-235b-a22b", "dgx-b300", "mxfp8", "26.04"): (),
    ("qwen3-235b-a22b", "dgx-b300", "mxfp8", "26.04.01"): (),
    ("qwen3-235b-a22b", "dgx-h100", "fp8", "25.11"): (),
    ("qwen3-235b-a22b", "dgx-h100", "fp8", "26.02"): (),
    ("qwen3-235b-a22b", "dgx-h100", "fp8", "26.02.01"): (),
    ("qwen3-235b-a22b", "dgx-h100", "fp8", "26.04"): (),
    ("qwen3-235b-a22b", "dgx-h100", "fp8", "26.04.01"): (),
    ("qwen3-235b-a22b", "gb200-nvl72", "mxfp8", "26.02"): (),
    ("qwen3-235b-a22b", "gb200-nvl72", "mxfp8", "26.02.01"): (),
    ("qwen3-235b-a22b", "gb200-nvl72", "mxfp8", "26.04"): (),
    ("qwen3-235b-a22b", "gb200-nvl72", "mxfp8", "26.04.01"): (),
    ("qwen3-235b-a22b", "gb200-nvl72", "mxfp8", "26.06"): (),
    ("qwen3-235b-a22b", "gb200-nvl72", "mxfp8", "26.06.01"): (),
    ("qwen3-235b-a22b", "gb300-nvl72", "mxfp8", "26.02"): (),
    ("qwen3-235b-a22b", "gb300-nvl72", "mxfp8", "26.02.01"): (),
    ("qwen3-235b-a22b", "gb300-nvl72", "mxfp8", "26.04"): (),
    ("qwen3-235b-a22b", "gb300-nvl72", "mxfp8", "26.04.01"): (),
    ("qwen3-235b-a22b", "gb300-nvl72", "mxfp8", "26.06"): (),
    ("qwen3-235b-a22b", "gb300-nvl72", "mxfp8", "26.06.01"): (),
    ("qwen3-30b-a3b", "dgx-b200", "mxfp8", "25.11"): (),
    ("qwen3-30b-a3b", "dgx-b200", "mxfp8", "26.02"): (),
    ("qwen3-30b-a3b", "dgx-b200", "mxfp8", "26.02.01"): (),
    ("qwen3-30b-a3b", "dgx-b200", "mxfp8", "26.04"): (),
    ("qwen3-30b-a3b", "dgx-b200", "mxfp8", "26.04.01"): (),
    ("qwen3-30b-a3b", "dgx-b300", "mxfp8", "26.02"): (),
    ("qwen3-30b-a3b", "dgx-b300", "mxfp8", "26.02.01"): (),
    ("qwen3-30b-a3b", "dgx-b300", "mxfp8", "26.04"): (),
    ("qwen3-30b-a3b", "dgx-b300", "mxfp8", "26.04.01"): (),
    ("qwen3-30b-a3b", "dgx-b300", "mxfp8", "26.06"): (),
    ("qwen3-30b-a3b", "dgx-h100", "fp8", "26.02"): (),
    ("qwen3-30b-a3b", "dgx-h100", "fp8", "26.04"): (),
    ("qwen3-30b-a3b", "dgx-h100", "fp8", "26.04.01"): (),
    ("qwen3-30b-a3b", "dgx-h100", "fp8", "26.06"): (),
    ("qwen3-30b-a3b", "gb200-nvl72", "mxfp8", "25.11"): (),
    ("qwen3-30b-a3b", "gb200-nvl72", "mxfp8", "26.02"): (),
    ("qwen3-30b-a3b", "gb200-nvl72", "mxfp8", "26.02.01"): (),
    ("qwen3-30b-a3b", "gb200-nvl72", "mxfp8", "26.04"): (),
    ("qwen3-30b-a3b", "gb200-nvl72", "mxfp8", "26.04.01"): (),
    ("qwen3-30b-a3b", "gb200-nvl72", "mxfp8", "26.06"): (),
    ("qwen3-30b-a3b", "gb200-nvl72", "mxfp8", "26.06.01"): (),
    ("qwen3-30b-a3b", "gb300-nvl72", "mxfp8", "26.02"): (),
    ("qwen3-30b-a3b", "gb300-nvl72", "mxfp8", "26.02.01"): (),
    ("qwen3-30b-a3b", "gb300-nvl72", "mxfp8", "26.04"): (),
    ("qwen3-30b-a3b", "gb300-nvl72", "mxfp8", "26.04.01"): (),
    ("qwen3-30b-a3b", "gb300-nvl72", "mxfp8", "26.06"): (),
    ("qwen3-30b-a3b", "gb300-nvl72", "mxfp8", "26.06.01"): (),
}


# The pipeline layout of the same runs' recipes (Megatron-Core's --pipeline-model-parallel-layout:
# E embedding, t decoder layer, m MTP module, L loss, | between model chunks, (...)*n and x*n
# repeated): DeepSeek-V3's WorkloadBaseConfig `pp_layout`, else its recipe's map by (pp, vp)
# (recipes/deepseek/deepseek_v3.py `set_deepseek_v3_pipeline_model_parallel_layout`), found as
# A2A_OVERLAP is and listed by tools/moe_recipes.py; the others split evenly. 25.09's DeepSeek-V3 on
# H100 by hand: run_script.py (v0.1.0rc3 and v0.1.0rc4) passes `layout="Et|(tt|)*30mL"` with pp 8, vp 4.
LAYOUTS: dict[tuple[str, str, str, str], str] = {
    ("deepseek-v3", "dgx-h100", "fp8", "25.09"): "Et|(tt|)*30mL",
    ("deepseek-v3", "dgx-b200", "mxfp8", "25.11"): "Et*4|(t*4|)*14tmL",
    ("deepseek-v3", "dgx-b200", "mxfp8", "26.02"): "Et*4|(t*4|)*14tmL",
    ("deepseek-v3", "dgx-b200", "mxfp8", "26.02.01"): "Et*4|(t*4|)*14tmL",
    ("deepseek-v3", "dgx-b200", "mxfp8", "26.04"): "Et*4|(t*4|)*14tmL",
    ("deepseek-v3", "dgx-b200", "mxfp8", "26.04.01"): "Et*4|(t*4|)*14tmL",
    ("deepseek-v3", "dgx-b300", "mxfp8", "26.02"): "Et*4|(t*4|)*14tmL",
    ("deepseek-v3", "dgx-b300", "mxfp8", "26.02.01"): "Et*4|(t*4|)*14tmL",
    ("deepseek-v3", "dgx-b300", "mxfp8", "26.04"): "Et*4|(t*4|)*14tmL",
    ("deepseek-v3", "dgx-b300", "mxfp8", "26.04.01"): "Et*8|(t*8|)*6t*5mL",
    ("deepseek-v3", "dgx-b300", "mxfp8", "26.06"): "Et*8|(t*8|)*6t*5mL",
    ("deepseek-v3", "gb200-nvl72", "mxfp8", "26.02"): "Et*4|(t*4|)*14tmL",
    ("deepseek-v3", "gb200-nvl72", "mxfp8", "26.02.01"): "Et*4|(t*4|)*14tmL",
    ("deepseek-v3", "gb200-nvl72", "mxfp8", "26.04"): "Et*4|(t*4|)*14tmL",
    ("deepseek-v3", "gb200-nvl72", "mxfp8", "26.04.01"): "Et*4|(t*4|)*14tmL",
    ("deepseek-v3", "gb200-nvl72", "mxfp8", "26.06"): "Et*4|(t*4|)*14tmL",
    ("deepseek-v3", "gb200-nvl72", "mxfp8", "26.06.01"): "Et*4|(t*4|)*14tmL",
    ("deepseek-v3", "gb300-nvl72", "mxfp8", "26.02"): "Et*4|(t*4|)*14tmL",
    ("deepseek-v3", "gb300-nvl72", "mxfp8", "26.02.01"): "Et*4|(t*4|)*14tmL",
    ("deepseek-v3", "gb300-nvl72", "mxfp8", "26.04"): "Et*4|(t*4|)*14tmL",
    ("deepseek-v3", "gb300-nvl72", "mxfp8", "26.04.01"): "Et*4|(t*4|)*14tmL",
    ("deepseek-v3", "gb300-nvl72", "mxfp8", "26.06"): "Et*4|(t*4|)*14tmL",
    ("deepseek-v3", "gb300-nvl72", "mxfp8", "26.06.01"): "Et*4|(t*4|)*14tmL",
}


# The runs whose recipe dropped tokens at capacity and padded every expert to it (Megatron-Core's
# `moe_expert_capacity_factor` 1.0 and `moe_pad_expert_input_to_capacity` True: `Plan.moe_capacity_factor`,
# `Plan.moe_pad_to_capacity`), which needs the all-to-all dispatcher. The same two settings in every
# recipe below: Megatron-Bridge's `apply_moe_token_drop` (src/megatron/bridge/training/utils/
# moe_token_drop.py) and NeMo 2's `MegatronTokenDropCallback` (nemo/lightning/pytorch/callbacks/
# moe_token_drop.py) default to capacity factor 1.0 with padding, and the recipes call them bare.
TOKEN_DROP_FACTOR = 1.0
# Megatron-Bridge v0.1.0rc3 (NeMo 25.09), scripts/performance/run_script.py: `apply_moe_token_drop`
# for every Qwen3 run and for DeepSeek-V3 on B200 and GB200 (`use_tokendrop`; on H100 DeepEP, dropless)
# -- the summary's "(tokendrop)" and "(dropless)" model cells. From v0.2.0 (25.11) token dropping is the
# performance scripts' `--use_tokendrop` option, off by default (utils/helpers.py, then overrides.py).
# (Bridge container, preset): the systems that dropped (empty: all).
BRIDGE_TOKEN_DROP: dict[tuple[str, str], tuple[str, ...]] = {
    ("25.09", "qwen3-30b-a3b"): (),
    ("25.09", "qwen3-235b-a22b"): (),
    ("25.09", "deepseek-v3"): ("dgx-b200", "gb200-nvl72"),
}
# NVIDIA dgxc-benchmarking's NeMo 2 workloads, at the NeMo commit each setup.sh checks out
# (7a8f1cc7bc, llmb-nemo r2.3.0, for DeepSeek-V3 and Llama 4; 6f2c6fdaff for Grok-1 from 60d6fd33ba
# on): scripts/performance/llm/pretrain_deepseek_v3.py (`USE_TOKEN_DROP = True`, every GPU),
# pretrain_grok1_314b.py and recipes/llama4_e128.py (`pretrain_performance_optimizations`, which the
# performance scripts' `pretrain_recipe(performance_mode=True)` applies) add MegatronTokenDropCallback;
# Grok-1's earlier NeMo 1 config (grok1/grok1_314b.yaml, 35a9aecc8d-85380ffe02) sets
# `moe_expert_capacity_factor: 1.0`, `moe_pad_expert_input_to_capacity: true` itself. Presets.
DGXC_TOKEN_DROP = ("deepseek-v3", "grok-1", "llama4-maverick")
# NeMo's performance summary pages (25.04, 25.07): scripts/performance/llm/pretrain_mixtral_8x7b.py and
# pretrain_llama4_e16.py at v2.3.0 and v2.4.0 call `pretrain_recipe(performance_mode=True)`, whose
# recipes/mixtral_8x7b.py and llama4_e16.py `pretrain_performance_optimizations` add the callback.
NEMO_DOCS_TOKEN_DROP = ("mixtral-8x7b", "llama4-scout")
