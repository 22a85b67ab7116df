"""Pipeline schedules as data (engines/schedules.py): the operation orders written out by hand for
small cases, the rules every schedule must keep, and the bubbles the literature gives for them."""

from collections import Counter

import numpy as np
import pytest

from shardwise.engines.schedules import (
    SCHEDULES,
    SPLIT_BACKWARD,
    B,
    F,
    Op,
    W,
    gpipe,
    interleaved,
    one_f_one_b,
    zb_h1,
)
from shardwise.engines.simulator import StageTimes, simulate
from shardwise.specs import Schedule


def ops(text: str) -> list[Op]:
    """'F0 B0 W0 F1.1' -> ops: kind, micro-batch, and .chunk when not 0."""
    out = []
    for tok in text.split():
        mb, _, chunk = tok[1:].partition(".")
        out.append(Op({"F": F, "B": B, "W": W}[tok[0]], int(mb), int(chunk or 0)))
    return out


def equal_times(p: int, tf: float = 1.0, tb: float = 2.0, tw: float = 0.0) -> StageTimes:
    z = np.zeros(p)
    return StageTimes(np.full(p, tf), np.full(p, tb), np.full(p, tw), z, z, z, z)


def in_flight_peak(stage: list[Op], freed_by: int) -> int:
    """Micro-batches (per chunk) whose forward has run and whose activations are not yet freed."""
    held = peak = 0
    for op in stage:
        held += op.kind == F
        held -= op.kind == freed_by
        peak = max(peak, held)
    return peak


# -- the orders, by hand -------------------------------------------------------------------------


def test_gpipe_runs_all_forwards_then_all_backwards():
    assert gpipe(3, 4) == [ops("F0 F1 F2 F3 B0 B1 B2 B3")] * 3


def test_1f1b_order_for_4_stages_and_8_micro_batches():
    """Narayanan et al. 2021 Fig. 4 (top): stage i warms up with p - i - 1 forwards, then
    alternates one forward and one backward, then drains the remaining backwards."""
    assert one_f_one_b(4, 8) == [
        ops("F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7"),
        ops("F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7"),
        ops("F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7"),
        ops("F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7"),
    ]


def test_1f1b_with_fewer_micro_batches_than_stages_is_gpipe():
    # warm-up min(p - i - 1, m): with m = 2 on 4 stages the first stages never reach the steady state
    assert one_f_one_b(4, 2) == [ops("F0 F1 B0 B1"), ops("F0 F1 B0 B1"), ops("F0 F1 B0 B1"), ops("F0 B0 F1 B1")]


def test_interleaved_order_for_2_stages_4_micro_batches_2_chunks():
    """Megatron-LM's interleaved 1F1B (Narayanan et al. 2021 Sec. 2.2.2): forwards go through p
    micro-batches of chunk 0, then the same p of chunk 1, ...; backwards visit the chunks in reverse.
    Warm-up on stage i: 2 (p - i - 1) + (v - 1) p forwards (4 on stage 0, 2 on stage 1)."""
    assert interleaved(2, 4, 2) == [
        ops("F0 F1 F0.1 F1.1 F2 B0.1 F3 B1.1 F2.1 B0 F3.1 B1 B2.1 B3.1 B2 B3"),
        ops("F0 F1 F0.1 B0.1 F1.1 B1.1 F2 B0 F3 B1 F2.1 B2.1 F3.1 B3.1 B2 B3"),
    ]


def test_interleaved_needs_whole_rounds_of_micro_batches():
    with pytest.raises(ValueError, match="m=6 to be a multiple of p=4"):
        interleaved(4, 6, 2)


def test_zb_h1_order_defers_i_weight_gradients_on_stage_i():
    """Qi et al. 2023 ZB-H1: stage i runs p - i - 1 warm-up forwards, i (F, B) pairs whose W waits,
    (F, B, W) triples, (B, W) pairs, and finally the i deferred W's in the cool-down."""
    assert zb_h1(4, 6) == [
        ops("F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 B3 W3 B4 W4 B5 W5"),
        ops("F0 F1 F2 B0 F3 B1 W0 F4 B2 W1 F5 B3 W2 B4 W3 B5 W4 W5"),
        ops("F0 F1 B0 F2 B1 F3 B2 W0 F4 B3 W1 F5 B4 W2 B5 W3 W4 W5"),
        ops("F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 W3 W4 W5"),
    ]


def test_the_registry_covers_every_plan_schedule():
    assert set(SCHEDULES) == {s.label for s in Schedule}
    assert set(SPLIT_BACKWARD) == {"zb-h1"}  # only ZB-H1 splits the backward


# -- rules every schedule keeps ------------------------------------------------------------------

CASES = [("gpipe", 4, 8, 1), ("1f1b", 4, 8, 1), ("1f1b", 8, 3, 1), ("zb-h1", 4, 8, 1), ("zb-h1", 6, 3, 1)]
CASES += [("interleaved", 4, 8, 2), ("interleaved", 2, 6, 3), ("interleaved", 4, 4, 4)]


