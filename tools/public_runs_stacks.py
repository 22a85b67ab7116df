"""Rules for the published training runs of stacks other than Megatron-Core (tools/import_public_runs.py).

The other-stack tables (tools/data/public_runs/*.csv, described in src/shardwise/data/PUBLIC_RUNS_OTHER_STACKS.md)
have the columns of training_layouts.csv but mean by them what that file's notes say: `dp` is the total
data-parallel degree, `fsdp` is text naming the sharding (`fsdp2 64`, `hsdp (shard within node)`, `zero1
within groups of 8 GPUs`), values a source does not state are empty. `StackRow` turns one such row into
an output row of the same columns as `Row`; what the source states about compile, attention kernel,
optimizer, activation checkpointing, sharding, FP8 recipe, network and measured extras goes to
`parse_notes` as `key=value` items (first), then the prose notes. Nothing is guessed: a field the row
does not state stays empty.
"""

from __future__ import annotations

import re
from functools import cache

import yaml
from import_public_runs import (
    COLUMNS,
    ROOT,
    as_int,
    classify_name,
    first_number,
    fmt,
    is_none,
    source_basename,
    split_of,
)

SYSTEMS_YAML = ROOT / "src" / "shardwise" / "presets" / "systems.yaml"

# (regex on the framework cell, normalized stack), first match wins.
STACKS = (
    # NeMo Megatron 22.x (NeMo 1.x on Apex): Megatron-LM's 2022 layers, before Megatron-Core
    (r"^nemo megatron 22\.", "nemo-megatron"),
    (r"megatron-deepspeed", "megatron-deepspeed"),
    # FlagPerf's Megatron cases: Megatron-LM's core_v0.6.0 tag with --use-mcore-models, and FlagScale (BAAI's
    # Megatron-LM fork) -- Megatron's own kernels and schedules, priced as Megatron-Core
    (r"^megatron-lm core_v|^flagscale", "megatron-core"),
    (r"^megatron-swift", "megatron-core"),  # ms-swift's `megatron sft` (Megatron-Core, Transformer Engine)
    (r"torchtitan", "torchtitan"),
    (r"olmo-core|torchtune|fsdp2", "fsdp2"),
    (r"internevo", "internevo"),
    (r"colossal-ai", "colossalai"),
    (r"paxml", "paxml"),
    (r"maxtext", "maxtext"),
    (r"flash-attention training code", "flash-attn-trainer"),
    # Megatron-style TP under DeepSpeed's PipelineEngine in a stack of its own name (GLM-130B's LargeScale)
    (r"deepspeed [\d.]+ pipelineengine", "megatron-deepspeed"),
    (r"xtuner|deepspeed", "deepspeed"),
    (r"fsdp", "fsdp"),
    (r"^pytorch \(baseline", "pytorch"),
)

# (regex, template) for the stack version stated in the framework cell.
VERSIONS = (
    (r"torchtitan (\d+\.\d+\.\d+)", "torchtitan:{}"),
    (r"torchtitan commit ([0-9a-f]{9})", "torchtitan:{}"),
    (r"paxml.*container (\d\d\.\d\d)", "paxml:{}"),
    (r"deepspeed v?(\d+\.\d+\.\d+)", "deepspeed:{}"),
)

