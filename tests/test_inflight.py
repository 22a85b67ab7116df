"""In-flight batching: the iteration cost, the simulator, and `serve`'s in-flight options."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import replace

import numpy as np
import pytest

from inflight_reference import simulate_reference
from shardwise import presets
from shardwise.engines.inflight import Replica, Traffic, estimate_inflight, kv_capacity, simulate
from shardwise.engines.iteration import iteration_table, iteration_times
from shardwise.engines.serving import estimate_serving, plan_for_serving, serving_scenario
from shardwise.specs import Scenario
from shardwise.specs.serving import ServingWorkload

WL = ServingWorkload(512, 128, 1)


def scenario(tp: int = 2, pp: int = 1, dp: int = 1, memory_bytes: float | None = None) -> Scenario:
    cluster = presets.system("a100-pcie-8x").with_(nodes=1, gpus_per_node=tp * pp * dp)
    if memory_bytes is not None:
        cluster = cluster.with_(gpu=cluster.gpu.with_(memory_bytes=memory_bytes))
    return Scenario(presets.model("llama3-8b"), cluster, plan_for_serving(tp, pp, dp))


@pytest.mark.parametrize(("tp", "pp"), [(1, 1), (2, 1), (1, 4), (2, 2)])
@pytest.mark.parametrize("batch", [1, 16, 256])
def test_a_decode_only_iteration_is_the_static_decode_step(tp, pp, batch):
    """With no prompt tokens an iteration is exactly the static model's decode step (same kernels,
    same pipeline composition), and a prefill-only iteration of one prompt its TTFT."""
    scn = scenario(tp, pp)
    wl = ServingWorkload(512, 128, batch)
    static = estimate_serving(scn, wl)
    s = serving_scenario(scn, wl)
    decode = iteration_times(s, wl, np.asarray(batch), np.asarray(0), 512 + 64)
    assert float(decode.total_s) == pytest.approx(float(static.tpot_s), rel=1e-9)
    one = estimate_serving(scn, ServingWorkload(512, 128, 1))
    prompt = iteration_times(s, wl, np.asarray(0), np.asarray(512), 512)
    assert float(prompt.total_s) == pytest.approx(float(one.ttft_s), rel=0.02)


def test_an_iteration_reads_the_weights_once_for_decodes_and_prompts_together():
    """Decoding 64 sequences beside a 512-token chunk costs less than the two apart (the weights
    are read once), and more than either alone."""
    s = serving_scenario(scenario(), WL)
    both, dec, pre = (
        float(iteration_times(s, WL, np.asarray(d), np.asarray(q), 576).total_s)
        for d, q in ((64, 512), (64, 0), (0, 512))
    )
    assert max(dec, pre) < both < dec + pre


def test_the_table_interpolates_the_model_closely():
    s = serving_scenario(scenario(), WL)
    table = iteration_table(s, WL, 1024, 8192, 576)
    for d, q in ((3, 100), (100, 1000), (777, 5000)):
        exact = float(iteration_times(s, WL, np.asarray(d), np.asarray(q), 576).total_s)
        assert table(d, q) == pytest.approx(exact, rel=0.05)
    assert table(0, 0) == 0.0


def test_one_request_at_a_time_is_static_batch_one():
    scn = scenario()
    est = estimate_inflight(scn, WL, users=1, requests=100)
    static = estimate_serving(scn, WL)
    assert est.tpot_s == pytest.approx(float(static.tpot_s), rel=1e-6)
    assert est.ttft_s == pytest.approx(float(static.ttft_s), rel=0.02)
    assert est.mean_running == pytest.approx(1.0)


@pytest.mark.parametrize(("users", "busy"), [(1, 1), (3, 3), (5, 5 / 2), (8, 4)])
def test_fewer_users_than_replica_slots_count_only_the_requests_in_flight(users, busy):
    """A closed loop of `users` over 4 replicas: each replica gets ceil(users / 4) or fewer, so
    the tokens/s are those of `users` requests, not of 4 replicas each running the fullest one's
    load (walkthrough: --concurrency 1 on 8 replicas printed 8 requests' tokens/s)."""
    scn = scenario(tp=2, dp=4)
    one = estimate_inflight(scenario(tp=2), WL, users=math.ceil(users / 4), requests=100)
    est = estimate_inflight(scn, WL, users=users, requests=100)
    assert est.throughput_tokens_per_s == pytest.approx(busy * one.throughput_tokens_per_s, rel=1e-9)
    assert est.mean_running == pytest.approx(busy * one.mean_running, rel=1e-9)
    assert est.tpot_s == pytest.approx(one.tpot_s, rel=1e-9)


def test_the_simulator_gives_every_request_its_tokens_and_obeys_littles_law():
    """At a steady rate the mean number in the system is the rate times the mean time in it."""
    scn = scenario()
    rate = 20.0
    est = estimate_inflight(scn, WL, rate_per_s=rate, requests=2000)
    assert not est.overloaded
    assert est.throughput_tokens_per_s == pytest.approx(rate * WL.output_len, rel=0.1)
    s = serving_scenario(scn, WL)
    table = iteration_table(s, WL, 512, 8192, 576)
    sim = simulate(table, 512, 128, 10_000, Traffic(rate_per_s=rate, requests=2000))
    assert np.all(np.isfinite(sim.e2e_s)) and np.all(sim.ttft_s > 0) and np.all(sim.tpot_s > 0)
    assert sim.mean_running == pytest.approx(rate * float(np.mean(sim.e2e_s)), rel=0.15)


def test_percentiles_are_ordered_and_grow_with_the_rate():
    scn = scenario()
    previous = None
    for rate in (2.0, 20.0, 60.0):
        est = estimate_inflight(scn, WL, rate_per_s=rate, requests=400)
        p = est.percentiles_s["ttft_s"]
        assert p["p50"] <= p["p90"] <= p["p99"]
        if previous is not None:  # TTFT at a rate never falls when the rate grows
            assert p["p50"] >= previous["p50"] - 1e-12 and p["p90"] >= previous["p90"] - 1e-12
        previous = p


def test_too_many_requests_are_flagged_and_throughput_is_the_maximum():
    scn = scenario()
    top = estimate_inflight(scn, WL, requests=300)
    over = estimate_inflight(scn, WL, rate_per_s=3 * top.max_request_rate_per_s, requests=300)
    assert over.overloaded
    assert over.throughput_tokens_per_s == pytest.approx(top.throughput_tokens_per_s, rel=1e-9)


@pytest.mark.parametrize("memory_gb", [(24, 32, 48, 80)])
def test_throughput_never_falls_when_kv_memory_grows(memory_gb):
    rates = [estimate_inflight(scenario(1, 1, 1, g * 1e9), WL, requests=200).throughput_tokens_per_s for g in memory_gb]
    assert all(b >= a * 0.99 for a, b in itertools.pairwise(rates)), rates


def test_one_output_token_has_no_time_per_output_token(cli):
    est = estimate_inflight(scenario(), ServingWorkload(512, 1), users=2, requests=100)
    assert np.isnan(est.tpot_s) and est.ttft_s > 0
    code, out, _ = cli([*SERVE, "--output-len", "1"])
    assert code == 0 and "nan" not in out


def test_kv_capacity_counts_whole_blocks():
    per_token = 1000.0
    assert kv_capacity(16 * 1000.0 * 10, per_token, 10, 5) == 10  # 15 tokens: one block of 16 each
    assert kv_capacity(16 * 1000.0 * 10, per_token, 10, 7) == 5  # 17 tokens: two blocks
    assert kv_capacity(0.0, per_token, 10, 5) == 0


SERVE = ["serve", "--model", "llama3-8b", "--system", "a100-pcie-8x", "--plan", "tp=2", "--requests", "200"]


def test_serve_request_rate_reports_percentiles(cli):
    code, out, err = cli([*SERVE, "--request-rate", "10", "--json"])
    assert code == 0, err
    row = json.loads(out)["plans"][0]
    assert row["batching"] == "inflight" and row["request_rate_per_s"] == 10
    assert set(row["percentiles_s"]) == {"ttft_s", "tpot_s", "e2e_s"}
    assert row["max_request_rate_per_s"] > 10 and row["overloaded"] is False
    code, out, err = cli([*SERVE, "--request-rate", "10"])
    assert code == 0, err
    out = " ".join(out.split())
    assert "Poisson arrivals at 10 requests/s" in out and "TTFT p50/p90/p99" in out


def test_serve_says_which_batching_each_number_uses(cli):
    code, out, _ = cli([*SERVE, "--concurrency", "8"])
    out = " ".join(out.split())  # rich wraps lines
    assert code == 0 and "in-flight batching, chunked prefill" in out and "8 requests always in flight" in out
    static = [a for a in SERVE if a not in ("--requests", "200")]  # the simulation's option: refused with static
    code, out, _ = cli([*static, "--concurrency", "8", "--batching", "static"])
    assert code == 0 and "in-flight" not in out
    code, out, _ = cli([*static, "--concurrency", "8", "--batching", "static", "--json"])
    assert json.loads(out)["plans"][0]["batching"] == "static"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--request-rate", "0"], "--request-rate: 0 is not allowed"),
        (["--request-rate", "nan"], "--request-rate: nan is not allowed"),
        (["--request-rate", "5", "--batching", "static"], "--request-rate needs --batching inflight"),
        (["--request-rate", "5", "--max-throughput"], "--request-rate and --max-throughput exclude each other"),
        (["--concurrency", "4", "--request-rate", "5"], "--concurrency and --request-rate exclude each other"),
        (["--concurrency", "4", "--max-throughput"], "--concurrency and --max-throughput exclude each other"),
        (["--max-batched-tokens", "0"], "--max-batched-tokens"),
    ],
)
def test_serve_bad_inflight_input_is_one_line(cli, extra, message):
    code, _out, err = cli([*SERVE, *extra])
    assert code == 2 and message in err and "Traceback" not in err


