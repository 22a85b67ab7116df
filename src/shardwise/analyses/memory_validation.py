"""`fits_in_memory` and the memory estimate against published evidence: runs that fit or ran out
of memory, and measured peaks (`data/public_memory_evidence.csv`, described in
`data/PUBLIC_RUNS_OTHER_STACKS.md`; the CSV is kept as collected, one row per published claim).

Each row becomes a `Scenario` through the small tables below (the model, the GPU, the framework
preset, the ZeRO stage and the recomputation each source states in words) or is skipped with the
reason: an encoder (BERT), CPU offload, LoRA / QLoRA / NF4 / paged optimizers, torchtune's pure
bf16 optimizer state, fused linear-cross-entropy kernels (Liger, ALST), a layout the source does
not state. The source's peak is compared with the estimate's matching part:

- `allocated` (torch.cuda.max_memory_allocated, Megatron-DeepSpeed's "max allocated"): the model
  state, activations, buffers and the libraries' workspaces (allocated through PyTorch);
- `reserved` (torch.cuda.max_memory_reserved, torchtitan's logged peak): also what the caching
  allocator keeps but cannot hand out;
- `device` (nvidia-smi or not stated): everything, with the CUDA context and NCCL's buffers.

A row may state in its `other_config` what the framework's preset would otherwise decide, as
name=value: `ep` (expert parallelism, folded into the data-parallel ranks), `vpp`, `sequence_parallel`,
`flash_attention`, `optimizer_state`, `loss_kernel`, `grad_reduce_bf16`, `zero3_buckets` (DeepSpeed's
ZeRO-3 buckets, "reduce:2e8"), and `stage` (first | last: the pipeline stage whose peak the source
logs, Megatron-LM the last rank's; the fullest stage otherwise).

Metrics: of the runs that ran out of memory, how many the model calls out of memory (recall);
of those that fit, how many it calls out of memory (false-OOM rate); the same two under `plan`'s
rule, which keeps 10% of each GPU free (`headroom_calls`); and the signed error of the predicted
peak where a peak is published.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

import numpy as np

from shardwise import presets
from shardwise.analyses.memory_evidence_models import MODELS
from shardwise.engines.training import training_memory
from shardwise.errors import SpecError
from shardwise.physics.memory import MemoryBreakdown
from shardwise.physics.memory_runtime import LIBRARY_WORKSPACE_BYTES
from shardwise.requests.training import TrainingRequest
from shardwise.specs import Scenario
from shardwise.units import GIB

CITATION = (
    "published fits / out-of-memory runs and peaks (InternEvo, Megatron-DeepSpeed, Megatron-LM functional "
    "tests and issues, torchtitan + torchao, torchtitan's DeepSeek-V3 16B issue and notes, PyTorch FSDP, Liger-Kernel, "
    "torchtune, Colossal-AI, DeepSpeed ALST, NeMo Automodel CI, OpenRLHF, hpcaitech's Lightning benchmark; "
    "data/public_memory_evidence.csv)"
)

# (leading words of the GPU column, system preset); A800 = A100 with less NVLink, the same 80 GB.
SYSTEMS = (
    ("A800", "dgx-a100"),
    ("A100-40GB", "dgx-a100-40gb"),
    ("A100", "dgx-a100"),
    ("V100", "dgx-1-v100"),
    ("H100 Meta", "h100-meta-8x"),  # Meta's 95 GiB H100 (torchtitan logs: memory x% of 95.0 GiB)
    ("H100", "dgx-h100"),
    ("H200", "dgx-h200"),
    ("MI300X", "mi300x-8x"),
    ("B200", "dgx-b200"),
)
# (words in the framework column, framework preset); torchtitan rows with "torch.compile on" run
# torchtitan-compile.
FRAMEWORKS = (
    ("InternEvo", "internevo"),
    ("Megatron-DeepSpeed", "megatron-deepspeed"),
    ("torchtitan", "torchtitan"),
    ("PyTorch FSDP1", "fsdp"),
    ("Megatron-LM (Megatron-Core", "megatron-core"),
    ("Megatron-LM (2023", "megatron-lm-2022"),
    ("Megatron-Bridge", "megatron-core"),
    ("NeMo Automodel", "nemo-automodel"),
    ("OpenRLHF (DeepSpeed", "deepspeed"),
    ("Lightning DeepSpeedStrategy", "deepspeed"),
)
# (words in the framework column, what the published peak measures)
PEAK_KINDS = (
    ("InternEvo", "device"),
    ("Megatron-DeepSpeed", "allocated"),
    ("Megatron-LM", "allocated"),  # mem-max-allocated-bytes: torch.cuda.memory_stats' allocated peak
    ("torchtitan", "reserved"),
    ("Lightning", "allocated"),  # hpcaitech's benchmark/gpt/callback.py: torch.cuda.max_memory_allocated
)
# plan fields a row states in its other_config column as name=value (what the framework's preset
# would otherwise decide)
OVERRIDES = re.compile(
    r"\b(ep|vpp|sequence_parallel|flash_attention|stage|recompute_modules|optimizer_state|expandable_segments|loss_kernel"
    r"|functional_a2a|grad_reduce_bf16)=([\w,-]+)"
)
# DeepSpeed ZeRO-3's buckets a row states (`Plan.zero3_buckets` as text: zero3_buckets=reduce:2e8,...;
# the colons stand for the command line's "=")
ZERO3_BUCKETS = re.compile(r"\bzero3_buckets=([\w:.,]+)")
# what the model does not express, by words in the row (checked in this order)
NOT_MODELLED = (
    ("BERT", "an encoder fine-tuned on SQuAD, no sequence length stated"),
    ("offload", "CPU offload of optimizer state or activations"),
    ("QLoRA", "QLoRA (4-bit frozen weights)"),
    ("LoRA", "LoRA on a stack whose adapter layout is not stated"),
    ("Paged", "a paged 8-bit optimizer, batch not stated"),
    ("Liger kernels", "Liger's fused linear cross-entropy (never materialises the logits)"),
    ("torchtune", "torchtune's pure-bf16 optimizer state (no fp32 master weights)"),
    ("ColossalAI README", "micro-batch or data-parallel size not stated"),
)


@dataclass(frozen=True)
class MemoryRow:
    """One published claim and the model's estimate (`skip`: why it was not predicted)."""

    row: int  # data row of the CSV, from 1
    label: str
    source: str
    outcome: str  # fits | oom
    framework: str  # the framework preset it runs on ("" when skipped)
    measured_bytes: float  # nan: no peak published
    kind: str  # allocated | reserved | device: what the peak measures
    predicted_bytes: float  # the estimate's part that matches `kind` (nan when skipped)
    total_bytes: float
    capacity_bytes: float
    skip: str = ""

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes

    def fits_with_headroom(self, share: float) -> bool:
        """`plan`'s test: the estimate fits with `share` of the GPU's memory kept free."""
        return self.total_bytes <= (1.0 - share) * self.capacity_bytes

    @property
    def error(self) -> float:
        return (self.predicted_bytes - self.measured_bytes) / self.measured_bytes


