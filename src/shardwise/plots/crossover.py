"""Time against one variable, crossings numbered; physical and textbook side by side."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from matplotlib.figure import Figure

from shardwise.plots._base import (
    DISPLAY_SCALE,
    LINK_STYLES,
    VARIABLES,
    axis_values,
    label_log_y,
    plan_colors,
    plt,
    set_x,
)

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
        color=BAND_SWATCH,
        alpha=0.35,
        lw=0,
        label=f"band in each line's colour: its 80% interval ({result.experiment.spread_basis})",
    )
    positive = np.concatenate([s.time_s[np.isfinite(s.time_s)] for s in result.series])
    log_y = bool(positive.size and positive.max() / max(positive.min(), 1e-300) > 20)
    notes = _mark_crossings(ax, result, log_y)
    if _has_tie_zone(result):
        _tie_span(ax, np.nan, np.nan, label=TIE_LABEL)
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
    if log_y:
        ax.set_yscale("log")
        label_log_y(ax, *ax.get_ylim())
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


# the span around a change of the fastest plan where the two plans' 80% intervals overlap: hatched,
# so that it is not read as the grey swatch of the bands around the lines (drawn in the lines' colours)
TIE_COLOR, TIE_ALPHA, TIE_HATCH = "#999999", 0.06, "//"
TIE_LABEL = "tie zone (hatched): where the two plans' 80% intervals overlap"
BAND_SWATCH = "#7f7f7f"


def _tie_span(ax: Any, low: float, high: float, label: str | None = None) -> None:
    ax.axvspan(low, high, facecolor=(*_rgb(TIE_COLOR), TIE_ALPHA), edgecolor="#c4c4c4", hatch=TIE_HATCH, lw=0,
               zorder=0, label=label)  # fmt: skip


def _rgb(color: str) -> tuple[float, float, float]:
    from matplotlib.colors import to_rgb

    return to_rgb(color)


def crossing_point(
    x: np.ndarray, ya: np.ndarray, yb: np.ndarray, at: float, log_x: bool, log_y: bool
) -> tuple[float, float] | None:
    """Where the two drawn lines (straight between the points of `x`, on the axes' scales) cross
    in the segment that holds `at` (or the nearest segment where they swap order); None where
    they do not. A crossing of an integer variable is reported at the first value where the other
    plan wins (`Crossing.at`); the marker goes where the lines meet, between the two values."""
    fx = np.log(x) if log_x else np.asarray(x, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        fa, fb = (np.log(ya), np.log(yb)) if log_y else (np.asarray(ya, float), np.asarray(yb, float))
    d = fa - fb
    swaps = [k for k in range(len(x) - 1) if np.isfinite(d[k] + d[k + 1]) and d[k] * d[k + 1] <= 0 and d[k] != d[k + 1]]
    if not swaps:
        return None
    k = min(swaps, key=lambda k: 0.0 if x[k] < at <= x[k + 1] else min(abs(x[k] - at), abs(x[k + 1] - at)))
    t = d[k] / (d[k] - d[k + 1])
    px, py = fx[k] + t * (fx[k + 1] - fx[k]), fa[k] + t * (fa[k + 1] - fa[k])
    return float(np.exp(px) if log_x else px), float(np.exp(py) if log_y else py)


def _has_tie_zone(result: CrossoverResult) -> bool:
    return any(c.winner_change and c.range_high > c.range_low for c in result.crossings)


def _mark_crossings(ax: Any, result: CrossoverResult, log_y: bool) -> list[str]:
    """Number each change of the fastest plan on the axes, where its two lines cross as drawn
    (`crossing_point`); return the numbered descriptions (drawn under the plot, so labels never
    cover the curves)."""
    from shardwise.analyses.crossover import describe_crossing

    lines = []
    changes = [c for c in result.crossings if c.winner_change]
    scale = DISPLAY_SCALE.get(result.variable, 1.0)
    x = axis_values(result.variable, result.values)
    log_x = VARIABLES[result.variable].log and bool(np.nanmin(x) > 0)
    drawn = {(s.link, s.plan): s.time_s for s in result.series}
    for k, c in enumerate(changes, start=1):
        xs, ys = c.at * scale, c.time_s
        pair = drawn.get((c.link, c.before)), drawn.get((c.link, c.after))
        met = None if pair[0] is None or pair[1] is None else crossing_point(x, *pair, c.at * scale, log_x, log_y)
        if met is not None:
            xs, ys = met
        if c.range_high > c.range_low:  # the span where the two bands overlap: a tie at this confidence
            _tie_span(ax, c.range_low * scale, c.range_high * scale)
        ax.plot([xs], [ys], marker="o", ms=15, color="white", mec="black", mew=1.4, zorder=5)
        ax.annotate(str(k), (xs, ys), ha="center", va="center", fontsize=8, fontweight="bold", zorder=6)
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
        notes = _mark_crossings(ax, result, True)
        if notes:
            ax.text(0.0, -0.16, "\n".join(notes), transform=ax.transAxes, fontsize=8, va="top")
        set_x(ax, result.variable, x)
        if xlabel:
            ax.set_xlabel(xlabel)
        ax.set_yscale("log")
        label_log_y(ax, *ax.get_ylim())
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=11, loc="left")
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=8, loc="best")
    fig.suptitle(suptitle, fontsize=12, x=0.01, ha="left")
    fig.tight_layout()
    return fig
