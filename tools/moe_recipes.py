"""Which Megatron-Bridge performance recipe ran each mixture-of-experts row of the Bridge's
performance summaries, whether it overlapped the expert all-to-alls (`moe_a2a_overlap`,
Megatron-Core's `overlap_moe_expert_parallel_comm`) and which token dispatcher it ran
(`moe_flex_dispatcher_backend`). Prints the entries of `shardwise.analyses.public_moe.A2A_OVERLAP`,
`DISPATCHERS`, and of `shardwise.analyses.public_moe_recipes.RECOMPUTE_MODULES` and `LAYOUTS`.

The summaries name the NeMo container of each table, not the recipe; the Bridge's
docs/versions1.json names the Bridge release of each container (26.06.01 = 0.5.1, 26.06 = 0.5.0,
26.04.01 = 0.4.2, 26.04 = 0.4.0, 26.02.01 = 0.3.1, 26.02 = 0.3.0, 25.11 = 0.2.0, 26.08 = 0.6.0;
25.09 = 0.1.0rc3 kept its recipes in YAML and is not read). At that tag the recipe is a
`WorkloadBaseConfig` in scripts/performance/configs/<family>/; a row takes the settings of the
configs of its model, GPU and precision whose layout (tp, pp, vp, ep, mbs, gbs) is the row's, when they all
agree; where none has the row's layout, its recomputation alone is taken from those whose layout
differs from the row's in one setting, when they agree (the run launched with that one override on the
command line, the recompute modules left as the recipe's). Nothing is fitted: each setting is the recipe's.

    python tools/moe_recipes.py /path/to/Megatron-Bridge.git    # a clone with its tags
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import defaultdict

from shardwise.analyses import public_validation as pv

TAGS = {
    "25.11": "v0.2.0",
    "26.02": "v0.3.0",
    "26.02.01": "v0.3.1",
    "26.04": "v0.4.0",
    "26.04.01": "v0.4.2",
    "26.06": "v0.5.0",
    "26.06.01": "v0.5.1",
    "26.08": "v0.6.0",
}
FAMILIES = {
    "deepseek-v3": (
        "DEEPSEEK_V3_",
        ("deepseek/deepseek_workload_base_configs.py", "deepseek/workload_base_configs.py"),
    ),
    "qwen3-30b-a3b": ("QWEN3_30B_A3B_", ("qwen/qwen3_workload_base_configs.py", "qwen3/workload_base_configs.py")),
    "qwen3-235b-a22b": ("QWEN3_235B_A22B_", ("qwen/qwen3_workload_base_configs.py", "qwen3/workload_base_configs.py")),
    "gpt-oss-120b": ("GPT_OSS_120B_", ("gpt_oss/gpt_oss_workload_base_configs.py", "gpt_oss/workload_base_configs.py")),
    "kimi-k2": ("KIMI_K2_", ("kimi/kimi_workload_base_configs.py",)),
    "nemotron-3-nano-30b-a3b": (
        "NEMOTRON_3_NANO_",
        ("nemotronh/nemotron_3_nano_workload_base_configs.py", "nemotronh/nemotron_3_workload_base_configs.py"),
    ),
}
PRECISIONS = {"mxfp8": ("FP8_MX",), "bf16": ("BF16",), "fp8": ("FP8_CS", "FP8_SC")}  # the recipes' names
GPUS = {"dgx-b200": "B200", "dgx-b300": "B300", "gb200-nvl72": "GB200", "gb300-nvl72": "GB300", "dgx-h100": "H100"}
DEFAULTS = {  # WorkloadBaseConfig's defaults (scripts/performance/utils/utils.py)
    "tensor_model_parallel_size": 1,
    "pipeline_model_parallel_size": 1,
    "virtual_pipeline_model_parallel_size": None,
    "expert_model_parallel_size": 1,
    "micro_batch_size": 1,
    "moe_a2a_overlap": False,
    "recompute_modules": None,
    "recompute_num_layers": None,
    "pp_layout": None,
    "moe_flex_dispatcher_backend": None,
    "cutedsl_fused_grouped_mlp": False,
    "cuda_graph_impl": None,
}
# DeepSeek-V3's pipeline layout when its WorkloadBaseConfig names no pp_layout: the recipe's map by
# (pp, vp) (src/megatron/bridge/recipes/deepseek/deepseek_v3.py `set_deepseek_v3_pipeline_model_
# parallel_layout`, the same from v0.2.0 to v0.5.1), written as Megatron-Core layout strings
# (E embedding, t decoder layer, m MTP module, L loss, | between model chunks); None: even split.
DEEPSEEK_LAYOUTS = {
    (4, 1): "Et*16|t*16|t*16|t*13mL",
    (8, 1): "Et*8|(t*8|)*6t*5mL",
    (4, 2): "Et*8|(t*8|)*6t*5mL",
    (16, 1): "Et*4|(t*4|)*14tmL",
    (8, 2): "Et*4|(t*4|)*14tmL",
    (4, 4): "Et*4|(t*4|)*14tmL",
}
# What a recipe recomputes when its WorkloadBaseConfig names no recompute_modules: DeepSeek-V3's and
# Kimi K2's performance scripts set recompute_granularity "selective" (configs/deepseek/
# deepseek_llm_pretrain.py `set_deepseek_v3_common_configs`; configs/kimi/kimi_llm_pretrain.py, and
# at v0.3.0 the recipe src/megatron/bridge/recipes/kimi/kimi_k2.py) with recompute_modules None, which
# Megatron-Core's TransformerConfig turns into ["core_attn"]; Qwen3's set recompute_granularity None
# (configs/qwen/qwen3_llm_pretrain.py `set_qwen3_common_configs`), GPT-OSS's recipe None
# (src/megatron/bridge/recipes/gpt_oss/gpt_oss.py) and Nemotron 3 Nano's (recipes/nemotronh/
# nemotron_3_nano.py, v0.3.0 - v0.5.1: recompute_granularity None): nothing recomputed. With recompute_modules given,
# utils/overrides.py `_set_recompute_overrides` sets the granularity "selective".
BASE_RECOMPUTE = {
    "deepseek-v3": ("core_attn",),
    "kimi-k2": ("core_attn",),
    "qwen3-30b-a3b": (),
    "qwen3-235b-a22b": (),
    "gpt-oss-120b": (),
    "nemotron-3-nano-30b-a3b": (),
}
LAYOUT = (
    ("tp", "tensor_model_parallel_size"),
    ("pp", "pipeline_model_parallel_size"),
    ("vp", "virtual_pipeline_model_parallel_size"),
    ("ep", "expert_model_parallel_size"),
    ("mbs", "micro_batch_size"),
    ("gbs", "global_batch_size"),
)


class _Config(dict):
    def __getattr__(self, key: str):
        try:
            return self[key]
        except KeyError as exc:
            raise AttributeError(key) from exc


def _configs(repo: str, tag: str, files: tuple[str, ...]) -> dict[str, _Config]:
    """The WorkloadBaseConfig objects of one file at `tag` (its imports replaced by stand-ins)."""
    for name in files:
        path = f"scripts/performance/configs/{name}"
        done = subprocess.run(["git", "-C", repo, "show", f"{tag}:{path}"], capture_output=True, text=True)
        if done.returncode:
            continue
        source = re.sub(r"^(from|import) .*$", "", done.stdout, flags=re.M)
        names: dict = {
            "WorkloadBaseConfig": lambda **kw: _Config({**DEFAULTS, **kw}),
            "replace": lambda c, **kw: _Config({**c, **kw}),
        }
        exec(compile(source, path, "exec"), names)  # a recipe file of plain assignments
        return {k: v for k, v in names.items() if isinstance(v, _Config)}
    return {}


def _value(row: dict[str, str], key: str) -> int | None:
    v = row[key].strip()
    if key == "vp" and v in ("", "1", "n/a"):
        return None
    return int(float(v)) if v else None


def recomputed(model: str, config: dict) -> tuple[str, ...]:
    """The modules the recipe recomputes selectively (empty: none), from its WorkloadBaseConfig."""
    if config.get("recompute_num_layers") is not None:
        raise ValueError(f"{model}: a recipe recomputes whole layers (recompute_num_layers); not tabled")
    modules = config.get("recompute_modules")
    return BASE_RECOMPUTE[model] if modules is None else tuple(modules)


def layout(model: str, config: dict) -> str | None:
    """The pipeline layout string a DeepSeek-V3 recipe runs (None: other models, or an even split)."""
    if model != "deepseek-v3":
        return None
    pp, vp = config.get("pipeline_model_parallel_size"), config.get("virtual_pipeline_model_parallel_size") or 1
    return config.get("pp_layout") or DEEPSEEK_LAYOUTS.get((pp, vp))


def dispatcher(config: dict, gpu: str, version: str) -> str:
    """The token dispatcher a recipe runs: "flex" where its WorkloadBaseConfig names a flex backend
    that the GPU takes (src/megatron/bridge/training/flex_dispatcher_backend.py
    `apply_flex_dispatcher_backend` sets moe_token_dispatcher_type "flex"; it skips DeepEP on GB200
    and GB300, and at v0.2.0 HybridEP on all but GB200 and GB300), else the model provider's
    moe_token_dispatcher_type, "alltoall" for every family here (models/qwen/qwen_provider.py,
    gpt_oss/gpt_oss_provider.py, deepseek/deepseek_provider.py, kimi/kimi_provider.py)."""
    backend = config.get("moe_flex_dispatcher_backend")
    grace = gpu in ("GB200", "GB300")
    if (backend == "deepep" and not grace) or (backend == "hybridep" and (grace or version != "25.11")):
        return "flex"
    return "alltoall"


def expert_mlp(config: dict) -> str:
    """How a recipe runs its experts' MLP: "fused" where its WorkloadBaseConfig sets
    cutedsl_fused_grouped_mlp (scripts/performance/utils/overrides.py, v0.5.0 on: Megatron-Core's
    use_transformer_engine_op_fuser, Transformer Engine's CuTe DSL kernel that runs fc1 over all local
    experts with the SwiGLU and the MXFP8 cast of fc2's input in its epilogue), its CUDA graphs' impl
    beside it ("full_iteration": no host in the loop, the dispatchers' sync-free path); else
    "grouped_linear" (Transformer Engine's GroupedLinear: one cuBLAS GEMM per local expert over its 4
    compute streams, the activation and the casts as kernels of their own). Listed, not priced."""
    kind = "fused" if config.get("cutedsl_fused_grouped_mlp") else "grouped_linear"
    return f"{kind}/{config.get('cuda_graph_impl') or 'eager'}"


def main(repo: str) -> None:
    found: dict[tuple[str, str, str, str], set[bool]] = defaultdict(set)
    modules: dict[tuple[str, str, str, str], set[tuple[str, ...]]] = defaultdict(set)
    layouts: dict[tuple[str, str, str, str], set[str | None]] = defaultdict(set)
    dispatchers: dict[tuple[str, str, str, str], set[str]] = defaultdict(set)
    mlps: dict[tuple[str, str, str, str], set[str]] = defaultdict(set)
    for raw in pv.raw_rows():
        row = pv.public_moe.resolved(raw)
        version = row["framework_version"]
        if row["moe"] != "yes" or "Megatron-Bridge docs/performance-summary" not in row["source"]:
            continue
        if version not in TAGS or row["model"] not in FAMILIES or row["system"] not in GPUS:
            continue
        prefix, files = FAMILIES[row["model"]]
        gpu = GPUS[row["system"]]
        recipes = [
            c
            for name, c in _configs(repo, TAGS[version], files).items()
            if name.startswith(prefix)
            and re.search(rf"_{gpu}_", name)
            and any(f"_{gpu}_{p}" in name for p in PRECISIONS.get(row["precision"], ()))
        ]
        off = [sum(c.get(cfg) != _value(row, key) for key, cfg in LAYOUT) for c in recipes]
        matches = [c for c, n in zip(recipes, off, strict=True) if n == 0]
        near = [c for c, n in zip(recipes, off, strict=True) if n == 1]
        overlap = {bool(c["moe_a2a_overlap"]) for c in matches}
        status = "no recipe with this layout" if not matches else ("recipes disagree" if len(overlap) > 1 else "")
        print(
            f"{row['id']} {version:9s} {row['model']:16s} {row['system']:12s} {row['precision']:6s} "
            f"{[_value(row, k) for k, _ in LAYOUT]} overlap={sorted(overlap)} {status}"
        )
        key = (row["model"], row["system"], row["precision"], version)
        if len(overlap) == 1:
            found[key] |= overlap
        layouts[key] |= {layout(row["model"], c) for c in matches}
        dispatchers[key] |= {dispatcher(c, gpu, version) for c in matches}
        mlps[key] |= {expert_mlp(c) for c in matches}
        # the recomputation: the recipes of the row's layout, else those one layout setting away from it
        # (launched with that one override, the recompute modules left as the recipe's), where they agree
        redone = {recomputed(row["model"], c) for c in matches or near}
        if len(redone) == 1:
            modules[key] |= redone
    print("\nA2A_OVERLAP entries (model, system, precision, container):")
    for key, value in sorted(found.items()):
        if value == {True}:
            print(f"    {key!r},")
    print("\nRECOMPUTE_MODULES entries ((model, system, precision, container): modules):")
    for key, value in sorted(modules.items()):
        if len(value) == 1:
            print(f"    {key!r}: {next(iter(value))!r},")
    print("\nDISPATCHERS entries ((model, system, precision, container): dispatcher):")
    for key, value in sorted(dispatchers.items()):
        if len(value) == 1:
            print(f"    {key!r}: {next(iter(value))!r},")
    print("\nExpert MLP of the recipes ((model, system, precision, container): kind/CUDA graphs), not priced:")
    for key, value in sorted(mlps.items()):
        if len(value) == 1:
            print(f"    {key!r}: {next(iter(value))!r},")
    print("\nLAYOUTS entries ((model, system, precision, container): Megatron-Core pipeline layout):")
    for key, value in sorted(layouts.items()):
        if len(value) == 1 and None not in value:
            print(f"    {key!r}: {next(iter(value))!r},")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