@dataclass(frozen=True)
class MemorySummary:
    rows: tuple[MemoryRow, ...]

    @property
    def predicted(self) -> tuple[MemoryRow, ...]:
        return tuple(r for r in self.rows if not r.skip)

    @property
    def oom(self) -> tuple[MemoryRow, ...]:
        return tuple(r for r in self.predicted if r.outcome == "oom")

    @property
    def fit(self) -> tuple[MemoryRow, ...]:
        return tuple(r for r in self.predicted if r.outcome == "fits")

    @property
    def oom_recall(self) -> float:
        """Of the runs that ran out of memory, the share the model calls out of memory."""
        return _share([not r.fits for r in self.oom])

    @property
    def false_oom_rate(self) -> float:
        """Of the runs that fit, the share the model calls out of memory."""
        return _share([not r.fits for r in self.fit])

    @property
    def fit_accuracy(self) -> float:
        """Of the runs that fit or ran out of memory, the share `fits_in_memory` calls right."""
        return _share([r.fits == (r.outcome == "fits") for r in (*self.oom, *self.fit)])

    def headroom_calls(self, share: float) -> tuple[int, int]:
        """Under `plan`'s rule (`share` of each GPU kept free, requests.training.PLAN_MEMORY_HEADROOM):
        (runs that ran out of memory called out, runs that fit called out)."""
        return sum(not r.fits_with_headroom(share) for r in self.oom), sum(
            not r.fits_with_headroom(share) for r in self.fit
        )

    @property
    def peaks(self) -> tuple[MemoryRow, ...]:
        return tuple(r for r in self.predicted if not math.isnan(r.measured_bytes))

    @property
    def peak_mape(self) -> float:
        return float(np.mean([abs(r.error) for r in self.peaks])) if self.peaks else math.nan

    @property
    def peak_bias(self) -> float:
        return float(np.mean([r.error for r in self.peaks])) if self.peaks else math.nan


