"""The planner's shortcuts give the numbers of the long way, bit for bit: a few thousand plans
priced per group of plans that share their costs (`engines.distinct.GROUP_MIN_CONFIGURATIONS`),
and the memory of the plans tried with layers recomputed whole priced on rows of one checked
scenario (`analyses.plan_recompute.memory_pricer`, `engines.distinct.rows_of`)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from shardwise.analyses import plan_recompute
from shardwise.analyses.plan_search import columns_scenario
from shardwise.engines import distinct
from shardwise.engines.training import estimate_training_step, training_memory
from shardwise.requests.plan import PlanRequest
from shardwise.specs import memo

# the explorer's default planner: 3,116 plans, fewer than specs.distinct.MIN_CONFIGURATIONS
EXPLORER = "--model gpt3-175b --system dgx-a100 --nodes 8 --global-batch 64"


@pytest.fixture(scope="module")
def found():
    return PlanRequest.from_argv(EXPLORER).search()


def _numbers(found, grouping: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, np.ndarray]:
    shape = found.fits.shape
    with monkeypatch.context() as m, memo.disabled():
        m.setattr(distinct, "GROUPING", grouping)
        calls = []
        original = distinct._groups_of
        m.setattr(distinct, "_groups_of", lambda *a: calls.append(out := original(*a)) or out)
        est = estimate_training_step(columns_scenario(found.model, found.cluster, 64, found.space, found.columns))
        out = {"step": np.asarray(est.step_time_s, dtype=float), "memory": np.asarray(est.memory.total_bytes)}
        for f in dataclasses.fields(est.breakdown):
            out[f.name] = np.array(np.broadcast_to(getattr(est.breakdown, f.name), shape), dtype=float)
        out["grouped"] = np.array([c is not None for c in calls])
    return out


def test_a_few_thousand_plans_priced_per_group_are_each_ones(found, monkeypatch):
    assert distinct.GROUP_MIN_CONFIGURATIONS <= found.fits.size < distinct.MIN_CONFIGURATIONS
    grouped, each = _numbers(found, True, monkeypatch), _numbers(found, False, monkeypatch)
    assert grouped.pop("grouped").any()  # some part was priced per group
    each.pop("grouped")
    for name, values in each.items():
        np.testing.assert_array_equal(grouped[name], values, err_msg=name)


def test_the_memory_of_rows_with_a_count_is_that_of_their_own_scenario(found):
    cols = {k: v[found.columns["recompute"] == 0] for k, v in found.columns.items()}
    most = plan_recompute.chunk_layers_max(found.model, cols) - 1
    rows = np.flatnonzero(most >= 1)[::7]
    n = 1 + np.arange(rows.size) % most[rows]
    assert rows.size > 50 and np.unique(n).size > 3
    price = plan_recompute.memory_pricer(found.model, found.cluster, 64, found.space, cols)
    for part in (rows, rows[:1]):  # many rows, and one
        k = n[: part.size]
        taken = {**{c: v[part] for c, v in cols.items()}, "recompute_layers": k}
        own = columns_scenario(found.model, found.cluster, 64, found.space, taken)
        expected = np.broadcast_to(np.asarray(training_memory(own).total_bytes, dtype=float), k.shape)
        np.testing.assert_array_equal(price(part, k), expected)
    assert np.unique(price(rows, n)).size > 10  # the counts tell the plans apart


def test_a_layer_priced_twice_in_one_scenario_is_each_pricing(found, monkeypatch):
    # `recompute_whole.whole_layer_extra` over many plans prices each twice in one scenario (its own
    # recomputation and full): the numbers of the two pricings apart, field by field
    from shardwise.engines import costs, recompute_whole

    cols = {k: v[:700] for k, v in found.columns.items()}
    assert np.unique(cols["recompute"]).size > 1  # plans of several recomputations
    scn = columns_scenario(found.model, found.cluster, 64, found.space, cols)
    with memo.disabled():
        once = recompute_whole.whole_layer_extra(scn)
        calls = []
        monkeypatch.setattr(distinct, "rows_of", lambda *a: calls.append(1))  # None: two pricings
        apart = recompute_whole.whole_layer_extra(scn)
    assert calls
    for f in costs.FIELDS:
        np.testing.assert_array_equal(np.asarray(getattr(once, f)), np.asarray(getattr(apart, f)), err_msg=f)
    assert np.any(np.asarray(once.compute_backward_s) > 0)  # the backward reruns a forward where the plan did not
