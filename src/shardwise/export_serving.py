"""`serve --json`'s record of one priced plan (`serving_dict`), split out of `shardwise.export`, which
re-exports it."""

from __future__ import annotations

from typing import Any

import numpy as np


def serving_dict(label: str, est: Any, log_sd: float | None = None, basis: str = "") -> dict[str, Any]:
    from shardwise.calibration.spreads import SERVING_LOG_SD, Z80, serving_basis
    from shardwise.export import plain
    from shardwise.physics.memory import RUNTIME_RESERVED_BYTES
    from shardwise.units import whole_bytes_parts

    plan = est.scenario.plan
    log_sd = SERVING_LOG_SD if log_sd is None else log_sd
    basis = basis or serving_basis()
    f = float(np.exp(Z80 * log_sd))  # the 80% interval (docs/calibration.md)

    def band(key: str, value: Any) -> dict[str, Any]:
        v = np.asarray(value, dtype=float)
        return {f"{key}_low": plain(v / f), f"{key}_high": plain(v * f)}

    # every part of the total (`memory_total_bytes`), as predict's and plan's add up: kv_cache the cache
    # the engine allocates, in both batchings (review 50 #9), kv_cache_in_use_bytes what the requests fill
    pool = kv_pool_bytes(est)
    memory = {"weights": est.weights_bytes, "kv_cache": pool, "runtime_reserve": RUNTIME_RESERVED_BYTES}
    return {
        "plan": label,
        "tp": int(plan.tp),
        "pp": int(plan.pp),
        "cp": int(plan.cp),
        "ep": int(plan.ep),
        # the ranks each expert is split over, derived where the plan does not give it (docs/serving.md);
        # null for a dense model
        "etp": int(plan.expert_tp) if int(est.scenario.model.experts) else None,
        "replicas": int(plan.dp),
        "batch": int(est.workload.batch),
        "ttft_s": plain(est.ttft_s),
        "tpot_s": plain(est.tpot_s),
        "e2e_s": plain(est.e2e_s),
        "throughput_tokens_per_s": plain(est.throughput_tokens_per_s),
        "per_user_tokens_per_s": plain(est.per_user_tokens_per_s),
        "max_batch_per_replica": int(est.max_batch),
        "memory_bytes": whole_bytes_parts({**memory, "total": memory_total_bytes(est)}),
        # per GPU, the KV cache the requests fill, of memory_bytes.kv_cache: the static batch's, or the
        # simulation's mean running requests'
        "kv_cache_in_use_bytes": plain(kv_in_use_bytes(est)),
        "fits_in_memory": plain(est.fits_in_memory),
        "prefill_s": {k: plain(v) for k, v in est.prefill_s.items()},
        "decode_s": {k: plain(v) for k, v in est.decode_s.items()},
        **band("ttft_s", est.ttft_s),
        **band("tpot_s", est.tpot_s),
        **band("throughput_tokens_per_s", est.throughput_tokens_per_s),
        **band("e2e_s", est.e2e_s),
        **band("per_user_tokens_per_s", est.per_user_tokens_per_s),
        # the interval of every time and rate above (the percentiles and the parts carry none)
        # unmeasured: no published serving run measured this model family or GPU (`spreads.serving_log_sd`)
        "interval": {"level": 0.8, "log_sd": log_sd, "basis": basis, "unmeasured": basis.startswith("unmeasured: ")},
        **_inflight_dict(est, band),
    }


def _inflight_dict(est: Any, band: Any) -> dict[str, Any]:
    """How the requests were batched; under in-flight batching the simulation's settings, its
    percentiles (seconds) and the rate the plan sustains (`band`: its 80% interval)."""
    from shardwise.export import plain

    if est.batching != "inflight":
        return {"batching": "static"}
    return {
        "batching": "inflight",
        "concurrency": est.users,
        "request_rate_per_s": est.request_rate_per_s,
        "max_request_rate_per_s": plain(est.max_request_rate_per_s),
        **band("max_request_rate_per_s", est.max_request_rate_per_s),
        "overloaded": est.overloaded,
        # a rate: the new tokens it asks for per second (rate x mean output, all replicas), and whether
        # throughput_tokens_per_s falls short of them by more than 1% (a queue that grows)
        "offered_tokens_per_s": plain(est.offered_tokens_per_s) if est.request_rate_per_s is not None else None,
        "short_of_offered": est.short_of_offered,
        # requests admitted (running), time-weighted mean over the run, all replicas; a closed loop's
        # users beyond them wait in the queue (`concurrency`)
        "mean_running": plain(est.mean_running),
        # the mean over the simulated iterations (their sum is every prompt token prefilled)
        "mean_prompt_tokens_per_iteration": plain(est.mean_prompt_tokens),
        "max_batched_tokens": est.max_batched_tokens,  # one micro-batch's
        # one iteration's (a round of the pp micro-batches where each has its own budget)
        "iteration_budget_tokens": int(est.round_tokens or est.max_batched_tokens),
        "simulated_requests": est.simulated_requests,
        "percentiles_s": est.percentiles_s,
    }


def kv_pool_bytes(est: Any) -> Any:
    """The KV cache one GPU of the plan allocates: the engine's pool, which vLLM, SGLang, TensorRT-LLM
    and llama.cpp size at start-up whatever the batching (`engines.engine_presets.kv_cache_bytes`;
    under --batching static the same pool the simulation prices), or the batch's own cache where the
    engine allocates per batch (FasterTransformer, plain PyTorch: no `continuous_batching`)."""
    from shardwise.engines.engine_presets import engine

    if est.batching == "inflight" or not engine(est.workload.engine).continuous_batching:
        return est.kv_cache_bytes
    from shardwise.engines.serving import kv_cache_free_bytes

    return kv_cache_free_bytes(est.scenario, est.workload, est.weights_bytes)


def kv_in_use_bytes(est: Any) -> Any:
    """The KV cache the requests fill on one GPU: a static batch's (`ServingEstimate.kv_cache_bytes`),
    or the simulated mean running requests' (`engines.inflight`)."""
    return est.kv_in_use_bytes if est.batching == "inflight" else est.kv_cache_bytes


def memory_total_bytes(est: Any) -> Any:
    """Weights, the KV cache allocated (`kv_pool_bytes`) and the runtime reserve, per GPU: serve's
    memory column and JSON memory_bytes.total."""
    from shardwise.physics.memory import RUNTIME_RESERVED_BYTES

    return est.weights_bytes + kv_pool_bytes(est) + RUNTIME_RESERVED_BYTES
