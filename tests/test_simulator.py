"""The discrete-event pipeline simulator: closed forms, memory, properties, the cost model."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise import presets
from shardwise.engines.schedules import SCHEDULES, SPLIT_BACKWARD
from shardwise.engines.simulated import simulate_training_step
from shardwise.engines.simulator import KIND_NAMES, StageTimes, simulate
from shardwise.engines.training import estimate_training_step, pipeline_makespan_s
from shardwise.export_trace import chrome_trace
from shardwise.specs import Plan, Scenario


def equal(p, tf=1.0, tb=2.0, tw=0.0, send=0.0):
    z = np.zeros(p)
    return StageTimes(np.full(p, tf), np.full(p, tb), np.full(p, tw), np.full(p, send), np.full(p, send), z, z)


def run(name, p, m, v=1, times=None):
    return simulate(SCHEDULES[name](p, m, v), times or equal(p), v, name in SPLIT_BACKWARD, name)


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
@pytest.mark.parametrize(("p", "m"), [(1, 5), (4, 8), (8, 8), (8, 3), (16, 64)])
def test_equal_stages_free_communication_is_m_plus_p_minus_1(name, p, m):
    assert run(name, p, m).makespan_s == pytest.approx((m + p - 1) * 3.0)


@pytest.mark.parametrize(("p", "m", "v"), [(4, 8, 2), (4, 16, 4), (8, 16, 3), (2, 2, 2)])
def test_interleaved_matches_its_closed_form(p, m, v):
    assert run("interleaved", p, m, v).makespan_s == pytest.approx((m + (p - 1) / v) * 3.0)
    assert pipeline_makespan_s(3.0, 3.0, 3.0, p, m, v) == pytest.approx(run("interleaved", p, m, v).makespan_s)


def test_micro_batches_in_flight():
    p, m = 8, 32
    assert run("1f1b", p, m).peak_in_flight[0] == p
    assert list(run("1f1b", p, m).peak_in_flight) == [8, 7, 6, 5, 4, 3, 2, 1]
    assert run("gpipe", p, m).peak_in_flight[0] == m
    v = 2  # Korthikanti et al. 2022 Sec. 4.2.3: p + (p - 1) / v micro-batches' worth on stage 0
    assert run("interleaved", p, m, v).peak_in_flight[0] == pytest.approx(p + (p - 1) / v)
    assert max(run("zb-h1", p, m, times=equal(p, 1, 1, 1)).peak_in_flight) <= p


def test_zb_h1_has_a_smaller_bubble_than_1f1b():
    p, m = 8, 32
    zb = run("zb-h1", p, m, times=equal(p, 1.0, 1.0, 1.0))  # F=1, B=1 (input grad), W=1
    f1 = run("1f1b", p, m, times=equal(p, 1.0, 2.0, 0.0))  # the same work, backward unsplit
    assert zb.makespan_s < f1.makespan_s
    assert zb.mean_stage_idle_fraction < f1.mean_stage_idle_fraction
    # Qi et al. 2023: ZB-H1's bubble is (p - 1)(T_F + T_B - T_W)
    assert zb.makespan_s == pytest.approx(m * 3 + (p - 1) * (1 + 1 - 1))


def test_transfers_take_time_and_overlap_compute():
    p, m = 4, 8
    slow = run("1f1b", p, m, times=equal(p, send=0.5))
    assert slow.makespan_s > run("1f1b", p, m).makespan_s
    assert slow.makespan_s < (m + p - 1) * (3.0 + 2 * 0.5)  # not all sends on the critical path


durations = st.floats(0.01, 5.0)


@settings(deadline=None, max_examples=40)
@given(name=st.sampled_from(["gpipe", "1f1b", "zb-h1"]), p=st.integers(1, 6), m=st.integers(1, 12), data=st.data())
def test_makespan_bounds_and_monotonicity(name, p, m, data):
    draw = lambda: np.array([data.draw(durations) for _ in range(p)])  # noqa: E731
    z = np.zeros(p)
    times = StageTimes(draw(), draw(), draw() if name == "zb-h1" else z, draw() * 0.1, draw() * 0.1, z, z)
    base = run(name, p, m, times=times)
    work = m * float(np.sum(times.forward_s + times.backward_s + times.weight_s))
    assert base.makespan_s >= work / p - 1e-9  # never below total work / stages
    field = data.draw(st.sampled_from(["forward_s", "backward_s", "send_forward_s", "send_backward_s"]))
    stage = data.draw(st.integers(0, p - 1))
    grown = getattr(times, field).copy()
    grown[stage] *= 1 + data.draw(st.floats(0.01, 3.0))
    slower = run(name, p, m, times=StageTimes(**{**times.__dict__, field: grown}))
    assert slower.makespan_s >= base.makespan_s - 1e-12  # never decreases when a duration grows


@settings(deadline=None, max_examples=40)
@given(name=st.sampled_from(sorted(SCHEDULES)), p=st.integers(1, 6), k=st.integers(1, 4), v=st.integers(1, 3),
       data=st.data())  # fmt: skip
def test_the_stage_driven_simulator_matches_the_event_driven_reference(name, p, k, v, data):
    """Every operation at the same start and end, the same makespan, busy time and peak in flight,
    on random durations (the fast path against the event-heap reference)."""
    from shardwise.engines.simulator_events import simulate_events

    v = v if name == "interleaved" else 1
    m = p * k if name == "interleaved" else k
    draw = lambda: np.array([data.draw(durations) for _ in range(p)])  # noqa: E731
    z = np.zeros(p)
    times = StageTimes(draw(), draw(), draw(), draw() * 0.1, draw() * 0.1, draw() * 0.2, draw() * 0.1,
                       overlap_dp=data.draw(st.booleans()), dp_tail_s=z + 0.01, gather_s=z + 0.02)  # fmt: skip
    ops = SCHEDULES[name](p, m, v)
    fast = simulate(ops, times, v, name in SPLIT_BACKWARD, name)
    ref = simulate_events(ops, times, v, name in SPLIT_BACKWARD, name)
    assert sorted(fast.records) == sorted(ref.records)
    assert fast.makespan_s == ref.makespan_s and fast.pipeline_end_s == ref.pipeline_end_s
    assert np.array_equal(fast.busy_s, ref.busy_s) and np.array_equal(fast.peak_in_flight, ref.peak_in_flight)


@settings(deadline=None, max_examples=60)
@given(name=st.sampled_from(sorted(SCHEDULES)), p=st.integers(1, 8), k=st.integers(1, 6), v=st.integers(1, 4),
       data=st.data())  # fmt: skip
def test_the_times_without_records_are_the_simulation_to_the_bit(name, p, k, v, data):
    """`simulate_times` (the planner's: no list of operations, the schedule compiled, a waiting
    stage resumed only when its input arrives) gives the makespan, the end of the pipeline, the
    busy time and the peak in flight of `simulate`, byte for byte, on random durations (zero
    sends and reductions among them)."""
    from shardwise.engines.simulator import simulate_times

    v = v if name == "interleaved" else 1
    m = p * k if name == "interleaved" else k
    draw = lambda: np.array([data.draw(durations) for _ in range(p)])  # noqa: E731
    maybe = lambda: np.array([data.draw(st.sampled_from([0.0, 0.05, 0.3, 1.7])) for _ in range(p)])  # noqa: E731
    times = StageTimes(draw(), draw(), draw(), maybe(), maybe(), maybe(), maybe(),
                       overlap_dp=data.draw(st.booleans()), dp_tail_s=maybe(), gather_s=maybe())  # fmt: skip
    split = name in SPLIT_BACKWARD
    full = simulate(SCHEDULES[name](p, m, v), times, v, split, name)
    without = simulate(SCHEDULES[name](p, m, v), times, v, split, name, records=False)
    for fast in (simulate_times(name, p, m, v, times), without):
        assert fast.records == []
        assert np.float64(fast.makespan_s).tobytes() == np.float64(full.makespan_s).tobytes()
        assert np.float64(fast.pipeline_end_s).tobytes() == np.float64(full.pipeline_end_s).tobytes()
        assert fast.busy_s.tobytes() == full.busy_s.tobytes()
        assert fast.peak_in_flight.tobytes() == full.peak_in_flight.tobytes()


@pytest.mark.parametrize(
    "plan",
    [
        dict(tp=8, pp=8, dp=1, micro_batch=1, global_batch=64, schedule="interleaved", vpp=6, sequence_parallel=True),
        dict(tp=8, pp=8, dp=1, micro_batch=1, global_batch=128, schedule="zb-h1", sequence_parallel=True),
        dict(
            tp=4, pp=4, dp=4, micro_batch=2, global_batch=256, schedule="1f1b", zero_stage=1, overlap_grad_reduce=True
        ),
        dict(tp=8, pp=4, dp=2, micro_batch=1, global_batch=64, schedule="gpipe", recompute="full"),
    ],
)
def test_a_training_step_simulated_without_records_is_the_same_estimate(plan):
    """What the planner reads of a simulated step (`records=False`) equals the step simulated
    with every operation listed: the step time and every part of the breakdown, to the bit."""
    scn = Scenario(presets.model("gpt3-175b"), presets.system("dgx-a100", nodes=8), Plan(**plan))
    full = simulate_training_step(scn).estimate
    fast = simulate_training_step(scn, records=False)
    assert fast.simulation.records == [] and simulate_training_step(scn).simulation.records
    assert np.float64(fast.estimate.step_time_s).tobytes() == np.float64(full.step_time_s).tobytes()
    for key, value in vars(full.breakdown).items():
        assert np.float64(getattr(fast.estimate.breakdown, key)).tobytes() == np.float64(value).tobytes(), key


def test_the_trace_file_is_the_trace(tmp_path):
    """`write_chrome_trace` writes the text itself, fast; what a JSON reader gets back is `chrome_trace`."""
    from shardwise.export_trace import write_chrome_trace

    for name, p, m, v in (("1f1b", 4, 8, 1), ("interleaved", 4, 8, 2), ("zb-h1", 3, 5, 1)):
        rng = np.random.default_rng(p * m * v)
        z = np.zeros(p)
        times = StageTimes(rng.uniform(0.1, 1, p), rng.uniform(0.1, 2, p), rng.uniform(0.1, 1, p),
                           rng.uniform(0, 0.1, p), rng.uniform(0, 0.1, p), z + 0.1, z + 0.1)  # fmt: skip
        sim = simulate(SCHEDULES[name](p, m, v), times, v, name in SPLIT_BACKWARD, name)
        path = write_chrome_trace(sim, tmp_path / f"{name}.json")
        trace = json.loads(path.read_text())
        assert trace == chrome_trace(sim)
        # and each operation is there at the simulator's times, in microseconds (to the nanosecond)
        events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
        assert len(events) == len(sim.ops)
        start, end = np.sort([e["ts"] for e in events]), np.sort([e["ts"] + e["dur"] for e in events])
        assert np.allclose(start, np.sort(sim.ops["start_s"]) * 1e6, atol=1e-3)
        assert np.allclose(end, np.sort(sim.ops["end_s"]) * 1e6, atol=1e-3)


def test_the_simulator_agrees_with_the_closed_form_on_published_runs():
    from shardwise.analyses.validation import scenario_for

    for run_id in ("KOR22-T5-3", "KOR22-T5-7", "NAR21-T1-7"):
        scn = scenario_for(run_id)
        sim = simulate_training_step(scn)
        closed = estimate_training_step(scn)
        assert sim.estimate.step_time_s == pytest.approx(float(closed.step_time_s), rel=0.03)
        assert sim.estimate.breakdown.total_s == pytest.approx(sim.estimate.step_time_s)


def test_uneven_stages_are_real():
    scn = Scenario(presets.model("gpt-96l-4096h", layers=8), presets.system("dgx-a100"), Plan(pp=8, global_batch=16))
    sim = simulate_training_step(scn)
    times = sim.stage_times
    assert times.forward_s[-1] > 1.5 * times.forward_s[3]  # the last stage also runs the output layer
    assert sim.simulation.busy_s[-1] == max(sim.simulation.busy_s)


def test_chrome_trace():
    p, m = 4, 8
    sim = run("1f1b", p, m, times=equal(p, send=0.1))
    trace = json.loads(json.dumps(chrome_trace(sim)))
    ops = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(ops) == len(sim.records)
    by_cat = {cat: [e for e in ops if e["cat"] == cat] for cat in ("forward", "backward", "p2p")}
    assert len(by_cat["forward"]) == len(by_cat["backward"]) == p * m
    assert len(by_cat["p2p"]) == 2 * (p - 1) * m  # activations down and gradients up, between neighbours
    # microseconds: forwards 1 s, backwards 2 s, sends 0.1 s
    for cat, dur_us in (("forward", 1e6), ("backward", 2e6), ("p2p", 1e5)):
        assert [e["dur"] for e in by_cat[cat]] == pytest.approx([dur_us] * len(by_cat[cat]))
    # micro-batch 0 reaches stage i after i forwards and i sends: 1.1 s per hop
    first = {e["tid"]: e["ts"] for e in by_cat["forward"] if e["name"] == "F mb0"}
    assert first == {i: pytest.approx(i * 1.1e6) for i in range(p)}
    assert trace["otherData"]["makespan_s"] == sim.makespan_s


def test_array_plans_are_refused():
    from shardwise.errors import SpecError

    scn = Scenario(
        presets.model("gpt-96l-4096h"),
        presets.system("dgx-a100"),
        Plan(pp=np.array([2, 8]), dp=np.array([4, 1]), global_batch=16),
    )
    with pytest.raises(SpecError, match="one plan at a time"):
        simulate_training_step(scn)


@pytest.mark.parametrize("name", sorted(SCHEDULES))
@pytest.mark.parametrize(("p", "k", "v"), [(1, 3, 1), (2, 1, 3), (4, 2, 2), (3, 5, 4), (8, 4, 1), (8, 2, 6)])
def test_the_compiled_schedules_are_the_schedules(name, p, k, v):
    """The numpy-built schedules the planner's simulation follows (`simulator_times.compiled`)
    are the built-in lists of operations compiled one by one (`compile_ops`), code for code."""
    from shardwise.engines.simulator_times import compile_ops, compiled

    v = v if name == "interleaved" else 1
    for m in (p * k,) if name == "interleaved" else (k + p, k):  # fewer micro-batches than stages too
        fast, ref = compiled(name, p, m, v), compile_ops(SCHEDULES[name](p, m, v), m, v)
        assert fast.codes == ref.codes and (fast.p, fast.m, fast.v) == (ref.p, ref.m, ref.v)
        assert np.array_equal(fast.kinds, ref.kinds) and fast.ends_with_gradients


def test_a_hand_written_schedule_is_simulated_without_records_to_the_bit():
    """Any list of operations (here one that is no built-in schedule) compiled as the built-in
    ones are: the times of `simulate`; a list whose stage ends with a forward (the last stage's
    loss is taken as there, so the simulator runs it) is followed as `simulate` does."""
    from shardwise.engines.schedules import B, F, Op
    from shardwise.engines.simulator_times import compile_ops

    p, m = 2, 3
    ops = [
        [Op(F, 0, 0), Op(F, 1, 0), Op(B, 0, 0), Op(F, 2, 0), Op(B, 1, 0), Op(B, 2, 0)],
        [Op(F, 0, 0), Op(B, 0, 0), Op(F, 1, 0), Op(F, 2, 0), Op(B, 1, 0), Op(B, 2, 0)],
    ]
    times = StageTimes(np.array([1.0, 9.5]), np.array([2.0, 2.5]), np.zeros(p), np.full(p, 0.1), np.full(p, 0.2),
                       np.full(p, 0.3), np.full(p, 0.1))  # fmt: skip
    for last in (ops[1], [Op(F, 0, 0), Op(B, 0, 0), Op(F, 1, 0), Op(B, 1, 0), Op(B, 2, 0), Op(F, 2, 0)]):
        ops[1] = last
        assert compile_ops(ops, m, 1).ends_with_gradients == (last[-1].kind == B)
        full = simulate(ops, times, 1, False, "odd")
        fast = simulate(ops, times, 1, False, "odd", records=False)
        assert fast.records == [] and fast.makespan_s == full.makespan_s
        assert fast.pipeline_end_s == full.pipeline_end_s
        assert fast.busy_s.tobytes() == full.busy_s.tobytes()
        assert fast.peak_in_flight.tobytes() == full.peak_in_flight.tobytes()


def test_the_kept_stage_parts_give_the_stage_times_to_the_bit():
    """`simulated.stage_times` keeps a dense plan's layer, embedding, output layer, sends and
    recomputation under what the closed form's stage costs read (`training_stages.stage_key`): plans
    that differ in dp, the schedule, vpp, ZeRO, the overlaps or the global batch share them, and
    their stage times are those computed with every memo off, byte for byte."""
    from shardwise.engines.simulated import stage_times
    from shardwise.specs import memo

    model, cluster = presets.model("gpt3-175b"), presets.system("dgx-a100", nodes=8)
    plans = [
        dict(tp=8, pp=8, dp=1, micro_batch=1, global_batch=64, schedule="interleaved", vpp=6, sequence_parallel=True),
        dict(tp=8, pp=8, dp=1, micro_batch=1, global_batch=128, schedule="zb-h1", sequence_parallel=True),
        dict(tp=8, pp=8, dp=1, micro_batch=1, global_batch=256, schedule="1f1b", sequence_parallel=True),
        dict(tp=4, pp=8, dp=2, micro_batch=1, global_batch=256, schedule="1f1b", zero_stage=1),
        dict(tp=4, pp=4, dp=4, micro_batch=2, global_batch=256, schedule="interleaved", vpp=2, recompute="full"),
        dict(tp=4, pp=4, dp=4, micro_batch=2, global_batch=512, schedule="gpipe", zero_stage=2, recompute="selective"),
        dict(tp=4, pp=4, dp=4, micro_batch=2, global_batch=512, schedule="1f1b", overlap_grad_reduce=True),
    ]
    scenarios = [Scenario(model, cluster, Plan(**plan)) for plan in plans]
    kept = [stage_times(scn) for scn in scenarios]
    with memo.disabled():
        fresh = [stage_times(scn) for scn in scenarios]
    for a, b in zip(kept, fresh, strict=True):
        for field in ("forward_s", "backward_s", "weight_s", "send_forward_s", "send_backward_s", "dp_s"):
            assert getattr(a, field).tobytes() == getattr(b, field).tobytes(), field
        assert a.optimizer_s.tobytes() == b.optimizer_s.tobytes() and a.gather_s.tobytes() == b.gather_s.tobytes()


def test_chrome_trace_tracks_nest_for_perfetto():
    """Perfetto (as the JSON format) takes a track's events only when they nest or follow one
    another: the gradient reduction that overlaps the last backward passes has a track of its own,
    and no rounding makes one operation overlap the next."""
    from collections import defaultdict
    from itertools import pairwise

    plan = Plan(pp=4, dp=2, global_batch=8, schedule="1f1b", zero_stage=1)
    scn = Scenario(presets.model("gpt-96l-4096h"), presets.system("dgx-a100"), plan)
    sim = simulate_training_step(scn).simulation
    events = [e for e in chrome_trace(sim)["traceEvents"] if e["ph"] == "X"]
    tracks = defaultdict(list)
    for e in events:  # in nanoseconds, as Perfetto reads them (llround of microseconds x 1000)
        start_ns, dur_ns = round(e["ts"] * 1000), round(e["dur"] * 1000)
        tracks[e["tid"]].append((start_ns, start_ns + dur_ns))
    for spans in tracks.values():
        spans.sort()
        assert all(later[0] >= earlier[1] for earlier, later in pairwise(spans))
    names = {e["name"] for e in events if e["cat"] == "data-parallel"}
    assert names == {"grad reduce", "param all-gather"}  # dp = 2, ZeRO-1 (the gather exposed on stage 0)
    assert {e["tid"] for e in events if e["cat"] == "data-parallel"} == {200_000 + i for i in range(4)}


def test_the_tied_embedding_sync_is_named_and_a_stage_gets_only_the_tracks_it_uses():
    """The first and last stage all-reduce their tied embeddings' gradient after the data-parallel
    reduction (Megatron-LM's `finalize_model_grads`): an operation of its own, "embedding-sync",
    on its own track of those two stages. With dp = 1 it is the only collective after the pipeline,
    and no stage has a data-parallel track (it was a "grad reduce" on stage 0 and 3, and every
    stage had a data-parallel track); with dp = 2 it starts on both stages when the later of their
    reductions ends."""
    model, system = presets.model("gpt-96l-4096h"), presets.system("dgx-a100")
    assert model.tied_embeddings
    kinds = ("dp", "optimizer", "embedding-sync")
    steps = {}
    for dp in (1, 2):
        plan = Plan(tp=2 // dp, pp=4, dp=dp, global_batch=8, schedule="1f1b")
        step = simulate_training_step(Scenario(model, system, plan))
        trace = chrome_trace(step.simulation)
        tracks = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
        names = ("grad reduce", "embedding grad sync")
        ops = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["name"] in names]
        on = {(tracks[e["tid"]], e["name"]) for e in ops}
        sync = {("stage 0 embedding sync", "embedding grad sync"), ("stage 3 embedding sync", "embedding grad sync")}
        reduce = {(f"stage {i} data-parallel", "grad reduce") for i in range(4)}
        assert on == (sync if dp == 1 else sync | reduce)
        always = {f"stage {i}{s}" for i in range(4) for s in ("", " sends")}
        assert set(tracks.values()) == {name for name, _ in on} | always
        records = {(r[0], KIND_NAMES[r[1]]): r[4:] for r in step.simulation.records if KIND_NAMES[r[1]] in kinds}
        steps[dp] = (step, records)
    (one, ones), (two, twos) = steps[1], steps[2]
    sync_s = one.stage_times.embedding_sync_s
    assert sync_s[0] == one.stage_times.dp_s[0] > 0 and sync_s[1] == 0
    for stage in (0, 3):
        for step, records in ((one, ones), (two, twos)):  # the sync ends where the optimizer starts
            start, end = records[(stage, "embedding-sync")]
            assert end == records[(stage, "optimizer")][0]
            assert end - start == pytest.approx(step.stage_times.embedding_sync_s[stage])
            assert end > start
        # the reductions first; the sync, one collective, starts on both when the later has reduced
        later = max(twos[(end, "dp")][1] for end in (0, 3))
        assert twos[(stage, "dp")][1] <= later == pytest.approx(twos[(stage, "embedding-sync")][0])
    assert (1, "embedding-sync") not in ones and (1, "dp") not in ones
