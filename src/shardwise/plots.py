"""Figures (matplotlib, Agg). The only module that imports matplotlib; imported only when a
figure is asked for. Every figure has units on its axes, a legend, and annotations that say
what the reader is looking at; files are written atomically (PNG or SVG by extension)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from shardwise.analyses.experiment import DISPLAY_SCALE, VARIABLES
from shardwise.errors import SpecError

if TYPE_CHECKING:
    from shardwise.analyses.crossover import CrossoverResult

FORMATS = (".png", ".svg", ".pdf")
PLAN_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
LINK_STYLES = ["-", "--", ":", "-."]


def save(fig: Figure, path: str | Path) -> Path:
    """Write `fig` to `path` atomically (a temp file renamed into place); PNG at 150 dpi."""
    p = Path(path)
    if p.suffix.lower() not in FORMATS:
        raise SpecError(f"{p}: unknown figure format {p.suffix!r}; use one of {', '.join(FORMATS)}")
    if p.parent and not p.parent.exists():
        raise SpecError(f"{p}: directory {p.parent} does not exist")
    fd, tmp = tempfile.mkstemp(suffix=p.suffix, dir=p.parent if str(p.parent) else ".")
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=150, bbox_inches="tight")
        os.replace(tmp, p)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
        plt.close(fig)
    return p


def axis_values(variable: str, values: np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=float) * DISPLAY_SCALE.get(variable, 1.0)


def _set_x(ax: Any, variable: str, values: np.ndarray) -> None:
    spec = VARIABLES[variable]
    ax.set_xlabel(spec.label)
    if spec.log and np.nanmin(values) > 0:
        base = 2 if spec.integer else 10
        ax.set_xscale("log", base=base)
        if spec.integer:
            ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))


def crossover_figure(result: CrossoverResult, title: str, subtitle: str = "", ylabel: str = "time (s)") -> Figure:
    """Time of each plan against the swept variable, one line style per link, crossings marked."""
    fig, ax = plt.subplots(figsize=(9, 5.6))
    x = axis_values(result.variable, result.values)
    plans = list(dict.fromkeys(s.plan for s in result.series))
    links = list(dict.fromkeys(s.link for s in result.series))
    for s in result.series:
        color = PLAN_COLORS[plans.index(s.plan) % len(PLAN_COLORS)]
        style = LINK_STYLES[links.index(s.link) % len(LINK_STYLES)]
        ax.plot(x, s.time_s, style, color=color, lw=2, label=f"{s.plan}, {s.link}")
        bad = ~s.fits & ~np.isnan(s.time_s)
        if bad.any():
            ax.plot(x[bad], s.time_s[bad], "x", color=color, ms=7, mew=1.5)
    if any((~s.fits & ~np.isnan(s.time_s)).any() for s in result.series):
        ax.plot([], [], "x", color="gray", label="does not fit in GPU memory")
    notes = _mark_crossings(ax, result)
    _set_x(ax, result.variable, x)
    positive = np.concatenate([s.time_s[np.isfinite(s.time_s)] for s in result.series])
    if positive.size and positive.max() / max(positive.min(), 1e-300) > 20:
        ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(loc="best", fontsize=9, framealpha=0.9)
    ax.set_title(title, fontsize=12, loc="left")
    text = "\n".join([*notes, *([subtitle] if subtitle else [])])
    if text:
        fig.text(0.01, -0.01, text, fontsize=8.5, color="#333333", va="top", wrap=True)
    return fig


def _mark_crossings(ax: Any, result: CrossoverResult) -> list[str]:
    """Number each change of the fastest plan on the axes; return the numbered descriptions
    (drawn under the plot, so labels never cover the curves)."""
    from shardwise.analyses.crossover import describe_crossing
    from shardwise.analyses.experiment import times_s

    exp = result.experiment
    links = {link.label: link for link in exp.links}
    plans = {p.label: p for p in exp.plans}
    lines = []
    changes = [c for c in result.crossings if c.winner_change]
    for k, c in enumerate(changes, start=1):
        t_at, _ = times_s(exp, plans[c.after], links[c.link].link, result.variable, np.array([c.at]))
        xs = c.at * DISPLAY_SCALE.get(result.variable, 1.0)
        ax.plot([xs], [t_at[0]], marker="o", ms=15, color="white", mec="black", mew=1.4, zorder=5)
        ax.annotate(str(k), (xs, t_at[0]), ha="center", va="center", fontsize=8, fontweight="bold", zorder=6)
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
        for s in result.series:
            ax.plot(
                x,
                s.time_s,
                LINK_STYLES[links.index(s.link) % 4],
                lw=2,
                color=PLAN_COLORS[plans.index(s.plan) % len(PLAN_COLORS)],
                label=f"{s.plan}, {s.link}",
            )
        notes = _mark_crossings(ax, result)
        if notes:
            ax.text(0.0, -0.16, "\n".join(notes), transform=ax.transAxes, fontsize=8, va="top")
        _set_x(ax, result.variable, x)
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


def _edges(values: np.ndarray, log: bool) -> np.ndarray:
    """Cell edges around grid values (geometric midpoints on a log axis)."""
    v = np.asarray(values, dtype=float)
    if len(v) == 1:
        return np.array([v[0] * 0.9, v[0] * 1.1]) if log else np.array([v[0] - 0.5, v[0] + 0.5])
    if log:
        mids = np.sqrt(v[:-1] * v[1:])
        return np.concatenate([[v[0] ** 2 / mids[0]], mids, [v[-1] ** 2 / mids[-1]]])
    mids = 0.5 * (v[:-1] + v[1:])
    return np.concatenate([[2 * v[0] - mids[0]], mids, [2 * v[-1] - mids[-1]]])


def winner_map(result: Any, full_margin: float = 2.0) -> Figure:
    """For a two-variable sweep: the fastest plan in each cell, shaded by how much faster it is
    than the runner-up, with the boundary where the winner changes; one panel per link."""
    from matplotlib.colors import to_rgb
    from matplotlib.patches import Patch

    xname, yname = result.variables
    x = axis_values(xname, result.axes[0])
    y = axis_values(yname, result.axes[1])
    xlog = VARIABLES[xname].log and x.min() > 0
    ylog = VARIABLES[yname].log and y.min() > 0
    n = len(result.links)
    fig, axes = plt.subplots(1, n, figsize=(6.4 * n, 5.2), squeeze=False)
    colors = [np.array(to_rgb(PLAN_COLORS[i % len(PLAN_COLORS)])) for i in range(len(result.plans))]
    for ax, link in zip(axes[0], result.links, strict=True):
        w = result.winner(link)  # (nx, ny)
        strength = np.clip(np.log(result.margin(link)) / np.log(full_margin), 0, 1)
        rgb = np.ones((*w.shape, 3)) * 0.85
        for i, c in enumerate(colors):
            mask = w == i
            s = (0.25 + 0.75 * strength[mask])[:, None]
            rgb[mask] = 1 - s * (1 - c)
        ax.pcolormesh(_edges(x, xlog), _edges(y, ylog), np.transpose(rgb, (1, 0, 2)), shading="flat")
        if len(result.plans) > 1 and len(x) > 1 and len(y) > 1:
            levels = np.arange(len(result.plans) - 1) + 0.5
            ax.contour(x, y, w.T.astype(float), levels=levels, colors="black", linewidths=1.8)
        for name, values, axis in ((xname, x, "x"), (yname, y, "y")):
            if VARIABLES[name].log and values.min() > 0:
                base = 2 if VARIABLES[name].integer else 10
                getattr(ax, f"set_{axis}scale")("log", base=base)
                if VARIABLES[name].integer:
                    getattr(ax, f"{axis}axis").set_major_formatter(
                        matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
                    )
        ax.set_xlabel(VARIABLES[xname].label)
        ax.set_ylabel(VARIABLES[yname].label)
        link_spec = next(lk for lk in result.experiment.links if lk.label == link)
        ax.set_title(
            f"{link}: {link_spec.link.name}, latency {link_spec.link.latency_s * 1e6:g} µs per step",
            fontsize=10,
            loc="left",
        )
        for name, axis_set in ((xname, ax.axvline), (yname, ax.axhline)):
            if name == "bandwidth":
                bw = link_spec.link.bandwidth_bytes_per_s * DISPLAY_SCALE["bandwidth"]
                axis_set(bw, color="white", ls="--", lw=1.2)
    handles = [Patch(color=PLAN_COLORS[i % len(PLAN_COLORS)], label=f"{p} fastest") for i, p in enumerate(result.plans)]
    handles.append(Patch(facecolor=(0.85, 0.85, 0.85), label="no valid plan"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), frameon=False, bbox_to_anchor=(0.5, -0.02))
    fig.suptitle(
        f"fastest plan per cell (black line: where the winner changes; pale = within a few %, "
        f"full colour = {full_margin:g}x faster or more; dashed: the link's own bandwidth)",
        fontsize=10,
        x=0.01,
        ha="left",
    )
    fig.tight_layout(rect=(0, 0.05, 1, 0.95))
    return fig


def crossover_curves(curves: Sequence[Any], plans: Sequence[str], max_batch: int, title: str) -> Figure:
    """Crossover batch against a variable, one line per link; 'no crossover' drawn at the top."""
    fig, ax = plt.subplots(figsize=(8, 5))
    variable = curves[0].variable
    for k, c in enumerate(curves):
        x = axis_values(variable, c.values)
        y = np.asarray(c.crossover_batch, dtype=float)
        style = LINK_STYLES[k % len(LINK_STYLES)]
        ax.plot(x, y, style, marker="o", lw=2, color=PLAN_COLORS[k % len(PLAN_COLORS)], label=f"{c.link}")
        none = np.isnan(y)
        if none.any():
            ax.plot(
                x[none], np.full(none.sum(), max_batch), "^", ms=9, color=PLAN_COLORS[k % len(PLAN_COLORS)], mfc="none"
            )
    _set_x(ax, variable, axis_values(variable, curves[0].values))
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_ylabel(f"crossover batch (sequences; triangle: none up to {max_batch})")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(title="link", fontsize=9)
    ax.set_title(title, fontsize=11, loc="left")
    notes = [
        f"below a line the plan that wins at batch 1 is faster, above it the other one; "
        f"triangles: no crossover up to batch {max_batch}:"
    ]
    for c in curves:
        none = [
            f"{v:g} ({w})"
            for v, b, w in zip(axis_values(variable, c.values), c.crossover_batch, c.winner_at_batch_1, strict=True)
            if b != b
        ]
        if none:
            notes.append(f"  {c.link}: at {variable} " + ", ".join(none) + " the plan in brackets wins throughout")
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
        for value in (lo, hi):
            ax.annotate(
                f"{value:.2f}",
                (value, y),
                xytext=(3 if value >= base_ratio else -3, 0),
                textcoords="offset points",
                ha="left" if value >= base_ratio else "right",
                va="center",
                fontsize=8,
            )
    ax.set_yticks(ys, [SHORT_NAME.get(b.variable, b.variable) for b in bars])
    ax.axvline(base_ratio, color="black", lw=1)
    ax.axvline(1.0, color="gray", ls="--", lw=1)
    ax.set_xscale("log", base=2)
    lo = min([base_ratio, *(min(b.ratio_low, b.ratio_high) for b in bars)])
    hi = max([base_ratio, *(max(b.ratio_low, b.ratio_high) for b in bars)])
    ticks = [t for t in (0.25, 0.33, 0.5, 0.67, 0.8, 1, 1.25, 1.5, 2, 3, 4, 6, 8) if lo / 1.3 <= t <= hi * 1.3]
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel(f"time({plans[0]}) / time({plans[1]})   (< 1: {plans[0]} faster; dashed: equal)")
    from matplotlib.patches import Patch

    ax.legend(
        handles=[
            Patch(color="#6baed6", label=f"input / {factor:g}"),
            Patch(color="#fd8d3c", label=f"input x {factor:g}"),
        ],
        fontsize=8,
        loc="lower right",
    )
    ax.set_title(f"{title}\nbaseline ratio {base_ratio:.2f} (black line)", fontsize=11, loc="left")
    ax.grid(True, axis="x", which="both", alpha=0.25)
    return fig


def lines(
    x: np.ndarray,
    series: dict[str, np.ndarray],
    xlabel: str,
    ylabel: str,
    title: str,
    *,
    logx: bool = False,
    logy: bool = False,
    marks: dict[str, float] | None = None,
    hline: tuple[float, str] | None = None,
    note: str = "",
) -> Figure:
    """A small line chart: one line per series, optional vertical marks and a horizontal limit."""
    fig, ax = plt.subplots(figsize=(8, 5))
    for k, (label, y) in enumerate(series.items()):
        style = "--" if "PCIe" in label or "rebalanced" in label else "-"
        ax.plot(x, y, style, marker="o", ms=3.5, lw=2, color=PLAN_COLORS[k % len(PLAN_COLORS)], label=label)
    for label, value in (marks or {}).items():
        ax.axvline(value, color="gray", ls=":", lw=1.2)
        ax.annotate(
            label,
            (value, 1),
            xycoords=("data", "axes fraction"),
            xytext=(3, -12),
            textcoords="offset points",
            fontsize=8,
            color="#444444",
            rotation=90,
            va="top",
        )
    if hline is not None:
        ax.axhline(hline[0], color="black", ls="--", lw=1)
        ax.annotate(
            hline[1],
            (0, hline[0]),
            xycoords=("axes fraction", "data"),
            xytext=(4, 4),
            textcoords="offset points",
            fontsize=8,
        )
    if logx:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=9)
    ax.set_title(title, fontsize=11, loc="left")
    if note:
        fig.text(0.01, -0.02, note, fontsize=8, color="#444444", va="top")
    return fig


def stacked_bars(
    categories: Sequence[str], parts: dict[str, np.ndarray], ylabel: str, title: str, note: str = ""
) -> Figure:
    """Where the time goes: one stacked bar per category (plan, link, batch ...)."""
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(categories) + 2), 5))
    bottom = np.zeros(len(categories))
    palette = {
        "compute": "#4c72b0",
        "tp_comm": "#dd8452",
        "pp_p2p": "#55a868",
        "pp_bubble": "#c44e52",
        "dp_comm": "#8172b3",
        "optimizer": "#937860",
    }
    names = {
        "compute": "compute",
        "tp_comm": "TP communication",
        "pp_p2p": "PP sends",
        "pp_bubble": "PP bubble",
        "dp_comm": "DP communication",
        "optimizer": "optimizer",
    }
    for key, values in parts.items():
        v = np.asarray(values, dtype=float)
        if np.all(v == 0):
            continue
        ax.bar(categories, v, bottom=bottom, color=palette.get(key), label=names.get(key, key), width=0.65)
        bottom = bottom + v
    for i, total in enumerate(bottom):
        ax.annotate(f"{total:.3g}", (i, total), xytext=(0, 3), textcoords="offset points", ha="center", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=11, loc="left")
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(True, axis="y", alpha=0.25)
    plt.setp(ax.get_xticklabels(), rotation=20, ha="right", fontsize=8)
    if note:
        fig.text(0.01, -0.04, note, fontsize=8, color="#444444", va="top")
    return fig


def two_panels(
    x: np.ndarray,
    left: dict[str, np.ndarray],
    right: dict[str, np.ndarray],
    xlabel: str,
    ylabels: tuple[str, str],
    title: str,
    hline_right: float | None = None,
) -> Figure:
    """Two quantities with different units against the same x, side by side."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6))
    for ax, series, ylabel, offset in ((axes[0], left, ylabels[0], 0), (axes[1], right, ylabels[1], len(left))):
        for k, (label, y) in enumerate(series.items()):
            ax.plot(x, y, "-o", ms=4, lw=2, color=PLAN_COLORS[(k + offset) % len(PLAN_COLORS)], label=label)
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=9)
    if hline_right is not None:
        axes[1].axhline(hline_right, color="black", ls="--", lw=1)
    fig.suptitle(title, fontsize=11, x=0.01, ha="left")
    fig.tight_layout()
    return fig


