"""Winner maps over two variables."""

from __future__ import annotations

from typing import Any

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from shardwise.plots._base import DISPLAY_SCALE, VARIABLES, axis_values, plan_colors, plt


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


def _borders(winner: np.ndarray, x_edges: np.ndarray, y_edges: np.ndarray) -> Any:
    """One line segment along each cell edge where the winner changes (drawn once, whatever the
    two plans, unlike contour lines at every level between their indices)."""
    from matplotlib.collections import LineCollection

    segments = []
    for i, j in zip(*np.nonzero(winner[1:, :] != winner[:-1, :]), strict=True):  # a vertical edge
        segments.append([(x_edges[i + 1], y_edges[j]), (x_edges[i + 1], y_edges[j + 1])])
    for i, j in zip(*np.nonzero(winner[:, 1:] != winner[:, :-1]), strict=True):  # a horizontal edge
        segments.append([(x_edges[i], y_edges[j + 1]), (x_edges[i + 1], y_edges[j + 1])])
    return LineCollection(segments, colors="black", linewidths=1.6)


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
    grey = False  # a cell without a valid plan drawn
    labels = [str(p) for p in result.plans]
    hexes = plan_colors(labels)
    colors = [np.array(to_rgb(c)) for c in hexes]
    for ax, link in zip(axes[0], result.links, strict=True):
        w = result.winner(link)  # (nx, ny)
        strength = np.clip(np.log(result.margin(link)) / np.log(full_margin), 0, 1)
        rgb = np.ones((*w.shape, 3)) * 0.85
        coloured = np.zeros(w.shape, dtype=bool)
        for i, c in enumerate(colors):
            mask = w == i
            coloured |= mask
            s = (0.25 + 0.75 * strength[mask])[:, None]
            rgb[mask] = 1 - s * (1 - c)
        grey |= bool((~coloured).any())
        ax.pcolormesh(_edges(x, xlog), _edges(y, ylog), np.transpose(rgb, (1, 0, 2)), shading="flat")
        ax.add_collection(_borders(w, _edges(x, xlog), _edges(y, ylog)))
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
    handles = [Patch(color=c, label=f"{p} fastest") for c, p in zip(hexes, labels, strict=True)]
    if grey:  # only where a cell is drawn grey (review 36: the entry showed with none drawn)
        handles.append(Patch(facecolor=(0.85, 0.85, 0.85), label="no valid plan"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), frameon=False, bbox_to_anchor=(0.5, -0.02))
    fig.suptitle(
        f"{result.experiment.hardware}: fastest plan per cell\n(black line: where the winner changes; pale = within "
        f"a few %, full colour = {full_margin:g}x faster or more; dashed: the link's own bandwidth)",
        fontsize=10,
        x=0.01,
        ha="left",
    )
    fig.tight_layout(rect=(0, 0.05, 1, 0.95))
    return fig
