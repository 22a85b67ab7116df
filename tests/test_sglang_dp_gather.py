"""SGLang's data-parallel attention as it runs by default (`--moe-a2a-backend none`: dp_gather and
reduce-scatter around the MoE layer, `physics.moe_dispatch.DP_GATHER_BYTES_PER_ELEMENT`), and what
each engine leaves its KV cache under data-parallel attention (vLLM's profiled gathered buffers,
SGLang's reserve with its --dp, `engines.engine_presets.sglang_reserved_bytes`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from shardwise import presets
from shardwise.engines import engine_presets
from shardwise.engines.engine_presets import MIB, kv_cache_bytes, sglang_reserved_bytes
from shardwise.engines.inflight_replica import Replica
from shardwise.engines.moe import experts_cost
from shardwise.engines.serving import estimate_serving, kv_cache_free_bytes, memory_per_gpu, serving_scenario
from shardwise.physics.collectives import Fabric
from shardwise.physics.moe_dispatch import (
    DP_GATHER_BYTES_PER_ELEMENT,
    allgather_dispatch_bytes,
    gathered_buffers_bytes,
)
from shardwise.physics.topology import placement
from shardwise.specs import Scenario
from shardwise.specs.rules import serving_expert_tp
from shardwise.specs.serving import ServingWorkload

WL = ServingWorkload(input_len=1000, output_len=1000, batch=256, weight_precision="fp8", engine="sglang")


def dsv3(tp: int, ep: int, dp: int) -> Scenario:
    from shardwise.engines.serving import plan_for_serving

    plan = plan_for_serving(tp, 1, dp).with_(ep=ep, etp=serving_expert_tp(tp, ep, 0, dp))
    system = presets.system("dgx-h200").with_(nodes=max(tp * dp // 8, 1))
    return Scenario(presets.model("deepseek-v3"), system, plan)


def test_sglang_gathers_in_16_bits_and_routes_on_every_rank():
    """No routing travels (the gate runs on the gathered tokens); the hidden states at 16 bits."""
    m = presets.model("deepseek-v3")
    hidden, routing = allgather_dispatch_bytes(m, 10.0, 16, DP_GATHER_BYTES_PER_ELEMENT, True, no_routing=True)
    assert routing == 0.0
    assert hidden == pytest.approx(16 * 10.0 * m.hidden * 2.0)
    plan = serving_scenario(dsv3(1, 16, 16), WL).plan
    assert plan.moe_dispatcher == "dp-gather"  # the plan's own checks accept it
    assert serving_scenario(dsv3(1, 16, 16), replace(WL, engine="vllm")).plan.moe_dispatcher == "allgather"


def _experts(scn: Scenario, tokens: float, extend: bool) -> float:
    fabric = Fabric.of(scn.cluster)
    place = placement(scn.plan, scn.cluster.gpus_per_node, experts=True)
    one = replace(scn, plan=scn.plan.with_(micro_batch=1, global_batch=scn.plan.dp))
    return float(experts_cost(one, fabric, place, tokens, 1.0, extend=extend).ep_forward_s)


def test_decode_gathers_and_reduce_scatters_an_extend_all_reduces_twice():
    """A decode batch (MAX_LEN): all-gather of G T h x 2 bytes and a reduce-scatter of the same; a
    batch with prompt tokens (SUM_LEN): two all-reduces of that buffer. vLLM's gather does not
    change with prompts in the batch."""
    scn = serving_scenario(dsv3(1, 16, 16), WL)
    t = 64.0
    fabric = Fabric.of(scn.cluster)
    place = placement(scn.plan, scn.cluster.gpus_per_node, experts=True)
    group = fabric.group(16, np.minimum(place["ep"] * place["etp"], 16))
    buffer = 16 * t * scn.model.hidden * 2.0
    decode, extend = _experts(scn, t, False), _experts(scn, t, True)
    assert decode == pytest.approx(float(group.all_gather(buffer) + group.reduce_scatter(buffer)))
    assert extend == pytest.approx(float(2 * group.all_reduce(buffer)))
    assert extend > decode
    vllm = serving_scenario(dsv3(1, 16, 16), replace(WL, engine="vllm"))
    assert _experts(vllm, t, True) == _experts(vllm, t, False)


def test_sglang_decode_prices_its_gather_not_an_all_to_all(monkeypatch):
    """Over two servers (ep 16, k 8) the gather receives 15 tokens' worth per token against the
    all-to-all's 7.5 copies: SGLang's decode communication rises above what it was priced as."""
    wl = replace(WL, output_len=100, batch=512, kv_precision="fp8")
    two = dsv3(1, 16, 16)
    gathered = estimate_serving(two, wl)
    a2a = replace(engine_presets.ENGINES["sglang"], moe_dispatcher="alltoall")
    monkeypatch.setitem(engine_presets.ENGINES, "sglang", a2a)
    assert float(gathered.decode_s["tp_comm"]) > 1.2 * float(estimate_serving(two, wl).decode_s["tp_comm"])


def test_sglang_reserve_grows_with_its_dp_under_dp_attention():
    """--tp 8 --dp 8 --enable-dp-attention on an H200 (141 GB: chunk 8192, 512 graphs): 512 + 1.5 x
    8192 + 2 x 512 + 1024 x 8 / 8 + 512 x 8 x (3 + 1.5) MiB = 33,280 MiB; without DP attention tp=1
    keeps its 13,440 (at least 10 GiB)."""
    m, w = 141e9, 90e9
    assert float(sglang_reserved_bytes(m, 8192, 8, 1, 8)) == pytest.approx(33280 * MIB)
    assert float(kv_cache_bytes("sglang", m, w, 1, 1, attention_dp=8)) == pytest.approx(m - 33280 * MIB - w)
    assert float(kv_cache_bytes("sglang", m, w, 1, 1)) == pytest.approx(m - 13440 * MIB - w)


def test_vllm_kv_cache_loses_its_gathered_buffers_under_dp_attention():
    """vLLM profiles a dummy batch of its 8,192-token budget on every rank: the gathered input and
    combine buffers, 2 x G x 8192 x 7168 x 2 bytes (3.76 GB at G 16), leave the KV cache; TP
    attention and TensorRT-LLM keep theirs."""
    vllm = replace(WL, engine="vllm")
    scn = serving_scenario(dsv3(1, 16, 16), vllm)
    weights, _ = memory_per_gpu(scn, vllm)
    gpu = scn.cluster.gpu.memory_bytes
    expect = kv_cache_bytes("vllm", gpu, weights, 1, 1) - 2 * 16 * 8192 * 7168 * 2.0
    assert float(gathered_buffers_bytes(scn.model, 8192, 16)) == pytest.approx(3.758e9, rel=1e-3)
    assert float(kv_cache_free_bytes(scn, vllm, weights)) == pytest.approx(float(expect))
    smaller = float(kv_cache_free_bytes(scn, vllm, weights, 2048))  # a budget of 2,048 tokens
    assert smaller == pytest.approx(float(expect) + 2 * 16 * (8192 - 2048) * 7168 * 2.0)
    tp = serving_scenario(dsv3(8, 8, 1), vllm)
    w_tp, _ = memory_per_gpu(tp, vllm)
    assert float(kv_cache_free_bytes(tp, vllm, w_tp)) == pytest.approx(float(kv_cache_bytes("vllm", gpu, w_tp, 8, 1)))
    # attention tp 2: vLLM's sequence-parallel MoE chunks each rank's tokens by tp first, so the
    # 16 ranks gather dp x T = 8 x 8192 tokens, not 16 x 8192
    sp = serving_scenario(dsv3(2, 16, 8), vllm)
    w_sp, _ = memory_per_gpu(sp, vllm)
    left = kv_cache_bytes("vllm", gpu, w_sp, 2, 1) - 2 * 8 * 8192 * 7168 * 2.0
    assert float(kv_cache_free_bytes(sp, vllm, w_sp)) == pytest.approx(float(left))


def test_dp_gather_is_refused_for_training():
    from shardwise import Plan, estimate_training_step
    from shardwise.errors import SpecError

    plan = Plan(tp=2, ep=8, dp=8, global_batch=64, moe_dispatcher="dp-gather", sequence_parallel=True)
    scn = Scenario(presets.model("mixtral-8x7b"), presets.system("dgx-h100", nodes=2), plan)
    with pytest.raises(SpecError, match="'dp-gather' is for serving only"):
        estimate_training_step(scn)


def test_sglang_divides_its_chunk_over_the_attention_ranks():
    """SGLang's `_handle_data_parallelism`: --chunked-prefill-size // --dp under DP attention; vLLM's
    budget stays each rank's."""
    assert Replica(dsv3(1, 8, 8), WL, 8192).max_batched_tokens == 1024
    assert Replica(dsv3(8, 8, 1), WL, 8192).max_batched_tokens == 8192
    assert Replica(dsv3(1, 8, 8), replace(WL, engine="vllm"), 8192).max_batched_tokens == 8192