@pytest.mark.parametrize(("input_len", "output_len"), [(512, 512), (128, 128)])
def test_tp_against_pp_on_eight_h200_as_nvidia_measured_it(input_len, output_len):
    """NVIDIA's technical blog "Boosting Llama 3.1 405B Throughput by Another 1.5x on NVIDIA H200
    Tensor Core GPUs and NVLink Switch" (October 2024, TensorRT-LLM, FP8, HGX H200): at minimum
    latency TP=8 is 5.6x faster than PP=8; at maximum throughput PP=8 gives 1.5x TP=8's. Untouched
    by any constant here. The maximum throughput is priced as trtllm-bench measures it: every
    request of one length sent at once (its throughput mode has no rate limit) and the generated
    tokens over the whole run; the blog gives neither its lengths nor its request count, so two
    workloads at 2,000 requests (1.26-1.55 over 1,000-5,000 requests and four workloads). Equal
    requests sent together stay in waves, so each micro-batch of a round takes a full budget of
    prompt tokens and none waits behind a heavier one (`EnginePreset.whole_prompts`); a closed loop
    whose requests start spread out (the steady state of `serve --max-throughput`) gives PP=8 about
    TP=8's throughput at 512/512 instead."""
    model, cluster = presets.model("llama3-405b"), presets.system("dgx-h200").with_(nodes=1)
    wl = ServingWorkload(input_len, output_len, 1, "fp8", "fp8", custom_all_reduce="trtllm")
    tp, pp = (Scenario(model, cluster, plan_for_serving(t, p)) for t, p in ((8, 1), (1, 8)))
    latency = float(estimate_serving(pp, wl).e2e_s / estimate_serving(tp, wl).e2e_s)
    burst = Traffic(rate_per_s=math.inf, requests=2000)
    throughput = Replica(pp, wl).run(burst).run_tokens_per_s / Replica(tp, wl).run(burst).run_tokens_per_s
    assert latency == pytest.approx(5.6, rel=0.15)
    assert throughput == pytest.approx(1.5, rel=0.15)


