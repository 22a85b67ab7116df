"""Serving a mixture of experts with data-parallel attention and expert parallelism
(`engines.dp_attention`): the layout rule, the memory per GPU, the all-to-all, and `serve`."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from shardwise import presets
from shardwise.engines.dp_attention import dp_attention
from shardwise.engines.serving import estimate_serving, plan_for_serving, serving_scenario
from shardwise.errors import SpecError
from shardwise.specs import Scenario
from shardwise.specs.rules import raise_first, serving_expert_rule, serving_expert_tp
from shardwise.specs.serving import ServingWorkload


def scenario(tp: int, ep: int, dp: int, model: str = "mixtral-8x7b", system: str = "dgx-h100") -> Scenario:
    """etp as `serve --plan` derives it (the Plan's own default, etp = tp, is training's)."""
    plan = plan_for_serving(tp, 1, dp).with_(ep=ep, etp=serving_expert_tp(tp, ep, 0, dp))
    return Scenario(presets.model(model), presets.system(system).with_(nodes=max(tp * dp // 8, 1)), plan)


@pytest.mark.parametrize(
    ("tp", "ep", "dp", "etp"),
    [(8, 8, 1, 1), (8, 4, 1, 2), (2, 8, 4, 1), (2, 4, 4, 2), (1, 8, 8, 1), (2, 2, 4, 1)],
)
def test_the_experts_spread_over_the_tp_group_or_over_all_gpus(tp, ep, dp, etp):
    """etp unset: tp / ep while ep <= tp (TP attention), tp dp / ep beyond (DP attention)."""
    assert serving_expert_tp(tp, ep, 0, dp) == etp
    raise_first([serving_expert_rule(tp, ep, etp, dp)])


def test_an_expert_layout_that_fills_neither_group_is_refused_in_one_line():
    with pytest.raises(SpecError, match=r"ep=4 x etp=1 must equal tp=2 when serving .* or tp x dp=8"):
        raise_first([serving_expert_rule(2, 4, 1, 4)])


def test_dp_attention_runs_the_moe_layers_as_sequence_parallel_ones():
    """Each GPU of a dp group takes 1/tp of its tokens into the experts (reduce-scatter after
    attention, all-gather after the combine); TP attention keeps every token on every rank."""
    wl = ServingWorkload(input_len=512, output_len=128, batch=64)
    dp_attn = serving_scenario(scenario(2, 8, 4), wl).plan
    tp_attn = serving_scenario(scenario(8, 8, 1), wl).plan
    assert bool(dp_attention(dp_attn)) and bool(dp_attn.sequence_parallel) and dp_attn.expert_tp == 1
    assert not bool(dp_attention(tp_attn)) and not bool(tp_attn.sequence_parallel)


def test_each_gpu_caches_only_its_dp_groups_sequences_and_a_share_of_the_experts():
    """tp=1, ep=8 on 8 GPUs: a GPU holds 1/8 of the experts and the attention whole, and the KV cache
    of batch / 8 sequences with every KV head; tp=8 holds 1/8 of everything and all sequences' cache
    split 8 ways: the same KV bytes per GPU, and more weight bytes under DP attention (the
    attention replicated)."""
    wl = ServingWorkload(input_len=512, output_len=128, batch=64)
    dp_est = estimate_serving(scenario(1, 8, 8), wl)
    tp_est = estimate_serving(scenario(8, 8, 1), wl)
    assert float(dp_est.kv_cache_bytes) == pytest.approx(float(tp_est.kv_cache_bytes))
    m = presets.model("mixtral-8x7b")
    per_seq = m.layers * 2 * m.kv_heads * m.head_dim * 2.0 * (512 + 128)
    assert float(dp_est.kv_cache_bytes) == pytest.approx(8 * per_seq)
    assert float(dp_est.weights_bytes) > float(tp_est.weights_bytes)
    assert float(dp_est.max_batch) < float(tp_est.max_batch)  # per replica: one GPU's cache against eight


def test_dp_attention_pays_an_all_to_all_that_grows_off_the_server():
    """DeepSeek-V3, tp=1 and the experts over 8 GPUs of one server or 16 of two: the decode step's
    communication (the dispatch and combine) grows when half the copies cross InfiniBand."""
    wl = ServingWorkload(input_len=1000, output_len=100, batch=256, weight_precision="fp8", kv_precision="fp8")
    model, system = "deepseek-v3", "dgx-h200"
    one = estimate_serving(scenario(1, 8, 8, model, system), wl)
    two = estimate_serving(scenario(1, 16, 16, model, system), replace(wl, batch=512))
    assert float(one.decode_s["tp_comm"]) > 0
    assert float(two.decode_s["tp_comm"]) > 1.5 * float(one.decode_s["tp_comm"])
    assert np.isfinite(float(two.tpot_s))


def test_vllm_moves_the_experts_tokens_by_its_default_all_gather(monkeypatch):
    """vLLM's data-parallel attention runs its default all2all backend, allgather_reducescatter
    (`EnginePreset.moe_dispatcher`, what `--emit vllm` writes): every rank gathers the EP group's
    tokens once, with k top-k weights and ids each, and reduce-scatters the outputs. Over two
    servers (ep 16, k 8) each rank then receives 15 tokens' worth for each of its own where the
    all-to-all sends 7.5 copies: vLLM's expert traffic exceeds TensorRT-LLM's (SGLang gathers too:
    tests/test_sglang_dp_gather.py). TP
    attention (experts inside the TP group) moves no tokens, so its price is the same."""
    from shardwise.physics.moe_dispatch import TOPK_BYTES_PER_CHOICE, allgather_dispatch_bytes

    m = presets.model("deepseek-v3")
    _, routing = allgather_dispatch_bytes(m, 10.0, 16, 2.0, top_k_only=True)
    assert routing == pytest.approx(16 * 10.0 * m.experts_per_token * TOPK_BYTES_PER_CHOICE)
    wl = ServingWorkload(input_len=1000, output_len=100, batch=512, weight_precision="fp8", kv_precision="fp8")
    two = scenario(1, 16, 16, "deepseek-v3", "dgx-h200")
    vllm, trt = (estimate_serving(two, replace(wl, engine=e)) for e in ("vllm", "tensorrt-llm"))
    assert serving_scenario(two, replace(wl, engine="vllm")).plan.moe_dispatcher == "allgather"
    assert serving_scenario(two, wl).plan.moe_dispatcher == "alltoall"
    assert float(vllm.decode_s["tp_comm"]) > 1.2 * float(trt.decode_s["tp_comm"])
    from shardwise.engines import engine_presets

    tp_ep, vllm_wl = scenario(8, 8, 1, "deepseek-v3", "dgx-h200"), replace(wl, engine="vllm", batch=64)
    gathered = estimate_serving(tp_ep, vllm_wl)
    a2a = replace(engine_presets.ENGINES["vllm"], moe_dispatcher="alltoall")
    monkeypatch.setitem(engine_presets.ENGINES, "vllm", a2a)
    assert float(estimate_serving(tp_ep, vllm_wl).tpot_s) == float(gathered.tpot_s)
    assert float(estimate_serving(two, replace(wl, engine="vllm")).tpot_s) < float(vllm.tpot_s)


def test_serve_prices_dp_attention_plans(cli):
    """`serve --plan tp=2,ep=4` on Mixtral (dp=4 fills 8 GPUs; etp = 2) and tp=1,ep=8 are priced, not
    refused, and fit more sequences per replica than tp=2 with its experts inside the replica."""
    base = ["serve", "--model", "mixtral-8x7b", "--system", "dgx-h100", "--json", "--max-throughput"]
    code, out, err = cli([*base, "--plan", "tp=2", "--plan", "tp=2,ep=4", "--plan", "tp=1,ep=8"])
    assert code == 0, err
    rows = {r["plan"]: r for r in json.loads(out)["plans"]}
    assert set(rows) == {"tp=2", "tp=2,ep=4", "tp=1,ep=8"}
    assert all(r["tpot_s"] > 0 and r["throughput_tokens_per_s"] > 0 for r in rows.values())
    assert rows["tp=2,ep=4"]["max_batch_per_replica"] > rows["tp=2"]["max_batch_per_replica"]
    # the layout priced, with the expert TP it derived (was only the label: etp was nowhere)
    assert (rows["tp=2,ep=4"]["ep"], rows["tp=2,ep=4"]["etp"], rows["tp=1,ep=8"]["etp"]) == (4, 2, 1)
    assert rows["tp=2"]["etp"] == 2  # etp unset is tp's (it printed the raw 0)


def test_serve_names_the_expert_tp_it_derived():
    """`tp=1,ep=4` on 8 GPUs is etp=2 (each expert split over 2 GPUs, the memory of ep=8): the
    report says so below the table; an etp given, or derived as 1, is not repeated."""
    from types import SimpleNamespace

    from shardwise.requests.serve_notes import derived_etp as _derived_etp

    rows = [(label, SimpleNamespace(scenario=scenario(tp, ep, dp))) for label, tp, ep, dp in
            [("tp=1,ep=4", 1, 4, 8), ("tp=1,ep=8", 1, 8, 8), ("tp=4,ep=4", 4, 4, 2), ("tp=8", 8, 1, 1)]]  # fmt: skip
    line = _derived_etp(rows)
    assert "tp=1,ep=4: etp=2" in line and "ep=8" not in line and "tp=4" not in line
    assert _derived_etp(rows[1:]) == ""


def test_serve_names_the_expert_all_to_all_not_tp_comm_where_attention_is_data_parallel(cli):
    """With tp = 1 and the experts over every GPU there is no TP collective: the iteration's
    communication is the experts' all-to-all, and the report says so (it said "tp comm")."""
    base = ["serve", "--model", "mixtral-8x7b", "--system", "dgx-h100", "--concurrency", "64", "--requests", "200"]
    code, out, err = cli([*base, "--plan", "tp=1,ep=8", "--plan", "tp=2,ep=8", "--plan", "tp=4,cp=2"])
    assert code == 0, err
    lines = " ".join(out.split())
    assert "= compute" in lines and "expert all-to-all" in lines
    one = lines[lines.index("tp=1,ep=8: TTFT") : lines.index("tp=2,ep=8: TTFT")]
    assert "expert all-to-all" in one and "tp comm" not in one
    two = lines[lines.index("tp=2,ep=8: TTFT") : lines.index("tp=4,cp=2: TTFT")]
    assert "tp comm + expert all-to-all" in two
    assert "tp comm + cp comm" in lines[lines.index("tp=4,cp=2: TTFT") :]


def test_a_served_mixture_of_experts_says_its_interval_rests_on_dense_runs(cli):
    """`validate inference`'s 66 published serving rows are all dense: a MoE plan's basis says so."""
    code, out, err = cli(["serve", "--model", "mixtral-8x7b", "--system", "dgx-h100", "--plan", "tp=8", "--json"])
    assert code == 0, err
    assert "all of dense models" in json.loads(out)["plans"][0]["interval"]["basis"]
    code, out, err = cli(["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--plan", "tp=8", "--json"])
    assert code == 0, err
    assert "dense models" not in json.loads(out)["plans"][0]["interval"]["basis"]
