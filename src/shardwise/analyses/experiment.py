"""Compare parallel plans over one swept variable: the shared machinery of `crossover`,
`sweep` and the sensitivity analyses.

An `Experiment` is a model on a number of GPUs of one kind, a set of links to compare (each one
the link inside the server) and a set of plans. `times_s` evaluates one plan on one link for an
array of values of one variable in a single vectorized call of the cost model; values that make
a plan invalid (e.g. layers not divisible by pp) come back as NaN.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from shardwise import presets, units
from shardwise.errors import SpecError
from shardwise.specs import Gpu, Link, Model

WORKLOADS = ("train", "forward", "prefill", "decode")
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
    recompute, sp (on/off), zero, first and last (layers on the first / last pipeline stage; the
    middle stages split the rest). Checked when parsed."""

    label: str
    tp: int | str = 1
    pp: int | str = 1
    options: tuple[tuple[str, Any], ...] = ()  # Plan keyword arguments, already typed

    KEYS = ("tp", "pp", "vpp", "mb", "schedule", "recompute", "sp", "zero", "first", "last")

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
        for key, name in (("first", "first_stage_layers"), ("last", "last_stage_layers")):
            if key in fields:
                options[name] = whole(key, 1)
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
    def parse(cls, text: str, flag: str = "--intra-link") -> LinkSpec:
        head, *extras = text.replace(" ", "").split(",")
        label, sep, value = head.partition("=")
        if not sep:
            label, value = head, head
        if not label or not value:
            raise SpecError(f"{flag} {text!r}: give LABEL=LINK (a preset like pcie4 or a rate like 32GB/s)")
        try:
            link = presets.link_or_rate(value, "intra", name=label)
        except SpecError as exc:
            raise SpecError(f"{flag} {text!r}: {exc}; or give LABEL=RATE like nvlink=600GB/s") from None
        for extra in extras:
            key, _, v = extra.partition("=")
            if key == "latency":
                link = link.with_(latency_s=units.parse_seconds(v))
            elif key == "efficiency":
                link = link.with_(efficiency=float(v))
            elif key == "base_latency":
                link = link.with_(base_latency_s=units.parse_seconds(v))
            else:
                raise SpecError(f"{flag} {text!r}: unknown option {key!r}; allowed: latency, efficiency, base_latency")
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

    @property
    def hardware(self) -> str:
        """'gpt-96l-4096h on 8 x a100-sxm4-80gb' (+ the inter-node link when it spans servers): what
        every figure's title names."""
        text = f"{self.model.name} on {self.gpus} x {self.gpu.name}"
        if self.gpus > self.gpus_per_node and self.inter_node_link is not None:
            text += f", {self.gpus // self.gpus_per_node} servers over {self.inter_node_link.name}"
        return text


def brief_experiment() -> Experiment:
    """Section 8 of the brief: hidden 4096, 96 layers, 312 TFLOP/s GPUs (A100), TP=8 vs PP=8,
    NVLink (A100 NVLink3, 600 GB/s both directions) vs PCIe Gen4 (32 GB/s)."""
    return Experiment(
        model=presets.model("gpt-96l-4096h"),
        gpu=presets.gpu("a100-sxm4-80gb"),
        inter_node_link=presets.link("ib-hdr"),
        links=(LinkSpec("NVLink", presets.link("nvlink3")), LinkSpec("PCIe", presets.link("pcie4"))),
        plans=(PlanSpec.parse("tp=8"), PlanSpec.parse("pp=8")),
    )


# The brief's literal link figures ("NVLink 600 GB/s", "PCIe ~32 GB/s"), used by the textbook model.
BRIEF_LINKS = (LinkSpec.parse("NVLink=600GB/s"), LinkSpec.parse("PCIe=32GB/s"))
