"""What a new user met in the seventh walkthrough and it left unfixed: one output convention each
(units in the presets tables, whole bytes in JSON, flags and columns the sibling commands have,
one wording for a CSV's line, one name for the expert-TP degree, one plan label), each with a test
that failed before its fix."""

from __future__ import annotations

import json
import re

import pytest


def test_presets_tables_print_sizes_and_rates_as_the_other_commands_do(cli):
    """`presets gpus` printed the YAML's '79.35GiB' and '2.039TB/s' with no space; predict prints the
    GPU's memory as '79.11 GiB' and every command a rate as '3.35 TB/s' (`shardwise.units`)."""
    code, out, _ = cli(["presets", "gpus"])
    assert code == 0
    h100 = next(line for line in out.splitlines() if line.split()[:1] == ["h100-sxm5-80gb"])
    assert "79.11 GiB" in h100 and "3.35 TB/s" in h100 and "989 TFLOP/s" in h100
    code, out, _ = cli(["presets", "links"])
    nvlink4 = next(line for line in out.splitlines() if line.split()[:1] == ["nvlink4"])
    assert "450 GB/s" in nvlink4 and "1 µs" in nvlink4
    # no number glued to its unit anywhere in the compact tables
    code, out, _ = cli(["presets"])
    assert not re.search(r"\d(GiB|GB|TB/s|GB/s|TFLOPS|us)\b", out)


def test_json_gives_the_gpu_memory_in_whole_bytes(cli):
    """The H100's 79.11 GiB came out as 84943715696.64 bytes in predict's JSON; whole bytes now,
    rounded at output (the estimate's capacity is the preset's, unrounded, so no prediction moves)."""
    from shardwise import presets

    args = ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--tp", "8", "--global-batch", "8"]
    code, out, err = cli([*args, "--json"])
    assert code == 0, err
    data = json.loads(out)
    exact = float(presets.gpu("h100-sxm5-80gb").memory_bytes)
    assert exact != int(exact)  # the preset's GiB is a fraction of a byte
    assert data["gpu_memory_bytes"] == round(exact) and isinstance(data["gpu_memory_bytes"], int)
    assert data["scenario"]["cluster"]["gpu"]["memory_bytes"] == round(exact)


def test_sweep_has_no_plot_as_crossover_and_sensitivity_have(cli, tmp_path, monkeypatch):
    """`sweep --no-plot` was "no such option"; it writes no figure whatever --plot says, as
    crossover's and sensitivity's do (and so --plot's two-variable check does not apply)."""
    monkeypatch.chdir(tmp_path)
    grid = ["sweep", "--vary", "batch=1..8", "--vary", "bandwidth=1GB/s..900GB/s:4", "--json"]
    code, out, err = cli([*grid, "--plot", "w.png", "--no-plot"])
    assert code == 0, err
    assert json.loads(out)["variables"] and not (tmp_path / "w.png").exists()
    code, _, err = cli(["sweep", "--vary", "batch=1..8", "--plot", "w.png", "--no-plot", "--json"])
    assert code == 0, err


def test_plan_csv_has_the_interval_and_etp_columns_of_its_json_rows(cli, tmp_path):
    """`plan -o X.csv` lacked step_time_s_low/high and etp, which its JSON rows have; every
    evaluated plan has them now, the best plans' values the same as the JSON's."""
    import csv

    path = tmp_path / "plans.csv"
    args = ["plan", "--model", "mixtral-8x7b", "--system", "dgx-h100", "--nodes", "2", "--global-batch", "64"]
    code, out, err = cli([*args, "--top", "2", "--json", "-o", str(path)])
    assert code == 0, err
    rows = list(csv.DictReader(path.open()))
    assert {"step_time_s_low", "step_time_s_high", "etp"} <= set(rows[0])
    keys = ("tp", "pp", "dp", "ep", "cp", "vpp", "micro_batch", "zero_stage", "recompute", "recompute_layers")
    for best in json.loads(out)["plans"]:
        same = [r for r in rows if all(r[k].lower() == str(best[k]).lower() for k in (*keys, "schedule"))]
        assert len(same) == 1, best["command"]
        for key in ("step_time_s_low", "step_time_s", "step_time_s_high"):
            assert abs(float(same[0][key]) / best[key] - 1) < 1e-5, key
        assert int(same[0]["etp"]) == best["etp"]
    priced = [r for r in rows if r["step_time_s"] not in ("", "nan", "inf")]
    assert all(float(r["step_time_s_low"]) < float(r["step_time_s"]) < float(r["step_time_s_high"]) for r in priced)


