"""GPipe's exact makespan with unequal stages (`engines.pipeline.gpipe_makespan_s`) against the
operation-by-operation simulator, and where the closed form falls short of it (review 44 #3)."""

from __future__ import annotations

import numpy as np
import pytest

from shardwise.engines.pipeline import gpipe_makespan_s, pipeline_makespan_s
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
