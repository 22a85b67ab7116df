"""Time against one variable, crossings numbered; physical and textbook side by side."""

from __future__ import annotations

import textwrap
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
    log_y: bool | None = None,
) -> Figure:
    """Time of each plan against the swept variable, one line style per link, crossings marked;
    `markers`: labelled vertical reference lines (label, x in the axis's units); `log_y`: a log
    time axis (None: where the times span more than 20x)."""
    fig, ax = plt.subplots(figsize=(9, 5.6))
    x = axis_values(result.variable, result.values)
    plans = list(dict.fromkeys(s.plan for s in result.series))
    links = list(dict.fromkeys(s.link for s in result.series))
    colors = plan_colors(plans)
    banded = has_bands(result)
    for s in result.series:
        color = colors[plans.index(s.plan)]
        style = LINK_STYLES[links.index(s.link) % len(LINK_STYLES)]
        ax.plot(x, s.time_s, style, color=color, lw=2, label=f"{s.plan}, {s.link}")
        if banded:
            low, high = result.band(s)
            ax.fill_between(x, low, high, color=color, alpha=0.12, lw=0)
        bad = ~s.fits & ~np.isnan(s.time_s)
        if bad.any():
            ax.plot(x[bad], s.time_s[bad], "x", color=color, ms=7, mew=1.5)
    if any((~s.fits & ~np.isnan(s.time_s)).any() for s in result.series):
        ax.plot([], [], "x", color="gray", label="does not fit in GPU memory")
    if banded:
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
    if log_y is None:
        log_y = bool(positive.size and positive.max() / max(positive.min(), 1e-300) > 20)
    set_x(ax, result.variable, x)
    ax.set_xlabel(x_label(result))
    if log_y:
        ax.set_yscale("log")
    notes = _mark_crossings(ax, result, log_y)
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
    if log_y:
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


def has_bands(result: CrossoverResult) -> bool:
    """The physical model's lines carry its 80% interval; the brief's formulas, taken as given,
    have no spread measured on public runs (review 36: they were drawn with the physical model's)."""
    return result.experiment.cost_model != "textbook"


def x_label(result: CrossoverResult) -> str:
    """The swept variable's axis label; the textbook model's batch is the brief's rows of X
    (tokens), not sequences (as its caption and the command's table say)."""
    if result.experiment.cost_model == "textbook" and result.variable == "batch":
        return "batch (the brief's rows of X: tokens)"
    return str(VARIABLES[result.variable].label)


# the span around a change of the fastest plan where the 80% interval of the two plans' time ratio holds 1
# (`analyses.crossover_tie`, review 51 #3): hatched,
# so that it is not read as the grey swatch of the bands around the lines (drawn in the lines' colours);
# one hatch per link (review 36: two links' zones looked alike and the legend named neither)
TIE_COLOR, TIE_ALPHA, TIE_HATCHES = "#999999", 0.06, ("//", "\\\\", "xx", "..")
TIE_HATCH = TIE_HATCHES[0]
BAND_SWATCH = "#7f7f7f"
LIMIT_COLOR = "#555555"


def tie_label(link: str, hatch: str) -> str:
    return f"tie zone on {link} (hatched {hatch}): where the 80% interval of the two plans' time ratio holds 1"


def _tie_span(ax: Any, low: float, high: float, label: str | None = None, hatch: str = TIE_HATCH) -> None:
    ax.axvspan(low, high, facecolor=(*_rgb(TIE_COLOR), TIE_ALPHA), edgecolor="#c4c4c4", hatch=hatch, lw=0,
               zorder=0, label=label)  # fmt: skip


def _rgb(color: str) -> tuple[float, float, float]:
    from matplotlib.colors import to_rgb

    return to_rgb(color)


