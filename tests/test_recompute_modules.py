"""Megatron-Core's per-module selective recomputation (`Plan.recompute_modules`): what each
module redoes, how bad input is refused, and what `--emit megatron` writes."""

from __future__ import annotations

import dataclasses

import pytest

from shardwise import presets
from shardwise.emit import emit
from shardwise.engines.training import estimate_training_step
from shardwise.errors import SpecError
from shardwise.specs import Plan, Scenario


def _scn(model: str = "qwen3-30b-a3b", system: str = "dgx-h100", nodes: int = 1, **plan) -> Scenario:
    base = dict(tp=1, pp=1, dp=8, ep=8, etp=1, global_batch=64, micro_batch=1)
    return Scenario(presets.model(model), presets.system(system, nodes=nodes), Plan(**{**base, **plan}))


def _step(scn: Scenario, recompute: str = "selective", modules: tuple[str, ...] = ()):
    plan = dataclasses.replace(scn.plan, recompute=recompute, recompute_modules=modules)
    return estimate_training_step(Scenario(scn.model, scn.cluster, plan))


@pytest.mark.parametrize(
    ("modules", "message"),
    [
        ("moe_actz", "recompute_modules 'moe_actz' is not allowed; choose from core_attn"),
        (("moe_act", "moe_act"), "names a module twice"),
        (42, "recompute_modules 42 is not allowed"),
    ],
)
def test_bad_module_lists_are_one_clear_error(modules, message):
    with pytest.raises(SpecError, match=message):
        Plan(recompute="selective", recompute_modules=modules)


def test_modules_need_selective_recomputation_and_megatrons_policy():
    with pytest.raises(SpecError, match="needs recompute='selective'"):
        Plan(recompute="full", recompute_modules="moe_act")
    with pytest.raises(SpecError, match="needs selective_policy 'attention'"):
        Plan(recompute="selective", recompute_modules="core_attn", selective_policy="op")
    assert Plan(recompute="selective", recompute_modules=" moe_act , layernorm").recompute_modules == (
        "moe_act",
        "layernorm",
    )


def test_core_attn_alone_is_megatrons_default_selective_recomputation():
    scn = _scn()
    default, core = _step(scn), _step(scn, modules=("core_attn",))
    assert float(core.step_time_s) == pytest.approx(float(default.step_time_s), rel=1e-12)


def test_each_module_adds_its_own_forward_and_nothing_else():
    scn = _scn()
    none = float(_step(scn, "none").step_time_s)
    act = float(_step(scn, modules=("moe_act",)).step_time_s)
    norm = float(_step(scn, modules=("layernorm",)).step_time_s)
    both = float(_step(scn, modules=("moe_act", "layernorm")).step_time_s)
    assert none < act and none < norm
    # independent modules add up (each is its own forward kernel)
    assert both - none == pytest.approx((act - none) + (norm - none), rel=1e-9)
    # an MLP module of a dense layer: Qwen3-30B-A3B has none, so "mlp" redoes nothing
    assert float(_step(scn, modules=("mlp",)).step_time_s) == pytest.approx(none, rel=1e-12)


def test_layernorm_redoes_nothing_where_transformer_engine_fuses_the_norms():
    """A dense Llama layer's norms are fused into its QKV and MLP-up linears (IdentityOp norms)."""
    scn = _scn("llama3-8b", tp=1, pp=1, dp=8, ep=1, etp=0)
    none = float(_step(scn, "none").step_time_s)
    assert float(_step(scn, modules=("layernorm",)).step_time_s) == pytest.approx(none, rel=1e-12)
    assert float(_step(scn, modules=("mlp",)).step_time_s) > none


def test_the_whole_moe_module_reruns_its_all_to_alls():
    scn = _scn()
    act, moe = _step(scn, modules=("moe_act",)), _step(scn, modules=("moe",))
    assert float(moe.breakdown.ep_comm_s) > float(act.breakdown.ep_comm_s)
    assert float(moe.step_time_s) > float(act.step_time_s)
    # moe covers moe_act: naming both is the same as moe alone
    both = _step(scn, modules=("moe", "moe_act"))
    assert float(both.step_time_s) == pytest.approx(float(moe.step_time_s), rel=1e-12)


def test_mla_up_projections_are_recomputed_only_with_latent_attention():
    mla = _scn("moonlight-16b", tp=2, dp=4, ep=8, global_batch=8, sequence_parallel=True)
    assert float(_step(mla, modules=("mla_up_proj",)).step_time_s) > float(_step(mla, "none").step_time_s)
    gqa = _scn()
    assert float(_step(gqa, modules=("mla_up_proj",)).step_time_s) == pytest.approx(
        float(_step(gqa, "none").step_time_s), rel=1e-12
    )


def test_emit_megatron_writes_the_modules_and_torchtitan_refuses_them():
    scn = _scn(recompute="selective", recompute_modules=("moe_act", "layernorm"))
    flags = [" ".join(group) for group in emit(scn, "megatron").args]
    assert "--recompute-granularity selective --recompute-modules moe_act layernorm" in flags
    dense = Scenario(
        presets.model("llama3-8b"),
        presets.system("dgx-h100"),
        Plan(dp=8, global_batch=32, recompute="selective", recompute_modules="core_attn"),
    )
    with pytest.raises(Exception, match="--recompute-modules names Megatron-Core's modules"):
        emit(dense, "torchtitan")


