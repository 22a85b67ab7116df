"""`serve` without --plan on a mixture of experts compares the expert layouts engines run: the
experts whole inside each replica (ep = tp) and data-parallel attention with them whole over every
GPU (ep = the GPUs), left out where the engine cannot run them; a dense model's set is unchanged."""

from __future__ import annotations

import json

import pytest

from shardwise.requests.serve import ServeRequest
from shardwise.requests.serve_plans import EXPERT_PARALLEL_ENGINES, layouts
from shardwise.requests.training import TrainingRequest

H200 = ["--system", "dgx-h200", "--requests", "100"]
STATIC = ["--system", "dgx-h200", "--batching", "static"]  # Mixtral's in-flight runs take longer


def _json(cli, argv):
    code, out, err = cli([*argv, "--json"])
    assert code == 0, err
    return json.loads(out)


def _labels(data):
    return [p["plan"] for p in data["plans"]]


def test_deepseek_v3_on_8_h200_compares_expert_parallel_layouts(cli):
    data = _json(cli, ["serve", "--model", "deepseek-v3", *H200, "--weight-precision", "fp8"])
    plans = {p["plan"]: p for p in data["plans"]}
    # ep = tp inside a replica beside each tp > 1, data-parallel attention over the 8 GPUs at each tp < 8
    for label in ("tp=8,ep=8", "tp=4,pp=2,ep=4", "tp=1,ep=8", "tp=2,ep=8", "tp=4,ep=8"):
        assert label in plans
    assert "tp=8,ep=8" in plans and (plans["tp=8,ep=8"]["ep"], plans["tp=8,ep=8"]["etp"]) == (8, 1)
    assert (plans["tp=2,ep=8"]["ep"], plans["tp=2,ep=8"]["etp"], plans["tp=2,ep=8"]["replicas"]) == (8, 1, 4)
    # no pipeline under data-parallel attention
    assert not any("pp=" in label and plans[label]["ep"] > plans[label]["tp"] for label in plans)
    assert data["invalid_plans"] == []
    # best over all of them, the JSON's best naming its layout's degrees
    fits = [p for p in data["plans"] if p["fits_in_memory"]]
    best = data["best"]
    assert best["latency"] == min(fits, key=lambda p: p["e2e_s"])["plan"]
    capacity = best["capacity_tokens_per_s"]
    assert best["throughput"] == max((p["plan"] for p in fits), key=lambda k: capacity[k])
    for key in ("latency", "throughput"):
        row = plans[best[key]]
        assert best[f"{key}_layout"] == {k: row[k] for k in ("tp", "pp", "cp", "ep", "etp", "replicas")}
    # here data-parallel attention serves the most tokens per GPU at full load (DeepSeek's latent KV
    # cache is whole on every TP rank: dp groups hold dp times the sequences)
    assert plans[best["throughput"]]["ep"] > plans[best["throughput"]]["tp"]


@pytest.mark.parametrize("framework", ["tensorrt-llm", "sglang"])
def test_mixtral_on_8_h200_compares_expert_layouts_the_engine_runs(cli, framework):
    argv = ["serve", "--model", "mixtral-8x7b", *STATIC, "--framework", framework]
    data = _json(cli, argv)
    labels = _labels(data)
    assert {"tp=2,ep=2", "tp=4,ep=4", "tp=8,ep=8", "tp=2,pp=4,ep=2"} <= set(labels)
    dp_attention = {"tp=1,ep=8", "tp=2,ep=8", "tp=4,ep=8"}
    if framework == "sglang":  # its Mixtral file has no data-parallel attention: left out, not an error
        assert not dp_attention & set(labels)
    else:
        assert dp_attention <= set(labels)
    assert data["invalid_plans"] == []
    code, text, err = cli(argv)
    assert code == 0, err
    assert "ep = tp" in text and "--plan tp=N,ep=M" not in err
    assert ("not compared: data-parallel attention: SGLang runs mixtral-8x7b" in text) == (framework == "sglang")
    assert f"the {len(labels)} layouts of 8 GPUs compared" in text


