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
- **nanotron** (huggingface/nanotron `trainer.py` `train_step_logs`, `logging/base.py`
  `LoggerWriter`): the iteration lines (`iteration: 10 / 100 | ... | time_per_iteration_ms: 2.39K |
  ...`, values in `human_format`: 3 significant digits with a K/M/B suffix; before 2025
  `elapsed_time_per_iteration_ms`) give the step time (median after warm-up); the config printed at
  start-up (`ParallelismArgs(dp=.., pp=.., tp=.., tp_mode=.., recompute_layer=..,
  context_parallel_size=..)`, `TokensArgs(sequence_length=.., micro_batch_size=..,
  batch_accumulation_per_replica=..)`, the model config's `hidden_size` and `num_hidden_layers`)
  the layout.
- **Hugging Face Trainer** (transformers `Trainer`, Accelerate scripts print the same banner):
  `***** Running training *****` gives the micro-batch (`Instantaneous batch size per device`), the
  global batch (`Total train batch size (w. parallel, distributed & accumulation)`), hence the
  data-parallel ranks (global / (micro-batch x accumulation)), and `Total optimization steps`, which
  names the training progress bar; the step time is the median rate of that tqdm bar
  (`12/100 [00:40<04:53,  3.34s/it]`) after warm-up, else 1 / `train_steps_per_second` of the final
  metrics (`trainer_utils.speed_metrics`: the whole run, first steps included). No TP or PP.
- **plain torchrun scripts** (nanoGPT's `iter 10: loss 3.2, time 312.45ms, mfu 45.2%`, build-nanogpt's
  `step 10 | loss ... | dt: 312.45ms | tok/sec: ...`): a line with an iteration number and a time
  per iteration in ms or s; the layout comes from `--set` (framework `fsdp` unless given; `--set
  zero=0` for DDP).
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
# nanotron: `iteration: 10 / 100 | consumed_tokens: 5.24M | time_per_iteration_ms: 2.39K | ...`
_NANOTRON_ITER = re.compile(
    r"\biteration:\s*\d+\s*/\s*\d+\s*\|.*?\b(?:elapsed_)?time_per_iteration_ms:\s*([0-9.]+)([KMBTPE]?)"
)
_NANOTRON_START = re.compile(r"\bParallelismArgs\(")
# Hugging Face Trainer: its banner, the training bar's rate, the final speed metrics
_HF_BANNER = "***** Running training *****"
_HF_FIELDS = {
    "micro_batch": re.compile(r"Instantaneous batch size per (?:device|GPU) = ([\d,]+)"),
    "global_batch": re.compile(r"Total train batch size \(w\. parallel, distributed(?: & accumulation)?\) = ([\d,]+)"),
    "_accumulation": re.compile(r"Gradient Accumulation steps = ([\d,]+)"),
    "_total_steps": re.compile(r"Total optimization steps = ([\d,]+)"),
}
_TQDM = re.compile(r"\b(\d+)/(\d+) \[[\d:]+<[\d:?]+,\s*([0-9.]+)(s/it|it/s)\]")
_HF_STEPS_PER_S = re.compile(r"'?train_steps_per_second'?\s*[:=]\s*([0-9.]+(?:[eE][-+]?\d+)?)")
# plain torchrun scripts: nanoGPT `iter 10: loss 3.2, time 312.45ms`, build-nanogpt `step 10 | ... | dt: 312.45ms`
_PLAIN = re.compile(r"^.*?\b(?:iter|step)\s*:?\s*\d+\b.*?\b(?:time|dt)\s*[:=]?\s*([0-9.]+)\s*(ms|s)\b", re.M)

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
    elif _NANOTRON_ITER.search(text):
        trainer, row = "nanotron", _nanotron(text)
    elif _DS_RUNNING.search(text) or _DS_CURRENT.search(text):
        trainer, row = "DeepSpeed", _deepspeed(text, given, where)
    elif _HF_BANNER in text or _HF_STEPS_PER_S.search(text):
        trainer, row = "Hugging Face Trainer", _hf_trainer(text, where)
    elif _PLAIN.search(text):
        trainer, row = "torchrun", _plain(text)
    else:
        raise SpecError(f"{where}: {_no_timing(text)}")
    for key, value in given.items():  # --set fills in where the log is silent; against it, one line (review 37)
        stated = row.setdefault(key, value)
        if str(stated).strip() != str(value).strip():
            raise SpecError(
                f"{where}: --set {key}={value}: the log states {key} = {stated}; drop --set {key} (the log's is used)"
            )
    for key, value in _IMPLIED.get(trainer, {}).items():  # what the trainer cannot do, unless --set says
        row.setdefault(key, value)
    if "framework" not in row:
        row["framework"] = _FRAMEWORK[trainer]
    missing = [c for c in ("model", "system", "num_gpus", "tp", "pp", "global_batch") if not row.get(c)]
    if missing:
        sets = " ".join(f"--set {m}=..." for m in missing)
        raise SpecError(f"{where}: a {trainer} log without {', '.join(missing)}; give {sets}")
    return row


_FRAMEWORK = {
    "Megatron": "megatron-core",
    "torchtitan": "torchtitan",
    "DeepSpeed": "megatron-deepspeed",
    "nanotron": "nanotron",
    "Hugging Face Trainer": "hf-transformers",
    "torchrun": "fsdp",
}
_IMPLIED = {"Hugging Face Trainer": {"tp": "1", "pp": "1"}}  # the Trainer splits no layer


def _no_timing(text: str) -> str:
    """The one-line error for a log with no timing lines: which trainer it looks like, what was sought."""
    if _DOTTED.search(text) and "tensor_model_parallel_size" in text:
        return (
            "a Megatron log (its argument dump is there) with no 'elapsed time per iteration (ms):' line; "
            "did the run reach its first --log-interval?"
        )
    if _NANOTRON_START.search(text):
        return (
            "a nanotron log (its config is there) with no 'iteration: N / M | ... | time_per_iteration_ms:' "
            "line; did the run reach its first logged iteration (logging.iteration_step_info_interval)?"
        )
    if _HF_BANNER in text:
        return (
            "a Hugging Face Trainer log ('***** Running training *****') with no training progress bar rate "
            "('N/M [..<.., 1.23s/it]') and no 'train_steps_per_second'; log stderr too (tqdm writes there), "
            "or let the run finish"
        )
    return (
        "no step times found (looked for Megatron's 'elapsed time per iteration (ms)', torchtitan's 'tps:', "
        "nanotron's 'time_per_iteration_ms:', DeepSpeed's 'SamplesPerSec=', the Hugging Face Trainer's "
        "progress bar or 'train_steps_per_second', and 'iter N ... time 312ms' lines)"
    )


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


_SUFFIX = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}  # nanotron's human_format


