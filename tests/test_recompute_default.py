"""Without --recompute a plan takes the stack's own default (`default_recompute`,
`default_recompute_every`, presets/frameworks.yaml): MaxText's base.yml remat_policy 'full', Praxis's
SAVE_NOTHING, torchtitan main's per-op SelectiveAC (pytorch/torchtitan#2357), none elsewhere; a
framework file's every-N-th-layer default (torchtitan before #2357: every second layer checkpointed
whole, examples/frameworks/torchtitan-before-2357.yaml). An explicit --recompute always wins, the
header and the JSON say where the mode came from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from shardwise import presets
from shardwise.cli import cli as main
from shardwise.errors import SpecError
from shardwise.presets.stack_defaults import framework_recompute, framework_recompute_every, recompute_origin
from shardwise.requests import TrainingRequest
from shardwise.requests.training import PredictRequest

JOB = {"model": "llama3-8b", "system": "dgx-h100", "num_gpus": 8, "global_batch": 16}
# torchtitan before pytorch/torchtitan#2357: every second layer whole (`default_recompute_every: 2`)
BEFORE_2357 = str(Path(__file__).parents[1] / "examples" / "frameworks" / "torchtitan-before-2357.yaml")
# the stack's default when the user gives none: (recompute, layers of each chunk recomputed whole at pp 1)
EXPECTED = {
    "maxtext": ("full", 0),
    "paxml": ("full", 0),
    "torchtitan": ("selective", 0),  # main's per-op SelectiveAC
    "torchtitan-compile": ("selective", 0),
}


def _plan(framework: str, **fields: object):
    return TrainingRequest(**{**JOB, "framework": framework, **fields}).scenario().plan


@pytest.mark.parametrize("framework", sorted(presets.raw("frameworks")))
def test_each_framework_prices_its_own_default(framework):
    recompute, layers = EXPECTED.get(framework, ("none", 0))
    plan = _plan(framework)
    assert plan.recompute.label == recompute
    assert int(plan.recompute_layers) == layers


@pytest.mark.parametrize("framework", ["maxtext", "paxml", "torchtitan", "megatron-core"])
@pytest.mark.parametrize("given", ["none", "selective", "full"])
def test_an_explicit_recompute_wins(framework, given):
    plan = _plan(framework, recompute=given)
    assert plan.recompute.label == given
    assert int(plan.recompute_layers) == 0  # the every-N-th-layer default only without --recompute


def test_the_default_changes_the_price():
    """MaxText's default recomputes every layer: less activation memory and more compute than none."""
    default = PredictRequest(TrainingRequest(**JOB, framework="maxtext")).run()
    none = PredictRequest(TrainingRequest(**JOB, framework="maxtext", recompute="none")).run()
    assert float(default.estimate.memory.total_bytes) < float(none.estimate.memory.total_bytes)
    assert float(default.estimate.step_time_s) > float(none.estimate.step_time_s)


def test_torchtitan_prices_per_op_selective():
    """torchtitan main's trainer default (activation_checkpoint.py @b5bcd76c, SelectiveAC): the
    preset's `selective_policy: op`, no layer recomputed whole."""
    plan = _plan("torchtitan")
    assert (plan.recompute.label, plan.selective_policy, int(plan.recompute_layers)) == ("selective", "op", 0)
    assert framework_recompute_every("torchtitan") == 0 and framework_recompute_every("torchtitan-compile") == 0


def test_recompute_layers_given_keeps_the_stacks_mode():
    plan = _plan("torchtitan", recompute_layers=3)
    assert (plan.recompute.label, int(plan.recompute_layers)) == ("selective", 3)
    assert recompute_origin("torchtitan", None, 3) == "torchtitan's default; --recompute none to turn it off"
    plan = _plan(BEFORE_2357, recompute_layers=3)  # the file's every-second-layer default gives way
    assert (plan.recompute.label, int(plan.recompute_layers)) == ("none", 3)
    assert recompute_origin(BEFORE_2357, None, 3) == ""


def test_torchtitan_before_2357_as_a_framework_file():
    """Before pytorch/torchtitan#2357 the job config checkpointed every second layer whole: a
    framework file `like: torchtitan` prices it (llama3-8b's 32 layers: 16)."""
    plan = _plan(BEFORE_2357)
    assert (plan.recompute.label, int(plan.recompute_layers)) == ("none", 16)


