"""Pricing each distinct configuration once (`engines.distinct`) gives the same numbers as pricing
every element."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise import presets
from shardwise.engines import distinct
from shardwise.engines.result import TrainingEstimate
from shardwise.engines.training import estimate_each_training_step, estimate_training_step
from shardwise.specs import Plan, Scenario, memo


def same(a: object, b: object, path: str = "") -> None:
    """Every number of two results equal (the scenario aside: the distinct path keeps the given one)."""
    if dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            if f.name != "scenario":
                same(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}")
    elif isinstance(a, dict):
        assert a.keys() == b.keys()  # type: ignore[attr-defined]
        for k in a:
            same(a[k], b[k], f"{path}.{k}")  # type: ignore[index]
    else:
        x, y = np.broadcast_arrays(np.asarray(a), np.asarray(b))
        assert np.array_equal(x, y, equal_nan=True), path


def random_scenario(seed: int, n: int, model: str = "gpt-96l-4096h", nodes: int = 8) -> Scenario:
    rng = np.random.default_rng(seed)
    tp = rng.choice([1, 2, 4, 8], n)
    pp = rng.choice([1, 2, 4, 8], n)
    dp = 8 * nodes // (tp * pp)
    mb = rng.choice([1, 2], n)
    plan = Plan(
        tp=tp,
        pp=pp,
        dp=dp,
        micro_batch=mb,
        global_batch=dp * mb * rng.integers(1, 3, n),
        recompute=rng.integers(0, 3, n),
        zero_stage=rng.integers(0, 4, n),
        sequence_parallel=rng.random(n) < 0.5,
    )
    return Scenario(presets.model(model), presets.system("dgx-h100", nodes=nodes), plan)


def deduplicated(scn: Scenario) -> bool:
    """Whether `evaluate_distinct` prices this scenario once per distinct configuration."""
    seen = []
    distinct.evaluate_distinct(lambda s: seen.append(s) or 0.0, scn)
    return seen[0] is not scn


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**31))
def test_random_layouts_price_the_same_once_per_distinct_one(seed):
    scn = random_scenario(seed, 12000)
    assert deduplicated(scn)
    fast, each = estimate_training_step(scn), estimate_each_training_step(scn)
    same(fast, each)  # every field read (each gathered on first read)
    # the properties, computed over the distinct configurations and gathered, are every element's
    for name in ("tokens_per_s", "mfu", "hfu", "fits_in_memory", "model_tflops_per_gpu"):
        assert np.array_equal(getattr(fast, name), getattr(each, name)), name
    lazy = estimate_training_step(scn)
    assert np.array_equal(lazy.memory.total_bytes, each.memory.total_bytes)
    assert np.array_equal(lazy.breakdown.total_s, each.breakdown.total_s)
    assert isinstance(fast, TrainingEstimate) and isinstance(fast.memory, type(each.memory))
    assert fast.scenario is scn
    replaced = dataclasses.replace(fast, bubble_fraction=0.0)
    assert replaced.bubble_fraction == 0.0  # a replaced estimate is a plain one: its properties work
    assert np.array_equal(replaced.mfu, each.mfu) and np.array_equal(replaced.breakdown.total_s, each.breakdown.total_s)
    assert [f.name for f in dataclasses.fields(fast.breakdown)] == [f.name for f in dataclasses.fields(each.breakdown)]
    assert np.shape(fast.step_time_s) == (12000,)


def test_mixture_of_experts_layouts_too():
    rng = np.random.default_rng(1)
    n = 5000
    ep = rng.choice([1, 2, 4, 8], n)
    plan = Plan(dp=16, ep=ep, etp=1, global_batch=16 * rng.integers(1, 5, n), moe_dispatcher="flex",
                moe_overlap=ep > 1, expert_imbalance=1.0)  # fmt: skip
    scn = Scenario(presets.model("qwen3-30b-a3b"), presets.system("dgx-h100", nodes=2), plan)
    assert deduplicated(scn)
    same(estimate_training_step(scn), estimate_each_training_step(scn))


def test_grids_and_continuous_values_are_priced_as_given():
    """A grid of broadcast axes (every point differs) and continuous values skip the bookkeeping."""
    gb = np.arange(1, 1201)[:, None] * 512
    mb = np.array([1, 2, 4, 8])[None, :]
    grid = Scenario(presets.model("llama3-8b"), presets.system("dgx-h100", nodes=8),
                    Plan(dp=64, global_batch=gb, micro_batch=mb))  # fmt: skip
    assert not deduplicated(grid)
    bandwidth = np.random.default_rng(0).uniform(100e9, 900e9, 5000)
    cluster = presets.system("dgx-h100", nodes=8)
    cluster = cluster.with_(intra_node_link=cluster.intra_node_link.with_(bandwidth_bytes_per_s=bandwidth))
    assert not deduplicated(Scenario(presets.model("llama3-8b"), cluster, Plan(dp=64, global_batch=64)))
    assert not deduplicated(random_scenario(3, distinct.MIN_CONFIGURATIONS - 1))


@pytest.mark.parametrize("n", [10, distinct.MIN_CONFIGURATIONS + 1])
def test_small_inputs_are_priced_directly(n):
    scn = random_scenario(5, n)
    same(estimate_training_step(scn), estimate_each_training_step(scn))


@pytest.mark.parametrize("overlap", [True, False])
def test_one_zero_stage_prices_as_an_array_of_stages_does(overlap):
    """A scalar ZeRO stage (or overlap flag) computes only its own branch of the data-parallel
    communication; the numbers are those the array path selects."""
    model, cluster = presets.model("llama3-70b"), presets.system("dgx-h100", nodes=8)
    batches = np.arange(1, 40)[:, None] * 32
    kw = {"tp": 8, "pp": 2, "dp": 4, "global_batch": batches, "overlap_grad_reduce": overlap}
    mixed = estimate_each_training_step(Scenario(model, cluster, Plan(zero_stage=np.array([0, 1, 2, 3]), **kw)))
    for z in range(4):
        one = estimate_each_training_step(Scenario(model, cluster, Plan(zero_stage=z, **kw)))
        for field in ("step_time_s",):
            x, y = np.broadcast_arrays(np.asarray(getattr(one, field)), np.asarray(getattr(mixed, field))[:, z : z + 1])
            assert np.array_equal(x, y)
        x, y = np.broadcast_arrays(
            np.asarray(one.breakdown.dp_comm_s), np.asarray(mixed.breakdown.dp_comm_s)[:, z : z + 1]
        )
        assert np.array_equal(x, y)


def _each_without_grouping(scn: Scenario, monkeypatch: pytest.MonkeyPatch) -> TrainingEstimate:
    with monkeypatch.context() as m:
        m.setattr(distinct, "GROUPING", False)
        return estimate_each_training_step(scn)


def random_plans(seed: int, n: int, model: str, nodes: int) -> Scenario:
    """Flat random plans over every field a planner varies (tp, pp, dp, cp, micro-batch, virtual
    stages and schedule, recompute, SP, ZeRO, an uneven split), on clusters of 1..nodes servers."""
    rng = np.random.default_rng(seed)
    m = presets.model(model)
    servers = rng.integers(1, nodes + 1, n)
    tp = rng.choice([1, 2, 4, 8], n)
    pp = rng.choice([1, 2, 4], n)
    cp = rng.choice([1, 2], n) if m.seq_len >= 4096 else np.ones(n, dtype=np.int64)
    dp = 8 * servers // (tp * pp * cp)
    ok = (dp >= 1) & (8 * servers % (tp * pp * cp) == 0)
    tp, pp, cp, dp, servers = tp[ok], pp[ok], cp[ok], dp[ok], servers[ok]
    k = tp.size
    mb = rng.choice([1, 2], k)
    vpp = np.where((pp > 1) & (rng.random(k) < 0.5), 2, 1)
    schedule = np.where(vpp > 1, 2, rng.choice([0, 1, 3], k) * (pp > 1) + (pp == 1))
    plan = Plan(
        tp=tp,
        pp=pp,
        dp=dp,
        cp=cp,
        micro_batch=mb,
        global_batch=dp * mb * pp * rng.integers(1, 4, k),
        vpp=vpp,
        schedule=schedule,
        recompute=rng.integers(0, 3, k),
        zero_stage=rng.integers(0, 2, k) * (dp > 1),
        sequence_parallel=(tp > 1) & (rng.random(k) < 0.5),
    )
    cluster = presets.system("dgx-h100", nodes=nodes)
    return Scenario(m, cluster.with_(nodes=servers), plan)


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2**31), model=st.sampled_from(["gpt-96l-4096h", "llama3-8b"]))
def test_grouped_stage_costs_are_the_costs_of_every_plan(seed, model):
    """The per-micro-batch stage costs priced once per group of plans that differ only in fields
    they do not read (dp, the schedule, ZeRO, ...) are every plan's own."""
    scn = random_plans(seed, 8000, model, nodes=16)
    with pytest.MonkeyPatch.context() as mp:
        reference = _each_without_grouping(scn, mp)
    groups = []
    original = distinct._rebuild

    def spy(obj, values, path=(), checked=False):
        groups.append(len(next(iter(values.values()))))
        return original(obj, values, path, checked)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(distinct, "_rebuild", spy)
        grouped = estimate_each_training_step(scn)
    assert groups and groups[0] < scn.plan.tp.size / 4  # it did group
    same(grouped, reference)


