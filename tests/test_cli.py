"""The command line: output, JSON keys, and bad input (one line, exit status 2, no traceback)."""

import json
import signal
import subprocess
import sys

import pytest

GPT3 = [
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
    "64",
    "--recompute",
    "full",
]


def test_predict_prints_a_table(cli):
    code, out, _ = cli(GPT3)
    assert code == 0
    for text in ("step time", "MFU", "TP communication", "PP bubble", "optimizer", "activations", "fits in"):
        assert text in out


def test_predict_json_has_the_documented_keys(cli):
    code, out, _ = cli([*GPT3, "--json"])
    assert code == 0
    data = json.loads(out)
    for key in (
        "step_time_s",
        "tokens_per_s",
        "model_tflops_per_gpu",
        "hardware_tflops_per_gpu",
        "mfu",
        "breakdown_s",
        "memory_bytes",
        "fits_in_memory",
    ):
        assert key in data
    terms = {"compute", "tp_comm", "ep_comm", "offload", "pp_p2p", "pp_bubble", "dp_comm", "optimizer", "overhead"}
    # one data-parallel replica of a dense model: the tied embedding's sync under its own key (review 45 #10)
    one_replica = data["scenario"]["plan"]["dp"] * data["scenario"]["plan"]["cp"] == 1
    assert set(data["breakdown_s"]) == terms | ({"embedding_sync"} if one_replica else set())
    assert "total" in data["memory_bytes"]
    assert sum(data["breakdown_s"].values()) == pytest.approx(data["step_time_s"])
    assert data["scenario"]["plan"]["tp"] == 8
    assert data["scenario"]["model"]["params"] == pytest.approx(174.6e9, rel=1e-3)
    # every key it prints is named in predict.md's Outputs (the interval's were not)
    from pathlib import Path

    doc = (Path(__file__).parents[1] / "docs" / "commands" / "predict.md").read_text().split("## Outputs")[1]
    assert [k for k in [*data, *data["interval"]] if f"`{k}`" not in doc] == []


def test_custom_model_and_gpu_flags(cli):
    code, out, _ = cli(
        [
            "predict",
            "--layers",
            "96",
            "--hidden",
            "4096",
            "--heads",
            "32",
            "--gpu",
            "a100-sxm4-80gb",
            "--intra-link",
            "32GB/s",
            "--num-gpus",
            "8",
            "--pp",
            "8",
            "--global-batch",
            "32",
            "--json",
        ]
    )
    assert code == 0
    data = json.loads(out)
    assert data["scenario"]["cluster"]["intra_node_link"]["bandwidth_bytes_per_s"] == 32e9
    assert data["scenario"]["plan"]["dp"] == 1


