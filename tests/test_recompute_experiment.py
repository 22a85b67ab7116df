"""crossover, sweep and sensitivity price a training step's recompute as predict does: the stack's
default where neither --recompute nor a plan's `recompute=` key sets it (`stack_defaults.resolve_recompute`;
torchtitan: per-op selective, main's SelectiveAC; a framework file's every-N-th-layer default, as
torchtitan before pytorch/torchtitan#2357: every second layer of a dense model recomputed whole), and
their header, JSON and CSV name the framework and the recompute priced."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from shardwise.cli import cli as main
from shardwise.requests import TrainingRequest
from shardwise.requests.compare import CrossoverRequest, ExperimentRequest, SweepRequest
from shardwise.requests.training import PredictRequest

BASE = {"model": "llama3-8b", "system": "dgx-h100"}
# torchtitan before pytorch/torchtitan#2357: every second layer whole (`default_recompute_every: 2`)
OLD = str(Path(__file__).parents[1] / "examples" / "frameworks" / "torchtitan-before-2357.yaml")


def _predict(framework: str, batch: int, **fields: object) -> PredictRequest:
    # crossover's plans are taken as written: sequence parallelism off, ZeRO-0
    req = TrainingRequest(**BASE, framework=framework, global_batch=batch, sequence_parallel=False, zero=0, **fields)
    return PredictRequest(req).run()


@pytest.mark.parametrize("framework", ["torchtitan", OLD, "maxtext", "megatron-core"])
@pytest.mark.parametrize(("plan", "layout"), [("tp=8", {"tp": 8}), ("tp=2,pp=4", {"tp": 2, "pp": 4})])
def test_crossover_prices_the_stacks_default_as_predict(framework, plan, layout):
    exp = ExperimentRequest(**BASE, framework=framework, plans=(plan,))
    series = CrossoverRequest(exp, vary="batch=16,32").run().result.series[0]
    for batch, seconds in zip((16, 32), series.time_s, strict=True):
        assert seconds == pytest.approx(_predict(framework, batch, **layout).step_time_s, rel=1e-9)


@pytest.mark.parametrize("framework", ["torchtitan", OLD])
def test_torchtitans_default_recomputes_and_a_plan_key_overrides_it(framework):
    exp = ExperimentRequest(**BASE, framework=framework, plans=("pp=8", "pp=8,recompute=none"))
    default, none = CrossoverRequest(exp, vary="batch=16").run().result.series
    assert default.time_s[0] > none.time_s[0]  # the recomputed work again (element-wise, or layers whole)
    assert none.time_s[0] == pytest.approx(_predict(framework, 16, pp=8, recompute="none").step_time_s, rel=1e-9)
    given = ExperimentRequest(**BASE, framework=framework, plans=("pp=8",), recompute="none")
    assert CrossoverRequest(given, vary="batch=16").run().result.series[0].time_s[0] == pytest.approx(none.time_s[0])


def test_a_sweep_over_layers_counts_each_depths_recomputed_layers():
    """The count follows the swept depth: floor(layers / pp / 2), as predict's plan has it."""
    exp = ExperimentRequest(**BASE, framework=OLD, plans=("tp=2,pp=4",))
    result = SweepRequest(exp, ("layers=16,32,48",)).run().result
    times = result.times_s[(result.links[0], "tp=2,pp=4")]
    for layers, seconds in zip((16, 32, 48), times, strict=True):
        p = _predict(OLD, 8, tp=2, pp=4, layers=layers)
        assert int(p.scenario.plan.recompute_layers) == layers // 4 // 2
        assert seconds == pytest.approx(p.step_time_s, rel=1e-9)


