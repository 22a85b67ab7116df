"""Compare parallel plans over one swept variable: the shared machinery of `crossover`,
`sweep` and the sensitivity analyses.

An `Experiment` is a model on a number of GPUs of one kind, a set of links to compare (each one
the link inside the server) and a set of plans. `times_s` evaluates one plan on one link for an
array of values of one variable in a single vectorized call of the cost model; values that make
a plan invalid (e.g. layers not divisible by pp) come back as NaN.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from shardwise import presets, units
from shardwise.errors import SpecError
from shardwise.loaders import parse_plan_spec
from shardwise.specs.experiment import Experiment, LinkSpec


@dataclass(frozen=True)
class Variable:
    name: str
    label: str  # axis label with unit
    integer: bool
    log: bool  # default axis scale
    parse: Callable[[str], float]


def column_values(name: str, values: np.ndarray) -> np.ndarray:
    """A swept variable's values as a table's column: a whole-number variable (batch, layers, ...) as
    integers, so a CSV writes `16`, not `16.0` (review 40 #6, #11); the others as floats (SI)."""
    var = VARIABLES.get(name)
    v = np.asarray(values)
    if var is not None and var.integer and v.size and np.all(np.isfinite(v)) and np.all(v == np.rint(v)):
        return np.rint(v).astype(np.int64)
    return v


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
# Each variable's unit as the JSON outputs carry it: SI (crossover's values and crossings,
# sensitivity's bars) and as shown (DISPLAY_UNIT: sweep's ranges, axes and tables).
SI_UNIT = {
    "batch": "sequences",
    "bandwidth": "B/s",
    "latency": "s",
    "layers": "layers",
    "hidden": "features",
    "seq_len": "tokens",
    "gpus": "GPUs",
    "peak_flops": "FLOP/s",
    "hbm_bandwidth": "B/s",
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


def brief_experiment() -> Experiment:
    """Section 8 of the brief: hidden 4096, 96 layers, 312 TFLOP/s GPUs (A100), TP=8 vs PP=8,
    NVLink (A100 NVLink3, 600 GB/s both directions) vs PCIe Gen4 (32 GB/s)."""
    return Experiment(
        model=presets.model("gpt-96l-4096h"),
        gpu=presets.gpu("a100-sxm4-80gb"),
        inter_node_link=presets.link("ib-hdr"),
        links=(LinkSpec("NVLink", presets.link("nvlink3")), LinkSpec("PCIe", presets.link("pcie4"))),
        plans=(parse_plan_spec("tp=8"), parse_plan_spec("pp=8")),
    )


# The brief's literal link figures ("NVLink 600 GB/s", "PCIe ~32 GB/s"), used by the textbook model.
BRIEF_LINKS = (presets.parse_link_spec("NVLink=600GB/s"), presets.parse_link_spec("PCIe=32GB/s"))
