"""Review 40's findings on the machine-readable outputs (a script writer's pass): one column set, one
cell rule, one meaning per key and one shape across the commands' CSV and JSON."""

from __future__ import annotations

import csv
import io
import json

import pytest

from shardwise.cli import serve_output


def _rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def test_serve_csv_gives_every_row_the_same_columns_whatever_it_holds():
    """A plan that does not fit has null percentiles and empty parts; its row must not add a scalar
    `percentiles_s` column beside the flattened `percentiles_s.*` (review 40 #1), and a table of
    such plans alone has the percentiles' columns too (empty)."""
    fits = {"plan": "tp=8", "decode_s": {"compute": 0.5}, "percentiles_s": {"ttft_s": {"p50": 1.0, "p90": 2.0}}}
    no = {"plan": "tp=2", "decode_s": {}, "percentiles_s": None, "launch": None}
    for plans in ([fits, no], [no, fits], [no]):
        rows = _rows(serve_output.csv_text({"model": "m", "engine": {"name": "vllm"}, "plans": plans}))
        header = rows[0]
        assert "percentiles_s" not in header and len(set(header)) == len(header)
        assert {len(r) for r in rows} == {len(header)}
        assert {f"percentiles_s.{m}.p{p}" for m in ("ttft_s", "tpot_s", "e2e_s") for p in (50, 90, 99)} <= set(header)
        assert not [name for name in header if any(other.startswith(name + ".") for other in header)]
        cells = dict(zip(header, rows[[p["plan"] for p in plans].index("tp=2") + 1], strict=True))
        assert cells["percentiles_s.ttft_s.p50"] == "" and cells["launch"] == ""


def test_serve_csv_of_a_real_answer_has_no_column_that_prefixes_another(cli):
    argv = "serve --model llama3-70b --system rtx4090-8x --plan tp=8 --plan tp=2 --concurrency 32 --csv"
    code, out, err = cli(argv.split())
    assert code == 0, err
    rows = _rows(out)
    header = rows[0]
    assert not [name for name in header if any(other.startswith(name + ".") for other in header)]
    assert {len(r) for r in rows} == {len(header)} and len(rows) == 3
    assert {r[header.index("fits_in_memory")] for r in rows[1:]} == {"true", "false"}  # tables.cell, not True
    json.loads(rows[2][header.index("memory_bytes.total")])  # whole bytes


def test_one_meaning_per_key_winner_and_fits_in_memory(cli):
    """`winner` is crossover's per-row boolean; sweep's name of the winning plan is `winner_plan`, and
    whether a plan fits is `fits_in_memory` everywhere: sweep's `fits_in_memory[PLAN]`, plan's why[]
    (review 40 #7)."""
    code, out, err = cli(["sweep", "--vary", "batch=1..2", "-o", "-", "--no-progress"])
    assert code == 0, err
    header = _rows(out)[0]
    assert "winner_plan" in header and "winner" not in header
    assert any(h.startswith("fits_in_memory[") for h in header) and not any(h.startswith("fits[") for h in header)
    assert "1" in [r[header.index("batch")] for r in _rows(out)[1:]]  # a whole-number variable written whole
    code, out, err = cli(["crossover", "--vary", "batch=1..2", "-o", "-"])
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert {r["winner"] for r in rows} <= {"true", "false"} and "fits_in_memory" in rows[0]
    code, out, err = cli(["plan", "--model", "llama3-8b", "--system", "dgx-a100", "--global-batch", "64", "--json"])
    assert code == 0, err
    why = json.loads(out)["why"]
    assert why and all("fits_in_memory" in a and "fits" not in a for a in why)


def test_validate_runs_json_uses_the_other_tables_names(cli, tmp_path):
    """`validate --runs --json`: `mean_absolute_error` (as `validate --json`), `id` (as its rows and
    calibrate's residuals), `predicted_low`/`predicted_high`, `fits_in_memory`, and null where a run
    names no group (review 40 #7, #8)."""
    path = tmp_path / "runs.csv"
    path.write_text(
        "model,system,num_gpus,tp,pp,global_batch,step_time_s,id\n"
        "llama3-8b,dgx-h100,16,1,1,128,6.1,a\nllama3-8b,dgx-h100,16,2,1,128,6.6,b\n"
    )
    code, out, err = cli(["validate", "--runs", str(path), "--json"])
    assert code == 0, err
    d = json.loads(out)
    (group,) = d["groups"]
    assert "mean_absolute_error" in group and "mape" not in group
    for run in d["runs"]:
        assert run["id"] in ("a", "b") and "run_id" not in run and "low" not in run and "fits" not in run
        assert run["predicted_low"] <= run["predicted"] <= run["predicted_high"]
        assert run["group"] is None and isinstance(run["fits_in_memory"], bool)


