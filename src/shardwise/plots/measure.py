"""`shardwise measure`'s figures: measured against predicted per term of one step (`measure tp|pp|dp
--plot`), and measured step times of TP=N and PP=N against the batch with the prediction as lines
and each crossover marked (`measure crossover --plot`)."""

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
    changes = crossings(batches, series, kind)
    return changes[0][0] if changes else None


def crossings(batches: list[int], series: dict[str, dict[str, Any]], kind: str) -> list[tuple[int, str]]:
    """Every batch where the faster of the two plans changes, with the plan ahead from there
    (measured times need not cross once: TP may win again at a larger batch)."""
    (na, sa), (nb, sb) = list(series.items())[:2]
    ta, tb = sa.get(kind) or [], sb.get(kind) or []
    if not ta or not tb:
        return []
    out, ahead = [], ta[0] < tb[0]
    for batch, x, y in zip(batches, ta, tb, strict=True):
        if (x < y) != ahead:
            ahead = x < y
            out.append((batch, na if ahead else nb))
    return out


def crossings_text(changes: list[tuple[int, str]]) -> str:
    """'batch 4 (pp=2 ahead), tp=2 ahead again at 8'; 'none in these batches'."""
    if not changes:
        return "none in these batches"
    (batch, plan), rest = changes[0], changes[1:]
    return ", ".join([f"batch {batch} ({plan} ahead)", *(f"{p} ahead again at {b}" for b, p in rest)])


def measured_terms(rows: list[tuple[str, float, float]], title: str) -> Figure:
    """`rows`: (term, measured s, predicted s), as `measure.records.term_rows` gives them; paired
    bars per term, each labelled with its time and the prediction's error."""
    from shardwise.units import format_seconds

    fig, ax = plt.subplots(figsize=(7.5, 4.0))
    y = range(len(rows))
    h = 0.38
    ax.barh([i - h / 2 for i in y], [1e3 * m for _, m, _ in rows], h, color="#4c72b0", label="measured")
    ax.barh([i + h / 2 for i in y], [1e3 * p for _, _, p in rows], h, color="#dd8452", label="predicted")
    top = max(1e3 * max(m, p) for _, m, p in rows) or 1.0
    for i, (_, m, p) in enumerate(rows):
        ax.text(1e3 * m + 0.01 * top, i - h / 2, format_seconds(m), va="center", fontsize=8)
        err = f" ({p / m - 1:+.0%})" if m > 0 else ""
        ax.text(1e3 * p + 0.01 * top, i + h / 2, format_seconds(p) + err, va="center", fontsize=8)
    ax.set_yticks(list(y), [name for name, _, _ in rows])
    ax.invert_yaxis()
    ax.set_xlim(0, 1.25 * top)
    ax.set_xlabel("time in the slowest rank's last step (ms)")
    ax.set_title(title, fontsize=10, loc="left")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return fig
