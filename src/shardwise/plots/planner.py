"""The planner's map: best throughput of every (tp, pp) pair, infeasible cells marked, best outlined."""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from shardwise.plots._base import plt


def plan_heatmap(result: Any) -> Figure:
    """`result` is an analyses.plan_search.PlanSearch."""
    tps, pps, rate, seen = result.by_tp_pp()
    fig, ax = plt.subplots(figsize=(1.0 + 0.9 * pps.size, 1.6 + 0.7 * tps.size))
    masked = np.ma.masked_invalid(rate)
    im = ax.imshow(masked, cmap="viridis", origin="lower", aspect="auto")
    cbar = fig.colorbar(im, ax=ax)
    cbar.set_label("tokens/s per GPU of the best plan in the cell")
    top = np.nanmax(rate) if np.any(np.isfinite(rate)) else np.nan
    for i in range(tps.size):
        for j in range(pps.size):
            if not seen[i, j]:
                ax.text(j, i, "n/a", ha="center", va="center", fontsize=7, color="#888888")
            elif np.isnan(rate[i, j]):
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor="#eeeeee", hatch="xx", edgecolor="#bbbbbb"))
                ax.text(j, i, "OOM", ha="center", va="center", fontsize=7, color="#aa0000")
            else:
                dark = im.norm(rate[i, j]) < 0.5  # viridis is dark at its low end
                ax.text(
                    j, i, f"{rate[i, j]:,.0f}", ha="center", va="center", fontsize=7, color="white" if dark else "black"
                )
    if np.isfinite(top):
        bi, bj = np.unravel_index(np.nanargmax(rate), rate.shape)
        ax.add_patch(Rectangle((bj - 0.5, bi - 0.5), 1, 1, fill=False, edgecolor="red", lw=2.5))
    ax.set_xticks(range(pps.size), [str(p) for p in pps])
    ax.set_yticks(range(tps.size), [str(t) for t in tps])
    ax.set_xlabel("pipeline stages (pp)")
    ax.set_ylabel("tensor parallel (tp)")
    m, c = result.model, result.cluster
    upto = "up to " if result.space.objective != "time" else ""
    title = (
        f"{m.name} on {upto}{int(c.num_gpus)} x {c.gpu.name}, global batch {result.global_batch}: best plan per "
        "(tp, pp)\nover micro-batch, schedule, recompute, SP and ZeRO; red box: the best;\n"
        "OOM: no variant fits in memory; n/a: no valid layout (dp not whole, or a constraint)"
    )
    ax.set_title(title, fontsize=9, loc="left")
    fig.tight_layout()
    return fig
