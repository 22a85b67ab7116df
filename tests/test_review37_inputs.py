"""Review 37's input leftovers: a .json of shardwise's own model fields, runs and lengths from
stdin or from Excel's other CSVs, and a fitted HBM bandwidth above the datasheet. Each is read as
meant or refused in one line (exit 2, no traceback, nothing written)."""

from __future__ import annotations

import json

import pytest

OWN = {"layers": 4, "hidden": 512, "heads": 8, "vocab": 32000, "seq_len": 2048, "family": "llama"}
YAML = "layers: 4\nhidden: 512\nheads: 8\nvocab: 32000\nseq_len: 2048\nfamily: llama\n"
PREDICT = ["predict", "--system", "dgx-h100", "--tp", "1", "--global-batch", "8", "--micro-batch", "1"]


def _one_error(code: int, err: str) -> str:
    lines = [x for x in err.strip().splitlines() if not x.startswith("note:")]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("form", ["flat", "entry"])
def test_a_json_of_shardwise_fields_is_read_as_the_yaml_file(cli, tmp_path, form):
    """A .json stating layers/hidden/heads (not a Hugging Face config) was read as a config and
    refused ('no layers, hidden, heads, vocab found'); it predicts what the same YAML file does."""
    (tmp_path / "m.yaml").write_text(YAML)
    (tmp_path / "m.json").write_text(json.dumps(OWN if form == "flat" else {"m": OWN}))
    code, yaml_out, err = cli([*PREDICT, "--model", str(tmp_path / "m.yaml")])
    assert code == 0, err
    code, json_out, err = cli([*PREDICT, "--model", str(tmp_path / "m.json")])
    assert code == 0, err
    assert json_out == yaml_out


def test_a_json_of_shardwise_fields_gets_the_family_note_and_its_hf_id(cli, tmp_path):
    from shardwise import presets

    path = tmp_path / "m.json"
    path.write_text(json.dumps({**{k: v for k, v in OWN.items() if k != "family"}, "hf_id": "me/m"}))
    assert not presets.is_hf_config(str(path))
    assert presets.model_hf_id(str(path)) == "me/m"
    assert "names no family" in (presets.model_family_note(str(path)) or "")
    code, out, err = cli(["presets", "show", str(path)])
    assert code == 0 and "layers: 4" in out and "the default: no family given" in out, err


def test_a_hugging_face_config_is_still_a_config(tmp_path):
    """A config naming one of shardwise's names beside its own keys stays a config (its keys win)."""
    from shardwise import hf_config, presets

    cfg = {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 512, "num_attention_heads": 8}
    cfg |= {"vocab_size": 32000, "layers": 99}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert hf_config.states_own_fields({"layers": 4}) and not hf_config.states_own_fields(cfg)
    assert presets.is_hf_config(str(path))
    assert presets.model(str(path)).layers == 4


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"foo": 1}', "a .json model is a Hugging Face config.json or shardwise's own model fields"),
        ('{"layers": 4, "hidden": 512, "heads": 8, "vocab": 32000}', "missing field(s) seq_len"),
        ('{"layers": 4, "layers": 5}', "key 'layers' appears twice"),
    ],
)
def test_a_json_model_of_neither_form_is_one_line(cli, tmp_path, text, expected):
    path = tmp_path / "m.json"
    path.write_text(text)
    line = _one_error(*cli([*PREDICT, "--model", str(path)])[::2])
    assert expected in line and "m.json" in line, line


def test_presets_show_reads_a_json_of_a_gpus_fields(cli, tmp_path):
    """`presets show g.json` read every .json as a Hugging Face config; a GPU's fields are a GPU."""
    code, out, err = cli(["presets", "show", "h100-sxm5-80gb", "--json"])
    assert code == 0, err
    gpu = {**json.loads(out)["gpus"], "name": "my-h100"}
    (tmp_path / "g.json").write_text(json.dumps(gpu))
    code, out, err = cli(["presets", "show", str(tmp_path / "g.json")])
    assert code == 0 and out.startswith("g.json (gpu)") and "name: my-h100" in out, err


