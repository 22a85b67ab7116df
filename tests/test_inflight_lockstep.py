"""Data-parallel attention ranks in lockstep (`engines.inflight_lockstep`): the pass's cost, the loop
against the one-replica loop, and DeepSeek-V3 under SGLang and vLLM."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from inflight_reference import run_arrays
from shardwise import presets
from shardwise.engines.inflight import Replica, Traffic
from shardwise.engines.inflight_lockstep import Curve, Lockstep, curve, run_lockstep
from shardwise.engines.iteration import IterationTable, iteration_times
from shardwise.engines.serving import plan_for_serving, serving_scenario
from shardwise.specs import Scenario
from shardwise.specs.rules import serving_expert_tp
from shardwise.specs.serving import ServingWorkload


def linear_table(a: float = 0.02, b: float = 1e-4, c: float = 5e-5) -> IterationTable:
    """a + b d + c q seconds, which bilinear interpolation keeps exactly."""
    d, q = np.arange(0.0, 513.0, 32.0), np.arange(0.0, 4097.0, 256.0)
    return IterationTable(d, q, a + b * d[:, None] + c * q[None, :])


def flat(value: float = 0.0) -> Curve:
    return Curve((0.0, 1e6), (value, value))


def test_one_rank_in_lockstep_is_the_replica_loop():
    """One rank, no group part and every pass graphed: the lockstep loop runs the requests as the
    one-replica loop does (a closed loop of mixed lengths, KV blocks), to rounding. (The users start
    together: the lockstep loop takes arrivals in time order, the replica loop in the order issued.)"""
    table = linear_table()
    step = Lockstep(1, "vllm", table, group=flat(), decode=flat(), capture_tokens=10**9)
    rng = np.random.default_rng(1)
    n = 300
    inputs, outputs = rng.integers(50, 900, n), rng.integers(1, 300, n)
    blocks = -(-(inputs + outputs) // 16)
    arrival = np.full(n, np.inf)
    arrival[:24] = 0.0
    args = (inputs, outputs, 32, True)
    ours = run_lockstep(step, *args, arrival.copy(), 24, 2048, blocks, 4000, 512)
    ref = run_arrays(table, *args, arrival.copy(), 24, 2048, blocks, 4000, 512)
    for name in ("first", "done", "admitted"):
        np.testing.assert_allclose(getattr(ours, name), getattr(ref, name), rtol=1e-9)
    assert ours.iterations == ref.iterations


def test_a_pass_lasts_as_long_as_its_slowest_rank_and_in_phase_ranks_as_one():
    table = linear_table()
    group = curve(np.asarray([0.0, 4096.0]), np.asarray([0.01, 0.01 + 4096 * 2e-5]))
    vllm = Lockstep(8, "vllm", table, group=group, decode=flat(0.005), capture_tokens=512)
    # every rank alike, graphed: the in-phase iteration
    assert vllm.step_s([32] * 8, [0] * 8) == pytest.approx(table(32, 0))
    assert vllm.step_s([32] * 8, [100] * 8) == pytest.approx(table(32, 100))
    # one rank fuller: the pass is its in-phase iteration (the others padded to it)
    assert vllm.step_s([8] * 7 + [40], [0] * 8) == pytest.approx(table(40, 0))
    # a prompt chunk wider than the largest graph: nobody pads, the gather carries the sum, all eager
    ds, qs = [32] * 8, [1000] + [0] * 7
    own = table(32, 1000) - group(1032) + 0.005
    assert vllm.step_s(ds, qs) == pytest.approx(own + group((8 * 32 + 1000) / 8))
    assert vllm.step_s(ds, qs) < table(32, 1000)  # the experts see one chunk, not eight
    sglang = Lockstep(
        8, "sglang", table, group=group, decode=curve(np.asarray([0.0, 512.0]), np.asarray([0.015, 0.04])),
        prefill=curve(np.asarray([0.0, 4096.0]), np.asarray([0.02, 0.02 + 4096 * 6e-5])),
    )  # fmt: skip
    assert sglang.step_s([32, 16] + [0] * 6, [0] * 8) == pytest.approx(table(32, 0))  # MAX_LEN, graphs
    assert sglang.step_s([0] * 8, [500] * 8) == pytest.approx(sglang.prefill(500))  # all prefill: in phase
    # one rank prefills, the others decode eagerly beside it on the summed path
    mixed = sglang.step_s([0] + [32] * 7, [500] + [0] * 7)
    slowest = max(sglang.prefill(500) - group(500), sglang.decode(32) - group(32))
    assert mixed == pytest.approx(slowest + group((500 + 7 * 32) / 8))


def test_the_group_tokens_change_only_the_gathered_parts():
    """`group_tokens` at a rank's own tokens is the in-phase iteration; more tokens over the group
    cost more, with the rank's own batch unchanged."""
    model = presets.model("deepseek-v3")
    plan = plan_for_serving(1, 1, 8).with_(ep=8, etp=serving_expert_tp(1, 8, 0, 8))
    for engine in ("sglang", "vllm"):
        wl = ServingWorkload(1000, 1000, 1, "fp8", engine=engine)
        s = serving_scenario(Scenario(model, presets.system("dgx-h200"), plan), wl)
        d = np.asarray([1.0, 32.0, 128.0])
        plain = iteration_times(s, wl, d, 0 * d, 1500).total_s
        same = iteration_times(s, wl, d, 0 * d, 1500, group_tokens=d).total_s
        np.testing.assert_allclose(same, plain, rtol=1e-12)
        more = iteration_times(s, wl, d, 0 * d, 1500, group_tokens=d + 500).total_s
        assert np.all(more > plain)


