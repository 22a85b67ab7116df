"""Data-parallel attention's dense parts at attention tp = 2 and 4, where the TP collectives are
not zero (review15: every cost test ran at tp = 1, and mutants keeping a collective, or taking the
output layer's buffer as G rather than dp groups' tokens, survived): SGLang's dense MLP, shared
experts, embedding and output layer lose their TP collectives, the prompt path's gather sums
attention's partial outputs, the output layer runs on the dp groups' sampled tokens; vLLM's
sequence-parallel MoE per model file; SGLang's Mixtral / Grok refused."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from shardwise import presets
from shardwise.engines.costs import StageCost
from shardwise.engines.dp_dense import dense_deltas, ends_deltas, group_params_delta, with_dense_parts
from shardwise.engines.serving import plan_for_serving, serving_scenario
from shardwise.errors import SpecError
from shardwise.physics.collectives import Fabric
from shardwise.physics.compute import linear_times
from shardwise.physics.flops import logits_forward
from shardwise.physics.topology import placement
from shardwise.specs import Scenario
from shardwise.specs.rules import serving_expert_tp
from shardwise.specs.serving import ServingWorkload
from shardwise.specs.stages import plan_split

SG = ServingWorkload(input_len=1000, output_len=1000, batch=256, weight_precision="fp8", engine="sglang")
VL = replace(SG, engine="vllm")
MLP, SHARED, ATTN, EMB, HEAD = 7e-6, 5e-6, 11e-6, 3e-6, 13e-6  # TP collectives told (seconds)


def one(model: str, tp: int, dp: int, wl: ServingWorkload) -> tuple[Scenario, Fabric, dict]:
    """One rank of `model` served with attention tp x dp and ep = tp x dp on 8 H200s."""
    plan = plan_for_serving(tp, 1, dp).with_(ep=tp * dp, etp=serving_expert_tp(tp, tp * dp, 0, dp))
    scn = serving_scenario(Scenario(presets.model(model), presets.system("dgx-h200"), plan), wl)
    scn = replace(scn, plan=scn.plan.with_(micro_batch=1, global_batch=scn.plan.dp))
    return scn, Fabric.of(scn.cluster), placement(scn.plan, 8, experts=True)


@pytest.mark.parametrize("tp", [2, 4])
def test_sglang_drops_the_dense_parts_tp_collectives(tp):
    """A decode step: the dense MLP's and the shared experts' TP collectives gone (the gather
    replaces them), attention's kept (its reduce-scatter and all-gather around the gather); the
    embedding's and the output layer's gone."""
    scn, fabric, place = one("deepseek-v3", tp, 8 // tp, SG)
    dense, moe = dense_deltas(scn, fabric, place, 64.0, False, 1.0, MLP, SHARED, ATTN)
    assert float(dense.tp_forward_s) == pytest.approx(-MLP)
    assert float(moe.tp_forward_s) == pytest.approx(-SHARED)
    emb, head = ends_deltas(scn, fabric, place, 16.0, EMB, HEAD)
    assert float(emb.tp_forward_s) == pytest.approx(-EMB)
    assert float(head.tp_forward_s) + HEAD > 0  # the gathers replace the collective
    parts = (StageCost(0.0, 0.0, 2 * ATTN, 0.0), StageCost(0.0, 0.0, EMB, 0.0), StageCost(0.0, 0.0, HEAD, 0.0))
    moe_in = (StageCost(0.0, 0.0, 0.0, 0.0), None)
    layer, emb2, head2, moe2 = with_dense_parts(scn, fabric, place, 64.0, False, 16.0, 1.0, (*parts, moe_in), SHARED)
    assert float(layer.tp_forward_s) == pytest.approx(ATTN)  # attention's; the MLP's half gone
    assert float(emb2.tp_forward_s) == pytest.approx(0.0)
    assert float(head2.tp_forward_s) == pytest.approx(float(head.tp_forward_s) + HEAD)
    assert float(moe2[0].tp_forward_s) == pytest.approx(-SHARED)
    layer, *_ = with_dense_parts(scn, fabric, place, 64.0, True, 16.0, 1.0, (*parts, moe_in), SHARED)
    assert float(layer.tp_forward_s) == pytest.approx(0.0)  # a prompt batch: attention's summed in the gather


@pytest.mark.parametrize("tp", [2, 4])
def test_sglang_prompt_path_sums_attention_in_its_gather(tp):
    """A batch with prompt tokens (SUM_LEN): attention's TP all-reduce does not run, in the dense
    and the MoE layers (`dp_gather_partial`'s all-reduce adds the partial outputs)."""
    scn, fabric, place = one("deepseek-v3", tp, 8 // tp, SG)
    dense, moe = dense_deltas(scn, fabric, place, 512.0, True, 1.0, MLP, SHARED, ATTN)
    assert float(dense.tp_forward_s) == pytest.approx(-MLP - ATTN)
    assert float(moe.tp_forward_s) == pytest.approx(-SHARED - ATTN)
    vllm, fabric, place = one("deepseek-v3", tp, 8 // tp, VL)
    _, moe = dense_deltas(vllm, fabric, place, 512.0, True, 1.0, MLP, SHARED, ATTN)
    _, decode = dense_deltas(vllm, fabric, place, 512.0, False, 1.0, MLP, SHARED, ATTN)
    assert float(moe.tp_forward_s) == pytest.approx(float(decode.tp_forward_s))  # vLLM: no such path


@pytest.mark.parametrize("tp", [2, 4])
def test_sglang_output_layer_runs_on_the_dp_groups_tokens(tp):
    """x sampled tokens a group: the buffer holds the dp groups' dp x, not G x (the counts are
    one per attention group), all-reduced in 16 bits; V / G rows on them; logits all-gathered."""
    scn, fabric, place = one("deepseek-v3", tp, 8 // tp, SG)
    m, x, dp = scn.model, 16.0, 8 // tp
    _, head = ends_deltas(scn, fabric, place, x, EMB, HEAD)
    group = fabric.group(8, 8)
    comm = group.all_reduce(dp * x * m.hidden * 2.0) + group.reduce_scatter(2.0 * dp * x * m.vocab)
    assert float(head.tp_forward_s) == pytest.approx(float(comm) - HEAD)

    def logits_s(n: float, split: int) -> float:
        times = linear_times(logits_forward(m, 1.0, split, 2.0, n), scn.cluster.gpu, "bf16", backward=False)
        return float(times.forward_s)

    assert float(head.compute_forward_s) == pytest.approx(logits_s(dp * x, 8) - logits_s(x, tp))


def test_a_tied_output_layer_is_the_whole_embedding_once():
    """A tied model on one stage: the whole table on every GPU (SGLang's `lm_head = embed_tokens`),
    counted once; untied, the output layer at 1/G beside it."""
    scn, _, _ = one("deepseek-v3", 2, 4, SG)
    split = plan_split(scn.model.layers, scn.plan)
    table = scn.model.vocab * scn.model.hidden
    tied = replace(scn.model, tied_embeddings=True)
    layers, params = group_params_delta(tied, scn.plan, split)
    assert float(params[0] - layers[0]) == pytest.approx(table * (1 - 1 / 2))
    layers, params = group_params_delta(scn.model, scn.plan, split)
    assert float(params[0] - layers[0]) == pytest.approx(table * (1 - 1 / 2) + table * (1 / 8 - 1 / 2))


@pytest.mark.parametrize("tp", [2, 4])
def test_vllm_sequence_parallel_moe_per_model_file(tp):
    """vLLM at tp > 1: Qwen3 (no shared experts) chunks and all-gathers after its MoE, attention
    all-reduced; DeepSeek at pp = 1 reduce-scatters attention instead; Mixtral's file neither."""
    qwen, fabric, place = one("qwen3-30b-a3b", tp, 8 // tp, VL)
    group = fabric.group(tp, place["tp"])
    chunk = 64.0 * qwen.model.hidden * 2.0
    _, moe = dense_deltas(qwen, fabric, place, 64.0, False, 1.0, MLP, 0.0, ATTN)
    assert float(moe.tp_forward_s) == pytest.approx(float(group.all_gather(chunk)))
    ds, fabric, place = one("deepseek-v3", tp, 8 // tp, VL)
    chunk = 64.0 * ds.model.hidden * 2.0
    _, moe = dense_deltas(ds, fabric, place, 64.0, False, 1.0, MLP, SHARED, ATTN)
    want = group.all_gather(chunk) + group.reduce_scatter(chunk) - ATTN - SHARED
    assert float(moe.tp_forward_s) == pytest.approx(float(want))
    mix, fabric, place = one("mixtral-8x7b", tp, 8 // tp, VL)
    dense, moe = dense_deltas(mix, fabric, place, 64.0, False, 1.0, MLP, 0.0, ATTN)
    assert all(float(getattr(c, f)) == 0.0 for c in (dense, moe) for f in ("compute_forward_s", "tp_forward_s"))


def test_vllm_sequence_parallel_moe_is_the_model_files_that_read_it():
    """A whitelist of model_types from vLLM 0.34.0's files (`VLLM_SEQUENCE_PARALLEL_MOE`): the presets'
    DeepSeek, Kimi, Qwen3 MoE, GPT-OSS and Llama 4 run it, Mixtral and Grok do not; a model whose
    architecture is unknown runs it only with latent attention (DeepSeek's file)."""
    from shardwise.engines.dp_dense import VLLM_SEQUENCE_PARALLEL_MOE, vllm_sequence_parallel_moe

    plan = plan_for_serving(2, 1, 4).with_(ep=8, etp=1, moe_dispatcher="allgather")
    runs = {name: bool(vllm_sequence_parallel_moe(presets.model(name), plan)) for name in presets.names("models")}
    on = {name for name, yes in runs.items() if yes}
    assert on == {
        n for n in runs if presets.model(n).is_moe and presets.model(n).architecture in VLLM_SEQUENCE_PARALLEL_MOE
    }
    assert {"deepseek-v3", "kimi-k2", "qwen3-30b-a3b", "gpt-oss-120b", "llama4-scout", "moonlight-16b"} <= on
    assert not {"mixtral-8x7b", "mixtral-8x22b", "grok-1"} & on
    assert all(f.endswith(".py") for f in VLLM_SEQUENCE_PARALLEL_MOE.values())
    for name, latent in (("qwen3-30b-a3b", False), ("deepseek-v3", True)):
        unknown = replace(presets.model(name), architecture=None)
        assert bool(vllm_sequence_parallel_moe(unknown, plan)) == latent
    assert not bool(vllm_sequence_parallel_moe(presets.model("qwen3-30b-a3b"), plan.with_(tp=1, ep=8)))


@pytest.mark.parametrize("model", ["mixtral-8x7b", "grok-1"])
def test_sglang_refuses_data_parallel_attention_on_mixtral_and_grok(model):
    """SGLang's Mixtral / Grok model files have no data-parallel attention: refused in one line;
    TP attention (ep = tp) and vLLM's Mixtral are served."""
    with pytest.raises(SpecError, match="without data-parallel attention"):
        one(model, 2, 4, SG)
    plan = plan_for_serving(8, 1, 1).with_(ep=8, etp=1)
    scn = serving_scenario(Scenario(presets.model(model), presets.system("dgx-h200"), plan), SG)
    assert not np.any(scn.plan.ep * scn.plan.expert_tp > scn.plan.tp)
    one("mixtral-8x7b", 2, 4, VL)