def test_a_dense_models_layouts_are_unchanged(cli):
    from shardwise.analyses.serving_targets import plans
    from shardwise.requests.build import build_cluster

    argv = ["serve", "--model", "llama3-70b", "--system", "dgx-h100", "--requests", "100"]
    data = _json(cli, argv)
    assert _labels(data) == [f"tp={tp}" + (f",pp={pp}" if pp > 1 else "") for tp, pp in plans(8, 8)]
    assert all(p["ep"] == 1 and p["etp"] is None for p in data["plans"])
    code, text, err = cli(argv)
    assert code == 0, err
    line = next(x for x in text.splitlines() if x.startswith("no --plan given"))
    assert line == (
        "no --plan given: the 10 layouts of 8 GPUs compared (tp within a server, tp x pp dividing the GPUs, "
        "replicas filling the rest; --plan to choose)"
    )
    assert "not compared" not in text and "not shown" not in text
    cluster = build_cluster({"system": "dgx-h100", "tp": 1, "pp": 1, "dp": None, "vpp": 1, "micro_batch": 1}, [])
    for framework in EXPERT_PARALLEL_ENGINES:  # whatever the engine
        assert [s.label for s in layouts(cluster, None, framework).specs] == _labels(data)


def test_an_engine_without_expert_parallelism_keeps_ep_1_and_says_so(cli):
    argv = ["serve", "--model", "mixtral-8x7b", *STATIC, "--framework", "llama.cpp"]
    code, out, err = cli([*argv, "--json"])
    assert code == 0, err
    assert all(p["ep"] == 1 for p in json.loads(out)["plans"]) and len(json.loads(out)["plans"]) == 10
    assert "split every expert over its tp ranks (ep 1), as llama.cpp runs it" in err


def test_an_ep_twin_that_holds_no_sequence_where_its_ep_1_twin_holds_none_is_not_shown(cli):
    """DeepSeek-V3 in FP8 on 16 H200: tp=2 holds 337 GB of weights a GPU, and so does tp=2,ep=2."""
    data = _json(cli, ["serve", "--model", "deepseek-v3", *H200, "--num-gpus", "16", "--weight-precision", "fp8"])
    labels = _labels(data)
    assert "tp=2" in labels and "tp=2,ep=2" not in labels and "tp=4,ep=4" not in labels
    assert {"tp=2,pp=4,ep=2", "tp=8,ep=8", "tp=8,pp=2,ep=8", "tp=1,ep=16", "tp=8,ep=16"} <= set(labels)
    assert not data["plans"][labels.index("tp=2")]["fits_in_memory"]
    assert data["layouts"]["compared"] == len(labels) + 3
    assert data["layouts"]["not_shown"] == ["tp=2,ep=2", "tp=2,pp=2,ep=2", "tp=4,ep=4"]
    assert "data-parallel attention (ep = 16)" in data["layouts"]["experts"]


def test_the_request_layer_and_the_explorer_carry_the_same_default(cli):
    """The explorer answers `serve` through `ServeRequest` (explore/runner.py): the same layouts."""
    from shardwise.explore.runner import REQUESTS

    argv = ["--model", "mixtral-8x7b", *STATIC]
    data = _json(cli, ["serve", *argv])
    result = ServeRequest(TrainingRequest(model="mixtral-8x7b", system="dgx-h200"), batching="static").run()
    assert [label for label, _ in result.rows] == _labels(data)
    page, _ = REQUESTS["serve"](argv)
    assert _labels(page) == _labels(data) and page["best"] == data["best"]


