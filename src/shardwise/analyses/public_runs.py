"""The public training runs' CSV (`data/public_training_runs.csv`, see `data/PUBLIC_RUNS.md`) row by
row: the table a row is reported under, why the model cannot express it (`skip_reason`), the
`TrainingRequest` that prices it, its published figure as seconds per step, its label and layout key.
`public_validation` predicts the rows and `public_scores` scores them.
"""

from __future__ import annotations

import csv
from functools import cache
from importlib import resources

from shardwise.analyses import public_lora, public_moe, public_nemo1_launcher, public_stacks
from shardwise.errors import SpecError
from shardwise.physics.lora import DEFAULT_RANK, DEFAULT_TARGETS

# The FSDP group of JAX runs whose `fsdp` cell is empty, as their launch configuration states it:
# NVIDIA/dgxc-benchmarking paxml/configure.sh at 35a9aecc8d passes --fdl.DCN_MESH_SHAPE=[DP, FSDP, 1]
# with FSDP=1 (5B, DP = nodes) or 16 (175B, DP = nodes / 16) over the configs' ICI_MESH_SHAPE =
# [1, 8, 1] (google/paxml paxml/contrib/gpu/scripts_gpu/configs.py GPT5B, GPT175B, 04516ac8)
LAUNCH_FSDP_GROUPS = (
    ("dgxc-benchmarking paxml/README_5b", "gpt3-5b", 8),
    ("dgxc-benchmarking paxml/README_175b", "gpt3-175b", 128),
)


def launch_shard_group(row: dict[str, str]) -> int:
    """`LAUNCH_FSDP_GROUPS`' group of the row where it is smaller than its data parallelism (hybrid
    sharding, `Plan.shard_group`), else 0."""
    facts = (g for s, m, g in LAUNCH_FSDP_GROUPS if s in row["source"] and m == row["model"] and not row["fsdp"])
    group = next(facts, 0)
    return group if group < int(row["dp"] or 0) else 0


@cache
def raw_rows() -> tuple[dict[str, str], ...]:
    text = resources.files("shardwise.data").joinpath("public_training_runs.csv").read_text(encoding="utf-8")
    return tuple(csv.DictReader(text.splitlines()))


def source_of(row: dict[str, str]) -> str:
    """The table a row is reported under: the publishing repository or site."""
    src = row["source"]
    for key, name in (
        ("dgxc-benchmarking", "NVIDIA dgxc-benchmarking"),
        ("Megatron-Bridge", "NVIDIA-NeMo Megatron-Bridge"),
        ("Automodel", "NVIDIA-NeMo Automodel"),
        ("NeMo-Framework-Launcher", "NVIDIA NeMo-Framework-Launcher"),  # before NVIDIA/NeMo, its prefix
        ("NVIDIA/NeMo", "NVIDIA NeMo performance docs"),
        ("docs.nvidia.com", "NVIDIA NeMo performance docs"),
        ("Pai-Megatron", "alibaba Pai-Megatron-Patch"),
        ("aws.amazon.com/blogs/machine-learning", "AWS Machine Learning Blog"),
    ):
        if key in src:
            return name
    words = src.split(" ")
    if words[0] == "GitHub" and len(words) > 1:  # the repository that published it
        return words[1]
    return words[0]


def as_int(value: str, default: int | None = None) -> int | None:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return default