def test_every_nth_layer_counts_the_layers_of_a_chunk():
    plan = _plan(BEFORE_2357, pp=2)  # 16 layers a stage: 8 of them
    assert int(plan.recompute_layers) == 8
    plan = _plan(BEFORE_2357, pp=2, vpp=2, global_batch=16)  # 8 a chunk: 4
    assert int(plan.recompute_layers) == 4


def test_the_words_say_where_it_came_from():
    assert recompute_origin("maxtext", None) == "maxtext's default; --recompute none to turn it off"
    assert recompute_origin("maxtext", "full") == ""
    assert recompute_origin("megatron-core", None) == ""
    assert "every second layer" in recompute_origin(BEFORE_2357, None)
    assert recompute_origin("torchtitan", None) == "torchtitan's default; --recompute none to turn it off"
    assert framework_recompute("deepspeed") == "none" and framework_recompute_every("deepspeed") == 0


def test_predict_header_and_json():
    args = ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--num-gpus", "8", "--global-batch", "16"]
    out = CliRunner().invoke(main, [*args, "--framework", "maxtext"])
    assert out.exit_code == 0, out.output
    header = " ".join(out.output.split())  # the console wraps the header
    assert "recompute=full (maxtext's default; --recompute none to turn it off)" in header
    out = CliRunner().invoke(main, [*args, "--framework", "maxtext", "--recompute", "none"])
    assert "recompute=none," in " ".join(out.output.split()) and "maxtext's default" not in out.output
    out = CliRunner().invoke(main, [*args, "--framework", "maxtext", "--json"])
    data = json.loads(out.stdout)
    assert data["scenario"]["plan"]["recompute"] == "full"
    assert data["recompute_source"] == "framework default"
    out = CliRunner().invoke(main, [*args, "--framework", "maxtext", "--recompute", "selective", "--json"])
    data = json.loads(out.stdout)
    assert (data["scenario"]["plan"]["recompute"], data["recompute_source"]) == ("selective", "--recompute")


def test_selective_policy_against_a_full_default_is_refused_with_its_origin():
    with pytest.raises(SpecError, match=r"--recompute full \(maxtext's default\)"):
        PredictRequest(TrainingRequest(**JOB, framework="maxtext", selective_policy="minimal"))


def test_the_command_line_of_a_request_leaves_the_default_out():
    req = TrainingRequest(**JOB, framework="maxtext")
    assert "--recompute" not in req.to_argv()
    assert TrainingRequest.from_argv(req.to_argv()).recompute is None


def test_calibration_blank_recompute_is_the_framework_default():
    from shardwise.calibration.run_request import training_request

    row = {"model": "llama3-8b", "system": "dgx-h100", "num_gpus": "8", "tp": "1", "pp": "1", "global_batch": "16"}
    blank = training_request({**row, "framework": "maxtext", "recompute": ""}, "row 1")
    assert blank.scenario().plan.recompute.label == "full"
    none = training_request({**row, "framework": "maxtext", "recompute": "none"}, "row 1")
    assert none.scenario().plan.recompute.label == "none"
    assert training_request({**row, "recompute": ""}, "row 1").scenario().plan.recompute.label == "none"


def test_a_bad_default_in_a_framework_file_is_one_line(tmp_path):
    path = tmp_path / "fw.yaml"
    path.write_text("name: mine\nlike: fsdp\ndefault_recompute: sometimes\n")
    with pytest.raises(SpecError, match="default_recompute: 'sometimes' is not allowed"):
        _plan(str(path))
    path.write_text("name: mine\nlike: maxtext\n")
    assert _plan(str(path)).recompute.label == "full"  # a file starting from maxtext keeps its default


MOE_JOB = {"model": "mixtral-8x7b", "system": "dgx-h100", "num_gpus": 16, "ep": 8, "global_batch": 32}


def test_torchtitan_on_a_mixture_of_experts_prices_per_op_selective():
    """torchtitan main's per-op default applies to a MoE as to a dense model: priced, no note."""
    result = PredictRequest(TrainingRequest(**MOE_JOB, framework="torchtitan")).run()
    plan = result.scenario.plan
    assert (plan.recompute.label, plan.selective_policy, int(plan.recompute_layers)) == ("selective", "op", 0)
    assert not any("not priced here" in n for n in result.notes)
    assert result.recompute_from == "torchtitan's default; --recompute none to turn it off"
    none = PredictRequest(TrainingRequest(**MOE_JOB, framework="torchtitan", recompute="none")).run()
    assert float(result.estimate.step_time_s) > float(none.estimate.step_time_s)  # the element-wise work again


