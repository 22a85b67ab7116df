"""Crossover batch against a variable, and the one-at-a-time (tornado) chart."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from shardwise.plots._base import LINK_STYLES, OTHER_COLORS, axis_values, plt, set_x


def crossover_curves(curves: Sequence[Any], plans: Sequence[str], max_batch: int, title: str) -> Figure:
    """Crossover batch against a variable, one line per link; 'no crossover' drawn at the top."""
    fig, ax = plt.subplots(figsize=(8, 5))
    variable = curves[0].variable
    for k, c in enumerate(curves):
        x = axis_values(variable, c.values)
        y = np.asarray(c.crossover_batch, dtype=float)
        style, color = LINK_STYLES[k % len(LINK_STYLES)], OTHER_COLORS[k % len(OTHER_COLORS)]
        ax.plot(x, y, style, marker="o", lw=2, color=color, label=f"{c.link}")
        none = np.isnan(y)
        if none.any():
            ax.plot(x[none], np.full(none.sum(), max_batch), "^", ms=9, color=color, mfc="none")
    set_x(ax, variable, axis_values(variable, curves[0].values))
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_ylabel(f"crossover batch (sequences; triangle: none up to {max_batch})")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(title="link", fontsize=9)
    ax.set_title(title, fontsize=11, loc="left")
    lacking = []  # the points with no crossover up to max_batch, per link
    for c in curves:
        none = [
            f"{v:g} ({w})"
            for v, b, w in zip(axis_values(variable, c.values), c.crossover_batch, c.winner_at_batch_1, strict=True)
            if b != b
        ]
        if none:
            lacking.append(f"  {c.link}: at {variable} " + ", ".join(none) + " the plan in brackets wins throughout")
    notes = ["below a line the plan that wins at batch 1 is faster, above it the other one"]
    if lacking:  # the triangles' footnote only where a triangle is drawn
        notes[0] += f"; triangles: no crossover up to batch {max_batch}:"
        notes += lacking
    fig.text(0.01, -0.02, "\n".join(notes), fontsize=8, color="#444444", va="top")
    return fig


def tornado(base_ratio: float, bars: Sequence[Any], plans: Sequence[str], factor: float, title: str) -> Figure:
    """One-at-a-time sensitivity: the ratio time(A)/time(B) with each input divided and multiplied
    by `factor`; the widest bar is the input that matters most."""
    from shardwise.analyses.experiment import SHORT_NAME

    fig, ax = plt.subplots(figsize=(8.5, 0.55 * len(bars) + 1.8))
    ys = np.arange(len(bars))[::-1]
    for y, bar in zip(ys, bars, strict=True):
        lo, hi = bar.ratio_low, bar.ratio_high
        ax.barh(y, lo - base_ratio, left=base_ratio, color="#6baed6", height=0.6)
        ax.barh(y, hi - base_ratio, left=base_ratio, color="#fd8d3c", height=0.6)
        ends = (("low", lo, bar.fits_low), ("high", hi, bar.fits_high))
        for which, value, fits in ends:  # each end's 80% interval, labelled outside it
            if not np.isfinite(value):
                continue
            b_lo, b_hi = bar.band(which)
            ax.errorbar(value, y, xerr=[[value - b_lo], [b_hi - value]], fmt="none", ecolor="#333", capsize=3, lw=0.8)
            right = value >= base_ratio
            ax.annotate(
                f"{value:.2f}" + ("" if fits else " *"),  # * as the table: a plan does not fit there
                (b_hi if right else b_lo, y),
                xytext=(3 if right else -3, 0),
                textcoords="offset points",
                ha="left" if right else "right",
                va="center",
                fontsize=8,
            )
    ax.set_yticks(ys, [SHORT_NAME.get(b.variable, b.variable) for b in bars])
    ax.axvline(base_ratio, color="black", lw=1)
    if bars:  # the baseline ratio's 80% interval
        b_lo, b_hi = bars[0].band("base")
        ax.axvspan(b_lo, b_hi, color="gray", alpha=0.15, lw=0)
    ax.axvline(1.0, color="gray", ls="--", lw=1)
    ax.set_xscale("log", base=2)
    lo = min([base_ratio, *(min(b.band("low")[0], b.band("high")[0]) for b in bars)])
    hi = max([base_ratio, *(max(b.band("low")[1], b.band("high")[1]) for b in bars)])
    ax.set_xlim(lo / 1.25, hi * 1.25)  # room for the labels outside the whiskers
    ticks = [t for t in (0.25, 0.33, 0.5, 0.67, 0.8, 1, 1.25, 1.5, 2, 3, 4, 6, 8) if lo / 1.3 <= t <= hi * 1.3]
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel(f"time({plans[0]}) / time({plans[1]})   (< 1: {plans[0]} faster; dashed: equal)")
    from matplotlib.patches import Patch

    handles = [
        Patch(color="#6baed6", label=f"input / {factor:g}"),
        Patch(color="#fd8d3c", label=f"input x {factor:g}"),
        Patch(color="gray", alpha=0.3, label="baseline's 80% interval (whiskers: each end's)"),
    ]
    if not all(b.fits_low and b.fits_high for b in bars):
        handles.insert(2, Patch(color="none", label="* a plan does not fit in GPU memory there (times only)"))
    ax.legend(
        handles=handles,
        fontsize=8,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.7 / (0.8 * (0.55 * len(bars) + 1.8))),  # below the axis label
        ncol=3 if len(handles) == 3 else 2,
        frameon=False,
    )
    ax.set_title(f"{title}\nbaseline ratio {base_ratio:.2f} (black line)", fontsize=11, loc="left")
    ax.grid(True, axis="x", which="both", alpha=0.25)
    return fig