def test_latency_targets_pick_the_plan_with_the_most_throughput_that_meets_them():
    from shardwise.analyses.serving_targets import best_load, search

    model, cluster = presets.model("llama3-8b"), presets.system("a100-pcie-8x").with_(nodes=1, gpus_per_node=4)
    wl = ServingWorkload(512, 128)
    options = search(model, cluster, wl, 0.3, 0.03)
    meets = [o for o in options if o.meets]
    assert meets and options[0] is meets[0]
    assert [o.tokens_per_s_per_gpu for o in meets] == sorted((o.tokens_per_s_per_gpu for o in meets), reverse=True)
    for o in meets:  # every chosen load meets both targets at p90
        p = o.estimate.percentiles_s
        assert p["ttft_s"]["p90"] <= 0.3 and p["tpot_s"]["p90"] <= 0.03
    # the next load misses a target, as the option says
    best = options[0]
    scn = best.estimate.scenario
    work = replace(wl, weight_precision=best.weight_precision, kv_precision=best.kv_precision)
    users, _, why, _ = best_load(scn, work, 0.3, 0.03)
    assert users == best.users_per_replica and ("TTFT" in why or "TPOT" in why or "KV cache" in why)
    # impossible targets: nothing meets them, and each option says why
    none = search(model, cluster, wl, 1e-4, None)
    assert not any(o.meets for o in none) and all(o.why for o in none)
    # listed closest first ("the closest misses are above" under a table cut at 12 rows)
    factors = [o.miss_factor for o in none]
    assert factors == sorted(factors) and 1 < factors[0] < float("inf")