def test_preset_overrides(cli):
    code, out, _ = cli(
        [
            "predict",
            "--model",
            "llama3-8b",
            "--seq-len",
            "4096",
            "--system",
            "dgx-h100",
            "--tp",
            "2",
            "--global-batch",
            "16",
            "--json",
        ]
    )
    assert code == 0
    assert json.loads(out)["scenario"]["model"]["seq_len"] == 4096


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "gpt3-175"], "unknown model 'gpt3-175'; closest: gpt3-175b"),
        (["--system", "dgx-a10"], "closest: dgx-a100"),
        (["--tp", "3"], "--tp x --pp = 3 does not divide the 8 GPUs"),
        (["--tp", "8", "--global-batch", "6", "--dp", "4", "--num-gpus", "32"], "global_batch: 6 is not divisible"),
        (["--zero", "5"], "--zero: 5 is not allowed; it must be a whole number from 0 to 3"),
        (["--intra-link", "fast"], "--intra-link: unknown link 'fast'"),
        (["--nodes", "2", "--num-gpus", "8"], "--nodes 2 x 8 GPUs per server = 16, but --num-gpus is 8"),
        (["--seq-len", "0"], "--seq-len: 0 is not allowed"),
        (["--precision", "fp8", "--system", "dgx-a100"], "fp8 is not supported by gpu 'a100-sxm4-80gb'"),
        (["--nodes", "0"], "--nodes: 0 is not allowed"),
        (["--gpu", ""], "--gpu: an empty name is not allowed; give a preset name or a YAML file"),
        (["--intra-link", ""], "--intra-link: an empty name is not allowed"),
        (["--inter-link", ""], "--inter-link: an empty name is not allowed"),
        (["--framework", ""], "--framework: an empty name is not allowed"),
        (["--inter-link", "ib-hdr", "--nics-per-node", "inf"], "--nics-per-node: inf is not allowed; it must be > 0"),
        (["--nics-per-node", "nan"], "--nics-per-node: nan is not allowed"),
        (["--nics-per-node", "4096"], "--nics-per-node: 4096 is not allowed; it must be > 0 and at most 1024"),
        (["--intra-link", "300GB/s", "--link-latency", "2 parsecs"], "--link-latency: '2 parsecs' is not a time"),
        (["--num-gpus", "9223372036854775808"], "--num-gpus: 9223372036854775808 is not allowed; it must be a whole"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message, cli):
    base = {"--model": "gpt3-175b", "--system": "dgx-a100", "--global-batch": "8"}
    flags = dict(zip(args[::2], args[1::2], strict=False))
    merged = [*args]
    for k, v in base.items():
        if k not in flags:
            merged += [k, v]
    code, out, err = cli(["predict", *merged])
    assert code == 2
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert out == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["plan", "--model", "llama3-8b", "--system", "dgx-a100", "--global-batch", "9223372036854775808"],
            "--global-batch: 9223372036854775808 is not allowed",  # refused before listing its divisors
        ),
        (
            ["plan", "--model", "llama3-8b", "--system", "dgx-a100", "--global-batch", "64", "--num-gpus", "2" * 20],
            f"--num-gpus: {'2' * 20} is not allowed",
        ),
        (
            ["serve", "--model", "llama3-8b", "--system", "dgx-a100", "--num-gpus", "9223372036854775808"],
            "--num-gpus: 9223372036854775808 is not allowed",
        ),
        (
            ["serve", "--model", "llama3-8b", "--system", "dgx-a100", "--first-stage-layers", "9223372036854775808"],
            "--first-stage-layers: 9223372036854775808 is not allowed; it must be a whole number from 1 to the model's",
        ),
        (
            ["serve", "--model", "llama3-8b", "--system", "dgx-a100", "--last-stage-layers", "33"],
            "--last-stage-layers: 33 is not allowed",
        ),
        (["sensitivity", "--no-plot", "--factor", "inf"], "--factor: inf is not allowed; it must be a number > 1"),
        (["sensitivity", "--no-plot", "--factor", "1"], "--factor: 1 is not allowed"),
        (["crossover", "--no-plot", "--vary", "batch=1..8:xinf"], "the factor after ':x' must be a finite number > 1"),
        (["sweep", "--vary", "batch=1..8:xnan"], "the factor after ':x' must be a finite number > 1"),
        (["sweep", "--vary", "batch=1..8:inf"], "--vary 'batch=1..8:inf': cannot read the values"),
        (["crossover", "--no-plot", "--gpu", ""], "--gpu: an empty name is not allowed"),
        (  # a flag given nothing is a mistake, not "the default" (an empty CSV cell is)
            ["predict", "--model", "llama3-8b", "--system", "dgx-a100", "--global-batch", "8", "--link-latency", ""],
            "--link-latency: '' is not allowed; give a value",
        ),
        (
            ["plan", "--model", "llama3-8b", "--system", "dgx-a100", "--global-batch", "64", "--dp", ""],
            "'' is not allowed",
        ),
        (
            ["plan", "--model", "llama3-8b", "--system", "dgx-a100", "--global-batch", "64", "--schedule", " "],
            "'' is not",
        ),
        (["sweep", "--vary", "batch=1..8", "--framework", ""], "--framework: an empty name is not allowed"),
        (["crossover", "--no-plot", "--inter-link", " "], "--inter-link: an empty name is not allowed"),
        (["crossover", "--no-plot", "--nics-per-node", "inf"], "--nics-per-node: inf is not allowed"),
        (["sensitivity", "--no-plot", "--hidden-values", "1e30"], "--hidden-values '1e30': 1e+30 is not allowed"),
        (["sensitivity", "--no-plot", "--layers-values", ""], "--layers-values '': values must be finite and > 0"),
        (["sweep", "--vary", "layers=1e30"], "--vary 'layers=1e30': 1e+30 is not allowed; layers must be at most"),
        (
            ["plan", "--model", "llama3-8b", "--system", "dgx-a100", "--global-batch", "64", "--vpp", "9" * 20],
            "'--vpp': '99999999999999999999': values must be whole numbers at most 9,007,199,254,740,992",
        ),
    ],
)
def test_every_command_refuses_absurd_values_in_one_line_naming_the_flag(args, message, cli):
    code, out, err = cli(args)
    assert code == 2 and out == "", err
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err and "Warning" not in err


