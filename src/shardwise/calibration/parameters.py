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
                               switches, NCCL's protocol on this fabric), at 2 servers
inter_node_scaling_exponent    how that bandwidth falls as the job spans more servers:  0 + 0.1
                               x (nodes / 2)^-a, a in [0, 1] (0: a non-blocking fabric
                               that keeps its per-GPU rate at any size; 1: a fixed total
                               cross-section shared by every server, as one oversubscribed
                               uplink; congestion, adaptive routing and rail layout lie
                               between)
intra_node_bandwidth_scale     the sustained bandwidth inside a server (NVLink/PCIe,    1 x 1.2
                               well measured by nccl-tests; networks vary more)
micro_batch_overhead_s         fixed time per micro-batch on every pipeline stage       0 + 5 ms
                               (kernel launches, host scheduling; it grows the bubble)
memory_bandwidth_scale         the GPU's sustained HBM bandwidth (element-wise          1 x 1.3
                               kernels, optimizer); a hardware rate: no wide           (no wide)
                               prior component (`Parameter.widen`, below); a fit
                               stops where it sustains the datasheet's (`ceilings`)
link_latency_scale             every link's latency, per call and per ring step, both   1 x 2
                               tiers (NCCL's protocol choice, custom all-reduce
                               kernels, the host's launch path)
gemm_half_rate_tokens          the tokens of a micro-batch at which its GEMMs would     0 + 512
                               run at half their large-batch rate (Hockney's n_1/2,
                               `physics.gemm_ramp`): small micro-batches slower per
                               token in proportion to the weights each GPU holds
inter_node_all_to_all_scale    the share of the inter-node rate an all-to-all (MoE      1 x 1.5
                               dispatch and combine, Ulysses' exchange) reaches beside
                               the ring and tree collectives': every peer at once,
                               across rails, incast; 1 GPU's NIC at most (NCCL)
inter_node_p2p_scale           the same for a pipeline send/receive across servers:     1 x 1.5
                               one flow between two GPUs
=============================  ======================================================  =========

The network's degradation is priced on the job's server count: in the layouts the planner
searches (tp inside a server, pp outermost) the data-parallel all-reduce, ZeRO's all-gathers and
reduce-scatters and the context-parallel exchange of a stage span nodes / pp servers and share the
fabric with the other stages' traffic, so the whole job's size is what congests it. Every
inter-node collective kind is priced on one link (`physics.collectives`), so one scale and one
exponent serve all kinds; the all-to-all and the pipeline send each have their own factor on top
(the kinds differ in their traffic pattern, not in the wire), fitted only where a run's step
depends on that kind across servers (an MoE job whose expert-parallel group spans servers, a
pipeline cut between servers), else reported as not fitted.

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
GEMM_HALF_RATE_PRIOR_TOKENS = 512.0
# The wide component of a parameter's two-component prior (a stack unlike the public ones) is this
# many times its narrow prior (`calibration.fit`: the prior-data conflict; `Parameter.widen`).
WIDEN = 4.0


@dataclass(frozen=True)
class Parameter:
    name: str
    log_scale: bool  # fitted as u = ln(value) (a scale) or as the value itself (seconds)
    prior_mean: float  # in u space
    prior_sd: float  # in u space
    low: float  # bounds in u space
    high: float
    description: str
    unit: str = ""  # "x" for a scale, "s" for an overhead, "1" for a pure number (an exponent), or its unit
    # the wide component of its two-component prior, in narrow prior sds: a stack unlike the public
    # ones (1: none, the quantity is the hardware's, not the stack's: see memory_bandwidth_scale)
    widen: float = WIDEN

    def __post_init__(self) -> None:
        if not self.unit:
            object.__setattr__(self, "unit", "x" if self.log_scale else "s")

    def value(self, u: Any) -> Any:
        return np.exp(u) if self.log_scale else u

    def u(self, value: float) -> float:
        return math.log(value) if self.log_scale else value


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
    # ln(t) moves by about -a ln(nodes / 2) x (the inter-node share of the step): 0.1 is +-35% of
    # network time at 64 servers, about the inter-node scale's own prior at that size.
    Parameter(
        "inter_node_scaling_exponent",
        False,
        0.0,
        0.1,
        0.0,
        1.0,
        "network bandwidth ~ (nodes / 2)^-a",
        "1",
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
    # The sustained HBM rate is the GPU's, not the stack's: a copy kernel reaches about the same
    # fraction of the datasheet on every system of one GPU (`memory_efficiency`, 0.85; `shardwise
    # measure micro` measures it), and what a stack does differently to HBM, the bytes its
    # element-wise kernels move unfused, the framework presets count (eager_elementwise, eager_glu,
    # layout_copies, unfused_accumulate_bytes). So its prior has no wide component (widen 1): its
    # narrow x1.3 is already the whole range a working GPU spans. With one, a stack's uniform 15%
    # slowdown (six Llama 3 8B runs on 2 DGX H100) was fitted as HBM at 0.41 x (1.2 TB/s on an
    # H100): it slows the GEMMs' epilogues and memory roofs too, so it mimics a slower GEMM, and
    # under a x2.9-per-sd prior 0.41 x was as likely a priori as a GEMM at 0.83 x; the runs'
    # evidence then chose by residual. Serving's decode then read that HBM and doubled its TPOT.
    Parameter(
        "memory_bandwidth_scale",
        True,
        0.0,
        math.log(1.3),
        math.log(0.3),
        math.log(2.0),
        "HBM bandwidth (x)",
        widen=1.0,
    ),
    # Doubling every link's latency moves the public training runs' steps by up to 4.4% (median
    # 0.6%) and the serving measurements by up to 12% (decode's small all-reduces): last in the
    # order, fitted where some run is sensitive to it.
    Parameter("link_latency_scale", True, 0.0, math.log(2.0), math.log(0.1), math.log(10.0), "link latency (x)"),
    # One prior sd (512 tokens) slows the GEMMs of an 8192-token micro-batch (one 8k sequence, the
    # public runs' usual) by 6%, about the public stacks' spread between groups (0.049, above):
    # the presets' tile model leaves no more than that unexplained there. Bounded by 65,536 tokens
    # (a 64k micro-batch at half rate: far beyond any GEMM sweep published). Last in the order:
    # runs at one micro-batch size cannot tell it from the GEMM scale.
    Parameter(
        "gemm_half_rate_tokens",
        False,
        0.0,
        GEMM_HALF_RATE_PRIOR_TOKENS,
        0.0,
        65536.0,
        "GEMMs at half rate at (tokens / micro-batch)",
        "tokens",
    ),
    # Per collective kind across servers, relative to the ring and tree collectives' rate (both last
    # in the order: they need runs whose step depends on that kind across servers). Physics: a ring
    # step goes to one neighbour rail to rail, so an 8-GPU server's ring uses all 8 NICs; an
    # all-to-all sends to every peer at once and "cannot aggregate the bandwidth of multiple NICs"
    # (S. Jeaugey, NVIDIA/nccl-tests#267: one NIC per GPU at most, as `physics.collectives` prices it),
    # crosses rails through the spine or PXN, and meets incast and ECMP collisions that a ring does
    # not: on 8 servers of 8 V100 over 100 Gb/s IB its nccl-tests rate per server was 0.84 x the
    # all-reduce's (NVIDIA/nccl-tests#78: 0.52 GB/s per GPU x 8 x 7/8 against a 4.33 GB/s busbw), on
    # tuned fabrics about 1, on oversubscribed or misrouted ones far less. A pipeline send is one flow
    # between two GPUs, with no ring to spread it. Prior: 1, sd x1.5 (the inter-node scale's own);
    # range 0.05-2.
    Parameter(
        "inter_node_all_to_all_scale",
        True,
        0.0,
        math.log(1.5),
        math.log(0.05),
        math.log(2.0),
        "all-to-all across servers (x)",
    ),
    Parameter(
        "inter_node_p2p_scale",
        True,
        0.0,
        math.log(1.5),
        math.log(0.05),
        math.log(2.0),
        "pipeline sends across servers (x)",
    ),
)
BY_NAME = {p.name: p for p in PARAMETERS}
# The parameters that belong to the software stack the runs ran, not to their hardware: the GEMM
# scale and its ramp are the stack's kernels (cuBLAS / Transformer Engine / torch.compile versions,
# their tile choices and fusions: docs/calibration.md, "its GEMM scale belongs to the stack it was
# measured on"), the fixed times per step and per micro-batch its host code (Python dispatch,
# logging, the optimizer step's launches, a schedule's syncs). The link scales, their latency and
# the network's exponent are the fabric's (NCCL's rate over it is the same for every stack using
# NCCL), and the HBM scale is the GPU's (above: what a stack does differently to HBM the framework
# presets count). A calibration fitted on one stack that moved a stack-bound parameter says nothing
# of another stack's (`calibration.intervals.spread`: at least the uncalibrated spread there).
STACK_BOUND = ("matmul_efficiency_scale", "step_overhead_s", "micro_batch_overhead_s", "gemm_half_rate_tokens")
# The fitted HBM scale multiplies the sustained rate, memory_bandwidth x memory_efficiency (0.85 of
# the datasheet for the presets; 1 for a `measure micro` file, whose bandwidth is the measured one).
# A sustained rate cannot exceed the peak it is a share of: a fit stops the scale where the sustained
# rate of the runs' GPUs reaches its stated bandwidth, 1 / memory_efficiency (x1.18 for the presets),
# and a value there is reported at its limit (`fit.Fit.ceilings`, `checks.at_limit`; review 37: a
# fit put an H100 at 1.56 x, sustaining 4.4 TB/s of its 3.35). The particles and the explanations
# of a far run still range to `high` (a bound of the fit's result, not of what the runs are asked).


def hbm_ceiling(gpu: Any) -> float:
    """The largest memory_bandwidth_scale on `gpu`: its sustained HBM rate at its stated bandwidth."""
    return float(1.0 / np.max(gpu.memory_efficiency))


def ceilings(clusters: Any) -> dict[str, float]:
    """The scales bounded below their range's top by the hardware of `clusters` (the runs'): HBM
    at the datasheet of the GPU whose ceiling is lowest. Value space; {} where none binds."""
    hbm = min((hbm_ceiling(c.gpu) for c in clusters), default=math.inf)
    top = BY_NAME["memory_bandwidth_scale"]
    return {top.name: hbm} if hbm < top.value(top.high) else {}


WIDEN_BY_PARAMETER = np.array([p.widen for p in PARAMETERS])  # PARAMETERS order
# The server count at which `inter_node_bandwidth_scale` is the network's whole scale: the smallest
# job that crosses servers (the presets' NIC rates are two-server nccl-tests figures).
REFERENCE_NODES = 2
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
        scale = v["inter_node_bandwidth_scale"] * network_degradation(cluster.nodes, v["inter_node_scaling_exponent"])
        inter = inter.with_(
            bandwidth_bytes_per_s=_num(inter.bandwidth_bytes_per_s * scale),
            latency_s=_num(inter.latency_s * s_lat),
            base_latency_s=_num(inter.base_latency_s * s_lat),
        )
    return cluster.with_(
        gpu=gpu,
        intra_node_link=intra,
        inter_node_link=inter,
        step_overhead_s=cluster.step_overhead_s + v["step_overhead_s"],
        micro_batch_overhead_s=cluster.micro_batch_overhead_s + v["micro_batch_overhead_s"],
        gemm_half_rate_tokens=_num(cluster.gemm_half_rate_tokens + np.asarray(v["gemm_half_rate_tokens"], dtype=float)),
        inter_node_all_to_all_scale=_num(cluster.inter_node_all_to_all_scale * v["inter_node_all_to_all_scale"]),
        inter_node_p2p_scale=_num(cluster.inter_node_p2p_scale * v["inter_node_p2p_scale"]),
    )


def network_degradation(nodes: Any, exponent: Any) -> Any:
    """(nodes / REFERENCE_NODES)^-a for a job spanning `nodes` servers (1 up to the reference)."""
    ratio = np.maximum(np.asarray(nodes, dtype=float), REFERENCE_NODES) / REFERENCE_NODES
    return ratio ** -np.asarray(exponent, dtype=float)


def _num(x: Any) -> Any:
    """A plain float for a 0-d result (specs print and compare scalars), else the array."""
    return float(x) if np.ndim(x) == 0 else np.asarray(x)