def _args_block(text: str, name: str) -> str:
    """The text of a dataclass repr `name(...)` in a pformat'ed config, up to the next dataclass."""
    start = text.find(name + "(")
    if start < 0:
        return ""
    rest = text[start + len(name) + 1 : start + 4000]
    cut = re.search(r"\b[A-Z]\w*Args\(", rest)
    return rest[: cut.start()] if cut else rest


def _field(block: str, key: str) -> str | None:
    m = re.search(rf"\b{key}=([^,\s)]+)", block)
    return m[1] if m else None


def _nanotron(text: str) -> dict[str, str]:
    times = [float(v) * _SUFFIX[s] / 1e3 for v, s in _NANOTRON_ITER.findall(text)]
    row: dict[str, str] = {"step_time_s": f"{_median_after_warmup(times):.6g}"}
    par, tokens = _args_block(text, "ParallelismArgs"), _args_block(text, "TokensArgs")
    sizes = {}
    for key, column in (("dp", "dp"), ("pp", "pp"), ("tp", "tp"), ("context_parallel_size", "cp")):
        value = _field(par, key)
        if value is not None and value.isdigit():
            row[column] = value
            sizes[column] = int(value)
    if len(sizes) == 4:
        row["num_gpus"] = str(sizes["dp"] * sizes["pp"] * sizes["tp"] * sizes["cp"])
    recompute = _field(par, "recompute_layer")
    if recompute is not None:
        row["recompute"] = "full" if recompute == "True" else "none"
    mode = re.search(r"\btp_mode=<?TensorParallelLinearMode\.(\w+)", par)
    if mode and sizes.get("tp", 1) > 1:
        row["sequence_parallel"] = "on" if mode[1] == "REDUCE_SCATTER" else "off"
    # the engine the run used (the preset's default is the code's, AllForwardAllBackward: gpipe)
    engine = re.search(r"\bpp_engine=<?[\w.]*?(AllForwardAllBackward|OneForwardOneBackward)PipelineEngine", par)
    if engine:
        row["schedule"] = "gpipe" if engine[1] == "AllForwardAllBackward" else "1f1b"
    overlap = _field(par, "tp_linear_async_communication")
    if overlap in ("True", "False") and sizes.get("tp", 1) > 1:
        row["async_tp_grad"] = "on" if overlap == "True" else "off"
    for key, column in (("sequence_length", "seq_len"), ("micro_batch_size", "micro_batch")):
        value = _field(tokens, key)
        if value is not None and value.isdigit():
            row[column] = value
    accumulation = _field(tokens, "batch_accumulation_per_replica")
    start = re.search(r"\bmbs: (\d+) \| grad_accum: (\d+) \|.*?\bglobal_batch_size: (\d+)", text)
    if start:  # the 'Start training' line: global_batch_size in sequences
        row.setdefault("micro_batch", start[1])
        row["global_batch"] = start[3]
    elif accumulation and accumulation.isdigit() and row.get("micro_batch") and "dp" in sizes:
        row["global_batch"] = str(int(row["micro_batch"]) * int(accumulation) * sizes["dp"])
    for key, column in (("num_hidden_layers", "layers"), ("hidden_size", "_log_hidden")):
        m = re.search(rf"\b{key}=(\d+)", text)
        if m:
            row[column] = m[1]
    return row


