"""A framework described in a YAML file (`--framework FILE`) priced end to end: its fields, or a
built-in's it starts from (`like:`), its memory, and its interval (a stack without published runs)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from shardwise import presets
from shardwise.calibration.spreads import uncalibrated_log_sd
from shardwise.errors import SpecError
from shardwise.presets.framework_fields import NOT_INHERITED
from shardwise.requests import TrainingRequest
from shardwise.requests.plan import PlanRequest
from shardwise.requests.training import PredictRequest

JOB = {"model": "llama3-8b", "system": "dgx-h100", "num_gpus": 8, "global_batch": 16}


def _write(tmp_path, text: str, name: str = "fw.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _copy(builtin: str, like: bool) -> str:
    """Every field of the built-in preset, as a file would state them (its own name)."""
    import yaml

    fields = {k: v for k, v in presets.raw("frameworks")[builtin].items() if k not in NOT_INHERITED}
    return yaml.safe_dump({"name": f"my-{builtin}", **fields, **({"like": builtin} if like else {})})


def _predict(framework: str, **fields: object):
    return PredictRequest(TrainingRequest(**{**JOB, "framework": framework, **fields})).run()


def _same(a, b) -> None:
    assert float(a.estimate.step_time_s) == float(b.estimate.step_time_s)
    assert float(a.estimate.memory.total_bytes) == float(b.estimate.memory.total_bytes)


@pytest.mark.parametrize("builtin", ["fsdp", "nanotron", "megatron-core", "deepspeed"])
@pytest.mark.parametrize("tp", [1, 2])
def test_a_file_copying_a_builtin_prices_as_the_builtin(builtin, tp, tmp_path):
    """A file that starts from a built-in (`like:`), with its fields copied or left out, gives its
    step time and memory; only the label and the interval (no published runs of the file) differ."""
    ref = _predict(builtin, tp=tp)
    copied = _predict(_write(tmp_path, _copy(builtin, like=True), "copied.yaml"), tp=tp)
    short = _predict(_write(tmp_path, f"name: short-{builtin}\nlike: {builtin}\n", "short.yaml"), tp=tp)
    for got in (copied, short):
        _same(got, ref)
        assert got.scenario.plan.framework != builtin
        assert got.scenario.plan.memory_stack == builtin


def test_a_file_without_like_has_its_fields_times_and_megatron_cores_memory(tmp_path):
    """Without `like:` the file's stated fields give the built-in's step time; what no field says
    (the stack's memory entry) is Megatron-Core's, as for any label without one."""
    fsdp, mine = _predict("fsdp"), _predict(_write(tmp_path, _copy("fsdp", like=False)))
    assert float(mine.estimate.step_time_s) == float(fsdp.estimate.step_time_s)
    assert mine.scenario.plan.memory_stack == "" and mine.scenario.plan.memory_stack_key == "my-fsdp"
    megatron_memory = presets.framework("megatron-core")  # the memory of a Megatron-Core-like label
    assert megatron_memory["framework"] == "megatron-core"
    # FSDP keeps fp32 shards (no 16-bit copy beside them); Megatron-Core's entry does not
    assert float(mine.estimate.memory.total_bytes) != float(fsdp.estimate.memory.total_bytes)


def test_the_host_time_per_kernel_and_the_zero_stage_move_the_prediction_the_right_way(tmp_path):
    slow = "name: slow-host\nlike: fsdp\nhost_kernel: 200us\n"
    fast = "name: fast-host\nlike: fsdp\nhost_kernel: 1us\n"
    job = {"micro_batch": 1, "seq_len": 512}
    t_slow = _predict(_write(tmp_path, slow, "slow.yaml"), **job).step_time_s
    t_base = _predict("fsdp", **job).step_time_s  # 10 us
    t_fast = _predict(_write(tmp_path, fast, "fast.yaml"), **job).step_time_s
    assert t_slow > t_base >= t_fast
    zero0 = _predict(_write(tmp_path, "name: z0\nlike: fsdp\nzero_stage: 0\n", "z0.yaml"))
    zero3 = _predict(_write(tmp_path, "name: z3\nlike: fsdp\nzero_stage: 3\n", "z3.yaml"))
    assert int(zero0.scenario.plan.zero_stage) == 0 and int(zero3.scenario.plan.zero_stage) == 3
    assert float(zero3.estimate.memory.total_bytes) < float(zero0.estimate.memory.total_bytes)
    # ZeRO-3 gathers the weights (data-parallel traffic up) and steps an eighth of the optimizer
    b0, b3 = zero0.estimate.breakdown, zero3.estimate.breakdown
    assert float(b3.dp_comm_s) > float(b0.dp_comm_s) and float(b3.optimizer_s) < float(b0.optimizer_s) / 4
    # the same file's stage given on the command line: the flag wins over the file, as over a preset
    flag = _predict(_write(tmp_path, "name: z0\nlike: fsdp\nzero_stage: 0\n", "z0.yaml"), zero=3)
    assert flag.step_time_s == zero3.step_time_s


def test_a_files_interval_is_the_no_data_one_and_says_so(tmp_path):
    """The runs behind a built-in's interval are not the file's: a file's stack, `like:` a built-in
    or not, has the interval of a stack without published runs (`spreads.NO_DATA_LOG_SD`)."""
    from shardwise.calibration.intervals import Z80

    sd = uncalibrated_log_sd("h100-sxm5-80gb", "no-such-stack")  # a stack without published runs
    assert sd > uncalibrated_log_sd("h100-sxm5-80gb", "megatron-core")
    for text in ("name: my-stack\nlike: megatron-core\n", _copy("megatron-core", like=False)):
        got = _predict(_write(tmp_path, text))
        assert got.step_time_s_high / got.step_time_s == pytest.approx(math.exp(Z80 * sd), rel=1e-12)
        assert "no published runs of my-" in got.interval_basis


def test_the_planner_reads_a_files_defaults_through_its_like(tmp_path):
    """The planner's lookups (schedules, ZeRO stages, pipeline split, what it searches) read the file."""
    path = _write(tmp_path, "name: my-nanotron\nlike: nanotron\n")
    training = TrainingRequest(model="llama3-8b", system="dgx-h100", num_gpus=8, framework=path)
    space = PlanRequest(training, global_batch=16, tp=(2,), pp=(1,)).space(80e9)
    assert space.zero_stage == (0, 1)  # nanotron's zero_stages
    assert space.stack == path and space.execution["framework"] == "my-nanotron"
    # and the search runs with them: its plans are nanotron's ZeRO stages, priced as the built-in's
    rows = PlanRequest(training, global_batch=16, tp=(2,), pp=(1,)).run().rows
    same = (
        PlanRequest(
            TrainingRequest(model="llama3-8b", system="dgx-h100", num_gpus=8, framework="nanotron"),
            global_batch=16,
            tp=(2,),
            pp=(1,),
        )
        .run()
        .rows
    )
    assert rows and {r["zero_stage"] for r in rows} <= {0, 1}
    assert [r["step_time_s"] for r in rows] == [r["step_time_s"] for r in same]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name: a\nlike: no-such-stack\n", "like: 'no-such-stack' is not a built-in framework"),
        ("name: a\nlike: 3\n", "like: 3 is not a built-in framework"),
        ("name: a\nzero_stage: 1\n", "missing field(s) async_tp_grad"),
        ("name: a\nlike: fsdp\nhost_kernel: fast\n", "host_kernel"),
        ("name: a\nlike: fsdp\nzero: 1\n", "unknown field 'zero'"),
        ("name: fsdp\nlike: fsdp\n", "is the built-in framework's"),
        # its own default outside what it says it runs: refused when read (a note at predict time only)
        ("name: a\nlike: fsdp\nzero_stages: [0, 1]\n", "zero_stage: 3 is not among its zero_stages (0, 1)"),
        ("name: a\nlike: nanotron-defaults\nschedules: [1f1b]\n", "schedule: gpipe is not among its schedules"),
        # a stack that states no schedule runs 1f1b: Megatron-Core's preset states none
        ("name: a\nlike: megatron-core\nschedules: [gpipe]\n", "schedule: 1f1b is not among its schedules"),
        # no name: the file's name, fsdp.yaml's 'fsdp' (the error said "name: 'fsdp'", a field it lacks)
        ("like: fsdp\nhost_kernel: 20us\n", "states no name, so it takes its file's, 'fsdp', the built-in"),
    ],
)
def test_a_bad_framework_file_is_one_line_naming_the_file(text, message, tmp_path):
    path = _write(tmp_path, text, "fw.yaml" if text.startswith("name:") else "fsdp.yaml")
    with pytest.raises(SpecError) as excinfo:
        _predict(path)
    line = str(excinfo.value)
    assert "\n" not in line and line.startswith(f"{path}: ") and message in line, line
    if "missing" in message:
        assert "like: NAME" in line  # the way out: start from a built-in
    if "states no name" in message:
        assert "(name: my-fsdp)" in line  # the way out: a name of its own


