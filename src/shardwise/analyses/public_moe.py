"""The mixture-of-experts rows of the public runs: which preset each names, and the expert
tensor parallelism its recipe used (the tables print tp, pp, cp, vp, ep, but not etp).

The normalised table leaves `model` empty for models shardwise did not know when it was copied;
`preset_for` maps the published names (model column, or the model cell the parse notes quote
for variant rows such as "DeepSeekV3 (tokendrop)"). Nothing here is fitted: each mapping is a
name, each etp a recipe's setting with its source.
"""

from __future__ import annotations

import re

# (words that must all appear in the lower-cased published name, preset), first match wins.
NAMES = (
    (("deepseek", "v4"), ""),  # DeepSeek-V4: architecture not checked, no preset
    (("deepseek",), "deepseek-v3"),
    (("qwen3", "235b"), "qwen3-235b-a22b"),
    (("qwen3", "30b"), "qwen3-30b-a3b"),
    (("gpt", "oss", "120b"), "gpt-oss-120b"),
    (("gpt", "oss", "20b"), "gpt-oss-20b"),
    (("kimi",), "kimi-k2"),
    (("grok",), "grok-1"),
    (("maverick",), "llama4-maverick"),
    (("scout",), "llama4-scout"),
    (("moonlight",), "moonlight-16b"),
    (("mixtral",), "mixtral-8x7b"),
)

# Expert tensor parallelism of the recipes behind the rows. Megatron-Bridge's performance
# configs set expert_tensor_parallel_size 1 for every MoE model (scripts/performance/configs/,
# commit b7b4e11b), as do NeMo 25.x's DeepSeek-V3 and Llama 4 B200/GB200 settings; the exceptions:
ETP_EXCEPTIONS = (
    # dgxc-benchmarking Grok-1 314B on GB200/GB300 (NeMo 25.09 recipe): TP4, EP8, ETP4
    (("grok",), "gb200-nvl72", 4),
    (("grok",), "gb300-nvl72", 4),
    # NeMo 25.x recommended_model_configs and dgxc-benchmarking Llama 4 Maverick on H100: TP4, EP128, ETP4
    (("maverick",), "dgx-h100", 4),
)
DEFAULT_ETP = 1

# The token dispatcher of the recipes: Megatron-Bridge's performance configs run DeepSeek-V3 and
# Qwen3-30B-A3B with the flex dispatcher (HybridEP, DeepEP on B200) on every GPU, Qwen3-235B-A22B and
# Kimi K2 with it on GB200/GB300 and with alltoall elsewhere, GPT-OSS with alltoall (configs/,
# utils/overrides.py, commit b7b4e11b); NeMo 25.x runs DeepSeek-V3 on H100 with DeepEP
# (scripts/performance/llm/pretrain_deepseek_v3.py) and the others with alltoall.
FLEX = (
    ("deepseek-v3", ()),
    ("qwen3-30b-a3b", ()),
    ("qwen3-235b-a22b", ("gb200-nvl72", "gb300-nvl72")),
    ("kimi-k2", ("gb200-nvl72", "gb300-nvl72")),
)


def _name(row: dict[str, str]) -> str:
    """The published model name: the model cell quoted by the parse notes for variant rows."""
    quoted = re.search(r"model cell '([^']+)'", row.get("parse_notes", ""))
    if row["model_raw"] in ("tokendrop", "dropless", "w/ MTP", "w/o MTP") and quoted:
        return quoted.group(1)
    return row["model_raw"]


def preset_for(row: dict[str, str]) -> str:
    """The preset a mixture-of-experts row names ("" when shardwise has none)."""
    name = _name(row).lower().replace("_", " ").replace("-", " ")
    for words, preset in NAMES:
        if all(w in name for w in words):
            return preset
    return ""


def expert_tp(row: dict[str, str]) -> int:
    """The expert tensor parallelism of the row's recipe (module docstring)."""
    name = _name(row).lower()
    for words, system, etp in ETP_EXCEPTIONS:
        if row["system"] == system and all(w in name for w in words):
            return etp
    return DEFAULT_ETP


def dispatcher(row: dict[str, str]) -> str:
    """The token dispatcher of the row's recipe, "flex" or "alltoall" (see FLEX)."""
    for preset, systems in FLEX:
        if row["model"] == preset and (not systems or row["system"] in systems):
            return "flex"
    return "alltoall"


def is_split_duplicate(row: dict[str, str]) -> bool:
    """A row the reader split off another's model cell ("DeepSeekV3 (w/o MTP)"): the same run."""
    return "duplicate of the previous row" in row.get("parse_notes", "")


def resolved(row: dict[str, str]) -> dict[str, str]:
    """A mixture-of-experts row with its preset filled in, and the preset's layers where the table
    gives none (the NeMo tables run the whole model); other rows unchanged."""
    if row["moe"] != "yes":
        return row
    from shardwise import presets

    model = row["model"] or preset_for(row)
    layers = row["layers"].strip() or (str(presets.model(model).layers) if model else "")
    return {**row, "model": model, "layers": layers}