def test_serve_names_the_gather_under_engines_that_gather(cli):
    """vLLM and SGLang gather the experts' tokens: the report's part says "expert gather", TensorRT-LLM's
    all-to-all keeps its name."""
    base = ["serve", "--model", "qwen3-30b-a3b", "--system", "dgx-h100", "--concurrency", "64", "--requests", "100"]
    for framework, name in (
        ("sglang", "expert gather"),
        ("vllm", "expert gather"),
        ("tensorrt-llm", "expert all-to-all"),
    ):
        code, out, err = cli([*base, "--plan", "tp=1,ep=8", "--framework", framework])
        assert code == 0, err
        assert "= compute" in " ".join(out.split()) and name in " ".join(out.split()), framework


def test_an_iteration_tells_the_gather_whether_prompt_tokens_are_in_it(monkeypatch):
    """engines.iteration passes `extend` = prompt tokens present: a decode-only iteration False (the
    all-gather and reduce-scatter), a prefill True (two all-reduces), never left to the default."""
    from shardwise.engines import iteration

    seen: list[object] = []

    def recording(*args, **kwargs):
        seen.append(np.asarray(kwargs.get("extend")).tolist())
        return experts_cost(*args, **kwargs)

    monkeypatch.setattr(iteration, "experts_cost", recording)
    scn = serving_scenario(dsv3(1, 8, 8), WL)
    iteration.stage_costs(scn, WL, np.array([16.0, 16.0]), np.array([0.0, 512.0]), 1000.0)  # decode; mixed
    assert seen == [[False, True]]
