"""The exact pipeline makespan of plans whose stages the training engine prices as the first, the
fullest middle, the last and all middle stages together (`engines.training_layout.Layout`): each
stage's forward and backward rebuilt from them, shallower pipelines padded to their bucket's depth,
plans with the same stages priced once; non-interleaved 1F1B by its max-plus recurrence
(`engines.pipeline_1f1b`), GPipe by its two fills and drains (`engines.pipeline.gpipe_makespan_s`).
Each plan by the same arithmetic whatever the plans beside it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from shardwise.engines.pipeline import gpipe_makespan_s
from shardwise.engines.pipeline_1f1b import distinct_rows, one_f_one_b_s
from shardwise.specs._checks import Number

if TYPE_CHECKING:
    from shardwise.engines.costs import StageCost
    from shardwise.engines.training_layout import Layout


def uneven_stages_s(
    ends: tuple[Number, Number, Number, Number],
    middles: tuple[Number, Number, Number, Number],
    layers: tuple[Number, Number, Number],
    counts: tuple[int, ...] | None,
    pp: Number,
    micro_batches: Number,
    gpipe: Number = False,
) -> np.ndarray:
    """`one_f_one_b_s` (`gpipe_makespan_s` where `gpipe`) for plans whose stages the training engine
    prices as the first, the fullest middle, the last and all middle stages together
    (`engines.training_layout.Layout`).

    - `ends`: the first and last stage's forward pass and whole micro-batch c_j (forward,
      backward, sends, syncs and overheads): (f_first, c_first, f_last, c_last); the backward
      pass is c_j - f_j. The forward holds half of what c_j adds to the passes (blocking sends,
      syncs, the per-micro-batch overhead, handshakes), as the simulator puts it
      (`engines.simulated.stage_times`; `forward_share_s`).
    - `middles`: the same of the fullest middle stage and of all middle stages together
      (f_mid, c_mid, f_mid_sum, c_mid_sum).
    - Each middle stage's forward and c are affine in its layer count, through the fullest
      middle stage and their sum: exact for a dense model, whose middle stages are their layers.
      `layers`: the fullest, the emptiest and all middle stages' layers (`specs.stages.StageSplit`);
      the middle stages take the extra layers first (`specs.stages.stage_layer_list`) unless
      `counts` lists every stage's.
    Returns the pipeline's makespan per plan (n,), grouped by pipeline depth."""
    return uneven_makespans(ends, middles, layers, counts, pp, micro_batches, gpipe)[0]


def uneven_makespans(
    ends: tuple[Number, Number, Number, Number],
    middles: tuple[Number, Number, Number, Number],
    layers: tuple[Number, Number, Number],
    counts: tuple[int, ...] | None,
    pp: Number,
    micro_batches: Number,
    gpipe: Number,
) -> tuple[np.ndarray, np.ndarray]:
    """`uneven_stages_s`, and where GPipe's plans have a stage that is the slowest in both its
    passes (the closed form `pipeline_makespan_s` is exact there; False for 1F1B's)."""
    f_first, c_first, f_last, c_last = ends
    f_mid, c_mid, f_sum, c_sum = middles
    parts = np.broadcast_arrays(
        *(np.asarray(x, dtype=float) for x in (pp, micro_batches, gpipe, f_first, c_first, f_last, c_last)),
        *(np.asarray(x, dtype=float) for x in (f_mid, c_mid, f_sum, c_sum)),
        *(np.asarray(x, dtype=float) for x in layers),
    )
    shape = parts[0].shape
    p, m, gp, ff, cf, fl, cl, fm, cm, fs, cs, n_max, n_min, n_tot = (x.reshape(-1) for x in parts)
    out = m * cf  # one stage: m micro-batches one after another
    closed = (gp > 0) & (p == 1)
    deep = np.flatnonzero(p > 1)
    if deep.size == 0:
        return out.reshape(shape), closed.reshape(shape)
    # shallower pipelines behind stages that take no time: a stage's warm-up counts the stages after
    # it, and an idle stage in front passes every forward on at once and waits for each backward, so
    # p stages padded to P in front end where they would alone; one pass per bucket of depths (`_depth_bucket`)
    bucket = _depth_bucket(p[deep])
    for size in np.unique(bucket):
        rows = deep[bucket == size]
        stages = _padded_stages(rows, int(size), p, (ff, cf, fl, cl), (fm, cm, fs, cs), (n_max, n_min, n_tot), counts)
        out[rows], closed[rows] = _makespans(*stages, m[rows], gp[rows] > 0)
    return out.reshape(shape), closed.reshape(shape)


def _depth_bucket(p: np.ndarray) -> np.ndarray:
    """The depth each pipeline is padded to: the next multiple of an eighth of the power of 2 at or
    below it (at most 1/8 of the stages padding; the cost of a pass grows as depth squared)."""
    step = np.maximum(2.0 ** np.floor(np.log2(p)) / 8, 1.0)
    return np.ceil(p / step) * step


