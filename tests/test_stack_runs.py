"""What each stack runs (its preset's `schedules`, `zero_stages`, `pipeline_zero_stages`,
`model_parallel`) bounds what `plan` searches and recommends under it (review 49 #1): MaxText and
Paxml run GPipe under a pipeline and one micro-batch at a time without one (`pipeline_schedule`);
Colossal-AI's HybridParallelPlugin runs ZeRO 0-2, ZeRO <= 1 under a pipeline."""

from __future__ import annotations

import numpy as np
import pytest

from shardwise import presets
from shardwise.analyses.plan_space import SCHEDULE_NAMES
from shardwise.errors import SpecError
from shardwise.requests import TrainingRequest
from shardwise.requests.plan import PlanRequest, row_request
from shardwise.requests.training import PredictRequest
from shardwise.specs import Schedule

# Llama 3 8B at 8K tokens on two DGX H100: every pp from 1 to 16 and cp are searched; --zero-with-pp
# lets the search's own limit (ZeRO-2/3 with a pipeline) aside, so only the stack's remain
SMALL = "--model llama3-8b --system dgx-h100 --nodes 2 --seq-len 8192 --global-batch 32 --max-micro-batch 2"


@pytest.mark.parametrize("stack", presets.names("frameworks"))
def test_plan_under_each_stack_searches_only_what_it_runs(stack):
    data = presets.raw("frameworks")[stack]
    search = PlanRequest.from_argv(f"{SMALL} --framework {stack} --zero-with-pp").search()
    cols = search.columns
    pp, dp, cp, zero = (np.asarray(cols[k]) for k in ("pp", "dp", "cp", "zero_stage"))
    names = np.array([SCHEDULE_NAMES[int(s)] for s in cols["schedule"]])
    piped, sharded = pp > 1, dp * cp > 1
    axes = data.get("model_parallel")
    for axis in ("tp", "pp", "cp"):
        if axes is not None and axis not in axes:
            assert set(np.asarray(cols[axis]).tolist()) == {1}, axis
    if axes is None or "pp" in axes:
        assert piped.any()  # the case searches pipelines, so the schedules below are tested
    if "schedules" in data:
        assert set(names[piped].tolist()) <= set(data["schedules"])
    if "zero_stages" in data:
        assert set(zero[sharded].tolist()) <= set(data["zero_stages"])
    if "pipeline_zero_stages" in data:
        assert set(zero[sharded & piped].tolist()) <= set(data["pipeline_zero_stages"])
    best = search.ranked(1)
    if best.size and int(pp[best[0]]) > 1 and "schedules" in data:
        assert names[best[0]] in data["schedules"]


def _predict(framework: str, **fields: object):
    job = {"model": "llama3-8b", "system": "dgx-h100", "num_gpus": 8, "global_batch": 64, "micro_batch": 1}
    return PredictRequest(TrainingRequest(**{**job, "framework": framework, **fields})).run()


@pytest.mark.parametrize("stack", ["maxtext", "paxml"])
def test_a_scan_stack_runs_gpipe_under_a_pipeline_and_one_micro_batch_at_a_time_without(stack):
    """pp 1: gradient accumulation is a scan of one micro-batch's forward and backward, priced as
    before (1F1B's order, not nanotron's all-forward-all-backward); pp > 1: the pipeline loop
    differentiated whole, GPipe, the default where no --schedule is given."""
    alone = _predict(stack, tp=1, pp=1)
    assert alone.scenario.plan.num_micro_batches > 1 and int(alone.scenario.plan.schedule) == Schedule.ONE_F_ONE_B
    as_before = _predict(stack, tp=1, pp=1, schedule="1f1b")
    assert float(alone.estimate.step_time_s) == float(as_before.estimate.step_time_s)
    assert float(alone.estimate.memory.total_bytes) == float(as_before.estimate.memory.total_bytes)
    afab = _predict(stack, tp=1, pp=1, schedule="gpipe")  # what a stack-wide `schedule: gpipe` would price
    assert float(afab.estimate.memory.total_bytes) > float(alone.estimate.memory.total_bytes)
    piped, gpipe = _predict(stack, tp=1, pp=2), _predict(stack, tp=1, pp=2, schedule="gpipe")
    assert int(piped.scenario.plan.schedule) == Schedule.GPIPE
    assert float(piped.estimate.step_time_s) == float(gpipe.estimate.step_time_s)
    notes = " ".join(_predict(stack, tp=1, pp=2, schedule="1f1b").notes)
    assert "runs the gpipe pipeline schedule, not 1f1b" in notes


def test_a_planned_row_of_a_scan_stack_leaves_its_default_schedule_out_of_the_command():
    request = PlanRequest.from_argv(f"{SMALL} --framework maxtext --pp 2 --cp 1")
    search = request.search()
    row = row_request(search, int(search.ranked(1)[0]), request.training)
    assert row.training.schedule is None and "--schedule" not in row.command()
    assert int(row.run().scenario.plan.schedule) == Schedule.GPIPE


