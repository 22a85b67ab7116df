"""Issue 33: the planner searches what engineers tune beyond the layout, where the stack does it
(its framework preset): the fewest layers recomputed whole that fit (Megatron-LM's block method,
`analyses.plan_recompute`) and hybrid sharding over a server's data-parallel ranks (HSDP,
`analyses.plan_hybrid`)."""

from __future__ import annotations

import dataclasses
import json
import shlex

import numpy as np
import pytest

from shardwise import presets
from shardwise.analyses.plan_search import columns_scenario
from shardwise.analyses.planner import SearchSpace, search
from shardwise.engines.training import estimate_training_step, training_memory
from shardwise.errors import SpecError
from shardwise.presets import framework_fields
from shardwise.requests.plan import PlanRequest, row_request
from shardwise.specs import Recompute, Scenario

# Llama 3 70B (80 layers, 8K tokens) on two DGX H100: recomputing nothing does not fit, recomputing
# every layer wastes a forward pass of those that could keep their activations
TIGHT = ("llama3-70b", "dgx-h100", 2, 64)
# Llama 2 7B under FSDP2 ZeRO-3 on eight servers that share one 100 GbE NIC each: gathering the
# weights across servers every micro-batch costs more than all-reducing a shard between replicas
HSDP_ARGV = (
    "--model llama2-7b --system dgx-h100 --nodes 8 --inter-link eth-100g --nics-per-node 1 --global-batch 512 "
    "--framework fsdp2 --zero 3 --tp 1 --micro-batch 1"
)


TIGHT_ARGV = "--model {} --system {} --nodes {} --global-batch {} --memory-headroom 0".format(*TIGHT)


@pytest.fixture(scope="module")
def tight():
    return PlanRequest.from_argv(TIGHT_ARGV).search()


def test_the_best_plan_recomputes_the_fewest_layers_whole_that_fit(tight):
    best = int(tight.ranked(1)[0])
    n = int(tight.columns["recompute_layers"][best])
    assert n > 0 and int(tight.columns["recompute"][best]) == int(Recompute.NONE)
    scn = tight.scenario(best)
    capacity = float(scn.cluster.gpu.memory_bytes)

    def memory(k: int) -> float:
        plan = scn.plan.with_(recompute_layers=k)
        return float(np.asarray(training_memory(Scenario(scn.model, scn.cluster, plan)).total_bytes))

    assert memory(n) <= capacity < memory(n - 1)  # the fewest: one layer less does not fit
    full_plan = scn.plan.with_(recompute_layers=0, recompute="full")
    full = estimate_training_step(Scenario(scn.model, scn.cluster, full_plan))
    assert float(tight.row(best)["step_time_s"]) < float(np.asarray(full.step_time_s))


def test_each_plan_with_layers_recomputed_whole_does_not_fit_recomputing_nothing(tight):
    cols = tight.columns
    found = np.flatnonzero(cols["recompute_layers"] > 0)
    assert found.size and tight.fits[found].all()
    assert np.all(cols["recompute"][found] == int(Recompute.NONE))
    plain = {k: v[found] for k, v in cols.items()} | {"recompute_layers": np.zeros(found.size, dtype=np.int64)}
    scn = columns_scenario(tight.model, tight.cluster, tight.global_batch, tight.space, plain)
    assert np.all(np.asarray(training_memory(scn).total_bytes) > float(tight.cluster.gpu.memory_bytes))


@pytest.mark.parametrize(
    "space",
    [
        SearchSpace(execution={"framework": "torchtitan"}),  # its AC takes every N-th layer, not the first N
        SearchSpace(recompute=("none", "selective")),  # Megatron's block method is full granularity
        SearchSpace(recompute_layers=0),
    ],
)
def test_no_layer_is_recomputed_whole_where_the_stack_does_not_or_it_is_fixed(space):
    model, system, nodes, batch = TIGHT
    result = search(presets.model(model), presets.system(system, nodes=nodes), batch, space)
    assert not np.any(result.columns["recompute_layers"] > 0)


