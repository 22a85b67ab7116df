"""llama.cpp's tensor split (`-sm tensor`) as its source runs it: the all-reduce's precision and
conversions, the mirrored embedding and a tied output layer run whole on every GPU."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from shardwise import presets
from shardwise.analyses.serving_pcie import PAIRS, throughput
from shardwise.analyses.serving_pcie_breakdown import breakdown, llama_cpp_breakdowns
from shardwise.engines.iteration import stage_costs
from shardwise.engines.llamacpp_tensor import (
    ALL_REDUCES_PER_LAYER,
    CONVERSION_BYTES_PER_ELEMENT,
    all_reduce_s,
    fp32_threshold_elements,
    tensor_split_stages,
)
from shardwise.engines.serving import plan_for_serving, serving_scenario
from shardwise.engines.stage_ends import head_forward_s
from shardwise.engines.tp_overlap import TpComm, tp_comm
from shardwise.physics.collectives import Fabric
from shardwise.physics.kernels import memory_s
from shardwise.specs import Scenario
from shardwise.specs.serving import ServingWorkload


def _scenario(model: str, tp: int, tied: bool | None = None) -> tuple[Scenario, ServingWorkload]:
    cluster = presets.system("rtx4090-8x").with_(gpu=presets.gpu("rtx-4090"), gpus_per_node=4, nodes=1)
    wl = ServingWorkload(1, 1, 1, "bf16", "bf16", "graphs", engine="llama.cpp")  # its kernels a layer, as the pairs
    spec = presets.model(model) if tied is None else presets.model(model).with_(tied_embeddings=tied)
    scn = serving_scenario(Scenario(spec, cluster, plan_for_serving(tp, 4 // tp)), wl)
    return scn, wl


def _comm(scn: Scenario, tokens: float) -> TpComm:
    one = replace(scn, plan=scn.plan.with_(micro_batch=1, global_batch=scn.plan.dp))
    return tp_comm(one, Fabric.of(scn.cluster), scn.plan.tp, tokens)


def test_fp32_below_the_threshold_of_each_gpu_count():
    """ggml-cuda.cu: FP32 below 32,768 elements on 2 GPUs, 131,072 on 3, 262,144 on 4 or more."""
    assert list(fp32_threshold_elements(np.array([2, 3, 4, 8]))) == [32_768, 131_072, 262_144, 262_144]


def test_all_reduce_precision_and_conversions():
    scn, _ = _scenario("llama3.2-1b", 4)
    comm, gpu = _comm(scn, 512), scn.cluster.gpu
    small, large = 2048.0, 512 * 2048.0  # one token's hidden state, a 512-token micro-batch's
    assert float(all_reduce_s(comm, gpu, small, 4)) == pytest.approx(float(comm.group.all_reduce(4 * small)))
    bf16 = float(comm.group.all_reduce(2 * large))
    conversions = float(memory_s(CONVERSION_BYTES_PER_ELEMENT * large, gpu, 2))
    assert float(all_reduce_s(comm, gpu, large, 4)) == pytest.approx(bf16 + conversions)
    assert conversions > 0
    assert float(all_reduce_s(comm, gpu, large, 1)) == 0.0


def test_one_gpu_is_unchanged():
    scn, wl = _scenario("llama3.2-1b", 1, tied=True)
    fs = stage_costs(scn, wl, np.asarray(1.0), np.asarray(0.0), 128.0)
    out = tensor_split_stages(fs, scn, 1.0, 1.0)
    for new, old in zip((*out.compute, *out.tp_comm), (*fs.compute, *fs.tp_comm), strict=True):
        assert float(new) == float(old)


def test_tied_output_layer_runs_whole_on_every_gpu():
    """Llama 3.2 1B ties its output layer to the embedding: llama.cpp loads it as token_embd.weight,
    which its split state leaves MIRRORED, so each of 4 GPUs runs the whole output layer (and
    gathers no logits); untied, the vocabulary stays split."""
    for tied in (True, False):
        model = "llama3.2-1b"
        scn, wl = _scenario(model, 4, tied)
        fs = stage_costs(scn, wl, np.asarray(1.0), np.asarray(0.0), 128.0)
        out = tensor_split_stages(fs, scn, 1.0, 1.0)
        one = replace(scn, plan=scn.plan.with_(micro_batch=1, global_batch=scn.plan.dp))
        whole = replace(one, plan=one.plan.with_(tp=1, dp=4, global_batch=4))
        delta = float(head_forward_s(whole, 1.0) - head_forward_s(one, 1.0))
        assert delta > 0
        assert float(out.compute[0] - fs.compute[0]) == pytest.approx(delta if tied else 0.0)
        layers = (
            presets.model(model).layers
            * ALL_REDUCES_PER_LAYER
            * float(all_reduce_s(_comm(scn, 1.0), scn.cluster.gpu, presets.model(model).hidden, 4))
        )
        if tied:  # the layers' all-reduces alone: no embedding reduce, no logits to gather
            assert float(out.tp_comm[0]) == pytest.approx(layers)
        else:
            assert float(out.tp_comm[0]) > layers


def test_serve_prices_the_tensor_split_as_the_pairs_do():
    """`serve --framework llama.cpp --plan tp=4` decodes one token a step as the tg128 pair is
    priced: the iteration engine applies the same tensor split."""
    from shardwise.engines.iteration import iteration_times

    pair = next(p for p in PAIRS if p.key == "llamacpp-19378-tg128")
    assert pair.tied_embeddings  # the GGUF has no output.weight
    scn, wl = _scenario("llama3.2-1b", 4, tied=True)
    wl = replace(wl, engine="llama.cpp")
    step = float(iteration_times(scn, wl, np.asarray(1.0), np.asarray(0.0), float(pair.context)).total_s)
    assert 1.0 / step == pytest.approx(throughput(pair, 4, 1), rel=1e-6)


def test_breakdown_sides_agree_with_the_pairs():
    sides = llama_cpp_breakdowns()
    keys = {p.key for p in PAIRS if p.engine == "llama.cpp"}
    assert {s.pair for s in sides} == keys and len(sides) == 2 * len(keys)
    for pair in PAIRS:
        if pair.engine != "llama.cpp":
            with pytest.raises(ValueError):
                breakdown(pair)
            continue
        layer, other = breakdown(pair)
        assert layer.side == "layer" and other.side in ("tensor", "row")
        assert layer.predicted_tokens_per_s == pytest.approx(throughput(pair, 1, pair.gpus))
        if other.side == "tensor":  # one stage: its cost is one micro-batch
            per = other.tokens_per_micro_batch / other.predicted_tokens_per_s
            assert other.stages_s[0] == pytest.approx(per, rel=1e-6)


def test_llama_cpp_places_the_embedding_and_output_layer_its_way():
    """llama.cpp keeps the input embedding in host memory; the output layer sits on the last GPU,
    split by vocabulary under `-sm tensor` unless tied (then whole on every GPU)."""
    from shardwise.engines.llamacpp_tensor import stage_params_delta

    model = presets.model("llama3.2-1b")
    word = float(model.vocab * model.hidden)
    untied, tied = model.with_(tied_embeddings=False), model.with_(tied_embeddings=True)
    assert [float(x) for x in stage_params_delta(untied, 1, 4)] == [-word, 0.0, 0.0]
    assert [float(x) for x in stage_params_delta(tied, 1, 4)] == [-word, 0.0, 0.0]
    assert float(stage_params_delta(untied, 4, 1)[0]) == pytest.approx(-word / 4)
    assert float(stage_params_delta(tied, 4, 1)[0]) == pytest.approx(word - word / 4)
    assert float(stage_params_delta(tied, 1, 1)[0]) == pytest.approx(0.0)  # one matrix, on the GPU


def test_serving_memory_of_a_llama_cpp_tensor_split():
    from shardwise.engines.serving import UNQUANTISED_BYTES_PER_PARAM, memory_per_gpu

    model = presets.model("llama3.2-1b").with_(tied_embeddings=True)
    word = float(model.vocab * model.hidden)
    scn, wl = _scenario("llama3.2-1b", 4, tied=True)
    trt, _ = memory_per_gpu(scn, replace(wl, engine="tensorrt-llm"))
    ours, _ = memory_per_gpu(scn, replace(wl, engine="llama.cpp"))
    assert float(ours - trt) == pytest.approx(UNQUANTISED_BYTES_PER_PARAM * (word - word / 4))


def test_the_engine_presets_traits_choose_the_placement_and_the_tensor_split(monkeypatch):
    """The serving engine prices llama.cpp's placement and `-sm tensor` by its preset's fields
    (`EnginePreset.ends_placement`, `tensor_split`), not by its name: another engine given them
    holds and runs what llama.cpp does."""
    from shardwise.engines import engine_presets
    from shardwise.engines.serving import UNQUANTISED_BYTES_PER_PARAM, estimate_serving, memory_per_gpu

    model = presets.model("llama3.2-1b").with_(tied_embeddings=True)
    word = float(model.vocab * model.hidden)
    scn, wl = _scenario("llama3.2-1b", 4, tied=True)
    wl = replace(wl, engine="pytorch")
    plain_weights, _ = memory_per_gpu(scn, wl)
    plain = estimate_serving(scn, wl)
    base = engine_presets.ENGINES["pytorch"]
    monkeypatch.setitem(engine_presets.ENGINES, "pytorch", replace(base, ends_placement="llama.cpp"))
    placed, _ = memory_per_gpu(scn, wl)
    assert float(placed - plain_weights) == pytest.approx(UNQUANTISED_BYTES_PER_PARAM * (word - word / 4))
    monkeypatch.setitem(engine_presets.ENGINES, "pytorch", replace(base, tensor_split="llama.cpp"))
    split = estimate_serving(scn, wl)
    assert float(split.tpot_s) != pytest.approx(float(plain.tpot_s), rel=1e-6)
