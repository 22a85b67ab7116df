"""Issue #33: the exact makespan of non-interleaved 1F1B (`engines.pipeline_1f1b`), a max-plus
recurrence over the schedule's operations, against the discrete-event simulator that runs the same
schedule operation by operation, the closed form's bounds, and monotonicity in every duration."""

from __future__ import annotations

import numpy as np
import pytest

from shardwise.engines.pipeline import pipeline_makespan_s
from shardwise.engines.pipeline_1f1b import one_f_one_b_s
from shardwise.engines.pipeline_uneven import uneven_stages_s
from shardwise.engines.schedules import one_f_one_b
from shardwise.engines.simulator import StageTimes, simulate


def _simulated(f: np.ndarray, b: np.ndarray, m: int) -> float:
    zero = np.zeros(f.size)
    times = StageTimes(f, b, zero, zero, zero, zero, zero)
    return simulate(one_f_one_b(f.size, m), times, 1, False, "1f1b").pipeline_end_s


def _draws(seed: int, n: int) -> list[tuple[np.ndarray, np.ndarray, int]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        p, m = int(rng.integers(1, 10)), int(rng.integers(1, 70))
        out.append((rng.uniform(0.1, 2.0, p), rng.uniform(0.1, 3.0, p), m))
    return out


@pytest.mark.parametrize("seed", range(3))
def test_random_stages_end_where_the_simulator_ends_them(seed):
    for f, b, m in _draws(seed, 60):
        assert float(one_f_one_b_s(f, b, m)) == pytest.approx(_simulated(f, b, m), rel=1e-9, abs=0)


def test_many_plans_at_once_and_long_pipelines_settle_or_square():
    """Plans of one depth and any m in one call: the uniform rounds run, settle (every end growing by the
    slowest stage's c a round) or are taken by squaring where two stages are within 1e-9 (no settling in
    the rounds allowed)."""
    rng = np.random.default_rng(7)
    p, n = 6, 40
    f, b = rng.uniform(0.1, 2.0, (n, p)), rng.uniform(0.1, 3.0, (n, p))
    f[:10, 2], b[:10, 2] = f[:10, 4] * (1 + 1e-9), b[:10, 4]  # near ties: slow to settle
    m = rng.integers(1, 400, n)
    got = one_f_one_b_s(f, b, m)
    for i in range(n):
        assert got[i] == pytest.approx(_simulated(f[i], b[i], int(m[i])), rel=1e-9, abs=0)


def test_equal_stages_give_the_closed_form():
    for p, m in ((2, 1), (4, 3), (4, 16), (8, 64), (16, 300)):
        f, b = np.full(p, 0.3), np.full(p, 0.7)
        assert float(one_f_one_b_s(f, b, m)) == pytest.approx((m + p - 1) * 1.0, rel=1e-12)


def test_between_the_steady_state_and_the_closed_form():
    """Never below m max_j c_j (the slowest stage's own work); at or below the closed form
    m max c + sum c - max c where the stages split their micro-batch alike between forward and
    backward (as a layer does; drawn: b = r f, r in 1.5-2.5). Not where they split it unalike: a stage
    whose forward is short and backward long waits for backwards in its steady state (the first
    random draws that show it: p 4, m 3, 13.25 s against 12.76 s; p 7, m 24, 82.85 s against 81.51 s;
    below, p 5, m 2: 14.3 s against 13.9 s)."""
    rng = np.random.default_rng(11)
    for _ in range(300):
        p, m = int(rng.integers(2, 10)), int(rng.integers(1, 70))
        f = rng.uniform(0.1, 2.0, p)
        b = f * rng.uniform(1.5, 2.5)
        c = f + b
        exact = float(one_f_one_b_s(f, b, m))
        assert m * c.max() * (1 - 1e-12) <= exact <= (m * c.max() + c.sum() - c.max()) * (1 + 1e-12)
    f, b = np.array([1.2, 0.8, 1.1, 0.2, 0.3]), np.array([2.0, 1.3, 0.7, 2.9, 0.2])
    c = f + b
    assert float(one_f_one_b_s(f, b, 2)) == pytest.approx(_simulated(f, b, 2))
    assert float(one_f_one_b_s(f, b, 2)) == pytest.approx(14.3)  # unalike splits: above the closed form's 13.9


def test_never_faster_when_an_operation_slows():
    """Max and + only: growing any stage's forward or backward never shortens the pipeline."""
    rng = np.random.default_rng(5)
    for f, b, m in _draws(5, 80):
        base = float(one_f_one_b_s(f, b, m))
        j = int(rng.integers(0, f.size))
        for which in (f, b):
            slower = which.copy()
            slower[j] *= 1 + float(rng.uniform(1e-6, 0.5))
            grown = one_f_one_b_s(slower, b, m) if which is f else one_f_one_b_s(f, slower, m)
            assert float(grown) >= base * (1 - 1e-12)


def test_pipelines_of_several_depths_padded_in_front_end_as_they_would_alone():
    """`uneven_stages_s` prices depths 2 to 7 in one pass, shallower pipelines behind idle stages;
    each matches its own simulation (middle stages from the fullest and the sum, the fuller first)."""
    rows = []
    for p, m, mids in ((2, 5, ()), (3, 7, (4,)), (5, 2, (4, 4, 3)), (7, 20, (5, 5, 4, 4, 4))):
        f_first, c_first, f_last, c_last = 0.5, 1.4, 0.3, 1.1
        per_f, per_c = 0.1, 0.3  # a layer's forward and whole micro-batch
        rows.append((p, m, mids, (f_first, c_first, f_last, c_last), per_f, per_c))
    cols = {k: [] for k in ("p", "m", "ends", "mid", "layers")}
    for p, m, mids, ends, per_f, per_c in rows:
        top = max(mids, default=0)
        cols["p"].append(p)
        cols["m"].append(m)
        cols["ends"].append(ends)
        cols["mid"].append((top * per_f, top * per_c, sum(mids) * per_f, sum(mids) * per_c))
        cols["layers"].append((top, min(mids, default=0), sum(mids)))
    ends, mid, layers = (tuple(np.array(x).T) for x in (cols["ends"], cols["mid"], cols["layers"]))
    got = uneven_stages_s(ends, mid, layers, None, np.array(cols["p"]), np.array(cols["m"]))
    for k, (p, m, mids, e, per_f, per_c) in enumerate(rows):
        f = np.array([e[0], *(n * per_f for n in mids), e[2]][:p])
        c = np.array([e[1], *(n * per_c for n in mids), e[3]][:p])
        assert got[k] == pytest.approx(_simulated(f, c - f, m), rel=1e-9, abs=0)
        closed = float(pipeline_makespan_s(c[0], max(mids, default=0) * per_c, c[-1], p, m, 1, sum(mids) * per_c))
        assert got[k] <= closed * (1 + 1e-12)


def test_repeated_stages_with_other_micro_batches_share_their_run():
    """A planner's plans apart in dp: the same stages with other m, settled or near ties (squared or
    run on their own), and pipelines too short for any uniform round, end where the simulator ends them."""
    rng = np.random.default_rng(13)
    p = 7
    f, b = rng.uniform(0.1, 2.0, (4, p)), rng.uniform(0.1, 3.0, (4, p))
    f[1, 2], b[1, 2] = f[1, 5] * (1 + 1e-9), b[1, 5]  # slow to settle
    rows = np.repeat(np.arange(4), 6)
    m = np.array([1, 3, 6, 9, 40, 300] * 4)
    got = one_f_one_b_s(f[rows], b[rows], m)
    for i, row in enumerate(rows):
        assert got[i] == pytest.approx(_simulated(f[row], b[row], int(m[i])), rel=1e-9, abs=0)


def test_every_plan_gets_its_own_numbers_whatever_the_plans_beside_it():
    """Bit for bit: a plan's makespan in a batch (its stages shared with plans of other m, settled,
    not yet settled or squared) is the one it gets alone, in any order of the batch."""
    rng = np.random.default_rng(31)
    p = 6
    f, b = rng.uniform(0.1, 2.0, (5, p)), rng.uniform(0.1, 3.0, (5, p))
    f[1, 2], b[1, 2] = f[1, 4] * (1 + 1e-9), b[1, 4]  # near tie: squared past the settling rounds
    f[2], b[2] = 0.4, 0.9  # equal stages
    rows = np.repeat(np.arange(5), 8)
    m = np.array([1, 2, 5, 6, 8, 13, 90, 500] * 5)
    alone = np.array([one_f_one_b_s(f[r], b[r], int(k)) for r, k in zip(rows, m, strict=True)])
    for order in (np.arange(rows.size), rng.permutation(rows.size), rng.permutation(rows.size)[:7]):
        got = one_f_one_b_s(f[rows[order]], b[rows[order]], m[order])
        assert np.array_equal(got, alone[order])


def test_depths_sharing_a_bucket_are_priced_as_alone():
    """Depths 17 and 18 pad to the same 18 stages (`_depth_bucket`) in a batch and alone."""
    p, m = np.array([17, 18, 17]), np.array([40, 40, 7])
    ends = (np.full(3, 0.5), np.full(3, 1.4), np.full(3, 0.3), np.full(3, 1.1))
    mid = (np.full(3, 0.4), np.full(3, 1.2), 0.4 * (p - 2) - 0.1, 1.2 * (p - 2) - 0.3)
    layers = (np.full(3, 4.0), np.full(3, 3.0), 4.0 * (p - 2) - 1)
    got = uneven_stages_s(ends, mid, layers, None, p, m)
    for i in range(3):
        one = uneven_stages_s(*(tuple(x[i] for x in t) for t in (ends, mid, layers)), None, p[i], m[i])
        assert got[i] == one