def _padded_stages(
    rows: np.ndarray,
    top_p: int,
    p: np.ndarray,
    ends: tuple[np.ndarray, ...],
    middles: tuple[np.ndarray, ...],
    layers: tuple[np.ndarray, ...],
    counts: tuple[int, ...] | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Each stage's forward and whole micro-batch c_j of `rows` (rows, `top_p`), padded in front to
    `top_p` stages (their bucket's depth, whatever the plans beside them)."""
    ff, cf, fl, cl = ends
    fm, cm, fs, cs = middles
    n_max, n_min, n_tot = layers
    fwd, whole = np.zeros((rows.size, top_p)), np.zeros((rows.size, top_p))
    for depth in np.unique(p[rows]):
        q = int(depth)
        at = np.flatnonzero(p[rows] == depth)
        sel = rows[at]
        lo = top_p - q
        fwd[at, lo], whole[at, lo], fwd[at, -1], whole[at, -1] = ff[sel], cf[sel], fl[sel], cl[sel]
        if q > 2:
            held = _middle_counts(counts, q, n_min[sel], n_tot[sel])  # (rows, q - 2)
            short = ((q - 2) * n_max[sel] - n_tot[sel])[:, None]  # layers the middle stages lack of all-full
            gap = n_max[sel][:, None] - held
            for col, (top, total) in ((fwd, (fm, fs)), (whole, (cm, cs))):
                lack = (q - 2) * top[sel] - total[sel]  # what they lack of all-fullest, in seconds
                per_layer = np.divide(lack[:, None], short, out=np.zeros_like(short), where=short > 0)
                col[at, lo + 1 : top_p - 1] = top[sel][:, None] - per_layer * gap
    return fwd, whole


def _makespans(fwd: np.ndarray, whole: np.ndarray, m: np.ndarray, gpipe: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The makespan of each plan's stages (`_padded_stages`) under 1F1B, or GPipe where `gpipe`,
    and where GPipe's closed form is exact (a stage the slowest in both passes)."""
    # plans with the same stages, micro-batches and schedule (a planner's, apart in dp or ZeRO) priced once
    first, back = distinct_rows(np.column_stack([fwd, whole, m, gpipe]))
    f, b, k, g = fwd[first], whole[first] - fwd[first], m[first], gpipe[first]
    out, closed = np.empty(first.size), np.zeros(first.size, bool)
    one = np.flatnonzero(~g)
    if one.size:
        out[one] = one_f_one_b_s(f[one], b[one], k[one])
    two = np.flatnonzero(g)
    if two.size:
        fg, bg = f[two], b[two]
        out[two] = gpipe_makespan_s(fg, bg, k[two])
        top_f, top_b = fg.max(axis=-1, keepdims=True), bg.max(axis=-1, keepdims=True)
        closed[two] = ((fg == top_f) & (bg == top_b)).any(axis=-1)
    return out[back], closed[back]


def _middle_counts(counts: tuple[int, ...] | None, p: int, n_min: np.ndarray, n_tot: np.ndarray) -> np.ndarray:
    """Layers of each middle stage (rows, p - 2): `counts`' where it lists p stages, else the
    fullest first (`specs.stages.stage_layer_list`)."""
    if counts is not None and len(counts) == p:
        return np.broadcast_to(np.asarray(counts[1:-1], dtype=float), (n_min.size, p - 2))
    extra = n_tot - (p - 2) * n_min
    return n_min[:, None] + (np.arange(p - 2)[None, :] < extra[:, None])


def forward_share_s(cost: StageCost, whole: Number) -> Number:
    """A stage's forward pass with half of what its micro-batch `whole` (c_j) adds to its passes."""
    return cost.forward_s + (whole - cost.total_s) / 2


def with_exact_makespans(
    exact: Number, gpipe: Number, closed_s: Number, lay: Layout, micro_batches: Number, flushes: Number
) -> Number:
    """`closed_s` (the closed form's makespan) with the exact makespan where `exact` holds
    (non-interleaved 1F1B, and GPipe where `gpipe` and no stage is the slowest in both passes:
    the closed form is exact where one is): F flushes run F schedules of m / F micro-batches one
    after the other (`specs.rules.flushes_rule`: F divides m)."""
    split = lay.split
    ends = (forward_share_s(lay.first, lay.c_first), lay.c_first, forward_share_s(lay.last, lay.c_last), lay.c_last)
    middles = (forward_share_s(lay.middle, lay.c_mid), lay.c_mid, lay.f_mid_sum, lay.c_mid_sum)
    layers = (split.middle_max, split.middle_min, split.middle_total)
    values = (exact, closed_s, lay.p, micro_batches, flushes, gpipe, *ends, *middles, *layers)
    arrays = np.broadcast_arrays(*(np.asarray(x) for x in values))
    flat = [x.reshape(-1) for x in arrays]
    rows = np.flatnonzero(flat[0])
    out = flat[1].astype(float).copy()
    f = flat[4][rows]
    pick = [x[rows] for x in flat[6:]]
    each = flat[3][rows] / f  # micro-batches per schedule
    span, closed = uneven_makespans(
        tuple(pick[:4]), tuple(pick[4:8]), tuple(pick[8:]), split.counts, flat[2][rows], each, flat[5][rows]
    )  # type: ignore[arg-type]
    out[rows] = np.where(closed, out[rows], f * span)
    return out.reshape(arrays[0].shape) if arrays[0].ndim else out.reshape(())