@pytest.mark.parametrize(("name", "p", "m", "v"), CASES)
def test_every_operation_runs_exactly_once_on_every_stage(name, p, m, v):
    kinds = (F, B, W) if name in SPLIT_BACKWARD else (F, B)
    expected = Counter(Op(k, mb, c) for k in kinds for mb in range(m) for c in range(v))
    stages = SCHEDULES[name](p, m, v)
    assert len(stages) == p
    for stage in stages:
        assert Counter(stage) == expected


@pytest.mark.parametrize(("name", "p", "m", "v"), CASES)
def test_every_forward_precedes_its_backward_and_every_backward_its_weight_gradient(name, p, m, v):
    for stage in SCHEDULES[name](p, m, v):
        position = {op: k for k, op in enumerate(stage)}
        for mb in range(m):
            for c in range(v):
                assert position[Op(F, mb, c)] < position[Op(B, mb, c)], (name, mb, c)
                if name in SPLIT_BACKWARD:
                    assert position[Op(B, mb, c)] < position[Op(W, mb, c)], (name, mb, c)


@pytest.mark.parametrize(("name", "p", "m", "v"), CASES)
def test_micro_batches_enter_and_leave_each_chunk_in_order(name, p, m, v):
    # a stage never overtakes: micro-batch k + 1 of a chunk starts after micro-batch k (same for B)
    for stage in SCHEDULES[name](p, m, v):
        for kind in (F, B, W):
            for c in range(v):
                order = [op.micro_batch for op in stage if op.kind == kind and op.chunk == c]
                assert order == sorted(order)


@pytest.mark.parametrize(("p", "m"), [(4, 8), (8, 32), (8, 3)])
def test_1f1b_stage_i_holds_p_minus_i_micro_batches_and_gpipe_all_m(p, m):
    """Narayanan et al. 2021 Sec. 2.2.1: 1F1B caps the in-flight micro-batches at p (stage 0),
    GPipe keeps all m; ZB-H1 has the same peak as 1F1B, counted until the weight gradient frees them."""
    assert [in_flight_peak(s, B) for s in one_f_one_b(p, m)] == [min(p - i, m) for i in range(p)]
    assert [in_flight_peak(s, B) for s in gpipe(p, m)] == [m] * p
    assert max(in_flight_peak(s, W) for s in zb_h1(p, m)) == min(p, m)


# -- bubbles -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
@pytest.mark.parametrize(("p", "m"), [(4, 8), (8, 16), (2, 1), (8, 64)])
def test_bubble_is_p_minus_1_over_m_of_the_ideal_time(name, p, m):
    """Narayanan et al. 2021 Sec. 2.2.1: t_bubble / t_ideal = (p - 1) / m for GPipe and 1F1B."""
    result = simulate(SCHEDULES[name](p, m, 1), equal_times(p), 1, False, name)
    ideal = m * 3.0  # each stage: m forwards of 1 s and m backwards of 2 s
    assert (result.makespan_s - ideal) / ideal == pytest.approx((p - 1) / m)
    # the idle share of each stage over the step is then (p - 1) / (m + p - 1)
    np.testing.assert_allclose(result.stage_idle_fraction, (p - 1) / (m + p - 1))


@pytest.mark.parametrize(("p", "m", "v"), [(4, 8, 2), (4, 8, 4), (2, 6, 3)])
def test_interleaving_divides_the_bubble_by_v(p, m, v):
    """Narayanan et al. 2021 Sec. 2.2.2: (p - 1) / (v m) with v chunks per stage."""
    result = simulate(interleaved(p, m, v), equal_times(p), v, False, "interleaved")
    ideal = m * 3.0
    assert (result.makespan_s - ideal) / ideal == pytest.approx((p - 1) / (v * m))


def test_zb_h1_bubble_is_a_third_of_1f1b_when_f_b_w_are_equal():
    """Qi et al. 2023: with T_F = T_B = T_W, 1F1B's bubble is (p - 1)(T_F + T_B + T_W) and
    ZB-H1's (p - 1)(T_F + T_B - T_W), a third of it."""
    p, m = 4, 8
    zb = simulate(zb_h1(p, m), equal_times(p, 1.0, 1.0, 1.0), 1, True, "zb-h1")
    f1 = simulate(one_f_one_b(p, m), equal_times(p, 1.0, 2.0), 1, False, "1f1b")
    ideal = m * 3.0
    assert f1.makespan_s - ideal == pytest.approx((p - 1) * 3.0)
    assert zb.makespan_s - ideal == pytest.approx((p - 1) * 1.0)


def test_a_schedule_that_waits_for_itself_is_reported_as_a_deadlock():
    # stage 0 starts with B0: it waits for stage 1's gradient, which waits for stage 0's F0
    bad = one_f_one_b(2, 2)
    bad[0] = ops("B0 F0 F1 B1")
    with pytest.raises(RuntimeError, match=r"schedule 'bad' deadlocked at stage 0 \(operation 0\)"):
        simulate(bad, equal_times(2), 1, False, "bad")