def test_link_latency_takes_the_micro_sign_and_the_greek_mu(cli):
    base = [*GPT3, "--intra-link", "300GB/s", "--json"]
    times = set()
    for micro in ("2us", "2\u00b5s", "2\u03bcs"):
        code, out, err = cli([*base, "--link-latency", micro])
        assert code == 0, err
        times.add(json.loads(out)["step_time_s"])
    assert len(times) == 1


def test_missing_model_and_missing_batch(cli):
    code, _, err = cli(["predict", "--system", "dgx-a100"])
    assert code == 2 and "--layers --hidden --heads" in err
    code, _, err = cli(["predict", "--model", "gpt-96l-4096h", "--system", "dgx-a100"])
    assert code == 2 and "--global-batch is required" in err


def test_presets_listing(cli):
    code, out, _ = cli(["presets", "frameworks"])
    assert code == 0 and "megatron-core" in out and "torchtitan" in out
    code, out, _ = cli(["presets", "show", "gb200-nvl72"])
    assert code == 0 and "gpus_per_node: 72" in out and "source:" in out
    code, _, err = cli(["presets", "show", "gb2000-nvl72"])
    assert code == 2 and "closest: gb200-nvl72" in err
    code, out, _ = cli(["presets"])
    assert code == 0 and "source" not in out.lower().split("presets show")[0]
    code, out, _ = cli(["presets", "systems"])
    assert code == 0 and "dgx-h100" in out
    code, out, _ = cli(["presets", "--json"])
    data = json.loads(out)
    assert {"gpus", "links", "systems", "models", "frameworks", "engines"} <= set(data)


def test_presets_list_and_show_the_serving_engines_with_the_defaults_serve_uses(cli):
    """`presets engines` / `presets show ENGINE`: the version, and the token budget and sequence cap
    that `serve` takes for each engine on each GPU (engines.engine_presets), not a copy of them."""
    from shardwise import presets
    from shardwise.engines.engine_presets import ENGINES, max_batched_tokens, max_sequences

    code, out, _ = cli(["presets", "engines"])
    assert code == 0 and all(name in out for name in ENGINES) and "0.34" in out
    code, out, _ = cli(["presets", "show", "vllm", "--json"])
    vllm = json.loads(out)["engines"]
    for gpu, got in vllm["defaults_by_gpu"].items():
        memory = float(presets.gpu(gpu).memory_bytes)
        assert got == {
            "token_budget": max_batched_tokens("vllm", memory, gpu),
            "max_sequences": max_sequences("vllm", memory, gpu),
        }
    assert vllm["defaults_by_gpu"]["a100-sxm4-80gb"]["token_budget"] == 2048  # vLLM tells the A100 apart
    code, out, _ = cli(["presets", "show", "sglang", "--json"])
    assert json.loads(out)["engines"]["defaults_by_gpu"]["h100-sxm5-80gb"]["max_sequences"] is None  # its KV pool's
    code, out, _ = cli(["presets", "show", "tensorrt-llm"])
    assert code == 0 and "(engine)" in out and "trtllm-bench" in out and "250 µs" in out
    code, _, err = cli(["presets", "show", "vlm"])
    assert code == 2 and "closest: vllm" in err


def test_validate_json(cli):
    code, out, _ = cli(["validate", "korthikanti22_table5", "--json"])
    assert code == 0
    data = json.loads(out)["korthikanti22_table5"]
    # Selene's 2022 runs beat the A100's sustained efficiency (tests/test_validation.py)
    assert len(data["rows"]) == 8 and data["mean_absolute_error"] < 0.25


def test_console_script_runs_and_reports_bad_input_without_traceback():
    ok = subprocess.run([sys.executable, "-m", "shardwise", "--help"], capture_output=True, text=True)
    assert ok.returncode == 0 and "predict" in ok.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "shardwise", "predict", "--model", "nope"], capture_output=True, text=True
    )
    assert bad.returncode == 2
    assert bad.stderr.startswith("error: ") and "Traceback" not in bad.stderr


