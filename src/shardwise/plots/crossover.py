"""Time against one variable, crossings numbered; physical and textbook side by side."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from matplotlib.figure import Figure

from shardwise.plots._base import DISPLAY_SCALE, LINK_STYLES, axis_values, plan_colors, plt, set_x

if TYPE_CHECKING:
    from shardwise.analyses.crossover import CrossoverResult


def crossover_figure(
    result: CrossoverResult,
    title: str,
    subtitle: str = "",
    ylabel: str = "time (s)",
    markers: tuple[tuple[str, float], ...] = (),
) -> Figure:
    """Time of each plan against the swept variable, one line style per link, crossings marked;
    `markers`: labelled vertical reference lines (label, x in the axis's units)."""
    fig, ax = plt.subplots(figsize=(9, 5.6))
    x = axis_values(result.variable, result.values)
    plans = list(dict.fromkeys(s.plan for s in result.series))
    links = list(dict.fromkeys(s.link for s in result.series))
    colors = plan_colors(plans)
    for s in result.series:
        color = colors[plans.index(s.plan)]
        style = LINK_STYLES[links.index(s.link) % len(LINK_STYLES)]
        ax.plot(x, s.time_s, style, color=color, lw=2, label=f"{s.plan}, {s.link}")
        low, high = result.band(s)
        ax.fill_between(x, low, high, color=color, alpha=0.12, lw=0)
        bad = ~s.fits & ~np.isnan(s.time_s)
        if bad.any():
            ax.plot(x[bad], s.time_s[bad], "x", color=color, ms=7, mew=1.5)
    if any((~s.fits & ~np.isnan(s.time_s)).any() for s in result.series):
        ax.plot([], [], "x", color="gray", label="does not fit in GPU memory")
    ax.fill_between(
        [],
        [],
        [],
        color="gray",
        alpha=0.2,
        label=f"shaded around each line: its 80% interval ({result.experiment.spread_basis})",
    )
    notes = _mark_crossings(ax, result)
    if _has_tie_zone(result):
        ax.axvspan(np.nan, np.nan, color=TIE_COLOR, alpha=TIE_ALPHA, lw=0, label=TIE_LABEL)
    for label, at in markers:
        ax.axvline(at, color="gray", ls=":", lw=1)
        ax.annotate(
            label,
            (at, 0.55),
            xycoords=("data", "axes fraction"),
            xytext=(3, 0),
            textcoords="offset points",
            rotation=90,
            va="center",
            fontsize=8,
            color="#555555",
        )
    set_x(ax, result.variable, x)
    positive = np.concatenate([s.time_s[np.isfinite(s.time_s)] for s in result.series])
    if positive.size and positive.max() / max(positive.min(), 1e-300) > 20:
        ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.25)
    # the legend under the axes, the notes under it: inside the axes, "best" still covered curves
    # (six entries, two of them long)
    legend = ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, fontsize=9, frameon=False)
    ax.set_title(title, fontsize=12, loc="left")
    text = "\n".join([*notes, *([subtitle] if subtitle else [])])
    if text:
        box = legend.get_window_extent(fig.canvas.get_renderer()).transformed(fig.transFigure.inverted())
        fig.text(0.01, box.y0 - 0.01, text, fontsize=8.5, color="#333333", va="top", wrap=True)
    return fig


# the span around a change of the fastest plan where the two plans' 80% intervals overlap
TIE_COLOR, TIE_ALPHA = "#999999", 0.12
TIE_LABEL = "tie zone: the two plans' 80% intervals overlap"


def _has_tie_zone(result: CrossoverResult) -> bool:
    return any(c.winner_change and c.range_high > c.range_low for c in result.crossings)


def _mark_crossings(ax: Any, result: CrossoverResult) -> list[str]:
    """Number each change of the fastest plan on the axes; return the numbered descriptions
    (drawn under the plot, so labels never cover the curves)."""
    from shardwise.analyses.crossover import describe_crossing

    lines = []
    changes = [c for c in result.crossings if c.winner_change]
    for k, c in enumerate(changes, start=1):
        xs = c.at * DISPLAY_SCALE.get(result.variable, 1.0)
        if c.range_high > c.range_low:  # the span where the two bands overlap: a tie at this confidence
            scale = DISPLAY_SCALE.get(result.variable, 1.0)
            ax.axvspan(c.range_low * scale, c.range_high * scale, color=TIE_COLOR, alpha=TIE_ALPHA, lw=0, zorder=0)
        ax.plot([xs], [c.time_s], marker="o", ms=15, color="white", mec="black", mew=1.4, zorder=5)
        ax.annotate(str(k), (xs, c.time_s), ha="center", va="center", fontsize=8, fontweight="bold", zorder=6)
        lines.append(f"({k}) {describe_crossing(c, result.variable)}")
    if not changes:
        ax.text(
            0.02,
            0.03,
            "no crossover in this range",
            transform=ax.transAxes,
            va="bottom",
            fontsize=10,
            bbox={"boxstyle": "round", "fc": "#f0f0f0", "ec": "#999999"},
        )
    return lines


def side_by_side(figures: Sequence[tuple[str, CrossoverResult, str, str | None]], suptitle: str) -> Figure:
    """Several crossover results in one row of panels (e.g. physical vs textbook model); each
    entry is (title, result, y label, x label or None for the variable's own)."""
    fig, axes = plt.subplots(1, len(figures), figsize=(7.5 * len(figures), 5.4), squeeze=False)
    for ax, (title, result, ylabel, xlabel) in zip(axes[0], figures, strict=True):
        x = axis_values(result.variable, result.values)
        plans = list(dict.fromkeys(s.plan for s in result.series))
        links = list(dict.fromkeys(s.link for s in result.series))
        colors = plan_colors(plans)
        for s in result.series:
            ax.plot(
                x,
                s.time_s,
                LINK_STYLES[links.index(s.link) % 4],
                lw=2,
                color=colors[plans.index(s.plan)],
                label=f"{s.plan}, {s.link}",
            )
        notes = _mark_crossings(ax, result)
        if notes:
            ax.text(0.0, -0.16, "\n".join(notes), transform=ax.transAxes, fontsize=8, va="top")
        set_x(ax, result.variable, x)
        if xlabel:
            ax.set_xlabel(xlabel)
        ax.set_yscale("log")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=11, loc="left")
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=8, loc="best")
    fig.suptitle(suptitle, fontsize=12, x=0.01, ha="left")
    fig.tight_layout()
    return fig
