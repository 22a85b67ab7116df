"""Micro-benchmarks that turn this machine into a preset (`shardwise measure micro`).

- GEMM throughput: square GEMMs of growing size in the run's dtype; the best FLOP/s is the
  device's sustained peak. With `workload_gemms` (every GEMM of a model's linear layers, forward
  and backward, at a micro-batch's tokens and around them, `table_shapes`), the preset's matmul
  efficiency is their median rate over that peak (else 1), and the preset keeps each shape's
  rate as its GEMM table (`Gpu.gemm_table`): 16-bit GEMMs are priced at the rate of the nearest
  measured shape. sm_count is left unknown, so other GEMMs get the roofline at peak x efficiency.
- Memory bandwidth: a large tensor copied (read + write), best of the repeats.
- Collectives between the ranks: all-reduce, all-gather, reduce-scatter and a point-to-point
  send over message sizes from 4 KiB up, and the all-reduce again per group size (2, 4, 8, ...
  ranks); the link's latency and bandwidth come from a
  least-squares fit of the alpha-beta model to the all-reduce curve, t = base + 2 (n - 1) / n x
  bytes / bandwidth (the ring's bus traffic, NCCL's busBw convention).

All timings are medians over repeats after a warm-up; rank 0's figures are returned.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

from shardwise.measure.launch import Group

SIZES_BYTES = tuple(4096 * 4**i for i in range(8))  # 4 KiB .. 64 MiB
GEMM_SIZES = (256, 512, 1024, 2048)


@dataclass(frozen=True)
class MicroConfig:
    dtype: str = "bfloat16"
    repeats: int = 5
    max_bytes: int = SIZES_BYTES[-1]
    gemm_sizes: tuple[int, ...] = GEMM_SIZES
    workload_gemms: tuple[tuple[int, int, int], ...] = ()  # (m, n, k) of the workload's GEMMs


def shapes_of(hidden: int, ffn_hidden: int, tokens: int, tp: int = 1) -> tuple[tuple[int, int, int], ...]:
    """(m, n, k) of one layer's four linear layers' forward GEMMs: QKV, projection, MLP up, down."""
    return (
        (tokens, 3 * hidden // tp, hidden),
        (tokens, hidden, hidden // tp),
        (tokens, ffn_hidden // tp, hidden),
        (tokens, hidden, ffn_hidden // tp),
    )


def table_shapes(hidden: int, ffn_hidden: int, tokens: int, ranks: int) -> tuple[tuple[int, int, int], ...]:
    """(m, n, k) of every GEMM one layer's linear layers run in training, for `measure micro`'s
    GEMM table: the forward (`shapes_of`), the input gradient (m x n @ n x k: m, k, n) and the
    weight gradient (k x m @ m x n: k, n, m), whole and split over `ranks` where it divides, at a
    quarter of, and four times, `tokens` as well (the batches `measure crossover` runs)."""
    splits = [1, ranks] if ranks > 1 and hidden % ranks == 0 and ffn_hidden % ranks == 0 else [1]
    out: list[tuple[int, int, int]] = []
    for t in sorted({max(1, tokens // 4), tokens, 4 * tokens}):
        for tp in splits:
            for m, n, k in shapes_of(hidden, ffn_hidden, t, tp):
                out += [(m, n, k), (m, k, n), (k, n, m)]
    return tuple(dict.fromkeys(out))


def _median_time(fn: Any, device: Any, repeats: int) -> float:
    from shardwise.measure.layers import sync

    fn()  # warm-up
    times = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def micro_benchmarks(g: Group, cfg: MicroConfig) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    from shardwise.measure.runs import _dtype

    dtype, dev = _dtype(cfg.dtype), g.device
    out: dict[str, Any] = {"backend": g.backend, "device": str(dev), "ranks": g.world, "dtype": cfg.dtype}
    gemm = {}
    for n in cfg.gemm_sizes:
        a, b = torch.randn(n, n, device=dev, dtype=dtype), torch.randn(n, n, device=dev, dtype=dtype)
        gemm[n] = 2 * n**3 / _median_time(lambda a=a, b=b: a @ b, dev, cfg.repeats)
    out["gemm_flops_per_s"] = gemm
    workload = []
    for m, n, k in cfg.workload_gemms:
        # laid out as the runs' linear layers compute it: x @ w.t() (w is n x k); the backward's
        # shapes come in as GEMMs of their own (`table_shapes`)
        a, b = torch.randn(m, k, device=dev, dtype=dtype), torch.randn(n, k, device=dev, dtype=dtype)
        workload.append(2 * m * n * k / _median_time(lambda a=a, b=b: a @ b.t(), dev, cfg.repeats))
    out["workload_gemm_flops_per_s"] = workload
    out["workload_gemms"] = [list(s) for s in cfg.workload_gemms]
    big = torch.empty(64 * 2**20 // 4, device=dev, dtype=torch.float32)
    copy = torch.empty_like(big)
    out["memory_bandwidth_bytes_per_s"] = 2 * big.numel() * 4 / _median_time(lambda: copy.copy_(big), dev, cfg.repeats)
    curves: dict[str, dict[int, float]] = {"all_reduce": {}, "all_gather": {}, "reduce_scatter": {}, "p2p": {}}
    for size in (s for s in SIZES_BYTES if s <= cfg.max_bytes):
        n = size // 4
        x = torch.ones(n, device=dev, dtype=torch.float32)
        parts = [torch.empty(n // g.world, device=dev, dtype=torch.float32) for _ in range(g.world)]
        curves["all_reduce"][size] = _median_time(lambda x=x: dist.all_reduce(x), dev, cfg.repeats)
        curves["all_gather"][size] = _median_time(lambda p=parts: dist.all_gather(p, p[g.rank]), dev, cfg.repeats)
        curves["reduce_scatter"][size] = _collective_or_nan(
            lambda p=parts: dist.reduce_scatter(p[g.rank], p), dev, cfg.repeats
        )

        def p2p(x: Any = x) -> None:
            if g.rank == 0:
                dist.send(x, dst=1)
            elif g.rank == 1:
                dist.recv(x, src=0)

        curves["p2p"][size] = _median_time(p2p, dev, cfg.repeats)
        dist.barrier()
    out["curves_s"] = curves
    out["all_reduce_by_group_s"] = _all_reduce_by_group(g, cfg, dev)
    return out


def group_sizes(world: int) -> list[int]:
    """2, 4, 8, ... up to the world, and the world itself."""
    sizes, k = [], 2
    while k < world:
        sizes.append(k)
        k *= 2
    return [*sizes, world]


def _all_reduce_by_group(g: Group, cfg: MicroConfig, dev: Any) -> dict[int, dict[int, float]]:
    """All-reduce times per group size (the first k ranks; the others wait at a barrier): how a
    collective's latency and bandwidth change with the group, as TP of 2, 4, 8 would see it."""
    import torch
    import torch.distributed as dist

    out: dict[int, dict[int, float]] = {}
    for k in group_sizes(g.world):
        group = dist.new_group(list(range(k))) if k < g.world else dist.group.WORLD  # every rank must call it
        curve: dict[int, float] = {}
        for size in (s for s in SIZES_BYTES if s <= cfg.max_bytes):
            if g.rank < k:
                x = torch.ones(size // 4, device=dev, dtype=torch.float32)
                curve[size] = _median_time(lambda x=x, grp=group: dist.all_reduce(x, group=grp), dev, cfg.repeats)
            dist.barrier()
        out[k] = curve
    return out


def _collective_or_nan(fn: Any, device: Any, repeats: int) -> float:
    """gloo has no reduce_scatter: NaN where the backend lacks the collective."""
    try:
        return _median_time(fn, device, repeats)
    except (RuntimeError, ValueError):
        return float("nan")


def fit_link(curve_s: dict[int, float], ranks: int) -> tuple[float, float]:
    """(base latency s, bandwidth B/s) of t = base + 2 (n - 1) / n x bytes / bandwidth, least
    squares over the all-reduce curve (weighted by 1 / t: each size counts alike)."""
    import numpy as np

    sizes = np.array(sorted(curve_s), dtype=float)
    t = np.array([curve_s[int(s)] for s in sizes])
    traffic = 2 * (ranks - 1) / ranks * sizes
    a = np.stack([np.ones_like(sizes), traffic], axis=1) / t[:, None]
    (base, per_byte), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    if per_byte <= 0:  # latency-bound everywhere: the largest message's rate
        per_byte = t[-1] / traffic[-1]
    return max(float(base), 0.0), 1.0 / float(per_byte)


def system_yaml(result: dict[str, Any], name: str, memory_bytes: float) -> dict[str, Any]:
    """A system preset (`--system FILE.yaml`) of this machine: its GPU (the measured sustained
    GEMM rate as the 16-bit peak, the workload GEMMs' share of it as the efficiency) and its link (the
    fitted alpha-beta)."""
    import platform
    import statistics

    base, bw = fit_link(result["curves_s"]["all_reduce"], result["ranks"])
    workload = result.get("workload_gemm_flops_per_s") or []
    peak = max([*result["gemm_flops_per_s"].values(), *workload])
    efficiency = round(statistics.median(workload) / peak, 4) if workload else 1.0
    gpu: dict[str, Any] = {
        "peak_16bit": f"{peak / 1e12:.6g} TFLOPS",
        "memory": f"{memory_bytes / 1e9:.6g}GB",
        "memory_bandwidth": f"{result['memory_bandwidth_bytes_per_s'] / 1e12:.6g}TB/s",
        "matmul_efficiency": efficiency,
        "memory_efficiency": 1.0,
    }
    if workload:
        gpu["gemm_table"] = [
            {"m": m, "n": n, "k": k, "rate": f"{rate / 1e12:.6g} TFLOPS"}
            for (m, n, k), rate in zip(result["workload_gemms"], workload, strict=True)
        ]
    return {
        name: {
            "gpu": gpu,
            "gpus_per_node": result["ranks"],
            "intra_node_link": {
                "bandwidth": f"{bw / 1e9:.6g}GB/s",
                "efficiency": 1.0,
                "base_latency": f"{base * 1e6:.6g}us",
                "latency": "0us",
            },
            "source": (
                f"shardwise measure micro on {platform.node() or 'this machine'}: {result['ranks']} ranks, "
                f"{result['backend']} on {result['device']}, {result['dtype']} GEMMs"
            ),
        }
    }


def preset_summary(spec: dict[str, Any], dtype: str) -> list[str]:
    """The preset `shardwise measure micro` wrote, in the units the rest of its output uses (its
    YAML keeps six digits: '0.543282 TFLOPS', '0.0567671TB/s')."""
    from shardwise import units

    gpu, link = spec["gpu"], spec["intra_node_link"]
    peak = units.format_flops(units.parse_flops_per_s(gpu["peak_16bit"]))
    hbm = units.format_rate(units.parse_rate_bytes_per_s(gpu["memory_bandwidth"]))
    bandwidth = units.format_rate(units.parse_rate_bytes_per_s(link["bandwidth"]))
    latency = units.format_seconds(units.parse_seconds(link["base_latency"]))
    return [
        f"GEMM ({dtype}): {peak}, {gpu['matmul_efficiency']:.0%} of it at the model's shapes; memory: {hbm}",
        f"link (all-reduce fit): {bandwidth}, {latency} per call",
    ]