def test_grouping_leaves_grids_and_small_inputs_alone():
    called = []
    scn = random_scenario(3, 100)
    distinct.evaluate_grouped(lambda s: called.append(s) or 0.0, scn, frozenset())
    gb = np.arange(1, 1201)[:, None] * 512
    grid = Scenario(presets.model("llama3-8b"), presets.system("dgx-h100", nodes=8),
                    Plan(dp=64, global_batch=gb, micro_batch=np.array([1, 2, 4, 8])[None, :]))  # fmt: skip
    distinct.evaluate_grouped(lambda s: called.append(s) or 0.0, grid, frozenset())
    assert called == [scn, grid]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(-50, 50), max_size=40))
def test_sorted_distinct_is_np_unique(values):
    from shardwise.arrays import sorted_distinct

    assert (
        sorted_distinct(np.array(values, dtype=np.int64)).tolist()
        == np.unique(np.array(values, dtype=np.int64)).tolist()
    )


def test_where_with_one_condition_returns_the_branch_itself():
    from shardwise.arrays import plus, where

    a, b = np.arange(3.0), np.ones(3)
    assert where(True, a, b) is a and where(np.bool_(False), a, b) is b
    assert np.array_equal(where(np.array([True, False, True]), a, b), np.where([True, False, True], a, b))
    assert plus(a, 0.0) is a and np.array_equal(plus(a, 1.0), a + 1.0)


