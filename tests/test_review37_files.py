"""Review 37 (files): no output replaces an input, a failed run changes no file, what users give
in files is read as they meant it or refused in one line (findings 1-5, 17-22, 24-26)."""

from __future__ import annotations

import json

import pytest

HF = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 512,
    "intermediate_size": 1024,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "num_hidden_layers": 4,
    "vocab_size": 32000,
    "max_position_embeddings": 2048,
}
SERVE = ["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--plan", "tp=1", "--requests", "50"]
PREDICT = ["predict", "--model", "llama3-8b", "--tp", "8", "--global-batch", "8"]


def _one_error(code: int, err: str) -> str:
    lines = [x for x in err.strip().splitlines() if not x.startswith("note:")]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


@pytest.mark.parametrize(
    "command", [["crossover", "--no-plot"], ["sensitivity", "--no-plot", "--layers-values", "8,16"]]
)
def test_an_output_naming_the_model_file_is_refused_and_the_file_kept(cli, tmp_path, command):
    """Finding 1: `crossover --model m.json -o m.json` replaced the config.json with results, exit 0."""
    model = tmp_path / "m.json"
    model.write_text(json.dumps(HF))
    before = model.read_bytes()
    code, _, err = cli([*command, "--model", str(model), "-o", str(model)])
    line = _one_error(code, err)
    assert line.startswith(f"error: -o {model}: --model names that file too"), line
    assert model.read_bytes() == before


def test_a_file_an_input_names_is_never_written_over(cli, tmp_path, monkeypatch):
    """Finding 1, nested: the link file a system YAML names is an input too (guarded when written);
    the relative name is read from the system file's folder (finding 19), whatever the cwd."""
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "l.csv").write_text("name: mylink\nbandwidth: 600GB/s\n")
    (sub / "s.yaml").write_text("name: mysys\ngpu: h100-sxm5-80gb\ngpus_per_node: 8\nintra_node_link: l.csv\n")
    before = (sub / "l.csv").read_bytes()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, out, err = cli([*PREDICT, "--system", str(sub / "s.yaml")])
    assert code == 0 and "mylink inside" in out, err
    args = ["plan", "--model", "llama3-8b", "--system", str(sub / "s.yaml"), "--global-batch", "8", "--top", "1"]
    line = _one_error(*cli([*args, "-o", str(sub / "l.csv")])[::2])
    assert "that is an input" in line and "l.csv" in line, line
    assert (sub / "l.csv").read_bytes() == before


def test_inputs_are_watched_only_while_a_command_runs(tmp_path):
    from shardwise import files
    from shardwise.atomic import check_writable
    from shardwise.errors import SpecError

    path = tmp_path / "x.yaml"
    path.write_text("a: 1\n")
    files.read_small(path, 100, "YAML spec")
    check_writable(path)  # no command running: nothing is watched
    with files.watching_inputs():
        files.read_small(path, 100, "YAML spec")
        with pytest.raises(SpecError, match="that is an input"):
            check_writable(path)
        check_writable(tmp_path / "other.yaml")
    check_writable(path)


def test_plan_nothing_fits_exits_2_and_keeps_the_file_when_other_outputs_were_asked(cli, tmp_path):
    """Finding 2: exit 0 only when every output asked for was made (-o alone: tests/test_review32.py)."""
    keep = tmp_path / "keep.csv"
    keep.write_text("SENTINEL")
    args = ["plan", "--model", "llama3-405b", "--system", "dgx-h100", "--num-gpus", "1", "--global-batch", "8"]
    line = _one_error(*cli([*args, "-o", str(keep), "--plot", str(tmp_path / "h.png")])[::2])
    assert "none of the" in line and f"{keep} not written" in line, line
    assert keep.read_text() == "SENTINEL" and not (tmp_path / "h.png").exists()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("input_len,output_len,cnt\n100,50,1\n", "unknown column 'cnt'; did you mean 'count'?"),
        ("input_len,output_len,input_len\n1,1,1\n", "column 'input_len' appears twice"),
        ("input_len,output_len,count,weight\n1,1,1,1\n", "give one of the columns count or weight, not both"),
        ("input_len,output_len\n1,1,1\n", "line 2: 3 values for 2 columns"),
        # one separator throughout: semicolons alone are read (tests/test_review37_inputs.py)
        ("input_len;output_len,count\n1;1,1\n", "columns are separated by one of comma, semicolon or tab"),
    ],
)
def test_serve_lengths_columns_are_checked(cli, tmp_path, text, expected):
    """Finding 3: a misspelt `count` was ignored and the histogram read as plain rows."""
    path = tmp_path / "l.csv"
    path.write_text(text)
    line = _one_error(*cli([*SERVE, "--lengths", str(path)])[::2])
    assert line.startswith(f"error: --lengths {path}") and expected in line, line


