"""The physically meaningful parameters `shardwise calibrate` fits, and how they change a cluster.

Each parameter moves one physical quantity of the cost model; none is a per-run factor:

=============================  ======================================================  =========
parameter                      what it changes                                          prior
=============================  ======================================================  =========
matmul_efficiency_scale        the GPU's sustained GEMM efficiency (16-bit and FP8),    1 x 1.056
                               capped at 100% of peak
step_overhead_s                fixed time per optimizer step (Python, data loader,      0 + 0.5 s
                               logging, checkpoint hooks)
inter_node_bandwidth_scale     each GPU's sustained bandwidth across servers (NICs,     1 x 1.5
                               switches, NCCL's protocol on this fabric)
intra_node_bandwidth_scale     the sustained bandwidth inside a server (NVLink/PCIe,    1 x 1.2
                               well measured by nccl-tests; networks vary more)
micro_batch_overhead_s         fixed time per micro-batch on every pipeline stage       0 + 5 ms
                               (kernel launches, host scheduling; it grows the bubble)
memory_bandwidth_scale         the GPU's sustained HBM bandwidth (element-wise          1 x 1.3
                               kernels, optimizer)
link_latency_scale             every link's latency, per call and per ring step, both   1 x 2
                               tiers (NCCL's protocol choice, custom all-reduce
                               kernels, the host's launch path)
=============================  ======================================================  =========

Scales are fitted as u = ln(scale) with a normal prior N(0, ln(prior factor)); overheads as
seconds with a half-normal prior of the stated width. With n runs, at most n parameters are
fitted, in the order of the table (the first explains the most in typical runs); a parameter no
run is sensitive to (e.g. the inter-node bandwidth when every run fits in one server) is left at
its prior value and reported as such.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardwise.specs import Cluster

# The GEMM efficiency's prior width: how far one software stack's overall speed typically is from
# the GPU preset's. On the public runs' dev split the mean log error of a group of runs (one
# model, system, GPU count) spreads by 0.049 beyond what its runs' own scatter (0.047) explains
# (`python tools/calibration_spread.py`); a step moves by about 0.75 x the change of ln(scale).
MATMUL_PRIOR_SD = 0.049 / 0.75


@dataclass(frozen=True)
class Parameter:
    name: str
    log_scale: bool  # fitted as u = ln(value) (a scale) or as the value itself (seconds)
    prior_mean: float  # in u space
    prior_sd: float  # in u space
    low: float  # bounds in u space
    high: float
    description: str

    def value(self, u: Any) -> Any:
        return np.exp(u) if self.log_scale else u

    def u(self, value: float) -> float:
        return math.log(value) if self.log_scale else value

    @property
    def unit(self) -> str:
        return "x" if self.log_scale else "s"


PARAMETERS = (
    Parameter(
        "matmul_efficiency_scale", True, 0.0, MATMUL_PRIOR_SD, math.log(0.3), math.log(1.6), "GEMM efficiency (x)"
    ),
    Parameter("step_overhead_s", False, 0.0, 0.5, 0.0, 60.0, "fixed time per step"),
    Parameter(
        "inter_node_bandwidth_scale",
        True,
        0.0,
        math.log(1.5),
        math.log(0.05),
        math.log(4.0),
        "bandwidth across servers (x)",
    ),
    Parameter(
        "intra_node_bandwidth_scale",
        True,
        0.0,
        math.log(1.2),
        math.log(0.05),
        math.log(4.0),
        "bandwidth inside a server (x)",
    ),
    Parameter("micro_batch_overhead_s", False, 0.0, 0.005, 0.0, 1.0, "fixed time per micro-batch per stage"),
    Parameter("memory_bandwidth_scale", True, 0.0, math.log(1.3), math.log(0.3), math.log(2.0), "HBM bandwidth (x)"),
    # Doubling every link's latency moves the public training runs' steps by up to 4.4% (median
    # 0.6%) and the serving measurements by up to 12% (decode's small all-reduces): last in the
    # order, fitted where some run is sensitive to it.
    Parameter("link_latency_scale", True, 0.0, math.log(2.0), math.log(0.1), math.log(10.0), "link latency (x)"),
)
BY_NAME = {p.name: p for p in PARAMETERS}
NEUTRAL = {p.name: p.value(p.prior_mean) for p in PARAMETERS}  # the uncalibrated model


def apply(cluster: Cluster, values: dict[str, Any]) -> Cluster:
    """The cluster with calibrated values (scalars, or arrays that broadcast with the plan's)."""
    v = {**NEUTRAL, **values}
    gpu = cluster.gpu
    s_mm = v["matmul_efficiency_scale"]
    fp8 = np.asarray(gpu.matmul_efficiency_fp8)
    gpu = gpu.with_(
        matmul_efficiency=_num(np.minimum(1.0, gpu.matmul_efficiency * s_mm)),
        matmul_efficiency_fp8=_num(np.where(fp8 > 0, np.minimum(1.0, fp8 * s_mm), 0.0)),
        memory_bandwidth_bytes_per_s=_num(gpu.memory_bandwidth_bytes_per_s * v["memory_bandwidth_scale"]),
    )
    s_lat = v["link_latency_scale"]
    intra = cluster.intra_node_link
    intra = intra.with_(
        bandwidth_bytes_per_s=intra.bandwidth_bytes_per_s * v["intra_node_bandwidth_scale"],
        ll_bandwidth_bytes_per_s=intra.ll_bandwidth_bytes_per_s * v["intra_node_bandwidth_scale"],
        latency_s=_num(intra.latency_s * s_lat),
        base_latency_s=_num(intra.base_latency_s * s_lat),
    )
    inter = cluster.inter_node_link
    if inter is not None:
        inter = inter.with_(
            bandwidth_bytes_per_s=inter.bandwidth_bytes_per_s * v["inter_node_bandwidth_scale"],
            latency_s=_num(inter.latency_s * s_lat),
            base_latency_s=_num(inter.base_latency_s * s_lat),
        )
    return cluster.with_(
        gpu=gpu,
        intra_node_link=intra,
        inter_node_link=inter,
        step_overhead_s=cluster.step_overhead_s + v["step_overhead_s"],
        micro_batch_overhead_s=cluster.micro_batch_overhead_s + v["micro_batch_overhead_s"],
    )


def _num(x: Any) -> Any:
    """A plain float for a 0-d result (specs print and compare scalars), else the array."""
    return float(x) if np.ndim(x) == 0 else np.asarray(x)
