"""The mixture-of-experts rows of the public runs: which preset each names, and what its recipe
set that the tables do not print: the expert tensor parallelism (they print tp, pp, cp, vp, ep,
but not etp), the token dispatcher and the overlap of the expert all-to-alls.

The normalised table leaves `model` empty for models shardwise did not know when it was copied;
`preset_for` maps the published names (model column, or the model cell the parse notes quote
for variant rows such as "DeepSeekV3 (tokendrop)"). Nothing here is fitted: each mapping is a
name, each etp, dispatcher and overlap a recipe's setting with its source.
"""

from __future__ import annotations

import re

from shardwise.analyses.public_moe_recipes import (
    BRIDGE_TOKEN_DROP,
    DGXC_TOKEN_DROP,
    LAYOUTS,
    NEMO_DOCS_TOKEN_DROP,
    RECOMPUTE_MODULES,
    TOKEN_DROP_FACTOR,
)

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
    # Nemotron 3 Nano: Mamba-2, attention and MoE layers of plain experts (a hybrid preset); Super
    # and Ultra route through latent experts (HF NemotronHConfig moe_latent_size), not modelled
    (("nemotron", "3", "nano"), "nemotron-3-nano-30b-a3b"),
    (("nemotron", "3", "super"), ""),
    (("nemotron", "3", "ultra"), ""),
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

# Bridge rows that ran another dispatcher than FLEX says: the recipe at the container's tag
# (`moe_flex_dispatcher_backend`, found as A2A_OVERLAP is; tools/moe_recipes.py DISPATCHERS), and the
# 25.09 runs (v0.1.0rc3 scripts/performance/run_script.py: every Qwen3 run and DeepSeek-V3 on
# B200/GB200 drop tokens, `apply_moe_token_drop`, which needs the alltoall dispatcher -- the table's
# "(tokendrop)" cells; priced as `token_drop` says).
_NEMO_25_09 = (
    [("qwen3-30b-a3b", s, "fp8") for s in ("dgx-b200", "dgx-h100", "gb200-nvl72")]
    + [(m, "gb200-nvl72", "mxfp8") for m in ("qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3")]
    + [("qwen3-235b-a22b", "gb200-nvl72", "fp8"), ("deepseek-v3", "gb200-nvl72", "fp8")]
    + [("deepseek-v3", "dgx-b200", p) for p in ("fp8", "mxfp8")]
)
DISPATCHER_EXCEPTIONS = {
    **{(*k, "25.09"): "alltoall" for k in _NEMO_25_09},
    ("deepseek-v3", "dgx-b200", "mxfp8", "25.11"): "alltoall",
    ("qwen3-30b-a3b", "dgx-b200", "mxfp8", "25.11"): "alltoall",
    ("qwen3-30b-a3b", "dgx-b200", "mxfp8", "26.02"): "alltoall",
    **{("gpt-oss-120b", s, "bf16", "26.04"): "flex" for s in ("dgx-b200", "dgx-b300", "gb200-nvl72")},
    **{("gpt-oss-120b", s, "mxfp8", v): "flex" for s in ("gb200-nvl72", "gb300-nvl72") for v in ("26.06", "26.06.01")},
    ("gpt-oss-120b", "dgx-b300", "bf16", "26.04.01"): "flex",
    ("gpt-oss-120b", "dgx-b300", "mxfp8", "26.06"): "flex",
    ("qwen3-235b-a22b", "dgx-b300", "mxfp8", "26.04.01"): "flex",
    ("qwen3-235b-a22b", "dgx-h100", "fp8", "26.02.01"): "flex",
}

# NeMo AutoModel's performance summary (docs/performance-summary.md, 2025-10 to 2026-01) prints
# EP "-" for GPT-OSS, but the benchmark configs it links run expert parallelism over every GPU
# (examples/benchmark/configs/gptoss_120b_te_deepep.yaml: distributed.ep_size 64 on 8 nodes;
# gptoss_20b_te_deepep.yaml: ep_size 8 on one node), and every row's "Kernel Optimizations" names
# DeepEP (backend.enable_deepep: the flex dispatcher).
AUTOMODEL_SUMMARY = "Automodel docs/performance-summary"
AUTOMODEL_EP = {"gpt-oss-120b": 64, "gpt-oss-20b": 8}


