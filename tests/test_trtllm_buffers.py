"""TensorRT-LLM's engine buffers before the KV cache (engines.trtllm_buffers)."""

from __future__ import annotations

import pytest

from shardwise import presets
from shardwise.engines.serving import kv_cache_free_bytes, memory_per_gpu, plan_for_serving, serving_scenario
from shardwise.engines.trtllm_buffers import (
    activation_bytes,
    allreduce_workspace_bytes,
    bench_engine_settings,
    engine_buffers_bytes,
    runtime_buffers_bytes,
)
from shardwise.specs import Scenario
from shardwise.specs.serving import ServingWorkload


def test_the_settings_follow_trtllm_bench_tuning_by_hand():
    """Llama 3 70B FP8 on 2 L40S (48e9 B), 128/2048, at trtllm-bench throughput's fraction 0.90:
    0.90 (2 x 48e9 - 70.55e9) B / (2 x 80 x 8 x 128 x 1 B x 2176) = 64.2 requests -> 32 x 3 = 96,
    64.2 x (1 + 128 / 2048) = 68 tokens -> the minimum 2048 (above 128 + 96: no raise)."""
    model = presets.model("llama3-70b")
    batch, tokens = bench_engine_settings(model, 2, 1, 128, 2048, 48e9, 1.0, 1.0)
    assert (float(batch), float(tokens)) == (96.0, 2048.0)
    # 8 GPUs: 0.90 (8 x 48e9 - 70.55e9) / (163,840 x 2176) = 791 -> 128 x 7 = 896; tokens 840 -> 2048
    batch, tokens = bench_engine_settings(model, 8, 1, 128, 2048, 48e9, 1.0, 1.0)
    assert (float(batch), float(tokens)) == (896.0, 2048.0)


def test_without_chunked_prefill_the_token_budget_holds_a_whole_prompt_and_a_full_batch():
    """trtllm-bench leaves chunked prefill off and raises max_num_tokens to the longest prompt plus
    max_batch_size (bench/benchmark/utils/general.py get_settings): Llama 3 70B FP8 on 2 L40S at
    20,000/2,000 holds 0.90 x 25.45e9 / (163,840 x 22,000) = 6.4 requests -> 64, and its heuristic's
    6.4 x (1 + 10) = 70 tokens -> 2048, raised to 20,064."""
    model = presets.model("llama3-70b")
    batch, tokens = bench_engine_settings(model, 2, 1, 20000, 2000, 48e9, 1.0, 1.0)
    assert (float(batch), float(tokens)) == (64.0, 20064.0)
    _, chunked = bench_engine_settings(model, 2, 1, 20000, 2000, 48e9, 1.0, 1.0, chunked_prefill=True)
    assert float(chunked) == 2048.0
    # the activations it sizes grow with it: less KV cache at TP 2 for long prompts
    cluster = presets.system("l40s-8x")
    scn = serving_scenario(Scenario(model, cluster, plan_for_serving(2, 1, 4)), ServingWorkload(20000, 2000))
    long, short = ServingWorkload(20000, 2000, 1, "fp8", "fp8"), ServingWorkload(128, 2048, 1, "fp8", "fp8")
    weights, _ = memory_per_gpu(scn, long)
    assert float(kv_cache_free_bytes(scn, long, weights)) < float(kv_cache_free_bytes(scn, short, weights)) - 2**30


def test_the_engine_runs_at_most_trtllm_bench_max_batch_size_sequences():
    """trtllm-bench's max_batch_size caps the sequences in flight (the capacity scheduler's
    max_num_requests), not TensorRT-LLM's LLM-API default of 2048: Llama 3.1 8B in FP8 on one H200
    at 128/128 keeps min(requests, 4096) = 4096 in flight, though its KV cache holds more."""
    from shardwise.analyses.serving import at_max_batch
    from shardwise.engines.serving import estimate_serving, max_sequences_per_replica

    model, cluster = presets.model("llama3-8b"), presets.system("dgx-h200").with_(gpus_per_node=1)
    scn = Scenario(model, cluster, plan_for_serving(1, 1))
    wl = ServingWorkload(128, 128, 1, "fp8", "fp8")
    assert max_sequences_per_replica(scn, wl) == 4096
    assert float(estimate_serving(scn, wl).max_batch) > 4096
    assert int(at_max_batch(scn, wl).workload.batch) == 4096
    # where the KV cache binds first, it sets the batch: Llama 3 70B at TP 2 on L40S (44.39 GiB), 43 of
    # 64 slots (0.90 (2 x 44.39 - 65.7) GiB / 0.332 GiB = 62.5 requests -> the minimum, 64)
    l40s = Scenario(
        presets.model("llama3-70b"), presets.system("l40s-8x").with_(gpus_per_node=2), plan_for_serving(2, 1)
    )
    wl = ServingWorkload(128, 2048, 1, "fp8", "fp8")
    assert max_sequences_per_replica(l40s, wl) == 64
    assert int(at_max_batch(l40s, wl).workload.batch) == int(estimate_serving(l40s, wl).max_batch) < 64


