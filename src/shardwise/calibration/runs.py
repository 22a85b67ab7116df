"""Measured runs for `shardwise calibrate`: a CSV with one run per row, read strictly.

Columns (names are case-insensitive; the public-runs table's names and Megatron-LM's argument names, such as
micro_batch_size, are accepted as aliases):

- model (preset name, YAML file or config.json), system (preset name or YAML file);
- num_gpus, tp, pp, global_batch (alias gbs); optional dp (default: num_gpus / (tp pp cp)), cp,
  vpp (alias vp), micro_batch (alias mbs, default 1), ep and etp (a mixture of experts' expert
  parallelism, default 1 and tp), layers and seq_len (override the model's),
  recompute (none / selective / full; blank: the framework's default, full for maxtext and paxml,
  selective (per-op) for torchtitan),
  precision (bf16 / fp8), framework (a --framework preset or YAML file, a relative path read from
  the CSV's folder; default megatron-core), sequence_parallel (default: the framework's, else on when tp > 1),
  schedule (gpipe / 1f1b / zb-h1 / interleaved; default: the framework's, else 1f1b), async_tp_grad
  (default: the framework's), zero (default: the framework's), gpus_per_node (default: the system's), and any
  other cluster, plan or stack field of the training request that says how the run ran
  (`run_request.REQUEST_COLUMNS`: selective_policy, shard_group, inter_link, the kernels' switches, ...);
- the measurement, one of: step_time_s, tokens_per_s_per_gpu, model_tflops_per_gpu (with
  tflops_count, the FLOPs it counts: full-square (default), causal or maxtext-6n-causal,
  `calibration.tflops_count`; a tokens/s given beside a step time must tell the same step within
  `SAME_STEP`), or the pair metric + measured (the public-runs table);
- optional id (default: the row number), group or source (the table a run came from, for leave-one-source-out),
  and the informational columns of the public-runs table (`INFORMATIONAL`: kept, ignored). Any other column is an
  error naming the closest known one (a misspelt `micro_batch_size` would be ignored, the run priced at micro-batch 1).

Every problem is one SpecError line naming the file, the row and the column.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from shardwise.calibration.run_request import REQUEST_COLUMNS, _whole
from shardwise.errors import SpecError
from shardwise.specs import Scenario

MAX_RUNS_BYTES = 16 << 20  # 16 MiB: about 50,000 runs
MAX_RUNS = 20_000
METRICS = ("step_time_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu")
# a step time and a tokens/s of one run (as a log prints both) agree within this factor (rounding,
# a mean over other steps); beyond it one of them is of another run or in another unit. TFLOP/s is
# not compared: published ones count FLOPs by formulas up to 60% apart (recomputation, attention,
# LoRA's frozen weights; Megatron-Bridge's and NeMo's own tables), so the step time or tokens/s wins
SAME_STEP = 1.10
ALIASES = {
    **{"gbs": "global_batch", "mbs": "micro_batch", "vp": "vpp", "run_id": "id"},
    # Megatron-LM's argument names
    **{"micro_batch_size": "micro_batch", "global_batch_size": "global_batch", "seq_length": "seq_len"},
    **{"num_layers": "layers", "tensor_model_parallel_size": "tp", "pipeline_model_parallel_size": "pp"},
    **{"context_parallel_size": "cp", "virtual_pipeline_model_parallel_size": "vpp", "world_size": "num_gpus"},
}
REQUIRED = ("model", "system", "num_gpus", "tp", "pp", "global_batch")
GPU_COUNT = ("nodes", "num_nodes", "gpus")  # not columns: `nodes` was told "did you mean 'notes'?"
SERVING_METRICS = ("ttft_s", "tpot_s", "e2e_s", "throughput_tokens_per_s")
SERVING_REQUIRED = ("model", "system", "tp", "input_len", "output_len")
# every column a run is read from (training or serving)
READ = (
    *REQUIRED,
    *METRICS,
    *SERVING_METRICS,
    *("metric", "measured", "id", "group", "source", "dp", "cp", "vpp", "micro_batch", "layers", "seq_len"),
    *("recompute", "precision", "framework", "sequence_parallel", "zero", "fsdp", "gpus_per_node", "scope"),
    *("ep", "etp", "tflops_count"),
    *("micro_batches", "input_len", "output_len", "concurrency", "batch", "weight_precision", "kv_precision"),
    *("runtime", "engine"),
    *REQUEST_COLUMNS,  # how the run ran: any cluster, plan or stack field of the request (`run_request`)
)
# columns of the public-runs table (src/shardwise/data/public_training_runs.csv) and of `measure`'s
# CSV that describe a run without changing it: kept, not read
INFORMATIONAL = (
    *("locator", "commit_or_version", "verification", "workload", "model_raw", "moe", "architecture_note"),
    *("gpu_raw", "framework_raw", "framework_version", "precision_raw", "ga", "split", "parse_notes"),
    *("notes", "note", "comment", "date", "kind", "predicted_step_s", "error"),
)


@dataclass(frozen=True)
class Run:
    """One measured run: what ran (a training Scenario, or a serving case) and what was measured
    (`metric`: step_time_s for training, converted from any training measurement; ttft_s, tpot_s,
    e2e_s or throughput_tokens_per_s for serving)."""

    run_id: str
    case: Any  # Scenario | calibration.cases.ServingCase
    measured: float
    where: str  # "runs.csv line 3"
    group: str = ""  # the table or source it came from (for leave-one-out by source)
    metric: str = "step_time_s"
    framework_file: str = ""  # the framework YAML file the run names, as read ("" for a preset)
    model_note: str = ""  # what a model file without `family` was given (`presets.model_family_note`)
    given: tuple[str, float] = ("", 0.0)  # the column and value the user wrote (("", 0): `measured` itself)

    @property
    def scenario(self) -> Scenario:
        return getattr(self.case, "scenario", self.case)


def read_runs(path: str | Path) -> list[Run]:
    """The runs of a CSV file (see the module docstring)."""
    from shardwise import files

    p = Path(path)
    raw = files.read_small(p, MAX_RUNS_BYTES, "runs CSV")
    return parse_runs(files.decode_table(raw, str(p)), str(p), p.parent)  # UTF-16 "Unicode Text" too


def parse_runs(text: str, where: str = "<runs>", folder: str | Path | None = None) -> list[Run]:
    """The runs of a CSV's text; a relative framework file it names is read from `folder` (the
    CSV's own, as a user expects of a file naming a file), else from the current directory."""
    if "\0" in text:
        raise SpecError(f"{where}: is not a text file (a CSV of runs is expected)")
    from shardwise.files import sniff_delimiter

    known = {*READ, *INFORMATIONAL, *ALIASES}
    # a comma, or as Excel saves a table in a locale with a decimal comma (semicolons) or as Unicode Text (tabs)
    delimiter = sniff_delimiter(text, lambda h: _column(h) in known or _column(h).startswith("_"))
    try:
        reader = csv.DictReader(io.StringIO(text), delimiter=delimiter)
        header = reader.fieldnames
    except csv.Error as exc:
        raise SpecError(f"{where}: not a CSV file ({exc})") from None
    if not header:
        raise SpecError(f"{where}: empty; give a header line and one row per measured run")
    names = [_column(h) for h in header]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise SpecError(f"{where}: column {dup!r} appears twice")
    check_columns(names, where)
    serving = any(m in names for m in SERVING_METRICS)
    training = any(m in names for m in METRICS) or {"metric", "measured"} <= set(names)
    if not serving and not training:
        raise SpecError(
            f"{where}: no measurement column; give one of {', '.join(METRICS)} (training) or "
            f"{', '.join(SERVING_METRICS)} (serving)"
        )
    needed = REQUIRED if training else SERVING_REQUIRED
    missing = [c for c in needed if c not in names]
    if missing:
        raise SpecError(f"{where}: missing column(s) {', '.join(missing)} (needed: {', '.join(needed)})")
    runs: list[Run] = []
    try:
        for count, raw_row in enumerate(reader, start=1):  # line_num: the file's line, as an editor shows it
            if count > MAX_RUNS:
                raise SpecError(f"{where}: more than {MAX_RUNS:,} runs; split the file")
            if None in raw_row:
                raise SpecError(f"{where} line {reader.line_num}: more values than columns")
            row = {_column(k): (v or "").strip() for k, v in raw_row.items()}
            if not any(row.values()):
                continue
            runs.append(_run(_framework_near(row, folder), f"{where} line {reader.line_num}"))
    except csv.Error as exc:
        raise SpecError(f"{where}: not a valid CSV ({exc})") from None
    if not runs:
        raise SpecError(f"{where}: no runs (only a header)")
    check_distinct(runs)
    return runs