STDIN_COMMANDS = [
    ["calibrate", "-"],
    ["validate", "--runs", "-"],
    ["validate", "--runs", "r.csv", "--calibration", "-"],
    ["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--plan", "tp=1", "--lengths", "-"],
    [*PREDICT, "--model", "-"],
    ["predict", "--model", "llama3-8b", "--system", "-", "--tp", "1", "--global-batch", "8"],
    [*PREDICT, "--model", "llama3-8b", "--gpu", "-"],
    [*PREDICT, "--model", "llama3-8b", "--intra-link", "-"],
    [*PREDICT, "--model", "llama3-8b", "--calibration", "-"],
    [*PREDICT, "--model", "llama3-8b", "--framework", "-"],
]


@pytest.mark.parametrize("command", STDIN_COMMANDS, ids=lambda c: c[c.index("-") - 1])
def test_no_input_is_read_from_stdin_and_each_says_so_alike(cli, tmp_path, monkeypatch, command):
    """`calibrate -` was 'cannot read (No such file or directory)', `--lengths -` 'not allowed',
    `--model -` 'unknown model': no command reads standard input, and each input says so alike."""
    monkeypatch.chdir(tmp_path)
    flag = command[command.index("-") - 1]
    line = _one_error(*cli(command)[::2])
    assert line == f"error: {flag} -: standard input is not read; give a file's name (a file named '-': ./-)"
    assert list(tmp_path.iterdir()) == []  # calibrate's default -o calibration.yaml not written


def test_a_file_named_dash_is_read_by_its_path(cli, tmp_path, monkeypatch):
    from shardwise.errors import SpecError
    from shardwise.requests.calibrate import CalibrateRequest

    monkeypatch.chdir(tmp_path)
    (tmp_path / "-").write_text(YAML)
    code, out, err = cli([*PREDICT, "--model", "./-"])
    assert code == 0 and out.startswith("- (") and "4 layers" in out, err
    (tmp_path / "-").unlink()
    with pytest.raises(SpecError, match=r"^-: standard input is not read"):  # the Python API's `-` too
        CalibrateRequest(("-",), (), None, None).run()


SERVE = ["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--plan", "tp=1", "--requests", "50", "--json"]
LENGTHS = "input_len,output_len,count\n100,50,3\n400,120,1\n"


def _workload(cli, path) -> tuple[float, float]:
    code, out, err = cli([*SERVE, "--lengths", str(path)])
    assert code == 0, err
    workload = json.loads(out)["workload"]
    return workload["mean_input_len"], workload["mean_output_len"]


@pytest.mark.parametrize(
    "encode",
    [
        lambda t: t.replace(",", ";").encode(),  # Excel's CSV where the decimal mark is a comma
        lambda t: t.replace(",", "\t").encode("utf-16"),  # Excel's "Unicode Text": UTF-16 LE, its mark, tabs
        lambda t: t.encode("utf-16-be"),  # big-endian, no mark: refused below; with its mark here
        lambda t: t.encode("utf-8-sig"),  # Excel's "CSV UTF-8"
        lambda t: t.encode("utf-32"),
    ],
    ids=["semicolons", "utf16-tabs", "utf16-be", "utf8-bom", "utf32"],
)
def test_serve_lengths_read_as_excel_saves_them(cli, tmp_path, encode):
    """`--lengths` of semicolons was refused ('columns are separated by commas') and UTF-16 read as
    replacement characters; both are the table a comma CSV is."""
    plain = tmp_path / "plain.csv"
    plain.write_text(LENGTHS)
    other = tmp_path / "other.csv"
    raw = encode(LENGTHS)
    other.write_bytes(raw if not raw.startswith(b"\0") else b"\xfe\xff" + raw)  # utf-16-be: its mark added
    assert _workload(cli, other) == _workload(cli, plain) == pytest.approx((175.0, 67.5), rel=1e-3)


@pytest.mark.parametrize(
    "raw, expected",
    [
        (LENGTHS.encode("utf-16-le"), "NUL bytes and no byte-order mark: UTF-16 without its mark, or not text"),
        (b"\xff\xfe" + LENGTHS.encode("utf-16-le")[:-1], "is not UTF-16 (its byte-order mark says UTF-16)"),
        (LENGTHS.encode() + b"\xe9\n", "is not UTF-8 (save the file as UTF-8)"),
        (b"input_len;output_len;weight\n100;50;0,5\n", "weight '0,5' is not allowed; give a number >= 0 (with a"),
        (b"input_len;output_len,count\n1;1,1\n", "columns are separated by one of comma, semicolon or tab throughout"),
    ],
    ids=["utf16-no-mark", "utf16-cut", "latin1", "decimal-comma", "mixed"],
)
def test_serve_lengths_that_cannot_be_read_are_one_line(cli, tmp_path, raw, expected):
    path = tmp_path / "l.csv"
    path.write_bytes(raw)
    line = _one_error(*cli([*SERVE, "--lengths", str(path)])[::2])
    assert line.startswith(f"error: --lengths {path}") and expected in line, line