# (regex on the lower-cased model cell, preset), checked before the Megatron table's rules.
MODELS = (
    # Hugging Face's GPT-2 checkpoints (DeepSpeedExamples' autotuning tables): "GPT2 (HF gpt2, ...)"
    (r"\(hf gpt2,", "gpt2-124m"),
    (r"\(hf gpt2-medium,", "gpt2-medium"),
    (r"\(hf gpt2-large,", "gpt2-large"),
    (r"\(hf gpt2-xl,", "gpt2-xl"),
    (r"llama3-8b shape \(olmo-core\)", "olmo-core-llama3-8b"),
    (r"olmo2-1b|olmo-core 1b", "olmo-core-1b"),
    (r"olmo2-7b|olmo-core 7b", "olmo2-7b"),
    (r"olmo2-13b|olmo-core 13b", "olmo2-13b"),
    (r"llama2-34b-shape \(fms 34b\)", "llama2-34b-fms"),
    (r"granite-7b-base", "llama2-7b"),
    (r"^llama 7b \(lit-llama config '7b'", "llama2-7b"),
    (r"internlm-7b", "internlm-7b"),
    (r"tinyllama-1\.1b", "tinyllama-1.1b"),
    (r"llama-3\.2-3b", "llama3.2-3b"),
    (r"yi-34b", "yi-34b"),
    (r"aquila2-7b", "aquila2-7b"),
    (r"qwen2\.5-14b", "qwen2.5-14b"),
    (r"\bgpt[\s-]*3?[\s-]*12[56]m\b", "gpt-125m"),
    (r"\bgpt[\s-]*3?[\s-]*35[05]m\b", "gpt-350m"),
    (r"\bgpt[\s-]*3?[\s-]*760m\b", "gpt-760m"),
    (r"\bgpt[\s-]*3?[\s-]*1\.3b\b", "gpt-1.3b"),
    (r"\bgpt[\s-]*3?[\s-]*2\.7b \(head dim 128\)", "gpt-2.7b-hd128"),
    (r"\bgpt[\s-]*3?[\s-]*13b\b", "gpt-13b"),
    (r"\bgpt 5b \(pax gpt5b\)", "gpt3-5b"),
    (r"\bgpt 530b\b", "gpt-530b"),
    (r"\bgpt 1t\b", "gpt-1t"),
    (r"\bgpt 2t\b", "gpt-2t"),
    (r"\bgpt 30b \(deepspeed4science script", "gpt-30b-ds4science"),
    (r"\bglm-130b\b", "glm-130b"),
    # Modalities' scaling tables: GPT-3 shapes read off their MFU column (fsdp_scaling.csv notes)
    (r"^gpt 2\.7b \(modalities", "gpt-2.7b-hd128"),
    (r"^gpt 6\.7b \(modalities", "gpt-6.7b"),
    (r"^gpt 13b \(modalities", "gpt-13b"),
)
MODEL_NOTES = {
    "granite-7b-base": "IBM Granite-7B-base: its HF config (ibm-granite/granite-7b-base) is the Llama-2-7B shape",
    "olmo-core 7b": "OLMo-core llama2_7B config: the olmo2-7b shape without QK-norm",
    "lit-llama config '7b'": "lit-llama's LLaMA 7B: the Llama-2-7B shape (MLP 11008, vocab 32000), block 2,048",
    "olmo-core 13b": "OLMo-core llama2_13B config: the olmo2-13b shape without QK-norm",
    "olmo-core 1b": "OLMo-core llama2_1B config: the olmo-core-1b shape without QK-norm",
}
# Full depth of models without a preset in this table (to flag reduced-layer proxies).
KNOWN_DEPTH = ((r"scout", 48, "Llama 4 Scout"),)