def test_grouped_collective_prices_follow_every_field_they_read():
    """The data-parallel collectives are priced once per group of plans that agree on what they
    read (COLLECTIVE_READS): an uneven split changes a stage's parameters, so plans that differ
    only in it must not share prices."""
    base = random_plans(5, 8000, "gpt-96l-4096h", nodes=16)
    plan = base.plan
    rng = np.random.default_rng(5)
    first = np.where(plan.pp > 1, rng.choice([0, 10, 20], plan.tp.size), 0)
    scn = Scenario(base.model, base.cluster, dataclasses.replace(plan, first_stage_layers=first))
    with pytest.MonkeyPatch.context() as mp:
        reference = _each_without_grouping(scn, mp)
    same(estimate_each_training_step(scn), reference)


def _wide_plans(seed: int, n: int, most_batches: int = 2) -> Scenario:
    """Random plans whose distinct configurations are many (more than MIN_CONFIGURATIONS), as
    benchmarks/bench_bulk.py's wide draw: every ZeRO stage, schedule, SP, cp and overlap, and up
    to `most_batches` micro-batches per replica."""
    rng = np.random.default_rng(seed)
    tp, pp = rng.choice([1, 2, 4, 8], n), rng.choice([1, 2, 4, 8], n)
    cp = np.where(tp * pp < 64, rng.choice([1, 2], n), 1)
    dp = 64 // (tp * pp * cp)
    mb = rng.choice([1, 2, 4], n)
    schedule = np.where(pp < 2, 1, rng.choice([0, 1, 2, 3], n))
    batches = rng.integers(1, most_batches + 1, n)
    batches = np.where(schedule == 2, pp * np.maximum(batches // pp, 1), batches)
    plan = Plan(tp=tp, pp=pp, cp=cp, dp=dp, micro_batch=mb, global_batch=dp * mb * batches,
                recompute=rng.integers(0, 3, n), zero_stage=rng.integers(0, 4, n), schedule=schedule,
                vpp=np.where(schedule == 2, 2, 1), sequence_parallel=rng.random(n) < 0.5,
                overlap_grad_reduce=rng.random(n) < 0.5)  # fmt: skip
    return Scenario(presets.model("gpt-96l-4096h"), presets.system("dgx-a100", nodes=8), plan)


@pytest.mark.parametrize("host_kernel_s", [0.0, 2e-4])
def test_kept_parts_priced_per_group_and_zero_stages_run_by_run_are_every_configurations(host_kernel_s):
    """Over a distinct plan of many configurations, the kept parts of the model priced once per
    distinct combination of their array arguments (`specs.grouped`), the data-parallel exposure
    priced run by run of one ZeRO stage (`engines.dp_comm.exposed_by_runs`), and the layout terms
    and the memory's terms priced once per group of plans that differ only in the batch give
    every number of pricing each configuration with all of them turned off; with a host time per
    kernel too, where many layers are host-bound (the run-by-run path's ZeRO-3 window and wait)."""
    from shardwise.engines import dp_comm
    from shardwise.specs import grouped

    wide = _wide_plans(11, 60000)
    scn = Scenario(wide.model, wide.cluster, dataclasses.replace(wide.plan, host_kernel_s=host_kernel_s))
    found = scn.__dict__.get("_distinct")
    assert found is not None and found.count > distinct.MIN_CONFIGURATIONS
    runs = dp_comm.zero_stage_runs(found.spec.plan.zero_stage)
    assert runs is not None and sorted(k for k, _, _ in runs) == [0, 1, 2, 3]  # the rows come by ZeRO stage
    calls = []
    original = grouped._groups

    def spy(arrays, n):
        out = original(arrays, n)
        calls.append(out is not None)
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(grouped, "_groups", spy)
        fast = estimate_training_step(scn)
        _ = (fast.memory.total_bytes, fast.breakdown.total_s)  # computed on first read, here
    assert any(calls)  # some parts were priced per group
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(grouped, "GROUPED_CALLS", False)
        mp.setattr(dp_comm, "MOST_RUNS", 0)
        mp.setattr(distinct, "GROUPING", False)  # the layout terms and the memory's too
        memo.clear_all()
        each = estimate_training_step(Scenario(scn.model, scn.cluster, scn.plan))
        same(fast, each)


def test_the_memory_of_plans_holding_the_same_micro_batches_is_priced_once_and_is_each_ones():
    """Over plans with up to 32 micro-batches (most beyond what 1F1B, ZB-H1 and the interleaved
    warm-up keep in flight), the memory priced once per group of a layout and the micro-batches
    it holds (`training_step_memory`) is every configuration's own, field by field."""
    from shardwise.engines import training_step_memory

    scn = _wide_plans(3, 60000, most_batches=32)
    plan = scn.plan
    held = training_step_memory.micro_batches_held(plan.pp, plan.vpp, plan.num_micro_batches, plan.schedule)
    assert np.mean(held < plan.num_micro_batches) > 0.3  # the groups merge plans of other batches
    grouped, original = [], distinct._also_grouped

    def spy(count, inverse, also):
        rows, groups = original(count, inverse, also)
        grouped.append((rows.size, inverse.size))
        return rows, groups

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(distinct, "_also_grouped", spy)
        fast = estimate_training_step(scn).memory
        _ = fast.total_bytes
    assert grouped and grouped[0][0] < grouped[0][1] / 2  # priced per group
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(distinct, "GROUPING", False)
        memo.clear_all()
        each = estimate_training_step(Scenario(scn.model, scn.cluster, scn.plan)).memory
    same(fast, each)
    assert np.array_equal(fast.total_bytes, each.total_bytes)