def from_rows(rows: list[tuple[dict[str, str], str]]) -> list[Run]:
    """Runs from already-parsed rows (a log each, see `calibration.logs`), with the CSV's checks."""
    for row, where in rows:
        check_columns([_column(k) for k in row], where)
    runs = [_run({_column(k): v for k, v in row.items()}, where) for row, where in rows]
    check_distinct(runs)
    return runs


def _framework_near(row: dict[str, str], folder: str | Path | None) -> dict[str, str]:
    """`row` with a relative framework file's path joined to `folder` (the CSV's): `calibrate
    r9/runs.csv` reads `framework: mine.yaml` as r9/mine.yaml, whatever the current directory. A
    file is told from a preset name as `presets` tells it (a .yaml/.yml name, or a file there)."""
    from shardwise import files

    name = row.get("framework", "")
    if folder is None or not name or Path(name).is_absolute():
        return row
    near = Path(folder) / name
    if name.lower().endswith((".yaml", ".yml")) or files.is_file(near):
        return {**row, "framework": str(near)}
    return row


def check_columns(names: list[str], where: str) -> None:
    """Refuse a column that is neither read nor informational, naming the closest known one
    (columns starting with `_` are a log reader's own)."""
    from shardwise.files import check_header

    gpus = "; give num_gpus, the GPUs in all (servers x GPUs per server)"
    ours = [n for n in names if not n.startswith("_")]
    check_header(
        ours,
        (*READ, *INFORMATIONAL, *ALIASES),
        where,
        "the columns: docs/calibration.md",
        dict.fromkeys(GPU_COUNT, gpus),
    )


