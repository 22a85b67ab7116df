"""Crossover batch against a variable, and the one-at-a-time (tornado) chart."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from shardwise.plots._base import LINK_STYLES, OTHER_COLORS, axis_values, plt, set_x

# what a point of a crossover-batch curve is (`point_kind`): a crossing, drawn on the line; the plan
# that wins at batch 1 winning to the largest batch tried; winning only as far as both plans fit in
# memory (drawn at that batch); no batch where both plans fit (drawn on the axis's floor)
CROSSING, THROUGHOUT, FITS_TO, NONE_FIT = "crossing", "throughout", "fits_to", "none_fit"
KIND_MARKERS = {THROUGHOUT: "^", FITS_TO: "v", NONE_FIT: "X"}


def point_kind(curve: Any, j: int, max_batch: int) -> str:
    """The kind of point `j` of `curve` (an `analyses.sensitivity.CrossoverCurve`), as the
    command's table reads it: 'no feasible batch', '- (tp=8, both fit to 6)', '- (tp=8)' or a batch."""
    if curve.crossover_batch[j] == curve.crossover_batch[j]:
        return CROSSING
    if not curve.winner_at_batch_1[j]:
        return NONE_FIT
    last = getattr(curve, "last_feasible_batch", None)
    if last is not None and last[j] == last[j] and last[j] < max_batch:
        return FITS_TO
    return THROUGHOUT


def kind_labels(max_batch: int) -> dict[str, str]:
    return {
        THROUGHOUT: f"no crossover up to batch {max_batch}: the plan faster at batch 1 wins throughout",
        FITS_TO: "no crossover as far as both plans fit in GPU memory (drawn at the last batch where both fit)",
        NONE_FIT: "no batch where both plans fit in GPU memory",
    }


def crossover_curves(curves: Sequence[Any], plans: Sequence[str], max_batch: int, title: str) -> Figure:
    """Crossover batch against a variable, one line per link. A point without a crossover gets
    its own marker: a triangle at `max_batch` (the plan faster at batch 1 wins throughout), a
    down-triangle at the last batch where both plans fit (it wins as far as they do), an X on the
    axis's floor (no batch where both fit); each link's markers sit a little apart, so one link's
    do not hide another's."""
    from matplotlib.transforms import blended_transform_factory, offset_copy

    fig, ax = plt.subplots(figsize=(8, 5))
    variable = curves[0].variable
    floor = blended_transform_factory(ax.transData, ax.transAxes)  # x in data, y in axes fraction
    kinds_drawn: set[str] = set()
    for k, c in enumerate(curves):
        x = axis_values(variable, c.values)
        y = np.asarray(c.crossover_batch, dtype=float)
        style, color = LINK_STYLES[k % len(LINK_STYLES)], OTHER_COLORS[k % len(OTHER_COLORS)]
        ax.plot(x, y, style, marker="o", lw=2, color=color, label=f"{c.link}", zorder=2 + k)
        kinds = [point_kind(c, j, max_batch) for j in range(len(x))]
        dx = (k - (len(curves) - 1) / 2) * 5.0  # points: the links side by side
        last = getattr(c, "last_feasible_batch", np.full(len(x), np.nan))
        for kind, at in ((THROUGHOUT, None), (FITS_TO, last), (NONE_FIT, None)):
            sel = np.array([q == kind for q in kinds], dtype=bool)
            if not sel.any():
                continue
            kinds_drawn.add(kind)
            if kind == NONE_FIT:
                ys, base = np.full(sel.sum(), 0.03), floor
            else:
                ys, base = (np.full(sel.sum(), float(max_batch)) if at is None else np.asarray(at)[sel]), ax.transData
            ax.plot(x[sel], ys, KIND_MARKERS[kind], ms=9, color=color, mfc="none" if kind != NONE_FIT else color,
                    mew=1.5, ls="none", transform=offset_copy(base, fig=fig, x=dx, y=0, units="points"),
                    zorder=4 + k, gid=f"{kind}:{c.link}")  # fmt: skip
            if kind != NONE_FIT:  # a line drawn through an offset transform does not scale the axes
                ax.update_datalim(np.column_stack([x[sel], ys]))
    xs = np.concatenate([axis_values(variable, c.values) for c in curves])
    y0 = ax.dataLim.y0 if np.isfinite(ax.dataLim.y0) else 1.0
    # every value on the x axis, and room under the lowest line for the floor's X markers
    ax.update_datalim([[xs.min(), y0 / (1.6 if NONE_FIT in kinds_drawn else 1.0)], [xs.max(), y0]])
    ax.autoscale_view()
    set_x(ax, variable, axis_values(variable, curves[0].values))
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_ylabel("crossover batch (sequences)")
    ax.grid(True, which="both", alpha=0.25)
    labels = kind_labels(max_batch)
    for kind in (THROUGHOUT, FITS_TO, NONE_FIT):
        if kind in kinds_drawn:
            ax.plot([], [], KIND_MARKERS[kind], ms=8, color="gray", mfc="none" if kind != NONE_FIT else "gray",
                    ls="none", label=labels[kind])  # fmt: skip
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), fontsize=8, frameon=False, ncol=1)
    ax.set_title(title, fontsize=11, loc="left")
    notes = [
        "below a line the plan that wins at batch 1 is faster, above it the other one",
        *_footnote(curves, max_batch),
    ]
    fig.text(0.01, -0.02 - 0.045 * (len(kinds_drawn) + len(curves)), "\n".join(notes), fontsize=8,
             color="#444444", va="top")  # fmt: skip
    return fig