def deepseek(engine: str) -> Replica:
    model = presets.model("deepseek-v3")
    plan = plan_for_serving(1, 1, 8).with_(ep=8, etp=serving_expert_tp(1, 8, 0, 8))
    wl = ServingWorkload(1000, 1000, 1, "fp8", engine=engine)
    return Replica(Scenario(model, presets.system("dgx-h200"), plan), wl)


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_deepseek_v3s_ranks_in_lockstep_decode_slower_and_prefill_sooner(engine):
    """DeepSeek-V3 at tp=1,ep=8, 32 requests a rank: out of phase a rank's prompt no longer waits
    for all eight ranks' prompts through the experts (TTFT down), but every decoding rank waits
    through each other rank's prefill pass (TPOT up)."""
    replica = deepseek(engine)
    assert replica.lockstep is not None and replica.lockstep.ranks == 8
    traffic = Traffic(users=32, requests=400, rounds=3)
    ours = replica.run(traffic)
    replica.lockstep = None  # the ranks in phase: the replica simulated alone
    alone = replica.run(traffic)
    assert np.median(ours.tpot_s) > 1.03 * np.median(alone.tpot_s)
    assert np.median(ours.ttft_s) < np.median(alone.ttft_s)
    assert ours.throughput_tokens_per_s < alone.throughput_tokens_per_s
    assert len(ours.ttft_s) > len(alone.ttft_s)  # the group's requests, eight ranks'


def test_only_data_parallel_attention_under_vllm_and_sglang_steps_in_lockstep():
    model = presets.model("deepseek-v3")
    system = presets.system("dgx-h200")
    tp8 = Replica(
        Scenario(model, system, plan_for_serving(8, 1, 1)), ServingWorkload(1000, 1000, 1, "fp8", engine="sglang")
    )
    assert tp8.lockstep is None
    plan = plan_for_serving(1, 1, 8).with_(ep=8, etp=serving_expert_tp(1, 8, 0, 8))
    trt = Replica(Scenario(model, system, plan), ServingWorkload(1000, 1000, 1, "fp8", engine="tensorrt-llm"))
    assert trt.lockstep is None