def test_predict_and_presets_show_a_framework_file(tmp_path, cli):
    path = _write(tmp_path, "name: my-fsdp\nlike: fsdp\nhost_kernel: 20us\n")
    code, out, err = cli(
        ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", "16", "--framework", path]
    )
    assert code == 0, err
    words = " ".join(out.split())
    assert "framework: my-fsdp" in words and ", memory as fsdp's" in words and "no published runs of my-fsdp" in words
    code, out, err = cli(["presets", "show", path])
    assert code == 0, err
    assert "  like: fsdp\n" in out and "  host_kernel: 20us\n" in out  # the file's own, unmarked
    assert "  zero_stage: 3  (fsdp's)\n" in out  # taken from fsdp
    code, out, _ = cli(["presets", "show", path, "--json"])
    shown = json.loads(out)["frameworks"]
    assert shown["host_kernel_s"] == pytest.approx(20e-6) and "zero_stage" in shown["from_like"]
    assert "host_kernel_s" not in shown["from_like"]


def test_a_files_notes_name_it_and_read_its_builtins_traits(tmp_path):
    """What a stack does not run is said of the file's stack by its name, from the built-in's traits
    (DeepSpeed's pipeline engine allows ZeRO-1 at most; Composer runs no pipeline)."""
    deepspeed = _write(tmp_path, "name: my-ds\nlike: deepspeed\n", "ds.yaml")
    notes = " ".join(_predict(deepspeed, pp=2, zero=2).notes)
    assert "my-ds's pipeline engine allows ZeRO-1 at most" in notes and str(tmp_path) not in notes
    composer = _write(tmp_path, "name: my-composer\nlike: composer\n", "composer.yaml")
    assert "my-composer runs no pipeline parallelism (pp=2)" in " ".join(_predict(composer, pp=2).notes)


