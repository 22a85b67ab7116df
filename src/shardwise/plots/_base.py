"""Common pieces of every figure: the Agg backend, atomic saving, colours, axis helpers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from shardwise.analyses.experiment import DISPLAY_SCALE, VARIABLES
from shardwise.colors import KIND_SHADES, LINK_STYLES, OTHER_COLORS, PLAN_COLORS, plan_colors, plan_kind
from shardwise.errors import SpecError

__all__ = [
    "DISPLAY_SCALE",
    "KIND_SHADES",
    "LINK_STYLES",
    "OTHER_COLORS",
    "PLAN_COLORS",
    "VARIABLES",
    "axis_values",
    "label_log_y",
    "plan_colors",
    "plan_kind",
    "plt",
    "save",
    "set_x",
]

FORMATS = (".png", ".svg", ".pdf")


def save(fig: Figure, path: str | Path, tight: bool = True) -> Path:
    """Write `fig` to `path` atomically (a temp file renamed into place); PNG at 150 dpi. `tight`:
    cropped to what is drawn (which draws the figure twice); else as the figure lays itself out."""
    p = Path(path)
    if p.suffix.lower() not in FORMATS:
        raise SpecError(f"{p}: unknown figure format {p.suffix!r}; use one of {', '.join(FORMATS)}")
    from shardwise.atomic import atomic_path

    try:
        with atomic_path(p) as tmp:
            fig.savefig(tmp, dpi=150, bbox_inches="tight" if tight else None, format=p.suffix.lower().lstrip("."))
    finally:
        plt.close(fig)
    return p


def axis_values(variable: str, values: np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=float) * DISPLAY_SCALE.get(variable, 1.0)


def set_x(ax: Any, variable: str, values: np.ndarray) -> None:
    spec = VARIABLES[variable]
    ax.set_xlabel(spec.label)
    if spec.log and np.nanmin(values) > 0:
        base = 2 if spec.integer else 10
        ax.set_xscale("log", base=base)
        if spec.integer:
            ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))


def label_log_y(ax: Any, low: float, high: float) -> None:
    """A log y axis over [low, high] that spans three decades or fewer gets its values as plain
    numbers (1, 10, not 10^0, 10^1) and labels at 2 and 5 times each power of ten besides, so a
    reader has more than two labelled values to read a line against."""
    if not (low > 0 and high > low) or np.log10(high / low) > 3:
        return
    from matplotlib import ticker

    def minor(v: float, _: Any) -> str:
        mantissa = v / 10 ** np.floor(np.log10(v) + 1e-9)
        return f"{v:g}" if round(mantissa) in (2, 5) and abs(mantissa - round(mantissa)) < 1e-6 else ""

    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(ticker.FuncFormatter(minor))
    ax.tick_params(axis="y", which="minor", labelsize=8)