# Rows whose published layout the same source contradicts, each with its evidence (found while
# reading the dev split's mis-ranked groups; the rows are skipped, not corrected).
LAYOUT_CONTRADICTED = {
    "PUB-0167": "the 26.02.01 table prints VP n/a and MBS 2; that release's recipe runs pp4 vp5 mbs1 "
    "(Megatron-Bridge v0.3.x scripts/performance/configs/llama/llama3_workload_base_configs.py, "
    "LLAMA3_70B_PRETRAIN_CONFIG_GB300_FP8_MX_V2)",
    "PUB-0165": "the 26.02.01 table prints tp1 pp1 vp n/a and MBS 2 for NVFP4 on 64 GB300 (613 GB a GPU by "
    "our count); that release's recipe runs pp4 vp5 mbs1 (Megatron-Bridge v0.3.x scripts/performance/configs/"
    "llama/llama3_workload_base_configs.py, LLAMA3_70B_PRETRAIN_CONFIG_GB300_NVFP4_V2, micro_batch_size's "
    "default 1)",
    "PUB-0274": "the 25.09 table's MXFP8 alternative prints MBS 2 beside GA 16, which is gbs 128 / (dp 8 x mbs 1); "
    "that release's recipe runs tp2 pp4 vp5 mbs1 (Megatron-Bridge v0.1.0rc4 scripts/performance/configs/"
    "llama3/llama3_70b_llm_pretrain.yaml, gb200 fp8_mx)",
    "PUB-0268": "the 25.11 table prints MBS 4 beside GA 2 for GPT-OSS 120B on 64 H100, where gbs 512 / (dp 16 x "
    "mbs 4) is 8; that release's recipe runs mbs 1, GA 32 (Megatron-Bridge v0.2.0 scripts/performance, "
    "GPT_OSS_120B_H100_BF16_BASE_CONFIG; micro_batch_size's default 1)",
    "PUB-0176": "the 26.02.01 table prints tp2 cp2 with 26.04.01's number (PUB-0081); that release's "
    "recipe runs tp4 cp1 (the same recipe file)",
    "PUB-0191": "the 26.02.01 table prints 26.02's pp2 vp12 ep8 for Qwen3-30B-A3B on 16 H100; that "
    "release's recipe runs pp1 ep16 with HybridEP (Megatron-Bridge v0.3.1 scripts/performance/configs/qwen/"
    "qwen3_workload_base_configs.py, QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1), and its 9,058 tokens/s "
    "per GPU is the pp1 ep16 runs' of 26.04-26.06 (8,826-8,960), not 26.02's 5,113",
    # dgxc-benchmarking's Llama 4 Maverick README of 2025-06-10 (68eaf7e117) gave the model 32 layers;
    # from 2025-06-18 (60d6fd33ba) the same tables, with the same step times, give 48 (PUB-0837..0844),
    # Maverick's count (its config.json: num_hidden_layers 48), and 32 is not divisible by pp x vp = 24
    **{
        f"PUB-{i:04d}": f"the 2025-06-10 README gives Llama 4 Maverick 32 layers; the same step time is "
        f"published from 2025-06-18 with its 48 layers (PUB-{i + 35:04d})"
        for i in range(802, 810)
    },
}


@cache
def _published_twice() -> dict[str, str]:
    """Row id -> why: the same number of the same source (model, system, GPUs, precision, batch)
    published under two layouts, one stated beside the table and one from the document's overview
    line. It is one run: the table's layout is kept, the overview's row skipped."""
    from collections import defaultdict

    same: dict[tuple[str, ...], list[dict[str, str]]] = defaultdict(list)
    for r in raw_rows():
        if r["measured"]:
            key = ("source", "model", "system", "num_gpus", "precision", "gbs", "measured")
            same[tuple(r[k] for k in key)].append(r)
    out = {}
    for rows in same.values():
        stated = [r for r in rows if "Overview" not in r["locator"] and r["tp"] and r["pp"]]
        for r in rows:
            if "Overview" in r["locator"] and stated and _layout_of(r) != _layout_of(stated[0]):
                out[r["id"]] = f"the same number as {stated[0]['id']}, whose table states another layout"
    return out


def _layout_of(row: dict[str, str]) -> tuple[str, ...]:
    return tuple(row[k] for k in ("tp", "pp", "cp", "vp", "mbs"))


def skip_reason(row: dict[str, str]) -> str:
    """Why the model cannot express this row (empty: it can)."""
    if row["id"] in LAYOUT_CONTRADICTED:
        return "published layout contradicted by its source"
    if row["id"] in _published_twice():
        return "published twice under two layouts (the table's is kept)"
    if row["moe"] == "yes" and public_moe.is_split_duplicate(row):
        return "duplicate of the previous row (one model cell split in two)"
    note = row["architecture_note"]
    # Nemotron 3: Mamba-2 + attention + MoE layers; Nano's plain experts are priced (`public_moe`),
    # Super's and Ultra's latent experts (moe_latent_size) are not
    if note == "hybrid mamba" and row["moe"] == "yes" and not public_moe.preset_for(row):
        return "hybrid mamba with latent mixture-of-experts layers (not modelled)"
    # latent attention and dense hybrid Mamba-2 models with a preset (Nemotron-H) are modelled
    if note and note != "mla" and not (note == "hybrid mamba" and (row["model"] or public_moe.preset_for(row))):
        return f"{note} (not modelled)"
    if row["workload"] not in ("pretrain", "sft", "lora"):
        return f"workload {row['workload']!r} is not a training step"
    stack = public_stacks.skip_reason(row)
    if stack:
        return stack
    if not row["model"] or not row["system"]:
        return "model or system not known to shardwise"
    if row["moe"] == "yes" and not as_int(row["ep"]):
        return "layout incomplete"
    if row["precision"] not in ("bf16", "fp16", "fp8", "mxfp8", "nvfp4"):
        return "precision not stated" if not row["precision"] else f"precision {row['precision']!r} not modelled"
    if any(as_int(row[k]) is None for k in ("tp", "pp", "dp", "mbs", "gbs", "seq_len", "layers", "num_gpus")):
        return "layout incomplete"
    if (as_int(row["pp"]) or 1) > 1 and _vp(row) is None:  # the pipeline's schedule is unknown
        return "layout incomplete"
    if not row["measured"]:
        return "no measurement"
    return ""