def test_serve_with_targets_on_the_command_line(cli):
    args = ["serve", "--model", "llama3-8b", "--system", "a100-pcie-8x", "--num-gpus", "2", "--plan", "tp=2"]
    code, out, err = cli([*args, "--ttft-max", "300ms", "--tpot-max", "30ms", "--json"])
    assert code == 0, err
    data = json.loads(out)
    assert data["targets"]["percentile"] == "p90" and data["options"][0]["plan"] == "tp=2"
    code, out, err = cli([*args, "--ttft-max", "300ms"])
    assert code == 0, err
    assert "best: tp=2" in " ".join(out.split())
    code, _, err = cli([*args, "--ttft-max", "fast"])
    assert code == 2 and "--ttft-max" in err
    code, _, err = cli([*args, "--tpot-max", "-5ms"])
    assert code == 2 and "--tpot-max" in err
    code, _, err = cli([*args, "--tpot-max", "5ms", "--batching", "static"])
    assert code == 2 and "in-flight batching" in err


def test_users_far_beyond_the_slots_only_wait_longer(monkeypatch):
    """A closed loop of more users than the slots hold is saturated: the users beyond
    QUEUED_SIMULATED x slots are priced as queueing time (Little's law), which agrees with
    simulating them all; a billion users finish at once with finite numbers (issue 30)."""
    from shardwise.engines import inflight

    scn = scenario(1, 1, 1, 24e9)  # a small KV cache: few slots, so the full simulation stays quick
    slots = inflight.Replica(scn, WL).slots
    users = 8 * slots
    short = estimate_inflight(scn, WL, users=users, requests=300)
    monkeypatch.setattr(inflight, "QUEUED_SIMULATED", 10)
    full = estimate_inflight(scn, WL, users=users, requests=300)
    monkeypatch.undo()
    for name in ("ttft_s", "e2e_s", "tpot_s", "throughput_tokens_per_s"):
        assert getattr(short, name) == pytest.approx(getattr(full, name), rel=0.05), name
    huge = estimate_inflight(scn, WL, users=10**9, requests=300)
    assert np.isfinite(huge.ttft_s) and huge.ttft_s > 1e3 * full.ttft_s
    assert huge.throughput_tokens_per_s == pytest.approx(short.throughput_tokens_per_s, rel=1e-9)


