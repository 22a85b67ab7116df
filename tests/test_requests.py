"""The request layer: one way from a user's words to a scenario, whatever face they come from."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest
from click.testing import CliRunner

from shardwise.cli import cli as main
from shardwise.errors import SpecError
from shardwise.requests.fields import TRAINING_FIELDS
from shardwise.requests.training import PredictRequest, TrainingRequest

ARGV = [
    *("--model", "mixtral-8x7b", "--system", "dgx-h100", "--nodes", "2", "--tp", "2", "--pp", "2", "--ep", "4"),
    *("--etp", "1", "--global-batch", "64", "--micro-batch", "2", "--recompute", "selective", "--zero", "1"),
    *("--framework", "megatron-core", "--no-overlap-p2p", "--precision", "fp8", "--vpp", "2"),
]


def _same(a, b) -> None:
    assert a.model == b.model and a.plan == b.plan
    assert a.cluster.name == b.cluster.name and int(a.cluster.num_gpus) == int(b.cluster.num_gpus)
    assert a.cluster == b.cluster


def test_one_request_from_argv_csv_dict_and_controls_gives_one_scenario():
    from_argv = TrainingRequest.from_argv(ARGV)
    # a CSV row as a spreadsheet writes it (strings, flag spellings as headers)
    row = from_argv.to_row()
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(row))
    writer.writeheader()
    writer.writerow(row)
    from_csv = TrainingRequest.from_mapping(next(csv.DictReader(io.StringIO(text.getvalue()))))
    from_dict = TrainingRequest(
        model="mixtral-8x7b", system="dgx-h100", nodes=2, tp=2, pp=2, ep=4, etp=1, global_batch=64, micro_batch=2,
        recompute="selective", zero=1, framework="megatron-core", overlap_p2p=False, precision="fp8", vpp=2,
    )  # fmt: skip
    # the explorer's controls: dashed names, numbers as strings, switches as on/off
    from_controls = TrainingRequest.from_mapping(
        {"model": "mixtral-8x7b", "system": "dgx-h100", "nodes": "2", "tp": "2", "pp": "2", "ep": "4", "etp": "1",
         "global-batch": "64", "micro-batch": "2", "recompute": "selective", "zero": "1", "overlap-p2p": "off",
         "precision": "fp8", "vpp": "2"}
    )  # fmt: skip
    assert from_argv == from_csv == from_dict == from_controls
    scenarios = [r.scenario() for r in (from_argv, from_csv, from_dict, from_controls)]
    for s in scenarios[1:]:
        _same(scenarios[0], s)
    assert TrainingRequest.from_argv(from_argv.to_argv()) == from_argv


def test_the_command_line_builds_the_same_request(monkeypatch):
    seen = []
    real = PredictRequest.run

    def spy(self):
        seen.append(self)
        return real(self)

    monkeypatch.setattr(PredictRequest, "run", spy)
    out = CliRunner().invoke(main, ["predict", *ARGV, "--json"])
    assert out.exit_code == 0, out.output
    assert seen[0].training == TrainingRequest.from_argv(ARGV)


def test_predict_options_carry_the_request_defaults():
    """One set of defaults: every request field is a predict flag whose default is the field's."""
    from shardwise.cli.predict import predict

    params = {p.name: p for p in predict.params}
    for f in TRAINING_FIELDS:
        assert f.key in params, f.name
        want = params[f.key].default
        want = None if type(want).__name__ == "Sentinel" else want  # click 8.3's "no default"
        assert want == f.default, (f.name, want, f.default)


def test_bad_fields_are_one_clear_line():
    with pytest.raises(SpecError, match=r"unknown field 'tensor_parallel'"):
        TrainingRequest.from_mapping({"tensor_parallel": 2})
    with pytest.raises(SpecError, match=r"tp: 'two' is not allowed; give a whole number"):
        TrainingRequest.from_mapping({"tp": "two"})
    with pytest.raises(SpecError, match=r"recompute: 'some' is not allowed"):
        TrainingRequest(recompute="some")
    with pytest.raises(SpecError, match=r"--tpp: not an option"):
        TrainingRequest.from_argv(["--tpp", "2"])


