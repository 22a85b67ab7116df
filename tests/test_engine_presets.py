"""Serving engine presets (`engines.engine_presets`): KV-cache memory rules, chunked-prefill budgets,
the per-stage cost of pipeline parallelism, and weight formats with their scales."""

from __future__ import annotations

import pytest

from shardwise import presets
from shardwise.engines import engine_kernels
from shardwise.engines.engine_presets import (
    ENGINES,
    LLAMA_CPP_STAGE_S,
    kv_cache_bytes,
    max_batched_tokens,
)
from shardwise.engines.serving import estimate_serving, plan_for_serving
from shardwise.physics.memory import RUNTIME_RESERVED_BYTES
from shardwise.specs import Scenario
from shardwise.specs.serving import STORAGE_BYTES, ServingWorkload

M, W = 80e9, 20e9


def test_each_engine_gives_its_kv_cache_what_its_rule_says():
    """TensorRT-LLM 90% of the free memory, vLLM 90% of the GPU less the weights, SGLang the GPU less
    its reserve (chunk activations, CUDA graph buffers, parallel groups) and the weights, llama.cpp all that is left."""
    assert float(kv_cache_bytes("tensorrt-llm", M, W, 8, 1)) == pytest.approx(0.9 * (M - W - RUNTIME_RESERVED_BYTES))
    assert float(kv_cache_bytes("vllm", M, W, 8, 1)) == pytest.approx(0.9 * M - W - RUNTIME_RESERVED_BYTES)
    # 80 GB: chunk 8192, 512 CUDA graph batches at tp 8: 512 + 1.5 x 8192 + 2 x 512 + 1024 MiB (above 10 GiB)
    assert float(kv_cache_bytes("sglang", M, W, 8, 1)) == pytest.approx(M - 14848 * 1024**2 - W)
    assert float(kv_cache_bytes("sglang", M, W, 1, 1)) == pytest.approx(M - 13440 * 1024**2 - W)  # 256 graphs at tp 1
    assert float(kv_cache_bytes("llama.cpp", M, W, 1, 1)) == pytest.approx(M - W - RUNTIME_RESERVED_BYTES)
    assert float(kv_cache_bytes("vllm", M, 80e9, 8, 1)) == 0.0  # nothing left: none, not negative


def test_sglang_reserves_by_its_chunk_and_graphs_on_a_smaller_gpu():
    """24 GB (an RTX 4090): chunk 2048, reserve 512 + 1.5 x 2048 + 2 x 256 + 1024 x 2 / 8 MiB at tp 2."""
    reserve_mib = 512 + 1.5 * 2048 + 2 * 256 + 1024 * 2 / 8
    got = float(kv_cache_bytes("sglang", 24e9, 10e9, 2, 1))
    assert got == pytest.approx(24e9 - reserve_mib * 1024**2 - 10e9)


@pytest.mark.parametrize(
    ("engine", "gpu", "tokens"),
    [
        ("tensorrt-llm", "h100-sxm5-80gb", 8192),
        ("vllm", "h100-sxm5-80gb", 8192),
        ("vllm", "a100-sxm4-80gb", 2048),
        ("vllm", "l40s", 2048),
        ("vllm", "b200-sxm-180gb", 16384),  # vLLM 0.34: >= 160 GiB
        ("vllm", "h200-sxm-141gb", 8192),
        ("sglang", "rtx-4090", 2048),
        ("sglang", "l40s", 4096),
        ("sglang", "h200-sxm-141gb", 8192),
        ("sglang", "b200-sxm-180gb", 16384),
        ("llama.cpp", "rtx-4090", 2048),
    ],
)
def test_chunked_prefill_budgets_follow_each_engines_defaults(engine, gpu, tokens):
    g = presets.gpu(gpu)
    assert max_batched_tokens(engine, float(g.memory_bytes), g.name) == tokens


def test_llama_cpp_pays_its_per_stage_cost_on_every_stage_a_token_crosses(monkeypatch):
    """One sequence decoding over 4 stages: the token crosses each stage once, so llama.cpp's TPOT
    is 4 x its per-stage cost above the same plan with no such cost (FasterTransformer's preset: no
    host time per stage), given llama.cpp's kernels a layer (`engines.engine_kernels`); with one
    stage, none."""
    monkeypatch.setitem(engine_kernels.KERNELS, "fastertransformer", engine_kernels.KERNELS["llama.cpp"])

    def tpot(engine: str, pp: int) -> float:
        scn = Scenario(presets.model("llama3-8b"), presets.system("rtx4090-8x"), plan_for_serving(1, pp, 8 // pp))
        wl = ServingWorkload(512, 128, 8 // pp, runtime="graphs", engine=engine)
        return float(estimate_serving(scn, wl).tpot_s)

    assert tpot("llama.cpp", 4) - tpot("fastertransformer", 4) == pytest.approx(4 * LLAMA_CPP_STAGE_S, rel=1e-6)
    assert tpot("llama.cpp", 1) == pytest.approx(tpot("fastertransformer", 1))
    assert 0.30e-3 <= LLAMA_CPP_STAGE_S <= 0.44e-3  # the range of the two slopes it came from


def test_quantised_weights_carry_their_scales():
    assert STORAGE_BYTES["int4"] == pytest.approx(0.5 + 2.5 / 128)
    assert STORAGE_BYTES["q4_0"] == pytest.approx(4.5 / 8)
    assert STORAGE_BYTES["q8_0"] == pytest.approx(8.5 / 8)
    assert STORAGE_BYTES["q4_k"] == pytest.approx(4.5 / 8)
    assert all(set(e.weight_formats) <= set(STORAGE_BYTES) for e in ENGINES.values())


def test_every_preset_names_its_version():
    assert all(e.version for e in ENGINES.values())
    assert not ENGINES["sglang"].nvls


def test_serve_takes_the_frameworks_budget_unless_given(cli):
    base = ["serve", "--model", "llama3-8b", "--system", "a100-pcie-8x", "--plan", "tp=1", "--json"]
    import json

    code, out, err = cli([*base, "--framework", "vllm"])
    assert code == 0, err
    assert json.loads(out)["plans"][0]["max_batched_tokens"] == 2048
    code, out, err = cli([*base, "--framework", "vllm", "--max-batched-tokens", "4096"])
    assert code == 0, err
    assert json.loads(out)["plans"][0]["max_batched_tokens"] == 4096
    code, out, err = cli([*base, "--framework", "llama.cpp", "--weight-precision", "q4_0"])
    assert code == 0, err


def test_the_cli_tables_agree_with_the_presets():
    """cli/serve.py keeps the runtime, kernel and NVLS choice of each framework without numpy (fast
    --help); they must say what the presets say."""
    from shardwise.cli.serve import FRAMEWORK_ALL_REDUCE, FRAMEWORK_NVLS_OFF, SERVING_FRAMEWORKS

    assert set(SERVING_FRAMEWORKS) == set(ENGINES)
    for name, preset in ENGINES.items():
        assert SERVING_FRAMEWORKS[name] == preset.runtime
        assert FRAMEWORK_ALL_REDUCE.get(name, "none") == preset.all_reduce
        assert (name in FRAMEWORK_NVLS_OFF) == (not preset.nvls)