def test_scenario_json_is_an_object_with_notes_command_and_si_lower_case_numbers(cli):
    """`scenario --json` was a bare list with `tp_NVLink_ms` beside `tp_nvlink_ms` (review 40 #9, #11):
    an object as every --json, and each number's key lower-case with one unit suffix (seconds, not ms)."""
    code, out, err = cli(["scenario", "--no-plot", "--json", "batch1-inference", "ttft"])
    assert code == 0, err
    data = json.loads(out)
    assert set(data) == {"scenarios", "notes", "command"}
    assert data["command"] == "shardwise scenario batch1-inference ttft" and data["notes"] == []
    for report in data["scenarios"]:
        for key in report["numbers"]:
            assert key == key.lower() and not key.endswith("_ms"), key
    n = {r["name"]: r["numbers"] for r in data["scenarios"]}
    assert 1e-4 < n["ttft"]["tp_nvlink_s"] < 10 and n["batch1-inference"]["tp_nvlink_s"] < 1
    assert isinstance(n["ttft"]["pp_faster_up_to_prompt_pcie_tokens"], int)


def test_serve_targets_carry_the_header_and_model_is_one_shape(cli):
    """serve --ttft-max/--tpot-max had no model, system, gpus or engine (serve.md says each row carries
    them); `model` is an object with its `name` in serve, plan and predict alike (review 40 #9); a
    dense model's `layouts.experts` is null, not '' (#12)."""
    argv = ["serve", "--model", "llama3-70b", "--system", "rtx4090-8x", "--ttft-max", "500ms", "--tpot-max", "50ms"]
    code, out, err = cli([*argv, "--json"])
    assert code == 0, err
    data = json.loads(out)
    assert data["model"]["name"] == "llama3-70b" and data["system"] == "rtx4090-8x" and data["gpus"] == 8
    assert data["engine"]["name"] and data["layouts"]["experts"] is None
    code, out, err = cli([*argv, "-o", "-"])
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rows and all(r["model"] == "llama3-70b" and r["engine"] and r["gpus"] == "8" for r in rows)
    code, out, err = cli(["plan", "--model", "llama3-8b", "--system", "dgx-a100", "--global-batch", "64", "--json"])
    assert code == 0, err
    plan_model = json.loads(out)["model"]
    code, out, err = cli(["serve", "--model", "llama3-8b", "--system", "dgx-a100", "--plan", "tp=1", "--json"])
    assert code == 0, err
    assert json.loads(out)["model"] == plan_model


def test_presets_json_gives_quantities_in_si_under_unit_keys(cli):
    """`presets --json` gave '989.4 TFLOPS', '79.11GiB', '3.35TB/s', '400W' (review 40 #10): numbers in
    SI under unit-named keys, the GPU's as predict's `scenario.cluster.gpu` has them."""
    from shardwise import export, presets

    code, out, err = cli(["presets", "--json"])
    assert code == 0, err
    data = json.loads(out)

    def strings(obj):
        if isinstance(obj, dict):
            return [s for k, v in obj.items() if k != "source" and not k.endswith("source") for s in strings(v)]
        if isinstance(obj, list):
            return [s for v in obj for s in strings(v)]
        return [obj] if isinstance(obj, str) and obj[:1].isdigit() and obj[-1:] in "sSW" else []  # '400W', '3TB/s'

    assert strings({k: data[k] for k in ("gpus", "links", "systems", "frameworks")}) == []
    h100 = next(g for g in data["gpus"] if g["name"] == "h100-sxm5-80gb")
    want = export.gpu_dict(presets.gpu("h100-sxm5-80gb"))
    for key in ("peak_flops_per_s_16bit", "memory_bytes", "memory_bandwidth_bytes_per_s"):
        assert h100[key] == want[key], key
    assert "peak_16bit" not in h100 and "memory" not in h100
    a100 = next(g for g in data["gpus"] if g["name"] == "a100-sxm4-80gb")
    assert a100["tdp_watts"] == 400.0 and a100["l2_bytes"] == 40_000_000
    code, out, err = cli(["presets", "show", "nvlink4", "--json"])
    assert code == 0, err
    link = json.loads(out)["links"]
    assert link["bandwidth_bytes_per_s"] > 1e11 and link["latency_s"] < 1e-4


