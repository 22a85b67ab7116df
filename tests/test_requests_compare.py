"""The request layer for crossover, sweep, sensitivity and serve: one request from argv, a CSV row,
a dict or the explorer's controls; the command line and the explorer print what `run()` answers."""

from __future__ import annotations

import csv
import io
import json

import pytest

from shardwise.errors import SpecError
from shardwise.requests.compare import CrossoverRequest, ExperimentRequest, SweepRequest
from shardwise.requests.sensitivity import SensitivityRequest
from shardwise.requests.serve import ServeRequest
from shardwise.requests.training import TrainingRequest

CROSSOVER = [
    *("crossover", "--system", "dgx-h100", "--nodes", "2", "--plan", "tp=8", "--plan", "tp=4,pp=4"),
    *("--intra-link", "NVLink=nvlink4", "--intra-link", "slow=100GB/s", "--global-batch", "16"),
    *("--vary", "batch=1..64", "--precision", "fp8", "--recompute", "selective"),
]


def _csv_round_trip(row: dict[str, str]) -> dict[str, str]:
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(row))
    writer.writeheader()
    writer.writerow(row)
    return next(csv.DictReader(io.StringIO(text.getvalue())))


def test_one_experiment_from_argv_csv_dict_and_controls():
    req = CrossoverRequest.from_argv(CROSSOVER)
    exp = req.experiment
    assert exp.plans == ("tp=8", "tp=4,pp=4") and exp.intra_links == ("NVLink=nvlink4", "slow=100GB/s")
    assert exp.global_batch == 16 and exp.nodes == 2 and req.vary == "batch=1..64"
    from_csv = ExperimentRequest.from_mapping(_csv_round_trip(exp.to_row()))
    from_dict = ExperimentRequest(
        system="dgx-h100",
        nodes=2,
        plans=["tp=8", "tp=4,pp=4"],
        intra_links=("NVLink=nvlink4", "slow=100GB/s"),
        global_batch="16",
        precision="fp8",
        recompute="selective",
    )
    from_flags = ExperimentRequest.from_mapping({"--system": "dgx-h100", "num-gpus": 16, "plan": "tp=8;tp=4,pp=4"})
    assert from_csv == exp == from_dict
    assert from_flags.num_gpus == 16 and from_flags.plans == ("tp=8", "tp=4,pp=4")
    assert CrossoverRequest.from_argv(req.command()) == req  # the command it shows asks the same
    assert from_dict.build().experiment == exp.build().experiment


def test_a_bad_field_is_one_line_naming_it():
    with pytest.raises(SpecError, match="workload: 'training' is not allowed; use one of train, forward"):
        ExperimentRequest(workload="training")
    with pytest.raises(SpecError, match="did you mean 'global_batch'"):
        ExperimentRequest.from_mapping({"global_bach": 4})
    with pytest.raises(SpecError, match=r"--factor: 0\.5 is not allowed"):
        SensitivityRequest(factor=0.5)
    with pytest.raises(SpecError, match="--vary: give at least one variable"):
        SweepRequest()


def test_crossover_json_is_the_requests_answer(cli):
    code, out, err = cli([*CROSSOVER, "--json"])
    assert code == 0, err
    answer = CrossoverRequest.from_argv(CROSSOVER).run()
    from shardwise import export

    assert json.loads(out) == json.loads(export.dumps(answer.as_dict()))
    crossing = json.loads(out)["crossings"]
    assert json.loads(out)["command"].startswith("shardwise crossover --system dgx-h100")
    assert isinstance(crossing, list)


def test_sweep_and_sensitivity_answers_equal_the_command_lines(cli, tmp_path):
    argv = ["sweep", "--plan", "tp=8", "--plan", "pp=8", "--vary", "batch=1..16", "--vary", "layers=8,16,32"]
    path = tmp_path / "grid.csv"
    code, _, err = cli([*argv, "-o", str(path), "--breakdown"])
    assert code == 0, err
    from shardwise.explore import runner

    outcome = runner.run([*argv, "--breakdown", "--csv", "grid.csv"])
    assert outcome.error is None and outcome.table == path.read_text()
    swept = SweepRequest.from_argv([*argv, "--breakdown"]).run()
    assert outcome.data["winner_cells"] == swept.as_dict()["winner_cells"]
    sens = ["sensitivity", "--layers-values", "8,16,32", "--hidden-values", "1024,4096", "--max-batch", "64"]
    code, out, err = cli([*sens, "--json"])
    assert code == 0, err
    answer = SensitivityRequest.from_argv(sens)
    assert answer.max_batch == 64 and SensitivityRequest.from_argv(answer.command()) == answer
    from shardwise import export

    assert json.loads(out) == json.loads(export.dumps(answer.run().as_dict()))


SERVE = ["serve", "--model", "llama3-70b", "--system", "dgx-h100", "--plan", "tp=8", "--plan", "tp=2,pp=4"]


