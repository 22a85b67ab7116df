"""Review 45 #10: labels and keys that say the same thing in text and JSON."""

from __future__ import annotations

import json

import pytest


def test_the_tied_embedding_sync_has_its_own_key_in_crossover_and_predict_json(cli):
    """With one data-parallel replica the tables call dp_comm "embedding sync"; the JSON booked it
    as dp_comm, so a script could not tell the two apart."""
    code, out, err = cli(["crossover", "--json", "--no-plot"])
    assert code == 0, err
    pp8 = json.loads(out)["crossings"][0]["breakdown_s"]["pp=8"]
    assert pp8["dp_comm"] == 0.0 and pp8["embedding_sync"] > 0
    args = ["predict", "--model", "gpt-96l-4096h", "--system", "dgx-a100", "--global-batch", "16", "--pp", "8"]
    code, out, err = cli([*args, "--json"])
    data = json.loads(out)
    assert data["breakdown_s"]["embedding_sync"] == pytest.approx(pp8["embedding_sync"])
    assert sum(data["breakdown_s"].values()) == pytest.approx(data["step_time_s"])
    code, out, err = cli([*args[:-2], "--pp", "4", "--json"])  # dp 2: data-parallel traffic, no key of its own
    assert "embedding_sync" not in json.loads(out)["breakdown_s"]


def test_p2p_on_an_nvlink_system_says_it_applies_to_pcie(cli):
    args = ["serve", "--model", "llama3-8b", "--p2p", "on", "--json"]
    notes = json.loads(cli([*args, "--system", "dgx-h100"])[1])["notes"]
    assert sum("--p2p applies to PCIe GPUs" in n for n in notes) == 1
    notes = json.loads(cli([*args, "--system", "l40s-8x"])[1])["notes"]
    assert not any("--p2p applies" in n for n in notes)


def test_presets_show_reads_a_snapshot_folders_config_json_as_model_does(cli, tmp_path, monkeypatch):
    import shutil
    from pathlib import Path

    snapshot = tmp_path / "Mixtral-8x7B"
    snapshot.mkdir()
    shutil.copy(Path(__file__).parent / "data" / "mixtral-config.json", snapshot / "config.json")
    code, out, err = cli(["presets", "show", str(snapshot)])
    assert code == 0, err
    assert "experts" in out and "layers: 32" in out
    (tmp_path / "empty").mkdir()
    code, _, err = cli(["presets", "show", str(tmp_path / "empty")])
    assert code == 2 and "a folder without a config.json" in err
    # a model read from ./config.json takes its folder's name, not "config"
    monkeypatch.chdir(snapshot)
    from shardwise import presets

    assert presets.model("config.json").name == "Mixtral-8x7B"
    assert presets.model(str(snapshot)).name == "Mixtral-8x7B"


def test_the_readme_python_snippet_prints_the_command_lines_number(cli):
    """The README's snippet priced a bare `Plan` (18.45 s) beside a command line that prints 16.1 s;
    with the framework preset's flags it prints what the command it names prints."""
    import contextlib
    import io
    import re
    from pathlib import Path

    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Python API") :]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    command = re.search(r"It prints what `shardwise (predict [^`]+)` prints", section).group(1).split()
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "README.md", "exec"), {})
    snippet_s = float(printed.getvalue().split(" s/step")[0])
    rc, out, err = cli([*command, "--json"])
    assert rc == 0, err
    assert snippet_s == pytest.approx(json.loads(out)["step_time_s"], abs=0.005)
