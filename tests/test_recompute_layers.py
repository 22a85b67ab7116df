"""Layers recomputed whole (`Plan.recompute_layers`, Megatron-LM's --recompute-method block):
the count per stage and chunk, the closed form against the simulator, and the two ends (0 layers
is the plan's own recomputation, every layer is full recomputation)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from shardwise import presets
from shardwise.engines.simulated import simulate_training_step
from shardwise.engines.training import estimate_training_step
from shardwise.engines.training_flops import flops_per_step
from shardwise.errors import SpecError
from shardwise.requests.training import TrainingRequest
from shardwise.specs import Plan, Scenario
from shardwise.specs.stages import chunk_recomputed_layers, recomputed_split, stage_split

LLAMA = presets.model("llama3-8b")  # 32 layers
H100 = presets.system("dgx-h100", nodes=1)
LAYOUTS = {
    "one stage": dict(tp=8, pp=1, dp=1, global_batch=4),
    "1f1b": dict(tp=2, pp=4, dp=1, global_batch=16),
    "uneven 1f1b": dict(tp=1, pp=8, dp=1, global_batch=16, first_stage_layers=3, last_stage_layers=3),
    "interleaved": dict(tp=1, pp=4, dp=2, vpp=2, schedule="interleaved", global_batch=32),
}


def scenario(recompute: str = "none", recompute_layers: int = 0, **layout: object) -> Scenario:
    return Scenario(LLAMA, H100, Plan(recompute=recompute, recompute_layers=recompute_layers, **layout))  # type: ignore[arg-type]


def numbers(scn: Scenario) -> tuple[float, float, float]:
    est = estimate_training_step(scn)
    return float(est.step_time_s), float(est.memory.total_bytes), float(flops_per_step(scn)[1])


def test_a_chunk_recomputes_its_first_layers():
    # 12 layers in 5 chunks are 3, 3, 2, 2, 2
    assert chunk_recomputed_layers(12, 5, 1) == 5
    assert chunk_recomputed_layers(12, 5, 2) == 10
    assert chunk_recomputed_layers(12, 5, 3) == 12
    assert chunk_recomputed_layers(8, 1, 3) == 3
    assert chunk_recomputed_layers(8, 1, 30) == 8


def test_the_middle_stages_count_each_stage_apart():
    # 30 layers over 4 stages: 8 first... middle 15 split 8 + 7
    split = stage_split(30, 4, 7, 8)
    assert (float(split.middle_max), float(split.middle_min)) == (8.0, 7.0)
    whole = recomputed_split(split, 1, 7)
    assert float(whole.middle_total) == 14.0  # 7 of the 8 and 7 of the 7
    assert float(whole.middle_max) == 7.0
    explicit = recomputed_split(stage_split(30, 4, explicit=(5, 10, 9, 6)), 1, 6)
    assert float(explicit.middle_total) == 12.0


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_layer_recomputed_whole_is_full_recomputation(layout):
    full = numbers(scenario("full", **LAYOUTS[layout]))
    assert numbers(scenario("none", 32, **LAYOUTS[layout])) == pytest.approx(full, rel=1e-12)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("recompute", ["none", "selective"])
def test_no_layer_recomputed_whole_is_the_plans_own_recomputation(layout, recompute):
    alone = numbers(scenario(recompute, **LAYOUTS[layout]))
    assert numbers(scenario(recompute, 0, **LAYOUTS[layout])) == alone
    # with full recomputation the count changes nothing
    full = numbers(scenario("full", **LAYOUTS[layout]))
    assert numbers(scenario("full", 2, **LAYOUTS[layout])) == pytest.approx(full, rel=1e-12)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_more_layers_recomputed_is_slower_and_keeps_less(layout):
    runs = [numbers(scenario("none", n, **LAYOUTS[layout])) for n in (0, 1, 2, 4)]
    times, memory, flops = zip(*runs, strict=True)
    assert all(a < b for a, b in itertools.pairwise(times))
    assert all(a > b for a, b in itertools.pairwise(memory))
    assert all(a < b for a, b in itertools.pairwise(flops))


def test_each_layer_recomputed_whole_costs_the_same_on_one_stage():
    t0, t1, t3 = (numbers(scenario("none", n, **LAYOUTS["one stage"]))[0] for n in (0, 1, 3))
    assert t1 > t0
    assert t3 - t0 == pytest.approx(3 * (t1 - t0), rel=1e-9)


def test_the_hardware_flops_add_the_forward_of_those_layers():
    layout = LAYOUTS["1f1b"]  # 8 layers per stage, 3 of each recomputed: 12 of 32
    none, full = (flops_per_step(scenario(rc, **layout))[1] for rc in ("none", "full"))
    part = flops_per_step(scenario("none", 3, **layout))[1]
    assert part == pytest.approx(none + 12 / 32 * (full - none), rel=1e-12)


@pytest.mark.parametrize("layout", ["one stage", "1f1b"])
@pytest.mark.parametrize("n", [1, 3])
def test_the_simulator_agrees_with_the_closed_form(layout, n):
    scn = scenario("none", n, **LAYOUTS[layout])
    closed = float(estimate_training_step(scn).step_time_s)
    sim = float(simulate_training_step(scn).estimate.step_time_s)
    assert sim == pytest.approx(closed, rel=1e-6)  # the same sums in another order


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_simulator_adds_what_the_closed_form_adds(layout):
    # uneven stages and interleaving: the two differ a little already without it (the same offset)
    closed = [float(estimate_training_step(scenario("none", n, **LAYOUTS[layout])).step_time_s) for n in (0, 2)]
    sim = [float(simulate_training_step(scenario("none", n, **LAYOUTS[layout])).estimate.step_time_s) for n in (0, 2)]
    assert closed[1] - closed[0] > 0.02 * closed[0]
    assert sim[1] - sim[0] == pytest.approx(closed[1] - closed[0], rel=1e-6)


def test_an_array_of_counts_prices_each_like_one():
    layout = LAYOUTS["interleaved"]
    counts = np.array([0, 1, 2, 3, 4])
    many = estimate_training_step(scenario("none", counts, **layout))  # type: ignore[arg-type]
    for i, n in enumerate(counts):
        one = estimate_training_step(scenario("none", int(n), **layout))
        assert float(np.asarray(many.step_time_s)[i]) == float(one.step_time_s)
        assert float(np.asarray(many.memory.total_bytes)[i]) == float(one.memory.total_bytes)


def test_a_bad_count_is_one_clear_error():
    with pytest.raises(SpecError, match="recompute_layers: -1 is not allowed"):
        Plan(recompute_layers=-1)
    moe = presets.model("qwen3-30b-a3b")
    plan = Plan(tp=2, ep=4, dp=4, global_batch=8, sequence_parallel=True, recompute_layers=2)
    with pytest.raises(SpecError, match="--recompute-layers with a mixture of experts is not modelled"):
        estimate_training_step(Scenario(moe, H100, plan))


def test_the_request_carries_the_count_both_ways():
    argv = ["--model", "llama3-8b", "--system", "dgx-h100", "--tp", "2", "--pp", "4", "--global-batch", "16"]
    request = TrainingRequest.from_argv([*argv, "--recompute-layers", "3"])
    assert request.recompute_layers == 3
    assert TrainingRequest.from_argv(request.to_argv()) == request
    assert int(request.scenario().plan.recompute_layers) == 3
    assert TrainingRequest.from_argv(argv).recompute_layers == 0


def test_fms_fsdp_checkpoints_evenly_spaced_blocks():
    from shardwise.analyses.public_stacks import fms_checkpointed_blocks

    # its docstring's examples on 12 blocks: p = 1/3 -> 4, 1/2 -> 6, 2/3 -> 8
    assert [fms_checkpointed_blocks(12, p) for p in (0.0, 1 / 3, 0.5, 2 / 3, 1.0)] == [0, 4, 6, 8, 12]


def test_a_public_row_with_a_stated_fraction_is_priced_with_those_blocks():
    from shardwise.analyses import public_stacks

    row = {"framework": "fsdp", "source": "x", "layers": "40", "parse_notes": "ac=selective-blocks; ac_fraction=1/2"}
    assert public_stacks.skip_reason(row) == ""
    _, kwargs = public_stacks.execution(row)
    assert kwargs["recompute"] == "none" and kwargs["recompute_layers"] == 20
    unstated = {**row, "parse_notes": "ac=selective-blocks; ac_fraction=not-stated"}
    assert "the fraction not stated" in public_stacks.skip_reason(unstated)


def test_a_planners_few_plans_recomputing_layers_price_as_when_every_plan_is_priced(monkeypatch):
    # `training_layout.recomputed_layer_stages` prices what layers recomputed whole add only for
    # the plans that recompute some: every number of every plan as when it is priced for all of them
    import dataclasses

    from shardwise.analyses.plan_search import columns_scenario
    from shardwise.engines import training_layout
    from shardwise.requests.plan import PlanRequest
    from shardwise.specs import memo

    found = PlanRequest.from_argv("--model gpt3-175b --system dgx-a100 --nodes 8 --global-batch 64").search()
    cols = found.columns
    some = np.flatnonzero(cols["recompute_layers"] > 0)
    assert 0 < some.size < cols["recompute_layers"].size // 4  # a few among many

    def priced() -> dict[str, np.ndarray]:
        with memo.disabled():
            est = estimate_training_step(columns_scenario(found.model, found.cluster, 64, found.space, cols))
            out = {"step": np.asarray(est.step_time_s, dtype=float), "mfu": np.asarray(est.mfu, dtype=float)}
            for f in dataclasses.fields(est.breakdown):
                out[f.name] = np.array(np.broadcast_to(getattr(est.breakdown, f.name), cols["tp"].shape), dtype=float)
            return out

    rows_only = priced()
    calls = []
    monkeypatch.setattr(training_layout, "rows_of", lambda *a: calls.append(1))  # None: price every plan
    every = priced()
    assert calls  # the other path was taken
    for name, values in every.items():
        np.testing.assert_array_equal(rows_only[name], values, err_msg=name)
    assert np.all(rows_only["step"][some] > 0)
