"""`shardwise measure crossover`: measured step times of TP=N and PP=N against the batch, with the
prediction as lines and each crossover marked."""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
from matplotlib.figure import Figure


def measured_crossover(batches: list[int], series: dict[str, dict[str, list[float]]], title: str) -> Figure:
    """`series[plan]["measured" | "predicted"]`: seconds per batch; markers measured, lines predicted."""
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    colors = {0: "#4c72b0", 1: "#dd8452"}
    for i, (plan, s) in enumerate(series.items()):
        c = colors.get(i)
        ax.plot(batches, [1e3 * t for t in s["measured"]], "o", color=c, ms=7, label=f"{plan} measured")
        if s.get("predicted"):
            ax.plot(batches, [1e3 * t for t in s["predicted"]], "-", color=c, lw=1.5, label=f"{plan} predicted")
    for kind, style in (("measured", ":"), ("predicted", "--")):
        at = crossover_batch(batches, series, kind)
        if at is not None:
            ax.axvline(at, color="0.3", ls=style, lw=1, label=f"{kind} crossover: batch {at}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(batches, [str(b) for b in batches])
    ax.set_xlabel("batch (sequences per step)")
    ax.set_ylabel("step time (ms)")
    ax.set_title(title, fontsize=10, loc="left")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def crossover_batch(batches: list[int], series: dict[str, dict[str, Any]], kind: str) -> int | None:
    """The first batch where the plan slower at the smallest batch becomes the faster one."""
    (_, sa), (_, sb) = list(series.items())[:2]
    ta, tb = sa.get(kind) or [], sb.get(kind) or []
    if not ta or not tb:
        return None
    first = ta[0] < tb[0]
    for batch, x, y in zip(batches, ta, tb, strict=True):
        if (x < y) != first:
            return batch
    return None
