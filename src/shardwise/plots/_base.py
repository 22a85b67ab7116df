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
from shardwise.errors import SpecError

__all__ = ["DISPLAY_SCALE", "LINK_STYLES", "PLAN_COLORS", "VARIABLES", "axis_values", "plt", "save", "set_x"]

FORMATS = (".png", ".svg", ".pdf")
PLAN_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
LINK_STYLES = ["-", "--", ":", "-."]


def save(fig: Figure, path: str | Path) -> Path:
    """Write `fig` to `path` atomically (a temp file renamed into place); PNG at 150 dpi."""
    p = Path(path)
    if p.suffix.lower() not in FORMATS:
        raise SpecError(f"{p}: unknown figure format {p.suffix!r}; use one of {', '.join(FORMATS)}")
    from shardwise.atomic import atomic_path

    try:
        with atomic_path(p) as tmp:
            fig.savefig(tmp, dpi=150, bbox_inches="tight", format=p.suffix.lower().lstrip("."))
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