def test_serve_lengths_mean_is_the_tables_where_no_plan_fits(cli, tmp_path):
    """Finding 26: 'mean nan prompt + nan new tokens' for a row longer than any context."""
    path = tmp_path / "huge.csv"
    path.write_text("input_len,output_len\n10000000,50\n")
    code, out, err = cli([*SERVE, "--lengths", str(path)])
    assert code == 0 and "mean 10,000,000 prompt + 50 new tokens" in " ".join(out.split()), err
    code, out, err = cli([*SERVE, "--lengths", str(path), "--json"])
    workload = json.loads(out)["workload"]
    assert (workload["mean_input_len"], workload["mean_output_len"]) == (1e7, 50.0)


@pytest.mark.parametrize(
    "args",
    [
        ["explore", "--no-browser", "--time-limit", "nan"],
        [*PREDICT, "--system", "dgx-h100", "--offload-optimizer", "nan"],
    ],
)
def test_nan_is_refused_by_float_ranges(cli, args):
    """Finding 4: click's FloatRange let NaN through (a traceback from the worker pool)."""
    line = _one_error(*cli(args)[::2])
    assert "'nan' is not allowed; give a finite number" in line, line


@pytest.mark.parametrize(
    ("content", "expected"), [(b"\xff\xfe bad\n", "is not UTF-8"), (b"a,b\n1,2\n", "its columns are not measure's")]
)
def test_measure_checks_its_csv_before_measuring(cli, tmp_path, monkeypatch, content, expected):
    """Finding 5: a non-UTF-8 -o file was a traceback after the measurement; other columns were
    refused only after it, naming --out."""
    from shardwise.requests import measure

    def never(self):
        raise AssertionError("measured before the output was checked")

    monkeypatch.setattr(measure.MeasureStepRequest, "run", never)
    path = tmp_path / "runs.csv"
    path.write_bytes(content)
    line = _one_error(*cli(["measure", "tp", "--system", "dgx-h100", "-o", str(path)])[::2])
    assert line.startswith(f"error: -o {path}: ") and expected in line, line
    assert path.read_bytes() == content


def test_measure_csv_columns_are_csv_rows_keys():
    from shardwise.measure.records import COLUMNS, csv_row

    o = {"ranks": 2, "model_name": "gpt-125m", "layers": 2, "seq_len": 256, "micro_batch": 1, "micro_batches": 4}
    o.update(sequence_parallel=False, schedule="1f1b", chunks=1, system="dgx-h100", dtype="bf16", iters=5)
    assert tuple(csv_row("tp", o, {"step_s": 0.1})) == COLUMNS


def test_model_directory_and_bom_config_are_read(cli, tmp_path):
    """Findings 17, 18: `--model DIR` of a snapshot, and a config.json starting with a BOM."""
    snap = tmp_path / "snap"
    snap.mkdir()
    (snap / "config.json").write_text(json.dumps(HF))
    bom = tmp_path / "bom.json"
    bom.write_text(json.dumps(HF), encoding="utf-8-sig")
    for model in (snap, bom):
        code, out, err = cli(["predict", "--model", str(model), "--system", "dgx-h100", "--global-batch", "8"])
        assert code == 0 and "4 layers, h=512" in out, err
    from shardwise import presets

    assert presets.model(str(snap)).layers == 4