def test_the_json_plan_names_a_files_memory_stack_and_a_builtins_json_is_unchanged(tmp_path):
    from shardwise import export

    mine = export.plan_dict(_predict(_write(tmp_path, "name: my-fsdp\nlike: fsdp\n")).scenario.plan)
    builtin = export.plan_dict(_predict("fsdp").scenario.plan)
    assert mine["memory_stack"] == "fsdp" and mine["framework"] == "my-fsdp"
    assert "memory_stack" not in builtin  # the built-ins' output as it was
    assert {k: v for k, v in mine.items() if k not in ("memory_stack", "framework")} == {
        k: v for k, v in builtin.items() if k != "framework"
    }


def test_suggested_runs_of_a_framework_file_launch_with_its_built_ins_tool(tmp_path):
    """calibrate --suggest's launch for a file that starts from torchtitan is torchtitan's (it was
    looked up by the file's path: Megatron-LM's pretrain_gpt.py)."""
    from shardwise.cli.calibrate_suggest import default_target

    path = tmp_path / "mine.yaml"
    path.write_text("name: mine\nlike: torchtitan\n")
    assert default_target(str(path)) == "torchtitan" == default_target("torchtitan")
    assert default_target("") == "megatron" == default_target("megatron-core")
    assert default_target("megatron-deepspeed") == "deepspeed"  # Megatron-DeepSpeed's own launch