def test_serve_json_is_the_requests_answer_and_round_trips(cli):
    argv = [*SERVE, "--concurrency", "16", "--weight-precision", "fp8", "--requests", "200"]
    code, out, err = cli([*argv, "--json"])
    assert code == 0, err
    req = ServeRequest.from_argv(argv)
    assert req.concurrency == 16 and req.plans == ("tp=8", "tp=2,pp=4") and req.target.system == "dgx-h100"
    assert ServeRequest.from_argv(req.command()) == req
    from shardwise import export

    assert json.loads(out) == json.loads(export.dumps(req.run().as_dict()))
    same = ServeRequest(
        TrainingRequest(model="llama3-70b", system="dgx-h100"),
        plans=("tp=8", "tp=2,pp=4"),
        concurrency="16",
        weight_precision="FP8",
        requests=200,
    )
    assert same == req
    with pytest.raises(SpecError, match="--tp: not an option of serve"):
        ServeRequest.from_argv([*SERVE, "--tp", "2"])


def test_serve_without_a_plan_compares_the_machines_layouts(cli):
    argv = ["serve", "--model", "llama3-70b", "--system", "dgx-h100", "--requests", "100"]
    code, out, err = cli([*argv, "--json"])
    assert code == 0, err
    data = json.loads(out)
    plans = [p["plan"] for p in data["plans"]]
    # every tp in the server times every pp dividing what is left: 4 + 3 + 2 + 1 on 8 GPUs
    assert data["compared_layouts"] is True and len(plans) == 10 and "tp=8" in plans and "tp=1,pp=8" in plans
    fits = [p for p in data["plans"] if p["fits_in_memory"]]
    assert data["best"]["latency"] == min(fits, key=lambda p: p["e2e_s"])["plan"]
    capacity = data["best"]["capacity_tokens_per_s"]
    assert data["best"]["throughput"] == max((p["plan"] for p in fits), key=lambda k: capacity[k])
    assert capacity["tp=1"] is None  # 141 GB of weights per GPU: does not fit, not a candidate
    code, text, err = cli(argv)
    assert code == 0, err
    assert f"best for latency: {data['best']['latency']} (" in text
    assert f"best for throughput: {data['best']['throughput']} (" in text
    code, out, _ = cli([*SERVE, "--requests", "100", "--json"])  # given plans are what is priced
    assert json.loads(out)["compared_layouts"] is False and len(json.loads(out)["plans"]) == 2


def test_the_explorer_never_runs_the_command_line(monkeypatch):
    """Every page's command is answered through its request: the command line is never entered."""
    import shardwise.cli

    def refuse(*args, **kwargs):
        raise AssertionError("the explorer ran the command line")

    monkeypatch.setattr(shardwise.cli, "main", refuse)
    from shardwise.explore import pages, runner, state

    values = dict(state.DEFAULTS)
    for page, command in pages.COMMANDS.items():
        args = command(values)
        if page == "serving":
            args = [*args, "--requests", "100"] if "--requests" in runner.RUNNABLE["serve"] else args
        outcome = runner.run([*args, "--json"])
        assert outcome.error is None, (page, outcome.error)
        assert outcome.data is not None


def test_the_json_outputs_say_the_unit_of_each_swept_variable():
    """crossover's values and crossings, sensitivity's bars and sweep's ranges (all SI since review 40
    #11; sweep's were in the display units it prints) carry their unit: a bandwidth of 1e10 or of
    10.0 is otherwise a guess."""
    exp = ExperimentRequest(plans=("tp=8", "pp=8"))
    crossing = CrossoverRequest(exp, vary="bandwidth=10GB/s..900GB/s").run().as_dict()
    assert crossing["unit"] == "B/s" and crossing["values"][0] == pytest.approx(1e10)
    batch = CrossoverRequest(exp, vary="batch=1..8").run().as_dict()
    assert batch["unit"] == "sequences"
    summary = SweepRequest(exp, vary=("batch=1..4", "bandwidth=10GB/s..900GB/s")).run().as_dict()
    assert summary["units"] == {"batch": "sequences", "bandwidth": "B/s"}
    assert summary["variables"]["bandwidth"][:2] == pytest.approx([1e10, 9e11])
    assert summary["variables"]["batch"] == [1, 4, 4] and all(type(v) is int for v in summary["variables"]["batch"])
    bars = SensitivityRequest(exp).run().as_dict()["one_at_a_time"]
    units = {b["input"]: b["unit"] for bars_of_link in bars.values() for b in bars_of_link["bars"]}
    assert units["bandwidth"] == "B/s" and units["latency"] == "s" and units["peak_flops"] == "FLOP/s"


@pytest.mark.parametrize(
    ("vary", "given", "flag"),
    [("batch=1..16", {"global_batch": 16}, "--global-batch 16"), ("layers=8..32", {"layers": 12}, "--layers 12")],
)
def test_a_flag_that_the_swept_variable_replaces_is_named_in_a_note(vary, given, flag):
    """--global-batch with --vary batch (--layers with --vary layers, ...) changes nothing: a note
    says so, in the JSON and on stderr, instead of the value being dropped silently."""
    exp = ExperimentRequest(plans=("tp=8", "pp=8"), **given)
    crossing = CrossoverRequest(exp, vary=vary).run()
    assert any(n.startswith(f"{flag} is not used") for n in crossing.notes)
    assert crossing.as_dict()["notes"] == list(crossing.notes)
    swept = SweepRequest(exp, vary=(vary,)).run()
    assert any(n.startswith(f"{flag} is not used") for n in swept.notes)
    plain = CrossoverRequest(ExperimentRequest(plans=("tp=8", "pp=8")), vary=vary).run()
    assert not any("is not used" in n for n in plain.notes)
