"""Calibration's learning curves: error and interval coverage against the number of runs."""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

ALL_BUT_ONE_X = 20  # where the leave-one-out points sit on the k axis


def _x(k: int) -> float:
    return ALL_BUT_ONE_X if k < 0 else k


def learning_curves(curves: list[Any], summary: dict[str, Any]) -> Figure:
    """Left: mean absolute error of the runs left out against k (0 = uncalibrated), one thin line
    per stack and a thick one for the mean over stacks, per split; right: the share of measured
    values inside the predicted 80% interval (the dashed line is the 80% it should be). Leave-one-out
    points (k < 0) are drawn at the right end, "all but one"."""
    fig, (err_ax, cov_ax) = plt.subplots(1, 2, figsize=(11, 4.4))
    colors = {"dev": "#4c72b0", "holdout": "#dd8452", "serving": "#55a868"}
    notes = {"dev": "training, tuned on", "holdout": "training, untouched", "serving": "serving, not split"}
    for split, color in colors.items():
        stacks = dict.fromkeys(p.stack for p in curves if p.split == split)
        for s in stacks:
            pts = sorted((p for p in curves if p.split == split and p.stack == s), key=lambda p: _x(p.k))
            ks = [_x(p.k) for p in pts]
            err_ax.plot(ks, [100 * p.mape for p in pts], color=color, alpha=0.25, lw=1)
            cov_ax.plot(ks, [100 * p.coverage80 for p in pts], color=color, alpha=0.25, lw=1)
        row = summary.get(split, {})
        ks = sorted(row, key=_x)
        if not stacks:
            continue
        label = f"{split} ({len(stacks)} stacks; {notes[split]})"
        xs = [_x(k) for k in ks]
        err_ax.plot(xs, [100 * row[k]["mape"] for k in ks], color=color, lw=2.5, marker="o", label=label)
        cov_ax.plot(xs, [100 * row[k]["coverage80"] for k in ks], color=color, lw=2.5, marker="o", label=label)
    cov_ax.axhline(80, color="0.3", ls="--", lw=1, label="80% (well calibrated)")
    for ax in (err_ax, cov_ax):
        ax.set_xscale("symlog", linthresh=1)
        ax.set_xticks([0, 1, 2, 4, 8, ALL_BUT_ONE_X])
        ax.set_xticklabels(["0\n(uncalibrated)", "1", "2", "4", "8", "all but\none"])
        ax.set_xlabel("runs of the stack calibrated on (k)")
        ax.set_xlim(-0.3, ALL_BUT_ONE_X * 1.15)
        ax.grid(alpha=0.3)
    err_ax.set_ylabel("mean absolute error of the other runs (%)")
    err_ax.set_ylim(bottom=0)
    cov_ax.set_ylabel("measured values inside the 80% interval (%)")
    cov_ax.set_ylim(0, 105)
    err_ax.legend(fontsize=8, loc="upper right")
    cov_ax.legend(fontsize=8, loc="lower right")
    fig.suptitle(
        "Calibrating on k of a stack's runs (one public source on one system), predicting the rest: "
        "public training and serving runs",
        fontsize=10,
    )
    fig.tight_layout()
    return fig


__all__ = ["learning_curves"]