def test_an_sglang_rank_prefills_first_and_never_jumps_past_a_prompt():
    """Prefill apart (SGLang): a rank with a prompt admitted prefills before it decodes again
    (`get_next_batch_to_run`), its decodes waiting; a decode pass with a prompt waiting is not jumped over."""
    table = linear_table()
    prefill = curve(np.asarray([0.0, 4096.0]), np.asarray([0.03, 0.03 + 4096 * 1e-5]))
    step = Lockstep(1, "sglang", table, group=flat(), decode=flat(), prefill=prefill)
    inputs, outputs = np.asarray([100, 100, 100, 100]), np.asarray([50, 50, 50, 50])
    arrival = np.asarray([0.0, 0.0, 0.0, 1.0])
    run = run_lockstep(step, inputs, outputs, 8, False, arrival, 4, 100, None, 0, 100, decodes_share_budget=False)
    pre = prefill(100)
    # one prompt a pass (the budget): A's, B's, C's prefills back to back, the decodes after
    np.testing.assert_allclose(run.first[:3], [pre, 2 * pre, 3 * pre], rtol=1e-12)
    # D arrives while three decode: prefilled in the first pass that starts after its arrival
    assert run.first[3] - pre == pytest.approx(run.clock[int(np.searchsorted(run.clock, 1.0))], rel=1e-12)


def test_requests_are_a_ranks_as_the_rate_is():
    """`Traffic.requests` is one rank's, like its rate: the group runs eight ranks' requests, so a
    rank's measured requests (`simulated_requests`) are the requests asked for less the warm-up."""
    replica = deepseek("vllm")
    sim = replica.run(Traffic(rate_per_s=0.5, requests=50))
    assert len(sim.ttft_s) == 8 * 45


def test_a_vllm_pass_without_graphs_is_eager_on_every_rank():
    """A rank that runs only a prompt chunk runs eager too: its launch gaps are priced (at one decode)."""
    table = linear_table()
    gaps = curve(np.asarray([0.0, 1.0, 512.0]), np.asarray([0.0, 0.005, 0.006]))
    step = Lockstep(8, "vllm", table, group=flat(), decode=gaps, capture_tokens=512)
    assert step.step_s([0] * 8, [1000] + [0] * 7) == pytest.approx(table(0, 1000) + 0.005)
    assert step.step_s([0] * 8, [1000] * 8) == pytest.approx(table(0, 1000) + 0.005)
    assert step.step_s([32] * 8, [1000] + [0] * 7) == pytest.approx(table(32, 1000) + gaps(32))


def two_ranks_third_request(mode: str) -> float:
    """Two ranks; request 0 decodes long on rank 0, request 1 passes through rank 1, request 2
    arrives with rank 1 empty again: its time per output token tells which rank it went to."""
    table = linear_table(b=1e-3)
    prefill = curve(np.asarray([0.0, 4096.0]), np.asarray([0.03, 0.03 + 4096 * 1e-5]))
    step = Lockstep(2, mode, table, group=flat(), decode=flat(), prefill=prefill, capture_tokens=10**9)
    inputs, outputs = np.asarray([100, 100, 100]), np.asarray([1000, 5, 5])
    arrival = np.asarray([0.0, 0.001, 1.0])
    run = run_lockstep(step, inputs, outputs, 8, False, arrival, 3, 2048, None, 0)
    assert run.done[0] > run.done[2]  # request 0 still decodes on rank 0 throughout
    return float((run.done[2] - run.first[2]) / 4)


def test_vllm_sends_a_request_to_the_least_loaded_rank():
    """vLLM: request 2 goes to the empty rank 1 (round robin would send it to the busy rank 0)."""
    table = linear_table(b=1e-3)
    assert two_ranks_third_request("vllm") == pytest.approx(table(1, 0))


def test_sglang_sends_requests_round_robin():
    """SGLang: request 2 goes to rank 0 beside request 0, though rank 1 is empty (MAX_LEN: two decodes)."""
    table = linear_table(b=1e-3)
    assert two_ranks_third_request("sglang") == pytest.approx(table(2, 0))


def test_the_group_runs_the_exact_users():
    """Nine users over eight ranks in lockstep run as nine (`Traffic.group_users`), not ceil(9/8) = 2
    a rank (sixteen): never more than nine requests in flight over the group."""
    replica = deepseek("vllm")
    sim = replica.run(Traffic(users=2, requests=50, group_users=9))
    assert 8 < 8 * sim.mean_running <= 9


