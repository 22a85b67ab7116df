"""`shardwise measure` as requests: TP, PP or DP run for real over processes (torch.distributed:
gloo on CPUs, NCCL on GPUs) with the prediction beside it (`MeasureStepRequest`), the brief's
TP-against-PP experiment on this machine (`MeasureCrossoverRequest`), and the microbenchmarks that
describe a machine as a system preset (`MicroRequest`). Each checks its fields once and `run()`
returns the measurement; files (the CSV row, the trace, the figure, the preset) are the caller's.

Under torchrun every process runs the request; only rank 0 gets a result (the others get None).
"""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass
from typing import Any

from shardwise.errors import SpecError

KINDS = {"tp": "tensor parallelism", "pp": "pipeline parallelism", "dp": "data parallelism"}
SCHEDULES = ("1f1b", "gpipe", "interleaved", "zb-h1")


def _check_range(name: str, value: int | float, low: float, high: float) -> None:
    if not low <= value <= high:  # NaN fails too
        flag = "--timeout" if name == "timeout_s" else "--" + name.replace("_", "-")  # the flag's own name
        raise SpecError(f"{flag}: {value!r} is not allowed; give a number from {low:g} to {high:g}")


@dataclass(frozen=True)
class _Machine:
    """What every `measure` run shares: `ranks` processes on `device`, `layers` GPT layers of
    `model` at `seq_len`, and the machine's preset (`system`) for the prediction beside it."""

    ranks: int = 2
    device: str = "auto"
    dtype: str = "bfloat16"
    timeout_s: float = 600.0
    model: str = "gpt-125m"
    layers: int = 2
    seq_len: int = 256
    system: str | None = None

    RANGES = (("ranks", 2, 1024), ("timeout_s", 1, 86400), ("layers", 1, 1000), ("seq_len", 1, 1 << 20))

    def __post_init__(self) -> None:
        object.__setattr__(self, "device", str(self.device).lower())
        object.__setattr__(self, "dtype", str(self.dtype).lower())
        if self.device not in ("auto", "cpu", "cuda"):
            raise SpecError(f"--device: {self.device!r} is not allowed; use one of auto, cpu, cuda")
        if self.dtype not in ("bfloat16", "float32"):
            raise SpecError(f"--dtype: {self.dtype!r} is not allowed; use one of bfloat16, float32")
        for name, low, high in self.RANGES:
            _check_range(name, getattr(self, name), low, high)


