"""`shardwise serve`'s lines on what bounds the requests running at once in a replica: the engine's
sequence cap or the KV cache (moved out of `cli.serve_report`, which prints them)."""

from __future__ import annotations

from typing import Any


def closed_loop_queue(est: Any) -> str:
    """Where a closed loop keeps more requests in flight per replica than run at once: what caps the
    running ones (the engine's sequence cap or the KV cache) and how many wait, in words ("" if none)."""
    per_replica, cap, kv = est.users_per_replica, int(est.max_sequences), int(est.max_batch)
    if per_replica is None or cap < 1:
        return ""
    running = est.running_per_replica
    if per_replica <= running:
        return ""
    why = f"{cap_name(est)}; the KV cache would hold {kv:,}" if cap < kv else "as many as the KV cache holds"
    return (
        f"{per_replica:,} requests in flight per replica, {running:,} run at once ({why}), the other "
        f"{per_replica - running:,} wait in the queue"
    )


def cap_name(est: Any) -> str:
    """The engine's cap on sequences running at once in one replica, in words."""
    from shardwise.engines.engine_presets import engine as preset

    engine = est.workload.engine
    if engine == "tensorrt-llm":
        return "TensorRT-LLM's max_batch_size as trtllm-bench sets it"
    if preset(engine).seqs_within_budget and int(est.max_sequences) == int(est.max_batched_tokens):
        return f"{engine}'s cap at its token budget, --max-batched-tokens"
    return f"{engine}'s default cap"


def engine_capped(est: Any) -> bool:
    """At the maximum throughput (no users, no rate): the engine's sequence cap, not the KV cache,
    sets how many requests a replica keeps in flight."""
    cap = int(est.max_sequences)
    return est.users is None and est.request_rate_per_s is None and 0 < cap < int(est.max_batch)
