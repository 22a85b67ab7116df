"""`engines.deferred`: an estimate's diagnostics are computed on first read, once, with the values
an eager computation gives; the instance otherwise behaves as its class's own."""

from __future__ import annotations

import dataclasses

import numpy as np

from shardwise import presets
from shardwise.engines.deferred import Later, deferred, rebound
from shardwise.engines.result import StepBreakdown, TrainingEstimate
from shardwise.engines.training import estimate_each_training_step, estimate_training_step
from shardwise.specs import Plan, Scenario


@dataclasses.dataclass(frozen=True)
class Pair:
    a: float
    b: float
    c: float = 0.0


def test_the_deferred_fields_are_computed_once_on_first_read():
    calls = []

    def rest():
        calls.append(1)
        return {"b": 2.0, "c": 3.0}

    x = deferred(Pair, rest, a=1.0)
    assert isinstance(x, Pair) and x.a == 1.0 and not calls
    assert (x.b, x.c, x.b) == (2.0, 3.0, 2.0) and len(calls) == 1
    y = dataclasses.replace(x, a=5.0)
    assert (y.a, y.b, y.c) == (5.0, 2.0, 3.0) and len(calls) == 1
    assert [f.name for f in dataclasses.fields(x)] == ["a", "b", "c"]
    assert x == deferred(Pair, lambda: {"b": 2.0, "c": 3.0}, a=1.0)
    assert "Pair(a=1.0, b=2.0, c=3.0)" in repr(x)


def _scenario(n: int) -> Scenario:
    rng = np.random.default_rng(5)
    tp = rng.choice([1, 2, 4, 8], n)
    pp = rng.choice([1, 2, 4], n)
    dp = 64 // (tp * pp)
    plan = Plan(tp=tp, pp=pp, dp=dp, global_batch=dp * rng.integers(1, 9, n), recompute=rng.integers(0, 3, n))
    return Scenario(presets.model("gpt-96l-4096h"), presets.system("dgx-a100", nodes=8), plan)


def test_a_field_given_as_later_is_computed_apart_on_its_own_first_read():
    calls = []

    def rest():
        calls.append("rest")
        return {"c": 3.0}

    def b():
        calls.append("b")
        return 2.0

    x = deferred(Pair, rest, a=1.0, b=Later(b))
    assert x.a == 1.0 and not calls
    assert x.c == 3.0 and calls == ["rest"]  # the others do not compute b
    y = rebound(x, a=4.0)
    assert (x.b, y.b, x.b) == (2.0, 2.0, 2.0) and calls == ["rest", "b"]  # once, shared with the copy
    z = deferred(Pair, rest, a=1.0, b=Later(b))
    assert z.b == 2.0 and calls == ["rest", "b", "b"] and "_compute" in vars(z)  # b alone: c not yet
    assert z == x and type(z) is type(x)


def test_a_training_estimate_prices_its_diagnostics_only_when_read():
    est = estimate_each_training_step(_scenario(50))
    assert "_compute" in vars(est)  # the step time is there; nothing else yet
    assert "breakdown" not in vars(est) and "memory" not in vars(est)
    eager = estimate_each_training_step(_scenario(50))
    total = eager.memory.total_bytes
    assert "breakdown" not in vars(eager)  # the memory alone computes no diagnostics
    np.testing.assert_array_equal(total, est.memory.total_bytes)
    np.testing.assert_allclose(est.breakdown.total_s, est.step_time_s, rtol=1e-12)
    assert "_compute" not in vars(est) and isinstance(est.breakdown, StepBreakdown)
    assert isinstance(est, TrainingEstimate) and np.all(est.mfu > 0)


def test_diagnostics_read_through_the_distinct_path_match_every_element_priced():
    scn = _scenario(20_000)  # repeats: priced once per distinct plan, gathered lazily
    fast, each = estimate_training_step(scn), estimate_each_training_step(scn)
    for name in ("compute_s", "tp_comm_s", "pp_bubble_s", "dp_comm_s", "pp_p2p_s"):
        np.testing.assert_array_equal(getattr(fast.breakdown, name), getattr(each.breakdown, name))
    np.testing.assert_array_equal(fast.bubble_fraction, each.bubble_fraction)
    np.testing.assert_array_equal(fast.hidden_comm_s["tp_comm"], each.hidden_comm_s["tp_comm"])
    np.testing.assert_array_equal(fast.mfu, each.mfu)


def test_an_error_while_computing_is_raised_again_on_the_next_read():
    def broken():
        raise ValueError("no")

    x = deferred(Pair, broken, a=1.0)
    for _ in range(2):
        try:
            _ = x.b
        except ValueError as exc:
            assert str(exc) == "no"
        else:
            raise AssertionError("expected the error")
