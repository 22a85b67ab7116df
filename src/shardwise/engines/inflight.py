"""Serving with in-flight (continuous) batching and chunked prefill, simulated iteration by
iteration, as vLLM, SGLang and TensorRT-LLM schedule by default.

Each iteration of a replica (`engines.iteration`): every running request whose prompt is done
decodes one token; the token budget left (`max_batched_tokens` minus the decoding sequences; all
of it where the engine prefills apart from its decodes, SGLang) prefills waiting prompts first
come, first served, in chunks; a prompt's last chunk gives its first token. A request is
admitted when a sequence slot is free and the KV cache can hold its prompt and all its output
(TensorRT-LLM's default `GUARANTEED_NO_EVICT` capacity policy: nothing is preempted), rounded up
to whole blocks of `KV_BLOCK_TOKENS`. Lengths are the workload's for
every request, or drawn per request from a `RequestMix` (`engines.request_mix`); then each
request reserves its own blocks, and the queue waits while the next one does not fit.

Traffic is either a closed loop (`users` requests always in flight: each finished request is
replaced at once, as `vllm bench serve --max-concurrency` or `genai-perf --concurrency` drive a
server; `--max-throughput` is the closed loop at the KV cache's capacity) or an open loop of
arrivals at `rate_per_s`, Poisson or gamma gaps of vLLM's burstiness (seeded, so runs repeat). Percentiles of TTFT, TPOT
and end-to-end latency are over the requests after the first `WARMUP_SHARE`; throughput is the
tokens generated between the end of the warm-up and the last request issued. Time advances by
whole iterations and jumps over runs of identical decode-only iterations (no prompt to prefill,
no arrival, no request finishing), so a run of 1,000 requests takes milliseconds to seconds.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from shardwise.engines.engine_presets import DEFAULT_MAX_SEQUENCES, engine, sglang_max_running_requests
from shardwise.engines.engine_presets import max_sequences as engine_max_sequences
from shardwise.engines.inflight_loops import run_arrays, run_fixed
from shardwise.engines.iteration import IterationTable, iteration_table, iteration_times
from shardwise.engines.request_mix import SUMMARY_DRAWS, arrival_times, sample_lengths, summarize
from shardwise.engines.serving import (
    ServingEstimate,
    kv_cache_free_bytes,
    memory_per_gpu,
    serving_scenario,
)
from shardwise.errors import SpecError
from shardwise.specs import Scenario
from shardwise.specs.request_mix import RequestMix
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
    """Per replica: a closed loop of `users` or arrivals at `rate_per_s` (Poisson, or gamma gaps of
    vLLM's `burstiness`: `engines.request_mix.arrival_times`)."""

    users: int | None = None
    rate_per_s: float | None = None
    requests: int = SIMULATED_REQUESTS
    seed: int = 0
    rounds: int = 0  # a closed loop runs at least this many requests per user (0: CLOSED_LOOP_ROUNDS)
    burstiness: float = 1.0

    @property
    def count(self) -> int:
        """Requests simulated."""
        if self.users is None:
            return self.requests
        return max(self.requests, (self.rounds or CLOSED_LOOP_ROUNDS) * int(self.users))


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


def kv_blocks(input_len: np.ndarray, output_len: np.ndarray) -> np.ndarray:
    """KV-cache blocks each request reserves at admission: its prompt and all its output."""
    return -(-(np.asarray(input_len) + np.asarray(output_len)) // KV_BLOCK_TOKENS)


def simulate(
    cost_s: Callable[[float, float], float],
    input_len: int | np.ndarray,
    output_len: int | np.ndarray,
    capacity: int,
    traffic: Traffic,
    max_batched_tokens: int = MAX_BATCHED_TOKENS,
    max_sequences: int = DEFAULT_MAX_SEQUENCES,
    kv_total_blocks: int | None = None,
    chunk_tokens: int | None = None,
    reference: bool = False,
    decodes_share_budget: bool = True,
    after_first_s: Callable[[float, float], float] | None = None,
) -> Simulated:
    """Run the traffic through one replica whose iteration of d decoding sequences and q prompt
    tokens takes `cost_s(d, q)` seconds (see the module docstring). Lengths are one for every
    request (ints) or one per request (arrays of `traffic.count`); with arrays, `kv_total_blocks`
    (the KV cache in blocks) admits a request only while its blocks fit beside those running.
    `chunk_tokens` caps one prompt's chunk per iteration (default the whole budget): with the pp
    micro-batches of a round each on its own budget, a prompt sits in one of them.
    One length for every request runs over queues (`engines.inflight_loops.run_fixed`), the same
    numbers as over arrays (`reference`: the loop over arrays, for the tests)."""
    if capacity < 1:
        raise ValueError("no request fits the KV cache")
    slots = min(capacity, max_sequences)
    closed = traffic.users is not None
    n = traffic.count
    mixed = np.ndim(input_len) > 0
    if mixed:
        inputs, outputs = np.asarray(input_len, dtype=np.int64), np.asarray(output_len, dtype=np.int64)
        if inputs.shape != (n,) or outputs.shape != (n,):
            raise ValueError(f"per-request lengths must hold {n} requests")
        mean_in, mean_out = float(inputs.mean()), float(outputs.mean())
        blocks = kv_blocks(inputs, outputs) if kv_total_blocks is not None else None
        if blocks is not None and int(blocks.max()) > kv_total_blocks:
            raise ValueError("a request needs more KV cache than the replica has")
    else:
        mean_in, mean_out, blocks = input_len, output_len, None
    free = kv_total_blocks if blocks is not None else 0
    arrival = np.full(n, np.inf)
    if closed:
        # the users start spread over one request's lifetime at full load, not all at once: a
        # burst would stay in step (equal lengths) and never reach the steady state
        issued = min(int(traffic.users), n)
        held = slots if blocks is None else min(slots, int(kv_total_blocks // float(np.mean(blocks))))
        running0 = min(issued, held)
        life = mean_out * cost_s(running0, min(max_batched_tokens, running0 * mean_in / max(mean_out, 1)))
        arrival[:issued] = np.linspace(0.0, life, issued, endpoint=False)
    else:
        arrival = arrival_times(float(traffic.rate_per_s), n, traffic.seed, traffic.burstiness)
        issued = n
    fixed = not mixed and input_len >= 1 and output_len >= 1 and max_batched_tokens >= 1
    if fixed and not reference and (chunk_tokens is None or chunk_tokens >= 1):
        run = run_fixed(
            cost_s, input_len, output_len, slots, closed, arrival, issued, max_batched_tokens, chunk_tokens,
            decodes_share_budget, after_first_s,
        )  # fmt: skip
    else:
        if not mixed:
            inputs, outputs = np.full(n, input_len, dtype=np.int64), np.full(n, output_len, dtype=np.int64)
        run = run_arrays(
            cost_s, inputs, outputs, slots, closed, arrival, issued, max_batched_tokens, blocks, free, chunk_tokens,
            decodes_share_budget, after_first_s,
        )  # fmt: skip
    admitted, first, done, arrival, clock, produced, t, busy, running_area, decode_area, prompt_area, iterations = run
    start = int(WARMUP_SHARE * n)
    measured = slice(start, n)
    ttft = first[measured] - arrival[measured]
    # one output token: no decode step, no time per output token
    if mixed:
        steps_out = outputs[measured] - 1.0
        tpot = np.where(steps_out > 0, (done[measured] - first[measured]) / np.maximum(steps_out, 1.0), np.nan)
    else:
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
    `max_batch` is how many requests the KV cache holds at once (of the mix's mean length). Under
    a request mix the workload's lengths are the mix's means, rounded."""

    users: int | None = None  # closed loop (None with a request rate; None and no rate: capacity)
    request_rate_per_s: float | None = None
    max_request_rate_per_s: float = float("nan")  # the rate the replicas sustain at capacity
    mean_running: float = 0.0  # requests in flight, all replicas
    mean_prompt_tokens: float = 0.0  # prompt tokens per iteration, one replica
    max_batched_tokens: int = MAX_BATCHED_TOKENS
    percentiles_s: dict[str, dict[str, float]] | None = None
    simulated_requests: int = 0
    batching: str = "inflight"
    lengths: str = "fixed"  # the request mix's name ("fixed": every request the workload's lengths)
    mean_input_len: float = float("nan")
    mean_output_len: float = float("nan")
    burstiness: float = 1.0

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
    once; `run` simulates traffic on it. With a request `mix` the lengths are drawn per request
    (truncated to the model's context, `engines.request_mix`), the KV cache admits requests by
    their own blocks, and the iteration cost is priced, as with fixed lengths, on one grid: for
    the mix's mean prompt and the mean context decode reads (`MixSummary`)."""

    def __init__(
        self,
        scn: Scenario,
        wl: ServingWorkload,
        max_batched_tokens: int = MAX_BATCHED_TOKENS,
        mix: RequestMix | None = None,
        seed: int = 0,
    ) -> None:
        self.scenario = scn = serving_scenario(scn, wl)
        self.max_batched_tokens, self.mix = max_batched_tokens, mix
        # an iteration here is one round of the pp micro-batches; where the engine schedules each
        # micro-batch with its own budget (and slots), the round holds pp of them
        # (`engines.engine_presets`, "Budgets under pipeline parallelism")
        preset, pp = engine(wl.engine), int(np.max(scn.plan.pp))
        self.round_tokens = max_batched_tokens * (pp if preset.budget_per_micro_batch else 1)
        # the decoding sequences take their tokens from that budget where a batch mixes them with
        # prompt chunks; where prompts are prefilled apart (SGLang, mixed chunks off), the whole
        # budget is the prompts' (`PrefillAdder` is given 0 decode tokens then)
        self.decodes_share_budget = not preset.prefill_apart
        # ... and on one GPU its prefill step comes before the decode step of the same iteration: the
        # prompts' first tokens are sampled at its end, a decode step c(d, 0) before the iteration's
        # (`engines.iteration`, prefill apart); under pp the round's end is kept
        self.prefill_step_first = preset.prefill_apart and pp == 1
        gpu = scn.cluster.gpu
        cap = engine_max_sequences(wl.engine, float(np.max(gpu.memory_bytes)), gpu.name)
        self.max_sequences = cap * (pp if preset.slots_per_micro_batch else 1)
        self.replicas = int(scn.plan.dp)
        self.max_context = int(np.max(scn.model.seq_len))
        self.kv_total_blocks: int | None = None
        if mix is None:
            self.workload = wl
            weights, kv_per_seq = memory_per_gpu(scn, wl)
            self.weights_bytes, self.kv_bytes_per_sequence = float(weights), float(kv_per_seq)
            context = wl.input_len + wl.output_len
            free = float(kv_cache_free_bytes(scn, wl, self.weights_bytes))
            per_token = self.kv_bytes_per_sequence / context
            self._cap_by_kv_tokens(wl, free, per_token)
            self.capacity = kv_capacity(max(free, 0.0), per_token, wl.input_len, wl.output_len)
            self.slots = top = min(self.capacity, self.max_sequences)
            self.mean_context = wl.input_len + wl.output_len / 2
            self.mean_input_len, self.mean_output_len = wl.input_len, wl.output_len
        else:
            inputs, outputs = sample_lengths(mix, SUMMARY_DRAWS, seed, self.max_context)
            summary = summarize(inputs, outputs)
            self.mean_input_len, self.mean_output_len = summary.mean_input_len, summary.mean_output_len
            self.workload = wl = replace(
                wl, input_len=max(1, round(summary.mean_input_len)), output_len=max(1, round(summary.mean_output_len))
            )
            weights, kv_per_seq = memory_per_gpu(scn, wl)
            self.weights_bytes = float(weights)
            per_token = float(kv_per_seq) / (wl.input_len + wl.output_len)
            self.kv_bytes_per_sequence = per_token * (summary.mean_input_len + summary.mean_output_len)
            free = float(kv_cache_free_bytes(scn, wl, self.weights_bytes))
            self.kv_total_blocks = int(max(free, 0.0) // (KV_BLOCK_TOKENS * per_token))
            self._cap_by_kv_tokens(wl, free, per_token)
            blocks = kv_blocks(inputs, outputs)
            self.capacity = int(self.kv_total_blocks // float(np.mean(blocks)))
            self.slots = min(self.capacity, self.max_sequences)
            # short requests pack more sequences than the mean: price up to as many as the cache holds
            top = min(self.max_sequences, max(self.slots, self.kv_total_blocks // int(blocks.min())))
            self.mean_context = summary.decode_context
        fits = self.capacity >= 1
        self.top = top  # the most decoding sequences the iteration table prices
        self.table = self._table(top) if fits else None

    def _decode_step_s(self, d: float, q: float) -> float:
        """The decode step of `d` sequences that follows a prefill step in one iteration (`q` > 0)."""
        return self.table(d, 0.0) if d > 0 and self.table is not None else 0.0

    def _table(self, top: int) -> IterationTable:
        scn, wl = self.scenario, self.workload
        return iteration_table(scn, wl, top, self.round_tokens, self.mean_context, self.max_batched_tokens)

    def holding(self, sequences: int) -> Replica:
        """This replica as if its memory held `sequences` requests at once (of the mean length) instead of
        `capacity`: the same GPUs, kernels and engine (its cap on sequences still applies), only more or
        less KV cache (`analyses.pp_scaling`)."""
        other = copy.copy(self)
        scale = sequences / max(self.capacity, 1)
        other.capacity = int(sequences)
        other.slots = min(other.capacity, self.max_sequences)
        if self.kv_total_blocks is not None:
            other.kv_total_blocks = int(self.kv_total_blocks * scale)
        other.top = min(self.max_sequences, max(other.slots, int(self.top * scale)))
        fits = other.capacity >= 1
        other.table = other._table(other.top) if fits else None
        return other

    def _cap_by_kv_tokens(self, wl: ServingWorkload, free_bytes: float, per_token_bytes: float) -> None:
        """SGLang sizes its request pool, and so its cap, by the KV tokens of one GPU
        (`engines.engine_presets.sglang_max_running_requests`)."""
        if wl.engine == "sglang" and per_token_bytes > 0:
            tokens = max(free_bytes, 0.0) / per_token_bytes
            self.max_sequences = sglang_max_running_requests(tokens, self.max_context)

    def run(self, traffic: Traffic) -> Simulated:
        if self.table is None:
            raise ValueError("no request fits the KV cache")
        wl = self.workload
        after = self._decode_step_s if self.prefill_step_first else None  # this replica's table (`holding`)
        if self.mix is None:
            return simulate(
                self.table, wl.input_len, wl.output_len, self.capacity, traffic, self.round_tokens, self.max_sequences,
                chunk_tokens=self.max_batched_tokens, decodes_share_budget=self.decodes_share_budget,
                after_first_s=after,
            )  # fmt: skip
        inputs, outputs = sample_lengths(self.mix, traffic.count, traffic.seed, self.max_context)
        need = int(kv_blocks(inputs, outputs).max())
        if need > self.kv_total_blocks:
            raise SpecError(
                f"--lengths {self.mix.name}: a request of {need * KV_BLOCK_TOKENS:,} tokens needs more KV cache than "
                f"a replica of this plan holds ({self.kv_total_blocks * KV_BLOCK_TOKENS:,} tokens)"
            )
        return simulate(
            self.table, inputs, outputs, self.max_sequences, traffic, self.round_tokens, self.max_sequences,
            self.kv_total_blocks, self.max_batched_tokens, decodes_share_budget=self.decodes_share_budget,
            after_first_s=after,
        )  # fmt: skip


def queued_behind(sim: Simulated, extra_users: int, output_len: float) -> Simulated:
    """`sim`, a closed loop already past the KV cache's slots (saturated: every slot busy, a queue
    waiting), with `extra_users` more users: they only lengthen the first-come-first-served queue,
    so each request waits extra_users / X longer, X the requests per second the saturated replica
    completes (Little's law, L = X W; `output_len` the mean new tokens per request); throughput and
    time per token do not change. Simulating them would cost time in proportion to the users (a
    billion would not finish)."""
    wait = extra_users / (sim.throughput_tokens_per_s / output_len)
    return replace(sim, ttft_s=sim.ttft_s + wait, e2e_s=sim.e2e_s + wait, queue_s=sim.queue_s + wait)


def estimate_inflight(
    scn: Scenario,
    wl: ServingWorkload,
    users: int | None = None,
    rate_per_s: float | None = None,
    max_batched_tokens: int = MAX_BATCHED_TOKENS,
    requests: int = SIMULATED_REQUESTS,
    mix: RequestMix | None = None,
    seed: int = 0,
    burstiness: float = 1.0,
) -> InflightEstimate:
    """Serve `wl` with in-flight batching on every replica of `scn`: a closed loop of `users`
    requests in flight in all (None with no rate: as many as the KV cache holds, the maximum
    throughput) or arrivals at `rate_per_s` requests per second in all (Poisson, or gamma gaps of
    `burstiness`), spread evenly over the replicas; every request `wl`'s lengths, or drawn from
    `mix`. Medians in the `ServingEstimate` fields; percentiles beside them."""
    replica = Replica(scn, wl, max_batched_tokens, mix, seed)
    scn, replicas, slots = replica.scenario, replica.replicas, replica.slots
    if replica.table is None:
        nan = float("nan")
        return InflightEstimate(
            scn, replica.workload, nan, nan, nan, 0.0, 0, replica.weights_bytes, 0.0, {}, {}, nan, users=users,
            lengths="fixed" if mix is None else mix.name,
        )  # fmt: skip
    saturated = replica.run(Traffic(users=slots, requests=requests, seed=seed))  # the rate the replicas sustain
    if rate_per_s is not None:
        arrivals = Traffic(rate_per_s=rate_per_s / replicas, requests=requests, seed=seed, burstiness=burstiness)
        sim = replica.run(arrivals)
    elif users is not None:
        per_replica = math.ceil(users / replicas)
        simulated = min(per_replica, QUEUED_SIMULATED * slots)
        sim = replica.run(Traffic(users=simulated, requests=requests, seed=seed))
        if per_replica > simulated:
            sim = queued_behind(sim, per_replica - simulated, replica.mean_output_len)
    else:
        sim = saturated
    return estimate_from(replica, sim, saturated, users, rate_per_s, burstiness)


def estimate_from(
    replica: Replica,
    sim: Simulated,
    saturated: Simulated,
    users: int | None,
    rate_per_s: float | None,
    burstiness: float = 1.0,
) -> InflightEstimate:
    """The estimate of what `sim` ran on `replica`, all replicas together; `saturated` (the KV
    cache kept full) gives the rate the replicas sustain."""
    scn, wl, replicas, slots = replica.scenario, replica.workload, replica.replicas, replica.slots
    d, q = np.asarray(sim.mean_decode), np.asarray(sim.mean_prompt_tokens)
    mean = iteration_times(scn, wl, d, q, replica.mean_context, replica.max_batched_tokens)
    parts = {"compute": mean.compute_s, "tp_comm": mean.tp_comm_s, "pp_p2p": mean.pp_p2p_s}
    ttft, queue = np.median(sim.ttft_s), np.median(sim.queue_s)
    max_rate = replicas * saturated.throughput_tokens_per_s / replica.mean_output_len
    # arrivals faster than that: the queue grows and the replicas run flat out (a finite run
    # would still be filling up)
    rate_throughput = min(sim.throughput_tokens_per_s, saturated.throughput_tokens_per_s)
    if rate_per_s is not None and rate_per_s > max_rate:
        rate_throughput = saturated.throughput_tokens_per_s
    # the workload's batch: the requests kept in flight (a rate: the mean in flight)
    in_flight = users if users is not None else (slots * replicas if rate_per_s is None else sim.mean_running)
    has_tpot = replica.mix is not None or wl.output_len > 1
    return InflightEstimate(
        scenario=scn,
        workload=replace(wl, batch=max(1, round(in_flight * (replicas if rate_per_s is not None else 1)))),
        ttft_s=float(ttft),
        tpot_s=float(np.nanmedian(sim.tpot_s)) if has_tpot and np.isfinite(sim.tpot_s).any() else float("nan"),
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
        lengths="fixed" if replica.mix is None else replica.mix.name,
        mean_input_len=float(replica.mean_input_len),
        mean_output_len=float(replica.mean_output_len),
        burstiness=burstiness,
    )