@pytest.mark.parametrize(
    ("engine", "budgets", "piped_cap", "one_cap"),
    [
        ("tensorrt-llm", 8, 512 * 8, 768),
        ("vllm", 8, 1024, 1024),
        ("sglang", 8, 4096, 4096),
        ("llama.cpp", 1, 4, 4),  # llama-server's slots without -np (engine_presets LLAMA_SERVER_SLOTS)
    ],
)
def test_each_pipeline_micro_batch_gets_its_own_budget_where_the_engine_schedules_it_alone(
    engine, budgets, piped_cap, one_cap
):
    """TensorRT-LLM runs its micro-batch scheduler once per micro-batch (maxNumTokens, and
    maxBatchSize: mMaxNumSequences = maxBatchSize x pp), vLLM V1 one scheduler call per batch of
    its batch queue (one max_num_seqs, 1024 on an H100), SGLang one batch per micro-batch: a
    round of pp=8 holds 8 budgets. TensorRT-LLM's max_batch_size is trtllm-bench's: min(requests
    the KV cache of all the GPUs holds, 4096) / pp per micro-batch, rounded up: Llama 3 8B in BF16,
    0.9 (8 x 79.11 - 14.96) GiB / (131,072 B x 640) = 7,118 requests on 8 H100s, 512 x 8 slots under
    pp 8, and 0.9 (79.11 - 14.96) GiB / 83.9 MB = 738 -> 768 on one. SGLang's cap is its request
    pool, 4096 once one GPU's KV cache holds over 8 x 8,192 tokens (over 400,000 tokens on one GPU)."""
    from shardwise.engines.inflight import Replica

    model, cluster = presets.model("llama3-8b"), presets.system("dgx-h100").with_(nodes=1)
    wl = ServingWorkload(512, 128, engine=engine)
    piped = Replica(Scenario(model, cluster, plan_for_serving(1, 8)), wl, 2048)
    assert (piped.round_tokens, piped.max_sequences) == (2048 * budgets, piped_cap)
    assert piped.max_batched_tokens == 2048  # what the user set, per micro-batch
    one = Replica(Scenario(model, cluster.with_(gpus_per_node=1), plan_for_serving(1, 1)), wl, 2048)
    assert (one.round_tokens, one.max_sequences) == (2048, one_cap)


@pytest.mark.parametrize(
    ("engine", "system", "cap"),
    [
        ("vllm", "dgx-h100", 1024),
        ("vllm", "rtx4090-8x", 256),
        ("vllm", "dgx-a100", 256),
        ("sglang", "rtx4090-8x", 2048),
    ],
)
def test_the_engines_default_sequence_cap(engine, system, cap):
    """vLLM's OpenAI server caps max_num_seqs at 1024 on GPUs of 70 GiB or more other than A100,
    256 elsewhere (arg_utils.py get_batch_defaults); a Llama 3 8B replica over 8 RTX 4090, whose
    KV cache holds over a thousand 640-token sequences, runs at most 256 under vLLM."""
    from shardwise.engines.engine_presets import max_sequences
    from shardwise.engines.inflight import Replica

    cluster = presets.system(system)
    assert max_sequences(engine, float(cluster.gpu.memory_bytes), cluster.gpu.name) == cap
    if system == "rtx4090-8x":
        wl = ServingWorkload(512, 128, engine=engine)
        rep = Replica(Scenario(presets.model("llama3-8b"), cluster.with_(nodes=1), plan_for_serving(1, 8)), wl, 2048)
        assert rep.capacity > 1000 and rep.slots == min(rep.capacity, cap)


