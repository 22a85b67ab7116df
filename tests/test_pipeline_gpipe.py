"""GPipe's exact makespan with unequal stages (`engines.pipeline.gpipe_makespan_s`) against the
operation-by-operation simulator, where the closed form falls short of it (review 44 #3) and where it
is exact (a stage the slowest in both passes), over many plans at once (`engines.pipeline_uneven`)."""

from __future__ import annotations

import numpy as np
import pytest

from shardwise.engines.pipeline import gpipe_makespan_s, pipeline_makespan_s
from shardwise.engines.pipeline_uneven import uneven_makespans, uneven_stages_s
from shardwise.engines.schedules import gpipe
from shardwise.engines.simulator import StageTimes, simulate


def _simulated_s(f: np.ndarray, b: np.ndarray, m: int) -> float:
    z = np.zeros(len(f))
    return simulate(gpipe(len(f), m), StageTimes(f, b, z, z, z, z, z), 1, False, "gpipe").pipeline_end_s


def test_review_counter_example() -> None:
    f, b = np.array([1.0, 3.0, 1.0]), np.array([5.0, 2.0, 2.0])
    assert gpipe_makespan_s(f, b, 4) == pytest.approx(_simulated_s(f, b, 4)) == pytest.approx(38.0)
    c = f + b
    closed = pipeline_makespan_s(c[0], c[1], c[2], 3, 4, c_middle_sum=c[1])
    assert float(closed) == pytest.approx(32.0)


def test_matches_simulator_on_random_stages() -> None:
    rng = np.random.default_rng(44)
    for _ in range(300):
        p, m = int(rng.integers(1, 9)), int(rng.integers(1, 40))
        f, b = rng.uniform(0.05, 3.0, p), rng.uniform(0.05, 4.0, p)
        assert gpipe_makespan_s(f, b, m) == pytest.approx(_simulated_s(f, b, m), rel=1e-9)


def test_equal_stages_give_the_closed_form() -> None:
    f, b = np.full(5, 1.5), np.full(5, 2.5)
    closed = pipeline_makespan_s(4.0, 4.0, 4.0, 5, 7)
    assert gpipe_makespan_s(f, b, 7) == pytest.approx(float(closed))


def test_a_stage_slowest_in_both_passes_gives_the_closed_form():
    """Where one stage has the longest forward and the longest backward, its c is max c and
    sum f + sum b = sum c: the closed form is exact (the engine keeps it there, `uneven_makespans`)."""
    rng = np.random.default_rng(45)
    for _ in range(100):
        p, m = int(rng.integers(2, 9)), int(rng.integers(1, 40))
        f, b = rng.uniform(0.05, 3.0, p), rng.uniform(0.05, 4.0, p)
        k = int(rng.integers(p))
        f[k], b[k] = f.max() * 1.1, b.max() * 1.1
        c = f + b
        mids = c[1:-1]
        closed = pipeline_makespan_s(c[0], mids.max() if p > 2 else 0.0, c[-1], p, m, c_middle_sum=mids.sum())
        assert gpipe_makespan_s(f, b, m) == pytest.approx(float(closed), rel=1e-12)


def _stages(p, m, f_first, c_first, f_last, c_last, per_f, per_c, mids):
    """One plan's (ends, middles, layers) as the training engine gives them, and its stage vectors."""
    top = max(mids, default=0)
    ends = (f_first, c_first, f_last, c_last)
    mid = (top * per_f, top * per_c, sum(mids) * per_f, sum(mids) * per_c)
    layers = (top, min(mids, default=0), sum(mids))
    f = np.array([f_first, *(n * per_f for n in mids), f_last])
    c = np.array([c_first, *(n * per_c for n in mids), c_last])
    return ends, mid, layers, f, c


def test_many_plans_at_once_end_where_the_simulator_ends_them_and_as_each_alone():
    """GPipe and 1F1B plans of depths 2 to 18 in one call: each GPipe plan where the simulator
    ends it, says whether the closed form is exact, and every plan's number is its own alone, bit
    for bit."""
    rng = np.random.default_rng(46)
    plans = []
    for _ in range(40):
        p, m = int(rng.integers(2, 19)), int(rng.integers(1, 30))
        n = int(rng.integers(2, 6))
        mids = sorted((n + int(rng.random() < 0.5) for _ in range(p - 2)), reverse=True)
        ends = rng.uniform(0.2, 1.5, 2)
        plans.append((p, m, ends[0], ends[0] * rng.uniform(1.5, 4), ends[1], ends[1] * rng.uniform(1.5, 4), mids))
    gp = rng.random(len(plans)) < 0.6
    built = [_stages(p, m, a, b, c, d, 0.1, 0.3, mids) for p, m, a, b, c, d, mids in plans]
    cols = [tuple(np.array(x) for x in zip(*(row[i] for row in built), strict=True)) for i in range(3)]
    p, m = np.array([x[0] for x in plans]), np.array([x[1] for x in plans])
    got, closed = uneven_makespans(*cols, None, p, m, gp)
    for i, (_, _, _, f, c) in enumerate(built):
        alone = uneven_stages_s(*(tuple(x[i] for x in col) for col in cols), None, p[i], m[i], gp[i])
        assert got[i] == alone
        if gp[i]:
            assert got[i] == pytest.approx(_simulated_s(f, c - f, int(m[i])), rel=1e-9)
            top = (f == f.max()) & (c - f == (c - f).max())
            assert closed[i] == top.any()
        else:
            assert not closed[i]
