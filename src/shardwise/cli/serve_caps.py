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
    text = (
        f"{per_replica:,} requests in flight per replica, {running:,} run at once ({why}), the other "
        f"{per_replica - running:,} wait in the queue"
    )
    if not overloaded(est):
        return text
    from shardwise.units import format_seconds

    # the queue's wait is what the TTFT column shows (review 50 #12: "TTFT p50 466,168 s", unexplained)
    return (
        f"{text}: overloaded, more waiting than running, each request queued about "
        f"{format_seconds(float(est.prefill_s['queueing']))} at the {float(est.max_request_rate_per_s):,.3g} "
        "requests/s the plan serves (fewer --concurrency, or more replicas)"
    )


def overloaded(est: Any) -> bool:
    """More asked of a simulated plan than it serves: a --request-rate above the rate it sustains
    (`InflightEstimate.overloaded`), or a closed loop with more requests queued per replica than
    run at once, its TTFT mostly the queue's wait (the table marks the row; review 50 #12)."""
    if getattr(est, "batching", "static") != "inflight" or not bool(est.fits_in_memory):
        return False
    per_replica = est.users_per_replica
    queued = per_replica is not None and per_replica > 2 * est.running_per_replica
    return bool(est.overloaded) or queued


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
    reserve = sglang_reserve(est) if float(np.max(w)) < float(np.max(memory)) else ""
    if reserve:  # the weights alone fit: SGLang's reserve takes the rest
        return reserve.format(weights=weights, capacity=format_capacity(capacity))
    return f"{weights} of weights per GPU leave no room for a KV cache in {format_capacity(capacity)}"


def sglang_reserve(est: Any) -> str:
    """SGLang's memory outside --mem-fraction-static, the room its KV cache loses, in words with
    {weights} and {capacity} to fill ("" for another engine): the reserve its server_args sets by
    default (`engines.engine_presets.sglang_reserved_bytes`), which under data-parallel attention
    grows with --dp (CUDA-graph padding for every attention rank: 55.3 GB of an H100's 79.11 GiB for
    DeepSeek-V3 at --dp 16, where 54.6 GB of weights were blamed; review 50 #8), and the flag that
    overrides it."""
    from shardwise.engines.dp_attention import dp_attention
    from shardwise.engines.engine_presets import engine, max_batched_tokens, sglang_reserved_bytes
    from shardwise.units import format_bytes

    scn, wl = est.scenario, est.workload
    if engine(wl.engine).kv_rule != "sglang":
        return ""
    plan, memory = scn.plan, float(np.max(scn.cluster.gpu.memory_bytes))
    on = scn.model.is_moe and bool(np.any(dp_attention(plan)))
    dp = int(np.max(plan.dp)) if on else 1
    chunk = priced_chunk(est) or max_batched_tokens(wl.engine, memory, scn.cluster.gpu.name)
    tp, pp = np.max(plan.tp), np.max(plan.pp)
    reserved = float(np.max(sglang_reserved_bytes(memory, chunk, tp * dp, pp, dp)))
    fraction = (memory - reserved) / memory
    why = ""
    if dp > 1:
        alone = float(np.max(sglang_reserved_bytes(memory, chunk, tp * dp, pp, 1)))
        why = f", {format_bytes(reserved - alone)} of it CUDA-graph padding for its {dp} attention ranks"
    under = f" under --dp {dp}" if dp > 1 else ""
    return (  # {weights} and {capacity} filled in by `no_sequence_fits`
        f"SGLang's default reserve{under} ({format_bytes(reserved)} per GPU{why}) and {{weights}} of weights leave "
        f"no room for a KV cache in {{capacity}}; SGLang keeps that reserve outside --mem-fraction-static "
        f"({fraction:.3f} here): a larger one gives the KV cache room if the CUDA graphs fit the rest (serve "
        "prices only the default)"
    )


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