def test_colossalai_runs_zero_up_to_2_and_up_to_1_under_a_pipeline(cli):
    """HybridParallelPlugin.__init__ (hpcaitech/ColossalAI 0094bc0a): assert zero_stage in (0, 1, 2),
    and zero_stage <= 1 when pp_size > 1; the planner keeps to both, --zero-with-pp or not, and says
    why a ZeRO-2 pipeline was not searched; predict notes one asked for."""
    from shardwise.analyses.plan_explain import excluded_by
    from shardwise.presets.stack_defaults import framework_pipeline_zero_stages, framework_zero_stages

    assert framework_zero_stages("colossalai") == (0, 1, 2)
    assert framework_pipeline_zero_stages("colossalai") == (0, 1)
    search = PlanRequest.from_argv(f"{SMALL} --framework colossalai --zero-with-pp --cp 1").search()
    cols = search.columns
    pp, zero, dp = (np.asarray(cols[k]) for k in ("pp", "zero_stage", "dp"))
    assert 2 in set(zero[(pp == 1) & (dp > 1)].tolist()) and 3 not in set(zero.tolist())
    assert set(zero[pp > 1].tolist()) <= {0, 1}
    plan = search.scenario(int(np.flatnonzero((pp == 2) & (dp > 1))[0])).plan.with_(zero_stage=2)
    assert excluded_by(search, plan) == "colossalai runs ZeRO 0, 1 under a pipeline only"
    base = ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--nodes", "2", "--global-batch", "64"]
    code, _out, err = cli([*base, "--framework", "colossalai", "--pp", "2", "--zero", "2"])
    assert code == 0 and "colossalai runs ZeRO 0, 1 under a pipeline, not ZeRO-2; priced as asked" in err
    code, _out, err = cli([*base, "--framework", "colossalai", "--pp", "1", "--zero", "2"])
    assert code == 0 and "priced as asked" not in err


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"pipeline_schedule": "interleaved"}, "pipeline_schedule: 'interleaved' is not allowed; choose gpipe"),
        ({"schedules": ["gpipe"]}, "schedule: 1f1b is not among its schedules (gpipe); give one of them (1f1b runs"),
        ({"schedules": ["gpipe"], "pipeline_schedule": "1f1b"}, "pipeline_schedule: 1f1b is not among its schedules"),
        ({"pipeline_zero_stages": [4]}, "pipeline_zero_stages: [4] is not allowed; give a list of 0, 1, 2 or 3"),
        ({"zero_stages": [0, 1], "zero_stage": 1, "pipeline_zero_stages": [2]}, "pipeline_zero_stages: [2] is not"),
    ],
)
def test_a_preset_states_its_pipeline_defaults_within_what_it_runs(fields, message):
    from shardwise.presets.framework_fields import _framework_from_dict

    data = {**presets.raw("frameworks")["megatron-core"], **fields}
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        _framework_from_dict("mine", data)
    _framework_from_dict("mine", {**data, "schedules": ["gpipe"], "pipeline_schedule": "gpipe",
                                  "pipeline_zero_stages": [0], "zero_stages": [0, 1], "zero_stage": 1})  # fmt: skip


def test_a_neighbour_that_starts_a_pipeline_takes_the_stacks_schedule_there():
    """The best plan's pp 1 is stored as 1F1B (no schedule): its pp = 2 neighbour under MaxText was
    priced as 1F1B and listed as "not runnable on maxtext"; it takes MaxText's GPipe now."""
    from shardwise.analyses.plan_explain import alternatives

    search = PlanRequest.from_argv(f"{SMALL} --framework maxtext --cp 1 --tp 1,2").search()
    best = int(search.ranked(1)[0])
    assert int(search.scenario(best).plan.pp) == 1
    piped = [a for a in alternatives(search, best) if "pp=" in a.change]
    assert piped and not any(a.framework_cannot for a in piped), [(a.change, a.excluded) for a in piped]


def test_nothing_fits_suggests_zero_3_with_a_pipeline_only_where_the_stack_runs_it(cli):
    """DeepSpeed's PipelineEngine runs ZeRO <= 1 (its `pipeline_zero_stages`): where nothing fits,
    --zero-with-pp is no lever there, ZeRO-3 without a pipeline is already searched."""
    base = ["plan", "--model", "llama3.1-405b", "--system", "dgx-h100", "--nodes", "2", "--global-batch", "64"]
    code, _out, err = cli([*base, "--framework", "deepspeed"])
    assert code != 0 and "ZeRO-3" not in err and "less --memory-headroom" in err
    code, _out, err = cli([*base, "--framework", "deepspeed", "--zero", "1"])
    assert code != 0 and "ZeRO-3," in err and "--zero-with-pp" not in err
    code, _out, err = cli([*base, "--framework", "megatron-core"])
    assert code != 0 and "ZeRO-3 (--zero-with-pp to combine it with a pipeline)" in err


def test_a_file_like_maxtext_with_its_own_schedules_drops_maxtexts_pipeline_default(tmp_path, cli):
    """Review 53 #3: `like: maxtext` with `schedules: [1f1b]` ran into the inherited
    `pipeline_schedule: gpipe` the user never wrote; now its own list is priced, and a `schedule:`
    outside the inherited list is refused in one line that names the field."""
    own = tmp_path / "mymax.yaml"
    own.write_text("name: mymax\nlike: maxtext\nschedules: [1f1b]\n")
    args = "predict --model llama3-8b --system dgx-a100 --nodes 2 --tp 2 --pp 2 --global-batch 64 --framework"
    code, out, _ = cli([*args.split(), str(own)])
    assert code == 0 and "1f1b" in out and "gpipe" not in out.split("plan:")[1][:40]
    bad = tmp_path / "mymax3.yaml"
    bad.write_text("name: mymax3\nlike: maxtext\nschedule: 1f1b\n")
    code, _, err = cli([*args.split(), str(bad)])
    assert code == 2 and "schedule: 1f1b is not among its schedules (gpipe)" in err