def test_hybrid_sharding_is_chosen_where_it_beats_full_sharding():
    request = PlanRequest.from_argv(HSDP_ARGV)
    result = request.search()
    best = int(result.ranked(1)[0])
    assert int(result.columns["shard_group"][best]) == 8  # one server's ranks
    cols = result.columns
    same = [k for k in cols if k != "shard_group"]
    twin = np.all([cols[k] == cols[k][best] for k in same], axis=0) & (cols["shard_group"] == 0)
    (j,) = np.flatnonzero(twin)
    assert result.score[j] < result.score[best]  # full sharding of the same layout is slower
    # the plan's predict command prices the same plan
    predicted = row_request(result, best, request.training).run()
    assert float(np.asarray(predicted.estimate.step_time_s)) == pytest.approx(result.row(best)["step_time_s"])


def test_hybrid_sharding_is_searched_only_at_the_stages_the_stack_runs_it():
    # Megatron-Core shards hybrid with its distributed optimizer (ZeRO-1), not with Megatron FSDP
    megatron = PlanRequest.from_argv(HSDP_ARGV.replace("fsdp2", "megatron-core")).search()
    assert not np.any(megatron.columns["shard_group"] > 0)
    zero1 = PlanRequest.from_argv(HSDP_ARGV.replace("fsdp2", "megatron-core").replace("--zero 3", "--zero 1"))
    groups = zero1.search().columns["shard_group"]
    assert set(groups.tolist()) == {0, 8}
    fixed = PlanRequest.from_argv(HSDP_ARGV + " --shard-group 16").search().columns
    assert set(fixed["shard_group"].tolist()) == {16}


def test_the_emit_target_narrows_the_search_to_what_it_runs():
    base = PlanRequest.from_argv("--model llama3-8b --system dgx-h100 --nodes 2 --global-batch 64")
    assert base.space(80e9).features() == (True, (1,))
    assert dataclasses.replace(base, emit="torchtitan").space(80e9).features() == (False, (1,))
    fsdp2 = PlanRequest.from_argv("--model llama3-8b --system dgx-h100 --nodes 2 --global-batch 64 --framework fsdp2")
    assert fsdp2.space(80e9).features() == (False, (2, 3))
    assert dataclasses.replace(fsdp2, emit="megatron").space(80e9).features() == (False, ())


def test_plan_prints_and_emits_the_layers_recomputed_whole(cli):
    model, system, nodes, batch = TIGHT
    argv = ["plan", "--model", model, "--system", system, "--nodes", str(nodes), "--global-batch", str(batch)]
    argv += ["--memory-headroom", "0", "--top", "2", "--emit", "megatron"]
    code, out, err = cli(argv)
    assert code == 0, err
    best = " ".join(out.split("best:")[1].split("per step")[0].split())
    assert "recompute the first" in best and "layers of each stage whole" in best
    n = best.split("recompute the first ")[1].split()[0]
    assert f"--recompute-granularity full --recompute-method block --recompute-num-layers {n}" in " ".join(out.split())
    code, out, err = cli([*argv[:-2], "--json"])
    plans = __import__("json").loads(out)["plans"]
    assert plans[0]["recompute_layers"] == int(n) and plans[0]["shard_group"] == 0
    assert f"--recompute-layers {n}" in plans[0]["command"]


def test_every_plan_in_the_table_of_all_plans_has_its_layers_and_shard_group(tight):
    cols = tight.table_columns()
    assert {"recompute_layers", "shard_group"} <= set(cols)
    assert np.any(cols["recompute_layers"] > 0)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--recompute-layers", "-1"], "--recompute-layers"),
        (["--shard-group", "-8"], "--shard-group"),
        (["--shard-group", "eight"], "--shard-group"),
    ],
)
def test_bad_values_are_one_line_naming_the_flag(cli, flags, message):
    argv = ["plan", "--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", "64", *flags]
    code, _, err = cli(argv)
    assert code == 2 and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_bad_values_in_the_requests_and_presets_are_refused():
    with pytest.raises(SpecError, match="--shard-group"):
        PlanRequest.from_argv("--model llama3-8b --system dgx-h100 --global-batch 64 --shard-group -2")
    with pytest.raises(SpecError, match="recompute_layers -1 is not allowed"):
        SearchSpace(recompute_layers=-1)
    with pytest.raises(SpecError, match="hybrid sharding at ZeRO stage 0"):
        SearchSpace(hybrid_zero=(0,))
    with pytest.raises(SpecError, match="hybrid_shard: \\[4\\] is not allowed"):
        framework_fields._stack_fields("mine", {"hybrid_shard": [4]})
    with pytest.raises(SpecError, match="block_recompute: 'yes' is not allowed"):
        framework_fields._stack_fields("mine", {"block_recompute": "yes"})


