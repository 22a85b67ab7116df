"""The token dispatcher of each mixture-of-experts public run, from the recipe behind it
(`public_moe.DISPATCHER_EXCEPTIONS`, tools/moe_recipes.py), and the software releases the ranking
groups span (`ranking.GroupRanking.releases`)."""

from __future__ import annotations

import pytest

from script_module import load_script
from shardwise.analyses import public_moe, ranking
from shardwise.analyses import public_validation as pv


def _tool():
    return load_script("tools/moe_recipes.py", "moe_recipes")


@pytest.mark.parametrize(
    ("backend", "gpu", "version", "want"),
    [
        (None, "B200", "26.02", "alltoall"),  # no backend: the providers' moe_token_dispatcher_type
        ("deepep", "H100", "26.02", "flex"),
        ("deepep", "GB200", "26.04", "alltoall"),  # apply_flex_dispatcher_backend skips DeepEP on GB200
        ("hybridep", "GB300", "25.11", "flex"),
        ("hybridep", "B200", "25.11", "alltoall"),  # v0.2.0: HybridEP on GB200/GB300 only
        ("hybridep", "B200", "26.02.01", "flex"),
    ],
)
def test_the_tool_reads_the_dispatcher_a_recipe_runs(backend, gpu, version, want):
    assert _tool().dispatcher({"moe_flex_dispatcher_backend": backend}, gpu, version) == want


def _rows() -> dict[str, dict[str, str]]:
    return {r["id"]: public_moe.resolved(r) for r in pv.raw_rows() if r["moe"] == "yes"}


def test_each_release_runs_its_recipes_dispatcher():
    """Qwen3-30B-A3B on 8 B200 ran the alltoall dispatcher in 25.11 and 26.02 (no flex backend in
    Bridge 0.2.0/0.3.0) and HybridEP from 26.02.01; 25.09 dropped tokens, which needs alltoall;
    GPT-OSS 120B on B200 took HybridEP in 26.04 only; DeepSeek-V3 on H100 in 25.09 ran DeepEP with
    the all-to-all overlap (0.1.0rc3 run_script.py)."""
    rows = _rows()
    want = {
        "PUB-0263": "alltoall",  # 25.11
        "PUB-0227": "alltoall",  # 26.02
        "PUB-0190": "flex",  # 26.02.01
        "PUB-0289": "alltoall",  # 25.09, token drop
        "PUB-0141": "flex",  # GPT-OSS, 26.04
        "PUB-0095": "alltoall",  # GPT-OSS, 26.04.01
        "PUB-0296": "flex",  # DeepSeek-V3 on H100, 25.09
        "PUB-0277": "alltoall",  # DeepSeek-V3 on GB200, 25.09, token drop
    }
    assert {i: public_moe.dispatcher(rows[i]) for i in want} == want
    assert {i: pv.request_for(rows[i]).moe_dispatcher for i in want} == want
    assert public_moe.a2a_overlap(rows["PUB-0296"]) and not public_moe.a2a_overlap(rows["PUB-0277"])


def test_every_exception_names_a_published_run_and_changes_its_dispatcher():
    rows = [r for r in _rows().values() if public_moe.BRIDGE_SUMMARIES in r["source"]]
    keys = {(r["model"], r["system"], r["precision"], r["framework_version"]): r for r in rows}
    assert set(public_moe.DISPATCHER_EXCEPTIONS) <= set(keys)
    for key, value in public_moe.DISPATCHER_EXCEPTIONS.items():
        row = {**keys[key], "framework_version": ""}  # without its release: FLEX's rule
        assert public_moe.dispatcher(row) != value, key


def test_a_group_counts_the_releases_of_its_runs():
    runs = [
        ranking.Measured("g|m|s|8|4096", "megatron-core", ranking.MOE, f"L{i}", f"layout {i}", m, p, release)
        for i, (m, p, release) in enumerate([(3, 3, "25.09"), (2, 2, "26.02"), (1, 1, "26.02")])
    ]
    runs.append(ranking.Measured("g|m|s|8|4096", "megatron-core", ranking.MOE, "L0", "layout 0", 3, 3, "26.04"))
    (group,) = ranking.rank_groups(runs)
    assert group.releases == 3 and group.layouts == 3
    (plain,) = ranking.rank_groups([*runs[:3]])
    assert plain.releases == 2


def test_the_26_02_01_qwen3_h100_row_ran_its_releases_recipe_not_the_printed_layout():
    """The 26.02.01 table prints 26.02's PP2 VP12 EP8 for Qwen3-30B-A3B on 16 H100; Bridge v0.3.1's
    recipe runs PP1 EP16, and the row's 9,058 tokens/s per GPU is what PP1 EP16 measures later."""
    rows = _rows()
    assert pv.skip_reason(rows["PUB-0191"]) == "published layout contradicted by its source"
    later = [float(rows[i]["measured"]) for i in ("PUB-0147", "PUB-0101", "PUB-0050")]  # PP1 EP16
    assert all(abs(float(rows["PUB-0191"]["measured"]) / m - 1) < 0.03 for m in later)
    assert float(rows["PUB-0228"]["measured"]) < 0.6 * float(rows["PUB-0191"]["measured"])  # 26.02, PP2 VP12 EP8


def test_nemotron_3_nanos_h100_fp8_recipe_recomputes_four_modules_and_its_other_gpus_none():
    """NEMOTRON_3_NANO_PRETRAIN_CONFIG_H100_FP8_CS_V1 (Bridge v0.3.1 - v0.5.0) names moe, layernorm,
    core_attn and moe_act; the GB200/GB300/B200/B300 recipes recompute nothing."""
    rows = _rows()
    for i in ("PUB-0057", "PUB-0112", "PUB-0155", "PUB-0199"):  # H100 FP8, 26.02.01 - 26.06
        request = pv.request_for(rows[i])
        assert (request.recompute, request.recompute_modules) == ("selective", "moe,layernorm,core_attn,moe_act"), i
        assert pv.scenario_for(rows[i]).plan.recompute_modules == ("moe", "layernorm", "core_attn", "moe_act")
    other = [r for r in rows.values() if r["model"].startswith("nemotron-3-nano") and r["system"] != "dgx-h100"]
    assert other and not any(public_moe.recompute_modules(r) for r in other)


def test_a_layout_one_override_from_the_recipe_keeps_the_recipes_recomputation():
    """GPT-OSS 120B on B200 in 26.02.01 and 25.11 published EP 8 where the recipes (layernorm and
    moe_act recomputed) run EP 64; on H100 in 25.11 micro-batch 4 where the recipe runs 1."""
    rows = _rows()
    for i in ("PUB-0185", "PUB-0262", "PUB-0268"):
        assert public_moe.recompute_modules(rows[i]) == ("layernorm", "moe_act"), i
        assert pv.request_for(rows[i]).recompute == "selective"


@pytest.mark.parametrize(
    ("config", "want"),
    [
        ({}, "grouped_linear/eager"),  # Transformer Engine's GroupedLinear, no CUDA graphs
        ({"cuda_graph_impl": "transformer_engine"}, "grouped_linear/transformer_engine"),
        ({"cutedsl_fused_grouped_mlp": True, "cuda_graph_impl": "full_iteration"}, "fused/full_iteration"),
    ],
)
def test_the_tool_reads_how_a_recipe_runs_its_experts_mlp(config, want):
    assert _tool().expert_mlp(config) == want