def check_distinct(runs: list[Run]) -> None:
    """Two runs with one id, or the same run and measurement twice, are a mistake in the input."""
    ids: dict[str, str] = {}
    seen: dict[tuple[Any, ...], str] = {}
    for r in runs:
        if r.run_id in ids:
            raise SpecError(f"{r.where}: id {r.run_id!r} appears twice (also {ids[r.run_id]})")
        ids[r.run_id] = r.where
        key = (r.case, r.measured)
        if key in seen:
            raise SpecError(f"{r.where}: the same run and measurement as {seen[key]} (a duplicate)")
        seen[key] = r.where


def _column(name: str | None) -> str:
    key = (name or "").strip().lower().replace(" ", "_").replace("-", "_")
    return ALIASES.get(key, key)


def _measured(row: dict[str, str], where: str) -> tuple[str, float]:
    given = [(m, row[m]) for m in METRICS if row.get(m, "") != ""]
    if not given and row.get("metric") and row.get("measured"):
        given = [(row["metric"], row["measured"])]
    if not given:
        raise SpecError(f"{where}: no measurement; fill one of {', '.join(METRICS)}")
    metric, text = given[0]
    if metric not in METRICS:
        raise SpecError(f"{where}: metric {metric!r} is not one of {', '.join(METRICS)}")
    return metric, _positive(metric, text, where)


def _positive(metric: str, text: str, where: str) -> float:
    """A measured value: a positive finite number."""
    try:
        value = float(text)
    except ValueError:
        raise SpecError(f"{where}: {metric}: {text!r} is not a number") from None
    if not (value > 0 and value < 1e12):  # NaN fails too
        raise SpecError(f"{where}: {metric}: {text} is not allowed; a measurement must be a positive number")
    return value


