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
tokens generated between the end of the warm-up and the last request issued (a closed loop), or
at a rate the offered tokens (rate x mean output) times the share the replica kept up with over
that window (`inflight_sim.delivered_share`: below 1 only where its queue grows). Time advances by
whole iterations and jumps over runs of identical decode-only iterations (no prompt to prefill,
no arrival, no request finishing), so a run of 1,000 requests takes milliseconds to seconds.

The estimate over all replicas lives here (`estimate_inflight`); one replica's run in
`engines.inflight_sim` (`simulate`, `Traffic`), the replica itself in `engines.inflight_replica`
(`Replica`); this module re-exports both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from shardwise.engines.inflight_replica import Replica
from shardwise.engines.inflight_sim import (
    CLOSED_LOOP_ROUNDS,
    KV_BLOCK_TOKENS,
    MAX_BATCHED_TOKENS,
    SIMULATED_REQUESTS,
    WARMUP_SHARE,
    Simulated,
    Traffic,
    kv_blocks,
    kv_capacity,
    simulate,
)
from shardwise.engines.iteration import iteration_times
from shardwise.engines.serving import ServingEstimate
from shardwise.specs import Scenario
from shardwise.specs.request_mix import RequestMix
from shardwise.specs.serving import ServingWorkload

# A closed loop of more users than QUEUED_SIMULATED x the replica's sequence slots is simulated with
# that many, the rest added as queueing time (`queued_behind`): beyond it every slot is busy and a
# queue waits, so more users change nothing but the wait.
QUEUED_SIMULATED = 4
PERCENTILES = (50, 90, 99)
# At a rate, the tokens generated are the tokens offered (rate x mean output, what `serve --lengths`
# promises within about 1%) unless the queue grows: below this share short, the report says so.
DELIVERY_TOLERANCE = 0.01


