"""Multi-token prediction (`Plan.mtp_layers`, `engines.mtp`) and the recipe layouts that place it
(`analyses.public_moe`)."""

from __future__ import annotations

import dataclasses

import pytest

from shardwise import presets
from shardwise.analyses import public_moe
from shardwise.emit import emit
from shardwise.engines.simulated import simulate_training_step
from shardwise.engines.training import estimate_training_step
from shardwise.engines.training_stages import micro_batch_stages
from shardwise.errors import SpecError
from shardwise.specs import Plan, Scenario


def _scn(mtp: int = 0, model: str = "deepseek-v3", **plan) -> Scenario:
    base = dict(tp=1, pp=4, dp=64, ep=64, global_batch=512, precision="mxfp8", mtp_layers=mtp)
    return Scenario(presets.model(model), presets.system("dgx-b200", nodes=32), Plan(**{**base, **plan}))


def test_mtp_modules_load_only_the_last_stage():
    (first0, middle0, last0, _), _ = micro_batch_stages(_scn(0))
    (first1, middle1, last1, _), _ = micro_batch_stages(_scn(1))
    assert float(first1.total_s) == pytest.approx(float(first0.total_s), rel=1e-12)
    assert float(middle1.total_s) == pytest.approx(float(middle0.total_s), rel=1e-12)
    added = float(last1.total_s - last0.total_s)
    # at least one more MoE layer and the output layer again (the last stage's own: last0 - its layers)
    one_layer = float(middle0.total_s) / 15  # the fullest middle stage holds 16 of 61, 15 of them MoE
    assert added > 0.9 * one_layer
    (_, _, last2, _), _ = micro_batch_stages(_scn(2))
    assert float(last2.total_s - last0.total_s) == pytest.approx(2 * added, rel=1e-9)


def test_the_simulator_prices_mtp_as_the_closed_form_does():
    for mtp in (0, 1):
        for scn in (_scn(mtp), _scn(mtp, model="llama3-8b", pp=2, dp=128, ep=1, global_batch=512, precision="bf16")):
            closed = float(estimate_training_step(scn).step_time_s)
            simulated = float(simulate_training_step(scn, records=False).estimate.step_time_s)
            assert simulated == pytest.approx(closed, rel=0.01)


def test_a_negative_count_is_refused():
    with pytest.raises(SpecError, match="plan: mtp_layers"):
        Plan(mtp_layers=-1)


def test_megatron_layouts_unroll_to_chunks():
    assert public_moe.layout_chunks("Et*4|(t*4|)*14tmL") == [4] * 15 + [1]
    assert public_moe.layout_chunks("Et|(tt|)*30mL") == [1] + [2] * 30 + [0]
    assert public_moe.layout_chunks("Et*16|t*16|t*16|t*13mL") == [16, 16, 16, 13]


def test_a_bridge_deepseek_row_takes_its_recipe_layout_and_one_mtp_module():
    row = {
        "model": "deepseek-v3",
        "system": "gb200-nvl72",
        "precision": "mxfp8",
        "framework_version": "26.04",
        "source": public_moe.BRIDGE_SUMMARIES,
        "pp": "4",
        "layers": "61",
    }
    # "Et*4|(t*4|)*14tmL" on 4 stages: chunks s, s + 4, ...: 16, 16, 16, 13
    assert public_moe.stage_layers(row) == (16, 16, 16, 13)
    assert public_moe.mtp_layers(row) == 1
    unknown = {**row, "framework_version": "26.08"}  # no recipe of this layout: neither applied
    assert public_moe.stage_layers(unknown) is None and public_moe.mtp_layers(unknown) == 0


def test_emit_megatron_places_the_modules_before_the_loss():
    scn = _scn(1, first_stage_layers=16, last_stage_layers=13)
    args = {group[0]: list(group[1:]) for group in emit(scn, "megatron").args}
    assert args["--mtp-num-layers"] == ["1"]
    layout = args["--pipeline-model-parallel-layout"][0]
    assert layout.endswith("t*13mL") and layout.startswith("Et*16")
    even = dataclasses.replace(scn.plan, first_stage_layers=0, last_stage_layers=0)
    assert "--mtp-num-layers" in {g[0] for g in emit(Scenario(scn.model, scn.cluster, even), "megatron").args}