@pytest.mark.parametrize(("engine", "cap"), [("vllm", 256), ("tensorrt-llm", None)])
def test_vllm_runs_no_more_sequences_than_its_token_budget(engine, cap):
    """vLLM lowers max_num_seqs to max_num_batched_tokens and refuses a larger one
    (arg_utils.py, SchedulerConfig, vLLM 0.34): a 256-token budget on an H100 runs 256 sequences,
    not its default 1024; TensorRT-LLM's max_batch_size is its own."""
    cluster = presets.system("dgx-h100").with_(nodes=1)
    scn = Scenario(presets.model("llama3-8b"), cluster, plan_for_serving(2, 1, 4))
    rep = Replica(scn, ServingWorkload(1024, 1024, engine=engine), 256)
    if cap is None:
        assert rep.max_sequences > 256
    else:
        assert rep.max_sequences == cap and rep.slots == min(rep.capacity, cap)


def test_a_prompt_sits_in_one_micro_batch_of_a_round():
    """With a round budget of several micro-batches, one prompt still takes at most one
    micro-batch's budget per round: a 4,096-token prompt under 1,024 per micro-batch needs 4
    (in both loops; the queue loop asks each (d, q) once)."""
    seen = []

    def cost(d: float, q: float) -> float:
        seen.append(q)
        return 1.0

    traffic = Traffic(users=1, requests=1, rounds=1)
    ref = simulate_reference(cost, 4096, 2, 10, traffic, max_batched_tokens=8 * 1024, chunk_tokens=1024)
    prompt = [q for q in seen[1:] if q > 0]  # the first call sizes the start, not an iteration
    assert prompt == [1024] * 4
    fast = simulate(cost, 4096, 2, 10, traffic, max_batched_tokens=8 * 1024, chunk_tokens=1024)
    assert fast.ttft_s == ref.ttft_s == 4.0
    seen.clear()
    whole = simulate_reference(cost, 4096, 2, 10, traffic, max_batched_tokens=8 * 1024)
    assert [q for q in seen[1:] if q > 0] == [4096]
    assert whole.ttft_s == 1.0


def _same(a, b) -> bool:
    return np.asarray(a).tobytes() == np.asarray(b).tobytes()


@pytest.mark.parametrize(
    ("lengths", "capacity", "budget", "chunk"),
    [
        ((2048, 256), 574, 8192, None),
        ((128, 1), 20, 8192, None),
        ((100, 2), 3, 100, None),
        ((5000, 64), 40, 512, None),
        ((7, 33), 9, 8192, None),
        # pp > 1: a round of pp micro-batch budgets, one prompt's chunk capped at one of them
        ((2048, 256), 574, 8 * 2048, 2048),
        ((5000, 64), 40, 4 * 512, 512),
        ((4096, 16), 300, 8 * 1000, 1000),
        ((1500, 3), 60, 2 * 1024, 1024),
        ((100, 2), 3, 2 * 37, 37),
    ],
)
@pytest.mark.parametrize(
    "traffic",
    [
        Traffic(users=1, requests=200),
        Traffic(users=50, requests=300),
        Traffic(users=600, requests=200),
        Traffic(rate_per_s=40.0, requests=300),
        Traffic(rate_per_s=3.0, requests=150, burstiness=0.5, seed=2),
    ],
)
def test_the_queue_loop_of_one_length_is_the_array_loop_to_the_bit(lengths, capacity, budget, chunk, traffic):
    """One prompt and output length for every request through the loop (`inflight_loops.run_ranks`,
    one rank): every field of the result equals the per-request loop over numpy arrays
    (`tests/inflight_reference.py`) byte for byte, in closed and open loops, with chunked prompts,
    jumps over decode-only runs, a KV cache that holds few requests and, under pp > 1, several
    prompts part done at once (one chunk each capped below the round's budget)."""

    def cost_s(d: float, q: float) -> float:  # steps at a wave boundary, as the GEMMs make them
        return 0.004 + 2e-5 * d + 1.1e-6 * q + (0.001 if d + q > 4096 else 0.0)

    fast = simulate(cost_s, *lengths, capacity, traffic, budget, chunk_tokens=chunk)
    ref = simulate_reference(cost_s, *lengths, capacity, traffic, budget, chunk_tokens=chunk)
    for field in fast.__dataclass_fields__:
        assert _same(getattr(fast, field), getattr(ref, field)), field