def test_pipeline_stages_split_the_batch_and_the_caps_hold():
    model = presets.model("llama3-8b")
    one, _ = bench_engine_settings(model, 1, 1, 128, 128, 80e9, 1.0, 1.0)
    eight, tokens = bench_engine_settings(model, 1, 8, 128, 128, 80e9, 1.0, 1.0)
    assert float(one) == 4096.0  # min(requests, 4096), 256 x 16
    assert float(eight) == 512.0  # 4096 / 8 per micro-batch
    assert float(tokens) == 2048.0  # 512 x (1 + 1) = 1024 tokens: the minimum
    _, long = bench_engine_settings(model, 1, 1, 20000, 200, 1e12, 1.0, 1.0)
    assert float(long) == 32768.0  # 4096 x 101 capped


def test_the_llama2_7b_log_is_reproduced():
    """The log the constants come from: 928.77 MiB of activations at 8192 tokens, 1.14 + 4.35 "GB" of
    buffers at 4096, which TensorRT-LLM prints in binary units (MemoryCounters::bytesToString): 5.49 GiB."""
    llama2 = presets.model("llama3-8b").with_(hidden=4096, ffn_hidden=11008)
    assert float(activation_bytes(llama2, 1, 8192)) == pytest.approx(928.77 * 2**20, rel=1e-6)
    assert float(runtime_buffers_bytes(4096, 1)) == pytest.approx(5.49 * 2**30, rel=1e-6)
    assert float(activation_bytes(llama2, 2, 8192)) < float(activation_bytes(llama2, 1, 8192))


def test_tensorrt_llm_keeps_less_kv_cache_than_before_its_buffers_and_tp2_loses_the_largest_share():
    model, cluster = presets.model("llama3-70b"), presets.system("l40s-8x")
    wl = ServingWorkload(128, 2048, 1, "fp8", "fp8")
    share = {}
    for tp in (2, 8):
        scn = serving_scenario(Scenario(model, cluster, plan_for_serving(tp, 1, 8 // tp)), wl)
        weights, _ = memory_per_gpu(scn, wl)
        trt = float(kv_cache_free_bytes(scn, wl, weights))
        plain = 0.9 * (cluster.gpu.memory_bytes - float(weights) - 2 * 1024**3)
        assert trt < plain
        share[tp] = trt / plain
    assert share[2] < share[8]
    # vLLM sizes its cache inside its own fraction: no engine buffers taken off
    vllm = ServingWorkload(128, 2048, 1, "fp8", "fp8", engine="vllm")
    scn = serving_scenario(Scenario(model, cluster, plan_for_serving(8, 1, 1)), vllm)
    weights, _ = memory_per_gpu(scn, vllm)
    assert float(kv_cache_free_bytes(scn, vllm, weights)) == pytest.approx(
        0.9 * cluster.gpu.memory_bytes - float(weights) - 2 * 1024**3
    )


def test_the_all_reduce_workspace_is_four_buffers_of_w_t_bytes_under_tp():
    """One IPC and three Lamport buffers of W t bytes on each rank, W 16 MB up to 2 ranks and 8 MB
    above (plugin.py allocate_allreduce_fusion_workspace, max_workspace_size_auto); none at TP 1."""
    assert [float(allreduce_workspace_bytes(t)) for t in (1, 2, 4, 8)] == [0.0, 128e6, 128e6, 256e6]
    model = presets.model("llama3-70b")
    args = (1, 1000, 1000, 80e9, 1.0, 1.0)
    for t in (1, 2, 8):
        batch, tokens = bench_engine_settings(model, t, *args)
        alone = activation_bytes(model, t, tokens) + runtime_buffers_bytes(batch, 1) + allreduce_workspace_bytes(t)
        assert float(engine_buffers_bytes(model, t, *args)) == pytest.approx(float(alone))