def _vp(row: dict[str, str]) -> int | None:
    """The row's virtual pipeline stages, or its launch script's where the row leaves them out
    (`public_nemo1_launcher.virtual_stages`); None where neither states them."""
    return as_int(row["vp"]) or public_nemo1_launcher.virtual_stages(row) or None


def request_for(row: dict[str, str]):
    """The `TrainingRequest` of a public run: the request layer's defaults (sequence parallelism
    on where tp > 1, the framework's ZeRO stage) with what the row states -- its stack and the
    kernels its notes name (`public_stacks`), its network, expert layout and LoRA rank."""
    from shardwise.requests.training import TrainingRequest

    preset, kernels = public_stacks.execution(row)
    moe = row["moe"] == "yes"
    drop = public_moe.token_drop(row) if moe else 0.0  # the recipe's capacity factor (0: dropless)
    modules = public_moe.recompute_modules(row) if moe else None  # the recipe's, where tabled
    lora = lora_recipe(row)
    kernels.update(public_lora.automodel_settings(row))  # AutoModel's config at the row's commit
    # the stated network, where the run spans servers (a one-server run keeps the system's)
    spans = int(row["num_gpus"]) > _system_gpus(row["system"])
    link, nics = (public_stacks.network(row) if spans else None) or (None, None)
    return TrainingRequest(
        model=row["model"],
        layers=int(row["layers"]),
        seq_len=int(row["seq_len"]),
        system=row["system"],
        num_gpus=int(row["num_gpus"]),
        inter_link=link,
        nics_per_node=nics,
        tp=int(row["tp"]),
        pp=int(row["pp"]),
        dp=int(row["dp"]),
        cp=as_int(row["cp"], 1) or 1,
        vpp=_vp(row) or 1,
        global_batch=int(row["gbs"]),
        micro_batch=int(row["mbs"]),
        recompute=kernels.pop("recompute", None)
        or ("selective" if modules else "none" if modules == () else None)
        or (lora and lora.recompute)
        or public_stacks.recompute(row),
        recompute_modules=kernels.pop("recompute_modules", None) or ",".join(modules or ()),
        zero=public_stacks.zero_stage(row, None),
        shard_group=public_stacks.shard_group(row) or launch_shard_group(row),
        precision=row["precision"],
        ep=(moe and public_moe.expert_parallel(row)) or as_int(row["ep"], 1) or 1,
        etp=public_moe.expert_tp(row) if moe else None,
        moe_dispatcher=public_moe.dispatcher(row) if moe else "alltoall",
        moe_overlap=moe and public_moe.a2a_overlap(row),
        moe_capacity_factor=drop,
        moe_pad_to_capacity=drop > 0,
        cuda_graph_scope=(public_moe.cuda_graph_scope(row) if moe else None) or kernels.pop("cuda_graph_scope", None),
        lora_rank=lora.rank if lora else 0,
        lora_targets=lora.targets if lora else DEFAULT_TARGETS,
        packed_document_len=lora.document_len if lora else public_nemo1_launcher.packed_document_len(row),
        pipeline_flushes=lora.flushes if lora else 1,
        mtp_layers=public_moe.mtp_layers(row) if moe else 0,
        **(_split(public_moe.stage_layers(row)) if moe else {}),
        framework=preset,
        **kernels,
    )


