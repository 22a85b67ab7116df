"""The exact makespan of the non-interleaved 1F1B schedule with stages of unequal time, over many
plans at once.

The schedule is the simulator's (`engines.schedules.one_f_one_b`; Narayanan et al. 2021 Sec.
2.2.1, Megatron-LM `forward_backward_pipelining_without_interleaving`): stage i runs
w_i = min(p - i - 1, m) warm-up forwards, then rounds g = 0 .. m - 1 of its forward of micro-batch
w_i + g (while w_i + g < m) and its backward of micro-batch g. Each operation ends at

    end = max(the stage's previous operation's end, its input's end) + its duration

(a forward's input is the previous stage's forward of the same micro-batch, a backward's the next
stage's backward), sends inside the durations as blocking sends are (`engines.simulated`). In round
g the forward of stage i reads the forward stage i - 1 ran in round g - 1 (its last warm-up forward
for g = 0), and the backward reads the backward stage i + 1 ran in the same round:

    F_i(g) = max(B_i(g - 1), F_{i-1}(g - 1)) + f_i
    B_i(g) = max(F_i(g), B_{i+1}(g)) + b_i

The first G = m - min(p - 1, m) rounds are the same max-plus linear map x(g) = M x(g - 1) of the 2p
ends (F, B per stage), so x(G - 1) = M^G x(-1) takes log2 G max-plus squarings of M (2p x 2p,
built by running one round on unit states) instead of G rounds; the warm-up and the last min(p - 1,
m) rounds (stage i's i forwards left, then cool-down backwards) run on the stages still running
forwards, the backward-only ones in closed form (`_cool_down`). Only max and +:
the makespan never decreases when a duration grows, also in floating point (both are monotone
under rounding). For equal stages it is (m + p - 1)(f + b), the closed form
(`engines.pipeline.pipeline_makespan_s`); for unequal ones it is the simulator's pipeline end
where sends block (`tests/test_pipeline_1f1b.py`); where they overlap (`Plan.overlap_p2p`) the
simulator prices each boundary's own send and ends up to ~0.3% of the bubble later (review 44).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from shardwise.specs._checks import Number

if TYPE_CHECKING:
    from shardwise.engines.costs import StageCost
    from shardwise.engines.training_layout import Layout

# rounds past the first 2p after which a plan whose ends still grow unevenly takes the rest by squaring
_SETTLE_ROUNDS = 32
# the first round checked for settling (max-plus: ends that all grew by lambda in one round always will)
_SETTLE_FROM = 2
# an end "grew by lambda" within this share of the ends (rounding of sums of a few dozen terms)
_SETTLED_RTOL = 1e-13


def one_f_one_b_s(forward_s: Number, backward_s: Number, micro_batches: Number) -> np.ndarray:
    """The end of the last backward pass of 1F1B (module docstring) for plans of one pipeline depth p.

    `forward_s`, `backward_s`: (n, p) or (p,) seconds of one micro-batch's forward and backward
    on each stage (blocking sends, syncs and per-micro-batch overheads inside); `micro_batches`:
    m per plan (n,) or one for all. Returns (n,) seconds (a 0-d array for (p,) inputs)."""
    f = np.atleast_2d(np.asarray(forward_s, dtype=float))
    b = np.atleast_2d(np.asarray(backward_s, dtype=float))
    f, b = np.broadcast_arrays(f, b)
    m = np.asarray(micro_batches).astype(np.int64)
    n, p = f.shape[0], f.shape[1]
    m = np.broadcast_to(m, (n,))
    if np.any(m < 1):
        raise ValueError("one_f_one_b_s needs at least one micro-batch")
    out = _makespan(f, b, m, p)
    return out if np.ndim(forward_s) > 1 else out.reshape(())


def _makespan(f: np.ndarray, b: np.ndarray, m: np.ndarray, p: int) -> np.ndarray:
    """`one_f_one_b_s` of plans whose stage vectors may repeat with other m (a planner's, apart in
    dp): plans with the same stages and m >= p - 1 start the uniform rounds from the same state,
    and once it grows by lambda a round (`_uniform_rounds`) so does what follows (max-plus is
    homogeneous), so the one with the fewest rounds is run and the others add lambda per round more;
    the others of a run that ended before it settled are run each on its own."""
    rounds = m - np.minimum(p - 1, m)
    key = np.column_stack([f, b, np.where(rounds > 0, -1.0, m)])  # short pipelines: m sets the warm-up
    order = np.lexsort((rounds,))  # the fewest rounds first: `_distinct_rows` keeps the first
    first, back = _distinct_rows(key[order])
    rep = order[first]
    span, settled = _makespan_of(f[rep], b[rep], m[rep], p)
    group = np.empty(len(m), np.int64)
    group[order] = back
    lam = (f + b).max(axis=-1)
    out = span[group] + (rounds - rounds[rep][group]) * lam
    again = np.flatnonzero(~settled[group])
    again = again[~np.isin(again, rep)]
    if again.size:  # rare (near ties): each on its own
        out[again] = _makespan_of(f[again], b[again], m[again], p)[0]
    return out


def _makespan_of(f: np.ndarray, b: np.ndarray, m: np.ndarray, p: int) -> tuple[np.ndarray, np.ndarray]:
    """The makespan of each plan, and whether its uniform rounds settled."""
    stage = np.arange(p)
    warm = np.minimum(p - 1 - stage[None, :], m[:, None])  # (n, p) warm-up forwards w_i
    w0 = warm[:, 0]  # the most: min(p - 1, m)
    # warm-up: a pipeline of forwards alone, whose k-th forward on stage i ends at
    # f_0 + ... + f_i + k max(f_0 .. f_i) (the longest path waits k times on the slowest stage so far)
    reach = np.cumsum(f, axis=-1) + (warm - 1) * np.maximum.accumulate(f, axis=-1)
    last_f = np.where(warm > 0, reach, 0.0)
    # x(-1): the last warm-up forward is also each stage's last operation
    fe, be, settled = _uniform_rounds(last_f, last_f, f, b, m - w0, p)
    # the last w0 rounds: stage i runs its forward while t < w0 - w_i, then only backwards
    if p == 1:
        return be[:, 0], settled
    return _cool_down(fe, be, f, b, p - 1 - w0), settled


def _cool_down(fe: np.ndarray, be: np.ndarray, f: np.ndarray, b: np.ndarray, idle: np.ndarray) -> np.ndarray:
    """The makespan after the last w0 = p - 1 - d rounds from (fe, be), d = `idle` (n,): the stages
    that ran all their forwards in the warm-up (m < p - 1; else 0).

    In round t stages d + t + 1 .. p - 1 run a forward and a backward (`_round` on those columns:
    they read no lower stage's backward) and stages 0 .. d + t a backward alone, each after its last
    one and the next stage's: B_i(t) = max(B_i(t - 1), B_i+1(t)) + b_i. The backward-only stages
    take the value E_t = max(B_s(t - 1), B_s+1(t)) entering them at stage s = d + t in round t (both
    from the upper stages; what entered them before reached B_s(t - 1)) to the last backward
    B_0(w0 - 1) along a staircase path of b's: each of stages 0 .. s once and the slowest of them
    w0 - 1 - t more times, so the makespan is max_t E_t + b_0 + .. + b_s + (w0 - 1 - t) max(b_0 .. b_s).
    Rows with d > 0 compute the columns d + 1 .. d + t of round t as well, unread (they only feed
    lower columns)."""
    n, p = fe.shape
    tail, after = _backward_sums(b)
    fe, be = fe.copy(), be.copy()
    last = p - 2 - idle  # the last round t = w0 - 1
    rows = np.arange(n)
    enter = np.full((n, p - 1), -np.inf)
    for t in range(int(last.max()) + 1):
        nf = np.maximum(be[:, t + 1 :], fe[:, t:-1])
        nf += f[:, t + 1 :]
        fe[:, t + 1 :] = nf
        nf -= after[:, t + 1 :]
        nb = tail[:, t + 1 :] + np.maximum.accumulate(nf[:, ::-1], axis=-1)[:, ::-1]
        at = np.minimum(idle + t, p - 2)
        enter[:, t] = np.maximum(be[rows, at], nb[rows, at - t])
        be[:, t + 1 :] = nb
    rounds = np.arange(p - 1)
    at = np.minimum(idle[:, None] + rounds, p - 2)
    fill = np.take_along_axis(np.cumsum(b, axis=-1), at, axis=-1)
    slow = np.take_along_axis(np.maximum.accumulate(b, axis=-1), at, axis=-1)
    stair = np.where(rounds <= last[:, None], fill + (last[:, None] - rounds) * slow, -np.inf)
    return (enter + stair).max(axis=-1)


def _uniform_rounds(
    fe: np.ndarray, be: np.ndarray, f: np.ndarray, b: np.ndarray, rounds: np.ndarray, p: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`rounds` (n,) rounds in which every stage runs a forward and a backward, from (fe, be),
    and whether each plan's ends settled (grew by lambda in one of them).

    Past the first 2p rounds (what any path needs to reach a stage and leave it: the rest of it
    repeats one stage's round) every end grows by lambda = max_j (f_j + b_j) a round once the
    paths through slower stages have fallen behind, and from the round in which no end grew by
    other than lambda, none will (those paths only fall further behind): the ends then move on
    by lambda a round, (rounds - g) lambda at once (checked every round from `_SETTLE_FROM`: the max-plus map keeps
    a growth by lambda once it holds, in any round). Plans
    not there after `_SETTLE_ROUNDS` more take the rest as M^rounds by squaring (`_power`)."""
    lam = (f + b).max(axis=-1)
    out_f, out_b = fe.copy(), be.copy()
    steady = np.zeros(len(rounds), dtype=bool)
    rows = np.flatnonzero(rounds > 0)
    cur_f, cur_b = fe[rows], be[rows]
    f_r, b_r, lam_r, todo = f[rows], b[rows], lam[rows], rounds[rows]
    sums = _backward_sums(b_r)
    g = 0
    while rows.size:
        left = todo - g
        if g >= 2 * p + _SETTLE_ROUNDS:
            out_f[rows], out_b[rows] = _power(cur_f, cur_b, f_r, b_r, left, p)
            break
        nf, nb = _round(cur_f, cur_b, f_r, sums, None)
        g += 1
        done = left == 1
        finished = done
        if g >= _SETTLE_FROM:
            tol = _SETTLED_RTOL * (np.abs(nb).max(axis=-1) + lam_r)
            grew = lam_r[:, None]
            step = np.maximum(np.abs(nf - cur_f - grew).max(axis=-1), np.abs(nb - cur_b - grew).max(axis=-1))
            settled = (step <= tol) & ~done
            ahead = ((left - 1) * lam_r)[settled][:, None]
            out_f[rows[settled]], out_b[rows[settled]] = nf[settled] + ahead, nb[settled] + ahead
            steady[rows[settled]] = True
            finished = done | settled
        out_f[rows[done]], out_b[rows[done]] = nf[done], nb[done]
        if finished.any():
            keep = ~finished
            rows, nf, nb, f_r, b_r, lam_r, todo = (x[keep] for x in (rows, nf, nb, f_r, b_r, lam_r, todo))
            sums = tuple(x[keep] for x in sums)
        cur_f, cur_b = nf, nb
    return out_f, out_b, steady


def _backward_sums(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(R_i, R_i+1) with R_i = b_i + ... + b_p-1: a round's backward chain (`_round`)."""
    tail = np.cumsum(b[..., ::-1], axis=-1)[..., ::-1]
    after = np.zeros_like(tail)
    after[..., :-1] = tail[..., 1:]
    return tail, after


def _round(
    fe: np.ndarray, be: np.ndarray, f: np.ndarray, sums: tuple[np.ndarray, np.ndarray], has_f: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """One round from the ends of the last one (`fe`, `be`: (..., n, p)): each stage's forward
    (where `has_f`; all where None) after its last operation and the previous stage's forward,
    then its backward after that and the next stage's backward (`sums`: `_backward_sums`)."""
    nf = np.array(np.broadcast_to(be, np.broadcast_shapes(be.shape, f.shape)))
    np.maximum(nf[..., 1:], fe[..., :-1], out=nf[..., 1:])
    nf += f
    if has_f is not None:
        nf = np.where(has_f, nf, fe)
        ready = np.where(has_f, nf, be)
    else:
        ready = nf
    # B_i = max_j>=i (ready_j + b_i + ... + b_j) = R_i + max_j>=i (ready_j - R_j+1), to rounding
    tail, after = sums
    nb = tail + np.maximum.accumulate((ready - after)[..., ::-1], axis=-1)[..., ::-1]
    return nf, nb


def _power(
    fe: np.ndarray, be: np.ndarray, f: np.ndarray, b: np.ndarray, rounds: np.ndarray, p: int
) -> tuple[np.ndarray, np.ndarray]:
    """`rounds` (n,) uniform rounds from (fe, be), as M^rounds x by squaring: M's column j is one
    round from the unit state e_j (0 at j, -inf elsewhere)."""
    n, s = f.shape[0], 2 * p
    unit = np.full((s, n, s), -np.inf)
    unit[np.arange(s), :, np.arange(s)] = 0.0
    nf, nb = _round(unit[..., :p], unit[..., p:], f, _backward_sums(b), None)  # (s, n, p) each: state j's effect
    mat = np.concatenate([nf, nb], axis=-1).transpose(1, 2, 0)  # (n, s_out, s_in)
    x = np.concatenate([fe, be], axis=-1)  # (n, s)
    left = rounds.astype(np.int64).copy()
    while True:
        odd = (left & 1) == 1
        if odd.any():
            x = np.where(odd[:, None], _apply(mat, x), x)
        left >>= 1
        if not left.any():
            break
        mat = _square(mat)
    return x[:, :p], x[:, p:]


def _apply(mat: np.ndarray, x: np.ndarray) -> np.ndarray:
    """(M x)_a = max_j M_aj + x_j, over plans."""
    return (mat + x[:, None, :]).max(axis=-1)


def _square(mat: np.ndarray) -> np.ndarray:
    """(M M)_ac = max_j M_aj + M_jc, over plans (one pass per j keeps the memory at n s^2)."""
    out = mat[:, :, 0:1] + mat[:, 0:1, :]
    for j in range(1, mat.shape[-1]):
        np.maximum(out, mat[:, :, j : j + 1] + mat[:, j : j + 1, :], out=out)
    return out


def uneven_stages_s(
    ends: tuple[Number, Number, Number, Number],
    middles: tuple[Number, Number, Number, Number],
    layers: tuple[Number, Number, Number],
    counts: tuple[int, ...] | None,
    pp: Number,
    micro_batches: Number,
) -> np.ndarray:
    """`one_f_one_b_s` for plans whose stages the training engine prices as the first, the fullest
    middle, the last and all middle stages together (`engines.training_layout.Layout`).

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
    f_first, c_first, f_last, c_last = ends
    f_mid, c_mid, f_sum, c_sum = middles
    parts = np.broadcast_arrays(
        *(np.asarray(x, dtype=float) for x in (pp, micro_batches, f_first, c_first, f_last, c_last)),
        *(np.asarray(x, dtype=float) for x in (f_mid, c_mid, f_sum, c_sum)),
        *(np.asarray(x, dtype=float) for x in layers),
    )
    shape = parts[0].shape
    p, m, ff, cf, fl, cl, fm, cm, fs, cs, n_max, n_min, n_tot = (x.reshape(-1) for x in parts)
    out = m * cf  # one stage: m micro-batches one after another
    deep = np.flatnonzero(p > 1)
    if deep.size == 0:
        return out.reshape(shape)
    # shallower pipelines behind stages that take no time: a stage's warm-up counts the stages after
    # it, and an idle stage in front passes every forward on at once and waits for each backward, so
    # p stages padded to P in front end where they would alone; one pass per bucket of depths (`_depth_bucket`)
    bucket = _depth_bucket(p[deep])
    for size in np.unique(bucket):
        rows = deep[bucket == size]
        out[rows] = _padded_makespan(rows, p, m, (ff, cf, fl, cl), (fm, cm, fs, cs), (n_max, n_min, n_tot), counts)
    return out.reshape(shape)


def _depth_bucket(p: np.ndarray) -> np.ndarray:
    """The depth each pipeline is padded to: the next multiple of an eighth of the power of 2 at or
    below it (at most 1/8 of the stages padding; the cost of a pass grows as depth squared)."""
    step = np.maximum(2.0 ** np.floor(np.log2(p)) / 8, 1.0)
    return np.ceil(p / step) * step


def _padded_makespan(
    rows: np.ndarray,
    p: np.ndarray,
    m: np.ndarray,
    ends: tuple[np.ndarray, ...],
    middles: tuple[np.ndarray, ...],
    layers: tuple[np.ndarray, ...],
    counts: tuple[int, ...] | None,
) -> np.ndarray:
    """`uneven_stages_s` of `rows`, padded in front to their deepest pipeline."""
    ff, cf, fl, cl = ends
    fm, cm, fs, cs = middles
    n_max, n_min, n_tot = layers
    top_p = int(p[rows].max())
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
    # plans with the same stages and micro-batches (a planner's, apart in dp or ZeRO) priced once
    first, back = _distinct_rows(np.column_stack([fwd, whole, m[rows]]))
    return one_f_one_b_s(fwd[first], whole[first] - fwd[first], m[rows][first])[back]


def _distinct_rows(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first row of each distinct row of `keys` (bitwise) and each row's place among them
    (a dict of the rows' bytes: a tenth of `np.unique(axis=0)`'s sort on the planner's ~10^3 rows)."""
    seen: dict[bytes, int] = {}
    first: list[int] = []
    back = np.empty(len(keys), np.int64)
    for i, row in enumerate(np.ascontiguousarray(keys)):
        back[i] = seen.setdefault(row.tobytes(), len(first))
        if back[i] == len(first):
            first.append(i)
    return np.asarray(first, np.int64), back


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


def with_exact_one_f_one_b(
    exact: Number, closed_s: Number, lay: Layout, micro_batches: Number, flushes: Number
) -> Number:
    """`closed_s` (the closed form's makespan) with the exact 1F1B makespan where `exact` holds
    (non-interleaved 1F1B): F flushes run F schedules of m / F micro-batches one after the other
    (`specs.rules.flushes_rule`: F divides m)."""
    split = lay.split
    ends = (forward_share_s(lay.first, lay.c_first), lay.c_first, forward_share_s(lay.last, lay.c_last), lay.c_last)
    middles = (forward_share_s(lay.middle, lay.c_mid), lay.c_mid, lay.f_mid_sum, lay.c_mid_sum)
    layers = (split.middle_max, split.middle_min, split.middle_total)
    values = (exact, closed_s, lay.p, micro_batches, flushes, *ends, *middles, *layers)
    arrays = np.broadcast_arrays(*(np.asarray(x) for x in values))
    flat = [x.reshape(-1) for x in arrays]
    rows = np.flatnonzero(flat[0])
    out = flat[1].astype(float).copy()
    f = flat[4][rows]
    pick = [x[rows] for x in flat[5:]]
    each = flat[3][rows] / f  # micro-batches per schedule
    out[rows] = f * uneven_stages_s(
        tuple(pick[:4]), tuple(pick[4:8]), tuple(pick[8:]), split.counts, flat[2][rows], each
    )  # type: ignore[arg-type]
    return out.reshape(arrays[0].shape) if arrays[0].ndim else out.reshape(())
