"""Gantt chart of a simulated pipeline step."""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.figure import Figure

from shardwise.plots._base import plt

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