@pytest.mark.parametrize("mode", ["sglang", "vllm"])
def test_several_ranks_run_as_the_loop_before_the_loops_were_one(mode):
    """Random mixes on 2-4 ranks, with and without KV blocks, open and closed loops: `run_lockstep`
    (the one loop, `run_ranks`) gives the former lockstep loop's times (`tests/lockstep_reference.py`)
    to rounding -- vLLM's balancer sends an arrival when it comes, by the loads then, so a jump over
    decode passes stops at an arrival whenever some rank has a slot beside its queue."""
    from lockstep_reference import run_lockstep as reference

    rng = np.random.default_rng(11 if mode == "vllm" else 12)
    table, group = linear_table(), Curve((0.0, 4096.0), (0.01, 0.01 + 4096 * 2e-5))
    for _ in range(120):
        ranks = int(rng.integers(2, 5))
        step = Lockstep(
            ranks, mode, table, group=group, decode=Curve((0.0, 1e6), (0.02, 0.05)),
            prefill=Curve((0.0, 1e6), (0.02, 5e4)), capture_tokens=int(rng.choice([8, 512])),
        )  # fmt: skip
        n = int(rng.integers(1, 60))
        inputs, outputs = rng.integers(1, 300, n), rng.integers(1, 80, n)
        slots, budget = int(rng.integers(1, 12)), int(rng.choice([64, 256, 2048]))
        chunk = None if rng.random() < 0.4 else int(rng.choice([32, 128]))
        shared, closed = bool(rng.random() < 0.5), bool(rng.random() < 0.5)
        if closed:
            users = int(rng.integers(1, n + 1))
            arrival = np.full(n, np.inf)
            arrival[:users] = np.sort(rng.random(users)) * float(rng.choice([0.0, 0.1, 2.0]))
            issued = users
        else:
            arrival, issued = np.cumsum(rng.exponential(1 / float(rng.choice([0.5, 20.0, 1e4])), n)), n
        blocks = -(-(inputs + outputs) // 16) if rng.random() < 0.5 else None
        free = int(rng.integers(int(blocks.max()), int(blocks.max()) * 5 + 1)) if blocks is not None else 0
        args = (inputs, outputs, slots, closed, arrival, issued, budget, blocks, free, chunk, shared)
        old = reference(step, *(a.copy() if isinstance(a, np.ndarray) else a for a in args))
        new = run_lockstep(step, *(a.copy() if isinstance(a, np.ndarray) else a for a in args))
        for field in ("admitted", "first", "done", "arrival"):
            np.testing.assert_allclose(getattr(new, field), getattr(old, field), rtol=1e-9, atol=1e-12)
        for field in ("t", "busy", "running_area", "decode_area", "prompt_area"):
            assert getattr(new, field) == pytest.approx(getattr(old, field), rel=1e-9), field
        assert new.iterations == old.iterations


@pytest.mark.parametrize("p2p", [True, False])
def test_the_eager_copy_keeps_the_converted_p2p_fusion_and_link(p2p):
    """The lockstep's pass without CUDA graphs (`with_runtime`) on h100-pcie-8x-switch: the norm
    fusion, vLLM's own all-reduce and the PCIe group link as the converted scenario has them and as
    converting the raw scenario under the eager runtime gives (--p2p off: neither fusion nor vLLM's
    all-reduce on either path); only the kernel gap and base latency differ."""
    from shardwise.engines.inflight_lockstep import EAGER, with_runtime

    model = presets.model("qwen3-30b-a3b")
    plan = plan_for_serving(2, 1, 4).with_(ep=8, etp=serving_expert_tp(2, 8, 0, 4))
    wl = ServingWorkload(1000, 1000, 1, "bf16", engine="vllm", custom_all_reduce="vllm")
    raw = Scenario(model, presets.system("h100-pcie-8x-switch").with_(p2p=p2p), plan)
    graphed = serving_scenario(raw, wl)
    eager, direct = with_runtime(graphed, EAGER), serving_scenario(raw, replace(wl, runtime=EAGER))
    assert eager.plan == direct.plan
    assert eager.cluster == direct.cluster
    assert eager.cluster.custom_all_reduce == graphed.cluster.custom_all_reduce == ("vllm" if p2p else "none")
    assert np.all(np.asarray(eager.plan.norm_fusion_max_bytes) == graphed.plan.norm_fusion_max_bytes)
    assert (np.max(graphed.plan.norm_fusion_max_bytes) > 0) == p2p
    assert eager.cluster.gpu.kernel_launch_s > graphed.cluster.gpu.kernel_launch_s
