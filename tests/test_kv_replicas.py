"""Serving with more TP ranks than KV heads: each rank holds one KV head, replicated tp / kv_heads
times (vLLM's QKVParallelLinear `num_kv_head_replicas`, SGLang and TensorRT-LLM the same); training
keeps Megatron-LM's rule (the KV heads divisible by tp)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shardwise import presets
from shardwise.engines.serving import ServingWorkload, estimate_serving, memory_per_gpu, plan_for_serving
from shardwise.engines.training import estimate_training_step, training_memory
from shardwise.physics.flops import kv_cache_elements_per_token, layer_forward
from shardwise.physics.params import stage_params_per_gpu
from shardwise.specs import Plan, Scenario, SpecError, rules


def scenario(model: str = "llama3-70b", tp: int = 16, **changes: object) -> Scenario:
    """`model` served at `tp` on one NVLink server of tp GPUs (a 16-GPU NVLink domain where tp = 16)."""
    cluster = presets.system("dgx-h100").with_(gpus_per_node=tp)
    return Scenario(presets.model(model).with_(**changes), cluster, plan_for_serving(tp, 1))


def test_a_plan_with_more_tp_ranks_than_kv_heads_is_priced():
    scn = scenario()  # Llama 3 70B has 8 KV heads
    est = estimate_serving(scn, ServingWorkload(512, 128, 16))
    for value in (est.ttft_s, est.tpot_s, est.throughput_tokens_per_s, est.max_batch):
        assert np.isfinite(float(value)) and float(value) > 0
    assert bool(est.fits_in_memory)


@pytest.mark.parametrize(("model", "kv_heads"), [("llama3-70b", 8), ("qwen3-30b-a3b", 4)])
def test_a_rank_holds_and_reads_one_kv_head_as_if_the_model_had_tp_of_them(model, kv_heads):
    """Above the KV heads each rank's weights, KV cache and attention work are those of the same
    model with tp KV heads (one per rank), and its cache per token no smaller than at tp = kv_heads."""
    tp = 2 * kv_heads
    replicated, twin = scenario(model, tp), scenario(model, tp, kv_heads=tp)
    assert int(replicated.model.kv_heads) == kv_heads
    wl = ServingWorkload(1024, 256, 8)
    weights, kv_per_seq = memory_per_gpu(replicated, wl)
    twin_weights, twin_kv = memory_per_gpu(twin, wl)
    assert float(weights) == pytest.approx(float(twin_weights), rel=1e-12)
    assert float(kv_per_seq) == pytest.approx(float(twin_kv), rel=1e-12)
    _, kv_at_kv_heads = memory_per_gpu(scenario(model, kv_heads), wl)
    assert float(kv_per_seq) == pytest.approx(float(kv_at_kv_heads), rel=1e-12)
    m = replicated.model
    assert kv_cache_elements_per_token(m, tp) == pytest.approx(2 * m.head_dim)  # one head's K and V
    one = layer_forward(m, 4, tp, False, 2.0, 1, 2048)
    other = layer_forward(twin.model, 4, tp, False, 2.0, 1, 2048)
    assert one.qkv.n == pytest.approx(m.q_dim / tp + 2 * m.head_dim)  # Q split, K and V one head
    assert one.attn_out.k == pytest.approx(m.q_dim / tp)  # O split as before
    assert one.scores.batch == pytest.approx(4 * m.heads / tp)  # heads / tp query heads per rank
    for part in ("qkv", "scores", "context", "flash"):
        assert getattr(one, part).flops == pytest.approx(getattr(other, part).flops)
        assert getattr(one, part).bytes == pytest.approx(getattr(other, part).bytes)


def test_the_k_and_v_projections_are_replicated_and_the_rest_split():
    """Llama 3 70B at tp 16: Q and O split 16 ways, K and V one whole head (2 d h) per rank per
    layer, 8 d h more than a 16-way split of its 8 heads' 16 d h."""
    m = presets.model("llama3-70b")
    d, h = m.head_dim, m.hidden
    first16 = stage_params_per_gpu(m, 16, 1)[0]
    first8 = stage_params_per_gpu(m, 8, 1)[0]
    embeddings = 2 * m.vocab * h  # untied input and output matrices, vocabulary-parallel
    mlp = 3 * h * m.ffn_hidden
    norms = 2 * h
    qo = 2 * m.q_dim * h
    expected16 = m.layers * ((qo + mlp) / 16 + 2 * d * h + norms) + embeddings / 16 + h
    expected8 = m.layers * ((qo + mlp) / 8 + 2 * d * h + norms) + embeddings / 8 + h
    assert float(first16) == pytest.approx(expected16, rel=1e-12)
    assert float(first8) == pytest.approx(expected8, rel=1e-12)


def test_the_cache_over_the_group_grows_by_tp_over_kv_heads_and_the_batch_with_it():
    """Per GPU the cache per sequence stays one head's, so the group holds tp / kv_heads copies;
    the weights per GPU shrink, so more sequences fit per replica and the throughput rises with load."""
    wl = ServingWorkload(512, 128, 1)
    at8, at16 = estimate_serving(scenario(tp=8), wl), estimate_serving(scenario(tp=16), wl)
    _, kv8 = memory_per_gpu(scenario(tp=8), wl)
    _, kv16 = memory_per_gpu(scenario(tp=16), wl)
    assert 16 * float(kv16) == pytest.approx(2 * 8 * float(kv8))
    assert float(at16.weights_bytes) < float(at8.weights_bytes)
    assert int(at16.max_batch) >= int(at8.max_batch)
    loads = np.array([1, 4, 16, 64, 256])
    est = estimate_serving(scenario(tp=16), ServingWorkload(512, 128, loads))
    assert np.all(np.diff(np.asarray(est.throughput_tokens_per_s)) > 0)
    assert np.all(np.diff(np.asarray(est.tpot_s)) >= 0)


