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
built by running one round on unit states) instead of G rounds, or, once the ends settle in round
g* (each grows by lambda = max_j (f_j + b_j) a round from then on), the rest of the pipeline from
round min(G, g*) plus (G - g*) lambda where G > g*: the same arithmetic for a plan whatever the
plans priced beside it, so an array's rows are bit for bit each plan's own numbers; the warm-up and the last min(p - 1,
m) rounds (stage i's i forwards left, then cool-down backwards) run on the stages still running
forwards, the backward-only ones in closed form (`_cool_down`). Only max and +:
the makespan never decreases when a duration grows, also in floating point (both are monotone
under rounding). For equal stages it is (m + p - 1)(f + b), the closed form
(`engines.pipeline.pipeline_makespan_s`); for unequal ones it is the simulator's pipeline end
where sends block (`tests/test_pipeline_1f1b.py`); where they overlap (`Plan.overlap_p2p`) the
simulator prices each boundary's own send and ends up to ~0.3% of the bubble later (review 44).
"""

from __future__ import annotations

import numpy as np

from shardwise.specs._checks import Number

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
    dp), each by the same arithmetic whatever the plans beside it (so an array's rows are its
    plans' own numbers to the last bit): plans with the same stages and m >= p - 1 start the G
    uniform rounds from the same state; their stages' ends are run until they settle (round g*:
    they grow by lambda a round from then on, max-plus being homogeneous) or their G is reached,
    and a plan takes the makespan from the ends of round s = min(G, g*), plus (G - s) lambda."""
    rounds = m - np.minimum(p - 1, m)
    key = np.column_stack([f, b, np.where(rounds > 0, -1.0, m)])  # short pipelines: m sets the warm-up
    first, group = distinct_rows(key)
    f_g, b_g = f[first], b[first]
    w0 = np.minimum(p - 1, m[first])  # the most warm-up forwards, min(p - 1, m)
    stage = np.arange(p)
    warm = np.minimum(p - 1 - stage[None, :], m[first][:, None])  # (groups, p) warm-up forwards w_i
    # warm-up: a pipeline of forwards alone, whose k-th forward on stage i ends at
    # f_0 + ... + f_i + k max(f_0 .. f_i) (the longest path waits k times on the slowest stage so far)
    reach = np.cumsum(f_g, axis=-1) + (warm - 1) * np.maximum.accumulate(f_g, axis=-1)
    last_f = np.where(warm > 0, reach, 0.0)  # x(-1): also each stage's last operation
    fe, be, of, stop = _uniform_rounds(last_f, f_g, b_g, group, rounds, p)
    lam = (f_g + b_g).max(axis=-1)[group]
    if p == 1:
        span = be[:, 0]
    else:  # the last w0 rounds: stage i runs its forward while t < w0 - w_i, then only backwards
        at = group[_first_of(of)]
        span = _cool_down(fe, be, f_g[at], b_g[at], p - 1 - w0[at])
    return span[of] + (rounds - stop) * lam


def _first_of(of: np.ndarray) -> np.ndarray:
    """The first member reading each state (`of`: the state each member reads, 0 .. k - 1)."""
    first = np.full(int(of.max()) + 1, len(of), np.int64)
    np.minimum.at(first, of, np.arange(len(of)))
    return first


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
    # stages first, plans second: round t's upper stages are one contiguous block of rows
    fe, be, f_t, tail_t, after_t = (np.ascontiguousarray(x.T) for x in (fe, be, f, tail, after))
    last = p - 2 - idle  # the last round t = w0 - 1
    rows = np.arange(n)
    enter = np.full((p - 1, n), -np.inf)
    for t in range(int(last.max()) + 1):
        nf = np.maximum(be[t + 1 :], fe[t:-1])
        nf += f_t[t + 1 :]
        fe[t + 1 :] = nf
        nf -= after_t[t + 1 :]
        nb = tail_t[t + 1 :] + np.maximum.accumulate(nf[::-1], axis=0)[::-1]
        at = np.minimum(idle + t, p - 2)
        enter[t] = np.maximum(be[at, rows], nb[at - t, rows])
        be[t + 1 :] = nb
    enter = enter.T
    rounds = np.arange(p - 1)
    at = np.minimum(idle[:, None] + rounds, p - 2)
    fill = np.take_along_axis(np.cumsum(b, axis=-1), at, axis=-1)
    slow = np.take_along_axis(np.maximum.accumulate(b, axis=-1), at, axis=-1)
    stair = np.where(rounds <= last[:, None], fill + (last[:, None] - rounds) * slow, -np.inf)
    return (enter + stair).max(axis=-1)


def _uniform_rounds(
    start: np.ndarray, f: np.ndarray, b: np.ndarray, group: np.ndarray, rounds: np.ndarray, p: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The uniform rounds (every stage runs a forward and a backward) of each group's stages
    (`start`: x(-1), its forwards' and backwards' ends alike; `f`, `b`: (groups, p)) for its
    members (`group`, `rounds`: G per member). Returns the states the members read (fe, be: (k, p)),
    the state each member reads and the round s it is from.

    Past the first 2p rounds (what any path needs to reach a stage and leave it: the rest of it
    repeats one stage's round) every end grows by lambda = max_j (f_j + b_j) a round once the
    paths through slower stages have fallen behind, and from the round g* in which no end grew by
    other than lambda, none will (those paths only fall further behind): a member with G >= g*
    reads the state of round g* (s = g*, checked every round from `_SETTLE_FROM`), one with
    G < g* that of round G. Members of stages not settled after `_SETTLE_ROUNDS` more rounds take
    the rest as M^(G - g) by squaring (`_power`), each its own (s = G)."""
    groups = len(f)
    lam = (f + b).max(axis=-1)
    top = np.zeros(groups, np.int64)
    np.maximum.at(top, group, rounds)
    states_f: list[np.ndarray] = []
    states_b: list[np.ndarray] = []
    of = np.empty(len(group), np.int64)
    stop = rounds.copy()
    count = 0

    def keep(members: np.ndarray, fe: np.ndarray, be: np.ndarray, per_group: np.ndarray | None) -> None:
        """Record the states `fe`, `be` (one per group of `per_group`, or per member where None)."""
        nonlocal count
        if members.size == 0:
            return
        if per_group is None:
            states_f.append(fe)
            states_b.append(be)
            of[members] = count + np.arange(members.size)
            count += members.size
            return
        used, back = np.unique(group[members], return_inverse=True)
        pos = np.searchsorted(per_group, used)
        states_f.append(fe[pos])
        states_b.append(be[pos])
        of[members] = count + back
        count += used.size

    alive = np.arange(groups)
    keep(np.flatnonzero(rounds == 0), start, start, alive)
    alive = np.flatnonzero(top > 0)
    cur_f, cur_b = start[alive], start[alive]
    f_r, b_r, lam_r = f[alive], b[alive], lam[alive]
    sums = _backward_sums(b_r)
    running = np.zeros(groups, bool)
    due = np.zeros(int(rounds.max()) + 1, bool)  # the rounds some member ends at
    due[rounds] = True
    g = 0
    while alive.size:
        if g >= 2 * p + _SETTLE_ROUNDS:
            running[alive] = True
            members = np.flatnonzero(running[group] & (rounds > g))
            pos = np.searchsorted(alive, group[members])
            pf, pb = _power(cur_f[pos], cur_b[pos], f[group[members]], b[group[members]], rounds[members] - g, p)
            keep(members, pf, pb, None)
            break
        nf, nb = _round(cur_f, cur_b, f_r, sums, None)
        g += 1
        settled = np.zeros(alive.size, bool)
        if g >= _SETTLE_FROM:
            tol = _SETTLED_RTOL * (np.abs(nb).max(axis=-1) + lam_r)
            grew = lam_r[:, None]
            step = np.maximum(np.abs(nf - cur_f - grew).max(axis=-1), np.abs(nb - cur_b - grew).max(axis=-1))
            settled = step <= tol
        on = ~settled & (top[alive] > g)
        if due[g] or not on.all():  # some member reads this round (else each group goes on)
            running[:] = False
            running[alive] = True
            now = np.zeros(groups, bool)
            now[alive[settled]] = True
            members = np.flatnonzero(running[group] & ((rounds == g) | ((rounds > g) & now[group])))
            keep(members, nf, nb, alive)
            stop[members] = g
        if on.all():
            cur_f, cur_b = nf, nb
            continue
        alive, cur_f, cur_b, f_r, b_r, lam_r = (x[on] for x in (alive, nf, nb, f_r, b_r, lam_r))
        sums = tuple(x[on] for x in sums)
    return np.concatenate(states_f), np.concatenate(states_b), of, stop


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


def distinct_rows(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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
