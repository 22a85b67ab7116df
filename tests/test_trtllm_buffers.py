"""TensorRT-LLM's engine buffers before the KV cache (engines.trtllm_buffers)."""

from __future__ import annotations

import pytest

from shardwise import presets
from shardwise.engines.serving import kv_cache_free_bytes, memory_per_gpu, plan_for_serving, serving_scenario
from shardwise.engines.trtllm_buffers import (
    activation_bytes,
    bench_engine_settings,
    runtime_buffers_bytes,
)
from shardwise.specs import Scenario
from shardwise.specs.serving import ServingWorkload


def test_the_settings_follow_trtllm_bench_tuning_by_hand():
    """Llama 3 70B FP8 on 2 L40S (48e9 B), 128/2048: 0.95 (2 x 48e9 - 70.55e9) B / (2 x 80 x 8 x 128 x 1 B
    x 2176) = 67.8 requests -> 32 x 3 = 96, 67.8 x (1 + 128 / 2048) = 72 tokens -> the minimum 2048."""
    model = presets.model("llama3-70b")
    batch, tokens = bench_engine_settings(model, 2, 1, 128, 2048, 48e9, 1.0, 1.0)
    assert (float(batch), float(tokens)) == (96.0, 2048.0)
    # 8 GPUs: 0.95 (8 x 48e9 - 70.55e9) / (163,840 x 2176) = 835 -> 128 x 7 = 896; tokens 887 -> 2048
    batch, tokens = bench_engine_settings(model, 8, 1, 128, 2048, 48e9, 1.0, 1.0)
    assert (float(batch), float(tokens)) == (896.0, 2048.0)


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
