"""PP(k) / PP(1) at full load split into capacity gain and pipeline efficiency (analyses.pp_scaling)."""

from __future__ import annotations

import json
import re

import pytest

from shardwise import presets
from shardwise.analyses.pp_scaling import pipeline_scaling, saturated_tokens_per_s
from shardwise.engines.engine_presets import max_batched_tokens
from shardwise.engines.inflight import Replica, estimate_inflight
from shardwise.engines.serving import plan_for_serving
from shardwise.specs import Scenario
from shardwise.specs.serving import ServingWorkload

REQUESTS = 300


def _split(system: str, engine: str, pp: int, model: str = "llama3-8b"):
    """At the engine's own chunk budget on the GPU, as `serve` runs it (SGLang's reserve follows the
    chunk: at 8,192 tokens it holds back 13.4 GiB of an RTX 4090's 24, where its default 2,048 does 4.2)."""
    m, cluster = presets.model(model), presets.system(system)
    wl = ServingWorkload(512, 128, engine=engine)
    piped = Scenario(m, cluster.with_(gpus_per_node=pp), plan_for_serving(1, pp))
    one = Scenario(m, cluster.with_(gpus_per_node=1), plan_for_serving(1, 1))
    budget = max_batched_tokens(engine, float(cluster.gpu.memory_bytes), cluster.gpu.name)
    return pipeline_scaling(piped, one, wl, budget, "tp=1", requests=REQUESTS), piped, wl


@pytest.mark.parametrize("engine", ["tensorrt-llm", "sglang"])
def test_more_than_k_times_one_gpu_only_where_one_gpu_is_bound_by_its_kv_cache(engine):
    """Llama 3 8B in 16 bits on RTX 4090s: the weights take 16 of 24 GB, one GPU holds a few dozen
    sequences and PP=8 holds over a thousand; the pipeline's excess over 8x comes from that
    capacity (G > 1), while the pipeline itself loses (E < 1)."""
    split, _, _ = _split("rtx4090-8x", engine, 8)
    assert split.base_sequences < 100 < 1000 < split.pipeline_sequences
    assert split.capacity_gain > 1.1
    assert split.efficiency < 0.95
    assert split.superlinear == (split.capacity_gain * split.efficiency > 1.0)
    assert split.ratio == pytest.approx(8 * split.capacity_gain * split.efficiency, rel=1e-12)


@pytest.mark.parametrize("engine", ["tensorrt-llm", "sglang", "vllm"])
def test_where_one_gpu_holds_hundreds_the_pipeline_serves_less_than_k_times(engine):
    """Llama 3 8B on one H100 keeps about 600 sequences: more memory barely helps (G near 1), so
    PP=8 stays below 8x one GPU."""
    split, _, _ = _split("dgx-h100", engine, 8)
    assert split.base_sequences > 500
    assert split.capacity_gain == pytest.approx(1.0, abs=0.1)
    assert split.ratio < 8


@pytest.mark.parametrize(("system", "engine", "pp"), [("rtx4090-8x", "vllm", 4), ("l40s-8x", "sglang", 2)])
def test_the_pipeline_never_gains_over_one_gpu_doing_its_work(system, engine, pp):
    """E <= 1: with the sequences each GPU holds equal, stages only add sends, bubbles and host time."""
    split, _, _ = _split(system, engine, pp)
    assert split.efficiency <= 1.0


def test_the_split_uses_the_rate_serve_reports():
    """X_k is the full-load rate `estimate_inflight` reports for the pipeline plan."""
    split, piped, wl = _split("rtx4090-8x", "tensorrt-llm", 4)
    est = estimate_inflight(piped, wl, requests=REQUESTS)
    assert split.pipeline_tokens_per_s == pytest.approx(est.max_request_rate_per_s * wl.output_len, rel=1e-12)


def test_holding_its_own_capacity_changes_nothing_and_more_holds_more():
    m, cluster = presets.model("llama3-8b"), presets.system("rtx4090-8x").with_(gpus_per_node=1)
    replica = Replica(Scenario(m, cluster, plan_for_serving(1, 1)), ServingWorkload(512, 128), 8192)
    same = replica.holding(replica.capacity)
    assert saturated_tokens_per_s(same, REQUESTS, 0) == pytest.approx(saturated_tokens_per_s(replica, REQUESTS, 0))
    more = replica.holding(4 * replica.capacity)
    assert more.slots == 4 * replica.slots and replica.slots == replica.capacity
    assert saturated_tokens_per_s(more, REQUESTS, 0) > saturated_tokens_per_s(replica, REQUESTS, 0)


def test_serve_says_why_a_pipeline_serves_more_than_k_times(cli):
    # Llama 3 70B in 16 bits on H100: TP 2 keeps 99 sequences beside 70.6 GB of weights per GPU (100
    # before TensorRT-LLM's 128 MB all-reduce workspace was counted, #37), the
    # TP 2 x PP 4 pipeline over 2,000 (on RTX 4090s, Llama 3 8B's pipeline loses more to its unequal
    # micro-batches than its memory gains since prompts sit whole in one micro-batch: not past 8x)
    args = ["serve", "--model", "llama3-70b", "--system", "dgx-h100", "--plan", "tp=2,pp=4", "--plan", "tp=2"]
    code, out, _ = cli([*args, "--max-throughput", "--framework", "tensorrt-llm", "--requests", "300"])
    assert code == 0
    line = " ".join(out[out.index("tp=2,pp=4: at full load") :].split())  # wrapped to the terminal
    assert "x tp=2's tokens/s on 4x the GPUs, more than 4x as tp=2's KV cache holds only 99 sequences" in line
    serve, keeps = (float(re.search(pat, line).group(1)) for pat in (r"tp=2 would serve ([\d.]+)x", r"keeps ([\d.]+)"))
    assert 1.05 < serve < 1.3 and 0.8 < keeps < 1.0  # the weight reads shared; sends, bubble and host time
    code, out, _ = cli([*args, "--max-throughput", "--framework", "tensorrt-llm", "--requests", "300", "--json"])
    plans = {p["plan"]: p for p in json.loads(out)["plans"]}
    split = plans["tp=2,pp=4"]["pipeline_scaling"]
    assert split["superlinear"] and split["ratio"] > 4 and split["capacity_gain"] > 1
    assert "pipeline_scaling" not in plans["tp=2"]


def test_serve_stays_quiet_where_the_pipeline_serves_less_than_k_times(cli):
    args = ["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--plan", "pp=8", "--max-throughput"]
    code, out, _ = cli([*args, "--requests", "300"])
    assert code == 0 and "more than 8x as" not in out


def test_the_split_is_priced_only_when_read():
    """`serve --json` carries each pipeline plan's split; the explorer's page, which shows none,
    asks for the JSON without it, and nothing of it is priced (two more replicas per plan)."""
    from shardwise.explore.runner import REQUESTS
    from shardwise.requests.serve import ServeRequest

    argv = ["--model", "llama3-8b", "--system", "rtx4090-8x", "--plan", "pp=8", "--plan", "tp=1", "--max-throughput"]
    result = ServeRequest.from_argv(argv).run()
    page = result.as_dict(pipeline_scaling=False)
    assert "scaling" not in vars(result)  # not priced
    assert all("pipeline_scaling" not in plan for plan in page["plans"])
    full = result.as_dict()
    assert "pipeline_scaling" in next(p for p in full["plans"] if p["plan"].startswith("pp=8"))
    answer, _ = REQUESTS["serve"](argv)
    assert all("pipeline_scaling" not in plan for plan in answer["plans"])