@dataclass(frozen=True)
class InflightEstimate(ServingEstimate):
    """A `ServingEstimate` under in-flight batching: TTFT, TPOT and latency are medians over the
    simulated requests (percentiles in `percentiles_s`), the memory per GPU the weights and the KV
    pool the engine pre-allocates (`kv_in_use_bytes` what the mean load fills of it);
    `max_batch` is how many requests the KV cache holds at once (of the mix's mean length). Under
    a request mix the workload's lengths are the mix's means, rounded."""

    users: int | None = None  # closed loop (None with a request rate; None and no rate: capacity)
    request_rate_per_s: float | None = None
    # a rate: the new tokens it asks for per second (rate x mean output), all replicas; nan without one
    offered_tokens_per_s: float = float("nan")
    max_request_rate_per_s: float = float("nan")  # the rate the replicas sustain at capacity
    mean_running: float = 0.0  # requests running (admitted), time-weighted mean, all replicas
    kv_in_use_bytes: float = 0.0  # per GPU, the KV cache the mean running requests fill (of `kv_cache_bytes`, the pool)
    mean_prompt_tokens: float = 0.0  # prompt tokens per iteration, one replica (the mean over its iterations)
    max_batched_tokens: int = MAX_BATCHED_TOKENS  # one micro-batch's
    # one iteration's: a round of the pp micro-batches, each with its own budget where the engine gives
    # it one (`EnginePreset.budget_per_micro_batch`); 0: max_batched_tokens
    round_tokens: int = 0
    percentiles_s: dict[str, dict[str, float]] | None = None
    simulated_requests: int = 0
    batching: str = "inflight"
    lengths: str = "fixed"  # the request mix's name ("fixed": every request the workload's lengths)
    mean_input_len: float = float("nan")
    mean_output_len: float = float("nan")
    burstiness: float = 1.0
    # the engine's cap on sequences running at once in one replica (`serving.max_sequences_per_replica`;
    # TensorRT-LLM: max_batch_size as trtllm-bench sets it); min(it, max_batch) run, the rest queue
    max_sequences: int = 0

    @property
    def fits_in_memory(self) -> bool:  # requests beyond the KV cache wait; one must fit
        return bool(self.max_batch >= 1)

    @property
    def users_per_replica(self) -> int | None:
        """A closed loop's requests in flight in its fullest replica, ceil(users / replicas); None
        without a closed loop."""
        return None if self.users is None else -(-int(self.users) // int(self.scenario.plan.dp))

    @property
    def running_per_replica(self) -> int:
        """Sequences one replica runs at once: as many as its KV cache holds (`max_batch`), at most
        the engine's cap (`max_sequences`, where it has one) and a closed loop's share
        (`users_per_replica`); the other requests in flight wait in the queue."""
        kv = int(self.max_batch)
        running = min(kv, int(self.max_sequences) or kv)
        users = self.users_per_replica
        return running if users is None else min(running, users)

    @property
    def short_of_offered(self) -> bool:
        """At a rate: the replicas generate less than the tokens offered (rate x mean output) by more
        than `DELIVERY_TOLERANCE`: over capacity, or their queue grew over the simulated window."""
        offered = float(self.offered_tokens_per_s)
        return bool(offered > 0 and float(self.throughput_tokens_per_s) < (1.0 - DELIVERY_TOLERANCE) * offered)

    @property
    def overloaded(self) -> bool:
        """Requests arrive faster than the replicas can serve them: queues grow without bound."""
        rate = self.request_rate_per_s
        return rate is not None and rate > self.max_request_rate_per_s


def percentiles(values: np.ndarray) -> dict[str, float]:
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return {f"p{p}": float(np.percentile(v, p)) if v.size else float("nan") for p in PERCENTILES}


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
    replica: Replica | None = None,
) -> InflightEstimate:
    """Serve `wl` with in-flight batching on every replica of `scn`: a closed loop of `users`
    requests in flight in all (None with no rate: as many as the KV cache holds, the maximum
    throughput) or arrivals at `rate_per_s` requests per second in all (Poisson, or gamma gaps of
    `burstiness`), spread evenly over the replicas; every request `wl`'s lengths, or drawn from
    `mix`. Medians in the `ServingEstimate` fields; percentiles beside them. `replica`: this one,
    already built from the same arguments (`requests.serve_result` keeps it for the scaling split)."""
    replica = Replica(scn, wl, max_batched_tokens, mix, seed) if replica is None else replica
    scn, replicas, slots = replica.scenario, replica.replicas, replica.slots
    if replica.table is None:
        nan = float("nan")
        return InflightEstimate(
            scn, replica.workload, nan, nan, nan, 0.0, 0, replica.weights_bytes, replica.kv_pool_bytes, {}, {}, nan,
            users=users, lengths="fixed" if mix is None else mix.name,
            # the budget and pool it was priced with, as a simulated one's (review 50 #8, #10)
            max_batched_tokens=replica.max_batched_tokens, round_tokens=int(replica.round_tokens),
        )  # fmt: skip
    saturated = replica.run(Traffic(users=slots, requests=requests, seed=seed))  # the rate the replicas sustain
    if rate_per_s is not None:
        arrivals = Traffic(rate_per_s=rate_per_s / replicas, requests=requests, seed=seed, burstiness=burstiness)
        sim = replica.run(arrivals)
    elif users is not None:
        per_replica = math.ceil(users / replicas)
        simulated = min(per_replica, QUEUED_SIMULATED * slots)
        # ranks in lockstep run together: the group's users exactly (9 over 8 ranks: 9, not 16)
        group = users if replica.lockstep is not None and per_replica == simulated else None
        sim = replica.run(Traffic(users=simulated, requests=requests, seed=seed, group_users=group))
        if per_replica > simulated:
            sim = queued_behind(sim, per_replica - simulated, replica.mean_output_len)
        if group is not None:
            return estimate_from(replica, sim, saturated, users, rate_per_s, burstiness, exact=True)
    else:
        sim = saturated
    return estimate_from(replica, sim, saturated, users, rate_per_s, burstiness)


def decode_parts(replica: Replica, sim: Simulated) -> dict[str, float]:
    """What an output token's wait is made of: each part of the iterations `sim` ran, summed over
    them weighted by the sequences each decoded, over the decode tokens, sum(n d part) / sum(n d)
    (n iterations of d decoding sequences and q prompt tokens each). The parts add up to the mean
    time between a request's output tokens over the run, the token-weighted mean TPOT (the report's
    TPOT is the median request's). No iteration decoded (one output token): the parts of one
    iteration of the run's mean counts, time-weighted."""
    scn, wl = replica.scenario, replica.workload
    if sim.passes is not None and float((sim.passes * sim.pass_decode).sum()) > 0:
        d, q, weight = sim.pass_decode, sim.pass_prompt_tokens, sim.passes * sim.pass_decode
    else:
        d, q, weight = np.asarray([sim.mean_decode]), np.asarray([sim.mean_prompt_tokens]), np.ones(1)
    it = iteration_times(scn, wl, d, q, replica.mean_context, replica.max_batched_tokens)
    arrays = {"compute": it.compute_s, "tp_comm": it.tp_comm_s, "pp_p2p": it.pp_p2p_s, "pp_wait": it.pp_wait_s}
    total = float(weight.sum())
    return {k: float((weight * np.broadcast_to(v, weight.shape)).sum() / total) for k, v in arrays.items()}


