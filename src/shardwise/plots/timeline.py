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
    "embedding-sync": "#da8bc3",
    "dp-gather": "#8172b3",  # drawn as the reduction, under one legend entry
}
GANTT_LABELS = {
    "F": "forward",
    "B": "backward",
    "W": "weight gradient",
    "send-F": "send activations",
    "send-B": "send gradients",
    "dp": "data-parallel reduce / gather",
    "optimizer": "optimizer",
    "embedding-sync": "tied embedding sync",
    "dp-gather": "data-parallel reduce / gather",
}
# communication, overlapping compute: a thin bar above the stage's compute
THIN = ("send-F", "send-B", "dp", "embedding-sync", "dp-gather")


# Above this many operations the chart is painted as an image of RASTER_COLUMNS time columns
# (each bar is narrower than a pixel anyway); below it every bar is drawn.
RASTER_OPERATIONS = 20_000
MAX_HEIGHT_IN = 14.0  # more than 38 stages share this height (their labels thin out anyway)
RASTER_COLUMNS = 2400
RASTER_ROWS_PER_STAGE = 8  # 6 for compute, 1 gap, 1 for communication


def _coverage(sel: np.ndarray, p: int, cols: int, dt: float, time_unit: float) -> np.ndarray:
    """[stage, column]: the share of each column's time the operations `sel` cover."""
    first = sel["start_s"] / time_unit / dt
    last = np.minimum(sel["end_s"] / time_unit / dt, cols - 1e-9)
    i0, i1 = first.astype(np.int64), last.astype(np.int64)
    cover = np.zeros((p, cols + 1))
    full = np.zeros((p, cols + 1))  # columns wholly inside an operation, as +1 / -1 edges
    same = i0 == i1
    np.add.at(cover, (sel["stage"][same], i0[same]), (last - first)[same])
    part = ~same
    np.add.at(cover, (sel["stage"][part], i0[part]), (i0 + 1 - first)[part])
    np.add.at(cover, (sel["stage"][part], i1[part]), (last - i1)[part])
    np.add.at(full, (sel["stage"][part], i0[part] + 1), 1.0)
    np.add.at(full, (sel["stage"][part], i1[part]), -1.0)
    return (cover + np.cumsum(full, axis=1))[:, :cols]


def _raster(ax: Any, ops: np.ndarray, p: int, width: float, time_unit: float) -> set[str]:
    """One image instead of one rectangle per operation. In a stage's compute band each pixel
    column is a stacked bar of the shares of its time each kind covers (a third forward and two
    thirds backward: the top third of the band blue, the rest orange; the idle share white), so
    areas stay proportional to time even where operations are narrower than a pixel; the thin
    communication line above it takes the kind that covers most of the column (white under a
    quarter)."""
    from matplotlib.colors import to_rgb

    from shardwise.engines.simulator import KIND_NAMES

    cols, sub = RASTER_COLUMNS, RASTER_ROWS_PER_STAGE
    dt = max(width, 1e-300) / cols
    image = np.full((p * sub, cols, 4), 255, dtype=np.uint8)  # RGBA bytes: drawn without conversion
    used = set()
    for thin, rows in ((False, slice(2, sub)), (True, slice(0, 1))):
        names = [n for n in KIND_NAMES if (n in THIN) == thin]
        shares = []
        for name in names:
            sel = ops[ops["kind"] == KIND_NAMES.index(name)]
            if len(sel):
                used.add(name)
            shares.append(_coverage(sel, p, cols, dt, time_unit) if len(sel) else np.zeros((p, cols)))
        stack = np.stack(shares)  # [kind, stage, column]
        colours = np.vstack([np.array([(*to_rgb(GANTT_COLORS[n]), 1.0) for n in names]) * 255, [255] * 4])
        band = image.reshape(p, sub, cols, 4)[:, rows]  # [stage, row, column, 4]
        if thin:
            kind = np.where(np.max(stack, axis=0) >= 0.25, np.argmax(stack, axis=0), len(names))
            band[:] = np.round(colours[kind])[:, None].astype(np.uint8)
            continue
        ends = np.cumsum(stack, axis=0)  # each kind's share stacked from the band's top
        n_rows = band.shape[1]
        for r in range(n_rows):
            kind = np.sum(ends < (r + 0.5) / n_rows, axis=0)  # len(names): past every share, idle
            band[:, r] = np.round(colours[kind]).astype(np.uint8)
    from shardwise.plots.pixels import pixel_imshow

    pixel_imshow(ax, image, (0, width, -0.5, p - 0.5))
    return used


def gantt(sim: Any, title: str, time_unit: float = 1.0, unit_label: str = "s") -> Figure:
    """One row per pipeline stage: compute operations as full-height bars, sends as thin bars
    under them, gaps (the bubbles) left white. Laid out already: save it with `tight=False`."""
    from matplotlib.patches import Patch

    from shardwise.engines.simulator import KIND_NAMES

    ops = sim.ops
    p = sim.p
    fig, ax = plt.subplots(figsize=(12, min(max(2.5, 0.32 * p + 1.6), MAX_HEIGHT_IN)))
    used = set()
    if len(ops) > RASTER_OPERATIONS:  # thinner than a pixel each: paint them as an image
        used = _raster(ax, ops, p, sim.makespan_s / time_unit, time_unit)
    for k, name in enumerate(KIND_NAMES if len(ops) <= RASTER_OPERATIONS else ()):
        rows = ops[ops["kind"] == k]
        if len(rows) == 0:
            continue
        used.add(name)
        thin = name in THIN
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
    if p <= 32:
        ax.set_yticks(range(p), [f"stage {p - 1 - i}" for i in range(p)])
    else:  # a tick on every (p // 16)-th stage only: each tick is an object matplotlib lays out
        every = max(1, p // 16)
        shown = [i for i in range(p) if (p - 1 - i) % every == 0]
        ax.set_yticks(shown, [f"{p - 1 - i}" for i in shown])
    ax.set_xlabel(f"time ({unit_label})")
    ax.set_xlim(0, sim.makespan_s / time_unit * 1.01)
    ax.set_ylim(-0.7, p - 0.3)
    ax.grid(True, axis="x", alpha=0.25)
    shown = {GANTT_LABELS[n]: GANTT_COLORS[n] for n in GANTT_COLORS if n in used}  # one entry per label
    handles = [Patch(color=colour, label=label) for label, colour in shown.items()]
    handles.append(Patch(facecolor="white", edgecolor="#999999", label="idle (bubble)"))
    # margins fixed in inches (tick labels, title, axis label and the legend under it), so that
    # the chart is saved as laid out (`plots.save(..., tight=False)`): a tight bounding box draws
    # a large chart twice
    width_in, height_in = fig.get_size_inches()
    left_in, right_in, top_in, bottom_in = (0.75 if p <= 32 else 0.45), 0.2, 0.4, 0.95
    fig.subplots_adjust(
        left=left_in / width_in,
        right=1 - right_in / width_in,
        top=1 - top_in / height_in,
        bottom=bottom_in / height_in,
    )
    fig.legend(
        handles=handles,
        loc="lower center",
        bbox_to_anchor=(0.5, 0.02 / height_in),
        ncol=min(len(handles), 8),
        fontsize=8,
        frameon=False,
    )
    ax.set_title(title, fontsize=11, loc="left")
    return fig