def test_the_command_line_refuses_a_bad_module_in_one_line(cli):
    """In the flag's words: the request checks the names when built (`requests.field_names`)."""
    args = ["predict", "--model", "qwen3-30b-a3b", "--system", "dgx-h100", "--ep", "8", "--global-batch", "64"]
    code, out, err = cli([*args, "--recompute", "selective", "--recompute-modules", "moe_act,bogus"])
    assert code == 2 and "Traceback" not in err
    assert err.strip().splitlines() == [
        "error: --recompute-modules: 'bogus' is not allowed; choose from core_attn, moe_act, layernorm, "
        "mla_up_proj, mlp, moe, shared_experts"
    ]
    code, out, _ = cli([*args, "--recompute", "selective", "--recompute-modules", "moe_act,layernorm"])
    assert code == 0 and "recompute=selective (moe_act, layernorm)" in out


def test_public_runs_take_their_recipes_modules():
    """Megatron-Bridge's GPT-OSS on GB200 recomputes layernorm and moe_act (26.04 recipe); dgxc's
    DeepSeek-V3 launch.sh passes core_attn on GB200; a row whose column names modules keeps them."""
    from shardwise.analyses import public_moe
    from shardwise.analyses import public_validation as pv

    rows = {r["id"]: public_moe.resolved(r) for r in pv.raw_rows()}
    bridge = next(
        r
        for r in rows.values()
        if r["model"] == "gpt-oss-120b"
        and r["system"] == "gb200-nvl72"
        and r["framework_version"] == "26.04"
        and public_moe.BRIDGE_SUMMARIES in r["source"]
    )
    assert pv.request_for(bridge).scenario().plan.recompute_modules == ("layernorm", "moe_act")
    dgxc = next(r for r in rows.values() if public_moe.DGXC_DEEPSEEK in r["source"] and r["system"] == "gb200-nvl72")
    assert pv.request_for(dgxc).scenario().plan.recompute_modules == ("core_attn",)
    study = next(r for r in rows.values() if r["recompute"] == "selective:mla_up_proj,mlp")
    assert pv.request_for(study).scenario().plan.recompute_modules == ("mla_up_proj", "mlp")


def test_the_planner_searches_with_modules_and_names_its_plans():
    """`plan --recompute-modules`: the array of plans applies the modules to its selective ones;
    each ranked plan is then a Plan of its own, which carries them only where it is selective
    (a best plan without recomputation was refused as recompute_modules needing 'selective')."""
    from shardwise.analyses.plan_space import SearchSpace
    from shardwise.analyses.planner import search

    space = SearchSpace(
        tp=(1, 2), pp=(1,), cp=(1,), micro_batch=(1,), recompute=("none", "selective"), zero_stage=(1,),
        execution={"recompute_modules": ("core_attn", "mlp")},
    )  # fmt: skip
    found = search(presets.model("llama3-8b"), presets.system("dgx-h100"), 64, space)
    plans = [found.plan(int(i)) for i in found.ranked()]
    labels = {p.recompute.label for p in plans}
    assert labels == {"none", "selective"}
    for p in plans:
        assert p.recompute_modules == (("core_attn", "mlp") if p.recompute.label == "selective" else ())


def test_a_recomputed_mlp_reruns_its_own_tp_collectives_not_attentions_context_ring():
    """`mlp` reruns the MLP's forward TP collectives: at tp = 1 there are none, however much of
    the attention's context-parallel ring is exposed (it was half the layer's exposed TP and CP)."""
    model, cluster = presets.model("llama3-8b"), presets.system("dgx-a100", nodes=2)
    comm = {}
    for modules in (("core_attn",), ("core_attn", "mlp")):
        plan = Plan(tp=1, cp=16, dp=1, global_batch=8, recompute="selective", recompute_modules=modules)
        comm[modules] = estimate_training_step(Scenario(model, cluster, plan)).breakdown.tp_comm_s
    assert comm[("core_attn",)] > 0.1  # the ring's exposed steps
    assert comm[("core_attn", "mlp")] == comm[("core_attn",)]


def test_plan_rows_commands_and_json_carry_the_modules_where_they_apply(cli):
    """Each row's `predict` command passes --recompute-modules only where the row is selective (a
    row without recomputation named them, and its command was refused); `predict --json` names them."""
    import json
    import shlex

    args = ["plan", "--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", "64", "--tp", "1", "--pp", "1"]
    code, out, err = cli(
        [*args, "--recompute", "none,selective", "--recompute-modules", "core_attn,mlp", "--top", "100", "--json"]
    )
    assert code == 0, err
    rows = json.loads(out)["plans"]
    assert {r["recompute"] for r in rows} == {"none", "selective"}
    for r in rows:
        assert ("--recompute-modules core_attn,mlp" in r["command"]) == (r["recompute"] == "selective")
    plain = next(r for r in rows if r["recompute"] == "none")
    code, out, err = cli([*shlex.split(plain["command"])[1:], "--json"])
    assert code == 0, err
    selective = next(r for r in rows if r["recompute"] == "selective")
    code, out, err = cli([*shlex.split(selective["command"])[1:], "--mtp-layers", "1", "--json"])
    assert code == 0, err
    plan = json.loads(out)["scenario"]["plan"]
    assert (plan["recompute_modules"], plan["mtp_layers"], plan["fp8_recipe"]) == (["core_attn", "mlp"], 1, "te")
