"""Compare parallel plans over one swept variable: the shared machinery of `crossover`,
`sweep` and the sensitivity analyses.

An `Experiment` is a model on a number of GPUs of one kind, a set of links to compare (each one
the link inside the server) and a set of plans. `times_s` evaluates one plan on one link for an
array of values of one variable in a single vectorized call of the cost model; values that make
a plan invalid (e.g. layers not divisible by pp) come back as NaN.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from shardwise import presets, textbook, units
from shardwise.errors import SpecError
from shardwise.specs import Cluster, Gpu, Link, Model, Plan, Scenario

WORKLOADS = ("train", "forward")
COST_MODELS = ("physical", "textbook")


@dataclass(frozen=True)
class Variable:
    name: str
    label: str  # axis label with unit
    integer: bool
    log: bool  # default axis scale
    parse: Callable[[str], float]


def _int(text: str) -> float:
    value = float(text)
    if value != int(value):
        raise SpecError(f"{text!r} is not a whole number")
    return value


VARIABLES: dict[str, Variable] = {
    v.name: v
    for v in (
        Variable("batch", "global batch (sequences per step)", True, True, _int),
        Variable("bandwidth", "link bandwidth per direction (GB/s)", False, True, units.parse_rate_bytes_per_s),
        Variable("latency", "link latency per step (µs)", False, True, units.parse_seconds),
        Variable("layers", "transformer layers", True, False, _int),
        Variable("hidden", "hidden size", True, True, _int),
        Variable("seq_len", "sequence length (tokens)", True, True, _int),
        Variable("gpus", "GPUs", True, True, _int),
        Variable("peak_flops", "GPU dense peak (TFLOP/s)", False, True, units.parse_flops_per_s),
        Variable("hbm_bandwidth", "GPU memory bandwidth (TB/s)", False, True, units.parse_rate_bytes_per_s),
    )
}
# How values are shown on axes and in tables (SI inside, readable units outside).
DISPLAY_SCALE = {"bandwidth": 1e-9, "latency": 1e6, "peak_flops": 1e-12, "hbm_bandwidth": 1e-12}
DISPLAY_UNIT = {"bandwidth": " GB/s", "latency": " µs", "peak_flops": " TFLOP/s", "hbm_bandwidth": " TB/s"}
SHORT_NAME = {
    "batch": "batch",
    "bandwidth": "bandwidth",
    "latency": "latency",
    "layers": "layers",
    "hidden": "hidden size",
    "seq_len": "sequence length",
    "gpus": "GPU count",
    "peak_flops": "GPU peak",
    "hbm_bandwidth": "GPU memory bandwidth",
}


_SWITCH = {"on": True, "true": True, "yes": True, "1": True, "off": False, "false": False, "no": False, "0": False}


@dataclass(frozen=True)
class PlanSpec:
    """A plan relative to the GPU count: `tp=8`, `pp=8`, `tp=2,pp=4`, `tp=all` (all GPUs);
    dp fills the GPUs that tp x pp leave. Other keys: vpp, mb (micro-batch), schedule,
    recompute, sp (on/off), zero. Checked when parsed."""

    label: str
    tp: int | str = 1
    pp: int | str = 1
    options: tuple[tuple[str, Any], ...] = ()  # Plan keyword arguments, already typed

    KEYS = ("tp", "pp", "vpp", "mb", "schedule", "recompute", "sp", "zero")

    @classmethod
    def parse(cls, text: str) -> PlanSpec:
        fields: dict[str, str] = {}
        for part in text.replace(" ", "").split(","):
            if not part:
                continue
            key, sep, value = part.partition("=")
            if not sep or key not in cls.KEYS:
                raise SpecError(f"--plan {text!r}: {part!r} is not KEY=VALUE with KEY one of {', '.join(cls.KEYS)}")
            fields[key] = value

        def whole(key: str, low: int, high: int | None = None) -> int:
            value = fields[key]
            if not value.isdigit() or int(value) < low or (high is not None and int(value) > high):
                allowed = f"{low}..{high}" if high is not None else f"a whole number >= {low}"
                raise SpecError(f"--plan {text!r}: {key}={value} is not allowed; use {allowed}")
            return int(value)

        degrees = {}
        for key in ("tp", "pp"):
            fields.setdefault(key, "1")
            degrees[key] = "all" if fields[key] == "all" else whole(key, 1)
        options: dict[str, Any] = {}
        if "vpp" in fields:
            options["vpp"] = whole("vpp", 1)
            options["schedule"] = "interleaved" if options["vpp"] > 1 else "1f1b"
        if "mb" in fields:
            options["micro_batch"] = whole("mb", 1)
        if "zero" in fields:
            options["zero_stage"] = whole("zero", 0, 3)
        for key, allowed in (
            ("schedule", ("gpipe", "1f1b", "interleaved", "zb-h1")),
            ("recompute", ("none", "selective", "full")),
        ):
            if key in fields:
                if fields[key] not in allowed:
                    raise SpecError(f"--plan {text!r}: {key}={fields[key]} is not allowed; choose {', '.join(allowed)}")
                options[key] = fields[key]
        if "sp" in fields:
            if fields["sp"].lower() not in _SWITCH:
                raise SpecError(f"--plan {text!r}: sp={fields['sp']} is not allowed; use on or off")
            options["sequence_parallel"] = _SWITCH[fields["sp"].lower()]
        return cls(label=text, tp=degrees["tp"], pp=degrees["pp"], options=tuple(options.items()))

    def degrees(self, gpus: Any) -> tuple[Any, Any, Any]:
        """(tp, pp, dp) on `gpus` GPUs (arrays allowed); dp = gpus / (tp pp), NaN if not whole."""
        g = np.asarray(gpus)
        tp = g if self.tp == "all" else np.asarray(self.tp)
        pp = g if self.pp == "all" else np.asarray(self.pp)
        return tp, pp, g / (tp * pp)

    def plan_kwargs(self) -> dict[str, Any]:
        return dict(self.options)

    @property
    def is_pure(self) -> bool:
        """Only tp or only pp (what the textbook model can price)."""
        return (self.tp == 1) != (self.pp == 1) and not self.options


@dataclass(frozen=True)
class LinkSpec:
    """A link to compare: `nvlink3` (preset), `pcie=pcie4`, `nvlink=600GB/s`,
    `pcie=32GB/s,latency=2us,efficiency=0.76`. A bare rate is the sustained rate (efficiency 1)."""

    label: str
    link: Link

    @classmethod
    def parse(cls, text: str) -> LinkSpec:
        head, *extras = text.replace(" ", "").split(",")
        label, sep, value = head.partition("=")
        if not sep:
            label, value = head, head
        try:
            rate = units.parse_rate_bytes_per_s(value)
        except SpecError:
            rate = None
        if rate is not None:
            link = Link(name=label, bandwidth_bytes_per_s=rate, efficiency=1.0)
        else:
            try:
                link = presets.link(value)
            except SpecError as exc:
                raise SpecError(f"--link {text!r}: {exc}; or give LABEL=RATE like nvlink=600GB/s") from None
        for extra in extras:
            key, _, v = extra.partition("=")
            if key == "latency":
                link = link.with_(latency_s=units.parse_seconds(v))
            elif key == "efficiency":
                link = link.with_(efficiency=float(v))
            elif key == "base_latency":
                link = link.with_(base_latency_s=units.parse_seconds(v))
            else:
                raise SpecError(f"--link {text!r}: unknown option {key!r}; allowed: latency, efficiency, base_latency")
        return cls(label=label, link=link)


@dataclass(frozen=True)
class Experiment:
    """What stays fixed while one variable moves. Defaults: the brief's experiment (Sec. 8)."""

    model: Model
    gpu: Gpu
    gpus: int = 8
    gpus_per_node: int = 8
    inter_node_link: Link | None = None
    links: tuple[LinkSpec, ...] = ()
    plans: tuple[PlanSpec, ...] = ()
    batch: int = 8
    micro_batch: int = 1
    workload: str = "train"
    cost_model: str = "physical"
    plan_defaults: dict[str, Any] = field(default_factory=dict)

    def with_(self, **changes: Any) -> Experiment:
        return replace(self, **changes)


