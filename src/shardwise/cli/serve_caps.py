"""`shardwise serve`'s lines on what bounds the requests running at once in a replica (the engine's
sequence cap or the KV cache) and why not one sequence fits (`no_sequence_fits`); moved out of
`cli.serve_report`, which prints them."""

from __future__ import annotations

from typing import Any

import numpy as np


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


def no_sequence_fits(est: Any, capacity: float) -> str:
    """Why not one sequence fits a replica: the weights leave no room for a KV cache; TensorRT-LLM's
    buffers, sized for a long prompt, take the room the weights leave (200k tokens of Llama 3 70B on
    RTX 4090s at tp=8: 17.5 GB of buffers where the weights alone leave room for a 5.1 GB KV cache,
    and the weights were blamed); or one request's KV cache is more than the room they leave (the same prompt in int4,
    where 5 GB of weights were blamed for it)."""
    import numpy as np

    from shardwise.engines.engine_presets import engine, kv_cache_bytes
    from shardwise.engines.serving import BENCH_WEIGHT_BYTES, kv_cache_free_bytes, memory_per_gpu
    from shardwise.engines.trtllm_buffers import engine_buffers_bytes
    from shardwise.units import format_bytes, format_capacity

    scn, wl = est.scenario, est.workload
    weights = format_bytes(float(est.weights_bytes))
    w, per_sequence = memory_per_gpu(scn, wl)
    free = float(np.min(kv_cache_free_bytes(scn, wl, w, priced_chunk(est))))
    one = float(np.max(per_sequence))
    tokens = int(wl.input_len) + int(wl.output_len)
    if 0 < free < one:
        return (
            f"one request's KV cache ({format_bytes(one)} per GPU for {tokens:,} tokens) is more than the "
            f"{format_bytes(free)} the engine leaves for it in {format_capacity(capacity)} ({weights} of weights, "
            "the rest its buffers and reserve)"
        )
    plan, memory = scn.plan, scn.cluster.gpu.memory_bytes
    left = float(np.min(kv_cache_bytes(wl.engine, memory, w, plan.tp, plan.pp)))  # the weights' room, no buffers
    if free <= 0 < left and engine(wl.engine).bench_buffers:
        wb, kv = BENCH_WEIGHT_BYTES.get(wl.weight_precision, 2.0), BENCH_WEIGHT_BYTES.get(wl.kv_precision, 2.0)
        from shardwise.engines.dp_attention import launch_tp

        buffers = engine_buffers_bytes(
            scn.model, plan.tp, plan.pp, wl.input_len, wl.output_len, memory, wb, kv, launch_tp(plan)
        )
        size = format_bytes(float(np.max(buffers)))
        return (
            f"the engine's buffers sized for a {int(wl.input_len):,}-token prompt ({size} "
            f"per GPU: activations, runtime and decoder buffers) take all the room {weights} of weights leave in "
            f"{format_capacity(capacity)} (a {format_bytes(left)} KV cache without them; a shorter --input-len "
            "shrinks them)"
        )
    return f"{weights} of weights per GPU leave no room for a KV cache in {format_capacity(capacity)}"


def priced_chunk(est: Any) -> int | None:
    """The whole chunked-prefill budget a simulated estimate's KV pool was priced with (SGLang's
    reserve follows it: `engines.engine_presets.kv_cache_bytes`): its micro-batch's budget, times
    --dp where SGLang divided it among the attention ranks; None for a static estimate (the default)."""
    per = getattr(est, "max_batched_tokens", None)
    if per is None:
        return None
    from shardwise.engines.dp_attention import dp_attention
    from shardwise.engines.engine_presets import engine

    scn = est.scenario
    split = engine(est.workload.engine).dp_attention_splits_budget and scn.model.is_moe
    return int(per) * (int(scn.plan.dp) if split and bool(np.any(dp_attention(scn.plan))) else 1)