def _share(flags: list[bool]) -> float:
    return sum(flags) / len(flags) if flags else math.nan


@cache
def raw_rows() -> tuple[dict[str, str], ...]:
    text = resources.files("shardwise.data").joinpath("public_memory_evidence.csv").read_text(encoding="utf-8")
    return tuple(csv.DictReader(text.splitlines()))


def _first(table: tuple[tuple[str, str], ...], text: str, what: str) -> str:
    for words, value in table:
        if words in text:
            return value
    raise SpecError(f"{what} {text!r} has no mapping")


def _int(row: dict[str, str], key: str, default: int | None = None) -> int:
    value = row.get(key, "").strip()
    if not value:
        if default is None:
            raise SpecError(f"{key} not stated")
        return default
    return int(float(value))


def _zero(text: str) -> int:
    t = text.lower()
    for words, stage in (("zero1", 1), ("zero2", 2), ("zero3", 3), ("fsdp", 3), ("none", 0)):
        if t.startswith(words) or (words == "fsdp" and "fsdp" in t):
            return stage
    raise SpecError(f"sharding {text!r} has no mapping")


def _recompute(text: str) -> str:
    t = text.lower()
    if "selective" in t:
        return "selective"
    if t.startswith("none") or not t:
        return "none"
    if "checkpointing" in t or t.startswith("full"):
        return "full"
    raise SpecError(f"recomputation {text!r} has no mapping")


def _precision(text: str) -> str:
    t = text.lower()
    for words, name in (("mxfp8", "mxfp8"), ("fp8", "fp8"), ("fp16", "fp16"), ("bf16", "bf16")):
        if t.startswith(words):
            return name
    raise SpecError(f"precision {text!r} has no mapping")


def scenario(row: dict[str, str]) -> tuple[Scenario, str]:
    """The row's scenario and what its published peak measures; SpecError says why not."""
    text = " ".join(row.values())
    for words, why in NOT_MODELLED:
        if words in text:
            raise SpecError(why)
    if row["model"] not in MODELS:
        raise SpecError(f"model {row['model']!r} has no mapping")
    name, shape = MODELS[row["model"]]
    model = presets.model(name) if not shape or "hidden" not in shape else None
    if model is None:
        from shardwise.loaders import model_from_dict

        model = model_from_dict(name, {**shape, "seq_len": _int(row, "seq_len")})
    elif shape:
        model = presets.model(name, **shape)
    model = model.with_(seq_len=_int(row, "seq_len"))
    n = _int(row, "num_gpus")
    system_name = _first(SYSTEMS, row["gpu"], "GPU")
    base = presets.system(system_name)
    per_node = n if n <= base.gpus_per_node or n % base.gpus_per_node else base.gpus_per_node
    if "DGX-2" in row["gpu"]:  # 16 V100 on one NVSwitch
        per_node = min(n, 16)
    framework = _first(FRAMEWORKS, row["framework"], "framework")
    if framework == "torchtitan" and "torch.compile on" in row["other_config"]:
        framework = "torchtitan-compile"
    tp, pp, dp, cp = (_int(row, k, 1 if k == "cp" else None) for k in ("tp", "pp", "dp", "cp"))
    if tp * pp * dp * cp != n:
        raise SpecError(f"tp x pp x dp x cp = {tp * pp * dp * cp}, not the {n} GPUs")
    mbs = _int(row, "mbs")
    found = re.search(r"micro_num=(\d+)", row["other_config"])
    gbs = _int(row, "gbs", dp * mbs * (int(found[1]) if found else 1))
    # sequence parallelism is opt-in in Megatron-DeepSpeed and absent from FSDP and InternEvo
    sp = tp > 1 and framework not in ("fsdp", "internevo", "megatron-deepspeed")
    stated = dict(OVERRIDES.findall(row["other_config"]))
    if "sequence_parallel" in stated:
        sp = stated["sequence_parallel"] == "true"
    flash = {"true": True, "false": False}.get(stated.get("flash_attention", ""))
    # the run's PYTORCH_CUDA_ALLOC_CONF where the row states it, else the framework's launcher's
    expandable = {"true": True, "false": False}.get(stated.get("expandable_segments", ""))
    if expandable is None and "PYTORCH_CUDA_ALLOC_CONF=expandable_segments" in row["other_config"]:
        expandable = True
    request = TrainingRequest(
        system=system_name,
        gpus_per_node=per_node,
        nodes=n // per_node,
        tp=tp,
        pp=pp,
        dp=dp,
        cp=cp,
        micro_batch=mbs,
        global_batch=gbs,
        recompute=_recompute(row["recompute"]),
        zero=_zero(row["fsdp_or_zero"]),
        precision=_precision(row["precision"]),
        framework=framework,
        sequence_parallel=sp,
        ep=int(stated.get("ep", 1)),
        vpp=int(stated.get("vpp", 1)),
        recompute_modules=stated.get("recompute_modules"),
        flash_attention=flash,
        optimizer_state=stated.get("optimizer_state"),
        loss_kernel=stated.get("loss_kernel"),
        zero3_buckets=(z3 := ZERO3_BUCKETS.search(row["other_config"])) and z3[1].replace(":", "="),
        functional_a2a={"true": True, "false": False}.get(stated.get("functional_a2a", "")),
        grad_reduce_bf16={"true": True, "false": False}.get(stated.get("grad_reduce_bf16", "")),
        expandable_segments=expandable,
    )
    peak_of = _first(PEAK_KINDS, row["framework"], "peak of") if row["measured_peak_gib"] else "device"
    return request.build(model).scenario, peak_of