def test_the_latency_target_search_compares_the_same_expert_layouts(cli):
    """`--ttft-max` without --plan on a mixture of experts searches the layouts `serve` compares
    (ep 1, ep = tp, data-parallel attention), the best over all of them; DeepSeek-V3 in FP8 on 16
    H200: an expert layout serves the most tokens per GPU within the targets."""
    argv = ["serve", "--model", "deepseek-v3", "--system", "dgx-h200", "--num-gpus", "16"]
    argv += ["--weight-precision", "fp8", "--ttft-max", "2s", "--tpot-max", "50ms"]
    code, out, err = cli([*argv, "--json"])
    assert code == 0, err
    data = json.loads(out)
    labels = [o["plan"] for o in data["options"]]
    assert {"tp=8", "tp=8,ep=8", "tp=1,ep=16", "tp=8,ep=16", "tp=2,pp=4,ep=2"} <= set(labels)
    meets = [o for o in data["options"] if o["meets"]]
    assert data["options"][0] == max(meets, key=lambda o: o["tokens_per_s_per_gpu"])
    assert data["options"][0]["plan"] in ("tp=1,ep=16", "tp=2,ep=16", "tp=8,ep=8")
    # the twins that fit no more than their ep 1 layout are not shown, as without targets
    assert data["layouts"]["not_shown"] == [
        {"plan": label, "weight_precision": "fp8"} for label in ("tp=2,ep=2", "tp=2,pp=2,ep=2", "tp=4,ep=4")
    ]
    assert not {"tp=2,ep=2", "tp=4,ep=4"} & set(labels) and "tp=2" in labels
    assert data["layouts"]["searched"] == 27 and "data-parallel attention (ep = 16)" in data["layouts"]["experts"]
    assert "latency-target search" not in err
    code, text, err = cli(argv)
    assert code == 0, err
    assert "no --plan given: 27 layouts searched" in " ".join(text.split())
    assert "not shown: tp=2,ep=2 (fp8)" in text


@pytest.mark.parametrize(
    ("framework", "dp_attention"), [("tensorrt-llm", True), ("vllm", True), ("sglang", False), ("llama.cpp", False)]
)
def test_the_search_takes_the_layouts_the_engine_runs(framework, dp_attention):
    """Mixtral on 8 H200: under SGLang no data-parallel attention (its Mixtral file), and under an
    engine without expert parallelism ep 1 alone, as `serve` without targets compares them."""
    target = TrainingRequest(model="mixtral-8x7b", system="dgx-h200")
    req = ServeRequest(target, ttft_max="1s", framework=framework, weight_precision="bf16")
    s = req.setting()
    compared = [spec.label for spec in s.specs]
    if framework == "llama.cpp":
        assert req.search_size(s) == 10 and all("ep=" not in label for label in compared)
        return
    searched = [spec.label for spec in req._searched_specs(s)]
    assert searched == compared and req.search_size(s) == len(searched)
    assert {"tp=2,ep=2", "tp=8,ep=8"} <= set(searched)
    assert ("tp=1,ep=8" in searched) == dp_attention
    assert not any("latency-target" in n for n in s.notes)


def test_a_dense_models_search_is_unchanged():
    from shardwise.analyses.serving_targets import plans

    req = ServeRequest(TrainingRequest(model="llama3-70b", system="dgx-h100"), ttft_max="1s", weight_precision="fp8")
    s = req.setting()
    assert req.search_size(s) == len(plans(8, 8)) and not s.layouts.experts
    assert not any("latency-target" in n for n in s.notes)


def test_an_expert_plan_under_an_engine_without_expert_parallelism_says_so(cli):
    """FasterTransformer and PyTorch price ep > 1 as if they ran it, with a note; llama.cpp refuses
    it in one line with the fix, as it refuses tp above the KV heads (review 35 #11)."""
    argv = ["serve", "--model", "mixtral-8x7b", "--system", "dgx-h100", "--plan", "tp=2,ep=2", "--plan", "tp=2"]
    code, _, err = cli([*argv, "--framework", "pytorch"])
    assert code == 0 and "pytorch runs no expert parallelism" in err
    code, out, err = cli([*argv, "--framework", "llama.cpp"])
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "--plan 'tp=2,ep=2': llama.cpp runs no expert parallelism" in err and "give ep=1" in err


def test_the_target_search_honours_stage_layers_on_a_dense_model(cli):
    """`serve --ttft-max` without --plan on a dense model: --first-stage-layers splits the searched
    pipelines as it does a mixture of experts' (it was dropped without a word); pp = 1 unchanged."""
    argv = ["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--weight-precision", "fp16", "--ttft-max", "2s"]
    even = {o["plan"]: o["tokens_per_s_per_gpu"] for o in _json(cli, argv)["options"]}
    split = {o["plan"]: o["tokens_per_s_per_gpu"] for o in _json(cli, [*argv, "--first-stage-layers", "4"])["options"]}
    assert set(split) == set(even)
    assert split["tp=1"] == even["tp=1"] and split["tp=8"] == even["tp=8"]
    assert split["tp=1,pp=2"] != even["tp=1,pp=2"]  # 4 + 28 layers, not 16 + 16