def _serving_run(row: dict[str, str], where: str) -> Run:
    """A serving measurement: model, system, tp (pp), input_len, output_len, concurrency (alias
    batch), weight_precision / kv_precision (or precision for both), runtime, engine (a serving engine,
    `specs.serving.ENGINE_NAMES`; default tensorrt-llm, which runs on neither V100 nor AMD GPUs); one
    of ttft_s, tpot_s, e2e_s, throughput_tokens_per_s (output tokens per second over all replicas)."""
    from shardwise import presets
    from shardwise.calibration.cases import ServingCase
    from shardwise.engines.serving import plan_for_serving
    from shardwise.specs.serving import ServingWorkload

    given = [(m, row[m]) for m in SERVING_METRICS if row.get(m, "") != ""]
    if len(given) > 1:
        raise SpecError(f"{where}: one measurement per row ({', '.join(m for m, _ in given)} given); split the row")
    metric, text = given[0]
    value = _positive(metric, text, where)
    try:
        model = presets.model(row["model"], **{k: _whole(row, k, where) for k in ("layers", "seq_len") if row.get(k)})
        base = presets.system(row["system"])
    except SpecError as exc:
        raise SpecError(f"{where}: {exc}") from None
    tp, pp = _whole(row, "tp", where), _whole(row, "pp", where, 1)
    n = _whole(row, "num_gpus", where, tp * pp)
    if n % (tp * pp):
        raise SpecError(f"{where}: tp x pp = {tp * pp} does not divide num_gpus {n}")
    per_node = min(_whole(row, "gpus_per_node", where, base.gpus_per_node), n)
    precision = (row.get("precision") or base.gpu.sixteen_bit).lower()  # the GPU's 16-bit format
    lengths = (_whole(row, "input_len", where), _whole(row, "output_len", where))
    concurrency = _whole(row, "concurrency", where, _whole(row, "batch", where, 1))
    try:
        if n % per_node:
            raise SpecError(f"num_gpus {n} is not a multiple of {per_node} GPUs per server")
        cluster = base.with_(gpus_per_node=per_node, nodes=n // per_node)
        scn = Scenario(model, cluster, plan_for_serving(tp, pp, n // (tp * pp)))
        w, kv = (row.get("weight_precision") or precision).lower(), (row.get("kv_precision") or precision).lower()
        runtime = (row.get("runtime") or "graphs").lower()
        # NCCL, as these runs were always priced (serve's default is the engine's own kernel)
        engine = (row.get("engine") or "tensorrt-llm").lower()
        workload = ServingWorkload(*lengths, concurrency, w, kv, runtime, "none", engine)
        from shardwise.engines.engine_formats import check_engine_gpu

        check_engine_gpu(workload.engine, cluster.gpu, "serving: engine")  # TensorRT-LLM's: not on V100 or AMD
    except SpecError as exc:
        raise SpecError(f"{where}: {_cannot_express(exc)}") from None
    case = ServingCase(scn, workload, metric)
    return Run(row.get("id") or where, case, value, where, row.get("group", ""), metric)


def _cannot_express(exc: Exception) -> str:
    """A run the model refuses, in words; a name it does not know is a typo, not a limit."""
    text = str(exc)
    return text if text.startswith("unknown ") else f"the model cannot express this run: {text}"


def _run(row: dict[str, str], where: str) -> Run:
    if row.get("metric") in SERVING_METRICS and row.get("measured"):  # the metric + measured pair
        row = {**row, row["metric"]: row["measured"]}
    from shardwise.presets import model_family_note

    run = _serving_run(row, where) if any(row.get(m, "") != "" for m in SERVING_METRICS) else _training_run(row, where)
    return replace(run, model_note=model_family_note(row.get("model")) or "")


def _training_run(row: dict[str, str], where: str) -> Run:
    from shardwise.calibration.run_request import training_request
    from shardwise.calibration.tflops_count import count_of, flops_per_step_counted

    request = training_request(row, where)
    try:
        scn = request.scenario()
    except SpecError as exc:
        raise SpecError(f"{where}: {_cannot_express(exc)}") from None
    log_hidden = row.get("_log_hidden", "")
    if log_hidden and log_hidden.isdigit() and int(log_hidden) != int(scn.model.hidden):
        raise SpecError(
            f"{where}: the log's hidden_size {log_hidden} is not model {row['model']!r}'s {int(scn.model.hidden)}; "
            "give the model that ran (--set model=NAME or a config.json)"
        )
    model, plan, n = scn.model, scn.plan, int(scn.cluster.num_gpus)
    tp, pp, dp, cp = (int(getattr(plan, k)) for k in ("tp", "pp", "dp", "cp"))
    if int(tp * pp * dp * cp) != n:
        raise SpecError(f"{where}: tp x pp x dp x cp = {tp * pp * dp * cp} but num_gpus is {n}")
    tokens = float(plan.global_batch) * float(model.seq_len)

    def step_of(metric: str, value: float) -> float:
        if metric == "step_time_s":
            return value
        if metric == "tokens_per_s_per_gpu":
            return tokens / (value * n)
        return flops_per_step_counted(scn, count) / (value * 1e12 * n)  # the count the figure used

    metric, value = _measured(row, where)
    count = count_of(row, where)
    step = step_of(metric, value)
    tps = row.get("tokens_per_s_per_gpu", "")  # a second timing of the run must tell the same step
    if metric == "step_time_s" and tps:
        other = step_of("tokens_per_s_per_gpu", _positive("tokens_per_s_per_gpu", tps, where))
        if abs(math.log(other / step)) > math.log(SAME_STEP):
            raise SpecError(
                f"{where}: step_time_s {value:g} and tokens_per_s_per_gpu {tps} (a step of {other:.3g} s) disagree "
                f"by more than {SAME_STEP - 1:.0%}; keep the one measured"
            )
    case: Any = scn
    scope = (row.get("scope") or "step").lower()
    if scope not in ("step", "layers"):
        raise SpecError(f"{where}: scope: {scope!r} is not allowed; use step (a training step) or layers")
    if scope == "layers":  # a `shardwise measure` run: the layers only
        from shardwise.calibration.cases import LayerStackCase

        kinds = [k for k, v in (("tp", tp), ("pp", pp), ("dp", dp)) if v > 1]
        if len(kinds) != 1 or metric != "step_time_s":
            raise SpecError(
                f"{where}: a layers-scope run (shardwise measure) splits one of tp, pp, dp and gives step_time_s"
            )
        case = LayerStackCase(scn, kinds[0], _whole(row, "micro_batches", where, 1))
    from shardwise import presets

    framework = row.get("framework", "")
    file = framework if framework and presets._looks_like_path(framework) else ""
    group = row.get("group") or row.get("source", "")
    return Run(row.get("id") or where, case, step, where, group, framework_file=file, given=(metric, value))