def test_the_fixed_values_go_through_the_command_line_and_back():
    request = PlanRequest.from_argv(
        "--model llama3-8b --system dgx-h100 --nodes 2 --global-batch 64 --recompute-layers 3 --shard-group 0,8"
    )
    assert request.recompute_layers == 3 and request.shard_group == (0, 8)
    assert "--recompute-layers 3 --shard-group 0,8" in request.command()
    assert PlanRequest.from_argv(request.to_argv()) == request
    assert request.space(80e9).features() == (False, ())  # both fixed: nothing searched


def test_each_plan_that_recomputes_nothing_knows_its_full_recomputation_twin():
    from shardwise.analyses.plan_space import candidates_with_twins

    model, cluster = presets.model("gpt3-175b"), presets.system("dgx-a100", nodes=16)
    cols, _, twin_of = candidates_with_twins(model, cluster, 1536, SearchSpace(tp_within_node=False))
    none = np.flatnonzero(cols["recompute"] == int(Recompute.NONE))
    twin = twin_of(none)
    assert np.all(twin >= 0)  # every plan here fits or not the same way under full recomputation
    for k in cols:
        if k != "recompute":
            np.testing.assert_array_equal(cols[k][twin], cols[k][none], err_msg=k)
    assert np.all(cols["recompute"][twin] == int(Recompute.FULL))
    _, _, fixed = candidates_with_twins(model, cluster, 1536, SearchSpace(recompute=("none",)))
    assert fixed is None


@pytest.mark.parametrize("stack", ["torchtitan", "torchtitan-compile", "fsdp", "fsdp2", "nemo-automodel", "composer"])
def test_fsdp_stacks_are_not_planned_at_zero_1(stack):
    """FSDP1's strategies and FSDP2's reshard_after_forward shard all the model state or the
    gradients and optimizer state, or nothing (DDP): there is no ZeRO-1 (optimizer state alone) to
    recommend (torchtitan's mixtral plan was ZeRO-1 at the top)."""
    argv = f"--model mixtral-8x7b --system dgx-h100 --nodes 4 --global-batch 256 --framework {stack}"
    stages = set(PlanRequest.from_argv(argv).search().columns["zero_stage"].tolist())
    assert 1 not in stages and stages <= {0, 2, 3}
    assert 1 in set(PlanRequest.from_argv(argv + " --zero 1").search().columns["zero_stage"].tolist())


def test_a_stack_without_pipeline_or_context_parallelism_is_planned_without_them(cli):
    """Composer's preset says it runs FSDP1 and tensor parallelism (`model_parallel: [tp]`,
    ParallelismConfig(fsdp, tp)): the planner searches pp = cp = 1 there (it suggested pp 4 and cp 2),
    a --pp given still wins, and predict notes the axis the stack lacks, priced as asked; the
    neighbours say why they were not searched."""
    argv = "--model llama3-70b --system dgx-h100 --nodes 4 --global-batch 512 --framework composer"
    cols = PlanRequest.from_argv(argv).search().columns
    assert set(cols["pp"].tolist()) == {1} and set(cols["cp"].tolist()) == {1} and max(cols["tp"].tolist()) > 1
    assert set(PlanRequest.from_argv(argv + " --pp 2").search().columns["pp"].tolist()) == {2}
    wide = PlanRequest.from_argv(argv.replace("composer", "megatron-core")).search().columns
    assert max(wide["pp"].tolist()) > 1 and max(wide["cp"].tolist()) > 1
    code, out, _err = cli(["plan", *shlex.split(argv), "--top", "1"])
    assert code == 0 and "composer runs no pipeline parallelism (pp=2)" in out
    base = ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--nodes", "1", "--global-batch", "64"]
    code, _out, err = cli([*base, "--framework", "composer", "--pp", "2", "--cp", "2"])
    assert code == 0 and "composer runs no pipeline parallelism (pp=2) or context parallelism (cp=2); priced" in err
    code, _out, err = cli([*base, "--framework", "composer", "--tp", "2"])
    assert code == 0 and "priced as asked" not in err