def crossing_point(
    x: np.ndarray, ya: np.ndarray, yb: np.ndarray, at: float, log_x: bool, log_y: bool
) -> tuple[float, float] | None:
    """Where the two drawn lines (straight between the points of `x`, on the axes' scales) cross
    in the segment that holds `at` or a neighbour of it (the dense grid's switch can sit one drawn
    segment off); None where they do not (review 36: a switch at 162 took the lines' crossing at
    45, another switch's, and the two markers were drawn on one spot). A crossing of an integer
    variable is reported at the first value where the other plan wins (`Crossing.at`); the marker
    goes where the lines meet, between the two values."""
    fx = np.log(x) if log_x else np.asarray(x, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        fa, fb = (np.log(ya), np.log(yb)) if log_y else (np.asarray(ya, float), np.asarray(yb, float))
    d = fa - fb
    holds = int(np.clip(np.searchsorted(x, at) - 1, 0, max(len(x) - 2, 0)))
    swaps = [
        k
        for k in range(len(x) - 1)
        if abs(k - holds) <= 1 and np.isfinite(d[k] + d[k + 1]) and d[k] * d[k + 1] <= 0 and d[k] != d[k + 1]
    ]
    if not swaps:
        return None
    k = min(swaps, key=lambda k: abs(k - holds))
    t = d[k] / (d[k] - d[k + 1])
    px, py = fx[k] + t * (fx[k + 1] - fx[k]), fa[k] + t * (fa[k + 1] - fa[k])
    return float(np.exp(px) if log_x else px), float(np.exp(py) if log_y else py)


MARKER_PT = 16.0  # a numbered marker's diameter (points): closer centres are set apart


def _numbered(ax: Any, k: int, xy: tuple[float, float], transform: Any, placed: list[np.ndarray]) -> Any:
    """Marker `k` at `xy` (in `transform`'s coordinates); where an earlier marker sits closer than
    its diameter, this one is lifted above it with a leader line to its point (review 36: the
    decode crossover drew (1) and (2) on one spot)."""
    fig = ax.figure
    at = np.asarray(transform.transform(xy), dtype=float)
    px = MARKER_PT * fig.dpi / 72.0
    lift = 0.0
    while any(np.hypot(*(at + np.array([0.0, lift]) - p)) < px for p in placed):
        lift += px * 1.3
    placed.append(at + np.array([0.0, lift]))
    return ax.annotate(
        str(k),
        xy,
        xycoords=transform,
        xytext=(0.0, lift * 72.0 / fig.dpi),
        textcoords="offset points",
        ha="center",
        va="center",
        fontsize=8,
        fontweight="bold",
        zorder=6,
        bbox={"boxstyle": "circle,pad=0.35", "fc": "white", "ec": "black", "lw": 1.4},
        arrowprops={"arrowstyle": "-", "color": "black", "lw": 0.8} if lift else None,
        gid=f"crossing {k}",
    )


def _mark_crossings(ax: Any, result: CrossoverResult, log_y: bool) -> list[str]:
    """Number each change of the fastest plan on the axes (scaled already): where its two lines
    cross as drawn (`crossing_point`), or, where the change is a memory limit (`memory_limit`: the
    faster plan stops fitting), a vertical line at the limit with its number at the top; each
    link's tie zone hatched its own way and named in the legend. Return the numbered descriptions
    (drawn under the plot, so labels never cover the curves)."""
    from matplotlib.transforms import blended_transform_factory

    from shardwise.analyses.crossover import describe_crossing
    from shardwise.analyses.crossover_limits import memory_limit
    from shardwise.analyses.experiment import DISPLAY_UNIT, SHORT_NAME

    lines = []
    changes = [c for c in result.crossings if c.winner_change]
    scale = DISPLAY_SCALE.get(result.variable, 1.0)
    x = axis_values(result.variable, result.values)
    log_x = VARIABLES[result.variable].log and bool(np.nanmin(x) > 0)
    drawn = {(s.link, s.plan): s.time_s for s in result.series}
    links = list(dict.fromkeys(s.link for s in result.series))
    ax.get_xlim(), ax.get_ylim()  # settle the view, so that transData maps as drawn
    top = blended_transform_factory(ax.transData, ax.transAxes)
    placed: list[np.ndarray] = []
    tie_named: set[str] = set()
    limits = False
    for k, c in enumerate(changes, start=1):
        text = describe_crossing(c, result.variable)
        if c.range_high > c.range_low:  # the span where their ratio's interval holds 1: a tie at this confidence
            hatch = TIE_HATCHES[links.index(c.link) % len(TIE_HATCHES)] if c.link in links else TIE_HATCH
            label = None if c.link in tie_named else tie_label(c.link, hatch)
            tie_named.add(c.link)
            _tie_span(ax, c.range_low * scale, c.range_high * scale, label=label, hatch=hatch)
        limit = memory_limit(result, c)
        if limit is not None:  # a limit, not a crossing: a vertical line, the number at its top
            limits = True
            ax.axvline(c.at * scale, color=LIMIT_COLOR, ls=LIMIT_STYLE, lw=1.3, zorder=4, gid=f"memory limit {k}")
            _numbered(ax, k, (c.at * scale, 0.93), top, placed)
            v = result.variable
            why = limit.describe(SHORT_NAME[v], scale, DISPLAY_UNIT.get(v, ""))
            lines.append(f"({k}) {text}: a memory limit, not a crossing: {why}")
            continue
        xs, ys = c.at * scale, c.time_s
        pair = drawn.get((c.link, c.before)), drawn.get((c.link, c.after))
        met = None if pair[0] is None or pair[1] is None else crossing_point(x, *pair, c.at * scale, log_x, log_y)
        cross = ""
        if met is not None:
            xs, ys = met
            if VARIABLES[result.variable].integer and abs(xs - c.at * scale) >= 0.05:  # review 51 #11: both numbers
                cross = f"; the drawn lines cross at {SHORT_NAME[result.variable]} ~{xs:.3g} (the marker)"
        _numbered(ax, k, (xs, ys), ax.transData, placed)
        lines.append(f"({k}) {text}{cross}")
    if limits:
        ax.plot([], [], color=LIMIT_COLOR, ls=LIMIT_STYLE, lw=1.3, label=LIMIT_LABEL)
    if not changes:  # said under the axes: a box on them hid the start of a line (review 36)
        lines.append("no crossover in this range")
    return lines


LIMIT_STYLE = (0, (6, 2, 1, 2))  # dash-dot
LIMIT_LABEL = "memory limit (numbered line): the faster plan stops fitting in GPU memory, no crossing"


def side_by_side(
    figures: Sequence[tuple[str, CrossoverResult, str, str | None]], suptitle: str, captions: Sequence[str] = ()
) -> Figure:
    """Several crossover results in one row of panels (e.g. physical vs textbook model); each
    entry is (title, result, y label, x label or None for the result's own, `x_label`); `captions`:
    one per panel, under its crossings. A physical model's lines carry their 80% band, the
    brief's formulas none (`has_bands`)."""
    fig, axes = plt.subplots(1, len(figures), figsize=(7.5 * len(figures), 5.4), squeeze=False)
    panels = []
    for j, (ax, (title, result, ylabel, xlabel)) in enumerate(zip(axes[0], figures, strict=True)):
        x = axis_values(result.variable, result.values)
        plans = list(dict.fromkeys(s.plan for s in result.series))
        links = list(dict.fromkeys(s.link for s in result.series))
        colors = plan_colors(plans)
        for s in result.series:
            color = colors[plans.index(s.plan)]
            ax.plot(x, s.time_s, LINK_STYLES[links.index(s.link) % 4], lw=2, color=color, label=f"{s.plan}, {s.link}")
            if has_bands(result):
                low, high = result.band(s)
                ax.fill_between(x, low, high, color=color, alpha=0.12, lw=0)
        if has_bands(result):
            ax.fill_between(
                [],
                [],
                [],
                color=BAND_SWATCH,
                alpha=0.35,
                lw=0,
                label=f"band: its 80% interval ({result.experiment.spread_basis})",
            )
        set_x(ax, result.variable, x)
        ax.set_xlabel(xlabel or x_label(result))
        ax.set_yscale("log")
        notes = _mark_crossings(ax, result, True)
        if j < len(captions) and captions[j]:
            notes.append(textwrap.fill(captions[j], 110))
        label_log_y(ax, *ax.get_ylim())
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=11, loc="left")
        ax.grid(True, which="both", alpha=0.25)
        panels.append((ax, notes))
    fig.suptitle(suptitle, fontsize=12, x=0.01, ha="left")
    fig.tight_layout()
    for ax, notes in panels:  # the legend under each panel (inside, it covered lines), the notes under it
        legend = ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, frameon=False)
        if notes:
            box = legend.get_window_extent(fig.canvas.get_renderer()).transformed(ax.transAxes.inverted())
            ax.text(0.0, box.y0 - 0.02, "\n".join(notes), transform=ax.transAxes, fontsize=8, va="top", color="#333333")
    return fig