@pytest.mark.parametrize(("engine", "pp"), [("tensorrt-llm", 8), ("vllm", 4), ("sglang", 2)])
def test_a_pipelined_replica_runs_the_same_in_both_loops(engine, pp):
    """A replica under pp > 1 (a round of pp budgets, chunks capped at one, the engine's slots)
    gives the same result over queues as over arrays, on its own iteration table."""
    from shardwise.engines.inflight import Replica

    model, cluster = presets.model("llama3-8b"), presets.system("dgx-h100").with_(nodes=1, gpus_per_node=pp)
    wl = ServingWorkload(3000, 100, engine=engine)
    rep = Replica(Scenario(model, cluster, plan_for_serving(1, pp)), wl, 1024)
    assert rep.round_tokens == 1024 * pp
    args = (rep.table, 3000, 100, rep.capacity, Traffic(users=400, requests=500), rep.round_tokens, rep.max_sequences)
    shared = rep.decodes_share_budget  # SGLang's prompts have the whole budget (`engines.inflight.Replica`)
    fast = simulate(*args, chunk_tokens=rep.max_batched_tokens, decodes_share_budget=shared)
    ref = simulate_reference(*args, chunk_tokens=rep.max_batched_tokens, decodes_share_budget=shared)
    assert fast.iterations > 0
    for field in fast.__dataclass_fields__:
        assert _same(getattr(fast, field), getattr(ref, field)), field


@pytest.mark.parametrize(("model", "tp", "pp"), [("llama3-8b", 2, 1), ("llama3-8b", 1, 4), ("mixtral-8x7b", 2, 2)])
def test_the_iteration_table_priced_once_per_token_count_is_the_same_table(monkeypatch, model, tp, pp):
    """The table's linear layers priced once per distinct token count and its decode attention
    once per decode count (`iteration.once_per_value`) give the table priced on the whole grid."""
    from shardwise.engines import iteration

    cluster = presets.system("dgx-h100").with_(nodes=1, gpus_per_node=tp * pp)
    wl = ServingWorkload(1000, 200, 1)
    s = serving_scenario(Scenario(presets.model(model), cluster, plan_for_serving(tp, pp, 1)), wl)
    fast = iteration_table(s, wl, 300, 8192, 1100).seconds
    monkeypatch.setattr(iteration, "once_per_value", iteration._at_once)
    assert _same(fast, iteration_table(s, wl, 300, 8192, 1100).seconds)


def test_the_whole_run_rate_counts_every_token_from_the_first_arrival_to_the_last_completion():
    """`Simulated.run_tokens_per_s` is what a benchmark of a fixed number of requests reports:
    every generated token over its whole duration. With one iteration a second for any load, 10
    requests of 1 prompt token and 4 new tokens arriving within a nanosecond: the first starts
    alone (the others arrive during its first iteration), the nine others join the next, and each
    takes 4 iterations (the prompt and the first token, then 3 decodes): 40 tokens in 5 s."""
    sim = simulate(lambda d, q: 1.0, 1, 4, 100, Traffic(rate_per_s=1e9, requests=10), max_batched_tokens=64)
    assert sim.run_tokens_per_s == pytest.approx(40 / 5, rel=1e-6)
    # arrivals one a second: the run lasts from the first arrival to the last request's end
    slow = simulate(lambda d, q: 1e-3, 1, 4, 100, Traffic(rate_per_s=1.0, requests=60, seed=3), max_batched_tokens=64)
    assert slow.run_tokens_per_s < 60 * 4 / 50  # about 4 tokens a second, not the busy server's rate