# The runs of Megatron-Bridge's performance summaries whose recipe overlapped the expert all-to-alls
# (`moe_a2a_overlap`: Megatron-Core's `overlap_moe_expert_parallel_comm`, the combined 1F1B of
# `Plan.moe_overlap`): (model, system, precision, NeMo container). The summaries name only the
# container; docs/versions1.json of NVIDIA-NeMo/Megatron-Bridge names its Bridge release (25.11 =
# 0.2.0, 26.02 = 0.3.0, 26.02.01 = 0.3.1, 26.04 = 0.4.0, 26.04.01 = 0.4.2, 26.06 = 0.5.0, 26.06.01 =
# 0.5.1), whose scripts/performance/configs/<family>/*workload_base_configs.py hold the recipe of
# that model, GPU and precision; an entry is kept only where that recipe's layout (tp, pp, vp, ep,
# mbs, gbs) is the published one. Listed by tools/moe_recipes.py, with 25.09's (v0.1.0rc3, whose
# run_script.py overlaps DeepSeek-V3's on H100 alone); the rest ran without it or are unknown (26.08).
A2A_OVERLAP = frozenset(
    {
        ("deepseek-v3", "dgx-b200", "mxfp8", "26.04.01"),
        ("deepseek-v3", "dgx-h100", "fp8", "25.09"),  # v0.1.0rc3 run_script.py: A2A_1F1B on H100
        ("deepseek-v3", "gb200-nvl72", "mxfp8", "26.06"),
        ("deepseek-v3", "gb200-nvl72", "mxfp8", "26.06.01"),
        ("deepseek-v3", "gb300-nvl72", "mxfp8", "26.06"),
        ("deepseek-v3", "gb300-nvl72", "mxfp8", "26.06.01"),
        ("gpt-oss-120b", "gb200-nvl72", "bf16", "26.04"),
        ("gpt-oss-120b", "gb200-nvl72", "bf16", "26.04.01"),
        ("gpt-oss-120b", "gb200-nvl72", "mxfp8", "26.06"),
        ("gpt-oss-120b", "gb200-nvl72", "mxfp8", "26.06.01"),
        ("gpt-oss-120b", "gb300-nvl72", "mxfp8", "26.06"),
        ("gpt-oss-120b", "gb300-nvl72", "mxfp8", "26.06.01"),
        ("qwen3-235b-a22b", "dgx-b300", "mxfp8", "26.02"),
        ("qwen3-235b-a22b", "dgx-h100", "fp8", "25.11"),
        ("qwen3-235b-a22b", "dgx-h100", "fp8", "26.02"),
        ("qwen3-235b-a22b", "dgx-h100", "fp8", "26.02.01"),
        ("qwen3-235b-a22b", "dgx-h100", "fp8", "26.04"),
        ("qwen3-235b-a22b", "dgx-h100", "fp8", "26.04.01"),
        ("qwen3-235b-a22b", "gb200-nvl72", "mxfp8", "26.06"),
        ("qwen3-235b-a22b", "gb200-nvl72", "mxfp8", "26.06.01"),
        ("qwen3-235b-a22b", "gb300-nvl72", "mxfp8", "26.06"),
        ("qwen3-235b-a22b", "gb300-nvl72", "mxfp8", "26.06.01"),
        ("qwen3-30b-a3b", "dgx-b300", "mxfp8", "26.06"),
        ("qwen3-30b-a3b", "dgx-h100", "fp8", "26.02"),
        ("qwen3-30b-a3b", "gb200-nvl72", "mxfp8", "26.06"),
        ("qwen3-30b-a3b", "gb200-nvl72", "mxfp8", "26.06.01"),
        ("qwen3-30b-a3b", "gb300-nvl72", "mxfp8", "26.06"),
        ("qwen3-30b-a3b", "gb300-nvl72", "mxfp8", "26.06.01"),
    }
)
BRIDGE_SUMMARIES = "Megatron-Bridge docs/performance-summary"


