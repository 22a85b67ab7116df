"""One convention across the commands' outputs: the same thing under the same key and unit in
every --json, an object at the top of every --json, and one rule for a missing number in every
CSV (an empty field). Cheap: functions, not the command line, where they can be."""

from __future__ import annotations

import csv
import io
import json

import numpy as np


def test_plan_rows_write_memory_as_predict_does():
    """`plan --json`'s plans carry `memory_bytes` as `predict --json` does: a dict of parts with its
    `total` (it was the total alone, the parts under `memory_breakdown_bytes`), the same numbers as the
    row's `predict` command gives."""
    from shardwise import export
    from shardwise.requests import PlanRequest, PredictRequest

    result = PlanRequest.from_argv(
        ["--model", "llama3-8b", "--system", "dgx-a100", "--global-batch", "64", "--top", "2"]
    ).run()
    rows = result.as_dict()["plans"]
    assert rows
    for row in rows:
        assert "memory_breakdown_bytes" not in row
        again = export.estimate_dict(PredictRequest.from_argv(row["command"]).run().estimate)["memory_bytes"]
        assert set(row["memory_bytes"]) == set(again) and "total" in again
        for key, value in again.items():
            assert np.isclose(row["memory_bytes"][key], value, rtol=1e-9), key


def test_crossover_json_breakdown_is_in_seconds_under_a_unit_key():
    """Each crossing's terms sit under `breakdown_s` (seconds, as `predict --json`'s `breakdown_s`),
    not under a bare `breakdown`."""
    from shardwise.requests import CrossoverRequest

    data = CrossoverRequest.from_argv(["--vary", "batch=1..32"]).run().as_dict()
    assert data["crossings"]
    for c in data["crossings"]:
        assert "breakdown" not in c
        parts = c["breakdown_s"]
        assert set(parts) == {c["faster_below"], c["faster_above"]}
        for terms in parts.values():
            assert "compute" in terms and all(v >= 0 for v in terms.values())


def test_validate_planner_json_is_an_object(cli, monkeypatch):
    """`validate planner --json` prints an object (rows and the summary), as every other --json does,
    not a bare list."""
    from shardwise.analyses import plan_validation

    run_id = next(r for r, row in plan_validation.measured_runs().items() if row["group"] in plan_validation.TABLES)
    monkeypatch.setattr(plan_validation, "compare_published", lambda: [plan_validation.compare_run(run_id)])
    code, out, err = cli(["validate", "planner", "--json"])
    assert code == 0, err
    data = json.loads(out)
    assert isinstance(data, dict)
    assert [r["run_id"] for r in data["rows"]] == [run_id]
    assert data["runs"] == 1 and data["same_layout"] in (0, 1) and "planner" in data["summary"]


def test_a_missing_number_is_an_empty_csv_field_in_every_table():
    """`tables` (sweep's and plan's CSV) writes a missing number (NaN) as an empty field, as crossover's
    CSV does, not `nan`; an infinity (a sweep's margin where one plan alone is valid) stays `inf`;
    the same in a long column, whose distinct values are formatted once."""
    from shardwise.tables import csv_text

    for n in (3, 400):
        values = np.resize(np.array([1.5, np.nan, np.inf]), n)
        text = csv_text({"x": values, "k": np.arange(n)})
        rows = list(csv.DictReader(io.StringIO(text, newline="")))
        assert [r["x"] for r in rows[:3]] == ["1.5", "", "inf"]
        assert "nan" not in text


def test_a_sweep_and_a_crossover_leave_the_same_invalid_point_empty():
    """pp=8 over 4 layers breaks a layout rule: sweep's CSV and crossover's CSV both leave its time empty."""
    from shardwise.analyses.sweep import run_sweep
    from shardwise.requests import CrossoverRequest, SweepRequest
    from shardwise.tables import csv_text

    argv = ["--vary", "layers=4,16", "--plan", "tp=8", "--plan", "pp=8"]
    crossover = CrossoverRequest.from_argv(argv).run().csv_text()
    rows = [r for r in csv.DictReader(io.StringIO(crossover)) if r["plan"] == "pp=8" and r["layers"] == "4"]
    assert rows and all(r["time_s"] == "" and r["valid"] == "false" for r in rows)

    request = SweepRequest.from_argv(argv)
    exp = request.experiment.build().experiment
    result = run_sweep(exp, request.grid())
    swept = list(csv.DictReader(io.StringIO(csv_text(dict(result.columns())))))
    four = [r for r in swept if r["layers"] == "4"]
    assert four and all(r["time_s[pp=8]"] == "" for r in four)


def test_predict_json_has_tokens_per_s_per_gpu_as_plan_rows_do():
    """`plan --json`'s rows and calibrate's CSV say `tokens_per_s_per_gpu`; `predict --json` had only
    the cluster's `tokens_per_s`. The same numbers, and the same interval, in both."""
    from shardwise.requests import PlanRequest, PredictRequest

    row = PlanRequest.from_argv(["--model", "llama3-8b", "--system", "dgx-a100", "--global-batch", "64", "--top", "1"])
    best = row.run().as_dict()["plans"][0]
    data = PredictRequest.from_argv(best["command"]).run().as_dict()
    assert np.isclose(data["tokens_per_s_per_gpu"], data["tokens_per_s"] / 8, rtol=1e-12)
    for key in ("tokens_per_s_per_gpu", "tokens_per_s_per_gpu_low", "tokens_per_s_per_gpu_high"):
        assert np.isclose(data[key], best[key], rtol=1e-9), key
