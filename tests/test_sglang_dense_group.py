"""SGLang's dense parts under data-parallel attention (`engines.dp_dense`): the dense MLPs, shared
experts and output layer split over the whole tp x dp group on the gathered tokens, the embedding
whole, the gate on the gathered tokens; and the SGLang paths a mutation test found untested
(review13): the gather's 16 bits whatever the activations, the prompt-token default of a pass
without `extend`, SGLang's reserve (not vLLM's buffers) in its KV cache."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from shardwise import presets
from shardwise.engines import dp_dense
from shardwise.engines.dp_dense import dense_deltas, dp_gather_s, ends_deltas, gathered_router_s, group_params_delta
from shardwise.engines.engine_presets import kv_cache_bytes
from shardwise.engines.moe import experts_cost
from shardwise.engines.serving import estimate_serving, kv_cache_free_bytes, memory_per_gpu, serving_scenario
from shardwise.physics.collectives import Fabric
from shardwise.physics.compute import linear_times, linears_times, memory_s
from shardwise.physics.flops import gemm
from shardwise.physics.layer_parts import dense_mlp_gemms
from shardwise.physics.params import mlp_params
from shardwise.physics.topology import placement
from shardwise.specs import Scenario
from shardwise.specs.rules import serving_expert_tp
from shardwise.specs.serving import ServingWorkload
from shardwise.specs.stages import plan_split

WL = ServingWorkload(input_len=1000, output_len=1000, batch=256, weight_precision="fp8", engine="sglang")
VLLM = replace(WL, engine="vllm")


def dsv3(tp: int, ep: int, dp: int) -> Scenario:
    from shardwise.engines.serving import plan_for_serving

    plan = plan_for_serving(tp, 1, dp).with_(ep=ep, etp=serving_expert_tp(tp, ep, 0, dp))
    system = presets.system("dgx-h200").with_(nodes=max(tp * dp // 8, 1))
    return Scenario(presets.model("deepseek-v3"), system, plan)


def _where(scn: Scenario) -> tuple[Fabric, dict]:
    return Fabric.of(scn.cluster), placement(scn.plan, scn.cluster.gpus_per_node, experts=True)


def _one(scn: Scenario) -> Scenario:
    return replace(scn, plan=scn.plan.with_(micro_batch=1, global_batch=scn.plan.dp))


@pytest.mark.parametrize("tp,dp", [(1, 8), (2, 4)])
def test_sglang_holds_a_gth_of_the_dense_mlps_shared_experts_and_lm_head(tp, dp):
    """Against TensorRT-LLM (each rank's dense parts over its tp alone): the 3 dense MLPs and 58
    shared experts at 1 byte a weight and the 16-bit output layer at 1/G instead of 1/tp, the
    embedding whole (DeepSeek-V3 on 8 GPUs: 4.9 GB less a GPU at tp 1, 1.2 GB at tp 2). vLLM's
    sequence-parallel MoE (tp > 1) keeps its shared experts whole: 1.3 GB more at tp 2. With TP
    attention nothing changes."""
    scn = dsv3(tp, 8, dp)
    m = scn.model
    trt = replace(WL, engine="tensorrt-llm")
    w_sg, w_vl, w_trt = (memory_per_gpu(serving_scenario(scn, wl), wl)[0] for wl in (WL, VLLM, trt))
    share = 1 / 8 - 1 / tp
    dense = m.dense_layers * mlp_params(m, m.ffn_hidden) * share
    shared = m.moe_layers * m.shared_experts * mlp_params(m, m.expert_ffn_hidden)
    table = m.vocab * m.hidden
    ends = 2.0 * (table * share + table * (1 - 1 / tp))
    assert float(w_sg - w_trt) == pytest.approx(dense + shared * share + ends, rel=1e-9)
    assert float(w_sg - w_trt) == pytest.approx({1: -4.90e9, 2: -1.17e9}[tp], rel=0.01)
    assert float(w_vl - w_trt) == pytest.approx(shared * (1 - 1 / tp), abs=1.0)
    tp8 = dsv3(8, 8, 1)
    w_tp = memory_per_gpu(serving_scenario(tp8, WL), WL)[0]
    assert float(w_tp) == float(memory_per_gpu(serving_scenario(tp8, VLLM), VLLM)[0])
    layers, params = group_params_delta(tp8.model, serving_scenario(tp8, WL).plan, plan_split(61, tp8.plan))
    assert all(float(x) == 0.0 for x in (*layers, *params))


def test_vllm_runs_whole_shared_experts_on_its_chunk_where_attention_tp_is_above_1():
    """vLLM at tp 2, dp 4 (its sequence-parallel MoE): the shared experts' GEMMs whole on a rank's
    T / 2 tokens instead of split over 2 on T (twice the weights read a decode step), and the
    outputs all-gathered over tp after the MoE; tp 1 untouched by it."""
    fabric, place = _where(dsv3(2, 8, 4))
    vllm = _one(serving_scenario(dsv3(2, 8, 4), VLLM))
    m = vllm.model
    _, moe = dense_deltas(vllm, fabric, place, 32.0, False, 1.0)
    f = m.shared_experts * m.expert_ffn_hidden
    mlp = [
        sum(g.forward_s for g in linears_times(dense_mlp_gemms(m, n, f, t, 2.0, 1.0), vllm.cluster.gpu,
                                              vllm.plan.precision, backward=False))
        for n, t in ((16.0, 1), (32.0, 2))
    ]  # fmt: skip
    assert float(moe.compute_forward_s) == pytest.approx(float(mlp[0] - mlp[1]))
    assert float(moe.compute_forward_s) > 0
    # pp = 1, DeepSeek's layer: attention's all-reduce (here 0 told) a reduce-scatter, the all-gather
    # before the next attention (deepseek_v2.py `DeepseekV2DecoderLayer`)
    group = fabric.group(2, place["tp"])
    regather, scatter = group.all_gather(32.0 * m.hidden * 2.0), group.reduce_scatter(32.0 * m.hidden * 2.0)
    assert float(moe.tp_forward_s) == pytest.approx(float(regather + scatter)) and float(regather) > 0
    _, moe = dense_deltas(vllm, fabric, place, 32.0, False, 1.0, 0.0, 3e-6, 5e-6)
    assert float(moe.tp_forward_s) == pytest.approx(float(regather + scatter) - 8e-6)
    # pp > 1: the MoE chunks and all-gathers its outputs itself, attention all-reduces
    piped = replace(vllm, plan=vllm.plan.with_(pp=2, dp=2, ep=4, global_batch=2))
    _, moe = dense_deltas(piped, fabric, place, 32.0, False, 1.0, 0.0, 3e-6, 5e-6)
    assert float(moe.tp_forward_s) == pytest.approx(float(regather) - 3e-6)
    one = _one(serving_scenario(dsv3(1, 8, 8), VLLM))
    assert float(dense_deltas(one, fabric, place, 32.0, False, 1.0)[1].compute_forward_s) == 0.0


def test_a_dense_layer_gathers_and_reads_a_gth_of_its_mlp():
    """A decode step of 32 sequences a rank: the dense MLP reads 1/8 of its weights (less time than
    the whole MLP on 32 tokens), and pays the gather and reduce-scatter of the MoE layers; a batch
    with prompt tokens the two all-reduces. vLLM's plan: nothing changes."""
    scn = serving_scenario(dsv3(1, 8, 8), WL)
    one = _one(scn)
    fabric, place = _where(scn)
    for extend in (False, True):
        dense, moe = dense_deltas(one, fabric, place, 32.0, extend, 1.0)
        assert float(dense.compute_forward_s) < 0 and float(moe.compute_forward_s) < 0
        gather = dp_gather_s(scn.model, fabric, place, scn.plan, 32.0, extend)
        assert float(dense.ep_forward_s) == pytest.approx(float(gather)) and float(moe.ep_forward_s) == 0.0
    mlp = [
        sum(g.forward_s for g in linears_times(dense_mlp_gemms(scn.model, n, scn.model.ffn_hidden, t, 2.0, 1.0),
                                              scn.cluster.gpu, scn.plan.precision, backward=False))
        for n, t in ((8 * 32.0, 8), (32.0, 1))
    ]  # fmt: skip
    assert float(dense.compute_forward_s) == pytest.approx(float(mlp[0] - mlp[1]))
    vllm = _one(serving_scenario(dsv3(1, 8, 8), VLLM))
    dense, moe = dense_deltas(vllm, fabric, place, 32.0, False, 1.0)
    assert float(dense.compute_forward_s) == 0.0 and float(dense.ep_forward_s) == 0.0


def test_the_output_layer_splits_its_vocabulary_over_the_group():
    """32 sampled tokens a rank: the 16-bit lm_head's V/8 rows on 8 x 32 gathered tokens (less time
    than all V rows on 32), the hidden states gathered and the logits all-gathered over the 8; the
    embedding has no collective to lose at tp 1."""
    scn = serving_scenario(dsv3(1, 8, 8), WL)
    fabric, place = _where(scn)
    emb, head = ends_deltas(_one(scn), fabric, place, 32.0)
    group = fabric.group(8, 8)
    m = scn.model
    # the hidden states by the SUM_LEN path, an all-reduce (`LogitsMetadata.from_forward_batch`)
    comm = group.all_reduce(8 * 32 * m.hidden * 2.0) + group.reduce_scatter(2.0 * 8 * 32 * m.vocab)
    assert float(head.tp_forward_s) == pytest.approx(float(comm))
    assert float(head.compute_forward_s) < 0 and float(emb.tp_forward_s) == 0.0


def test_sglang_routes_the_gathered_tokens_on_every_rank():
    """The experts' compute differs from vLLM's gather (its gate on a rank's own tokens) by the gate
    on the G T gathered tokens alone."""
    sg = _one(serving_scenario(dsv3(1, 8, 8), WL))
    ag = replace(sg, plan=sg.plan.with_(moe_dispatcher="allgather"))
    fabric, place = _where(sg)
    t = 256.0
    own = experts_cost(ag, fabric, place, t, 1.0, extend=True).compute_forward_s
    gathered = experts_cost(sg, fabric, place, t, 1.0, extend=True).compute_forward_s
    assert float(gathered) > float(own)
    m, gpu = sg.model, sg.cluster.gpu
    router = linear_times(gemm(t, m.experts, m.hidden, 2.0), gpu, "bf16", backward=False).forward_s
    assert float(gathered) - float(own) == pytest.approx(float(gathered_router_s(sg, t)) - float(router))
    on_all = linear_times(gemm(8 * t, m.experts, m.hidden, 2.0), gpu, "bf16", backward=False).forward_s
    scores = memory_s(7 * 3.0 * 4.0 * t * m.experts, gpu, kernels=0)  # fp32 score passes of 7 T more tokens
    assert float(gathered_router_s(sg, t)) == pytest.approx(float(on_all + scores))


def test_sglang_gathers_16_bits_whatever_the_activations(monkeypatch):
    """The gather moves the model's 16-bit dtype, not the plan's activation bytes (review13: a
    mutation to the plan's bytes survived, every valid plan carrying 2; here a plan made to carry 4)."""
    from shardwise.specs import Plan

    scn = serving_scenario(dsv3(1, 16, 16), WL)
    one, (fabric, place) = _one(scn), _where(scn)
    monkeypatch.setattr(Plan, "bytes_per_element", property(lambda self: 4.0))
    group = fabric.group(16, np.minimum(place["ep"] * place["etp"], 16))
    buffer = 16 * 64.0 * scn.model.hidden * 2.0
    got = experts_cost(one, fabric, place, 64.0, 1.0, extend=False).ep_forward_s
    assert float(got) == pytest.approx(float(group.all_gather(buffer) + group.reduce_scatter(buffer)))


def test_a_pass_without_extend_reads_prompt_tokens_from_its_length():
    """The static estimate calls the experts without `extend`: one new token a sequence is a decode
    (the all-gather), more a prefill (the all-reduces) (review13: `s_q > 0` survived)."""
    scn = serving_scenario(dsv3(1, 16, 16), WL)
    one, (fabric, place) = _one(scn), _where(scn)
    for q_len, extend in ((1, False), (512, True)):
        default = experts_cost(one, fabric, place, q_len)
        told = experts_cost(one, fabric, place, q_len, extend=extend)
        assert float(default.ep_forward_s) == float(told.ep_forward_s)
    assert float(experts_cost(one, fabric, place, 1, extend=True).ep_forward_s) != float(
        experts_cost(one, fabric, place, 1).ep_forward_s
    )


def test_sglang_kv_cache_is_its_reserve_with_dp_not_vllms_buffers():
    """Under DP attention SGLang's KV cache is M - its reserve at tp x dp - W, nothing gathered taken
    off (review13: dropping the dp, or charging vLLM's profiled buffers, survived)."""
    scn = serving_scenario(dsv3(1, 8, 8), WL)
    weights, _ = memory_per_gpu(scn, WL)
    gpu = scn.cluster.gpu.memory_bytes
    expect = kv_cache_bytes("sglang", gpu, weights, 1, 1, attention_dp=8)
    assert float(kv_cache_free_bytes(scn, WL, weights)) == pytest.approx(float(expect))
    assert float(expect) < float(kv_cache_bytes("sglang", gpu, weights, 1, 1))


def test_static_decode_is_cheaper_with_the_dense_parts_over_the_group(monkeypatch):
    """The static estimate prices the same parts: with them whole per rank (the old pricing) its
    decode step of 64 sequences a rank is slower, and more weights are held."""
    wl = replace(WL, batch=512, output_len=200)
    scn = dsv3(1, 8, 8)
    split = estimate_serving(scn, wl)
    monkeypatch.setattr(dp_dense, "splits_over_group", lambda model, plan: np.asarray(False))
    whole = estimate_serving(scn, wl)
    assert float(split.weights_bytes) < float(whole.weights_bytes) - 4e9
    assert float(split.decode_s["compute"]) < float(whole.decode_s["compute"])


def test_both_estimates_tell_the_dense_parts_their_batch(monkeypatch):
    """The in-flight iteration and the static pass hand the dense parts whether prompt tokens are in
    the batch (a decode False, a prefill True) and how many tokens get logits (the decoding ones and
    the prompts that finish; a static pass one a sequence)."""
    from shardwise.engines import iteration
    from shardwise.engines.forward import forward_stages

    seen: list[tuple[object, object]] = []
    real_dense, real_ends = dp_dense.dense_deltas, dp_dense.ends_deltas

    def dense(scn, fabric, place, tokens, extend, *args, **kwargs):
        seen.append(("extend", np.asarray(extend).tolist()))
        return real_dense(scn, fabric, place, tokens, extend, *args, **kwargs)

    def ends(scn, fabric, place, logits_tokens, *args, **kwargs):
        seen.append(("logits", np.asarray(logits_tokens).tolist()))
        return real_ends(scn, fabric, place, logits_tokens, *args, **kwargs)

    monkeypatch.setattr(dp_dense, "dense_deltas", dense)
    monkeypatch.setattr(dp_dense, "ends_deltas", ends)
    scn = serving_scenario(dsv3(1, 8, 8), WL)
    iteration.stage_costs(scn, WL, np.array([16.0, 16.0]), np.array([0.0, 2000.0]), 1000.0)
    assert seen == [("extend", [False, True]), ("logits", [16.0, 18.0])]
    seen.clear()
    four = replace(scn, plan=scn.plan.with_(micro_batch=4, global_batch=4 * scn.plan.dp))
    forward_stages(four, 1, 1000, False, 1.0, 2.0)
    forward_stages(four, 1000, 1000, False, 1.0, 2.0)
    assert seen == [("extend", False), ("logits", 4), ("extend", True), ("logits", 4)]