# NVIDIA dgxc-benchmarking's DeepSeek-V3 pre-training (deepseek_v3/pretraining/launch.sh, the same
# at 68eaf7e117, 1f6d9f40e4 and 6be5ea0e19, the commits its README tables span) passes
# `--recompute_modules $RM` to NeMo's scripts/performance/llm/pretrain_deepseek_v3: RM='mla_up_proj'
# on H100, 'core_attn' on GB200.
DGXC_DEEPSEEK = "NVIDIA/dgxc-benchmarking deepseek_v3"
DGXC_RECOMPUTE = {("deepseek-v3", "dgx-h100"): ("mla_up_proj",), ("deepseek-v3", "gb200-nvl72"): ("core_attn",)}
# The Bridge releases whose DeepSeek-V3 recipe trains one multi-token-prediction module
# (recipes/deepseek/deepseek_v3.py: `mtp_num_layers` 1, v0.2.0-v0.5.1 = containers 25.11-26.06.01;
# the performance scripts keep it); 25.09's (v0.1.0rc3 and v0.1.0rc4) has the same default and its
# run_script.py keeps it, but only its H100 layout is tabled (LAYOUTS); 26.08 has none, so unknown.
# Applied with the recipe's layout only (`mtp_layers`).
MTP_CONTAINERS = ("25.09", "25.11", "26.02", "26.02.01", "26.04", "26.04.01", "26.06", "26.06.01")


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


def expert_parallel(row: dict[str, str]) -> int | None:
    """The expert parallelism of the row's recipe where the table leaves it out (AUTOMODEL_EP), else
    None (the table's)."""
    return AUTOMODEL_EP.get(row["model"]) if AUTOMODEL_SUMMARY in row["source"] else None


def dispatcher(row: dict[str, str]) -> str:
    """The token dispatcher of the row's recipe, "flex" or "alltoall" (see DISPATCHER_EXCEPTIONS,
    then FLEX; NeMo AutoModel's runs all name DeepEP, AUTOMODEL_EP; a run that dropped tokens,
    `token_drop`, ran alltoall: Megatron-Core's drop-and-pad path, asserted by NeMo's callback)."""
    if AUTOMODEL_SUMMARY in row["source"]:
        return "flex"
    if token_drop(row):
        return "alltoall"
    key = (row["model"], row["system"], row["precision"], row.get("framework_version", ""))
    if BRIDGE_SUMMARIES in row["source"] and key in DISPATCHER_EXCEPTIONS:
        return DISPATCHER_EXCEPTIONS[key]
    for preset, systems in FLEX:
        if row["model"] == preset and (not systems or row["system"] in systems):
            return "flex"
    return "alltoall"


# The runs whose recipe ran the experts' fused grouped MLP (`cutedsl_fused_grouped_mlp`, Bridge v0.5.0 /
# NeMo 26.06 on: Megatron-Core's `use_transformer_engine_op_fuser`, one CuTe DSL kernel over all local
# experts), always beside a full-iteration CUDA graph (`cuda_graph_impl` "local"): (model, system,
# precision, NeMo container), found as A2A_OVERLAP is and listed by tools/moe_recipes.py. They run as
# `Plan.cuda_graph_scope` full_iteration: no host in the loop, none of GroupedLinear's per-expert host
# work (`physics.moe_grouped.grouped_linear_host_ops`). The others ran GroupedLinear eagerly or under partial
# graphs (attention, router: the experts stay eager).
FUSED_GROUPED_MLP = frozenset(
    {
        *(
            (m, s, "mxfp8", v)
            for m in ("deepseek-v3", "gpt-oss-120b", "qwen3-235b-a22b", "qwen3-30b-a3b")
            for s in ("gb200-nvl72", "gb300-nvl72")
            for v in ("26.06", "26.06.01")
        ),
        ("qwen3-30b-a3b", "dgx-b300", "mxfp8", "26.06"),
    }
)


def cuda_graph_scope(row: dict[str, str]) -> str | None:
    """The CUDA graphs of the row's recipe as `Plan.cuda_graph_scope` (see FUSED_GROUPED_MLP), None: eager."""
    key = (row["model"], row["system"], row["precision"], row.get("framework_version", ""))
    return "full_iteration" if BRIDGE_SUMMARIES in row["source"] and key in FUSED_GROUPED_MLP else None