def test_a_dense_models_etp_and_an_even_split_are_null_everywhere(cli):
    """`etp` for a dense model was tp in predict, 1 or tp in plan and null in serve; an even split's
    `stage_layers` was '' in plan's rows and null in predict (review 40 #12): null in every JSON, an
    empty cell in plan's CSV."""
    dense = ["--model", "llama3-8b", "--system", "dgx-a100"]
    code, out, err = cli(["predict", *dense, "--tp", "8", "--global-batch", "64", "--json"])
    assert code == 0, err
    plan = json.loads(out)["scenario"]["plan"]
    assert plan["etp"] is None and plan["stage_layers"] is None
    code, out, err = cli(["plan", *dense, "--global-batch", "64", "--json"])
    assert code == 0, err
    rows = json.loads(out)["plans"]
    assert rows and all(r["etp"] is None for r in rows)
    assert all(r["stage_layers"] is None or (isinstance(r["stage_layers"], str) and r["stage_layers"]) for r in rows)
    code, out, err = cli(["plan", *dense, "--global-batch", "64", "-o", "-"])
    assert code == 0, err
    assert {r["etp"] for r in csv.DictReader(io.StringIO(out))} == {""}
    code, out, err = cli(["serve", *dense, "--plan", "tp=8", "--json"])
    assert code == 0, err
    assert json.loads(out)["plans"][0]["etp"] is None


def test_timeline_json_carries_each_stages_busy_seconds_and_no_float_residue(cli):
    """The text table's per-stage `busy` was only derivable from `operations`; a term of float residue
    (3.4e-16 s) is written 0; the text never prints "-0.0%" (review 40 #13)."""
    from shardwise.export import RESIDUE_S, seconds_parts

    argv = ["timeline", "--model", "gpt-96l-4096h", "--system", "dgx-a100", "--tp", "2", "--pp", "4"]
    code, out, err = cli([*argv, "--global-batch", "16", "--json"])
    assert code == 0, err
    data = json.loads(out)
    busy = [0.0] * data["stages"]
    for op in data["operations"]:
        if op["kind"] in ("F", "B", "W"):
            busy[op["stage"]] += op["end_s"] - op["start_s"]
    assert len(data["stage_busy_s"]) == data["stages"]
    for got, want in zip(data["stage_busy_s"], busy, strict=True):
        assert abs(got - want) <= 1e-9 * want
    assert all(v == 0.0 or abs(v) >= RESIDUE_S for v in data["breakdown_s"].values())
    assert seconds_parts({"dp_comm": 3.4e-16, "compute": 1.5, "x": -1e-15}) == {
        "dp_comm": 0.0,
        "compute": 1.5,
        "x": 0.0,
    }
    code, out, err = cli([*argv, "--global-batch", "16", "--no-plot"])  # its gap is -1.1e-16
    assert code == 0, err
    assert "-0.0%" not in out and "closed form" in out


def test_plan_rows_carry_the_clusters_tokens_per_s_interval_as_predict(cli):
    """plan's rows had `tokens_per_s_per_gpu_low/high` but not predict's `tokens_per_s_low/high`
    (review 40 #14): the same numbers as the row's predict command gives."""
    from shardwise.requests import PredictRequest

    code, out, err = cli(["plan", "--model", "llama3-8b", "--system", "dgx-a100", "--global-batch", "64", "--json"])
    assert code == 0, err
    best = json.loads(out)["plans"][0]
    data = PredictRequest.from_argv(best["command"]).run().as_dict()
    for key in ("tokens_per_s_low", "tokens_per_s_high"):
        assert abs(best[key] / data[key] - 1) < 1e-9, key
    assert best["tokens_per_s_low"] < best["tokens_per_s"] < best["tokens_per_s_high"]