GANTT_COLORS = {
    "F": "#4c72b0",
    "B": "#dd8452",
    "W": "#55a868",
    "send-F": "#9c9c9c",
    "send-B": "#c7c7c7",
    "dp": "#8172b3",
    "optimizer": "#937860",
}
GANTT_LABELS = {
    "F": "forward",
    "B": "backward",
    "W": "weight gradient",
    "send-F": "send activations",
    "send-B": "send gradients",
    "dp": "data-parallel reduction",
    "optimizer": "optimizer",
}


def gantt(sim: Any, title: str, time_unit: float = 1.0, unit_label: str = "s") -> Figure:
    """One row per pipeline stage: compute operations as full-height bars, sends as thin bars
    under them, gaps (the bubbles) left white."""
    from matplotlib.patches import Patch

    from shardwise.engines.simulator import KIND_NAMES

    ops = sim.ops
    p = sim.p
    fig, ax = plt.subplots(figsize=(12, max(2.5, 0.32 * p + 1.6)))
    used = set()
    for k, name in enumerate(KIND_NAMES):
        rows = ops[ops["kind"] == k]
        if len(rows) == 0:
            continue
        used.add(name)
        thin = name.startswith("send") or name == "dp"  # communication, overlapping compute
        for stage in np.unique(rows["stage"]):
            sel = rows[rows["stage"] == stage]
            spans = list(zip(sel["start_s"] / time_unit, (sel["end_s"] - sel["start_s"]) / time_unit, strict=True))
            y = p - 1 - stage
            ax.broken_barh(
                spans,
                (y - (0.45 if not thin else -0.30), 0.75 if not thin else 0.12),
                facecolors=GANTT_COLORS[name],
                edgecolor="white" if not thin else None,
                linewidth=0.2,
            )
    ax.set_yticks(
        range(p),
        [f"stage {p - 1 - i}" for i in range(p)]
        if p <= 32
        else [f"{p - 1 - i}" if (p - 1 - i) % max(1, p // 16) == 0 else "" for i in range(p)],
    )
    ax.set_xlabel(f"time ({unit_label})")
    ax.set_xlim(0, sim.makespan_s / time_unit * 1.01)
    ax.set_ylim(-0.7, p - 0.3)
    ax.grid(True, axis="x", alpha=0.25)
    handles = [Patch(color=GANTT_COLORS[n], label=GANTT_LABELS[n]) for n in GANTT_COLORS if n in used]
    handles.append(Patch(facecolor="white", edgecolor="#999999", label="idle (bubble)"))
    ax.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.12 if p > 4 else -0.25),
        ncol=min(len(handles), 8),
        fontsize=8,
        frameon=False,
    )
    ax.set_title(title, fontsize=11, loc="left")
    return fig
