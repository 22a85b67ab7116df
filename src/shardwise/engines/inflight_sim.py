"""One replica's run under in-flight batching, iteration by iteration, over a cost per iteration
(`simulate`; the scheduling rules, traffic and statistics are those `engines.inflight`'s docstring
describes): the traffic (`Traffic`), the KV blocks a request reserves (`kv_blocks`, `kv_capacity`),
the run's statistics (`Simulated`). Split out of `engines.inflight`, which re-exports these names.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from shardwise.engines.engine_presets import DEFAULT_MAX_SEQUENCES
from shardwise.engines.inflight_lockstep import Lockstep, run_lockstep
from shardwise.engines.inflight_loops import run_ranks
from shardwise.engines.request_mix import arrival_times

# vLLM's default KV block (CacheConfig.block_size, 16 tokens on CUDA).
KV_BLOCK_TOKENS = 16
# Tokens one iteration may process: TensorRT-LLM's default `max_num_tokens` (8192). vLLM's
# `max_num_batched_tokens` default depends on version and GPU (2048 to 16384): set it to match.
MAX_BATCHED_TOKENS = 8192
SIMULATED_REQUESTS = 1000
# A closed loop runs at least this many requests per user (so that the steady state dominates).
CLOSED_LOOP_ROUNDS = 8
WARMUP_SHARE = 0.1
# Even times of the measured window at which `delivered_share` reads the tokens owed.
DELIVERY_POINTS = 256


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
    # ranks in lockstep (`engines.inflight_lockstep`): the whole group's users, exactly (None: `users` x ranks)
    group_users: int | None = None

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
    # every token generated over the whole run, first arrival to last completion: what a serving
    # benchmark that sends a fixed number of requests reports as its output throughput (the ramp-up
    # and the tail, as the last requests finish with few others beside them, included)
    run_tokens_per_s: float = 0.0
    # arrivals at a rate: the share of the tokens offered over the measured window that the replica
    # generated (`delivered_share`); 1 - the slope of the tokens owed (arrived, not yet generated)
    # over the offered rate, so below 1 only where the queue grows (1.0: a closed loop)
    delivered_share: float = 1.0
    # the run's iterations, one rank's (ranks in lockstep: the ranks' mean of each pass): decoding
    # sequences, prompt tokens, and how many iterations ran so (`passes`); None: not recorded
    pass_decode: np.ndarray | None = None
    pass_prompt_tokens: np.ndarray | None = None
    passes: np.ndarray | None = None

    @property
    def prompt_tokens_per_iteration(self) -> float:
        """Prompt tokens per iteration, the mean over the run's iterations (each counted once:
        their sum over the iterations is every prompt token; time-weighted `mean_prompt_tokens`
        leans to the long prefill iterations)."""
        if self.passes is None or not self.passes.sum():
            return self.mean_prompt_tokens
        return float((self.passes * self.pass_prompt_tokens).sum() / self.passes.sum())


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
    decodes_share_budget: bool = True,
    after_first_s: Callable[[float, float], float] | None = None,
    lockstep: Lockstep | None = None,
) -> Simulated:
    """Run the traffic through one replica whose iteration of d decoding sequences and q prompt
    tokens takes `cost_s(d, q)` seconds (see the module docstring). Lengths are one for every
    request (ints) or one per request (arrays of `traffic.count`); with arrays, `kv_total_blocks`
    (the KV cache in blocks) admits a request only while its blocks fit beside those running.
    `chunk_tokens` caps one prompt's chunk per iteration (default the whole budget): with the pp
    micro-batches of a round each on its own budget, a prompt sits in one of them.
    The loop is `engines.inflight_loops.run_ranks` with one rank; with `lockstep` the traffic is a
    group's of `lockstep.ranks` data-parallel attention ranks run together by the same loop
    (`engines.inflight_lockstep`; `capacity`, `max_sequences` and the KV blocks each rank's), the
    rates and means one rank's."""
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
        inputs, outputs = input_len, output_len  # one length for every request
    free = kv_total_blocks if blocks is not None else 0
    arrival = np.full(n, np.inf)
    if closed:
        # the users start spread over one request's lifetime at full load, not all at once: a
        # burst would stay in step (equal lengths) and never reach the steady state
        issued = min(int(traffic.users), n)
        held = slots if blocks is None else min(slots, int(kv_total_blocks // float(np.mean(blocks))))
        running0 = min(issued // (lockstep.ranks if lockstep else 1) or 1, held)
        prompts = min(max_batched_tokens, running0 * mean_in / max(mean_out, 1))
        # ranks in lockstep: a decode pass a token (each prompt a pass of its own, spread over the ranks)
        life = mean_out * cost_s(running0, 0.0 if lockstep is not None else prompts)
        arrival[:issued] = np.linspace(0.0, life, issued, endpoint=False)
    else:
        arrival = arrival_times(float(traffic.rate_per_s), n, traffic.seed, traffic.burstiness)
        issued = n
    if lockstep is None:
        run = run_ranks(
            lambda ds, qs: cost_s(ds[0], qs[0]), 1, inputs, outputs, slots, closed, arrival, issued,
            max_batched_tokens, blocks, free, chunk_tokens, decodes_share_budget, after_first_s,
        )  # fmt: skip
    else:
        run = run_lockstep(
            lockstep, inputs, outputs, slots, closed, arrival, issued, max_batched_tokens, blocks, free, chunk_tokens,
            decodes_share_budget,
        )  # fmt: skip
    admitted, first, done, arrival, clock, produced, t, busy, running_area, decode_area, prompt_area, iterations = run[
        :12
    ]
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
    share = 1.0 if closed else delivered_share(arrival, admitted, outputs, t0, t1)
    per = lockstep.ranks if lockstep is not None else 1  # one rank's share of the group's
    made, running_area, decode_area, prompt_area = made / per, running_area / per, decode_area / per, prompt_area / per
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
        run_tokens_per_s=_whole_run_rate(produced_a, clock_a, arrival) / per,
        delivered_share=share,
        **_passes(run.visits, per),
    )


def delivered_share(
    arrival: np.ndarray,
    admitted: np.ndarray,
    outputs: int | np.ndarray,
    t0: float,
    t1: float,
    points: int = DELIVERY_POINTS,
) -> float:
    """Arrivals at a rate: the share of the offered new tokens the replica generates in its steady
    state, 1 - g / o over the measured window [t0, t1]: o the offered tokens per second (the new
    tokens of the requests arriving in the window, over its length), g the slope of the new tokens
    of the requests waiting (arrived, not yet admitted), fitted by least squares on `points` even
    times of the window. Requests running are bounded by the sequence slots and the KV cache, so
    a growing backlog is a growing queue: a replica that keeps up holds a queue that comes and goes
    (g ~ 0, the share 1, whatever the drawn lengths and gaps); one that cannot owes more and more
    (g = o less what it generates). The window's generated tokens over its length would carry the
    draws' noise (a thousand lengths and gaps: a few percent) and the work in flight at its ends."""
    if not t1 > t0:
        return 1.0
    owed_each = np.broadcast_to(np.asarray(outputs, dtype=float), arrival.shape)
    arrived = np.concatenate([[0.0], np.cumsum(owed_each)])
    order = np.argsort(admitted, kind="stable")
    entered = np.concatenate([[0.0], np.cumsum(owed_each[order])])
    times = np.linspace(t0, t1, points)
    waiting = (
        arrived[np.searchsorted(arrival, times, side="right")]
        - entered[np.searchsorted(admitted[order], times, side="right")]
    )
    ends = np.searchsorted(arrival, [t0, t1], side="right")
    offered = float(arrived[ends[1]] - arrived[ends[0]]) / (t1 - t0)
    if not offered > 0:
        return 1.0
    slope = float(np.polyfit(times - t0, waiting, 1)[0])
    return float(min(1.0, max(0.0, 1.0 - slope / offered)))


def _passes(visits: dict[tuple[int, int], int] | None, ranks: int) -> dict[str, np.ndarray]:
    """`Simulated`'s record of the passes (`pass_decode`, `pass_prompt_tokens`, `passes`) from the
    loop's counts by (decodes, prompt tokens), each rank's mean where `ranks` ran together."""
    if not visits:
        return {}
    keys = np.array(list(visits), dtype=float).reshape(-1, 2) / ranks
    return {
        "pass_decode": keys[:, 0],
        "pass_prompt_tokens": keys[:, 1],
        "passes": np.array(list(visits.values()), dtype=float),
    }


def _whole_run_rate(produced: np.ndarray, clock: np.ndarray, arrival: np.ndarray) -> float:
    """Generated tokens over the whole run, first arrival to last completion (`Simulated.run_tokens_per_s`)."""
    first = float(np.min(arrival[np.isfinite(arrival)])) if np.any(np.isfinite(arrival)) else 0.0
    span = float(clock[-1]) - first
    return float(produced[-1] / span) if span > 0 else 0.0
