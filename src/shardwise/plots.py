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
    _mark_crossings(ax, result)
    _set_x(ax, result.variable, x)
    positive = np.concatenate([s.time_s[np.isfinite(s.time_s)] for s in result.series])
    if positive.size and positive.max() / max(positive.min(), 1e-300) > 20:
        ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(loc="best", fontsize=9, framealpha=0.9)
    ax.set_title(title, fontsize=12, loc="left")
    if subtitle:
        fig.text(0.01, -0.02, subtitle, fontsize=8, color="#444444", va="top", wrap=True)
    return fig


def _mark_crossings(ax: Any, result: CrossoverResult) -> None:
    from shardwise.analyses.crossover import describe_crossing
    from shardwise.analyses.experiment import times_s

    exp = result.experiment
    links = {link.label: link for link in exp.links}
    plans = {p.label: p for p in exp.plans}
    for k, c in enumerate(result.crossings):
        t_at, _ = times_s(exp, plans[c.after], links[c.link].link, result.variable, np.array([c.at]))
        xs = c.at * DISPLAY_SCALE.get(result.variable, 1.0)
        ax.plot([xs], [t_at[0]], marker="*", ms=16, color="black", zorder=5)
        text = describe_crossing(c, result.variable)
        ax.annotate(
            text,
            (xs, t_at[0]),
            xytext=(12, -26 - 16 * k),
            textcoords="offset points",
            fontsize=8.5,
            arrowprops={"arrowstyle": "-", "color": "#555555", "lw": 0.8},
            bbox={"boxstyle": "round,pad=0.25", "fc": "#fffbe6", "ec": "#999999", "lw": 0.6},
        )
    if not result.crossings:
        ax.text(
            0.02,
            0.97,
            "no crossover in this range",
            transform=ax.transAxes,
            va="top",
            fontsize=10,
            bbox={"boxstyle": "round", "fc": "#f0f0f0", "ec": "#999999"},
        )


def side_by_side(figures: Sequence[tuple[str, CrossoverResult, str]], suptitle: str) -> Figure:
    """Several crossover results in one row of panels (e.g. physical vs textbook model)."""
    fig, axes = plt.subplots(1, len(figures), figsize=(7.5 * len(figures), 5.4), squeeze=False)
    for ax, (title, result, ylabel) in zip(axes[0], figures, strict=True):
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
        _mark_crossings(ax, result)
        _set_x(ax, result.variable, x)
        ax.set_yscale("log")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=11, loc="left")
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=8, loc="best")
    fig.suptitle(suptitle, fontsize=12, x=0.01, ha="left")
    fig.tight_layout()
    return fig