def test_a_runs_csv_reads_its_framework_file_from_its_own_folder_and_the_calibration_records_it(
    tmp_path, cli, monkeypatch
):
    """`calibrate r9/runs.csv` from another folder reads `framework: mine.yaml` as r9/mine.yaml (it
    read ./mine.yaml: "cannot read"), as `validate --runs` does; the calibration file records the
    framework file as it records the runs file, path and SHA-256 of its text."""
    import hashlib

    import yaml

    folder = tmp_path / "r9"
    folder.mkdir()
    (folder / "mine.yaml").write_text("name: mine\nlike: fsdp\n")
    head = "id,model,system,num_gpus,tp,pp,global_batch,framework,step_time_s\n"
    rows = "a,llama3-8b,dgx-h100,8,1,1,16,mine.yaml,1.9\nb,llama3-8b,dgx-h100,8,2,1,16,mine.yaml,2.1\n"
    (folder / "runs.csv").write_text(head + rows)
    monkeypatch.chdir(tmp_path)
    code, _, err = cli(["calibrate", "r9/runs.csv", "--params", "step_overhead_s", "-o", "cal.yaml"])
    assert code == 0, err
    runs = yaml.safe_load((tmp_path / "cal.yaml").read_text())["runs"]
    digest = hashlib.sha256((folder / "mine.yaml").read_bytes()).hexdigest()
    assert runs["frameworks"] == {str(Path("r9") / "mine.yaml"): digest}
    code, _, err = cli(["validate", "--runs", "r9/runs.csv"])
    assert code == 0, err
    # a calibration on presets only writes what it wrote before
    (folder / "plain.csv").write_text(head + rows.replace("mine.yaml", "fsdp"))
    code, _, err = cli(["calibrate", "r9/plain.csv", "--params", "step_overhead_s", "-o", "plain.yaml"])
    assert code == 0, err
    assert "frameworks" not in yaml.safe_load((tmp_path / "plain.yaml").read_text())["runs"]


def test_a_file_like_megatron_core_is_told_megatron_cores_moe_rule(tmp_path, cli):
    """The MoE tp-without-SP refusal of a file that starts from Megatron-Core names Megatron-Core's
    rule (it said "as shardwise prices a mixture of experts", the words for other stacks)."""
    base = ["predict", "--model", "qwen3-30b-a3b", "--system", "dgx-h100", "--nodes", "1", "--global-batch", "64"]
    sp = [*base, "--tp", "2", "--dp", "4", "--ep", "4", "--no-sequence-parallel"]
    mine = _write(tmp_path, "name: my-mcore\nlike: megatron-core\n", "mcore.yaml")
    code, _, err = cli([*sp, "--framework", mine])
    assert code == 2 and "(Megatron-Core's rule)" in err, err
    other = _write(tmp_path, "name: my-nanotron\nlike: nanotron\n", "nt.yaml")
    code, _, err = cli([*sp, "--framework", other])
    assert code == 2 and "needs sequence parallelism" in err and "Megatron" not in err, err


def test_a_plans_memory_stack_names_a_memory_entry_or_is_refused(tmp_path):
    """`Plan(memory_stack="fsdpp")` (a typo) was priced with Megatron-Core's memory: refused when
    built, one line. The names specs checks against are the memory entries' (listed in specs, which
    never imports physics), and every framework preset is among them, so any `like:` may be priced."""
    from shardwise.physics.memory_stacks import STACKS
    from shardwise.specs import Plan
    from shardwise.specs.plan_choices import MEMORY_STACKS

    with pytest.raises(SpecError) as excinfo:
        Plan(tp=1, pp=1, dp=8, global_batch=16, memory_stack="fsdpp")
    line = str(excinfo.value)
    assert "\n" not in line and "memory_stack 'fsdpp' is not a built-in stack's name (closest: fsdp" in line, line
    assert Plan(tp=1, pp=1, dp=8, global_batch=16, memory_stack="fsdp").memory_stack_key == "fsdp"
    assert Plan(tp=1, pp=1, dp=8, global_batch=16, framework="my-own").memory_stack_key == "my-own"  # a label
    assert set(MEMORY_STACKS) == set(STACKS) and len(MEMORY_STACKS) == len(STACKS)
    assert set(presets.names("frameworks")) <= set(MEMORY_STACKS)
    # a file that starts from the one preset that had no entry is priced as before (Megatron-Core's)
    mine = _predict(_write(tmp_path, "name: my-fa\nlike: flash-attn-trainer\n"))
    _same(mine, _predict("flash-attn-trainer"))


