"""Small generic charts used by the scenarios: lines, stacked bars, two panels."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from shardwise.colors import term_colors, term_name
from shardwise.plots._base import plan_colors, plt


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
    colors = plan_colors(list(series))
    for k, (label, y) in enumerate(series.items()):
        style = "--" if "PCIe" in label or "rebalanced" in label else "-"
        ax.plot(x, y, style, marker="o", ms=3.5, lw=2, color=colors[k], label=label)
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
    categories: Sequence[str],
    parts: dict[str, np.ndarray],
    ylabel: str,
    title: str,
    note: str = "",
    tp_comm: str | None = None,
) -> Figure:
    """Where the time goes: one stacked bar per category (plan, link, batch ...); `tp_comm`: the
    plans' name for that term (`colors.term_name`)."""
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(categories) + 2), 5))
    bottom = np.zeros(len(categories))
    shown = {k: np.asarray(v, dtype=float) for k, v in parts.items() if not np.all(np.asarray(v, dtype=float) == 0)}
    for (key, v), color in zip(shown.items(), term_colors(list(shown)), strict=True):
        ax.bar(categories, v, bottom=bottom, color=color, label=term_name(key, tp_comm), width=0.65)
        bottom = bottom + v
    for i, total in enumerate(bottom):
        ax.annotate(f"{total:.3g}", (i, total), xytext=(0, 3), textcoords="offset points", ha="center", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=11, loc="left")
    # beside the axes: inside, it covered the top of the tallest bars (batch1-inference's PP=8 NVLink)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
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
    missing: np.ndarray | None = None,
    missing_label: str = "does not fit in GPU memory (times only)",
) -> Figure:
    """Two quantities with different units against the same x, side by side; `missing`: a mask of
    the x values drawn with a hollow ring and named `missing_label` in each legend (e.g. where a
    plan does not fit)."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6))
    colors = dict(zip([*left, *right], plan_colors([*left, *right]), strict=True))
    gone = np.zeros(len(x), dtype=bool) if missing is None else np.asarray(missing, dtype=bool)
    for ax, series, ylabel in ((axes[0], left, ylabels[0]), (axes[1], right, ylabels[1])):
        for label, y in series.items():
            ax.plot(x, y, "-o", ms=4, lw=2, color=colors[label], label=label)
            if gone.any():
                ax.plot(np.asarray(x)[gone], np.asarray(y)[gone], "o", ms=11, mfc="none", mec="black", mew=1.3,
                        gid=f"missing:{label}")  # fmt: skip
        if gone.any():
            ax.plot([], [], "o", ms=9, mfc="none", mec="black", mew=1.3, ls="none", label=missing_label)
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