def test_a_closed_loop_past_the_running_cap_says_what_caps_it(cli):
    """More requests in flight per replica than run at once: the report says how many run, what caps
    them (the engine's sequence cap, or the KV cache) and how many wait, beside the queueing time."""
    args = ["serve", "--model", "llama3-70b", "--system", "dgx-h100", "--num-gpus", "8", "--plan", "tp=8"]
    code, out, err = cli([*args, "--framework", "vllm", "--concurrency", "2000", "--input-len", "200",
                          "--output-len", "100", "--requests", "200"])  # fmt: skip
    out = " ".join(out.split())
    assert code == 0, err
    assert "2,000 requests in flight per replica, 1,024 run at once (vllm's default cap;" in out
    assert "the other 976 wait in the queue" in out
    code, out, err = cli([*args, "--framework", "vllm", "--concurrency", "16", "--requests", "200"])
    assert code == 0 and "wait in the queue" not in out
    code, out, err = cli(["serve", "--model", "llama3-8b", "--system", "rtx4090-8x", "--num-gpus", "1", "--framework",
                          "vllm", "--concurrency", "100", "--input-len", "2000", "--output-len", "500",
                          "--requests", "100"])  # fmt: skip
    out = " ".join(out.split())
    assert code == 0, err
    assert "run at once (as many as the KV cache holds), the other" in out


def test_the_targets_search_names_a_command_that_reproduces_its_best_option(cli):
    """--ttft-max/--tpot-max ends with the serve command of its best option: that command keeps the
    stack and lengths the search priced (it dropped --framework and --input-len, so it priced
    TensorRT-LLM at 512 prompt tokens instead)."""
    args = ["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--num-gpus", "2", "--framework", "sglang",
            "--input-len", "1000", "--ttft-max", "500ms", "--tpot-max", "50ms", "--requests", "100"]  # fmt: skip
    code, out, err = cli(args)
    assert code == 0, err
    line = " ".join(out.split()).split("in full: ")[1]
    assert "--framework sglang" in line and "--input-len 1000" in line and "--requests 100" in line
    assert "--ttft-max" not in line and "--concurrency" in line


@pytest.mark.parametrize(
    ("kv", "cap", "users", "running"),
    [(100, 256, None, 100), (1000, 256, None, 256), (1000, 0, None, 1000), (1000, 256, 21, 11), (5, 256, 21, 5)],
)
def test_a_replica_runs_what_its_kv_cache_its_engine_and_its_users_let_run(kv, cap, users, running):
    """Sequences one replica runs at once (`InflightEstimate.running_per_replica`, read by `serve`'s
    queue line and its `vllm serve --max-num-seqs`): the KV cache's, at most the engine's cap (none
    at 0) and a closed loop's share of ceil(users / replicas), here over 2 replicas."""
    est = estimate_inflight(scenario(tp=1, dp=2), WL, users=2, requests=20)
    est = replace(est, max_batch=kv, max_sequences=cap, users=users)
    assert est.users_per_replica == (None if users is None else -(-users // 2))
    assert est.running_per_replica == running


def test_the_queue_line_names_what_caps_the_running_sequences():
    """vLLM's cap at its token budget is named as that (--max-batched-tokens), not its default cap."""
    from types import SimpleNamespace

    from shardwise.cli.serve_caps import closed_loop_queue

    def est(cap, budget, engine="vllm"):
        return SimpleNamespace(users_per_replica=1000, max_sequences=cap, max_batch=5000, running_per_replica=cap,
                               max_batched_tokens=budget, workload=SimpleNamespace(engine=engine))  # fmt: skip

    assert "vllm's cap at its token budget, --max-batched-tokens" in closed_loop_queue(est(256, 256))
    assert "vllm's default cap" in closed_loop_queue(est(256, 2048))
    assert "max_batch_size as trtllm-bench" in closed_loop_queue(est(256, 256, "tensorrt-llm"))
    assert "sglang's default cap" in closed_loop_queue(est(512, 512, "sglang"))  # its budget caps nothing