def test_runs_csv_is_read_as_excel_saves_it_too(tmp_path):
    """calibrate's runs CSV takes the same separators and encodings (`files.decode_table`, `sniff_delimiter`)."""
    from shardwise.calibration.runs import read_runs

    text = "model,system,num_gpus,tp,pp,global_batch,step_time_s,_log\nllama3-8b,dgx-h100,8,1,1,64,1.5,x\n"
    (tmp_path / "a.csv").write_text(text)
    (tmp_path / "b.csv").write_bytes(text.replace(",", "\t").encode("utf-16"))
    (tmp_path / "c.csv").write_text(text.replace(",", ";"))
    a, b, c = (read_runs(tmp_path / f"{n}.csv") for n in "abc")
    assert [r.case for r in a] == [r.case for r in b] == [r.case for r in c]
    assert [r.measured for r in a] == [r.measured for r in b] == [r.measured for r in c]


def _hbm_runs():
    from shardwise.calibration.cases import Evaluator
    from shardwise.calibration.runs import parse_runs

    head = "model,system,num_gpus,tp,pp,global_batch,micro_batch,seq_len,step_time_s"
    rows = ["llama3-8b,dgx-h100,8,1,1,16,1,4096,1", "llama3-8b,dgx-h100,8,1,1,64,4,4096,1"]
    cases = [r.case for r in parse_runs("\n".join([head, *rows]) + "\n")]
    return cases, Evaluator(cases)


def test_a_fitted_hbm_scale_stops_at_the_datasheet_and_says_so():
    """memory_bandwidth_scale ranged to 2 x: runs 1.6 x faster in HBM were fitted as an H100
    sustaining 1.6 x 0.85 x 3.35 = 4.6 TB/s, above its 3.35 TB/s peak. The fit stops where the
    sustained rate is the datasheet's (1 / memory_efficiency) and reports the value at its limit."""
    import numpy as np

    from shardwise.calibration.checks import at_limit, limit_notes
    from shardwise.calibration.fit import fit

    cases, ev = _hbm_runs()
    ceiling = 1 / 0.85  # the H100 preset's memory_efficiency
    fast = fit(cases, ev.step_s({"memory_bandwidth_scale": np.array([1.6])})[0], only=("memory_bandwidth_scale",))
    assert fast.values["memory_bandwidth_scale"] == pytest.approx(ceiling, rel=1e-6)
    assert fast.interval80("memory_bandwidth_scale")[1] == pytest.approx(ceiling)
    assert at_limit(fast) == {"memory_bandwidth_scale": "upper"}
    (note,) = limit_notes(fast)
    assert "(0.3-1.18 x; 1.18 x is the GPU's datasheet HBM bandwidth, which a sustained rate cannot exceed)" in note
    # below the datasheet: fitted as before, no limit
    plain = fit(cases, ev.step_s({"memory_bandwidth_scale": np.array([1.05])})[0], only=("memory_bandwidth_scale",))
    assert 1.0 < plain.values["memory_bandwidth_scale"] < 1.05 and at_limit(plain) == {}


def test_the_hbm_ceiling_is_each_gpus_own():
    """A `measure micro` GPU states its measured rate with memory_efficiency 1: its ceiling is 1 x; a
    GPU stating a low streaming share has one above the range's own top (2 x): none then binds."""
    from shardwise import presets
    from shardwise.calibration.parameters import ceilings, hbm_ceiling

    cluster = presets.system("dgx-h100")
    measured = cluster.with_(gpu=cluster.gpu.with_(memory_efficiency=1.0))
    low_share = cluster.with_(gpu=cluster.gpu.with_(memory_efficiency=0.4))
    assert hbm_ceiling(cluster.gpu) == pytest.approx(1 / 0.85)
    assert ceilings([cluster, measured]) == {"memory_bandwidth_scale": 1.0}  # the lowest of the runs' GPUs
    assert ceilings([low_share]) == {} and ceilings([]) == {}