def test_one_name_per_meaning_and_old_spellings_still_work(cli):
    """--global-batch, --num-gpus, --intra-link and serve's --concurrency everywhere; the old
    spellings (--batch, --gpus, --link) work but are not in --help."""
    code, out, _ = cli(["crossover", "--help"])
    assert code == 0 and "--global-batch" in out and "--num-gpus" in out and "--intra-link" in out
    assert "--batch " not in out and "--gpus " not in out and "--link " not in out
    old = ["crossover", "--no-plot", "--json", "--batch", "4", "--gpus", "8", "--link", "pcie4"]
    new = ["crossover", "--no-plot", "--json", "--global-batch", "4", "--num-gpus", "8", "--intra-link", "pcie4"]
    (c1, o1, _), (c2, o2, _) = cli(old), cli(new)
    assert c1 == c2 == 0 and o1 == o2
    code, out, _ = cli(["serve", "--help"])
    assert "--concurrency" in out and "--batch " not in out


def test_files_are_written_with_the_umask_and_keep_an_existing_mode(tmp_path, cli):
    import os
    import stat

    out = tmp_path / "grid.csv"
    code, _, err = cli(["sweep", "--vary", "batch=1..4", "--csv", str(out)])
    assert code == 0, err
    old = os.umask(0)
    os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~old
    os.chmod(out, 0o640)
    code, _, err = cli(["sweep", "--vary", "batch=1..4", "--csv", str(out)])
    assert code == 0, err
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grid.csv"]  # no temporary left behind


def test_an_unwritable_place_is_one_line_before_any_work(tmp_path, cli):
    import os

    a_file = tmp_path / "notes.txt"
    a_file.write_text("x")
    cases = [
        ["sweep", "--vary", "batch=1..4", "--csv", str(a_file / "g.csv")],  # a file where a directory should be
        ["crossover", "--plot", str(a_file / "c.png")],
        ["sweep", "--vary", "batch=1..4", "--csv", str(tmp_path / "dir.csv")],  # a directory in the file's place
    ]
    (tmp_path / "dir.csv").mkdir()
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "ro"
        locked.mkdir()
        locked.chmod(0o500)
        cases.append(["sweep", "--vary", "batch=1..4", "--csv", str(locked / "g.csv")])
    for args in cases:
        code, _, err = cli(args)
        assert code == 2 and err.count("\n") <= 1 and "Traceback" not in err, (args, err)


def test_validate_public_json_is_strict_json(cli):
    code, out, _ = cli(["validate", "public", "--rows", "holdout", "--json"])
    data = json.loads(out)  # NaN would not parse as strict JSON: undefined numbers are null
    assert code == 0 and "NaN" not in out
    assert len(data["rows"]) > 300 and any(r["measured_step_s"] is None for r in data["rows"])
    holdout = [t for t in data["tables"] if t["split"].startswith("holdout")]
    assert holdout and all(0 < t["mape"] < 0.5 for t in holdout if t["rows"])


def test_the_renamed_example_model_keeps_its_old_name_as_a_hidden_alias(cli):
    from shardwise import presets

    assert presets.model("gpt-96l-4096h") == presets.model("gpt-96l-4096h")
    assert presets.model("BRIEF").name == "gpt-96l-4096h"
    code, out, _ = cli(["presets", "models"])
    assert code == 0 and "gpt-96l-4096h" in out and "brief" not in out.split()


