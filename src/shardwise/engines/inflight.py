"""Serving with in-flight (continuous) batching and chunked prefill, simulated iteration by
iteration, as vLLM, SGLang and TensorRT-LLM schedule by default.

Each iteration of a replica (`engines.iteration`): every running request whose prompt is done
decodes one token; the token budget left (`max_batched_tokens` minus the decoding sequences)
prefills waiting prompts first come, first served, in chunks; a prompt's last chunk gives its
first token. A request is admitted when a sequence slot is free and the KV cache can hold its
prompt and all its output (TensorRT-LLM's default `GUARANTEED_NO_EVICT` capacity policy: nothing
is preempted), rounded up to whole blocks of `KV_BLOCK_TOKENS`.

Traffic is either a closed loop (`users` requests always in flight: each finished request is
replaced at once, as `vllm bench serve --max-concurrency` or `genai-perf --concurrency` drive a
server; `--max-throughput` is the closed loop at the KV cache's capacity) or an open loop of
Poisson arrivals at `rate_per_s` (a seeded generator, so runs repeat). Percentiles of TTFT, TPOT
and end-to-end latency are over the requests after the first `WARMUP_SHARE`; throughput is the
tokens generated between the end of the warm-up and the last request issued. Time advances by
whole iterations and jumps over runs of identical decode-only iterations (no prompt to prefill,
no arrival, no request finishing), so a run of 1,000 requests takes milliseconds to seconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from shardwise.engines.iteration import iteration_table, iteration_times
from shardwise.engines.serving import (
    KV_CACHE_FRACTION,
    MAX_SEQUENCES,
    ServingEstimate,
    memory_per_gpu,
    serving_scenario,
)
from shardwise.physics.memory import RUNTIME_RESERVED_BYTES
from shardwise.specs import Scenario
from shardwise.specs.serving import ServingWorkload

# vLLM's default KV block (CacheConfig.block_size, 16 tokens on CUDA).
KV_BLOCK_TOKENS = 16
# Tokens one iteration may process: TensorRT-LLM's default `max_num_tokens` (8192). vLLM's
# `max_num_batched_tokens` default depends on version and GPU (2048 to 16384): set it to match.
MAX_BATCHED_TOKENS = 8192
SIMULATED_REQUESTS = 1000
# A closed loop runs at least this many requests per user (so that the steady state dominates).
CLOSED_LOOP_ROUNDS = 8
WARMUP_SHARE = 0.1
# A closed loop of more users than QUEUED_SIMULATED x the replica's sequence slots is simulated with
# that many, the rest added as queueing time (`queued_behind`): beyond it every slot is busy and a
# queue waits, so more users change nothing but the wait.
QUEUED_SIMULATED = 4
PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class Traffic:
    """Per replica: a closed loop of `users` or Poisson arrivals at `rate_per_s`."""

    users: int | None = None
    rate_per_s: float | None = None
    requests: int = SIMULATED_REQUESTS
    seed: int = 0
    rounds: int = 0  # a closed loop runs at least this many requests per user (0: CLOSED_LOOP_ROUNDS)


@dataclass(frozen=True)
class Simulated:
    """What one replica did: per measured request (seconds), and the steady state."""

    ttft_s: np.ndarray
    tpot_s: np.ndarray
    e2e_s: np.ndarray
    queue_s: np.ndarray  # waiting before admission (part of the TTFT)
    throughput_tokens_per_s: float
    mean_running: float  # requests admitted, time-weighted over the run
    mean_decode: float  # decoding sequences per iteration, time-weighted
    mean_prompt_tokens: float  # prompt tokens per iteration, time-weighted
    iterations: int


def kv_capacity(free_bytes: float, kv_bytes_per_token: float, input_len: int, output_len: int) -> int:
    """Requests whose whole context (prompt + output, in blocks) fits `free_bytes` at once."""
    blocks = math.ceil((input_len + output_len) / KV_BLOCK_TOKENS)
    per_request = blocks * KV_BLOCK_TOKENS * kv_bytes_per_token
    return max(0, int(free_bytes // per_request)) if per_request > 0 else 0


def simulate(
    cost_s: Callable[[float, float], float],
    input_len: int,
    output_len: int,
    capacity: int,
    traffic: Traffic,
    max_batched_tokens: int = MAX_BATCHED_TOKENS,
    max_sequences: int = MAX_SEQUENCES,
) -> Simulated:
    """Run the traffic through one replica whose iteration of d decoding sequences and q prompt
    tokens takes `cost_s(d, q)` seconds (see the module docstring)."""
    if capacity < 1:
        raise ValueError("no request fits the KV cache")
    slots = min(capacity, max_sequences)
    closed = traffic.users is not None
    rounds = traffic.rounds or CLOSED_LOOP_ROUNDS
    n = traffic.requests if not closed else max(traffic.requests, rounds * int(traffic.users))
    arrival = np.full(n, np.inf)
    if closed:
        # the users start spread over one request's lifetime at full load, not all at once: a
        # burst would stay in step (equal lengths) and never reach the steady state
        issued = min(int(traffic.users), n)
        running = min(issued, slots)
        life = output_len * cost_s(running, min(max_batched_tokens, running * input_len / max(output_len, 1)))
        arrival[:issued] = np.linspace(0.0, life, issued, endpoint=False)
    else:
        rng = np.random.default_rng(traffic.seed)
        arrival = np.cumsum(rng.exponential(1.0 / float(traffic.rate_per_s), n))
        issued = n
    prompt_left = np.full(n, input_len, dtype=np.int64)
    decode_left = np.full(n, output_len - 1, dtype=np.int64)
    admitted, first, done = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    running: list[int] = []
    nxt = finished = iterations = 0
    t = tokens = 0.0
    clock, produced = [0.0], [0.0]  # (time, tokens generated) after each step
    busy = running_area = decode_area = prompt_area = 0.0
    while finished < n:
        while nxt < issued and arrival[nxt] <= t and len(running) < slots:
            running.append(nxt)
            admitted[nxt] = t
            nxt += 1
        if not running:
            t = float(arrival[nxt])
            continue
        ids = np.asarray(running)
        left = prompt_left[ids]
        decoding = ids[left == 0]
        d = len(decoding)
        waiting = ids[left > 0]
        need = prompt_left[waiting]
        room = max(max_batched_tokens - d, 0)
        take = np.clip(room - (np.cumsum(need) - need), 0, need)
        q = int(take.sum())
        if d == 0 and q == 0:  # a budget smaller than one prompt chunk still makes progress
            take[0], q = min(need[0], max_batched_tokens), min(int(need[0]), max_batched_tokens)
        dt = cost_s(d, q)
        steps = 1
        if q == 0:  # decode only: jump to the next finish or admission
            steps = int(decode_left[decoding].min()) if d else 1
            if nxt < issued and len(running) < slots and np.isfinite(arrival[nxt]):
                steps = min(steps, max(1, math.ceil((arrival[nxt] - t) / dt)))
            steps = max(steps, 1)
        t += steps * dt
        iterations += steps
        busy += steps * dt
        running_area += steps * dt * len(running)
        decode_area += steps * dt * d
        prompt_area += dt * q
        decode_left[decoding] -= steps
        made = steps * d
        if q:
            prompt_left[waiting] -= take
            now_first = waiting[(take > 0) & (prompt_left[waiting] == 0)]
            first[now_first] = t
            made += len(now_first)
        tokens += made
        clock.append(t)
        produced.append(tokens)
        ended = ids[(prompt_left[ids] == 0) & (decode_left[ids] <= 0) & ~np.isnan(first[ids])]
        if len(ended):
            done[ended] = t
            gone = set(ended.tolist())
            running = [i for i in running if i not in gone]
            finished += len(ended)
            if closed:
                fresh = min(len(ended), n - issued)
                arrival[issued : issued + fresh] = t
                issued += fresh
    start = int(WARMUP_SHARE * n)
    measured = slice(start, n)
    ttft = first[measured] - arrival[measured]
    # one output token: no decode step, no time per output token
    tpot = (done[measured] - first[measured]) / (output_len - 1) if output_len > 1 else np.full(n - start, np.nan)
    t0 = float(done[np.argsort(done)[start]]) if closed else float(arrival[start])
    t1 = float(arrival[n - 1]) if not closed else float(np.max(arrival[np.isfinite(arrival)]))
    clock_a, produced_a = np.asarray(clock), np.asarray(produced)
    if t1 <= t0:  # too few requests to see a steady state: the whole run
        t0, t1 = 0.0, float(clock_a[-1])
    made = np.interp(t1, clock_a, produced_a) - np.interp(t0, clock_a, produced_a)
    return Simulated(
        ttft_s=ttft,
        tpot_s=tpot,
        e2e_s=done[measured] - arrival[measured],
        queue_s=admitted[measured] - arrival[measured],
        throughput_tokens_per_s=float(made / (t1 - t0)) if t1 > t0 else 0.0,
        mean_running=running_area / t if t > 0 else 0.0,  # over the whole run, idle time included
        mean_decode=decode_area / busy if busy else 0.0,
        mean_prompt_tokens=prompt_area / busy if busy else 0.0,
        iterations=iterations,
    )


@dataclass(frozen=True)
class InflightEstimate(ServingEstimate):
    """A `ServingEstimate` under in-flight batching: TTFT, TPOT and latency are medians over the
    simulated requests (percentiles in `percentiles_s`), the memory that of the mean load;
    `max_batch` is how many requests the KV cache holds at once."""

    users: int | None = None  # closed loop (None with a request rate; None and no rate: capacity)
    request_rate_per_s: float | None = None
    max_request_rate_per_s: float = float("nan")  # the rate the replicas sustain at capacity
    mean_running: float = 0.0  # requests in flight, all replicas
    mean_prompt_tokens: float = 0.0  # prompt tokens per iteration, one replica
    max_batched_tokens: int = MAX_BATCHED_TOKENS
    percentiles_s: dict[str, dict[str, float]] | None = None
    simulated_requests: int = 0
    batching: str = "inflight"

    @property
    def fits_in_memory(self) -> bool:  # requests beyond the KV cache wait; one must fit
        return bool(self.max_batch >= 1)

    @property
    def overloaded(self) -> bool:
        """Requests arrive faster than the replicas can serve them: queues grow without bound."""
        rate = self.request_rate_per_s
        return rate is not None and rate > self.max_request_rate_per_s


def percentiles(values: np.ndarray) -> dict[str, float]:
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return {f"p{p}": float(np.percentile(v, p)) if v.size else float("nan") for p in PERCENTILES}


class Replica:
    """One replica of `scn` serving `wl` in flight: its KV capacity and iteration costs, prepared
    once; `run` simulates traffic on it."""

    def __init__(self, scn: Scenario, wl: ServingWorkload, max_batched_tokens: int = MAX_BATCHED_TOKENS) -> None:
        self.scenario = scn = serving_scenario(scn, wl)
        self.workload, self.max_batched_tokens = wl, max_batched_tokens
        self.replicas = int(scn.plan.dp)
        weights, kv_per_seq = memory_per_gpu(scn, wl)
        self.weights_bytes, self.kv_bytes_per_sequence = float(weights), float(kv_per_seq)
        context = wl.input_len + wl.output_len
        gpu_bytes = float(scn.cluster.gpu.memory_bytes)
        free = KV_CACHE_FRACTION * (gpu_bytes - self.weights_bytes - RUNTIME_RESERVED_BYTES)
        self.capacity = kv_capacity(max(free, 0.0), self.kv_bytes_per_sequence / context, wl.input_len, wl.output_len)
        self.slots = min(self.capacity, MAX_SEQUENCES)
        self.mean_context = wl.input_len + wl.output_len / 2
        self.table = (
            iteration_table(scn, wl, self.slots, max_batched_tokens, self.mean_context) if self.capacity >= 1 else None
        )

    def run(self, traffic: Traffic) -> Simulated:
        if self.table is None:
            raise ValueError("no request fits the KV cache")
        wl = self.workload
        return simulate(self.table, wl.input_len, wl.output_len, self.capacity, traffic, self.max_batched_tokens)


def queued_behind(sim: Simulated, extra_users: int, output_len: int) -> Simulated:
    """`sim`, a closed loop already past the KV cache's slots (saturated: every slot busy, a queue
    waiting), with `extra_users` more users: they only lengthen the first-come-first-served queue,
    so each request waits extra_users / X longer, X the requests per second the saturated replica
    completes (Little's law, L = X W); throughput and time per token do not change. Simulating
    them would cost time in proportion to the users (a billion would not finish)."""
    wait = extra_users / (sim.throughput_tokens_per_s / output_len)
    return replace(
        sim, ttft_s=sim.ttft_s + wait, e2e_s=sim.e2e_s + wait, queue_s=sim.queue_s + wait, mean_running=sim.mean_running
    )


def estimate_inflight(
    scn: Scenario,
    wl: ServingWorkload,
    users: int | None = None,
    rate_per_s: float | None = None,
    max_batched_tokens: int = MAX_BATCHED_TOKENS,
    requests: int = SIMULATED_REQUESTS,
) -> InflightEstimate:
    """Serve `wl` with in-flight batching on every replica of `scn`: a closed loop of `users`
    requests in flight in all (None with no rate: as many as the KV cache holds, the maximum
    throughput) or Poisson arrivals at `rate_per_s` requests per second in all, spread evenly
    over the replicas. Medians in the `ServingEstimate` fields; percentiles beside them."""
    replica = Replica(scn, wl, max_batched_tokens)
    scn, replicas, slots = replica.scenario, replica.replicas, replica.slots
    if replica.table is None:
        nan = float("nan")
        return InflightEstimate(scn, wl, nan, nan, nan, 0.0, 0, replica.weights_bytes, 0.0, {}, {}, nan, users=users)
    saturated = replica.run(Traffic(users=slots, requests=requests))  # the rate the replicas sustain
    if rate_per_s is not None:
        sim = replica.run(Traffic(rate_per_s=rate_per_s / replicas, requests=requests))
    elif users is not None:
        per_replica = math.ceil(users / replicas)
        simulated = min(per_replica, QUEUED_SIMULATED * slots)
        sim = replica.run(Traffic(users=simulated, requests=requests))
        if per_replica > simulated:
            sim = queued_behind(sim, per_replica - simulated, wl.output_len)
    else:
        sim = saturated
    return estimate_from(replica, sim, saturated, users, rate_per_s)


def estimate_from(
    replica: Replica, sim: Simulated, saturated: Simulated, users: int | None, rate_per_s: float | None
) -> InflightEstimate:
    """The estimate of what `sim` ran on `replica`, all replicas together; `saturated` (the KV
    cache kept full) gives the rate the replicas sustain."""
    scn, wl, replicas, slots = replica.scenario, replica.workload, replica.replicas, replica.slots
    mean = iteration_times(
        scn, wl, np.asarray(sim.mean_decode), np.asarray(sim.mean_prompt_tokens), replica.mean_context
    )
    parts = {"compute": mean.compute_s, "tp_comm": mean.tp_comm_s, "pp_p2p": mean.pp_p2p_s}
    ttft, queue = np.median(sim.ttft_s), np.median(sim.queue_s)
    max_rate = replicas * saturated.throughput_tokens_per_s / wl.output_len
    # arrivals faster than that: the queue grows and the replicas run flat out (a finite run
    # would still be filling up)
    rate_throughput = min(sim.throughput_tokens_per_s, saturated.throughput_tokens_per_s)
    if rate_per_s is not None and rate_per_s > max_rate:
        rate_throughput = saturated.throughput_tokens_per_s
    # the workload's batch: the requests kept in flight (a rate: the mean in flight)
    in_flight = users if users is not None else (slots * replicas if rate_per_s is None else sim.mean_running)
    return InflightEstimate(
        scenario=scn,
        workload=replace(wl, batch=max(1, round(in_flight * (replicas if rate_per_s is not None else 1)))),
        ttft_s=float(ttft),
        tpot_s=float(np.nanmedian(sim.tpot_s)) if wl.output_len > 1 else float("nan"),
        e2e_s=float(np.median(sim.e2e_s)),
        throughput_tokens_per_s=replicas * (rate_throughput if rate_per_s is not None else sim.throughput_tokens_per_s),
        max_batch=replica.capacity,
        weights_bytes=replica.weights_bytes,
        kv_cache_bytes=sim.mean_running * replica.kv_bytes_per_sequence,
        prefill_s={"queueing": float(queue), "prefill": float(ttft - queue)},
        decode_s={k: float(v) for k, v in parts.items()},
        decode_utilization=float("nan"),
        users=users if rate_per_s is None else None,
        request_rate_per_s=rate_per_s,
        max_request_rate_per_s=max_rate,
        mean_running=replicas * sim.mean_running,
        mean_prompt_tokens=sim.mean_prompt_tokens,
        max_batched_tokens=replica.max_batched_tokens,
        percentiles_s={
            "ttft_s": percentiles(sim.ttft_s),
            "tpot_s": percentiles(sim.tpot_s),
            "e2e_s": percentiles(sim.e2e_s),
        },
        simulated_requests=len(sim.ttft_s),
    )