def test_an_fp8_recipe_given_with_another_precision_is_refused_on_one_line(cli):
    argv = ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", "64", "--precision", "bf16"]
    code, out, err = cli([*argv, "--fp8-recipe", "rowwise"])
    assert code == 2 and out == "", err
    assert len(err.strip().splitlines()) == 1 and err.strip().endswith(
        "--fp8-recipe: rowwise is not allowed with --precision bf16; it applies only to --precision fp8 or "
        "mxfp8 (leave --fp8-recipe out)"
    )
    with pytest.raises(SpecError, match=r"--fp8-recipe: te is not allowed with --precision fp16"):
        TrainingRequest.from_mapping({"precision": "fp16", "fp8_recipe": "te"})
    # with FP8, or left to the framework (torchtitan's preset states one), it stands
    assert TrainingRequest(precision="fp8", fp8_recipe="rowwise").fp8_recipe == "rowwise"
    assert cli([*argv, "--framework", "torchtitan"])[0] == 0


def test_sequence_parallel_follows_tensor_parallelism_unless_given():
    base = TrainingRequest(model="llama3-8b", system="dgx-h100", global_batch=64)
    assert not base.scenario().plan.sequence_parallel
    assert base.with_(tp=2).scenario().plan.sequence_parallel
    assert not base.with_(tp=2, sequence_parallel=False).scenario().plan.sequence_parallel


def test_calibration_rows_are_requests():
    """calibrate's "before" for a layout is predict's number (they disagreed: 6.63 s vs 6.90 s)."""
    from shardwise.calibration.runs import parse_runs

    text = "model,system,num_gpus,tp,pp,global_batch,step_time_s\nllama3-8b,dgx-h100,8,2,1,64,7.0\n"
    run = parse_runs(text)[0]
    cli = TrainingRequest.from_argv("--model llama3-8b --system dgx-h100 --num-gpus 8 --tp 2 --global-batch 64")
    assert run.scenario.plan == cli.scenario().plan
    assert run.scenario.cluster == cli.scenario().cluster


@pytest.mark.parametrize(
    "argv",
    [
        "--model llama3-8b --system dgx-h100 --nodes 2 --global-batch 128",  # dense
        "--model mixtral-8x7b --system dgx-h100 --nodes 2 --global-batch 64",  # mixture of experts
        "--model llama3-8b --seq-len 32768 --system dgx-h100 --nodes 2 --global-batch 32 --cp 2,4",  # CP
        "--model llama3-70b --system dgx-h100 --nodes 6 --global-batch 96 --pp 6 --tp 8",  # uneven stages
        # multi-token prediction and separate pipeline schedules, as predict takes them
        "--model llama3-8b --system dgx-h100 --nodes 2 --global-batch 128 --pp 2 --mtp-layers 1 --pipeline-flushes 2",
    ],
)
def test_plan_rows_equal_predict(argv):
    import json

    out = CliRunner().invoke(main, ["plan", *argv.split(), "--top", "3", "--json"])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.stdout)["plans"]
    assert rows
    if "--pp 6" in argv:  # 80 layers on 6 stages: the split is uneven
        assert any(r["stage_layers"] for r in rows)
    if "--cp" in argv:
        assert all(r["cp"] > 1 for r in rows)
    if "mixtral" in argv:
        assert any(r["ep"] > 1 for r in rows)
    for r in rows:
        result = PredictRequest.from_argv(r["command"]).run()
        assert np.isclose(result.step_time_s, r["step_time_s"], rtol=1e-9), (r["command"], r["step_time_s"])
        assert np.isclose(float(result.estimate.memory.total_bytes), r["memory_bytes"]["total"], rtol=1e-9)


def test_plan_takes_mtp_layers_and_pipeline_flushes_as_predict_does(cli):
    import json

    argv = ["plan", "--model", "llama3-8b", "--system", "dgx-h100", "--nodes", "2", "--global-batch", "128"]
    argv += ["--pp", "2", "--top", "2", "--json"]
    code, out, err = cli(argv)
    assert code == 0, err
    plain = json.loads(out)
    code, out, err = cli([*argv, "--mtp-layers", "1", "--pipeline-flushes", "4"])
    assert code == 0, err
    given = json.loads(out)
    assert "--mtp-layers 1" in given["command"] and "--pipeline-flushes 4" in given["command"]
    for row in given["plans"]:
        assert "--mtp-layers 1" in row["command"] and "--pipeline-flushes 4" in row["command"]
    # every candidate pays for them: the best plan's step is slower than without
    assert given["plans"][0]["step_time_s"] > plain["plans"][0]["step_time_s"]
    # checked as predict checks them: one line, exit 2
    for flag, value in (("--mtp-layers", "17"), ("--pipeline-flushes", "0")):
        code, out, err = cli([*argv, flag, value])
        assert code == 2 and out == "" and flag in err, (flag, err)


