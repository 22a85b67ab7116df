"""Review 43's findings on the training side: torchtitan's recompute in predict and plan, the render's
float residue, the re-price message and plan's range column."""

from __future__ import annotations

import json

import pytest

PREDICT_70B = ["predict", "--model", "llama3-70b", "--system", "dgx-h100", "--nodes", "8", "--tp", "8",
               "--global-batch", "512", "--framework", "torchtitan"]  # fmt: skip


def test_predict_names_torchtitans_own_config_where_it_runs_another_recompute(cli):
    """torchtitan's preset prices the trainer's per-op SelectiveAC (pytorch/torchtitan#2357), while its
    llama3_70b config sets FullAC, which --emit torchtitan prices: 108 s against 128 s, two 'defaults'.
    The plan line and --json say so (review 43 #3); the default itself is unchanged."""
    code, out, err = cli(PREDICT_70B)
    flat = " ".join(out.split())
    assert code == 0, err
    said = "recompute=selective (torchtitan's trainer default; its llama3_70b config runs full AC: --recompute full)"
    assert said in flat
    code, out, err = cli([*PREDICT_70B, "--json"])
    d = json.loads(out)
    assert d["torchtitan_config_recompute"] == {"config": "llama3_70b", "recompute": "full"}
    assert d["recompute_source"] == "framework default" and d["scenario"]["plan"]["recompute"] == "selective"
    # said only where the recompute is the stack's default and the config's differs
    for extra in (["--recompute", "selective"], ["--emit", "torchtitan"]):
        code, out, err = cli([*PREDICT_70B, *extra, "--json"])
        assert code == 0 and "torchtitan_config_recompute" not in json.loads(out), (extra, err)
    eight_b = ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", "64",
               "--framework", "torchtitan"]  # fmt: skip
    code, out, err = cli(eight_b)  # llama3_8b's config runs SelectiveAC, as the preset
    assert code == 0 and "(torchtitan's default; --recompute none to turn it off)" in " ".join(out.split()), err
    code, out, err = cli([*eight_b, "--json"])
    assert "torchtitan_config_recompute" not in json.loads(out)


def _evaluated(cli, *extra: str) -> int:
    args = ["plan", "--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", "64", "--json", *extra]
    code, out, err = cli(args)
    assert code == 0, err
    return int(json.loads(out)["evaluated"])


@pytest.mark.parametrize(
    "framework, searched",
    [
        ("torchtitan", "none,selective,full"),  # per-op SAC differs from none: searched (review 43 #4)
        ("megatron-core", "none,full"),  # core_attn under flash attention keeps what none keeps
    ],
)
def test_plans_default_recompute_search_holds_selective_where_it_differs_from_none(cli, framework, searched):
    asked = _evaluated(cli, "--framework", framework, "--recompute", searched)
    assert _evaluated(cli, "--framework", framework) == asked


def test_megatrons_selective_is_searched_where_recompute_modules_redo_more_than_the_attention_core(cli):
    base = ["--framework", "megatron-core", "--recompute-modules"]
    assert _evaluated(cli, *base, "core_attn") == _evaluated(cli, *base, "core_attn", "--recompute", "none,full")
    both = _evaluated(cli, *base, "core_attn,mlp")
    assert both == _evaluated(cli, *base, "core_attn,mlp", "--recompute", "none,selective,full")
