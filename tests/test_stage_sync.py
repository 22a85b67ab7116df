"""The step's collectives after the pipeline as collectives of several stages (Megatron-LM's
`finalize_model_grads`, then `clip_grad`'s norm and the optimizer): the tied embeddings' all-reduce
starts on the first and last stage together, and every stage's optimizer after the slowest stage's
gradient norm; the simulator and the closed form price the same step."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from shardwise import presets
from shardwise.engines.schedules import SCHEDULES
from shardwise.engines.simulated import simulate_training_step
from shardwise.engines.simulator import KIND_NAMES, StageTimes, simulate
from shardwise.engines.training import estimate_training_step
from shardwise.specs import Plan, Scenario


def _after(sim) -> dict[tuple[int, str], tuple[float, float]]:
    return {(r[0], KIND_NAMES[r[1]]): (r[4], r[5]) for r in sim.records if r[2] < 0}


def _times(p: int, dp_s: list[float], sync_s: list[float], barrier: bool = True) -> StageTimes:
    ones, zeros = np.ones(p), np.zeros(p)
    return StageTimes(
        forward_s=ones,
        backward_s=2 * ones,
        weight_s=zeros,
        send_forward_s=zeros,
        send_backward_s=zeros,
        dp_s=np.array(dp_s),
        optimizer_s=np.array([0.5, 0.25, 0.75][:p]),
        overlap_dp=False,
        dp_tail_s=np.array(dp_s),
        gather_s=zeros,
        embedding_sync_s=np.array(sync_s),
        norm_barrier=barrier,
    )


@pytest.mark.parametrize("barrier", [True, False])
def test_the_embedding_sync_is_one_collective_and_the_optimizers_wait_for_the_norm(barrier):
    """Three stages of 1F1B, 2 micro-batches: forwards 1 s, backwards 2 s; the last backward ends
    at 12 s on stage 0, 10 s on stage 1, 8 s on stage 2. Stage 2 reduces for 3 s (of which 0.5 s the
    tied embeddings' sync), stage 0 for 0.5 s (all of it the sync), stage 1 for 4 s. The sync
    starts on both end stages at max(12, 8 + 2.5) = 12 s and ends at 12.5 s; with the norm's
    all-reduce every optimizer starts at max(12.5, 14, 12.5) = 14 s (stage 1 is the slowest)."""
    times = _times(3, [0.5, 4.0, 3.0], [0.5, 0.0, 0.5], barrier)
    sim = simulate(SCHEDULES["1f1b"](3, 2, 1), times)
    after = _after(sim)
    assert after[(2, "dp")] == pytest.approx((8.0, 10.5))
    assert after[(1, "dp")] == pytest.approx((10.0, 14.0))
    assert (0, "dp") not in after  # its whole reduction is the sync
    assert after[(0, "embedding-sync")] == after[(2, "embedding-sync")] == pytest.approx((12.0, 12.5))
    starts = {i: after[(i, "optimizer")][0] for i in range(3)}
    if barrier:
        assert starts == pytest.approx({0: 14.0, 1: 14.0, 2: 14.0})
        assert sim.makespan_s == pytest.approx(14.75)
    else:
        assert starts == pytest.approx({0: 12.5, 1: 14.0, 2: 12.5})
        assert sim.makespan_s == pytest.approx(14.25)
    # the order on each stage: its reduction, the sync, the optimizer
    for i in (0, 2):
        assert after.get((i, "dp"), (0.0, 0.0))[1] <= after[(i, "embedding-sync")][0]
        assert after[(i, "embedding-sync")][1] <= after[(i, "optimizer")][0]


def _skewed(stage_layers: tuple[int, ...], zero_stage: int = 1) -> Scenario:
    system = dataclasses.replace(presets.system("dgx-a100"), nodes=8)
    plan = Plan(tp=8, pp=4, dp=2, global_batch=32, stage_layers=stage_layers, zero_stage=zero_stage)
    return Scenario(presets.model("gpt3-175b"), system, plan)


def test_skewed_stages_sync_together_and_the_step_waits_for_the_slowest():
    """GPT-3 175B over tp 8, pp 4, dp 2 with 6, 30, 30, 30 layers: stage 3 reduces long before
    stage 0 (which holds the embedding and ends the pipeline). It used to sync its embedding alone,
    start its optimizer and all-gather then, and end before stage 1: the step was short."""
    step = simulate_training_step(_skewed((6, 30, 30, 30)))
    sim, after = step.simulation, _after(step.simulation)
    reduced = {i: after[(i, "dp")][1] for i in range(4)}
    assert reduced[3] < reduced[0]  # the skew: stage 3 is ready first
    sync = after[(0, "embedding-sync")]
    assert after[(3, "embedding-sync")] == sync
    assert sync[0] == pytest.approx(max(reduced[0], reduced[3]))
    ready = max(sync[1], reduced[1], reduced[2])
    for i in range(4):
        assert after[(i, "optimizer")][0] == pytest.approx(ready)
        assert after[(i, "dp-gather")][0] == pytest.approx(after[(i, "optimizer")][1])
    ends = [after[(i, "dp-gather")][1] for i in range(4)]
    assert sim.makespan_s == pytest.approx(max(ends))


def test_the_closed_form_adds_the_embedding_sync_to_the_end_stages_only():
    """With a middle stage that sets the step (10, 40, 40, 6 layers) the tied embeddings' sync of
    the end stages runs while it still reduces: the step is the untied model's, in the closed form
    as in the simulator. Where an end stage sets it (30, 30, 30, 6) both add the sync."""
    for layers, adds in (((10, 40, 40, 6), False), ((30, 30, 30, 6), True)):
        tied = _skewed(layers)
        untied = dataclasses.replace(tied, model=dataclasses.replace(tied.model, tied_embeddings=False))
        sync = float(step_sync_s(tied))
        assert sync > 0
        closed = float(estimate_training_step(tied).step_time_s) - float(estimate_training_step(untied).step_time_s)
        simulated = simulate_training_step(tied, records=False).estimate.step_time_s
        simulated -= simulate_training_step(untied, records=False).estimate.step_time_s
        assert closed == pytest.approx(sync if adds else 0.0, abs=1e-9)
        assert simulated == pytest.approx(sync if adds else 0.0, abs=1e-9)


def step_sync_s(scn: Scenario) -> float:
    """The tied embeddings' all-reduce of a scenario, as the simulator's stage times hold it."""
    from shardwise.engines.simulated import stage_times

    return float(stage_times(scn).embedding_sync_s[0])


def test_interleaved_without_data_parallelism_reduces_nothing():
    """Review 33: pp 8, vpp 4, dp 1 drew "data-parallel reduce" bars of i chunk-backward passes on
    stage i (the wait of a per-chunk reduction that starts late, `dp_step.chunked_left_s`) where there
    is nothing to reduce; only the tied embeddings' all-reduce of the end stages is left. With dp 2 the
    stages still reduce."""
    system = presets.system("dgx-a100")
    for dp, reduces in ((1, False), (2, True)):
        plan = Plan(pp=8 // dp, vpp=2, dp=dp, global_batch=16, schedule="interleaved")
        after = _after(simulate_training_step(Scenario(presets.model("gpt-96l-4096h"), system, plan)).simulation)
        stages = {i for i, kind in after if kind == "dp"}
        assert bool(stages) == reduces, stages
        assert {i for i, kind in after if kind == "embedding-sync"} == {0, 8 // dp - 1}