PLAN_ARGV = "--model llama3-8b --system dgx-h100 --nodes 2 --global-batch 128 --tp 1,2 --recompute none,full"


def test_plan_requests_round_trip_and_match_the_command_line():
    import json

    from shardwise.requests.plan import PlanRequest

    request = PlanRequest.from_argv(PLAN_ARGV)
    assert request.tp == (1, 2) and request.recompute == ("none", "full") and request.global_batch == 128
    assert PlanRequest.from_argv(request.to_argv()) == request
    out = CliRunner().invoke(main, ["plan", *PLAN_ARGV.split(), "--json"])
    assert out.exit_code == 0, out.output
    printed = json.loads(out.stdout)
    direct = json.loads(__import__("shardwise.export", fromlist=["dumps"]).dumps(request.run().as_dict()))
    for key in ("plans", "why", "evaluated", "dropped_for_memory", "command"):
        assert printed[key] == direct[key], key


def test_the_explorer_asks_the_planner_without_the_command_line(monkeypatch):
    """The explorer's plan page runs its request: no command line, no redirected stdout, no lock,
    so two pages are answered at the same time in one process."""
    import threading

    import shardwise.cli
    from shardwise.explore import runner

    def refuse(*args, **kwargs):
        raise AssertionError("the command line was run")

    monkeypatch.setattr(shardwise.cli, "main", refuse)
    args = ["plan", "--model", "llama3-8b", "--system", "dgx-h100", "--nodes", "2", "--global-batch", "128"]
    args += ["--csv", "plans.csv"]
    outcomes: list = []
    threads = [threading.Thread(target=lambda: outcomes.append(runner.run(args))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [o.error for o in outcomes] == [None, None]
    assert outcomes[0].data["plans"] == outcomes[1].data["plans"]
    assert outcomes[0].table.startswith("gpus,tp,pp,dp")
    bad = runner.run(["plan", "--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", "0"])
    assert bad.error == "--global-batch: 0 is not allowed; it must be a whole number >= 1"  # not "from 1 to 2**53"


def test_the_explorer_offers_what_the_commands_take():
    """The explorer's new controls (planner: network, NICs, framework, precision; serving:
    precisions, concurrency, request rate, engine) offer exactly the command line's choices."""
    from shardwise.cli.plan import plan
    from shardwise.cli.serve import serve
    from shardwise.explore import checks

    def click_choices(command, name):
        return list(next(p for p in command.params if p.name == name).type.choices)

    assert checks.choices("s-weights") == click_choices(serve, "weight_precision")
    assert checks.choices("s-kv") == click_choices(serve, "kv_precision")
    assert sorted(checks.choices("s-engine")) == sorted(click_choices(serve, "framework"))
    assert checks.choices("p-precision") == click_choices(plan, "precision")


def test_the_explorer_planner_asks_with_network_framework_and_precision():
    from shardwise.explore import pages, runner, state

    values = {
        **state.DEFAULTS,
        "p-model": "llama3-8b",
        "p-system": "dgx-h100",
        "p-nodes": 2,
        "p-batch": 128,
        "p-inter": "eth-100g",
        "p-nics": 2,
        "p-framework": "torchtitan",
        "p-precision": "fp8",
    }
    args = state.planner_args(values)
    assert args[args.index("--inter-link") + 1] == "eth-100g" and "--nics-per-node" in args
    outcome, _, _summary = pages.compute("planner", values, (None, None), runner.run)
    assert outcome.error is None, outcome.error
    assert outcome.data["cluster"]["inter_node_link"]["name"].startswith("eth-100g")
    assert outcome.data["plans"][0]["command"].count("--framework torchtitan") == 1


def test_timeline_requests_match_the_command_line_and_serve_the_explorer():
    import json

    from shardwise.explore import runner
    from shardwise.requests.timeline import TimelineRequest

    argv = "--model gpt3-175b --system dgx-a100 --nodes 8 --tp 8 --pp 8 --global-batch 16"
    out = CliRunner().invoke(main, ["timeline", *argv.split(), "--json"])
    assert out.exit_code == 0, out.output
    printed = json.loads(out.stdout)
    direct = TimelineRequest.from_argv(argv).run()
    assert printed["step_time_s"] == direct.step_time_s and printed["command"] == direct.request.command()
    shown = runner.run(["timeline", *argv.split()])
    assert shown.error is None and shown.data["step_time_s"] == direct.step_time_s


def test_serve_targets_never_replace_a_concurrency_that_was_given(cli):
    args = ["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--plan", "tp=1", "--tpot-max", "30ms"]
    code, _, err = cli([*args, "--concurrency", "32"])
    assert code == 2 and err.startswith("error: --concurrency 32: --ttft-max/--tpot-max search")
    assert err.count("\n") == 1
    code, _, err = cli([*args, "--json"])
    assert code == 0, err


def test_nanotron_places_its_pipeline_blocks_by_compute_and_a_given_split_wins():
    """nanotron's build_model: a stage takes blocks until their running cost passes its share of the
    total, the output layer (V h) counted. Llama-3-8B: a layer costs 4 h^2 + 3 f h = 243.3 M, the
    output layer 525.3 M, 8311 M in all; at pp 4 the shares end at 2078, 4156, 6233: the 9th layer
    crosses the first (2189.7), the 18th the second (4379.3), the 26th the third (6325.7)."""
    from shardwise import presets
    from shardwise.specs.stages import compute_balanced_counts

    m = presets.model("llama3-8b")
    layer, head = 4.0 * m.hidden**2 + 3.0 * m.ffn_hidden * m.hidden, float(m.vocab * m.hidden)
    assert compute_balanced_counts(32, 4, layer, head) == (9, 9, 8, 6)
    assert compute_balanced_counts(32, 2, layer, head) == (18, 14)
    assert compute_balanced_counts(16, 8, layer / 4, head) is None  # the last stage would hold only the loss

    common = {"system": "dgx-h100", "nodes": 1, "tp": 2, "pp": 4, "global_batch": 8}
    nano = TrainingRequest(framework="nanotron", **common).build(m).scenario.plan
    assert nano.stage_layers == (9, 9, 8, 6)
    mega = TrainingRequest(framework="megatron-core", **common).build(m).scenario.plan
    assert mega.stage_layers is None  # Megatron's even split
    given = TrainingRequest(framework="nanotron", first_stage_layers=8, **common).build(m).scenario.plan
    assert given.stage_layers is None and int(given.first_stage_layers) == 8


def test_deepspeed_balances_only_its_transformer_layers_and_a_given_split_wins():
    """DeepSpeed's partition_balanced over GPTModelPipe's specs (3 before the layers, 4 after, weight
    0; each layer 1): the smallest heaviest stage is ceil(layers / pp), filled greedily from the
    first stage, so the last takes the rest; _lprobe's bucket walk gives 16 over 5 as 3, 3, 3, 3, 4."""
    from shardwise import presets
    from shardwise.specs.stages import deepspeed_balanced_counts

    assert deepspeed_balanced_counts(70, 12) == (6,) * 11 + (4,)
    assert deepspeed_balanced_counts(40, 8) == (5,) * 8
    assert deepspeed_balanced_counts(30, 4) == (8, 8, 8, 6)
    assert deepspeed_balanced_counts(16, 5) == (3, 3, 3, 3, 4)
    assert deepspeed_balanced_counts(3, 4) is None  # a stage without a layer: DeepSpeed's pipeline fails too

    m = presets.model("gpt3-175b", layers=70, hidden=14336, heads=112)
    common = {"system": "dgx-a100", "nodes": 12, "tp": 4, "pp": 12, "global_batch": 16}
    ds = TrainingRequest(framework="megatron-deepspeed", **common).build(m).scenario.plan
    assert ds.stage_layers == (6,) * 11 + (4,)
    given = TrainingRequest(framework="megatron-deepspeed", stage_layers=",".join(["5"] + ["6"] * 10 + ["5"]), **common)
    assert given.build(m).scenario.plan.stage_layers == (5,) + (6,) * 10 + (5,)


def test_json_outputs_carry_the_notes_the_command_line_prints_on_stderr():
    """What the request layer assumed (a stack's limits, its defaults) is in the JSON too, not
    only on stderr: a script that reads stdout alone sees it."""
    from shardwise.requests.plan import PlanRequest
    from shardwise.requests.timeline import TimelineRequest

    req = TrainingRequest(
        model="llama3-8b", system="dgx-h100", tp=2, pp=2, global_batch=64, framework="megatron-deepspeed"
    )
    predicted = PredictRequest(req).run()
    assert predicted.notes and predicted.as_dict()["notes"] == list(predicted.notes)
    timeline = TimelineRequest(req).run()
    assert timeline.notes and timeline.as_dict()["notes"] == list(timeline.notes)
    plans = PlanRequest.from_argv("--model llama3-8b --system dgx-h100 --global-batch 64 --top 1").run()
    assert plans.as_dict()["notes"] == list(plans.notes)
