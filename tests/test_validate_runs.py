"""`shardwise validate --runs FILE`: your own runs against the model (`analyses.runs_check`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

RUNS = """id,model,system,num_gpus,tp,pp,micro_batch,global_batch,framework,step_time_s,group
a,llama3-8b,dgx-h100,8,1,1,1,64,megatron-core,9.0,lab
b,llama3-8b,dgx-h100,8,2,1,1,64,megatron-core,8.0,lab
c,llama3-8b,dgx-h100,8,4,1,2,64,megatron-core,10.0,lab
d,llama3-8b,dgx-h100,8,1,1,1,64,fsdp,3.0,other
"""


@pytest.fixture()
def runs_csv(tmp_path):
    path = tmp_path / "runs.csv"
    path.write_text(RUNS)
    return str(path)


def test_each_run_is_what_predict_says_with_its_interval(cli, runs_csv):
    code, out, err = cli(["validate", "--runs", runs_csv, "--json"])
    assert code == 0, err
    d = json.loads(out)
    by_id = {r["id"]: r for r in d["runs"]}
    predict = ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--nodes", "1", "--global-batch", "64"]
    code, out, err = cli([*predict, "--tp", "2", "--json"])
    assert code == 0, err
    p = json.loads(out)
    b = by_id["b"]
    assert b["predicted"] == pytest.approx(p["step_time_s"], rel=1e-9)
    assert (b["predicted_low"], b["predicted_high"]) == (
        pytest.approx(p["step_time_s_low"]),
        pytest.approx(p["step_time_s_high"]),
    )
    assert b["error"] == pytest.approx(b["predicted"] / 8.0 - 1.0)
    assert b["covered"] == (b["predicted_low"] <= 8.0 <= b["predicted_high"])
    # per group, then all runs; MAPE and bias from the runs' errors
    groups = {g["name"]: g for g in d["groups"]}
    assert set(groups) == {"lab", "other", "all runs"} and groups["lab"]["runs"] == 3
    errors = [by_id[i]["error"] for i in "abc"]
    assert groups["lab"]["mean_absolute_error"] == pytest.approx(sum(abs(e) for e in errors) / 3)
    assert groups["lab"]["bias"] == pytest.approx(sum(errors) / 3)
    assert groups["other"]["stacks"] == "fsdp"
    # the lab's three layouts of one model on one cluster are ranked; the fsdp run alone is not
    (rank,) = d["ranking_within_groups"]
    assert rank["layouts"] == 3 and rank["group"].startswith("lab: llama3-8b, ")
    measured_tps = {i: 64 * 8192 / 8 / t for i, t in zip("abc", (9.0, 8.0, 10.0), strict=True)}
    assert max(measured_tps, key=measured_tps.get) == "b" and "tp2" in rank["measured_best"]
    assert not math.isnan(rank["spearman"]) and rank["regret"] >= 0.0


def test_the_tables_and_rows(cli, runs_csv):
    code, out, err = cli(["validate", "--runs", runs_csv, "--rows", "all"])
    assert code == 0, err
    words = " ".join(out.split())  # the notes wrap at the terminal's width
    assert "80% covers" in out and "all runs" in out and "top-1 regret" in words
    assert "uncalibrated: how far the model missed" in words
    assert "a (" in out and "measured 9 s" in out
    # a run without an id is named by its place once (it read 'runs.csv line 2 (runs.csv line 2)')
    path = Path(runs_csv).with_name("no_ids.csv")
    path.write_text("\n".join(line.split(",", 1)[1] for line in Path(runs_csv).read_text().splitlines()))
    code, out, err = cli(["validate", "--runs", str(path), "--rows", "all"])
    assert code == 0, err
    assert "no_ids.csv line 2 tp" in out and "line 2 (" not in out
    # with no group of 3 layouts there is no ranking table, and the note says so (it explained the regret)
    path.write_text("\n".join(Path(runs_csv).read_text().splitlines()[:3]))
    code, out, err = cli(["validate", "--runs", str(path)])
    assert code == 0 and "none is ranked" in " ".join(out.split()) and "top-1 regret" not in out, err
    code, out, err = cli(["validate", "--runs", runs_csv, "--markdown"])
    assert code == 0, err
    assert "| group | stack | runs | MAPE |" in out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["public"], "give no table names"),
        (["--calibrated"], "give no table names, --calibrated or --plot"),
        (["--plot", "x.png"], "give no table names, --calibrated or --plot"),
    ],
)
def test_bad_combinations_are_one_line(cli, runs_csv, extra, message):
    code, _, err = cli(["validate", "--runs", runs_csv, *extra])
    assert code == 2 and message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_calibration_needs_runs_and_a_bad_file_is_one_line(cli, tmp_path, runs_csv):
    code, _, err = cli(["validate", "--calibration", str(tmp_path / "cal.yaml")])
    assert code == 2 and "give them with --runs FILE" in err
    bad = tmp_path / "bad.csv"
    bad.write_text("id,model,system,num_gpus,tp,pp,global_batch,step_time_s\nx,llama3-8b,dgx-h100,8,3,1,64,1.0\n")
    code, _, err = cli(["validate", "--runs", str(bad)])
    assert code == 2 and "line 2" in err and "Traceback" not in err
    code, _, err = cli(["validate", "--runs", str(tmp_path / "missing.csv")])
    assert code == 2 and "Traceback" not in err


def test_a_calibration_prices_the_runs_as_predict_does_with_it(cli, tmp_path, runs_csv):
    fit_on = tmp_path / "fit.csv"
    fit_on.write_text("\n".join(RUNS.splitlines()[:3]) + "\n")
    cal = tmp_path / "cal.yaml"
    code, _, err = cli(["calibrate", str(fit_on), "--max-params", "1", "-o", str(cal)])
    assert code == 0, err
    code, out, err = cli(["validate", "--runs", runs_csv, "--calibration", str(cal), "--json"])
    assert code == 0, err
    d = json.loads(out)
    c = next(r for r in d["runs"] if r["id"] == "c")
    predict = ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--nodes", "1", "--global-batch", "64"]
    code, out, err = cli([*predict, "--tp", "4", "--micro-batch", "2", "--calibration", str(cal), "--json"])
    assert code == 0, err
    p = json.loads(out)
    assert c["predicted"] == pytest.approx(p["step_time_s"], rel=1e-9)
    assert c["predicted_high"] == pytest.approx(p["step_time_s_high"], rel=1e-6)
    assert d["interval_basis"].startswith(f"calibration {cal}")


def test_an_empty_runs_path_is_refused_not_the_public_tables(cli):
    code, out, err = cli(["validate", "--runs", ""])
    assert code == 2 and "--runs: '' is not a file" in err and out == ""


def test_expert_parallelism_precision_and_batch_are_read_and_kept_apart(cli, tmp_path):
    """An MoE run's `ep` is priced (calibrate's CSV read it as a note), and runs that differ in
    precision or global batch are different layouts in the ranking, not one averaged."""
    path = tmp_path / "moe.csv"
    path.write_text(
        "id,model,system,num_gpus,tp,pp,global_batch,ep,precision,step_time_s,group\n"
        "e8,qwen3-30b-a3b,dgx-h100,8,1,1,64,8,bf16,3.0,g\n"
        "f8,qwen3-30b-a3b,dgx-h100,8,1,1,64,8,fp8,2.5,g\n"
        "b128,qwen3-30b-a3b,dgx-h100,8,1,1,128,8,bf16,6.0,g\n"
    )
    code, out, err = cli(["validate", "--runs", str(path), "--json"])
    assert code == 0, err
    d = json.loads(out)
    predict = ["predict", "--model", "qwen3-30b-a3b", "--system", "dgx-h100", "--nodes", "1", "--ep", "8"]
    code, out, err = cli([*predict, "--global-batch", "64", "--json"])
    assert code == 0, err
    e8 = next(r for r in d["runs"] if r["id"] == "e8")
    assert e8["predicted"] == pytest.approx(json.loads(out)["step_time_s"], rel=1e-9)
    assert "ep8" in e8["label"]
    (rank,) = d["ranking_within_groups"]
    assert rank["layouts"] == 3
    assert rank["kind"] == "mixture of experts"  # it read a `moe` attribute no Model has: "dense"


def test_serving_runs_are_priced_and_read_in_their_units(cli, tmp_path):
    path = tmp_path / "serve.csv"
    path.write_text(
        "id,model,system,tp,input_len,output_len,concurrency,tpot_s,throughput_tokens_per_s\n"
        "t,llama3-8b,dgx-h100,1,512,128,8,0.01,\n"
        "r,llama3-8b,dgx-h100,1,512,128,8,,600\n"
    )
    code, out, err = cli(["validate", "--runs", str(path), "--rows", "all"])
    assert code == 0, err
    assert "throughput_tokens_per_s measured 600, predicted" in out and "tpot_s measured 10 ms" in out
    assert "t (" in out and "512+128 tokens x 8 at once" in out  # the requests measured
    assert "static batch of `concurrency` requests" in out.replace("\n", " ")