def part(memory: MemoryBreakdown, kind: str, capacity_bytes: float = math.inf) -> float:
    """The part of the estimate a published peak of `kind` measures. A reserved or device peak also
    holds the blocks the caching allocator keeps cached beside a flat-shard step
    (`MemoryBreakdown.cached_bytes`), as far as the GPU's memory (`capacity_bytes`) goes: past it
    the allocator releases them before it allocates again."""
    m = {k: float(np.asarray(v)) for k, v in memory.as_dict().items()}
    allocated = m["total"] - m["allocator"] - m["reserved"] + LIBRARY_WORKSPACE_BYTES
    cached = float(np.asarray(memory.cached_bytes))
    device = max(m["total"], min(m["total"] + cached, capacity_bytes))
    reserved = allocated + m["allocator"] + (device - m["total"])
    return {"allocated": allocated, "reserved": reserved, "device": device}[kind]


def _label(row: dict[str, str]) -> str:
    layout = "-".join(f"{k}{row[k]}" for k in ("tp", "pp", "dp") if row.get(k))
    return f"{row['model'][:22]}, {row['num_gpus'] or '?'} {row['gpu'][:10]}, {layout}, mbs {row['mbs'] or '?'}"


def validate_memory() -> MemorySummary:
    """Every row of the evidence, predicted or skipped."""
    out = []
    for i, row in enumerate(raw_rows(), start=1):
        measured = float(row["measured_peak_gib"]) * GIB if row["measured_peak_gib"] else math.nan
        common = {
            "row": i,
            "label": _label(row),
            "source": row["source"].removeprefix("GitHub ").split(" ")[0],
            "outcome": row["outcome"],
            "measured_bytes": measured,
        }
        try:
            scn, kind = scenario(row)
        except SpecError as exc:
            nan = math.nan
            skip = {"kind": "", "predicted_bytes": nan, "total_bytes": nan, "capacity_bytes": nan, "skip": str(exc)}
            out.append(MemoryRow(**common, framework="", **skip))
            continue
        stated = dict(OVERRIDES.findall(row["other_config"]))
        memory = training_memory(scn, stage=stated.get("stage", "fullest"))
        capacity = float(scn.cluster.gpu.memory_bytes)
        out.append(
            MemoryRow(
                **common,
                framework=scn.plan.framework,
                kind=kind,
                predicted_bytes=part(memory, kind, capacity),
                total_bytes=float(np.asarray(memory.total_bytes)),
                capacity_bytes=capacity,
            )
        )
    return MemorySummary(tuple(out))
