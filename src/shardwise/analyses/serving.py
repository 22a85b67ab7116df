"""Serving analyses on top of engines/serving.py: the largest batch that fits, and each plan's
throughput-vs-latency frontier as the batch grows."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from shardwise.engines.serving import ServingEstimate, estimate_serving, max_sequences_per_replica
from shardwise.specs import Scenario
from shardwise.specs.request_mix import RequestMix
from shardwise.specs.serving import ServingWorkload

FRONTIER_BATCHES = 2 ** np.arange(0, 12)  # 1 to 2048 sequences per replica


def at_max_batch(scn: Scenario, wl: ServingWorkload, cap: int | None = None) -> ServingEstimate:
    """`wl` at the largest batch whose KV cache fits (at least 1), at most `cap` per replica: by
    default the engine's own cap (`engines.serving.max_sequences_per_replica`: TensorRT-LLM's
    `max_batch_size` as trtllm-bench sets it for these lengths, the others' defaults)."""
    if cap is None:
        cap = max_sequences_per_replica(scn, wl)
    fits = estimate_serving(scn, replace(wl, batch=1))
    per_replica = int(np.clip(float(fits.max_batch), 1, cap))
    return estimate_serving(scn, replace(wl, batch=per_replica * int(scn.plan.dp)))


def frontier_inflight(
    scn: Scenario,
    wl: ServingWorkload,
    loads: np.ndarray = FRONTIER_BATCHES,
    requests: int = 200,
    mix: RequestMix | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`frontier` under in-flight batching: (tokens/s per user = 1 / median TPOT, tokens/s per GPU,
    requests in flight per replica) for each closed-loop load the KV cache holds (of `mix`'s
    lengths, drawn per request, or `wl`'s)."""
    from shardwise.engines.inflight import Replica, Traffic

    replica = Replica(scn, wl, mix=mix)
    if replica.table is None:
        return np.array([]), np.array([]), np.array([])
    users = np.asarray([int(u) for u in loads if u <= replica.slots])
    user_rate, per_gpu = [], []
    for u in users:
        sim = replica.run(Traffic(users=int(u), requests=requests, rounds=4))
        user_rate.append(1.0 / float(np.nanmedian(sim.tpot_s)))
        per_gpu.append(replica.replicas * sim.throughput_tokens_per_s / float(scn.cluster.num_gpus))
    return np.asarray(user_rate), np.asarray(per_gpu), users


def frontier(
    scn: Scenario, wl: ServingWorkload, batches: np.ndarray = FRONTIER_BATCHES
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tokens/s per user, tokens/s per GPU, batch per replica) at each batch that fits in memory."""
    replicas = int(scn.plan.dp)
    est = estimate_serving(scn, replace(wl, batch=np.asarray(batches) * replicas))
    ok = np.asarray(est.fits_in_memory)
    per_gpu = np.asarray(est.throughput_tokens_per_s) / float(scn.cluster.num_gpus)
    return np.asarray(est.per_user_tokens_per_s)[ok], per_gpu[ok], np.asarray(batches)[ok]