@pytest.mark.parametrize("value", [["ep"], "tp", [1]])
def test_a_preset_names_its_model_parallel_axes_among_tp_pp_and_cp(value):
    from shardwise.presets.stack_defaults import check_default_fields

    with pytest.raises(SpecError, match=r"model_parallel: .* is not allowed; give a list of tp, pp, cp \(or \[\]\)"):
        check_default_fields("mine", {"model_parallel": value})
    check_default_fields("mine", {"model_parallel": ["pp"]})


def test_predict_notes_a_zero_stage_or_schedule_the_stack_does_not_run(cli):
    """predict prices the plan asked, and says where the stack does not implement it (its preset's
    zero_stages and schedules, which the planner keeps to): silent before."""
    base = ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--nodes", "2", "--global-batch", "64"]
    code, _out, err = cli([*base, "--framework", "torchtitan", "--zero", "1"])
    assert code == 0 and "torchtitan implements ZeRO 0, 2, 3, not ZeRO-1; priced as asked" in err
    code, _out, err = cli([*base, "--framework", "nanotron", "--pp", "2", "--vpp", "2"])
    assert code == 0 and "nanotron runs the gpipe, 1f1b pipeline schedules, not interleaved" in err
    code, _out, err = cli([*base, "--framework", "torchtitan", "--zero", "3"])
    assert code == 0 and "priced as asked" not in err
    code, _out, err = cli([*base, "--framework", "megatron-deepspeed", "--zero", "3", "--pp", "2"])
    assert code == 0 and "pipeline engine allows ZeRO-1 at most" in err and "not ZeRO-3; priced as asked" in err
    code, _out, err = cli([*base, "--framework", "megatron-deepspeed", "--zero", "1", "--pp", "2"])
    assert code == 0 and "priced as asked" not in err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--cp-comm", "a2a"], "--cp-comm a2a: with --cp 1"),
        (["--lora-targets", "qkv"], "--lora-targets names the layers of LoRA's adapters"),
        (["--selective-policy", "op"], "--selective-policy says what --recompute selective recomputes"),
        (["--moe-dispatcher", "flex", "--etp", "2"], "--etp, --moe-dispatcher: llama3-8b is dense"),
        (["--expert-imbalance", "1.5"], "--expert-imbalance: llama3-8b is dense (no experts); drop it"),
    ],
)
def test_predict_refuses_a_flag_its_plan_gives_nothing_to_do(cli, extra, message):
    """Each was priced as if absent, silently; now one line and exit 2. A plan search keeps them for
    the plans that use them (its rows' commands drop them where a row does not)."""
    base = ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--nodes", "1", "--global-batch", "8"]
    code, out, err = cli([*base, *extra])
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err


def test_a_plan_searched_with_a_selective_policy_gives_rows_that_predict_takes(cli):
    code, out, err = cli(["plan", "--model", "llama3-8b", "--system", "dgx-h100", "--nodes", "2", "--global-batch",
                          "64", "--selective-policy", "op", "--top", "3", "--json"])  # fmt: skip
    assert code == 0, err
    for row in json.loads(out)["plans"]:
        code, _out, err = cli(shlex.split(row["command"])[1:])
        assert code == 0, (row["command"], err)