def _footnote(curves: Sequence[Any], max_batch: int) -> list[str]:
    """Per link, the points without a crossing, grouped by kind, each with the plan that wins there
    (and for FITS_TO the last batch where both plans fit); nothing where every point crosses."""
    out = []
    for c in curves:
        variable = c.variable
        x = axis_values(variable, c.values)
        groups: dict[tuple[str, str], list[str]] = {}
        for j, v in enumerate(x):
            kind = point_kind(c, j, max_batch)
            if kind == CROSSING:
                continue
            w = c.winner_at_batch_1[j]
            text = f"{v:g} (to batch {float(c.last_feasible_batch[j]):g})" if kind == FITS_TO else f"{v:g}"
            groups.setdefault((kind, w), []).append((j, text))
        parts = []
        for (kind, w), at in groups.items():
            where = f"at {variable} {_runs(at, kind != FITS_TO)}"
            parts.append(
                {
                    THROUGHOUT: f"{w} faster up to batch {max_batch} {where}",
                    FITS_TO: f"{w} faster as far as both plans fit {where}",
                    NONE_FIT: f"no batch where both plans fit {where}",
                }[kind]
            )
        if parts:
            out += textwrap.wrap(f"{c.link}: " + "; ".join(parts), 150, initial_indent="  ", subsequent_indent="    ")
    return out


def _runs(points: list[tuple[int, str]], merge: bool) -> str:
    """'8, 152-192': grid neighbours (consecutive indices) merged into a range where `merge`."""
    if not merge:
        return ", ".join(t for _, t in points)
    runs: list[list[tuple[int, str]]] = []
    for j, t in points:
        if runs and runs[-1][-1][0] == j - 1:
            runs[-1].append((j, t))
        else:
            runs.append([(j, t)])
    return ", ".join(r[0][1] if len(r) == 1 else f"{r[0][1]}-{r[-1][1]}" for r in runs)


def tornado(base_ratio: float, bars: Sequence[Any], plans: Sequence[str], factor: float, title: str) -> Figure:
    """One-at-a-time sensitivity: the ratio time(A)/time(B) with each input divided and multiplied
    by `factor`; the widest bar is the input that matters most."""
    from shardwise.analyses.experiment import SHORT_NAME

    fig, ax = plt.subplots(figsize=(8.5, 0.55 * len(bars) + 1.8))
    ys = np.arange(len(bars))[::-1]
    for y, bar in zip(ys, bars, strict=True):
        lo, hi = bar.ratio_low, bar.ratio_high
        ax.barh(y, lo - base_ratio, left=base_ratio, color="#6baed6", height=0.6)
        ax.barh(y, hi - base_ratio, left=base_ratio, color="#fd8d3c", height=0.6)
        ends = (("low", lo, bar.fits_low), ("high", hi, bar.fits_high))
        for which, value, fits in ends:  # each end's 80% interval, labelled outside it
            if not np.isfinite(value):
                continue
            b_lo, b_hi = bar.band(which)
            ax.errorbar(value, y, xerr=[[value - b_lo], [b_hi - value]], fmt="none", ecolor="#333", capsize=3, lw=0.8)
            right = value >= base_ratio
            ax.annotate(
                f"{value:.2f}" + ("" if fits else " *"),  # * as the table: a plan does not fit there
                (b_hi if right else b_lo, y),
                xytext=(3 if right else -3, 0),
                textcoords="offset points",
                ha="left" if right else "right",
                va="center",
                fontsize=8,
            )
    ax.set_yticks(ys, [SHORT_NAME.get(b.variable, b.variable) for b in bars])
    ax.axvline(base_ratio, color="black", lw=1)
    if bars:  # the baseline ratio's 80% interval
        b_lo, b_hi = bars[0].band("base")
        ax.axvspan(b_lo, b_hi, color="gray", alpha=0.15, lw=0)
    ax.axvline(1.0, color="gray", ls="--", lw=1)
    ax.set_xscale("log", base=2)
    lo = min([base_ratio, *(min(b.band("low")[0], b.band("high")[0]) for b in bars)])
    hi = max([base_ratio, *(max(b.band("low")[1], b.band("high")[1]) for b in bars)])
    ax.set_xlim(lo / 1.25, hi * 1.25)  # room for the labels outside the whiskers
    ticks = [t for t in (0.25, 0.33, 0.5, 0.67, 0.8, 1, 1.25, 1.5, 2, 3, 4, 6, 8) if lo / 1.3 <= t <= hi * 1.3]
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel(f"time({plans[0]}) / time({plans[1]})   (< 1: {plans[0]} faster; dashed: equal)")
    from matplotlib.patches import Patch

    handles = [
        Patch(color="#6baed6", label=f"input / {factor:g}"),
        Patch(color="#fd8d3c", label=f"input x {factor:g}"),
        Patch(color="gray", alpha=0.3, label="baseline's 80% interval (whiskers: each end's)"),
    ]
    if not all(b.fits_low and b.fits_high for b in bars):
        handles.insert(2, Patch(color="none", label="* a plan does not fit in GPU memory there (times only)"))
    ax.legend(
        handles=handles,
        fontsize=8,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.7 / (0.8 * (0.55 * len(bars) + 1.8))),  # below the axis label
        ncol=3 if len(handles) == 3 else 2,
        frameon=False,
    )
    ax.set_title(f"{title}\nbaseline ratio {base_ratio:.2f} (black line)", fontsize=11, loc="left")
    ax.grid(True, axis="x", which="both", alpha=0.25)
    return fig
