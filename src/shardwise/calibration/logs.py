"""Measured runs from trainers' logs, for `shardwise calibrate LOG ...`.

Each log becomes one run: the columns of a runs CSV (`calibration.runs`) that the log states, and
its measurement. What a log does not state comes from `--set KEY=VALUE` (e.g. `--set
system=dgx-h100`); what is still missing is named in the error.

- **Megatron-LM / Megatron-Core / NeMo**: the argument dump printed at start-up (lines like
  `  tensor_model_parallel_size ........ 8`) gives the layout; the iteration lines
  (`elapsed time per iteration (ms): 6421.3`) the step time: the median of the logged
  iterations after the first `WARMUP_LINES` (the first iterations compile, allocate and warm up).
- **torchtitan**: the metrics lines (`step: 10  loss: ...  tps: 7,234  tflops: ...`) give tokens
  per second per GPU (median after warm-up); the layout comes from `--set` (its TOML is not in
  the log).
- **DeepSpeed**: `SamplesPerSec=` / `RunningAvgSamplesPerSec=` values (samples per second over all
  GPUs; the last running average, else the median) with the configuration dump
  (`train_batch_size`, `train_micro_batch_size_per_gpu`) give the step time.
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path

from shardwise.errors import SpecError

MAX_LOG_BYTES = 256 << 20
WARMUP_LINES = 2

_DOTTED = re.compile(r"^\s*(?:\[[^\]]*\]\s*)*([A-Za-z_][\w.]*)\s+\.{3,}\s+(\S.*?)\s*$", re.M)
_MEGATRON_ITER = re.compile(r"elapsed time per iteration \(ms\):\s*([0-9.]+)")
_TITAN = re.compile(r"\bstep:\s*\d+\b.*?\btps:\s*([0-9][0-9,]*(?:\.\d+)?)")
_DS_RUNNING = re.compile(r"RunningAvgSamplesPerSec=\s*([0-9.]+)")
_DS_CURRENT = re.compile(r"(?<![A-Za-z])(?:Curr)?SamplesPerSec=\s*([0-9.]+)")

# Megatron argument -> run column (see calibration.runs)
_MEGATRON = {
    "num_layers": "layers",
    "seq_length": "seq_len",
    "tensor_model_parallel_size": "tp",
    "pipeline_model_parallel_size": "pp",
    "context_parallel_size": "cp",
    "virtual_pipeline_model_parallel_size": "vpp",
    "num_layers_per_virtual_pipeline_stage": "_layers_per_virtual_stage",
    "micro_batch_size": "micro_batch",
    "global_batch_size": "global_batch",
    "world_size": "num_gpus",
    "data_parallel_size": "dp",
    "recompute_granularity": "recompute",
    "sequence_parallel": "sequence_parallel",
    "fp8": "_fp8",
    "use_distributed_optimizer": "_distributed_optimizer",
    "hidden_size": "_hidden",
}
_DEEPSPEED = {"train_batch_size": "global_batch", "train_micro_batch_size_per_gpu": "micro_batch"}


def read_log(path: str | Path, given: dict[str, str]) -> dict[str, str]:
    """The run row a log describes, `given` (from --set) filling what it does not say."""
    from shardwise import files

    p = Path(path)
    text = files.read_small(p, MAX_LOG_BYTES, "training log").decode("utf-8", errors="replace")
    return parse_log(text, given, str(p))


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_DS_CONFIG = re.compile(r"^\s*(train_batch_size|train_micro_batch_size_per_gpu)\s+\.*\s*(\d+)\s*$", re.M)


def parse_log(text: str, given: dict[str, str], where: str = "<log>") -> dict[str, str]:
    text = _ANSI.sub("", text)  # torchtitan colours its metrics lines
    if _MEGATRON_ITER.search(text):
        trainer, row = "Megatron", _megatron(text, where)
    elif _TITAN.search(text):
        trainer, row = "torchtitan", _torchtitan(text, where)
    elif _DS_RUNNING.search(text) or _DS_CURRENT.search(text):
        trainer, row = "DeepSpeed", _deepspeed(text, given, where)
    else:
        raise SpecError(
            f"{where}: no step times found (looked for Megatron's 'elapsed time per iteration (ms)', "
            "torchtitan's 'tps:' and DeepSpeed's 'SamplesPerSec=')"
        )
    for key, value in given.items():  # --set wins over the log only where the log is silent
        row.setdefault(key, value)
    if "framework" not in row:
        row["framework"] = {"Megatron": "megatron-core", "torchtitan": "torchtitan", "DeepSpeed": "megatron-deepspeed"}[
            trainer
        ]
    missing = [c for c in ("model", "system", "num_gpus", "tp", "pp", "global_batch") if not row.get(c)]
    if missing:
        sets = " ".join(f"--set {m}=..." for m in missing)
        raise SpecError(f"{where}: a {trainer} log without {', '.join(missing)}; give {sets}")
    return row


def _median_after_warmup(values: list[float]) -> float:
    kept = values[WARMUP_LINES:] if len(values) > WARMUP_LINES + 1 else values
    return statistics.median(kept)


def _dotted(text: str) -> dict[str, str]:
    return {m[1].lower(): m[2] for m in _DOTTED.finditer(text)}


def _megatron(text: str, where: str) -> dict[str, str]:
    times = [float(x) / 1e3 for x in _MEGATRON_ITER.findall(text)]
    row: dict[str, str] = {"step_time_s": f"{_median_after_warmup(times):.6g}"}
    args = _dotted(text)
    for arg, column in _MEGATRON.items():
        value = args.get(arg)
        if value is not None and value != "None":
            row[column] = value
    if row.pop("_fp8", "False") not in ("False", "None", "false", ""):  # e.g. 'hybrid' or 'e4m3'
        row["precision"] = "mxfp8" if args.get("fp8_recipe") == "mxfp8" else "fp8"  # Megatron-Core's recipe
    if "_distributed_optimizer" in row:
        row["zero"] = "1" if row.pop("_distributed_optimizer") == "True" else "0"
    per_stage = row.pop("_layers_per_virtual_stage", None)
    if per_stage and "vpp" not in row and row.get("layers") and row.get("pp"):
        row["vpp"] = str(int(row["layers"]) // (int(row["pp"]) * int(per_stage)))
    if "recompute" in row:
        row["recompute"] = row["recompute"].lower()
    if "sequence_parallel" in row:
        row["sequence_parallel"] = row["sequence_parallel"].lower()
    row["_log_hidden"] = row.pop("_hidden", "")
    return row


def _torchtitan(text: str, where: str) -> dict[str, str]:
    tps = [float(x.replace(",", "")) for x in _TITAN.findall(text)]
    return {"tokens_per_s_per_gpu": f"{_median_after_warmup(tps):.6g}"}


def _deepspeed(text: str, given: dict[str, str], where: str) -> dict[str, str]:
    config = {m[1]: m[2] for m in _DS_CONFIG.finditer(text)}  # DeepSpeed pads with dots, or not
    row = {column: config[key] for key, column in _DEEPSPEED.items() if key in config}
    running = _DS_RUNNING.findall(text)
    rate = float(running[-1]) if running else _median_after_warmup([float(x) for x in _DS_CURRENT.findall(text)])
    batch = row.get("global_batch") or given.get("global_batch")
    if not batch:
        raise SpecError(f"{where}: a DeepSpeed log without train_batch_size; give --set global_batch=...")
    try:
        row["step_time_s"] = f"{float(batch) / rate:.6g}"
    except (ValueError, ZeroDivisionError):
        raise SpecError(f"{where}: samples per second {rate} or batch {batch!r} is not usable") from None
    return row