# (substring of the GPU cell, cloud instance preset, note): where the source names the instance, its
# preset (presets/systems.yaml) carries the provider's GPU and network; checked before SYSTEMS.
INSTANCES = (
    (
        "(gcp a3 'h100-80gb-8')",
        "gcp-a3-high",
        "system gcp-a3-high: the source's 'A3 (h100-80gb-8)' is GCP's a3-highgpu-8g (GKE accelerator"
        " nvidia-h100-80gb; A3 Mega's is nvidia-h100-mega-80gb), whose 4 x 200 Gbps GPU NICs run GPUDirect-TCPX",
    ),
    (
        "(meta's h100 variant",
        "h100-meta-8x",
        "system h100-meta-8x: the torchao float8 team's H100s are Meta's variant, 2.4 TB/s (torchao"
        " roofline_utils.py 'custom to Meta's H100 variant'; amendments.csv)",
    ),
    (
        "(leonardo booster",
        "leonardo-booster",
        "system leonardo-booster: the source names Leonardo Booster (4 custom A100 SXM4 64GB per node,"
        " 2 x 200 Gb/s HDR)",
    ),
    (
        "b200 (power limited",
        "dgx-b200-750w",
        "system dgx-b200-750w: the torchao team's power-limited B200s, taken at 750 W (pytorch/ao PR #3566:"
        " 'B200 with 1000W limit' against its '750W limited device'; presets/gpus.yaml b200-750w)",
    ),
    (
        "(marenostrum 5 acc",
        "marenostrum5-acc",
        "system marenostrum5-acc: the source names MareNostrum 5 (BSC's accelerated partition: 4 H100 64GB"
        " per node, 4 x NDR200 200 Gb/s, BSC's user guide)",
    ),
    (
        "(gcp a3 mega 'a3-megagpu-8g'",
        "gcp-a3-mega",
        "system gcp-a3-mega: the source names A3 Mega (a3-megagpu-8g: 8 H100 80GB, 8 x 200 Gbps GPU NICs with"
        " GPUDirect-TCPXO)",
    ),
    (
        "(gcp a3 ultra 'a3-ultragpu-8g'",
        "gcp-a3-ultra",
        "system gcp-a3-ultra: the source names A3 Ultra (a3-ultragpu-8g: 8 H200 141GB, 8 x 400 Gbps ConnectX-7"
        " GPUDirect RDMA over RoCE)",
    ),
    (
        "(gcp a4 'a4-highgpu-8g'",
        "gcp-a4",
        "system gcp-a4: the source names A4 (a4-highgpu-8g: 8 B200, 8 x 400 Gbps ConnectX-7 GPUDirect RDMA over RoCE)",
    ),
    (
        "(aws p5.48xlarge",
        "aws-p5",
        "system aws-p5: the source names p5.48xlarge (8 H100 80GB SXM on NVSwitch, 32 x 100 Gbps EFA v2 per instance)",
    ),
    (
        "(azure ndm a100 v4)",
        "azure-ndm-a100-v4",
        "system azure-ndm-a100-v4: the source names NDm A100 v4 (8 A100 80GB SXM4, 8 x 200 Gb/s HDR InfiniBand)",
    ),
)
# (substring of the GPU cell, why): machines the source names that have no system preset (checked first).
NO_SYSTEM: tuple[tuple[str, str], ...] = ()
# (substring of the GPU cell, system); checked in order, after the exclusions below.
SYSTEMS = (
    ("a100-40gb", "dgx-a100-40gb"),
    ("a800-sxm4-80gb", "hgx-a800"),
    ("a100-sxm4-80gb", "dgx-a100"),
    ("a100-80gb", "dgx-a100"),
    ("gb200", "gb200-nvl72"),
    ("h100", "dgx-h100"),
    ("h800", "hgx-h800"),
    ("h200", "dgx-h200"),
    ("b200", "dgx-b200"),
    ("mi300x", "mi300x-8x"),
    ("v100-32gb (dgx-2)", "dgx-2"),
    ("v100-32gb", "dgx-1-v100"),
)
# (substring of the interconnect cell, machine-readable note) for networks other than the preset's.
NETWORKS = (
    ("400 Gbps per node", "network=400gbps-per-node"),
    ("800 Gbps per node", "network=800gbps-per-node"),
    ("4 x 100Gb RoCE per node", "network=4x100g-roce-per-node"),
)

# (regex on framework + other_config + recompute cells, note): what a source states about its run.
FEATURES = (
    (r"torch\.compile on|compile=true|compile_model=true|\+ (?:torch\.)?compile|regional torch\.compile", "compile=on"),
    (r"torch\.compile off", "compile=off"),
    (r"sdpa flash", "attention=sdpa-flash2"),
    (r"cudnn_flash_te|flash attention \(cudnn\)", "attention=cudnn-flash-te"),
    (r"flashattention 1\.0\.4", "attention=flash-attn-1"),
    (r"flashattention-3 \(flash-attn-3", "attention=flash-attn-3"),
    (r"flashattention-4 \(flash-attn-4", "attention=flash-attn-4"),
    (r"no flash attention", "attention=no-flash"),
    (r"flash-attn 2|flash_attn gpt|flash-attn,|; flash attention;", "attention=flash-attn"),
    (r"fused adamw", "optimizer=fused-adamw"),
    (r"apex adamw", "optimizer=apex-adamw"),
    (r"optimizer_in_bwd", "optimizer_in_backward=on"),
    (r"cpu offload with fused optimizer", "offload=optimizer"),
    (r"offload not stated", "offload=not-stated"),
    (r"offload optimizer\+params to cpu|cpu offload \(params & optimizer\)", "offload=params+optimizer"),
    (r"reduce_dtype fp32", "reduce_dtype=fp32"),
    (r"reduce_dtype bf16", "reduce_dtype=bf16"),
    (r"float8 all-gather", "fp8_allgather=on"),
    (r"bf16 all-gather", "fp8_allgather=off"),
    (r"limit_all_gathers=true", "limit_all_gathers=on"),
    (r"chunked ce", "chunked_ce=on"),
    (r"packed", "packed=on"),
    (r"pack_sample_into_one=true", "pack_sample_into_one=on"),
    (r"pack_sample_into_one=false", "pack_sample_into_one=off"),
    (r"scan_layers=false|scan_layers off", "scan_layers=off"),
    (r"fused mlp/ln/xentropy", "fused=mlp+ln+xentropy"),
    (r"fused rmsnorm/swiglu/xentropy/rotary", "fused=rmsnorm+swiglu+xentropy+rotary"),
    (r"deepspeed (?:fused )?transformer kernels", "kernels=deepspeed-transformer"),
    (r"transformer engine", "te=on"),
    (r"ulysses", "cp_kind=ulysses"),
    (r"zigzag ring attention", "cp_kind=ring-zigzag"),
    (r"no sequence parallelism", "sequence_parallel=off"),
    (r"sequence parallelism \(--sequence-parallel\)", "sequence_parallel=on"),
    (r"partition_activations true", "partition_activations=on"),
    (r"use_varlen_attn=false", "varlen_attn=off"),
    (r"hugging face transformers layers in eager pytorch", "kernels=hf-eager"),
)

