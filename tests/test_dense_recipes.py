"""The recipe settings of Megatron-Bridge's published dense runs that their tables do not print
(`analyses.public_dense_recipes`): which rows they reach, and that the rows' plans carry them."""

from __future__ import annotations

import pytest


def _rows() -> dict[str, dict[str, str]]:
    from shardwise.analyses import public_validation as pv

    return {r["id"]: r for r in pv.raw_rows()}


def _find(rows, **want):
    out = [r for r in rows.values() if all(r.get(k) == v for k, v in want.items())]
    out = [r for r in out if r["source"].startswith("GitHub NVIDIA-NeMo/Megatron-Bridge docs/performance-summary")]
    assert out, want
    return out


def test_nvfp4_runs_leave_the_tp_overlap_off_and_405b_gb200_the_param_gather_from_26_04_01():
    from shardwise.analyses.public_dense_recipes import plan_settings

    rows = _rows()
    for r in _find(rows, precision="nvfp4", model="llama3-405b"):
        s = plan_settings(r)
        assert s["tp_comm_overlap"] is False
        late = r["system"] == "gb200-nvl72" and r["framework_version"] in ("26.04.01", "26.06")
        assert s.get("overlap_param_gather", True) is (not late)
    for r in _find(rows, precision="fp8", model="llama3-405b"):  # FP8 keeps the preset's overlaps
        assert "tp_comm_overlap" not in plan_settings(r)


def test_cuda_graphs_where_the_recipe_layout_is_the_rows():
    from shardwise.analyses.public_dense_recipes import plan_settings

    rows = _rows()
    for r in _find(rows, model="llama3-8b", framework_version="25.11"):
        s = plan_settings(r)
        if r["system"] in ("dgx-b200", "gb200-nvl72"):
            assert s == {"cuda_graph_scope": "full_iteration"}
        elif r["system"] == "gb300-nvl72":  # the recipe's micro-batch 4 is not the row's 2
            assert s == {}
    sft = _find(rows, model="llama3-70b", framework_version="26.06", workload="sft")
    assert all(plan_settings(r) == {"cuda_graph_scope": "mlp"} for r in sft)
    lora = _find(rows, model="llama3-70b", framework_version="26.06", workload="lora")
    assert not any(plan_settings(r).get("cuda_graph_scope") for r in lora)


def test_h100_8b_fp8_25_11_recomputes_five_whole_layers_in_its_plan():
    from shardwise.analyses import public_validation as pv
    from shardwise.specs.plan import Recompute

    (row,) = _find(_rows(), model="llama3-8b", framework_version="25.11", system="dgx-h100", precision="fp8")
    plan = pv.scenario_for(pv.public_moe.resolved(row)).plan
    assert int(plan.recompute_layers) == 5
    assert plan.recompute == Recompute.NONE


@pytest.mark.parametrize("source", ["GitHub NVIDIA/dgxc-benchmarking", "docs.nvidia.com/nemo-framework"])
def test_other_sources_are_untouched(source):
    from shardwise.analyses.public_dense_recipes import plan_settings

    rows = [r for r in _rows().values() if r["source"].startswith(source)]
    assert rows
    assert not any(plan_settings(r) for r in rows)


def test_the_nvfp4_plan_prices_its_tp_collectives_exposed():
    from shardwise.analyses import public_validation as pv
    from shardwise.engines.training import estimate_training_step

    (row,) = _find(_rows(), model="llama3-405b", framework_version="26.04", system="gb300-nvl72", precision="nvfp4")
    scn = pv.scenario_for(pv.public_moe.resolved(row))
    assert not bool(scn.plan.tp_comm_overlap)
    hidden = type(scn)(scn.model, scn.cluster, scn.plan.with_(tp_comm_overlap=True))
    exposed, overlapped = estimate_training_step(scn), estimate_training_step(hidden)
    assert float(exposed.breakdown.tp_comm_s) > float(overlapped.breakdown.tp_comm_s)