def test_sweep_result_csv_text_is_what_sweep_prints(cli):
    """api.md showed `csv_text()` on a crossover only; a sweep's CSV was reachable only through
    `.columns()` and `tables.csv_text` (review 40 #18)."""
    from shardwise.requests.compare import SweepRequest

    argv = ["--vary", "batch=1..4", "--vary", "layers=16,32"]
    code, out, err = cli(["sweep", *argv, "-o", "-", "--no-progress"])
    assert code == 0, err
    assert SweepRequest.from_argv(argv).run().csv_text() == out


def test_plan_md_quotes_the_pair_spread_the_code_has():
    """plan.md said `PAIR_LOG_SD` (9% either way) where the code's 0.078 gives 10.5% (review 40 #17)."""
    import math
    import re
    from pathlib import Path

    from shardwise.calibration.spreads import PAIR_LOG_SD, Z80

    text = " ".join((Path(__file__).parents[1] / "docs" / "commands" / "plan.md").read_text().split())
    found = re.search(r"`PAIR_LOG_SD` = ([\d.]+) .*?= ([\d.]+)% either way", text)
    assert found, "plan.md names PAIR_LOG_SD and its band"
    assert float(found.group(1)) == PAIR_LOG_SD
    assert float(found.group(2)) == round(100 * math.expm1(Z80 * PAIR_LOG_SD), 1)


def test_serve_help_imports_no_numpy():
    """`serve --help` took 0.33 s against 0.07-0.15 s for the others: cli/serve.py imported the
    request layer (numpy, the specs) for a few names its options read (review 40 #19)."""
    import subprocess
    import sys

    code = (
        "import sys\nfrom shardwise.cli import main\ntry:\n    main(['serve', '--help'])\nexcept SystemExit:\n"
        "    pass\nprint('numpy' in sys.modules, 'shardwise.requests.serve' in sys.modules, file=sys.stderr)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "--ttft-max" in proc.stdout
    assert proc.stderr.strip().splitlines()[-1] == "False False", proc.stderr
    from shardwise.cli import serve
    from shardwise.requests import serve as request

    assert serve.FRAMEWORK_ALL_REDUCE is request.FRAMEWORK_ALL_REDUCE and serve.RUNTIME_NAMES == request.RUNTIME_NAMES


def test_a_presets_json_is_a_preset_file_again(cli, tmp_path):
    """`presets show NAME --json` gives SI numbers under unit-named keys (review 40 #10); saved and
    edited, that JSON is read back as the preset file it came from (review 42: the SI keys were
    'missing field(s) peak_16bit, memory, memory_bandwidth'), the same quantity given both ways refused."""
    code, out, err = cli(["presets", "show", "h100-sxm5-80gb", "--json"])
    assert code == 0, err
    gpu = {**json.loads(out)["gpus"], "name": "my-h100"}
    (tmp_path / "g.json").write_text(json.dumps(gpu))
    code, out, err = cli(["presets", "show", str(tmp_path / "g.json"), "--json"])
    assert code == 0, err
    again = json.loads(out)["gpus"]
    for key in ("peak_flops_per_s_16bit", "memory_bytes", "memory_bandwidth_bytes_per_s"):
        assert again[key] == pytest.approx(gpu[key]), key
    (tmp_path / "both.json").write_text(json.dumps({**gpu, "memory": "80GB"}))
    code, out, err = cli(["presets", "show", str(tmp_path / "both.json")])
    assert code == 2 and "memory and memory_bytes: the same quantity given twice" in err


def test_every_key_presets_json_writes_reads_back(cli, tmp_path):
    """One table (`si_keys.SI_NAMES`) names the SI keys `presets --json` writes and a preset file
    reads: an A100's `tdp_watts`, which the loader once knew only as its Gpu field `tdp_w`."""
    code, out, err = cli(["presets", "show", "a100-sxm4-80gb", "--json"])
    assert code == 0, err
    gpu = {**json.loads(out)["gpus"], "name": "my-a100"}
    assert gpu["tdp_watts"] == 400.0
    (tmp_path / "a.json").write_text(json.dumps(gpu))
    code, out, err = cli(["presets", "show", str(tmp_path / "a.json"), "--json"])
    assert code == 0, err
    assert json.loads(out)["gpus"]["tdp_watts"] == 400.0