def brief_experiment() -> Experiment:
    """Section 8 of the brief: hidden 4096, 96 layers, 312 TFLOP/s GPUs (A100), TP=8 vs PP=8,
    NVLink (A100 NVLink3, 600 GB/s both directions) vs PCIe Gen4 (32 GB/s)."""
    return Experiment(
        model=presets.model("brief"),
        gpu=presets.gpu("a100-sxm4-80gb"),
        inter_node_link=presets.link("ib-hdr"),
        links=(LinkSpec("NVLink", presets.link("nvlink3")), LinkSpec("PCIe", presets.link("pcie4"))),
        plans=(PlanSpec.parse("tp=8"), PlanSpec.parse("pp=8")),
    )


# The brief's literal link figures ("NVLink 600 GB/s", "PCIe ~32 GB/s"), used by the textbook model.
BRIEF_LINKS = (LinkSpec.parse("NVLink=600GB/s"), LinkSpec.parse("PCIe=32GB/s"))


def _cluster(exp: Experiment, link: Link, gpus: Any) -> Cluster:
    g = np.asarray(gpus)
    per_node = np.minimum(exp.gpus_per_node, g)
    nodes = np.maximum(1, g // per_node)
    inter = exp.inter_node_link if np.any(nodes > 1) else None
    if inter is None and np.any(nodes > 1):
        raise SpecError("more GPUs than one node needs an inter-node link (--inter-link)")
    return Cluster("experiment", exp.gpu, per_node, nodes, link, inter)


def times_s(exp: Experiment, plan: PlanSpec, link: Link, variable: str, values: Any) -> tuple[np.ndarray, np.ndarray]:
    """(seconds, fits in memory) of `plan` on `link` at each value of `variable` (NaN = invalid)."""
    return evaluate(exp, plan, link, {variable: np.asarray(values, dtype=float)})


def evaluate(
    exp: Experiment, plan: PlanSpec, link: Link, grid: Mapping[str, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """(seconds, fits in memory) over a grid: variable name -> values, mutually broadcastable
    (`np.meshgrid(..., sparse=True)` keeps a grid cheap: each input keeps its own shape and
    only the results take the full shape). NaN where the plan is invalid."""
    shape = np.broadcast_shapes(*(np.shape(v) for v in grid.values()))
    if exp.cost_model == "textbook":
        _check_names(grid)
        return _textbook_times(exp, plan, link, grid, shape), np.ones(shape, dtype=bool)
    scn, valid = _scenario(exp, plan, link, grid)
    if scn is None:
        return np.full(shape, np.nan), np.zeros(shape, dtype=bool)
    est = _estimate(exp, scn)
    if exp.workload == "forward":
        t, fits = est.latency_s, est.weights_bytes + est.kv_cache_bytes <= scn.cluster.gpu.memory_bytes
    else:
        t, fits = est.step_time_s, est.fits_in_memory
    return np.where(valid, np.broadcast_to(t, shape), np.nan), np.asarray(np.broadcast_to(fits, shape) & valid)


def breakdown_at(exp: Experiment, plan: PlanSpec, link: Link, variable: str, value: float) -> dict[str, float] | None:
    """Where the time of one plan goes at one value of the variable (None if invalid there)."""
    if exp.cost_model == "textbook":
        return None
    scn, valid = _scenario(exp, plan, link, {variable: np.array([value])})
    if scn is None or not valid.all():
        return None
    est = _estimate(exp, scn)
    parts = est.as_dict() if exp.workload == "forward" else est.breakdown.as_dict()
    return {k: float(np.asarray(v).ravel()[0]) for k, v in parts.items()}


def why_invalid(exp: Experiment, plan: PlanSpec, link: Link, grid: Mapping[str, np.ndarray]) -> str | None:
    """The first rule that the plan breaks at the first point of the grid (None if valid there)."""
    first = {k: np.asarray(v).ravel()[:1] for k, v in grid.items()}
    x = _inputs(exp, plan, link, first)
    kwargs = {"micro_batch": exp.micro_batch, **exp.plan_defaults, **plan.plan_kwargs()}
    for rule, ok in _rules(exp, x, kwargs):
        if not np.all(ok):
            return rule
    return None


def _check_names(grid: Mapping[str, np.ndarray]) -> None:
    for name in grid:
        if name not in VARIABLES:
            raise SpecError(f"unknown variable {name!r}; choose one of {', '.join(VARIABLES)}")


def _scenario(exp: Experiment, plan: PlanSpec, link: Link, grid: Mapping[str, np.ndarray]) -> tuple[Any, np.ndarray]:
    """(Scenario with array fields, validity mask); invalid points run as the first valid one."""
    _check_names(grid)
    shape = np.broadcast_shapes(*(np.shape(v) for v in grid.values()))
    x = _inputs(exp, plan, link, grid)
    kwargs = {"micro_batch": exp.micro_batch, **exp.plan_defaults, **plan.plan_kwargs()}
    valid = np.ones(shape, dtype=bool)
    for _, ok in _rules(exp, x, kwargs):
        valid = valid & ok
    if not valid.any():  # e.g. layers not divisible by pp anywhere in this block
        return None, valid
    if not valid.all():
        first = np.unravel_index(int(np.flatnonzero(valid)[0]), shape)
        x = {k: np.where(valid, np.broadcast_to(a, shape), np.broadcast_to(a, shape)[first]) for k, a in x.items()}
    ints = {k: np.asarray(x[k]).astype(int) for k in ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "seq_len")}
    model = exp.model.with_(**ints)
    link = link.with_(bandwidth_bytes_per_s=x["bandwidth"], latency_s=x["latency"])
    peak = "peak_flops_per_s_fp8" if kwargs.get("precision") == "fp8" else "peak_flops_per_s_16bit"
    gpu = exp.gpu.with_(**{peak: x["peak_flops"], "memory_bandwidth_bytes_per_s": x["hbm_bandwidth"]})
    cluster = _cluster(exp.with_(gpu=gpu), link, np.asarray(x["gpus"]).astype(int))
    as_int = {k: np.asarray(x[k]).astype(int) for k in ("tp", "pp", "dp", "batch")}
    plan_ = Plan(tp=as_int["tp"], pp=as_int["pp"], dp=as_int["dp"], global_batch=as_int["batch"], **kwargs)
    return Scenario(model, cluster, plan_), valid


def _estimate(exp: Experiment, scn: Any) -> Any:
    if exp.workload == "forward":
        from shardwise.engines.forward import estimate_forward

        return estimate_forward(scn)
    from shardwise.engines.training import estimate_training_step

    return estimate_training_step(scn)


def heads_for_hidden(hidden: Any, tp_max: Any) -> Any:
    """Heads of a model whose width is varied: head dim 128 while TP can still split the heads
    (at least tp_max heads). One rule for every plan, so all compare the same model."""
    return np.maximum(np.asarray(hidden) // 128, tp_max)


def max_tp(exp: Experiment, gpus: Any) -> Any:
    return max(np.max(gpus) if p.tp == "all" else p.tp for p in exp.plans) if exp.plans else 1


def _inputs(exp: Experiment, plan: PlanSpec, link: Link, grid: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Every input that a variable can move (arrays where the grid moves it, scalars elsewhere)."""
    m = exp.model
    x: dict[str, Any] = {
        "layers": m.layers,
        "hidden": m.hidden,
        "heads": m.heads,
        "kv_heads": m.kv_heads,
        "ffn_hidden": m.ffn_hidden,
        "seq_len": m.seq_len,
        "batch": exp.batch,
        "gpus": exp.gpus,
        "bandwidth": link.bandwidth_bytes_per_s,
        "latency": link.latency_s,
        "peak_flops": exp.gpu.peak_flops_per_s("fp8" if exp.plan_defaults.get("precision") == "fp8" else "bf16"),
        "hbm_bandwidth": exp.gpu.memory_bandwidth_bytes_per_s,
    }
    for name, values in grid.items():
        if name == "hidden":
            heads = heads_for_hidden(values, max_tp(exp, grid.get("gpus", exp.gpus)))
            x.update(hidden=values, heads=heads, kv_heads=heads, ffn_hidden=4 * values)
        else:
            x[name] = values
    x["tp"], x["pp"], x["dp"] = plan.degrees(x["gpus"])
    return {k: np.asarray(v, dtype=float) for k, v in x.items()}


def _rules(exp: Experiment, x: dict[str, np.ndarray], kwargs: dict[str, Any]) -> list[tuple[str, np.ndarray]]:
    """The validity rules of the specs, each with where it holds."""
    tp, pp, dp, mb = x["tp"], x["pp"], x["dp"], kwargs["micro_batch"]
    vpp = kwargs.get("vpp", 1)
    per_node = np.minimum(exp.gpus_per_node, x["gpus"])
    whole_dp = (np.mod(dp, 1) == 0) & (dp >= 1)
    rules = [
        ("tp x pp must divide the GPU count (dp = GPUs / (tp x pp) is not whole)", whole_dp),
        ("layers must be divisible by pp x vpp", np.mod(x["layers"], pp * vpp) == 0),
        (
            "heads (and KV heads) must be divisible by tp",
            (np.mod(x["heads"], tp) == 0) & (np.mod(x["kv_heads"], tp) == 0) & (np.mod(x["ffn_hidden"], tp) == 0),
        ),
        ("hidden must be divisible by heads", np.mod(x["hidden"], x["heads"]) == 0),
        ("the batch must be divisible by dp x micro-batch", np.mod(x["batch"], np.maximum(dp, 1) * mb) == 0),
        (
            "a TP group must fit in a server or span whole servers",
            (np.mod(per_node, tp) == 0) | (np.mod(tp, per_node) == 0),
        ),
        ("GPUs must fill whole servers", np.mod(x["gpus"], per_node) == 0),
    ]
    if kwargs.get("schedule") == "interleaved":
        rules.append(
            (
                "interleaving needs the micro-batch count to be a multiple of pp",
                np.mod(x["batch"] / (np.maximum(dp, 1) * mb), pp) == 0,
            )
        )
    if kwargs.get("sequence_parallel"):
        rules.append(("sequence parallelism needs the sequence length divisible by tp", np.mod(x["seq_len"], tp) == 0))
    return rules


def _textbook_times(
    exp: Experiment, plan: PlanSpec, link: Link, grid: Mapping[str, np.ndarray], shape: tuple[int, ...]
) -> np.ndarray:
    """The brief's formulas (see `shardwise.textbook`) over the same variables."""
    if not plan.is_pure:
        raise SpecError(f"--cost-model textbook prices pure TP or pure PP plans only, not {plan.label!r}")
    allowed = ("batch", "bandwidth", "layers", "hidden", "gpus", "peak_flops")
    for name in grid:
        if name not in allowed:
            raise SpecError(f"--cost-model textbook cannot vary {name}; choose from {', '.join(allowed)}")
    layers = grid.get("layers", exp.model.layers)
    hidden = grid.get("hidden", exp.model.hidden)
    batch = grid.get("batch", exp.batch)
    gpus = grid.get("gpus", exp.gpus)
    bw = grid.get("bandwidth", link.bandwidth_bytes_per_s)
    flops = grid.get("peak_flops", exp.gpu.peak_flops_per_s_16bit)
    if plan.tp != 1:
        degree = gpus if plan.tp == "all" else plan.tp
        t = textbook.simulate_tp(layers, hidden, batch, degree, flops, bw)
    else:
        degree = gpus if plan.pp == "all" else plan.pp
        t = textbook.brief_pp(layers, degree, flops, bw, hidden, batch)
    return np.broadcast_to(np.asarray(t, dtype=float), shape).copy()


DEFAULT_POINTS = 41
MAX_VALUES = 100_000  # per varied variable
NEEDS_UNIT = {"bandwidth": "900GB/s", "latency": "2us", "peak_flops": "312TFLOPS", "hbm_bandwidth": "2TB/s"}


def parse_vary(text: str) -> tuple[str, np.ndarray]:
    """'batch=1..32' (every integer), 'bandwidth=1GB/s..900GB/s' (41 log-spaced points, ':N' for
    N), 'layers=8,16,32' (a list), 'hidden=512..16384:x2' (doubling). Returns SI values."""
    name, sep, spec = text.replace(" ", "").partition("=")
    if not sep or name not in VARIABLES:
        raise SpecError(f"--vary {text!r}: expected NAME=VALUES with NAME one of {', '.join(VARIABLES)}")
    try:
        values = _vary_values(name, spec)
    except SpecError as exc:
        raise SpecError(f"--vary {text!r}: {exc}") from None
    except (ValueError, OverflowError):
        raise SpecError(
            f"--vary {text!r}: cannot read the values; e.g. batch=1..32, layers=8,16,32, "
            "bandwidth=1GB/s..900GB/s:20, hidden=512..16384:x2"
        ) from None
    return name, values


def _vary_values(name: str, spec: str) -> np.ndarray:
    var = VARIABLES[name]

    def value(token: str) -> float:
        if name in NEEDS_UNIT and _is_number(token):
            raise SpecError(f"{token} has no unit; write it like {NEEDS_UNIT[name]}")
        return var.parse(token)

    if ".." in spec:
        lo_text, _, rest = spec.partition("..")
        hi_text, _, count = rest.partition(":")
        lo, hi = value(lo_text), value(hi_text)
        if not 0 < lo < hi:
            raise SpecError("need 0 < low < high")
        if count.startswith("x"):
            factor = float(count[1:])
            if not factor > 1:
                raise SpecError(f"the factor after ':x' must be > 1, got {count[1:]}")
            n = int(np.floor(np.log(hi / lo) / np.log(factor) + 1e-9)) + 1
            values = lo * factor ** np.arange(min(n, MAX_VALUES + 1))
        elif var.integer and not count:
            if hi - lo + 1 > MAX_VALUES:
                raise SpecError(
                    f"{int(hi - lo + 1):,} values is too many (at most {MAX_VALUES:,}); add ':N' for N points"
                )
            values = np.arange(lo, hi + 1)
        else:
            n = int(count) if count else DEFAULT_POINTS
            if not 2 <= n <= MAX_VALUES:
                raise SpecError(f"the number of points after ':' must be 2..{MAX_VALUES:,}, got {count}")
            values = np.geomspace(lo, hi, n) if var.log else np.linspace(lo, hi, n)
    else:
        values = np.array([value(v) for v in spec.split(",") if v])
    if values.size == 0 or np.any(values <= 0) or not np.all(np.isfinite(values)):
        raise SpecError("values must be finite and > 0")
    if values.size > MAX_VALUES:
        raise SpecError(f"{values.size:,} values is too many (at most {MAX_VALUES:,})")
    if var.integer:  # ranges are rounded to whole numbers (lists were checked when read)
        values = np.unique(np.round(values))
    return np.asarray(values, dtype=float)


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True