def test_every_nth_layer_default_on_a_mixture_of_experts_says_it_is_not_priced():
    """Layers recomputed whole are priced for dense models only: a MoE under a file's every-N-th-layer
    default is priced without recomputation, and a note says so (the header claims nothing)."""
    result = PredictRequest(TrainingRequest(**MOE_JOB, framework=BEFORE_2357)).run()
    assert (result.scenario.plan.recompute.label, int(result.scenario.plan.recompute_layers)) == ("none", 0)
    assert any("one layer in 2 whole, not priced here" in n for n in result.notes)
    assert result.recompute_from == ""


@pytest.mark.parametrize("framework", [None, "torchtitan"])
def test_emit_torchtitan_prices_the_mode_its_launch_writes(framework):
    """torchtitan's launch names a config function, whose own activation_checkpoint the job runs
    (torchtitan main @b5bcd76c: llama3_8b SelectiveAC, per-op; main has no every-N-th-layer option
    since pytorch/torchtitan#2357): without --recompute, `--emit torchtitan` prices that mode, writes
    it, and says so in a note, the header and the JSON."""
    fields = {**JOB, **({"framework": framework} if framework else {})}
    result = PredictRequest(TrainingRequest(**fields), emit="torchtitan").run()
    plan = result.scenario.plan
    assert (plan.recompute.label, int(plan.recompute_layers)) == ("selective", 0)
    assert "activation-checkpoint:selective" in result.launch_text()
    assert any("llama3_8b's activation_checkpoint" in n for n in result.notes)
    assert result.as_dict()["recompute_source"] == "--emit torchtitan"
    assert "torchtitan launch runs it" in result.recompute_from


def test_emit_torchtitan_takes_each_config_functions_own_mode():
    """llama3_70b's config function sets FullAC: priced and written full; --recompute still wins."""
    job = {"model": "llama3-70b", "system": "dgx-h100", "nodes": 4, "global_batch": 64, "framework": "torchtitan"}
    result = PredictRequest(TrainingRequest(**job), emit="torchtitan").run()
    assert result.scenario.plan.recompute.label == "full"
    assert "activation-checkpoint:full" in result.launch_text()
    given = PredictRequest(TrainingRequest(**job, recompute="selective", tp=8), emit="torchtitan").run()
    assert given.scenario.plan.recompute.label == "selective"
    assert "activation-checkpoint:selective" in given.launch_text()
    assert given.as_dict()["recompute_source"] == "--recompute"
    assert not any("activation_checkpoint (" in n for n in given.notes)


def test_emit_megatron_keeps_the_stacks_none_without_a_note():
    result = PredictRequest(TrainingRequest(**JOB, tp=2, pp=2), emit="megatron").run()
    assert result.scenario.plan.recompute.label == "none"
    assert not any("recompute" in n for n in result.notes)
    assert result.as_dict()["recompute_source"] == "--emit megatron"


def test_resolve_recompute_is_the_one_reading():
    """predict's plan, its JSON source and crossover's count come from `resolve_recompute`."""
    from shardwise.presets.stack_defaults import resolve_recompute

    assert (resolve_recompute("torchtitan").mode, resolve_recompute("torchtitan").every) == ("selective", 0)
    choice = resolve_recompute(BEFORE_2357)
    assert (choice.mode, choice.every, choice.source) == ("none", 2, "framework default")
    assert choice.layers(32, 2, 2) == 4 and choice.layers(32, 1, moe=True) == 0
    assert resolve_recompute("torchtitan", "full").as_dict() == {
        "recompute": "full",
        "recompute_every": 0,
        "recompute_source": "--recompute",
    }
    assert resolve_recompute("torchtitan", None, 3).source == "--recompute-layers"
    assert resolve_recompute("maxtext").words() == "full (maxtext's default)"
    assert resolve_recompute("torchtitan").words() == "selective (torchtitan's default)"
    assert resolve_recompute(BEFORE_2357).words() == "every second layer whole (torchtitan-before-2357's default)"
