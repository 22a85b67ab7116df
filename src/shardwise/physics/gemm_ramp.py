"""How a training micro-batch's GEMMs slow down when it holds few tokens: a calibrated ramp.

The tile model (`physics.gemm`) prices what the shape of one GEMM costs: padded tiles, a last
wave that leaves SMs idle, each tile's fill and epilogue. What it does not see grows with the
number of GEMMs a step runs per token: per-kernel prologues and pipeline ramps, weights and
fp32 main_grad re-read once per micro-batch, the host-side work of each layer. Both shrink per
token as a micro-batch carries more tokens: Hockney's half-performance length (R. W. Hockney
and C. R. Jesshope, "Parallel Computers 2", 1988, Sec. 1.3.3: a pipeline with a fixed start-up
cost reaches r(n) = r_inf n / (n + n_1/2) on a problem of size n):

    eta(T) = eta_inf * T / (T + T_half)

T the tokens of one micro-batch on one context-parallel rank (micro_batch x seq_len / cp: every
linear layer's GEMMs have T rows, or T as their reduction depth for the weight gradient); T_half
(`Cluster.gemm_half_rate_tokens`) the micro-batch size at which they would run at half their
large-batch rate (n_1/2). Equivalently every GEMM pays a fixed time equal to T_half tokens' worth of its
own math, so the extra time per micro-batch is proportional to the weights each GPU holds: what
neither the per-micro-batch overhead (one time per stage, whatever its width) nor the GEMM scale
(the same share at every micro-batch size) can express.

T_half is 0 (no ramp) unless `shardwise calibrate` fits it from runs at several micro-batch
sizes; it applies to training steps only (a serving iteration's thin GEMMs are memory-bound,
which the tile model prices).
"""

from __future__ import annotations

import numpy as np

from shardwise.specs import Cluster
from shardwise.specs._checks import Number


def ramp(tokens: Number, half_rate_tokens: Number) -> Number:
    """T / (T + T_half): the share of its large-batch rate a micro-batch of T tokens reaches."""
    t = np.asarray(tokens, dtype=float)
    return t / (t + np.asarray(half_rate_tokens, dtype=float))


def ramped(cluster: Cluster, tokens: Number) -> Cluster:
    """The cluster whose GPU's GEMM efficiencies (16-bit and FP8) are scaled by `ramp` for
    micro-batches of `tokens` tokens (arrays broadcast with the plan's); unchanged without a ramp."""
    half = np.asarray(cluster.gemm_half_rate_tokens, dtype=float)
    if not np.any(half > 0):
        return cluster
    f = ramp(tokens, half)
    gpu = cluster.gpu
    fp8 = np.asarray(gpu.matmul_efficiency_fp8, dtype=float)
    return cluster.with_(
        gpu=gpu.with_(
            matmul_efficiency=np.asarray(gpu.matmul_efficiency, dtype=float) * f,
            matmul_efficiency_fp8=np.where(fp8 > 0, fp8 * f, 0.0),
        )
    )
