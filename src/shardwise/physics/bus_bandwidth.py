"""nccl-tests' bus bandwidth (NVIDIA/nccl-tests doc/PERFORMANCE.md), by which measured collective
curves are compared with `physics.collectives`."""

from __future__ import annotations

import numpy as np

from shardwise.specs._checks import Number


def bus_factor(op: str, ranks: Number) -> Number:
    """nccl-tests' bus bandwidth over algorithm bandwidth (doc/PERFORMANCE.md): 2(p-1)/p for an
    all-reduce, (p-1)/p for all-gather, reduce-scatter and all-to-all."""
    if op not in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        raise ValueError(f"no bus bandwidth for {op!r}")
    p = np.asarray(ranks, dtype=float)
    return (2.0 if op == "all_reduce" else 1.0) * (p - 1) / p


def bus_bandwidth_bytes_per_s(op: str, message_bytes: Number, ranks: Number, time_s: Number) -> Number:
    """nccl-tests' bus bandwidth: the algorithm bandwidth n / t times `bus_factor`."""
    return message_bytes / time_s * bus_factor(op, ranks)