def test_presets_list_shows_defaults_not_placeholders(cli):
    code, out, _ = cli(["presets", "models"])
    assert code == 0 and "interleaved" not in out  # kv heads left out = heads (multi-head attention)
    row = next(line.split() for line in out.splitlines() if line.split()[:1] == ["gpt-1.7b"])
    assert row[1:] == ["24", "2304", "24", "24", "2048"]


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_during_a_large_write_leaves_no_file_behind(sig, status, tmp_path):
    """SIGTERM or Ctrl-C while a 2-million-row CSV is being written: the command stops with 128 + the
    signal and neither the file nor a temporary is left. The signal is sent once rows reach the
    temporary file (not after a fixed sleep: on a fast machine the whole command ends within seconds,
    and a signal during interpreter shutdown rightly changes nothing)."""
    import time

    code = "from shardwise.cli import main; main(['sweep', '--vary', 'batch=1..1000', '--vary', 'layers=8..1007', "
    code += "'--csv', 'g.csv', '--no-progress'])"
    # the child starts with Ctrl-C's default disposition: a runner that launched the tests in the
    # background (a non-interactive shell's `&`) has SIGINT ignored, and an ignored signal is inherited
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 120

    def written() -> bool:
        try:
            return any(f.stat().st_size for f in tmp_path.iterdir())
        except FileNotFoundError:  # the temporary renamed between listing and stat
            return True

    while not written() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert proc.poll() is None, "finished before the write was seen: make the grid larger"
    assert [p.name for p in tmp_path.iterdir()] != ["g.csv"], "the file appeared whole: no temporary was used"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == status and b"Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_absurd_depth_and_a_bad_stage_split_are_one_line(cli):
    code, _, err = cli(
        ["plan", "--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", "64", "--layers", "2147483648"]
    )
    assert code == 2 and "layers" in err and len(err.strip().splitlines()) == 1, err
    args = ["timeline", "--model", "llama3-8b", "--system", "dgx-h100", "--pp", "2", "--global-batch", "8", "--no-plot"]
    code, _, err = cli([*args, "--stage-layers", "1,1"])
    assert code == 2 and "--stage-layers" in err and len(err.strip().splitlines()) == 1, err


def test_no_arguments_prints_the_help(cli):
    code, out, err = cli([])
    assert code == 0 and "Usage: shardwise" in out and "calibrate" in out and not err


def test_a_table_written_to_a_file_or_a_pipe_keeps_every_column_whole(cli, monkeypatch):
    """No terminal sets the width there: rich would cut the planner's columns to 80 characters."""
    monkeypatch.delenv("COLUMNS", raising=False)
    args = ["plan", "--model", "llama3-70b", "--system", "dgx-h100", "--nodes", "4", "--global-batch", "512"]
    code, out, err = cli(args)
    assert code == 0, err
    header = next(line for line in out.splitlines() if "schedule" in line)
    assert "recompute" in header and "ZeRO" in header and "…" not in out


def test_a_gpu_without_a_link_is_told_which_link_its_servers_use(cli):
    code, out, err = cli(["predict", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--num-gpus", "8"])
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [
        "error: --intra-link is required with --gpu (h100-sxm5-80gb servers use nvlink4: e.g. --intra-link nvlink4, "
        "or --system dgx-h100)"
    ]


def test_a_stage_that_is_never_idle_has_no_negative_bubble(cli):
    """The busiest stage's idle time is a difference of sums: rounding once left -6e-16 s."""
    import json

    args = ["timeline", "--model", "gpt3-175b", "--system", "dgx-a100", "--nodes", "2", "--tp", "8", "--pp", "2"]
    code, out, err = cli([*args, "--global-batch", "16", "--last-stage-layers", "8", "--no-plot", "--json"])
    assert code == 0, err
    assert json.loads(out)["breakdown_s"]["pp_bubble"] >= 0.0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # the model's limit, not the GPU arithmetic ("--tp x --pp = 3 does not divide the 8 GPUs")
        (
            ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--tp", "3"],
            "heads: 32 is not divisible by tp=3",
        ),
        # the user set no schedule: name the flag given
        (
            [
                "predict",
                "--model",
                "llama3-8b",
                "--system",
                "dgx-h100",
                "--tp",
                "8",
                "--vpp",
                "3",
                "--global-batch",
                "8",
            ],
            "--vpp 3 needs --pp >= 2",
        ),
        (["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--tp", "0"], "it must be a whole number >= 1"),
        (["presets", "show", "nosuch"], "no preset named 'nosuch' (see"),  # nothing close: no suggestion
    ],
)
def test_errors_name_the_real_problem(args, message, cli):
    code, out, err = cli(args)
    assert code == 2 and out == "", err
    assert message in err and "9,007,199,254,740,992" not in err
    assert err.count("\n") == 1


def test_an_unknown_validate_table_lists_the_choices_once(cli):
    code, _, err = cli(["validate", "nosuchset"])
    assert code == 2 and err.count("narayanan21_table1") == 1, err