@pytest.mark.parametrize(
    ("flag", "content", "expected"),
    [
        (
            "--intra-link",
            "name: l1\nbandwidth: 1000\n",
            "bandwidth: 1000 has no unit; write it with one, e.g. bandwidth: 1000GB/s",
        ),
        ("--gpu", "name: g\npeak_16bit: 989\nmemory: 80GB\nmemory_bandwidth: 3TB/s\n", "peak_16bit: 989 TFLOPS"),
        ("--framework", "name: f5\nlike: fsdp\nhost_kernel: 5\n", "host_kernel: 5 has no unit"),
        (
            "--intra-link",
            "name: lk\nbandwidth: 600GB/s\nkind: 5\n",
            "kind: 5 is not allowed; choose one of nvlink, xgmi",
        ),
        (
            "--gpu",
            "name: g\npeak_16bit: 0.514 TFLOPS\nmemory: 80GB\nmemory_bandwidth: 3TB/s\n"
            "gemm_table:\n  - {m: 1024, n: 1024, k: 1024, rate: 9000 TFLOPS}\n",
            "rate 9000 TFLOPS is above the GPU's 16-bit peak",
        ),
    ],
)
def test_preset_files_state_units_and_sane_values(cli, tmp_path, flag, content, expected):
    """Findings 20-22: a bare number taken in SI units (1 kB/s), a GEMM rate 17,000 x the GPU's
    peak, `kind: 5` on a link: each accepted silently."""
    path = tmp_path / "f.yaml"
    path.write_text(content)
    args = ["predict", "--model", "llama3-8b", "--tp", "8", "--global-batch", "8", "--num-gpus", "8"]
    args += ["--intra-link", "nvlink4"] if flag == "--gpu" else ["--system", "dgx-h100"] * (flag != "--intra-link")
    args += [] if flag != "--intra-link" else ["--gpu", "h100-sxm5-80gb"]
    line = _one_error(*cli([*args, flag, str(path)])[::2])
    assert str(path) in line and expected in line, line


def test_shipped_presets_and_examples_state_units():
    """Nothing shipped relies on the unit-less form refused in files now."""
    from shardwise import presets
    from shardwise.presets.file_fields import checked_file_fields

    for kind in ("gpus", "links", "systems", "frameworks"):
        for name, data in presets.raw(kind).items():
            checked_file_fields(kind, dict(data), f"{name}.yaml")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["sensitivity", "--plot", "sfig.txt"], "--plot sfig.txt: unknown figure format '.txt'"),
        (["sensitivity", "--plot", ""], "--plot: an empty name is not allowed"),
        (["scenario", "--plot", ""], "--plot: an empty name is not allowed"),
        ([*PREDICT[1:], "--system", "dgx-h100", "--plot", ""], "--plot: an empty name is not allowed"),
        (["sensitivity", "--json", "-o", "-"], "give --json or -o -, not both"),
        (["scenario", "--json", "-o", "-"], "give --json or -o -, not both"),
    ],
)
def test_figure_and_stdout_outputs_are_checked_alike(cli, tmp_path, monkeypatch, args, expected):
    """Findings 24, 25: sensitivity wrote sfig.txt-layers.png; an empty --plot fell back to the
    default names; sensitivity and scenario took --json -o -, which plan and crossover refuse."""
    monkeypatch.chdir(tmp_path)
    if args[0] == "--model":
        args = ["timeline", *args]
    line = _one_error(*cli(args)[::2])
    assert expected in line, line
    assert not list(tmp_path.iterdir())


def test_outputs_that_would_be_ignored_are_refused(cli, tmp_path, monkeypatch):
    """Finding 23's file items: `calibrate --suggest N -o x.yaml` with no runs wrote nothing, silently;
    `serve --plot-link` without --plot drew nothing."""
    monkeypatch.chdir(tmp_path)
    job = ["--model", "llama3-8b", "--system", "dgx-h100", "--nodes", "4", "--global-batch", "64"]
    line = _one_error(*cli(["calibrate", "--suggest", "2", *job, "-o", "x.yaml"])[::2])
    assert line == "error: -o x.yaml: --suggest without RUNS fits nothing to write; give RUNS, or drop -o"
    line = _one_error(*cli([*SERVE, "--plot-link", "PCIe=pcie5"])[::2])
    assert "--plot-link is the second link of the --plot figure" in line, line
    assert not list(tmp_path.iterdir())
