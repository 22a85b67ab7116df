"""The micro-batches a pipeline holds (`engines.training_step_memory.micro_batches_held`): as many
layer-micro-batches in flight on every stage as the plan's own micro-batches, and the fewest
that give them."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.engines.training_step_memory import micro_batches_held
from shardwise.physics.memory import layers_in_flight
from shardwise.specs import Schedule


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31))
def test_the_micro_batches_held_keep_every_stage_in_flight_as_the_plan_does(seed):
    rng = np.random.default_rng(seed)
    n = 4000
    p = rng.integers(1, 17, n)
    v = np.where(rng.random(n) < 0.5, 1, rng.integers(2, 5, n))
    m = rng.integers(1, 97, n)
    schedule = rng.integers(0, 4, n)
    layers = rng.integers(1, 13, n).astype(float)
    held = micro_batches_held(p, v, m, schedule)
    assert np.all((held >= 1) & (held <= m))
    pf = p.astype(float)
    for stage in (0, 1, pf - 1):
        mine = layers_in_flight(layers, pf, v, m.astype(float), schedule, stage)
        kept = layers_in_flight(layers, pf, v, held.astype(float), schedule, stage)
        assert np.array_equal(mine, kept)
    # the fewest: one fewer micro-batch leaves the first stage less in flight
    fewer = held < m
    first = layers_in_flight(layers, pf, v, (held - 1).astype(float), schedule, 0)
    assert np.all(first[fewer] < layers_in_flight(layers, pf, v, m.astype(float), schedule, 0)[fewer])


def test_gpipe_holds_every_micro_batch_and_1f1b_at_most_p():
    m = np.array([1, 3, 9, 40])
    assert micro_batches_held(4, 1, m, Schedule.GPIPE).tolist() == [1, 3, 9, 40]
    assert micro_batches_held(4, 1, m, Schedule.ONE_F_ONE_B).tolist() == [1, 3, 4, 4]
    assert micro_batches_held(4, 1, m, Schedule.ZB_H1).tolist() == [1, 3, 4, 4]
    # interleaved, p = 4, v = 2: the first stage's warm-up is 2 * 3 + 4 + 1 = 11 chunks, 6 micro-batches
    assert micro_batches_held(4, 2, m, Schedule.INTERLEAVED).tolist() == [1, 3, 6, 6]