def test_a_bad_calibration_column_names_only_close_names(cli, tmp_path):
    bad = tmp_path / "runs.csv"
    bad.write_text("a,b\n1,2\n")
    code, _, err = cli(["calibrate", str(bad)])
    assert code == 2 and "unknown column 'a'" in err and "did you mean" not in err, err
    assert len(err) < 200  # not the 600-character list of every column


def test_scenario_json_findings_carry_no_terminal_line_breaks(cli):
    code, out, err = cli(["scenario", "--no-plot", "--json", "small-batch"])
    assert code == 0, err
    (report,) = json.loads(out)["scenarios"]
    assert "\n" not in report["finding"] and "step, while TP" in report["finding"]


def test_piped_output_is_100_columns_without_trailing_padding(cli, monkeypatch):
    from shardwise.cli.render import piped_width

    monkeypatch.delenv("COLUMNS", raising=False)
    code, out, err = cli(
        ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--tp", "8", "--global-batch", "8"]
    )
    assert code == 0, err
    lines = out.splitlines()
    assert not [line for line in lines if line != line.rstrip()]  # rich padded them to 160 columns
    assert "  step time" in out and max(len(line) for line in lines if line.startswith("  step")) <= 100
    assert piped_width({}) == 100 and piped_width({"COLUMNS": "120"}) == 120 and piped_width({"COLUMNS": "x"}) == 100


def test_piped_output_drops_padding_and_flush_reaches_the_file():
    import io

    from shardwise.cli.render import _Rstripped

    class Sink(io.StringIO):
        flushed = 0

        def flush(self) -> None:
            self.flushed += 1
            super().flush()

    sink = Sink()
    out = _Rstripped(sink)
    out.write("a table row   \nnext")
    out.flush()
    assert sink.getvalue() == "a table row\nnext" and sink.flushed == 1
    out.write("   ")  # padding alone waits for its newline, but the flush still reaches the stream
    out.flush()
    assert sink.getvalue() == "a table row\nnext" and sink.flushed == 2
    out.write("\n")
    assert sink.getvalue() == "a table row\nnext\n"


def test_predict_states_its_interval_as_shares_of_the_prediction(cli):
    import re

    code, out, _ = cli(["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", "16"])
    flat = " ".join(out.split())
    words = re.search(r"80% interval (-\d+)%/\+(\d+)%, uncalibrated", flat)
    ends = re.search(r"step time ([\d.]+) s \(([\d.]+)-([\d.]+) s\)", flat)
    assert code == 0 and words and ends, flat[:400]
    step, low, high = (float(x) for x in ends.groups())
    assert round(100 * (low / step - 1)) == pytest.approx(int(words.group(1)), abs=1)  # the printed ends, rounded
    assert round(100 * (high / step - 1)) == pytest.approx(int(words.group(2)), abs=1)


def test_help_examples_use_the_current_spelling_of_every_flag():
    """Each command's --help examples show flags as --help lists them, never an old spelling that
    is kept hidden for a release (walkthrough: `plan --help` showed `--csv all.csv`, a flag its own
    options list does not name)."""
    import re

    import click

    from shardwise.cli import cli
    from shardwise.cli.option_kit import Aliased

    def commands(group: click.Group, ctx: click.Context):
        for name in group.list_commands(ctx):
            cmd = group.get_command(ctx, name)
            sub = click.Context(cmd, info_name=name, parent=ctx)
            yield cmd, sub
            if isinstance(cmd, click.Group):
                yield from commands(cmd, sub)

    stale, seen = [], 0
    for cmd, ctx in commands(cli, click.Context(cli, info_name="shardwise")):
        seen += "Examples:" in (cmd.help or "")
        hidden = {o for p in cmd.params if isinstance(p, Aliased) for o in p.hidden_aliases}
        examples = (cmd.help or "").partition("Examples:")[2]
        for flag in re.findall(r"(?<![\w-])--?[a-zA-Z][\w-]*", examples):
            if flag in hidden:
                stale.append(f"{ctx.command_path}: {flag}")
    assert seen >= 6 and not stale, (seen, stale)