def estimate_from(
    replica: Replica,
    sim: Simulated,
    saturated: Simulated,
    users: int | None,
    rate_per_s: float | None,
    burstiness: float = 1.0,
    exact: bool = False,
) -> InflightEstimate:
    """The estimate of what `sim` ran on `replica`, all replicas together; `saturated` (the KV
    cache kept full) gives the rate the replicas sustain. `exact`: `sim` ran all `users` (ranks in
    lockstep), its rates one rank's mean."""
    scn, wl, replicas, slots = replica.scenario, replica.workload, replica.replicas, replica.slots
    parts = decode_parts(replica, sim)
    ttft, queue = np.median(sim.ttft_s), np.median(sim.queue_s)
    max_rate = replicas * saturated.throughput_tokens_per_s / replica.mean_output_len
    # arrivals faster than that: the queue grows and the replicas run flat out (a finite run
    # would still be filling up)
    # a rate: the offered tokens (the rate x the workload's mean new tokens, the mean the report
    # names) times the share the simulated replica kept up with in its measured window (`Simulated.
    # delivered_share`): the window's own tokens over its length would carry the draws' noise (a
    # thousand lengths and gaps: a few percent) and the work in flight at its two ends (per plan)
    offered = float("nan") if rate_per_s is None else rate_per_s / replicas * replica.mean_output_len
    rate_throughput = min(offered * sim.delivered_share, saturated.throughput_tokens_per_s)
    if rate_per_s is not None and rate_per_s > max_rate:
        rate_throughput = saturated.throughput_tokens_per_s
    # the workload's batch: the requests kept in flight (a rate: the mean in flight)
    in_flight = users if users is not None else (slots * replicas if rate_per_s is None else sim.mean_running)
    # a closed loop of users spread evenly: `sim` ran the fullest replica's ceil(users / replicas),
    # the others hold one fewer (or none), so the replicas together run users / ceil(users /
    # replicas) of it, each request at the fullest replica's pace (as static batching is timed)
    busy = replicas if users is None or rate_per_s is not None or exact else users / math.ceil(users / replicas)
    has_tpot = replica.mix is not None or wl.output_len > 1
    return InflightEstimate(
        scenario=scn,
        workload=replace(wl, batch=max(1, round(in_flight * (replicas if rate_per_s is not None else 1)))),
        ttft_s=float(ttft),
        tpot_s=float(np.nanmedian(sim.tpot_s)) if has_tpot and np.isfinite(sim.tpot_s).any() else float("nan"),
        e2e_s=float(np.median(sim.e2e_s)),
        throughput_tokens_per_s=busy * (rate_throughput if rate_per_s is not None else sim.throughput_tokens_per_s),
        max_batch=replica.capacity,
        weights_bytes=replica.weights_bytes,
        # the pool the engine pre-allocates at start (vLLM gpu_memory_utilization, TensorRT-LLM
        # free_gpu_memory_fraction, SGLang mem_fraction_static: `engines.engine_presets.kv_cache_bytes`),
        # whatever part of it the requests fill
        kv_cache_bytes=replica.kv_pool_bytes,
        kv_in_use_bytes=sim.mean_running * replica.kv_bytes_per_sequence,
        prefill_s={"queueing": float(queue), "prefill": float(ttft - queue)},
        decode_s={k: float(v) for k, v in parts.items()},
        decode_utilization=float("nan"),
        users=users if rate_per_s is None else None,
        request_rate_per_s=rate_per_s,
        offered_tokens_per_s=replicas * offered,
        max_request_rate_per_s=max_rate,
        mean_running=busy * sim.mean_running,
        mean_prompt_tokens=sim.prompt_tokens_per_iteration,
        max_batched_tokens=replica.max_batched_tokens,
        round_tokens=int(replica.round_tokens),
        percentiles_s={
            "ttft_s": percentiles(sim.ttft_s),
            "tpot_s": percentiles(sim.tpot_s),
            "e2e_s": percentiles(sim.e2e_s),
        },
        simulated_requests=len(sim.ttft_s) // (replica.lockstep.ranks if replica.lockstep else 1),  # a replica's
        lengths="fixed" if replica.mix is None else replica.mix.name,
        mean_input_len=float(replica.mean_input_len),
        mean_output_len=float(replica.mean_output_len),
        burstiness=burstiness,
        max_sequences=int(replica.max_sequences),
    )


__all__ = [
    "CLOSED_LOOP_ROUNDS",
    "DELIVERY_TOLERANCE",
    "KV_BLOCK_TOKENS",
    "MAX_BATCHED_TOKENS",
    "PERCENTILES",
    "QUEUED_SIMULATED",
    "SIMULATED_REQUESTS",
    "WARMUP_SHARE",
    "InflightEstimate",
    "Replica",
    "Simulated",
    "Traffic",
    "decode_parts",
    "estimate_from",
    "estimate_inflight",
    "kv_blocks",
    "kv_capacity",
    "percentiles",
    "queued_behind",
    "simulate",
]