@dataclass(frozen=True)
class MeasureStepRequest(_Machine):
    """One kind of parallelism (`kind`: tp, pp or dp) over `ranks` processes: `iters` timed steps
    of `layers` GPT layers after `warmup` ones; with `system` (a preset, e.g. from `measure micro`)
    the prediction for the same step on that machine."""

    kind: str = "tp"
    micro_batch: int = 1
    micro_batches: int = 4
    schedule: str = "1f1b"
    chunks: int = 2
    sequence_parallel: bool = False
    iters: int = 5
    warmup: int = 2

    RANGES = (
        *_Machine.RANGES,
        ("micro_batch", 1, 1 << 16),
        ("micro_batches", 1, 1 << 16),
        ("chunks", 2, 64),
        ("iters", 1, 10000),
        ("warmup", 0, 10000),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.kind not in KINDS:
            raise SpecError(f"kind: {self.kind!r} is not allowed; use one of {', '.join(KINDS)}")
        object.__setattr__(self, "schedule", str(self.schedule).lower())
        if self.schedule not in SCHEDULES:
            raise SpecError(f"--schedule: {self.schedule!r} is not allowed; use one of {', '.join(SCHEDULES)}")

    @property
    def options(self) -> dict[str, Any]:
        """The fields under the command line's names (what `measure.records.csv_row` reads)."""
        out = asdict(self)
        out["model_name"] = out.pop("model")
        return out

    def to_argv(self) -> list[str]:
        out = ["measure", self.kind]
        for name, value in asdict(self).items():
            if name == "kind" or value == getattr(type(self), name, None):
                continue
            flag = "--timeout" if name == "timeout_s" else "--" + name.replace("_", "-")
            if isinstance(value, bool):
                out.append(flag if value else "--no-" + flag[2:])
            else:
                out += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
        return out

    def command(self) -> str:
        return "shardwise " + shlex.join(self.to_argv())

    def with_ranks(self, ranks: int) -> MeasureStepRequest:
        from dataclasses import replace

        return replace(self, ranks=ranks)

    def run(self) -> MeasureStepResult | None:
        """Run the step on every rank (under torchrun: this process's rank), rank 0 combines;
        None on the other ranks."""
        from shardwise import presets
        from shardwise.measure import launch, require_torch
        from shardwise.measure.records import combine, csv_row
        from shardwise.measure.runs import StepConfig, data_parallel_step, pipeline_parallel_step, tensor_parallel_step

        req = self.with_ranks(launch.world_size(self.ranks))  # under torchrun the world size is torchrun's
        model = gpt_model(req.model, req.layers, req.seq_len)
        system = presets.system(req.system) if req.system else None
        require_torch()
        v = req.chunks if req.kind == "pp" and req.schedule == "interleaved" else 1
        shape = layer_shape(
            model, req.ranks, req.layers, tensor_parallel=req.kind == "tp", chunks=v if req.kind == "pp" else 0
        )
        if v > 1 and req.micro_batches % req.ranks:
            raise SpecError(
                f"--micro-batches {req.micro_batches} must be a multiple of --ranks {req.ranks} to interleave"
            )
        cfg = StepConfig(
            shape,
            req.layers,
            req.seq_len,
            req.micro_batch,
            req.micro_batches,
            req.schedule,
            req.iters,
            req.warmup,
            req.dtype,
            sequence_parallel=req.sequence_parallel and req.kind == "tp",
            chunks=req.chunks,
        )
        if cfg.sequence_parallel and req.seq_len % req.ranks:
            raise SpecError(
                f"--seq-len {req.seq_len} must be a multiple of --ranks {req.ranks} for --sequence-parallel"
            )
        fn = {"tp": tensor_parallel_step, "pp": pipeline_parallel_step, "dp": data_parallel_step}[req.kind]
        ranks = launch.run(fn, req.ranks, (cfg,), req.timeout_s, req.device)
        if not ranks:  # under torchrun, a rank other than 0: rank 0 reports
            return None
        measured = combine(req.kind, ranks)
        predicted = None
        if system is not None:
            from shardwise.measure.predict import predict

            cluster = system.with_(nodes=1, gpus_per_node=max(int(system.gpus_per_node), req.ranks))
            sp = cfg.sequence_parallel
            args = (req.ranks, req.micro_batch, req.micro_batches, "bf16", sp, v, req.schedule)
            predicted = predict(req.kind, model, cluster, *args).floats()
        return MeasureStepResult(req, measured, predicted, csv_row(req.kind, req.options, measured), ranks)


@dataclass(frozen=True)
class MeasureStepResult:
    request: MeasureStepRequest
    measured: dict[str, Any]  # measure.records.combine: step_s, comm_s, terms_s, ...
    predicted: Any  # measure.predict's floats, or None without a system
    row: dict[str, Any]  # the CSV row `calibrate` reads
    ranks: list[Any]  # every rank's record (for the trace)

    @property
    def error(self) -> float | None:
        return None if self.predicted is None else self.predicted.step_s / self.measured["step_s"] - 1.0

    def as_dict(self) -> dict[str, Any]:
        """The JSON `measure tp|pp|dp --json` prints."""
        out = {
            "kind": self.request.kind,
            "measured": self.measured,
            "predicted": asdict(self.predicted) if self.predicted else None,
            "row": self.row,
        }
        if self.predicted:
            out["error"] = self.error
        return out


@dataclass(frozen=True)
class MeasureCrossoverRequest(_Machine):
    """TP=N against PP=N over the batch on this machine: TP runs each batch as one micro-batch on
    every rank, PP splits it into micro-batches of one sequence through N stages (1F1B)."""

    batches: str = "1,2,4,8"
    iters: int = 3
    warmup: int = 1

    RANGES = (*_Machine.RANGES, ("iters", 1, 10000), ("warmup", 0, 10000))

    def __post_init__(self) -> None:
        super().__post_init__()
        self.batch_values()

    def batch_values(self) -> list[int]:
        try:
            values = sorted({int(v) for v in self.batches.split(",") if v.strip()})
        except ValueError:
            raise SpecError(
                f"--batches {self.batches!r}: give whole numbers separated by commas, e.g. 1,2,4,8"
            ) from None
        if not values or values[0] < 1 or values[-1] > 1 << 16 or len(values) > 64:
            raise SpecError(f"--batches {self.batches!r}: give 1 to 64 batches, each from 1 to 65536")
        return values

    def run(self) -> MeasureCrossoverResult | None:
        from dataclasses import replace

        from shardwise import presets
        from shardwise.measure import launch, require_torch
        from shardwise.measure.runs import StepConfig, steps

        n = launch.world_size(self.ranks)
        batches = self.batch_values()
        model = gpt_model(self.model, self.layers, self.seq_len)
        system = presets.system(self.system) if self.system else None
        shape = layer_shape(model, n, self.layers, tensor_parallel=True, chunks=1)
        require_torch()
        base = StepConfig(shape, self.layers, self.seq_len, 1, 1, "1f1b", self.iters, self.warmup, self.dtype)
        configs = {
            "tp": [replace(base, micro_batch=b, micro_batches=1) for b in batches],
            "pp": [replace(base, micro_batch=1, micro_batches=b) for b in batches],
        }
        series: dict[str, dict[str, list[float]]] = {}
        for kind, cfgs in configs.items():
            ranks = launch.run(steps, n, (kind, cfgs), self.timeout_s, self.device)
            if not ranks:  # under torchrun, a rank other than 0
                return None
            measured = [max(r[i]["step_s"] for r in ranks) for i in range(len(batches))]
            predicted: list[float] = []
            if system is not None:
                from shardwise.measure.predict import predict

                cluster = system.with_(nodes=1, gpus_per_node=max(int(system.gpus_per_node), n))
                predicted = [
                    float(predict(kind, model, cluster, n, c.micro_batch, c.micro_batches, "bf16").step_s) for c in cfgs
                ]
            series[f"{kind}={n}"] = {"measured": measured, "predicted": predicted}
        return MeasureCrossoverResult(replace(self, ranks=n), batches, series)


@dataclass(frozen=True)
class MeasureCrossoverResult:
    request: MeasureCrossoverRequest
    batches: list[int]
    series: dict[str, dict[str, list[float]]]  # "tp=N"/"pp=N" -> measured and predicted step times

    def crossover_batch(self) -> dict[str, int | None]:
        from shardwise.plots.measure import crossover_batch

        return {k: crossover_batch(self.batches, self.series, k) for k in ("measured", "predicted")}

    def crossings(self) -> dict[str, list[tuple[int, str]]]:
        """Every batch where the faster plan changes, measured and predicted (`plots.measure.crossings`)."""
        from shardwise.plots.measure import crossings

        return {k: crossings(self.batches, self.series, k) for k in ("measured", "predicted")}

    def as_dict(self, figure: str | None = None) -> dict[str, Any]:
        return {
            "batches": self.batches,
            "series": self.series,
            "crossover_batch": self.crossover_batch(),
            "crossings": {k: [{"batch": b, "ahead": p} for b, p in v] for k, v in self.crossings().items()},
            "figure": figure,
        }


def layer_shape(model: Any, ranks: int, layers: int, tensor_parallel: bool, chunks: int) -> Any:
    """The model's layer split over `ranks`: TP must divide its heads and MLP; a pipeline of
    `chunks` model chunks per stage (0: no pipeline) must divide its layers."""
    from shardwise.measure.shapes import LayerShape

    shape = LayerShape(int(model.hidden), int(model.heads), int(model.ffn_hidden))
    if tensor_parallel:
        shape.check(ranks)
    if chunks and layers % (ranks * chunks):
        if chunks == 1:
            raise SpecError(f"--layers {layers} must be a multiple of --ranks {ranks} (the pipeline stages)")
        raise SpecError(
            f"--layers {layers} must be a multiple of {ranks * chunks} ({ranks} stages x {chunks} chunks: "
            "--ranks x --chunks)"
        )
    return shape


def gpt_model(name: str, layers: int, seq_len: int) -> Any:
    """A GPT-family preset with `layers` and `seq_len`: what `measure` runs (LayerNorm, GELU MLP,
    multi-head attention)."""
    from shardwise import presets

    model = presets.model(name, layers=layers, seq_len=seq_len)
    if bool(model.gated_mlp) or int(model.kv_heads) != int(model.heads):
        raise SpecError(
            f"--model {name}: measure runs GPT layers (LayerNorm, GELU MLP, multi-head attention); choose a gpt-* model"
        )
    return model


@dataclass(frozen=True)
class MicroRequest(_Machine):
    """The microbenchmarks that describe this machine as a system preset: the GEMM rate, memory
    bandwidth and collective curves over `ranks` processes (`repeats` timings each, messages up to
    `max_bytes`); with `model`, also that model's own GEMMs at `seq_len` x `micro_batch` tokens
    (a quarter and four times that, whole and split over the ranks for TP). `name`: the preset's."""

    model: str | None = None  # type: ignore[assignment]
    repeats: int = 5
    max_bytes: int = 64 * 2**20
    micro_batch: int = 1
    name: str = "machine"

    RANGES = (
        ("ranks", 2, 1024),
        ("timeout_s", 1, 86400),
        ("seq_len", 1, 1 << 20),
        ("repeats", 1, 1000),
        ("max_bytes", 4096, 2**34),
        ("micro_batch", 1, 1 << 16),
    )

    def run(self) -> dict[str, Any] | None:
        """Every rank's benchmarks (rank 0's result, with the preset it gives under "preset"); None
        on the other ranks under torchrun."""
        from shardwise.measure import launch, require_torch
        from shardwise.measure.micro import MicroConfig, micro_benchmarks, system_yaml, table_shapes

        ranks = launch.world_size(self.ranks)
        shapes: tuple[tuple[int, int, int], ...] = ()
        if self.model:
            model = gpt_model(self.model, 1, self.seq_len)
            split = ranks if int(model.heads) % ranks == 0 else 1
            shapes = table_shapes(int(model.hidden), int(model.ffn_hidden), self.seq_len * self.micro_batch, split)
        require_torch()
        config = MicroConfig(self.dtype, self.repeats, self.max_bytes, workload_gemms=shapes)
        results = launch.run(micro_benchmarks, ranks, (config,), self.timeout_s, self.device)
        if not results:  # under torchrun, a rank other than 0
            return None
        result = results[0]
        return {**result, "preset": system_yaml(result, self.name, host_memory_bytes(result["device"]))}


def host_memory_bytes(device: str) -> float:
    """The memory of one device: the GPU's, or on CPUs this host's RAM."""
    import os

    if device.startswith("cuda"):
        import torch

        return float(torch.cuda.get_device_properties(0).total_memory)
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
