"""crossover, sweep, sensitivity and scenario from the command line."""

import csv
import json
import re
import subprocess
import sys

import pytest


def test_crossover_default_is_the_briefs_experiment(tmp_path, cli, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, _ = cli(["crossover"])
    assert code == 0
    assert "NVLink: tp=8 is faster below batch" in out and "PCIe:" in out
    assert (tmp_path / "crossover.png").stat().st_size > 10_000


def test_crossover_json_and_csv(cli):
    code, out, _ = cli(["crossover", "--vary", "batch=1..16", "--json"])
    data = json.loads(out)
    assert code == 0 and data["variable"] == "batch" and len(data["values"]) == 16
    assert {s["link"] for s in data["series"]} == {"NVLink", "PCIe"}
    assert data["crossings"] and data["crossings"][0]["exact"]
    code, out, _ = cli(["crossover", "--vary", "batch=1..4", "--csv", "-"])
    rows = list(csv.DictReader(out.splitlines()))
    assert code == 0 and len(rows) == 4 * 2 * 2 and {"batch", "link", "plan", "time_s", "winner"} <= set(rows[0])


def test_crossover_textbook_and_other_plans(tmp_path, cli):
    code, out, _ = cli(["crossover", "--cost-model", "textbook", "--plot", str(tmp_path / "t.svg")])
    assert code == 0 and "no crossover in this range" in out and (tmp_path / "t.svg").exists()
    code, out, _ = cli(
        [
            "crossover",
            "--plan",
            "tp=8",
            "--plan",
            "tp=2,pp=4",
            "--link",
            "pcie4",
            "--vary",
            "layers=8,16,32",
            "--workload",
            "forward",
            "--no-plot",
        ]
    )
    assert code == 0 and "tp=2,pp=4" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--vary", "speed=1..3"], "--vary 'speed=1..3'"),
        (["--plan", "tq=8"], "is not KEY=VALUE"),
        (["--link", "nvlnk3"], "closest: nvlink3"),
        (["--plot", "/no/such/dir/x.png"], "does not exist"),
        (["--plot", "x.gif"], "--plot x.gif: unknown file format"),
        (["--gpus", "0"], "--num-gpus: 0"),  # the old spelling still works, the message uses the new one
    ],
)
def test_crossover_bad_input(args, message, cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _out, err = cli(["crossover", *args])
    assert code == 2 and message in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []  # nothing half-written


def test_sweep_writes_csv_parquet_and_a_map(tmp_path, cli):
    out_csv, out_pq, out_map = tmp_path / "g.csv", tmp_path / "g.parquet", tmp_path / "m.png"
    code, out, _ = cli(
        [
            "sweep",
            "--vary",
            "batch=1..8",
            "--vary",
            "bandwidth=4GB/s..600GB/s:6",
            "--csv",
            str(out_csv),
            "--plot",
            str(out_map),
        ]
    )
    assert code == 0 and "configurations evaluated" in out
    rows = list(csv.DictReader(out_csv.read_text().splitlines()))
    assert len(rows) == 8 * 6 * 2 and rows[0]["winner_plan"] in ("tp=8", "pp=8")
    assert out_map.stat().st_size > 10_000
    code, _, _ = cli(["sweep", "--vary", "batch=1..4", "--csv", str(out_pq)])
    import pyarrow.parquet as pq

    assert code == 0 and pq.read_table(out_pq).num_rows == 4 * 2


def test_sweep_bad_input(tmp_path, cli):
    code, _, err = cli(["sweep", "--vary", "batch=1..4", "--plot", str(tmp_path / "m.png")])
    assert code == 2 and "--plot needs exactly two --vary" in err
    code, _, err = cli(["sweep", "--vary", "batch=1..4", "--csv", str(tmp_path / "g.xlsx")])
    assert code == 2 and "unknown file format" in err
    assert list(tmp_path.iterdir()) == []


def test_sensitivity_and_scenario(tmp_path, cli):
    code, out, _ = cli(
        ["sensitivity", "--no-plot", "--layers-values", "8,48,96", "--hidden-values", "1024,4096", "--max-batch", "64"]
    )
    assert code == 0 and "crossover batch" in out and "hidden size" in out
    code, out, _ = cli(["sensitivity", "--json", "--layers-values", "96", "--hidden-values", "4096"])
    data = json.loads(out)
    assert data["crossover_batch_vs_layers"]["NVLink"][0]["crossover_batch"] == 17  # docs/brief.md shows it
    code, out, _ = cli(["scenario", "ttft", "small-batch", "--out-dir", str(tmp_path)])
    assert code == 0 and "[ttft]" in out and (tmp_path / "ttft.png").exists()


def test_json_draws_a_figure_only_when_it_is_named(tmp_path, cli, monkeypatch):
    """With --json the output is data: no default figure, but a --plot given by name is drawn (it
    was silently dropped by timeline, sensitivity and scenario; crossover drew it)."""
    monkeypatch.chdir(tmp_path)
    job = ["--model", "gpt-96l-4096h", "--layers", "8", "--system", "dgx-a100", "--pp", "2", "--global-batch", "4"]
    code, out, _ = cli(["timeline", *job, "--json"])
    assert code == 0 and json.loads(out)["stages"] == 2 and list(tmp_path.iterdir()) == []
    code, out, _ = cli(["timeline", *job, "--json", "--plot", "gantt.png"])
    assert code == 0 and json.loads(out)["stages"] == 2 and (tmp_path / "gantt.png").stat().st_size > 0
    code, _, err = cli(["scenario", "ttft", "--json", "--plot", "figures"])
    assert code == 2 and "figures does not exist" in err
    (tmp_path / "figures").mkdir()
    code, out, _ = cli(["scenario", "ttft", "--json", "--plot", "figures"])
    assert code == 0 and json.loads(out)["scenarios"][0]["name"] == "ttft"
    assert (tmp_path / "figures" / "ttft.png").exists()
    code, out, _ = cli(["sensitivity", "--json", "--layers-values", "96", "--hidden-values", "4096", "--plot", "s.png"])
    assert code == 0 and json.loads(out)["command"].startswith("shardwise sensitivity")
    assert sorted(f.name for f in tmp_path.glob("s-*.png")) == ["s-hidden.png", "s-layers.png", "s-tornado.png"]


def test_plotting_is_imported_only_when_a_figure_is_asked_for():
    code = (
        "import sys; from shardwise.cli import main\n"
        "try:\n    main(['crossover', '--no-plot'])\nexcept SystemExit: pass\n"
        "print('matplotlib' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("False")


def test_a_plan_invalid_everywhere_is_an_error_naming_the_rule(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = cli(["crossover", "--plan", "tp=3", "--plan", "pp=8"])
    assert code == 2 and "tp=3" in err and "tp x pp must divide the GPU count" in err
    code, _, err = cli(["crossover", "--json", "--csv", "-"])
    assert code == 2 and "not both" in err
    assert list(tmp_path.iterdir()) == []


def test_sensitivity_names_the_rule_an_invalid_cell_breaks(cli):
    # halving gpt-1.7b's 24 layers leaves 12 for 16 stages: the stage rule, not a divisibility one
    # (uneven splits are allowed; review 44 #14)
    code, out, _ = cli(
        ["sensitivity", "--no-plot", "--model", "gpt-1.7b", "--plan", "tp=8", "--plan", "pp=16", "--gpus", "16"]
    )
    text = " ".join(out.split())
    assert code == 0 and "invalid" in text
    assert "not possible there (every pipeline stage needs at least one layer per model chunk)" in text
    assert "divisible by pp" not in text


def test_timeline_writes_a_gantt_chart_and_a_chrome_trace(cli, tmp_path):
    png, trace = tmp_path / "t.png", tmp_path / "t.json"
    code, out, _ = cli(
        [
            "timeline",
            "--model",
            "gpt-96l-4096h",
            "--system",
            "dgx-a100",
            "--pp",
            "8",
            "--global-batch",
            "16",
            "--schedule",
            "zb-h1",
            "--plot",
            str(png),
            "--trace",
            str(trace),
        ]
    )
    assert code == 0 and "simulated step" in out and "peak micro-batches in flight" in out
    assert png.stat().st_size > 10_000
    import json

    assert json.loads(trace.read_text())["otherData"]["schedule"] == "zb-h1"
    code, out, _ = cli(
        [
            "timeline",
            "--model",
            "gpt-96l-4096h",
            "--system",
            "dgx-a100",
            "--pp",
            "4",
            "--dp",
            "2",
            "--global-batch",
            "16",
            "--json",
        ]
    )
    data = json.loads(out)
    assert code == 0 and data["stages"] == 4 and len(data["operations"]) > 0
    # the two data-parallel collectives by name (both were "dp"): the gradient reduction before the
    # optimizer, the distributed optimizer's parameter all-gather after it; the tied embeddings' sync
    after = {}
    for op in data["operations"]:
        if op["micro_batch"] < 0:
            after.setdefault(op["stage"], []).append(op)
    for stage, ops in after.items():
        kinds = [op["kind"] for op in ops]
        assert kinds == ["dp", *(["embedding-sync"] if stage in (0, 3) else []), "optimizer", "dp-gather"]
        assert ops[-1]["start_s"] == ops[-2]["end_s"]  # the gather starts where the optimizer ends
        assert ops[0]["end_s"] <= ops[1]["start_s"]  # the reduction, then the sync or optimizer
    # the sync, one collective of the end stages, from the later one's reduction; every optimizer
    # after the slowest stage (the gradient norm's all-reduce)
    syncs = {after[i][1]["start_s"] for i in (0, 3)}
    assert len(syncs) == 1 and syncs.pop() == pytest.approx(max(after[i][0]["end_s"] for i in (0, 3)))
    assert len({ops[-2]["start_s"] for ops in after.values()}) == 1


def test_predict_with_the_simulator(cli):
    import json

    args = [
        "predict",
        "--model",
        "gpt3-175b",
        "--system",
        "dgx-a100",
        "--nodes",
        "8",
        "--tp",
        "8",
        "--pp",
        "8",
        "--global-batch",
        "32",
        "--recompute",
        "full",
        "--json",
    ]
    _, analytic, _ = cli(args)
    code, simulated, _ = cli([*args, "--engine", "simulate"])
    a, s = json.loads(analytic), json.loads(simulated)
    assert code == 0 and s["engine"] == "simulate"
    assert abs(s["step_time_s"] - a["step_time_s"]) / a["step_time_s"] < 0.03


def test_timeline_bad_paths(cli, tmp_path):
    code, _, err = cli(
        [
            "timeline",
            "--model",
            "gpt-96l-4096h",
            "--system",
            "dgx-a100",
            "--pp",
            "8",
            "--global-batch",
            "8",
            "--trace",
            str(tmp_path / "x.txt"),
        ]
    )
    assert code == 2 and "unknown file format" in err


def test_old_output_flag_spellings_still_work_but_are_not_advertised(tmp_path, cli):
    out = tmp_path / "g.csv"
    code, _, _ = cli(["sweep", "--vary", "batch=1..4", "--out", str(out), "--no-progress"])
    assert code == 0 and out.exists()
    code, helptext, _ = cli(["sweep", "--help"])
    shown = set(re.findall(r"--[a-z-]+", helptext))
    assert code == 0 and "--output" in shown and "-o," in helptext
    assert not shown & {"--csv", "--out", "--map"}
    code, helptext, _ = cli(["serve", "--help"])
    assert code == 0 and "--plot-link" in helptext and "--frontier" not in helptext


def test_experiment_commands_take_nics_per_node_and_say_what_crosses_servers(cli):
    args = ["crossover", "--num-gpus", "16", "--inter-link", "eth-100g", "--vary", "batch=1..2", "--no-plot"]
    args += ["--plan", "tp=8,pp=2", "--plan", "pp=16", "--json"]
    code, out, _ = cli(args)
    code1, out1, _ = cli([*args, "--nics-per-node", "1"])
    assert code == code1 == 0
    one_nic, per_gpu = json.loads(out1), json.loads(out)
    assert "eth-100g x1/8" in one_nic["assumptions"] and "eth-100g (12.5 GB/s per GPU)" in per_gpu["assumptions"]
    slow = {s["plan"]: s["time_s"][0] for s in one_nic["series"] if s["link"] == "NVLink"}
    fast = {s["plan"]: s["time_s"][0] for s in per_gpu["series"] if s["link"] == "NVLink"}
    assert all(slow[p] > fast[p] for p in fast)  # eight GPUs share one card: every plan is slower
    code, _, err = cli([*args, "--nics-per-node", "0"])
    assert code == 2 and "--nics-per-node: 0" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--plan", "tp=²"], "--plan 'tp=²': tp=² is not allowed; use a whole number >= 1"),
        (["--plan", ""], "--plan '': empty"),
        (["--plan", "tp=8,tp=4"], "--plan 'tp=8,tp=4': tp is given twice"),
        (["--intra-link", "600"], "'600' has no unit; write a rate like 600GB/s"),
        (["--intra-link", "1e-300B/s"], "it must be between 1000 and 1e+16 B/s"),
        (["--intra-link", "nv=nvlink3,efficiency=abc"], "efficiency=abc is not allowed; give a fraction like 0.8"),
    ],
)
def test_hostile_plan_and_link_text_is_one_line(args, message, cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(["crossover", "--no-plot", *args])
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["sensitivity", "--no-plot", "--plan", "tp=3", "--plan", "pp=8"], "--plan tp=3: invalid at every batch"),
        (["sensitivity", "--no-plot", "--max-batch", "1000000000"], "at most 50,000,000"),
        (["sensitivity", "--no-plot", "--layers-values", "1..100000"], "at most 50,000,000"),
        (["crossover", "--no-plot", "--vary", "batch=1..100000", "--all-rows"], "--all-rows prints at most 2,000 rows"),
        (
            [
                "timeline",
                "--model",
                "gpt-1t",
                "--system",
                "dgx-a100",
                "--nodes",
                "8",
                "--pp",
                "64",
                "--global-batch",
                "100000",
                "--no-plot",
            ],
            "the simulation would run 12,800,000 operations",
        ),
    ],
)
def test_unbounded_work_is_refused_up_front(args, message, cli, tmp_path, monkeypatch):
    import time

    monkeypatch.chdir(tmp_path)
    start = time.perf_counter()
    code, out, err = cli(args)
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err, err
    assert time.perf_counter() - start < 30  # refused before the work, not after (a loose bound)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("model", "dp", "rest"),
    [
        ("gpt-96l-4096h", 1, "the tied embeddings' gradient sync (first and last stage) and the optimizer"),
        ("llama3-8b", 1, "the optimizer"),
        ("gpt-96l-4096h", 2, "gradient reduction and the optimizer"),
    ],
)
def test_timeline_says_what_runs_after_the_pipeline(cli, model, dp, rest):
    """With one replica there is no gradient reduction: the step after the pipeline is the tied
    embeddings' sync, where the model ties them, and the optimizer (it said "gradient reduction")."""
    job = ["timeline", "--model", model, "--system", "dgx-a100", "--pp", "4", "--dp", str(dp), "--tp", str(2 // dp)]
    code, out, err = cli([*job, "--global-batch", "8", "--no-plot"])
    assert code == 0, err
    assert f"the rest of the step is {rest}" in " ".join(out.split())