def test_training_keeps_the_kv_heads_split_by_tp():
    model = presets.model("llama3-70b")
    cluster = presets.system("dgx-h100").with_(nodes=2)
    scn = Scenario(model, cluster, Plan(tp=16, pp=1, dp=1, global_batch=16, micro_batch=1))  # a serving layout
    for price in (estimate_training_step, training_memory):
        with pytest.raises(SpecError, match="only serving replicates"):
            price(scn)


def test_the_replica_rule():
    tp = np.array([1, 2, 4, 8, 16, 32, 12, 6])
    assert rules.holds([rules.kv_replica_rule(tp, 8)]).tolist() == [True] * 6 + [False, False]
    assert not bool(rules.holds(rules.tp_rules(16, 32, 8, 28672)))  # training's rule by default
    assert bool(rules.holds(rules.tp_rules(16, 32, 8, 28672, replicate_kv=True)))
    with pytest.raises(SpecError, match="tp=12 is above the model's kv_heads=8 but not a multiple"):
        rules.raise_first([rules.kv_replica_rule(12, 8)])


def test_serve_prices_what_predict_refuses(cli):
    base = ["--model", "llama3-70b", "--system", "dgx-h100", "--nodes", "2"]
    code, out, err = cli(["serve", *base, "--plan", "tp=16", "--json"])
    assert code == 0, err
    data = json.loads(out)
    assert not data["invalid_plans"] and [p["tp"] for p in data["plans"]] == [16]
    assert data["plans"][0]["fits_in_memory"] and data["plans"][0]["throughput_tokens_per_s"] > 0
    code, _, err = cli(["predict", *base, "--tp", "16", "--global-batch", "16"])
    assert code == 2 and "kv_heads: 8 is not divisible by tp=16" in err and "Traceback" not in err


def test_serve_refuses_tp_above_the_kv_heads_that_is_not_a_multiple(cli):
    """24 query heads and 6 KV heads at tp 8: 8 ranks cannot hold equal replicas of 6 heads."""
    model = ["--heads", "24", "--kv-heads", "6", "--hidden", "3072", "--layers", "4", "--family", "llama"]
    code, _, err = cli(["serve", *model, "--system", "dgx-h100", "--plan", "tp=8"])
    assert code == 2, err
    assert "tp=8 is above the model's kv_heads=6 but not a multiple" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_an_engine_that_does_not_replicate_kv_heads_takes_no_tp_above_them(cli):
    """Only vLLM, SGLang and TensorRT-LLM replicate KV heads: llama.cpp's --plan tp=8 on a model of 4
    KV heads is refused in one line, and its layouts compared without --plan leave tp=8 out."""
    base = ["serve", "--model", "tinyllama-1.1b", "--system", "dgx-h100", "--nodes", "1", "--framework", "llama.cpp"]
    code, _, err = cli([*base, "--plan", "tp=8"])
    assert code == 2 and "which llama.cpp does not replicate" in err and len(err.strip().splitlines()) == 1
    code, out, err = cli([*base, "--json"])
    assert code == 0, err
    assert "tp=8" not in out and "tp=4" in out
    code, _, err = cli([*base[:-1], "vllm", "--plan", "tp=8"])
    assert code == 0, err


def test_the_latency_target_search_keeps_to_what_the_engine_runs():
    """The --ttft-max/--tpot-max search compares tp above the KV heads only under an engine that
    replicates them."""
    from shardwise.analyses.serving_targets import _kv_heads_fit

    assert _kv_heads_fit(4, 8, "vllm") and _kv_heads_fit(4, 8, "tensorrt-llm")
    assert not _kv_heads_fit(4, 8, "llama.cpp") and not _kv_heads_fit(4, 6, "vllm")
    assert _kv_heads_fit(4, 2, "llama.cpp") and not _kv_heads_fit(6, 4, "vllm")


def test_the_planner_names_the_kv_heads_when_they_rule_a_tp_out(cli):
    base = ["plan", "--model", "tinyllama-1.1b", "--system", "dgx-h100", "--nodes", "1"]
    code, _, err = cli([*base, "--global-batch", "64", "--tp", "8"])
    assert code == 2 and "--tp 8: the model's 4 KV heads are not divisible by tp=8" in err  # the rule that fails


def test_serve_says_which_plans_replicate_the_kv_heads():
    """A plan with tp above the KV heads is named below serve's table (tp=16 of Llama 3 70B's 8
    heads: each on 2 GPUs); one with tp at or below them is not."""
    from types import SimpleNamespace

    from shardwise.requests.serve_notes import replicated_kv as _replicated_kv

    model = presets.model("llama3-70b")

    def row(tp):
        return f"tp={tp}", SimpleNamespace(scenario=SimpleNamespace(plan=SimpleNamespace(tp=tp), model=model))

    assert _replicated_kv([row(16), row(8)]) == "KV heads replicated (tp above them): tp=16: 8 KV heads, each on 2 GPUs"
    assert _replicated_kv([row(8), row(4)]) == ""