def test_a_search_space_by_a_file_prices_with_its_flags_or_refuses_another_stacks(tmp_path):
    """`SearchSpace(stack=FILE)` with no `execution` searched by the file but priced Plan's defaults
    (Megatron-Core's flags): it takes the file's flags, as `plan --framework FILE` gives them, and
    its plans are priced as that command's; an `execution` of another framework is refused."""
    import dataclasses

    from shardwise.analyses import planner
    from shardwise.analyses.search_space import SearchSpace

    path = _write(tmp_path, "name: my-fsdp\nlike: fsdp\nhost_kernel: 20us\n")
    space = SearchSpace(stack=path, tp=(2,), pp=(1,))
    assert space.execution["framework"] == "my-fsdp" and space.execution["memory_stack"] == "fsdp"
    assert space.execution["host_kernel_s"] == pytest.approx(20e-6) and "zero_stage" not in space.execution
    training = TrainingRequest(model="llama3-8b", system="dgx-h100", num_gpus=8, framework=path)
    request = PlanRequest(training, global_batch=16, tp=(2,), pp=(1,))
    model, cluster = presets.model("llama3-8b"), presets.system("dgx-h100")
    # plan's own space with its execution left out: filled from the file, the same plans and times
    bare = dataclasses.replace(request.space(float(cluster.gpu.memory_bytes)), execution={})
    got, want = planner.search(model, cluster, 16, bare), request.search()
    assert got.plan(0).framework == "my-fsdp" and got.plan(0).memory_stack == "fsdp"
    assert float(got.plan(0).host_kernel_s) == pytest.approx(20e-6)
    assert np.array_equal(got.estimate.step_time_s, want.estimate.step_time_s)
    assert planner.search(model, cluster, 16, space).plan(0).framework == "my-fsdp"
    with pytest.raises(SpecError, match="execution's framework is 'fsdp' but the stack searched by is"):
        SearchSpace(stack=path, execution={"framework": "fsdp"})
    with pytest.raises(SpecError, match="execution's framework is 'megatron-core'"):
        SearchSpace(stack="fsdp", execution={"lora_rank": 8})  # Plan's defaults: Megatron-Core's


def test_a_files_partial_zero3_buckets_keep_its_like_presets_others(tmp_path):
    """`like: megatron-deepspeed` with only a prefetch bucket: the preset's other buckets and its
    fused linears stay (they were DeepSpeed's defaults and Hugging Face's modules)."""
    text = "name: mine\nlike: megatron-deepspeed\nzero3_buckets:\n  prefetch: 10000000\n"
    mine = _predict(_write(tmp_path, text), zero=3).scenario.plan.zero3_buckets
    builtin = _predict("megatron-deepspeed", zero=3).scenario.plan.zero3_buckets
    assert mine.fused_linears and builtin.fused_linears
    assert mine.prefetch_bucket_params == 1e7 != builtin.prefetch_bucket_params
    assert mine.max_live_params == builtin.max_live_params and mine.reduce_bucket_params == builtin.reduce_bucket_params
    twice = "name: twice\nlike: megatron-deepspeed\nzero3_buckets:\n  prefetch: 1\n  stage3_prefetch_bucket_size: 2\n"
    with pytest.raises(SpecError, match="given twice"):
        _predict(_write(tmp_path, twice, "twice.yaml"), zero=3)