MEGATRON_FORMULA = "tflops_formula=narayanan21-eq3"
# A source that counts its own model FLOPs, not Megatron's: MaxText's 2024 TFLOP/s are 6 x all parameters
# (embeddings included) x tokens + the causal half of the attention square (maxtext_utils.py
# calculate_tflops_training_per_device at efb6d9e4, 2024-04-09); shardwise.analyses.public_runs reads the key.
SOURCE_FORMULAS = (("AI-Hypercomputer/maxtext", "tflops_formula=maxtext-6n-causal"),)
# Per source, what its TFLOP/s count (PUBLIC_RUNS_OTHER_STACKS.md): `model` (no recompute), `recompute`
# (hardware-like: recomputed FLOPs counted), `megatron` (Narayanan et al. 2021's formula: the recompute
# term is counted when full activation checkpointing is on), `unstated`. Only a model count is a metric.
TFLOPS_COUNT = (
    ("AI-Hypercomputer/maxtext", "model"),
    ("deepspeed-azure", "megatron"),
    ("Megatron-DeepSpeed", "megatron"),
    ("InternLM/InternEvo", "megatron"),
    ("InternLM/xtuner", "recompute"),
    ("hpcaitech/ColossalAI", "unstated"),
    ("fastest-bert-training", "unstated"),
)


@cache
def gpus_per_node(system: str) -> int | None:
    """GPUs per server of a system preset (presets/systems.yaml), for HSDP's shard-within-node group."""
    if not system:
        return None
    with SYSTEMS_YAML.open(encoding="utf-8") as f:
        return int(yaml.safe_load(f)[system]["gpus_per_node"])


def source_file(source: str) -> str:
    """The group's source part: repository and path of the file a source names ("GitHub pytorch/torchtune
    README.md 'title'" -> "pytorch/torchtune/README.md"). Most of these files are called README.md, so the
    basename that keys the Megatron table's groups would put different repositories in one group."""
    m = re.match(r"GitHub (?:issue )?([\w.-]+/[\w.-]+) ([\w./#-]+\.(?:md|mdx|rst|html))\b", source)
    return f"{m.group(1)}/{m.group(2)}" if m else source_basename(source)