DGXC = "NVIDIA/dgxc-benchmarking"
NEMO_DOCS = "docs.nvidia.com/nemo-framework"


def token_drop(row: dict[str, str]) -> float:
    """The capacity factor the row's recipe dropped tokens at, padding every expert to it
    (`public_moe_recipes.BRIDGE_TOKEN_DROP`, DGXC_TOKEN_DROP, NEMO_DOCS_TOKEN_DROP); 0: dropless."""
    source, model = row["source"], row["model"]
    if BRIDGE_SUMMARIES in source:
        systems = BRIDGE_TOKEN_DROP.get((row.get("framework_version", ""), model))
        dropped = systems is not None and (not systems or row["system"] in systems)
    else:
        dgxc = DGXC in source and model in DGXC_TOKEN_DROP
        dropped = dgxc or (NEMO_DOCS in source and model in NEMO_DOCS_TOKEN_DROP)
    return TOKEN_DROP_FACTOR if dropped else 0.0


def a2a_overlap(row: dict[str, str]) -> bool:
    """Whether the row's recipe overlapped the expert all-to-alls (see A2A_OVERLAP)."""
    key = (row["model"], row["system"], row["precision"], row.get("framework_version", ""))
    return BRIDGE_SUMMARIES in row["source"] and key in A2A_OVERLAP


def recompute_modules(row: dict[str, str]) -> tuple[str, ...] | None:
    """What the row's recipe recomputes selectively (see RECOMPUTE_MODULES, DGXC_RECOMPUTE): a tuple
    of modules (empty: nothing), None where no recipe of the row's layout is tabled."""
    if DGXC_DEEPSEEK in row["source"]:
        return DGXC_RECOMPUTE.get((row["model"], row["system"]))
    key = (row["model"], row["system"], row["precision"], row.get("framework_version", ""))
    return RECOMPUTE_MODULES.get(key) if BRIDGE_SUMMARIES in row["source"] else None


def mtp_layers(row: dict[str, str]) -> int:
    """The multi-token-prediction modules the row's recipe trains (see MTP_CONTAINERS), taken with
    the recipe's pipeline layout that places them (`stage_layers`): where no recipe of the row's
    layout is found, its split is unknown and neither is applied."""
    bridge = BRIDGE_SUMMARIES in row["source"] and row.get("framework_version", "") in MTP_CONTAINERS
    return 1 if bridge and row["model"] == "deepseek-v3" and stage_layers(row) is not None else 0


def layout_chunks(layout: str) -> list[int]:
    """The decoder layers of each model chunk of a Megatron-Core pipeline layout string
    ("Et*4|(t*4|)*14tmL": 4, then 14 chunks of 4, then 1)."""
    text = layout.replace(" ", "")
    repeat = re.compile(r"\(([^()]*)\)\*(\d+)")
    while "(" in text:
        text = repeat.sub(lambda m: m.group(1) * int(m.group(2)), text)
    chunks = []
    for chunk in text.split("|"):
        chunks.append(sum(int(n or 1) for kind, n in re.findall(r"([EtmL])(?:\*(\d+))?", chunk) if kind == "t"))
    return chunks


def stage_layers(row: dict[str, str]) -> tuple[int, ...] | None:
    """Each pipeline stage's decoder layers under the row's recipe layout (see LAYOUTS): stage s
    holds chunks s, s + pp, s + 2 pp, ... None where no layout is tabled or pp = 1."""
    key = (row["model"], row["system"], row["precision"], row.get("framework_version", ""))
    layout = LAYOUTS.get(key) if BRIDGE_SUMMARIES in row["source"] else None
    pp = int(row["pp"] or 1)
    if layout is None or pp == 1:
        return None
    chunks = layout_chunks(layout)
    counts = tuple(sum(chunks[s::pp]) for s in range(pp))
    if len(chunks) % pp or sum(counts) != int(row["layers"]) or min(counts) < 1:
        return None  # not this row's layout
    return counts


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
