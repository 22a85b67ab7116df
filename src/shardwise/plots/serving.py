"""The serving frontier: throughput per GPU against tokens per second per user, one line per plan."""

from __future__ import annotations

import textwrap

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from shardwise.calibration.spreads import Z80
from shardwise.plots._base import plan_colors, plt

Line = tuple[np.ndarray, np.ndarray, np.ndarray]  # (per-user tokens/s, tokens/s per GPU, batch)


def serving_frontier(panels: dict[str, dict[str, Line]], title: str, log_sd: float = 0.0, basis: str = "") -> Figure:
    """One panel per link; in each, every plan's points as batch grows (labelled with the batch).

    Up and to the right is better: a plan whose line lies above another's gives more throughput at
    the same speed per user. Batch 1 sits at the right end (fastest per user, least throughput).
    """
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 5.0), squeeze=False, sharey=True)
    for ax, (link, lines) in zip(axes[0], panels.items(), strict=True):
        colors = plan_colors(list(lines))
        for k, (label, (per_user, per_gpu, batch)) in enumerate(lines.items()):
            color = colors[k]
            ax.plot(per_user, per_gpu, "-o", ms=4, lw=2, color=color, label=label)
            if log_sd > 0:  # the 80% band of the throughput (calibration.intervals)
                f = np.exp(Z80 * log_sd)
                ax.fill_between(
                    per_user, np.asarray(per_gpu) / f, np.asarray(per_gpu) * f, color=color, alpha=0.12, lw=0
                )
            for i in range(0, len(batch), 2):  # every other point, so labels do not collide
                ax.annotate(
                    f"{int(batch[i])}",
                    (per_user[i], per_gpu[i]),
                    textcoords="offset points",
                    xytext=(4, 3),
                    fontsize=7,
                    color=color,
                )
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
            axis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("speed per user (output tokens/s per request; 1 / time per token)")
        ax.set_title(link, fontsize=10)
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=9)
    axes[0][0].set_ylabel("throughput per GPU (output tokens/s)")
    note = (
        "Up and to the right is better. Each line starts at batch 1 (its lowest point: the fastest per user, "
        "the least throughput); batches whose KV cache does not fit are left out."
        + (f" Shaded: the 80% band of the throughput ({basis})." if log_sd > 0 else "")
    )
    # wrapped to the panels' width: unwrapped, the caption set the saved figure's width (one panel
    # in the left quarter of a 3,351-pixel PNG; review 50 #12). Characters per inch at a font size:
    # 72 points an inch over about 0.55 em a character (DejaVu Sans), less a margin
    inches = 6.2 * len(panels)
    fig.text(0.01, -0.02, textwrap.fill(note, int(inches * 72 / (8 * 0.6))), fontsize=8, color="#444444", va="top")
    fig.suptitle(textwrap.fill(title, int(inches * 72 / (11 * 0.6))), fontsize=11, x=0.01, ha="left")
    fig.tight_layout()
    return fig