def test_one_rule_says_what_a_stack_does_not_run_for_a_note_and_for_the_planner():
    """`stack_defaults.not_in_stack`: predict's note names what was asked ("not ZeRO-1"), a ZeRO
    stage only where the data-parallel ranks shard, and DeepSpeed's pipeline engine's limit; the
    planner's reason ("... only") every ZeRO stage outside the stack's, which its search leaves out."""
    from shardwise.presets.stack_defaults import not_in_stack
    from shardwise.specs import Plan

    def plan(**kw):
        fields = {"tp": 1, "pp": 1, "dp": 2, "global_batch": 64, **kw}
        return Plan(**fields)

    assert not_in_stack("torchtitan", plan(zero_stage=1)) == "torchtitan implements ZeRO 0, 2, 3, not ZeRO-1"
    assert not_in_stack("torchtitan", plan(zero_stage=1), searched=True) == "torchtitan implements ZeRO 0, 2, 3 only"
    assert not_in_stack("torchtitan", plan(zero_stage=1, dp=1)) == ""
    assert not_in_stack("torchtitan", plan(zero_stage=1, dp=1), searched=True).endswith("only")
    zb = plan(pp=2, schedule="zb-h1")
    assert not_in_stack("nanotron", zb) == "nanotron runs the gpipe, 1f1b pipeline schedules, not zb-h1"
    assert not_in_stack("nanotron", zb, searched=True) == "nanotron runs the gpipe, 1f1b schedules only"
    piped = plan(pp=2, zero_stage=2)
    assert "pipeline engine allows ZeRO-1 at most" in not_in_stack("deepspeed", piped)
    # the planner's reason: DeepSpeed's preset states the engine's limit (`pipeline_zero_stages`)
    assert not_in_stack("deepspeed", piped, searched=True) == "deepspeed runs ZeRO 0, 1 under a pipeline only"
    assert not_in_stack("composer", plan(pp=2), searched=True) == "composer runs no pipeline parallelism (pp=2)"


def test_a_tie_is_judged_on_the_ratio_of_two_plans_not_their_absolute_ranges():
    """Uncalibrated, two plans of one job tie where their ratio lies inside the 80% band of how far
    the model misses two layouts' ratio (spreads.PAIR_LOG_SD: a bias they share cancels), not
    where one lies inside the other's absolute range: a mixture of experts' -36%/+55% range made
    any two of its plans within 1.5x a tie. With a calibration the same rule, on the ratio's band
    from the calibration (as `analyses.bands.ratio_log_sd` for sensitivity): a bias both plans share
    through the fitted parameters cancels there too; it compared the absolute ranges."""
    from types import SimpleNamespace

    from shardwise.calibration.fit import Fit
    from shardwise.calibration.intervals import Spread
    from shardwise.calibration.spreads import PAIR_LOG_SD
    from shardwise.requests.plan_result import with_intervals

    times = [10.0, 10.5, 12.0]  # 5% apart (a tie), then 14%
    result = SimpleNamespace(
        row=lambda i: {"step_time_s": times[i], "tokens_per_s": 8.0 / times[i], "tokens_per_s_per_gpu": 1.0 / times[i]},
        space=SimpleNamespace(objective="time"),
    )
    wide = Spread(np.full(3, np.log(1.5) / 1.2816), "uncalibrated")  # ranges of -33%/+50%, no fit
    assert wide.ratio_log_sd(0, 1) == PAIR_LOG_SD
    rows = with_intervals(result, np.arange(3), wide)
    assert [r["tie_with_next"] for r in rows] == [True, False, None]
    # calibrated: the same wide ranges, from a parameter the first two plans lean on alike and the
    # third the other way, with little residual spread: the first two are ordered (their ratio's
    # band is sqrt(2) x 0.01 x t, 1.8%), the second and third are not (the parameter moves them apart)
    fit = Fit(("matmul_efficiency_scale", "step_overhead_s"), {}, np.diag([0.25, 0.25]), 0.01, dof=1e9)
    from shardwise.calibration.unmeasured import ALL

    g = np.zeros((3, len(ALL)))  # d ln t / d u over every parameter: the unfitted ones move nothing here
    g[:, [ALL.index(n) for n in fit.fitted]] = [[0.9, 0.1], [0.9, 0.1], [0.1, 0.9]]
    calibrated = Spread(wide.log_sd, "calibration", g, fit)
    assert calibrated.ratio_log_sd(0, 1) == pytest.approx(np.sqrt(2) * 0.01, rel=1e-6)
    assert calibrated.ratio_log_sd(1, 2) == pytest.approx(np.sqrt(2e-4 + 2 * 0.64 * 0.25), rel=1e-6)
    rows = with_intervals(result, np.arange(3), calibrated)
    assert [r["tie_with_next"] for r in rows] == [False, True, None]  # the ranges overlap: was [True, True]
    rows = PlanRequest.from_argv("--model mixtral-8x7b --system dgx-h100 --nodes 2 --global-batch 256").run().rows
    assert rows[0]["step_time_s_high"] / rows[0]["step_time_s"] > 1.4  # the MoE family's range
