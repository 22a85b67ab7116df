#!/usr/bin/env python3
"""Normalize the published training measurements for `shardwise validate`.

    python tools/import_public_runs.py /path/to/training_layouts.csv \
        tools/data/public_runs/training_layouts_other.csv tools/data/public_runs/microbatch_longctx.csv \
        tools/data/public_runs/deepspeed_pipeline.csv tools/data/public_runs/fsdp_scaling.csv \
        tools/data/public_runs/nemo_launcher_scaling.csv tools/data/public_runs/flagperf_nvidia.csv \
        tools/data/public_runs/ms_swift.csv tools/data/public_runs/torchtitan_blogs.csv \
        tools/data/public_runs/deepspeed_autotuning.csv tools/data/public_runs/maxtext_gpu_recipes.csv \
        tools/data/public_runs/deepspeed_h200_b200.csv tools/data/public_runs/lightning_zero.csv \
        tools/data/public_runs/torchtitan_aws_samples.csv tools/data/public_runs/colossalai_llama2.csv \
        tools/data/public_runs/litgpt_thunder.csv tools/data/public_runs/issue_threads.csv
    python tools/import_public_runs.py ... --summary   # also print the count tables (markdown)

The first CSV is the Megatron-Core / NeMo table (training_layouts.csv, read with the rules of `Row` below);
every further CSV is a table of other software stacks with the same columns (read with the rules of
`tools/public_runs_stacks.py`). Writes src/shardwise/data/public_training_runs.csv: one row per input row,
the files in the order given and each in its own row order, ids PUB-0001... counting on across files, so
the rows of the first table are the same bytes whether or not the others follow. Rows of a source that
must not be used (EXCLUDED_SOURCES) are left out and counted on stderr. Nothing is invented: a field that
cannot be determined stays empty (and the row is skipped downstream). Every inference or doubt goes to
`parse_notes`. Deterministic (no clocks, no randomness; the dev/holdout split is a hash of the group key).
Standard library + PyYAML only. Column meanings: src/shardwise/data/PUBLIC_RUNS.md.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import re
import sys
from collections import Counter
from functools import cache
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
MODELS_YAML = ROOT / "src" / "shardwise" / "presets" / "models.yaml"
OUT = ROOT / "src" / "shardwise" / "data" / "public_training_runs.csv"

COLUMNS = [
    "id", "source", "locator", "commit_or_version", "verification", "workload", "model_raw", "model", "moe",
    "architecture_note", "layers", "seq_len", "gpu_raw", "system", "num_gpus", "framework_raw", "framework",
    "framework_version", "precision_raw", "precision", "tp", "pp", "cp", "vp", "ep", "dp", "fsdp", "mbs", "gbs",
    "ga", "recompute", "metric", "measured", "tokens_per_s_per_gpu", "model_tflops_per_gpu", "step_time_s",
    "group", "split", "parse_notes",
]  # fmt: skip

NONE_WORDS = {"", "n/a", "na", "none", "-", "null"}

SYSTEMS = {
    "h100": "dgx-h100",
    "dgx-h100": "dgx-h100",
    "h100 80gb": "dgx-h100",
    "dgx-b200": "dgx-b200",
    "dgx-b300": "dgx-b300",
    "gb200": "gb200-nvl72",
    "dgx-gb200": "gb200-nvl72",
    "dgx-gb300": "gb300-nvl72",
    "h800": "hgx-h800",
}

# (regex on the lower-cased model name, preset). Checked after the MoE / hybrid rules below.
DENSE_PRESETS = [
    (r"llama[\s_-]*3(?:\.1)?[\s_-]*8b", "llama3-8b"),
    (r"llama[\s_-]*3(?:\.1)?[\s_-]*70b", "llama3-70b"),
    (r"llama[\s_-]*3(?:\.1)?[\s_-]*405b", "llama3-405b"),
    (r"llama[\s_-]*2[\s_-]*7b", "llama2-7b"),
    (r"llama[\s_-]*2[\s_-]*13b", "llama2-13b"),
    (r"llama[\s_-]*2[\s_-]*70b", "llama2-70b"),
    (r"gpt[\s_-]*3[\s_-]*175b", "gpt3-175b"),
    (r"gpt[\s_-]*3[\s_-]*20b", "gpt3-20b"),
    (r"gpt[\s_-]*3[\s_-]*5b", "gpt3-5b"),
    (r"nemotron[\s_-]*4?[\s_-]*15b", "nemotron4-15b"),
    (r"nemotron[\s_-]*4?[\s_-]*340b", "nemotron4-340b"),
    (r"nemotron[\s_-]*8b", "nemotron-8b"),
    (r"nemotron[\s_-]*22b", "nemotron-22b"),
    (r"mistral[\s_-]*7b", "mistral-7b"),
    (r"qwen[\s_-]*2\.5[\s_-]*7b", "qwen2.5-7b"),
    (r"qwen[\s_-]*2\.5[\s_-]*32b", "qwen2.5-32b"),
]

# (regex, architecture_note) for mixture-of-experts models (no presets: `model` stays empty).
MOE_MODELS = [
    (r"deepseek[\s_-]*v?4", "deepseek-v4 (architecture not checked)"),
    (r"deepseek|tokendrop|dropless|\bmtp\b", "mla"),
    (r"kimi", "mla"),
    (r"moonlight", "mla"),
    (r"nemotron[\s_-]*(?:3|v3)[\s_-]*5", "nemotron-3.5 (architecture not stated)"),
    (r"nemotron[\s_-]*(?:3|v3)\b|nemotron[\s_-]*(?:3|v3)[\s_-]", "hybrid mamba"),
    (r"qwen[\s_-]*3", ""),
    (r"gpt[\s_-]*oss", ""),
    (r"grok", ""),
    (r"llama[\s_-]*4", ""),
    (r"mixtral", ""),
]

# Full depth of models without a preset that appear with a `layers` column (to flag reduced-layer proxies).
KNOWN_DEPTH = [
    (r"grok", 64, "Grok-1"),
    (r"deepseek[\s_-]*v3", 61, "DeepSeek-V3"),
    (r"maverick", 48, "Llama 4 Maverick"),
    (r"nemotron[\s_-]*h[\s_-]*56b", 118, "Nemotron-H 56B"),
]

LABEL_KEYS = {"TP": "tp", "PP": "pp", "CP": "cp", "VP": "vp", "MBS": "mbs", "GA": "ga", "SEQ": "seq_len"}

# (text in the `source` column, why): rows never imported, whichever input file holds them.
EXCLUDED_SOURCES = (
    (
        "pytorch/torchtitan docs/performance.md",
        "reserved-source risk: those tables were later moved into torchtitan's reserved benchmarks/ folder",
    ),
)


# ----------------------------------------------------------------------------------------------- parsing
def clean(s: str | None) -> str:
    return (s or "").strip()


def is_none(s: str | None) -> bool:
    return clean(s).lower() in NONE_WORDS


def first_number(s: str | None) -> float | None:
    """The leading number of a cell ('64 (derived=...)' -> 64, '1,671' -> 1671, '~704' -> 704)."""
    s = clean(s).replace(",", "").lstrip("~")
    m = re.match(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", s)
    return float(m.group(0)) if m else None


def as_int(x: float | None) -> int | None:
    return int(x) if x is not None and float(x).is_integer() else None


def fmt(x: float | int | None) -> str:
    if x is None:
        return ""
    if isinstance(x, int) or float(x).is_integer():
        return str(int(x))
    return f"{x:.10g}"


def split_alt(cell: str) -> tuple[str, str | None]:
    """'37556 (36108)' -> ('37556', '36108'); a cell without a parenthetical -> (cell, None)."""
    m = re.match(r"^\s*([^()]*?)\s*\(([^()]*)\)\s*$", cell)
    return (m.group(1), m.group(2)) if m else (cell.strip(), None)


def raw_cells(notes: str) -> list[str]:
    """Cells of the `raw: | a | b |` markdown row quoted in the notes (empty list if none)."""
    m = re.search(r"raw:\s*(\|.*\|)", notes)
    if not m:
        return []
    return [c.strip() for c in m.group(1).strip().strip("|").split("|")]


def label_layout(*texts: str) -> dict[str, str]:
    """KEY=value pairs of a table label such as 'Llama 3.1 70b BF16 (TP=4, PP=4, CP=2, VP=5, MBS=1, GA=64)'."""
    out: dict[str, str] = {}
    for text in texts:
        for key, value in re.findall(r"\b(TP|PP|CP|VP|MBS|GA|SEQ)\s*=\s*([A-Za-z0-9]+)", text):
            out.setdefault(LABEL_KEYS[key], value)
        m = re.search(r"FSDP\+DP,?\s*MBS=(\d+)", text)
        if m:
            out.setdefault("mbs", m.group(1))
            out["fsdp_dp"] = "1"
    return out


def table_label(locator: str) -> str:
    m = re.search(r"table '([^']*)'", locator)
    return m.group(1) if m else ""


def source_basename(source: str) -> str:
    s = re.sub(r"\s*\([^()]*\)\s*$", "", source.strip())
    return s.split()[-1].rstrip("/").split("/")[-1]


def split_of(group: str) -> str:
    """`dev` for 30% of the groups, by a hash of the group key (docs/contributing.md), else `holdout`."""
    return "dev" if int(hashlib.sha256(group.encode()).hexdigest(), 16) % 10 < 3 else "holdout"


def excluded(row: dict[str, str]) -> str:
    """Why the row is left out ("" when it is imported)."""
    return next((why for needle, why in EXCLUDED_SOURCES if needle in row.get("source", "")), "")


def load_presets() -> dict[str, dict]:
    with MODELS_YAML.open(encoding="utf-8") as f:
        return {str(k).lower(): v for k, v in yaml.safe_load(f).items()}


def classify_name(k: str) -> tuple[str, bool, str]:
    """(preset, mixture of experts, architecture note) of a lower-cased model name: the MoE rules
    first, then the dense presets; ("", False, "") for a name neither knows."""
    for pattern, arch in MOE_MODELS:
        if re.search(pattern, k):
            return "", True, arch
    for pattern, preset in DENSE_PRESETS:
        if re.search(pattern, k):
            return preset, False, ""
    return "", False, ""


# ----------------------------------------------------------------------------------------- row logic
class Row:
    def __init__(self, index: int, r: dict[str, str], presets: dict[str, dict]):
        self.i = index
        self.r = {k: (v if v is not None else "") for k, v in r.items()}
        self.presets = presets
        self.notes: list[str] = []
        self.out: dict[str, str] = dict.fromkeys(COLUMNS, "")

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    # -- identity ---------------------------------------------------------------------------------
    def model_key(self) -> tuple[str, bool]:
        """(the model name to classify, whether the source reader split this row off a model cell).

        The name is model_raw, or the table's model cell when a parenthetical variant such as
        'DeepSeekV3 (tokendrop)' sits in that cell (the reader then made the variant a row of its own)."""
        model_raw = self.r["model"].strip()
        cells = raw_cells(self.r["notes"])
        if cells and not cells[0].upper().startswith("DGX"):
            base, variant = split_alt(cells[0])
            if variant is not None:
                return f"{base} ({variant})", model_raw == variant.strip()
        return model_raw, False

    def classify_model(self, key: str) -> tuple[str, bool, str]:
        k = key.lower()
        if re.search(r"nemotron[\s_-]*h\b", k):  # a dense hybrid Mamba-2 model: its preset where one is known
            size = re.search(r"nemotron[\s_-]*h[\s_-]*(8|47|56)b", k)
            return (f"nemotron-h-{size.group(1)}b" if size else ""), False, "hybrid mamba"
        return classify_name(k)

    def workload(self) -> str:
        w = self.r["workload"].lower()
        m = self.r["model"].lower()
        fw = self.r["framework"].lower()
        if "peft" in fw and "lora" not in w:
            self.note("source workload says pretrain but the recipe is PEFT (LoRA) fine-tuning")
            return "lora"
        if "lora" in w or "peft" in w:
            return "lora"
        if "sft" in w:
            return "sft"
        if w.startswith("finetune") or w.startswith("fine-tun"):
            if "lora" in m:
                return "lora"
            if "sft" in m:
                return "sft"
            return "other"
        if w.startswith("pre"):
            return "pretrain"
        return "other"

    def framework(self) -> tuple[str, str]:
        fw = self.r["framework"]
        low = fw.lower()
        version = ""
        m = re.search(r"NeMo\s*container\s*([0-9][0-9.]*[0-9](?:\.rc\d+)?)", fw) or re.search(
            r"NeMo\s*([0-9]{2}\.[0-9]{2}(?:\.[0-9]+)?(?:\.rc\d+)?)", fw
        )
        if m:
            version = m.group(1)
        if "automodel" in low:
            name = "nemo-automodel"
            m2 = re.search(r"\((\d{2}\.\d{2})\)", self.r["model"])
            if m2:
                version = m2.group(1)
        elif "maxtext" in low:
            name = "maxtext"
        elif "paxml" in low:
            name = "paxml"
        elif "hf transformers" in low or "hugging" in low:
            name = "hf-transformers"
        elif "pai-megatron" in low:
            name = "megatron-core"
            m2 = re.search(r"image\s+(\S+)", self.r["commit_or_version"])
            if m2:
                version = m2.group(1)
        elif "nemo" in low or "megatron" in low:
            name = "megatron-core"
        else:
            name = "other"
        if not version:
            label = table_label(self.r["locator"]) or self.r["model"]
            m2 = re.search(r"\b(2\d\.\d{2})\b", label)
            if m2:
                version = m2.group(1) if name == "megatron-core" else f"{name}:{m2.group(1)}"
                if name == "hf-transformers":
                    version = f"pytorch:{m2.group(1)}"
        return name, version

    def system(self) -> str:
        gpu = self.r["gpu"].strip().lower()
        system = SYSTEMS.get(gpu, "")
        if not system:
            self.note(f"gpu '{self.r['gpu']}' not mapped to a system")
        return system

    # -- precision ----------------------------------------------------------------------------------
    def is_alternate(self) -> bool | None:
        """True when this row holds the parenthetical (alternate) values of its table cell, False for the
        primary value, None when the row has no parenthetical values at all."""
        loc = self.r["locator"].lower()
        if "parenthetical value" in loc:
            return True
        if "primary value" in loc:
            return False
        cells = raw_cells(self.r["notes"])
        mine = [first_number(self.r["tokens_per_s_per_gpu"]), first_number(self.r["model_tflops_per_gpu"])]
        found = None
        for cell in cells[1:]:
            a, b = split_alt(cell)
            if b is None:
                continue
            fa, fb = first_number(a), first_number(b)
            if fa is None or fb is None or fa == fb:
                continue
            if fb in mine and fa not in mine:
                return True
            if fa in mine:
                found = False
        return found

    def precision(self, system: str) -> str:
        p = self.r["precision"].strip()
        low = p.lower()
        if low in ("bf16",):
            return "bf16"
        if low in ("mxfp8", "fp8-mx"):
            return "mxfp8"
        if low == "nvfp4":
            return "nvfp4"
        if low in ("fp8", "fp8-cs") or low.startswith("fp8 current scaling") or low.startswith("fp8 (per-tensor"):
            return "fp8"
        if low.startswith("fp8 (page: per-tensor current scaling); parenthetical"):
            if self.is_alternate():
                self.note("parenthetical alternate of the page: its FP8 recipe is not stated -> precision empty")
                return ""
            return "fp8"
        if low.startswith("(no precision column"):
            alt = self.is_alternate()
            if alt:
                if system in ("gb200-nvl72", "dgx-b200"):
                    self.note("25.09 parenthetical value: per the table note a different FP8 granularity (MXFP8)")
                    return "mxfp8"
                self.note("25.09 parenthetical value on H100: alternate FP8 granularity not named -> empty")
                return ""
            self.note("25.09 table has no precision column: its note implies the primary values are FP8")
            return "fp8"
        if low in ("not stated", ""):
            return ""
        self.note(f"precision '{p}' not recognised")
        return ""

    # -- numbers ------------------------------------------------------------------------------------
    def metric_value(self, column: str) -> float | None:
        cell = self.r[column].strip()
        if is_none(cell):
            return None
        compact = cell.replace(",", "")
        if re.fullmatch(r"\d+(?:\.\d+)?\s+\d+", compact):
            joined = float(re.sub(r"\s+", "", compact))
            self.note(f"{column} '{cell}' read as {fmt(joined)}")
            return joined
        if compact.startswith("~"):
            self.note(f"{column} '{cell}' is approximate in the source")
        value = first_number(compact)
        if value is None or not re.match(r"^~?\d", compact):
            self.note(f"{column} '{cell}' not a number -> empty")
            return None
        return value

    # -- main ---------------------------------------------------------------------------------------
    def build(self) -> dict[str, str]:
        r, o = self.r, self.out
        o["id"] = f"PUB-{self.i + 1:04d}"
        for col in ("source", "locator", "commit_or_version", "verification"):
            o[col] = r[col]
        o["model_raw"] = r["model"]
        o["gpu_raw"] = r["gpu"]
        o["framework_raw"] = r["framework"]
        o["precision_raw"] = r["precision"]
        o["workload"] = self.workload()

        key, split_row = self.model_key()
        if split_row:
            if self.is_alternate() is None:
                self.note(f"duplicate of the previous row: reader split model cell '{key}' into its own row")
            else:
                self.note(f"model cell '{key}': reader put the variant in model_raw")
        model, moe, arch = self.classify_model(key)
        ep_val = first_number(r["ep"]) if not is_none(r["ep"]) else None
        if not moe and ep_val and ep_val > 1:
            moe = True
            self.note(f"EP={fmt(ep_val)} stated -> mixture-of-experts")
        o["model"], o["moe"], o["architecture_note"] = model, "yes" if moe else "no", arch
        if not model and not moe and arch == "":
            self.note("model has no shardwise preset")
        preset = self.presets.get(model) if model else None

        system = self.system()
        o["system"] = system
        gpus = as_int(first_number(r["num_gpus"]))
        o["num_gpus"] = fmt(gpus)
        o["framework"], o["framework_version"] = self.framework()
        o["precision"] = self.precision(system)

        label = label_layout(r["model"], table_label(r["locator"]))

        def pick(col: str) -> int | None:
            """The column's integer; the table label's value only when the column is blank (not 'n/a')."""
            cell = r.get(col, "")
            if not is_none(cell):
                v = as_int(first_number(cell))
                if v is not None:
                    return v
            if clean(cell) == "" and label.get(col, "").isdigit():
                return int(label[col])
            return None

        tp, pp, cp, mbs, gbs = pick("tp"), pick("pp"), pick("cp"), pick("mbs"), pick("gbs")
        ga_stated = pick("ga")
        other = dict(re.findall(r"(\w+)=(\w+)", r["other_config"]))

        # layers and proxies
        layers_stated = as_int(first_number(r["layers"]))
        layers = None
        if preset:
            full = int(preset["layers"])
            layers = full
            if layers_stated is not None and layers_stated < full:
                layers = layers_stated
                self.note(f"reduced-layer proxy: {layers_stated} of {full} layers")
            elif layers_stated is not None and layers_stated > full:
                self.note(f"layers {layers_stated} > preset depth {full}")
        elif layers_stated is not None:
            layers = layers_stated
            for pattern, full, name in KNOWN_DEPTH:
                if not re.search(pattern, key.lower()) or layers_stated == full:
                    continue
                if name == "Llama 4 Maverick":
                    self.note("Maverick has 48 layers: a later README version gives 48 for the same step times")
                elif layers_stated < full:
                    self.note(f"reduced-layer proxy: {layers_stated} of {full} layers ({name})")
        o["layers"] = fmt(layers)

        # FSDP+DP (MaxText / Paxml): no TP, PP or CP
        fsdp_dp = "fsdp_dp" in label or "ici_FSDP" in other
        if fsdp_dp and tp is None and pp is None:
            tp, pp = 1, 1
            cp = cp or 1
            self.note("FSDP+DP layout: tp=pp=cp=1")
        if "per_device_batch_size" in other and mbs is None:
            mbs = int(other["per_device_batch_size"])
            self.note("mbs from per_device_batch_size")

        # impossible pipeline depth (the 'PP=41' label)
        if pp is not None and layers is not None and pp > layers:
            self.note(f"PP={pp} impossible ({layers} layers, {gpus} GPUs) -> empty (ft_llama3 README gives PP=1)")
            pp = None

        if cp is None and tp is not None and pp is not None:
            cp = 1
            self.note("CP not stated -> 1")
        vp_cell = r["vp"]
        vp = as_int(first_number(vp_cell)) if not is_none(vp_cell) else None
        if vp is None and label.get("vp", "").isdigit():
            vp = int(label["vp"])
        if vp is None and pp is not None:
            # "None" is how Megatron-Bridge states no interleaving; an empty or n/a cell of a
            # pipelined run leaves the schedule unknown (its bubble differs by up to 1/vp)
            if pp > 1 and clean(vp_cell).lower() != "none":
                self.note("VP not stated with PP > 1 -> empty (layout incomplete)")
            else:
                vp = 1
        if vp is not None and vp > 1 and pp == 1:
            self.note(f"VP={vp} with PP=1 has no effect -> 1")
            vp = 1
        ep = as_int(ep_val) if ep_val is not None else (1 if tp is not None else None)

        # seq_len
        seq = as_int(first_number(r["seq_len"]))
        if seq is None and "seq_len" in label:
            seq = int(label["seq_len"])
        step = self.metric_value("step_time_s")
        tok_total = first_number(r["tokens_per_s_total"])
        implied_seq = None
        if step and tok_total and gbs:
            x = tok_total * step / gbs
            for cand in (2048, 4096, 8192, 16384, 32768):
                if abs(x - cand) / cand < 0.015:
                    implied_seq = cand
        if seq is None:
            default = int(preset["seq_len"]) if preset else None
            if implied_seq is not None:
                seq = implied_seq
                if implied_seq == default:
                    self.note("seq_len blank -> model default (tokens/s x step / gbs agrees)")
                else:
                    self.note(f"seq_len blank: tokens/s x step / gbs gives {implied_seq} (model default {default})")
            elif default is not None and o["framework"] != "hf-transformers":
                seq = default
                self.note("seq_len blank -> model default")
            else:
                self.note("seq_len not stated")
        elif implied_seq is not None and implied_seq != seq:
            self.note(f"seq_len {seq} but tokens/s x step / gbs gives {implied_seq}")
        o["seq_len"] = fmt(seq)

        # data parallel
        dp_stated = None if r["dp"].strip().upper().startswith("FSDP") else as_int(first_number(r["dp"]))
        dp_derived = None
        if gpus and tp and pp and cp:
            if gpus % (tp * pp * cp) == 0:
                dp_derived = gpus // (tp * pp * cp)
            else:
                self.note(f"GPUs {gpus} not divisible by tp*pp*cp={tp * pp * cp}")
        dp = dp_derived if dp_derived is not None else dp_stated
        if dp_stated is not None and dp_derived is not None and dp_stated != dp_derived:
            self.note(f"stated dp={dp_stated} != GPUs/(tp*pp*cp)={dp_derived} (used)")
        if dp == 0:
            dp = None

        # FSDP
        fsdp_cell = r["fsdp"].strip()
        fsdp = as_int(first_number(fsdp_cell)) if fsdp_cell else None
        shard_group = gpus // (tp * pp) if gpus and tp and pp and gpus % (tp * pp) == 0 else None
        fw = o["framework"]
        if fsdp is not None and fsdp > 0:
            if fw == "megatron-core":
                if fsdp == 1 and shard_group and shard_group > 1:
                    self.note(f"FSDP column is a flag (1) -> sharding group GPUs/(tp*pp)={shard_group}")
                    fsdp = shard_group
                elif shard_group is not None and fsdp != shard_group:
                    self.note(f"FSDP={fsdp} != GPUs/(tp*pp)={shard_group}")
            elif fw == "nemo-automodel" and fsdp == 1:
                self.note("FSDP shard size 1 -> no sharding (0)")
                fsdp = 0
            elif fw == "nemo-automodel" and dp is not None and fsdp != dp:
                self.note(f"FSDP shard size {fsdp} != dp {dp}")
        elif fsdp is None:
            if "ici_FSDP" in other and "dcn_FSDP" in other:
                fsdp = int(other["ici_FSDP"]) * int(other["dcn_FSDP"])
                self.note("fsdp = ici_FSDP x dcn_FSDP")
            elif fw == "megatron-core":
                fsdp = 0
            elif fsdp_dp or "fsdp" in r["framework"].lower():
                self.note("FSDP used, sharding group size not stated")
        if r["dp"].strip().upper().startswith("FSDP") and not fsdp:
            self.note("dp column says FSDP but no group size")

        # global batch typo check against tokens/s x step / seq
        ga = ga_stated
        if gbs and mbs and dp and ga and gbs != mbs * dp * ga and step and tok_total and seq:
            implied_gbs = tok_total * step / seq
            if abs(implied_gbs - mbs * dp * ga) / (mbs * dp * ga) < 0.02:
                self.note(f"gbs {gbs} is a typo: mbs*dp*ga and tokens/s x step / seq give {mbs * dp * ga}")
                gbs = mbs * dp * ga
        if gbs and mbs and dp:
            if gbs % (mbs * dp) == 0:
                ga_derived = gbs // (mbs * dp)
                if ga is None:
                    ga = ga_derived
                elif ga != ga_derived:
                    lbs = as_int(first_number(other.get("LBS")))
                    why = (
                        f" (GA x LBS={lbs} x dp = gbs: GA counts local batches)" if lbs and ga * lbs * dp == gbs else ""
                    )
                    self.note(f"stated ga={ga} != gbs/(mbs*dp)={ga_derived}{why}")
            else:
                self.note(f"gbs {gbs} not divisible by mbs*dp={mbs * dp}")

        if pp and vp and layers and vp > 1 and layers % (pp * vp):
            extra = " (layers+2 divides: embedding/loss count as stages)" if (layers + 2) % (pp * vp) == 0 else ""
            self.note(f"layers {layers} not divisible by pp*vp={pp * vp}{extra}")

        for col, val in (("tp", tp), ("pp", pp), ("cp", cp), ("vp", vp), ("ep", ep), ("dp", dp)):
            o[col] = fmt(val)
        o["fsdp"], o["mbs"], o["gbs"], o["ga"] = fmt(fsdp), fmt(mbs), fmt(gbs), fmt(ga)
        if mbs is None and tp is not None:
            self.note("mbs not stated")
        if tp is None:
            if "not given" in r["notes"].lower():
                self.note("layout not given in the source")
            else:
                self.note("tp/pp not stated")

        o["recompute"] = self.recompute()
        if o["framework"] == "nemo-automodel" and re.search(r"kernels:[^;]*\bTE\b", r["other_config"]):
            self.note("te=on")  # the table's kernels column names Transformer Engine (public_stacks reads it)

        # measurements
        tok = self.metric_value("tokens_per_s_per_gpu")
        tfl = self.metric_value("model_tflops_per_gpu")
        o["step_time_s"], o["tokens_per_s_per_gpu"], o["model_tflops_per_gpu"] = fmt(step), fmt(tok), fmt(tfl)
        for name, value in (("step_time_s", step), ("tokens_per_s_per_gpu", tok), ("model_tflops_per_gpu", tfl)):
            if value is not None:
                o["metric"], o["measured"] = name, fmt(value)
                break
        if not o["metric"]:
            self.note("no step time, tokens/s/GPU or model TFLOP/s/GPU")

        if re.search(r"\bOOM\b", r["recompute"] + r["other_metric"]):
            self.note("source reports OOM on rank 0 for this setting")

        group = f"{source_basename(r['source'])}|{model or r['model']}|{system}|{o['num_gpus']}|{o['seq_len']}"
        o["group"] = group
        o["split"] = split_of(group)
        o["parse_notes"] = "; ".join(self.notes)
        return o

    def recompute(self) -> str:
        cell = self.r["recompute"].strip()
        if not cell:
            return ""
        low = cell.lower()
        if low.startswith("full"):
            return "full"
        if low.startswith("none"):
            return "none"
        if low.startswith("selective"):
            body = re.sub(r"^selective\s*[:(]?\s*", "", cell)
            body = re.sub(r"\((?:baseline|OOM)[^)]*\)", "", body).strip().rstrip(")")
            if body.startswith("[]"):
                self.note("selective with no modules -> none")
                return "none"
            modules = [m.strip() for m in re.split(r"[,+]", body) if m.strip()]
            return "selective:" + ",".join(modules) if modules else "selective"
        self.note(f"recompute '{cell}' not recognised")
        return ""


# ------------------------------------------------------------------------------------------- summary
def complete(o: dict[str, str]) -> bool:
    return all(o[c] for c in ("tp", "pp", "mbs", "gbs", "metric"))


def summary(rows: list[dict[str, str]]) -> str:
    lines = [f"Total rows: {len(rows)}", ""]
    for col in ("framework", "moe", "workload", "precision", "system", "metric", "split"):
        counts: Counter[str] = Counter()
        full: Counter[str] = Counter()
        for o in rows:
            counts[o[col] or "(empty)"] += 1
            full[o[col] or "(empty)"] += complete(o)
        lines += [f"| {col} | rows | tp, pp, mbs, gbs and a metric |", "|---|---:|---:|"]
        lines += [f"| {k} | {v} | {full[k]} |" for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
        lines.append("")
    usable = [
        o
        for o in rows
        if complete(o) and o["model"] and o["system"] and o["moe"] == "no" and o["workload"] in ("pretrain", "sft")
    ]
    lines.append(f"Dense pretrain+SFT rows with tp, pp, mbs, gbs, a metric, a model preset and a system: {len(usable)}")
    lines.append(
        "- by framework: " + ", ".join(f"{k} {v}" for k, v in sorted(Counter(o["framework"] for o in usable).items()))
    )
    lines += ["", "| framework | rows | model and system preset | also tp, pp, mbs, gbs and a metric |"]
    lines.append("|---|---:|---:|---:|")
    for fw, n in sorted(Counter(o["framework"] for o in rows).items(), key=lambda kv: (-kv[1], kv[0])):
        named = [o for o in rows if o["framework"] == fw and o["model"] and o["system"]]
        lines.append(f"| {fw} | {n} | {len(named)} | {sum(complete(o) for o in named)} |")
    lines.append("")
    mcore = [o for o in usable if o["framework"] == "megatron-core"]
    lines.append(f"Of these, Megatron-Core rows: {len(mcore)}")
    for col, fn in (
        ("cp", lambda o: "cp=1" if o["cp"] == "1" else "cp>1"),
        ("fsdp", lambda o: {"0": "fsdp=0", "": "fsdp unknown"}.get(o["fsdp"], "fsdp>0")),
        (
            "cp x fsdp",
            lambda o: ("cp=1" if o["cp"] == "1" else "cp>1") + "/" + ("fsdp=0" if o["fsdp"] == "0" else "fsdp>0"),
        ),
        ("precision", lambda o: o["precision"] or "(empty)"),
        ("workload", lambda o: o["workload"]),
        ("system", lambda o: o["system"]),
        ("metric", lambda o: o["metric"]),
        ("split", lambda o: o["split"]),
    ):
        c = Counter(fn(o) for o in mcore)
        lines.append(f"- by {col}: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
    return "\n".join(lines)


def read_rows(paths: list[Path], presets: dict[str, dict]) -> list[dict[str, str]]:
    """Every imported row of the files, in order: the first file with `Row`, the others with `StackRow`."""
    from public_runs_stacks import StackRow  # tools/ is on sys.path when this file runs as a script

    rows: list[dict[str, str]] = []
    _AMENDMENT_HITS.clear()
    for n, path in enumerate(paths):
        with path.open(newline="", encoding="utf-8") as f:
            table = list(csv.DictReader(f))
        kept = [r for r in table if not excluded(r)]
        amend(kept, path)
        if len(kept) < len(table):
            print(f"{path}: left out {len(table) - len(kept)} rows ({excluded_reasons(table)})", file=sys.stderr)
        kind = Row if n == 0 else StackRow
        rows += [kind(len(rows) + i, r, presets).build() for i, r in enumerate(kept)]
    return rows


AMENDMENTS = ROOT / "tools" / "data" / "public_runs" / "amendments.csv"
AMENDED = "_amended"  # the columns an amendment filled (a key no input column uses)


@cache
def amendments() -> tuple[dict[str, str], ...]:
    """What a row's own source states and the collection left empty or wrong (`amendments.csv`: source,
    locator, column, value, evidence -- the file and commit it was read from)."""
    if not AMENDMENTS.exists():
        return ()
    with AMENDMENTS.open(newline="", encoding="utf-8") as f:
        return tuple(csv.DictReader(f))


def amend(table: list[dict[str, str]], path: Path) -> None:
    """Apply the amendments to the rows of one input table (each must match a row of some table)."""
    for a in amendments():
        hits = [r for r in table if r["source"] == a["source"] and r["locator"] == a["locator"]]
        if a["column"] not in (table[0] if table else {}):
            continue
        for r in hits:
            r[a["column"]] = a["value"]
            r.setdefault(AMENDED, [])
            if a["column"] not in r[AMENDED]:
                r[AMENDED].append(a["column"])
        _AMENDMENT_HITS[(a["source"], a["locator"], a["column"])] += len(hits)


_AMENDMENT_HITS: Counter[tuple[str, str, str]] = Counter()


def check_amendments() -> None:
    unused = [k for k in ((a["source"], a["locator"], a["column"]) for a in amendments()) if not _AMENDMENT_HITS[k]]
    if unused:
        raise SystemExit(f"amendments.csv: {len(unused)} amendment(s) match no input row, first: {unused[0]}")


def excluded_reasons(table: list[dict[str, str]]) -> str:
    return "; ".join(sorted({excluded(r) for r in table if excluded(r)}))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", type=Path, nargs="+", help="training_layouts.csv, then the other stacks' tables")
    ap.add_argument("-o", "--out", type=Path, default=OUT, help=f"output CSV (default {OUT.relative_to(ROOT)})")
    ap.add_argument("--summary", action="store_true", help="print the count tables (markdown) to stdout")
    args = ap.parse_args(argv)
    rows = read_rows(args.csv, load_presets())
    check_amendments()  # every amendment names a row of the tables given (all of them, as documented)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {len(rows)} rows to {args.out}", file=sys.stderr)
    if args.summary:
        print(summary(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