def test_the_header_json_and_csv_name_the_stack_and_recompute():
    args = ["--model", "llama3-8b", "--system", "dgx-h100", "--framework", "torchtitan", "--plan", "tp=8"]
    args += ["--plan", "pp=8,recompute=full"]
    out = CliRunner().invoke(main, ["crossover", *args, "--vary", "batch=8,16", "--no-plot"])
    assert out.exit_code == 0, out.output
    assert "under torchtitan, recompute selective (torchtitan's default) unless a plan says" in " ".join(
        out.output.split()
    )
    data = json.loads(CliRunner().invoke(main, ["crossover", *args, "--vary", "batch=8,16", "--json"]).stdout)
    assert (data["recompute"], data["recompute_every"]) == ("selective", 0)
    assert [s["recompute"] for s in data["series"]] == ["selective", "full"]
    old = "torchtitan-before-2357"
    args[5] = OLD
    out = CliRunner().invoke(main, ["crossover", *args, "--vary", "batch=8,16", "--no-plot"])
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.split())
    assert f"under {old}, recompute every second layer whole ({old}'s default) unless a plan says" in text
    data = json.loads(CliRunner().invoke(main, ["crossover", *args, "--vary", "batch=8,16", "--json"]).stdout)
    assert (data["framework"], data["recompute"], data["recompute_every"]) == (old, "none", 2)
    assert data["recompute_source"] == "framework default"
    assert [s["recompute"] for s in data["series"]] == ["every-second-layer", "full"]
    rows = list(csv.DictReader(io.StringIO(CliRunner().invoke(main, ["crossover", *args, "-o", "-"]).stdout)))
    assert {(r["plan"], r["framework"], r["recompute"]) for r in rows} == {
        ("tp=8", old, "every-second-layer"),
        ("pp=8,recompute=full", old, "full"),
    }
    out = CliRunner().invoke(main, ["sweep", *args, "--vary", "batch=8,16", "--json"])
    data = json.loads(out.stdout)
    assert (data["framework"], data["recompute_source"]) == (old, "framework default")
    assert data["recompute_by_plan"] == {"tp=8": "every-second-layer", "pp=8,recompute=full": "full"}
    out = CliRunner().invoke(main, ["sweep", *args, "--vary", "batch=8", "-o", "-"])
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    assert rows[0]["framework"] == old and rows[0]["recompute[tp=8]"] == "every-second-layer"
    out = CliRunner().invoke(main, ["sensitivity", *args[:-2], "--plan", "pp=8", "--json", "--no-plot"])
    data = json.loads(out.stdout)
    assert (data["framework"], data["recompute"]) == (old, "none")
    assert data["recompute_source"] == "framework default"
    given = CliRunner().invoke(main, ["sweep", *args, "--recompute", "selective", "--vary", "batch=8", "--json"])
    assert json.loads(given.stdout)["recompute_source"] == "--recompute"


def test_a_mixture_of_experts_says_the_every_nth_layer_default_is_not_priced():
    exp = ExperimentRequest(model="mixtral-8x7b", system="dgx-h100", framework=OLD, plans=("tp=8,sp=on",))
    built = exp.build()
    assert any("not priced for a mixture of experts" in n for n in built.notes)
    assert "every-second-layer default not priced" in built.describe()
    answer = CrossoverRequest(exp, vary="batch=8").run()
    assert answer.as_dict()["series"][0]["recompute"] == "none"
    assert np.isfinite(answer.result.series[0].time_s[0])
    titan = ExperimentRequest(model="mixtral-8x7b", system="dgx-h100", framework="torchtitan", plans=("tp=8,sp=on",))
    assert not any("not priced" in n for n in titan.build().notes)  # main's per-op default is priced
    assert CrossoverRequest(titan, vary="batch=8").run().as_dict()["series"][0]["recompute"] == "selective"


def test_serving_workloads_name_no_recompute():
    exp = ExperimentRequest(**BASE, framework="torchtitan", plans=("tp=8",), workload="decode")
    data = CrossoverRequest(exp, vary="batch=8").run().as_dict()
    assert data["framework"] == "torchtitan" and "recompute" not in data
    assert data["series"][0]["recompute"] == ""


def test_plan_json_and_csv_name_the_framework_and_where_recompute_came_from():
    """`plan` searches the recompute mode (each row's `recompute` and `recompute_layers`); its JSON
    and CSV name the stack searched under, and the JSON whether the mode was searched or given."""
    args = ["plan", "--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", "16", "--top", "2"]
    data = json.loads(CliRunner().invoke(main, [*args, "--framework", "torchtitan", "--json"]).stdout)
    assert (data["framework"], data["recompute_source"]) == ("torchtitan", "searched")
    assert all("recompute" in row and "recompute_layers" in row for row in data["plans"])
    data = json.loads(CliRunner().invoke(main, [*args, "--recompute", "full", "--json"]).stdout)
    assert (data["framework"], data["recompute_source"]) == ("megatron-core", "--recompute")
    assert {row["recompute"] for row in data["plans"]} == {"full"}
    out = CliRunner().invoke(main, [*args, "--framework", "maxtext", "-o", "-"])
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    assert rows and {r["framework"] for r in rows} == {"maxtext"} and "recompute" in rows[0]


def test_sweeps_text_and_timelines_json_name_the_recompute():
    args = ["--model", "llama3-8b", "--system", "dgx-h100", "--framework", OLD]
    out = CliRunner().invoke(
        main, ["sweep", *args, "--plan", "tp=8", "--plan", "pp=8,recompute=full", "--vary", "batch=8"]
    )
    text = " ".join(out.output.split())
    assert "priced under torchtitan-before-2357; recompute (the stack's default" in text
    assert "tp=8 every-second-layer, pp=8,recompute=full full" in text
    out = CliRunner().invoke(main, ["timeline", *args, "--global-batch", "16", "--pp", "2", "--json"])
    data = json.loads(out.stdout)
    assert (data["framework"], data["recompute"], data["recompute_layers"]) == ("torchtitan-before-2357", "none", 8)
    assert data["recompute_source"] == "framework default"
    out = CliRunner().invoke(main, ["timeline", *args[:5], "torchtitan", "--global-batch", "16", "--pp", "2", "--json"])
    data = json.loads(out.stdout)
    assert (data["framework"], data["recompute"], data["recompute_layers"]) == ("torchtitan", "selective", 0)