class StackRow:
    """One row of an other-stack table, normalized to the output columns (module docstring)."""

    def __init__(self, index: int, r: dict[str, str], presets: dict[str, dict]):
        self.i = index
        self.r = {k: (v if v is not None else "") for k, v in r.items()}
        self.presets = presets
        self.keys: list[str] = []  # `key=value` notes, first in parse_notes
        self.notes: list[str] = []
        self.out: dict[str, str] = dict.fromkeys(COLUMNS, "")

    def key(self, item: str) -> None:
        if item not in self.keys:
            self.keys.append(item)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def int_of(self, col: str) -> int | None:
        return None if is_none(self.r[col]) else as_int(first_number(self.r[col]))

    # -- identity -----------------------------------------------------------------------------------
    def workload(self) -> str:
        w = self.r["workload"].lower()
        if re.search(r"lora|peft", w):
            return "lora"
        if w.startswith("pre") or "continued pretraining" in w:
            return "pretrain"
        if re.search(r"sft|fine-?tun", w):
            if "sft" not in w:
                self.note("full-parameter fine-tuning -> sft")
            return "sft"
        return "other"

    def model(self) -> tuple[str, bool, str]:
        k = self.r["model"].lower()
        if "bert" in k:
            return "", False, "encoder"
        for pattern, preset in MODELS:
            if re.search(pattern, k):
                for word, text in MODEL_NOTES.items():
                    if word in k:
                        self.note(text)
                return preset, False, ""
        found = classify_name(k)
        if found == ("", False, ""):
            self.note("model has no shardwise preset")
        return found

    def framework(self) -> tuple[str, str]:
        low = self.r["framework"].lower()
        name = next((stack for pattern, stack in STACKS if re.search(pattern, low)), "other")
        version = next((t.format(m.group(1)) for p, t in VERSIONS if (m := re.search(p, low))), "")
        return name, version

    def system(self) -> str:
        gpu = self.r["gpu"].lower()
        if re.match(r"[av]100( \(|$)", gpu):
            self.note(f"{gpu[:4].upper()} memory size not stated: no system")
            return ""
        if gpu.startswith("v100-16gb"):
            self.note("V100 16 GB: no system preset (dgx-1-v100 has 32 GB GPUs)")
            return ""
        unpriced = next((why for needle, why in NO_SYSTEM if needle in gpu), None)
        if unpriced is not None:
            self.note(unpriced)
            return ""
        instance = next(((s, note) for needle, s, note in INSTANCES if needle in gpu), None)
        if instance is not None:  # the instance preset is the stated GPU and network
            self.note(instance[1])
            return instance[0]
        system = next((s for needle, s in SYSTEMS if needle in gpu), "")
        if not system:
            self.note(f"gpu '{self.r['gpu']}' not mapped to a system")
        elif system == "dgx-a100" and "sxm" not in gpu:
            self.note("A100 80 GB form factor not stated: SXM (dgx-a100) assumed")
        if "power limited" in gpu:
            self.key("power_limited=yes")
        if "label was a100" in gpu:
            self.note("an earlier README version labels the same numbers A100")
        if "prose says" in gpu:
            self.note("GPU label disputed by the source's own prose")
        if "readme says '128 * a100'" in gpu:
            self.note("this README version says only 'A100'; 80 GB from the later versions")
        interconnect = self.r["interconnect"]
        if system == "dgx-2":  # the preset is the stated network (DGX-2 datasheet: 8 EDR NICs per server)
            if "660 Gbps" in interconnect:
                self.note("inter-node InfiniBand measured ~660 Gbps per the source: the dgx-2 preset's 8 x 100G EDR")
            interconnect = ""
        for needle, item in NETWORKS:
            if needle in interconnect:
                self.key(item)
        return system

    # -- precision and recompute -------------------------------------------------------------------
    def precision(self) -> str:
        low = self.r["precision"].lower()
        if low.startswith("te "):
            self.key("te=on")
            low = low[3:]
        for word in ("tensorwise", "rowwise_with_gw_hp", "rowwise"):
            if f"fp8 {word}" in low:
                self.key(f"fp8_scaling={word}")
                break
        if "torchao" in low:
            self.key("fp8_lib=torchao")
        if "not restated" in low or "not stated" in low:
            self.note("precision not restated by this table (the collector's reading)")
        if "mxfp8" in low:
            for word, item in (("cublas", "mxfp8_gemm=cublas"), ("rceil", "mxfp8_scale=rceil")):
                if word in low:
                    self.key(item)
            scope = re.search(r"mxfp8 (linears\+grouped gemms|linears|grouped gemms|\(routed experts)", low)
            if scope:
                self.key("mxfp8_scope=" + scope.group(1).strip("(").replace(" ", "-"))
            return "mxfp8"
        if "fp8" in low:
            return "fp8"
        if low.startswith("bf16"):
            return "bf16"
        if low.startswith("fp16"):
            return "fp16"
        self.note(f"precision '{self.r['precision']}' not recognised")
        return ""

    def recompute(self) -> str:
        """none / selective / full, the source's wording as `ac=` (or `remat_policy=` for the JAX stacks)."""
        low = self.r["recompute"].lower()
        pax = re.search(r"remat (SAVE_\w+)", self.r["notes"])  # Pax: the policy the collector read in configs.py
        rules = (
            (r"^none", "none", ""),
            (r"^selective (?:per-)?op", "selective", "ac=selective-op"),
            (r"^selective core attention", "selective", ""),  # Megatron's (Korthikanti et al. 2022)
            (r"^selective ac", "selective", "ac=selective-blocks; ac_fraction=not-stated"),
            (r"uniform 1 layer", "full", "ac=full-uniform-1"),
            (r"checkpoint-activations", "full", "ac=checkpoint-activations"),
            (r"deepspeed activation checkpointing", "full", "ac=deepspeed-activation-checkpointing"),
            (r"gradient_checkpointing_enable", "full", "ac=hf-gradient-checkpointing"),
            (r"use_activation_checkpointing=true", "full", "ac=hf-gradient-checkpointing; ac_source=config-default"),
            (r"recipe default", "full", "ac=torchtune-layer; ac_source=recipe-default"),
            (r"^full", "full", ""),
            (r"mode not stated", "", "ac=on-mode-not-stated"),
            (r"checkpoint_policy", "", f"remat_policy={pax.group(1).lower() if pax else 'not-stated'}"),
            (r"remat_policy=(\w+)", "", "remat_policy={}"),
        )
        for pattern, value, items in rules:
            m = re.search(pattern, low)
            if m:
                for item in filter(None, items.split("; ")):
                    self.key(item.format(*m.groups()))
                return value
        if low:
            self.note(f"recompute '{self.r['recompute']}' not recognised")
        return ""

    # -- layout ------------------------------------------------------------------------------------
    def sharding(self, dp_cp: int | None, gpus_per_node: int | None) -> int | None:
        """The `fsdp` column: ranks one parameter is sharded over (a full shard spans the dp x cp ranks, as
        Megatron's FSDP column GPUs/(tp*pp)); 0 without parameter sharding (ZeRO-1/2, DDP)."""
        cell = self.r["fsdp"].lower()
        if not cell:
            return None
        m = re.match(r"zero(\d)", cell)
        if m:
            self.key(f"zero={m.group(1)}")
            group = re.search(r"within groups of (\d+)", cell)
            if group:
                self.key(f"zero_group={group.group(1)}")
            elif "over all dp ranks" in cell and dp_cp:
                self.key(f"zero_group={dp_cp}")
            if m.group(1) != "3":
                return 0
            if "offload" in cell:
                self.key("offload=params+optimizer")
            return dp_cp
        if cell.startswith("deepspeed zero"):
            self.key("zero=not-stated")
            return None
        if cell.startswith("none"):
            if "zero_stage=0" in cell:
                self.key("zero=0")
            return 0
        if cell.startswith("hsdp"):
            self.key("sharding=hsdp")
            if "within" in cell and "node" in cell and gpus_per_node:
                self.note(f"HSDP shards within a node: {gpus_per_node} GPUs (the system preset's node)")
                return gpus_per_node
            self.note("HSDP shard group not stated")
            return None
        within = re.match(r"fsdp (\d+) within node", cell)
        if within:
            self.key("sharding=fsdp-in-node+dp-across-nodes")
            return int(within.group(1))
        stated = re.match(r"fsdp2?(?:-full-shard)? (\d+)", cell)
        if stated:
            size = int(stated.group(1))
            experts = re.search(r"(\d+) on routed experts", cell)
            if experts:
                self.note(f"routed experts sharded over {experts.group(1)} ranks, the rest over {size}")
            if dp_cp is not None and size != dp_cp:
                self.note(f"FSDP group {size}, but dp*cp is {dp_cp}")
            return size
        if cell.startswith("fsdp"):
            self.key("sharding=full-shard")
            if dp_cp is None:
                self.note("FSDP full shard over all ranks, GPU count not stated")
            return dp_cp
        self.note(f"fsdp '{self.r['fsdp']}' not recognised")
        return None

    # -- measurements --------------------------------------------------------------------------------
    def extras(self) -> None:
        """The measured extras the source prints beside the metric."""
        r = self.r
        if not is_none(r["mfu_pct"]):
            self.key(f"mfu_pct={fmt(first_number(r['mfu_pct']))}")
        if not is_none(r["memory_gib"]):
            self.key(f"peak_memory_gib={fmt(first_number(r['memory_gib']))}")
        text = r["other_metric"]
        for pattern, item in (
            (r"HFU=([\d.]+)", "hfu={}"),
            (r"TPS range ([\d.]+-[\d.]+K)", "tps_range={}"),
            (r"MFU range (\d+-\d+)%", "mfu_pct_range={}"),
            (r"([\d.]+) (?:samples|sequences)/s \(global\)", "samples_per_s_total={}"),
            (r"^([\d.]+) (?:samples|sequences)/s$", "samples_per_s={}"),
        ):
            m = re.search(pattern, text)
            if m:
                self.key(item.format(m.group(1)))

    def metric(self) -> tuple[str, str]:
        """(metric, measured): step time, then tokens/s/GPU, then model TFLOP/s/GPU (a model-FLOP count only)."""
        r = self.r
        for col in ("step_time_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu"):
            self.out[col] = "" if is_none(r[col]) else fmt(first_number(r[col]))
        if "approximate" in r["notes"].lower():
            self.note("value approximate in the source ('~')")
        count = next((c for needle, c in TFLOPS_COUNT if needle in r["source"]), "")
        formula_megatron = count == "megatron"
        if count == "megatron":
            # Narayanan et al. 2021 Eq. 3 with factor 4 (the recomputed forward) under --checkpoint-activations
            # and 3 otherwise: Megatron-DeepSpeed megatron/utils.py throughput_calculator (2023, b5039dd7)
            # tests args.checkpoint_activations only, so Megatron's --recompute-granularity full counts 3
            megatron_full = "ac=full-uniform-1" in self.keys
            count = "recompute" if self.out["recompute"] == "full" and not megatron_full else "model"
            if not self.out["recompute"]:  # the formula's factor follows the checkpointing, which is not stated
                count = "unstated"
        if self.out["model_tflops_per_gpu"] and count:
            self.key(f"tflops_count={count}")
            if formula_megatron:
                self.key(MEGATRON_FORMULA)
            for needle, formula in SOURCE_FORMULAS:
                if needle in r["source"]:
                    self.key(formula)
        for col in ("step_time_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu"):
            if self.out[col] and (col != "model_tflops_per_gpu" or count == "model"):
                return col, self.out[col]
        if self.out["model_tflops_per_gpu"] and count == "recompute" and MEGATRON_FORMULA in self.keys:
            model_tflops = float(self.out["model_tflops_per_gpu"]) * 3 / 4
            self.note("model TFLOP/s derived: Eq. 3 counts 4 passes under activation checkpointing, x 3/4 gives 3")
            return "model_tflops_per_gpu", fmt(round(model_tflops, 6))
        if self.out["model_tflops_per_gpu"]:
            self.note("TFLOP/s/GPU not a model-FLOP count (recompute counted or formula unstated): no metric")
        else:
            self.note("no step time, tokens/s/GPU or model TFLOP/s/GPU")
        return "", ""

    # -- main --------------------------------------------------------------------------------------------
    def build(self) -> dict[str, str]:
        r, o = self.r, self.out
        o["id"] = f"PUB-{self.i + 1:04d}"
        for col in ("source", "locator", "commit_or_version", "verification"):
            o[col] = r[col]
        o["model_raw"], o["gpu_raw"] = r["model"], r["gpu"]
        o["framework_raw"], o["precision_raw"] = r["framework"], r["precision"]
        o["workload"] = self.workload()
        model, moe, arch = self.model()
        o["model"], o["moe"], o["architecture_note"] = model, "yes" if moe else "no", arch
        o["framework"], o["framework_version"] = self.framework()
        o["system"] = self.system()
        o["precision"] = self.precision()

        gpus = self.int_of("num_gpus")
        if gpus is not None and "gpu count for the measurement is not explicit" in r["notes"].lower():
            self.note(f"num_gpus {gpus} is the project's hardware; the measurement's GPU count is not stated")
            gpus = None
        if "gpu count ambiguous" in r["notes"].lower():
            self.note("GPU count ambiguous in the source (see the input's notes)")
        o["num_gpus"] = fmt(gpus)
        o["layers"] = fmt(self.layers(model))
        seq = self.int_of("seq_len")
        if seq is not None and not re.fullmatch(r"\d+", r["seq_len"].strip()):
            self.note(f"seq_len '{r['seq_len']}' is not an exact token count -> empty")
            seq = None
        if seq is None and not r["seq_len"].strip():
            self.note("seq_len not stated")
        o["seq_len"] = fmt(seq)

        self.layout(gpus, measured_gpus_unknown=o["num_gpus"] == "" and r["num_gpus"].strip() != "")
        o["recompute"] = self.recompute()
        for pattern, item in FEATURES:
            if re.search(pattern, " ; ".join((r["framework"], r["other_config"], r["recompute"])).lower()):
                self.key(item)
        if "enables ZeRO-3 CPU optimizer offload" in r["notes"]:
            self.key("offload=optimizer")
        self.extras()
        o["metric"], o["measured"] = self.metric()

        o["group"] = f"{source_file(r['source'])}|{model or r['model']}|{o['system']}|{o['num_gpus']}|{o['seq_len']}"
        o["split"] = split_of(o["group"])
        if any("=" in n for n in self.notes):
            raise ValueError(f"{o['id']}: a prose note holds '=' (reserved for key=value items): {self.notes}")
        amended = r.get("_amended") or []  # import_public_runs.AMENDED
        if amended:
            self.keys.insert(0, "amended=" + "+".join(amended))
            self.note("amended from its own source: tools/data/public_runs/amendments.csv")
        o["parse_notes"] = "; ".join(self.keys + self.notes)
        return o

    def layers(self, model: str) -> int | None:
        stated = self.int_of("layers")
        preset = self.presets.get(model) if model else None
        if not preset:
            for pattern, full, name in KNOWN_DEPTH:
                if stated is not None and stated < full and re.search(pattern, self.r["model"].lower()):
                    self.note(f"reduced-layer proxy: {stated} of {full} layers ({name})")
            return stated
        full = int(preset["layers"])
        if stated is not None and stated != full:
            self.note(f"layers {stated}, preset depth {full}" + (" (reduced-layer proxy)" if stated < full else ""))
            return stated if stated < full else full
        return full

    def layout(self, gpus: int | None, measured_gpus_unknown: bool = False) -> None:
        """tp, pp, cp, vp, ep, dp, fsdp, mbs, gbs, ga from the row's columns."""
        o = self.out
        tp, pp, cp, dp = (self.int_of(c) for c in ("tp", "pp", "cp", "dp"))
        mbs, gbs, ga = (self.int_of(c) for c in ("mbs", "gbs", "ga"))
        if measured_gpus_unknown:
            dp, ga = None, None
            self.note("dp and ga follow the GPU count -> empty")
        if cp is None and tp is not None and pp is not None:
            cp = 1
            self.note("CP not stated -> 1")
        vp = self.int_of("vp")
        if vp is None and pp is not None and pp > 1 and self.out["framework"] == "megatron-deepspeed":
            vp = 1  # deepspeed/runtime/pipe/schedule.py: TrainSchedule is 1F1B, no interleaved stages
            self.note("VP 1: DeepSpeed's PipelineEngine has no interleaved schedule")
        if vp is None and pp is not None:
            if pp > 1:
                self.note("VP not stated with PP > 1 -> empty (layout incomplete)")
            else:
                vp = 1
        ep = self.int_of("ep") or (1 if tp is not None else None)
        if dp is None and tp is not None and not measured_gpus_unknown:
            self.note("dp not stated")
        if None not in (gpus, tp, pp, cp, dp) and tp * pp * cp * dp != gpus:
            self.note(f"tp*pp*cp*dp is {tp * pp * cp * dp}, not the {gpus} GPUs")
        if gbs is None and None not in (mbs, dp, ga):
            gbs = mbs * dp * ga
            self.note("gbs derived: mbs x dp x ga")
        elif None not in (gbs, mbs, dp, ga) and gbs != mbs * dp * ga:
            self.note(f"gbs {gbs}, but mbs*dp*ga is {mbs * dp * ga}")
        fsdp = self.sharding(None if None in (dp, cp) else dp * cp, gpus_per_node(self.out["system"]))
        for col, val in (("tp", tp), ("pp", pp), ("cp", cp), ("vp", vp), ("ep", ep), ("dp", dp), ("fsdp", fsdp)):
            o[col] = fmt(val)
        o["mbs"], o["gbs"], o["ga"] = fmt(mbs), fmt(gbs), fmt(ga)
