"""The collective model (`physics.collectives`) against published collective measurements.

Every point is one message size of one published curve (nccl-tests or torch.distributed), from
`data/comm_and_inference_measured.csv` and `data/public_collectives.csv` (each row with its
source), priced on the system preset that matches the hardware: the time of the collective,
predicted against measured.

Each curve says whether it set a constant of the model (`dev`: a link's efficiency is its large-
message bus bandwidth, the per-step latencies come from the small-message ends of a few curves)
or not (`holdout`: no constant was chosen by looking at it). The holdout curves are the test.

Curves measured with the ring forced (NCCL_ALGO=Ring, or a slide's "without SHARP") are priced
with NVLS off (`Cluster.nvls`). nccl-tests call NCCL directly (the data's framework column says
which tool timed a row), so their curves get NCCL's own per-call latency (`NCCL_BASE_S`, NCCL
src/graph/tuning.cc baseLat) instead of the presets' 20 us, which include launching from
PyTorch; torch.distributed measurements keep the presets'. What is not compared, with the
reason, is in `NOT_COMPARED`.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import cache
from importlib import resources

import numpy as np

from shardwise import loaders, presets
from shardwise.physics.collectives import Fabric, bus_bandwidth_bytes_per_s, bus_factor
from shardwise.specs import Cluster

NCCL_BASE_S = 6.6e-6  # NCCL src/graph/tuning.cc baseLat (ring, Simple/LL), per call
PEAK_BYTES = 16 * 2**30  # the size a "peak" (no size given) is priced at: nccl-tests' usual top
OPS = {"all_reduce_perf": "all_reduce", "all_gather_perf": "all_gather", "alltoall_perf": "all_to_all"}
NOT_COMPARED = (
    "not compared: broadcast and reduce (not used by the model), 2 RTX 2080 Ti and 2 H100 PCIe on NVLink bridges "
    "and 8 A100 with bridged pairs (no preset for those links), RTX 5090 boxes and 2 GH200 over Ethernet (P2P "
    "state or system not given), averages over a sweep, p2pBandwidthLatencyTest copies (checked in tests)"
)


@dataclass(frozen=True)
class Curve:
    """One published curve: which rows, on what preset, and whether it set a constant."""

    key: str
    file: str  # "comm" (comm_and_inference_measured.csv) or "public" (public_collectives.csv)
    match: str  # an id pattern (comm, fnmatch), or "gpu substring|test" (public)
    system: str
    split: str  # "dev" (set a constant) or "holdout" (untouched)
    note: str
    ranks: int = 0  # 0: the rows' num_gpus
    nodes: int = 0  # 0: the rows' nodes
    intra: str = ""  # a link preset replacing the system's
    nics: tuple[str, float] | None = None  # (NIC preset, NICs per node) replacing the system's
    p2p: bool | None = None
    peak_bytes: float = PEAK_BYTES


@cache
def curves() -> tuple[Curve, ...]:
    """The compared curves, from `data/collective_curves.yaml` (each entry's fields explained there)."""
    text = resources.files("shardwise.data").joinpath("collective_curves.yaml").read_text(encoding="utf-8")
    entries = loaders.parse_trusted_yaml(text, "data/collective_curves.yaml")
    return tuple(
        Curve(key=key, **{**e, "nics": tuple(e["nics"]) if "nics" in e else None}) for key, e in entries.items()
    )


@dataclass(frozen=True)
class Point:
    """One message size of one curve: predicted and measured time and bus bandwidth."""

    curve: str
    split: str
    hardware: str
    op: str
    ranks: int
    nodes: int
    size_bytes: float
    peak: bool  # the source gives a peak without its size
    predicted_s: float
    measured_s: float
    source: str

    @property
    def error(self) -> float:
        return self.predicted_s / self.measured_s - 1.0

    def bus_bandwidth_gb_per_s(self, time_s: float) -> float:
        return float(bus_bandwidth_bytes_per_s(self.op, self.size_bytes, self.ranks, time_s)) / 1e9


@cache
def _rows(file: str) -> tuple[dict[str, str], ...]:
    name = {"comm": "comm_and_inference_measured.csv", "public": "public_collectives.csv"}[file]
    text = resources.files("shardwise.data").joinpath(name).read_text(encoding="utf-8")
    return tuple(csv.DictReader(text.splitlines()))


def _selected(curve: Curve) -> list[dict[str, str]]:
    if curve.file == "public":
        gpu, test = curve.match.split("|")
        return [r for r in _rows("public") if gpu in r["gpu"] and r["test"] == test and float(r["size_bytes"] or 0) > 0]
    return [r for r in _rows("comm") if r["category"] == "collective" and fnmatchcase(r["id"], curve.match)]


def _cluster(curve: Curve, nodes: int, nccl_tests: bool, nvls: bool) -> Cluster:
    cluster = presets.system(curve.system, nodes)
    intra = presets.link(curve.intra) if curve.intra else cluster.intra_node_link
    inter = cluster.inter_node_link
    if curve.nics is not None:
        inter = loaders.per_gpu_nic(presets.link(curve.nics[0]), curve.nics[1], cluster.gpus_per_node)
    if nccl_tests:
        intra = intra.with_(base_latency_s=NCCL_BASE_S)
        inter = inter.with_(base_latency_s=NCCL_BASE_S) if inter is not None else None
    # on the link alone: no curve records its server's PCIe switches and sockets (GTC24's "expected"
    # busbw sets pcie4's and pcie5's own rate), so a preset's `pcie:` block (`physics.pcie`) is not theirs
    cluster = cluster.with_(intra_node_link=intra, inter_node_link=inter, nvls=nvls, pcie=None)
    return cluster if curve.p2p is None else cluster.with_(p2p=curve.p2p)


def _point(curve: Curve, row: dict[str, str]) -> Point:
    public = curve.file == "public"
    op = OPS[row["test"].split()[0]] if public else row["operation"]
    ranks = curve.ranks or int(row["num_gpus"].split()[0])
    nodes = curve.nodes or int(row["nodes"].split()[0])
    size_text = row["size_bytes"] if public else row["message_size_bytes"]
    size = float(size_text) if size_text else curve.peak_bytes
    ring_only = not public and row["algo"].lower().startswith("ring")  # NCCL_ALGO=Ring, or NVLS off
    nccl_tests = public or row["framework"].startswith("nccl-tests")  # else torch.distributed
    fabric = Fabric.of(_cluster(curve, nodes, nccl_tests, not ring_only))
    predicted = float(getattr(fabric.group(ranks, ranks // nodes), op)(size))
    hardware = f"{ranks} {row['gpu'].replace('GeForce ', '') or presets.system(curve.system).gpu.name}"
    if public:
        measured = float(row["time_us_out_of_place"]) * 1e-6
    else:  # bus bandwidth in GB/s -> time
        measured = size * float(bus_factor(op, ranks)) / (float(row["value"]) * 1e9)
    source = f"{row['source']}, {row['locator']}"
    return Point(curve.key, curve.split, hardware, op, ranks, nodes, size, not size_text, predicted, measured, source)


def validate_collectives() -> list[Point]:
    """Every compared point of every curve, in the data file's order."""
    return [_point(c, r) for c in curves() for r in _selected(c)]


def summary(points: list[Point]) -> dict[str, float]:
    """Mean absolute error, median signed error and count of some points."""
    err = np.array([p.error for p in points])
    return {"points": len(points), "mape": float(np.mean(np.abs(err))), "median_error": float(np.median(err))}