def _split(counts: tuple[int, ...] | None) -> dict[str, object]:
    """A recipe's pipeline split as request fields: the first and last stages' layers where the
    middle ones are even, else every stage's (empty: the default even split)."""
    if counts is None:
        return {}
    middle = set(counts[1:-1])
    if len(middle) <= 1:
        return {"first_stage_layers": counts[0], "last_stage_layers": counts[-1]}
    return {"stage_layers": ",".join(map(str, counts))}


def lora_recipe(row: dict[str, str]) -> public_lora.LoraRecipe | None:
    """A LoRA row's recipe (`public_lora.recipe`), Megatron-Bridge's defaults where its source is
    not listed; None for full training."""
    if row["workload"] != "lora":
        return None
    return public_lora.recipe(row) or public_lora.LoraRecipe(DEFAULT_RANK, DEFAULT_TARGETS, 0, "", "default")


def _system_gpus(name: str) -> int:
    from shardwise import presets

    return int(presets.system(name).gpus_per_node)


def scenario_for(row: dict[str, str]):
    """The Scenario of a public run (raises SpecError when the layout is not valid)."""
    return request_for(row).scenario()


# parse_notes keys of sources whose TFLOP/s count their own formula (tools/public_runs_stacks.py):
# MaxText's 2024 formula, and Narayanan et al. 2021 Eq. 3 as Megatron-DeepSpeed's throughput_calculator
# wrote it (its logit term V / 16lh at 3 passes as at 4)
MAXTEXT_FORMULA = "tflops_formula=maxtext-6n-causal"
EQ3_FORMULA = "tflops_formula=narayanan21-eq3"


def source_flops_per_step(row: dict[str, str], scn, model_flops_per_step: float) -> float:
    """The FLOPs per step behind a row's published TFLOP/s: Megatron's count (ours,
    `model_flops_per_step`), or the source's own where the row says which it used: MaxText's
    (`engines.training_flops.maxtext_flops_per_step`: 6 N per token with the embeddings, causal
    attention), Megatron-DeepSpeed's Eq. 3 (`megatron_deepspeed_flops_per_step`: 4.5 B s h V of
    logits on 3 passes where ours count 6)."""
    notes = row["parse_notes"].split("; ")
    if MAXTEXT_FORMULA in notes:
        from shardwise.engines.training_flops import maxtext_flops_per_step

        return float(maxtext_flops_per_step(scn.model, scn.plan.global_batch))
    if EQ3_FORMULA in notes:
        from shardwise.engines.training_flops import megatron_deepspeed_flops_per_step

        return float(megatron_deepspeed_flops_per_step(scn.model, scn.plan.global_batch))
    return model_flops_per_step


def measured_step_s(row: dict[str, str], model_flops_per_step: float | None = None) -> float:
    """The published figure as seconds per step (model TFLOP/s per GPU need the FLOPs per step the
    source counted: `source_flops_per_step`)."""
    tokens = float(row["gbs"]) * float(row["seq_len"])
    value = float(row["measured"])
    if row["metric"] == "step_time_s":
        return value
    if row["metric"] == "tokens_per_s_per_gpu":
        return tokens / (value * float(row["num_gpus"]))
    if row["metric"] == "model_tflops_per_gpu" and model_flops_per_step is not None:
        return model_flops_per_step / (value * 1e12 * float(row["num_gpus"]))
    raise SpecError(f"{row['id']}: metric {row['metric']} needs the model's FLOPs per step")


def layout_key(row: dict[str, str]) -> str:
    keys = ("tp", "pp", "cp", "vp", "ep", "dp", "fsdp", "mbs", "gbs", "precision", "recompute", "layers")
    return " ".join(f"{k}{row[k]}" for k in keys)


def label(row: dict[str, str]) -> str:
    vp = f" vp{row['vp']}" if (as_int(row["vp"], 1) or 1) > 1 else ""
    cp = f" cp{row['cp']}" if (as_int(row["cp"], 1) or 1) > 1 else ""
    recipe = lora_recipe(row)
    lora = ""
    if recipe:
        targets = "" if recipe.targets == DEFAULT_TARGETS else f" {recipe.targets}"
        packed = f" packed {recipe.document_len}" if recipe.document_len else ""
        lora = f", LoRA r{recipe.rank}{targets}{packed}"
    return (
        f"{row['model'] or row['model_raw']}, {row['num_gpus']} {row['system'] or row['gpu_raw']}, "
        f"tp{row['tp']} pp{row['pp']}{vp}{cp} mb{row['mbs']} gbs{row['gbs']}, {row['precision']}{lora}"
    )
