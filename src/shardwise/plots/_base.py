"""Common pieces of every figure: the Agg backend, atomic saving, colours, axis helpers."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from shardwise.analyses.experiment import DISPLAY_SCALE, VARIABLES
from shardwise.errors import SpecError

__all__ = [
    "DISPLAY_SCALE",
    "LINK_STYLES",
    "OTHER_COLORS",
    "PLAN_COLORS",
    "VARIABLES",
    "axis_values",
    "plan_colors",
    "plan_kind",
    "plt",
    "save",
    "set_x",
]

FORMATS = (".png", ".svg", ".pdf")
PLAN_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
# One colour per plan kind in every figure: TP blue, PP red, TP x PP green, DP only purple; a second
# plan of the same kind takes the next shade. Series that are not plans use OTHER_COLORS.
KIND_SHADES = {
    "tp": ("#1f77b4", "#5aa3d9", "#0b3d6b", "#9ccbef"),
    "pp": ("#d62728", "#f0796f", "#8a1010", "#f6b2ab"),
    "hybrid": ("#2ca02c", "#74c476", "#145a14", "#b5e0a8"),
    "dp": ("#7b4fa8", "#b08fd4", "#4a2a6e", "#d9c6ee"),
}
OTHER_COLORS = ("#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22")
_DEGREE = {k: re.compile(rf"\b{k}\s*=?\s*(\d+|all)\b", re.IGNORECASE) for k in ("tp", "pp")}


def plan_kind(label: str) -> str | None:
    """'tp', 'pp', 'hybrid' or 'dp' for a plan label ('tp=8', 'tp=2,pp=4', 'TP=8 PP=1'); None
    for a label that names no degree (not a plan)."""
    found = {k: (m.group(1) if (m := rx.search(label)) else None) for k, rx in _DEGREE.items()}
    if found["tp"] is None and found["pp"] is None:
        return "dp" if re.search(r"\bdp\s*=?\s*\d", label, re.IGNORECASE) else None
    tp, pp = (v not in (None, "1") for v in (found["tp"], found["pp"]))
    return "hybrid" if tp and pp else "tp" if tp else "pp" if pp else "dp"


def plan_colors(labels: Sequence[str]) -> list[str]:
    """A colour for each label: its plan kind's colour, the next shade for a repeated kind."""
    used: dict[str, int] = {}
    out = []
    for label in labels:
        kind = plan_kind(label) or "other"
        k = used.get(kind, 0)
        used[kind] = k + 1
        shades = KIND_SHADES.get(kind, OTHER_COLORS)
        out.append(shades[k % len(shades)])
    return out


LINK_STYLES = ["-", "--", ":", "-."]


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