def _whole_number(text: str) -> int:
    return int(text.replace(",", ""))


def _hf_trainer(text: str, where: str) -> dict[str, str]:
    found = {column: _whole_number(m[1]) for column, rx in _HF_FIELDS.items() if (m := rx.search(text))}
    row = {c: str(v) for c, v in found.items() if not c.startswith("_")}
    micro, accumulation, batch = found.get("micro_batch"), found.get("_accumulation"), found.get("global_batch")
    if micro and accumulation and batch and batch % (micro * accumulation) == 0:
        row["num_gpus"] = row["dp"] = str(batch // (micro * accumulation))
    total = found.get("_total_steps")
    bar = [
        (int(n), float(r) if unit == "s/it" else 1.0 / float(r))
        for n, m, r, unit in _TQDM.findall(text)
        if total is not None and int(m) == total and float(r) > 0
    ]
    after_warmup = [s for n, s in bar if n > WARMUP_LINES]
    rates = _HF_STEPS_PER_S.findall(text)
    if after_warmup:
        row["step_time_s"] = f"{statistics.median(after_warmup):.6g}"
    elif rates and float(rates[-1]) > 0:
        row["step_time_s"] = f"{1.0 / float(rates[-1]):.6g}"
    else:
        raise SpecError(f"{where}: {_no_timing(_HF_BANNER)}")
    return row


def _plain(text: str) -> dict[str, str]:
    times = [float(v) / (1e3 if unit == "ms" else 1.0) for v, unit in _PLAIN.findall(text)]
    return {"step_time_s": f"{_median_after_warmup(times):.6g}"}