def test_every_command_that_prints_results_has_json_as_the_readme_says():
    """README: "Each has --help, and --json where it prints results (all but explore)" (walkthrough:
    it said every command, and explore, a browser page, has none)."""
    from pathlib import Path

    import click

    from shardwise.cli import cli

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    assert "`--json` where it prints results (all but `explore`" in readme
    ctx = click.Context(cli, info_name="shardwise")
    for name in cli.list_commands(ctx):
        cmd = cli.get_command(ctx, name)
        leaves = [cmd.get_command(ctx, n) for n in cmd.list_commands(ctx)] if isinstance(cmd, click.Group) else [cmd]
        for leaf in leaves:
            flags = {o for p in leaf.params for o in p.opts}
            assert ("--json" in flags) == (name != "explore"), (name, leaf.name)


def test_an_unknown_command_names_the_closest_one(cli):
    """`shardwise scenarios` (the brief says scenarios) was 'No such command' without the name to use."""
    code, out, err = cli(["scenarios", "--no-plot"])
    assert (code, out) == (2, "") and err.strip() == (
        "error: No such command 'scenarios'; did you mean 'scenario'? (`shardwise --help` lists them)"
    )
    code, _, err = cli(["xyz"])
    assert code == 2 and "did you mean" not in err and len(err.strip().splitlines()) == 1


def test_a_single_valued_option_given_twice_is_refused(cli):
    """click kept the last of a repeated option without a word: `crossover --vary batch=... --vary
    layers=...` swept the layers alone, `--tp 2 ... --tp 4` priced tp=4."""
    code, out, err = cli(["crossover", "--vary", "batch=1..8", "--vary", "layers=8..32", "--no-plot"])
    assert (code, out) == (2, "") and err.strip() == (
        "error: --vary is given twice ('batch=1..8', then 'layers=8..32'); give it once; "
        "to vary several at once: `shardwise sweep --vary ... --vary ...`"
    )
    code, out, err = cli(["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--tp", "2", "--tp=4"])
    assert (code, out) == (2, "") and err.strip() == "error: --tp is given twice ('2', then '4'); give it once"
    code, _, err = cli(["crossover", "--csv", "a.csv", "-o", "b.csv", "--no-plot"])  # a hidden old spelling
    assert code == 2 and err.strip() == "error: --csv 'a.csv' and -o 'b.csv' set one option; give one of them"
    code, _, err = cli(["serve", "--model", "llama3-8b", "--custom-all-reduce", "--no-custom-all-reduce"])
    assert code == 2 and "contradict each other" in err and len(err.strip().splitlines()) == 1
    # options made to repeat, and a flag given twice, still pass
    code, _, err = cli(["sweep", "--vary", "batch=1..4", "--vary", "layers=8..16", "--json", "--json"])
    assert code == 0, err


def test_an_output_name_without_a_format_says_what_to_give(cli):
    """`plan -o -` said "unknown file format ''" (it now prints the CSV, as crossover and sweep do:
    tests/test_review29.py); `--plot -` writes a figure file only."""
    args = ["plan", "--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", "64"]
    code, out, err = cli([*args, "--plot", "-"])
    assert (code, out) == (2, "") and err.strip() == (
        "error: --plot -: this option writes a file, not stdout; give a name ending in .png or .svg or .pdf"
    )
    code, out, err = cli([*args, "-o", "plans"])
    assert (code, out) == (2, "") and err.strip() == (
        "error: -o plans: the format is told by the extension; give a name ending in .csv or .parquet"
    )


def test_a_directory_given_as_a_model_or_system_says_so(cli, tmp_path):
    """`--model /tmp` was "unknown model '/tmp'; closest: mpt-7b"."""
    code, out, err = cli(["predict", "--model", str(tmp_path), "--system", "dgx-h100", "--global-batch", "8"])
    assert (code, out) == (2, "") and err.strip() == (
        f"error: {tmp_path}: a directory; give a model preset's name, a YAML file or a config.json"
    )
    code, _, err = cli(["predict", "--model", "llama3-8b", "--system", str(tmp_path), "--global-batch", "8"])
    assert code == 2 and err.strip() == f"error: {tmp_path}: a directory; give a system preset's name or a YAML file"


def test_serve_refuses_stage_layers_without_a_pipeline(cli):
    """`serve --plan tp=8 --first-stage-layers 4` priced tp=8 and dropped the flag without a word."""
    args = ["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--plan", "tp=8", "--first-stage-layers", "4"]
    code, out, err = cli(args)
    assert (code, out) == (2, "") and err.strip() == (
        "error: --first-stage-layers: no --plan has a pipeline to split; give a plan with pp > 1 (e.g. tp=4,pp=2)"
    )