def test_csv_errors_name_the_file_line_an_editor_shows(cli, tmp_path):
    """--lengths said "row 2" where calibrate said "line 2" of the same file line; both say "line N"
    now, N counting every line of the file (a blank line before the bad row included)."""
    lengths = tmp_path / "lengths.csv"
    lengths.write_text("input_len,output_len\n100,50\n\n100,x\n")
    serve = ["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--num-gpus", "8", "--plan", "tp=8"]
    code, _, err = cli([*serve, "--lengths", str(lengths)])
    assert code == 2 and f"--lengths {lengths} line 4: output_len 'x'" in err and "row" not in err
    runs = tmp_path / "runs.csv"
    header = "id,model,system,num_gpus,tp,pp,dp,micro_batch,global_batch,step_time_s"
    runs.write_text(f"{header}\na,llama3-8b,dgx-h100,8,1,1,8,1,64,1.0\n\nb,llama3-8b,dgx-h100,8,1,1,8,1,64,x\n")
    code, _, err = cli(["calibrate", str(runs), "-o", str(tmp_path / "cal.yaml")])
    assert code == 2 and f"{runs} line 4:" in err, err


def test_predict_plan_serve_name_the_expert_tp_degree_etp_in_json(cli):
    """predict's JSON said scenario.plan.expert_tp where plan's rows and serve's plans say etp (and
    the flag is --etp): one name, `etp`, the derived degree (tp where the plan does not set it)."""
    moe = ["--model", "mixtral-8x7b", "--system", "dgx-h100"]
    code, out, err = cli(["predict", *moe, "--tp", "2", "--ep", "4", "--global-batch", "64", "--json"])
    assert code == 0, err
    plan = json.loads(out)["scenario"]["plan"]
    assert plan["etp"] == 2 and "expert_tp" not in plan
    code, out, err = cli(["predict", *moe, "--tp", "2", "--ep", "4", "--etp", "1", "--global-batch", "64", "--json"])
    assert code == 0, err
    assert json.loads(out)["scenario"]["plan"]["etp"] == 1
    code, out, err = cli(["serve", *moe, "--num-gpus", "8", "--plan", "tp=2,ep=4", "--json"])
    assert code == 0, err
    assert json.loads(out)["plans"][0]["etp"] == 2


def test_serve_labels_plans_the_same_in_both_its_tables(cli, monkeypatch):
    """serve's latency-target table said "tp=1,pp=1 (x8)" where its main table says "tp=1 (x8
    replicas)": one label, the --plan syntax (no pp=1) and the replicas spelt out, in both."""
    monkeypatch.setenv("COLUMNS", "200")  # the plan column folds long names on a narrow terminal
    base = ["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--num-gpus", "8"]
    code, main, err = cli(base)
    assert code == 0, err
    code, targets, err = cli([*base, "--ttft-max", "1s", "--tpot-max", "50ms"])
    assert code == 0, err
    for out in (main, targets):
        assert "tp=1 (x8 replicas)" in out and "tp=1,pp=2 (x4 replicas)" in out
        assert "pp=1" not in out and not re.search(r"\(x\d+\)", out)


@pytest.mark.slow
def test_validate_public_shows_progress_while_it_prices_the_runs(cli, monkeypatch):
    """`validate public` priced ~1,300 rows twice (20-30 s) with nothing on the screen; a rich bar
    on stderr now counts them (drawn only where stderr is a terminal, as sweep's; none with --json),
    and stdout is what it was."""
    from contextlib import contextmanager

    from shardwise.analyses import loso
    from shardwise.analyses import public_validation as pv
    from shardwise.cli import render

    seen: list[tuple[int, bool, list[int]]] = []

    @contextmanager
    def bar(total, label, disable=False):
        steps: list[int] = []
        seen.append((total, disable, steps))
        yield steps.append

    monkeypatch.setattr(render, "progress_bar", bar)
    pv.validate_public.cache_clear()
    loso.priced_rows.cache_clear()
    code, out, err = cli(["validate", "public"])
    assert code == 0, err
    (total, disable, steps), rows = seen[0], len(pv.raw_rows())
    assert total == 2 * rows == sum(steps) and not disable
    assert "leave one source out" in out and "pricing" not in out
    code, out, err = cli(["validate", "public", "--json"])
    assert code == 0 and seen[1][1] is True and json.loads(out)["leave_one_source_out"]
