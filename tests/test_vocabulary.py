"""One vocabulary across the commands (issue 36): the hardware flags of predict on the experiment
commands, one output convention, choices in any case, `presets show FILE`, the sequence length of
an imported config, the NIC count in the answer's header, and figure labels that say what they show."""

import csv
import io
import json
import re
from pathlib import Path

import pytest

from shardwise import presets

DATA = Path(__file__).parent / "data"
QUICK = ["--vary", "batch=1..4", "--no-plot"]


def _json(cli, args):
    code, out, err = cli(args)
    assert code == 0, err
    return json.loads(out)


def _answer(cli, args):
    """The JSON without the command it echoes (the user's own words, which differ by design)."""
    doc = _json(cli, args)
    doc.pop("command", None)
    return doc


# --- the hardware flags of predict on crossover, sweep and sensitivity ---------------------------


def test_crossover_takes_a_system_its_gpu_its_link_and_its_size(cli):
    doc = _answer(cli, ["crossover", "--system", "dgx-h100", *QUICK, "--json"])
    assert "8 x h100-sxm5-80gb" in doc["assumptions"] and "nvlink4" in doc["assumptions"]
    assert {s["link"] for s in doc["series"]} == {"nvlink4"}  # the system's own link, not NVLink vs PCIe
    assert _answer(cli, ["crossover", "--system", "DGX-H100", *QUICK, "--json"]) == doc  # names in any case
    brief = _json(cli, ["crossover", *QUICK, "--json"])
    assert "a100-sxm4-80gb" in brief["assumptions"] and {s["link"] for s in brief["series"]} == {"NVLink", "PCIe"}


def test_crossover_nodes_and_num_gpus_must_agree(cli):
    args = ["crossover", "--system", "dgx-h100", "--plan", "tp=8", "--plan", "pp=16", *QUICK, "--json"]
    by_nodes = _answer(cli, [*args, "--nodes", "2"])
    assert "16 x h100" in by_nodes["assumptions"] and "ib-ndr" in by_nodes["assumptions"]
    assert _answer(cli, [*args, "--nodes", "2", "--num-gpus", "16"]) == by_nodes
    code, _, err = cli([*args, "--nodes", "2", "--num-gpus", "8"])
    assert code == 2 and "--nodes 2 x 8 GPUs per server = 16, but --num-gpus is 8" in err


def test_crossover_keeps_labelled_links_beside_a_system(cli):
    doc = _json(cli, ["crossover", "--system", "dgx-h100", "--intra-link", "slow=pcie5", *QUICK, "--json"])
    assert {s["link"] for s in doc["series"]} == {"slow"} and "h100" in doc["assumptions"]


def test_link_latency_sets_the_compared_links_latency(cli):
    base = ["crossover", "--intra-link", "x=50GB/s", *QUICK, "--json"]
    slow = _json(cli, [*base, "--link-latency", "500us"])
    fast = _json(cli, [*base, "--link-latency", "1us"])
    tp = {d["link"] + d["plan"]: d["time_s"][0] for d in slow["series"]}
    assert tp["xtp=8"] > {d["link"] + d["plan"]: d["time_s"][0] for d in fast["series"]}["xtp=8"]
    code, _, err = cli(["crossover", "--link-latency", "2us", *QUICK])
    assert code == 2 and "--link-latency" in err


def test_a_system_without_peer_to_peer_is_refused_with_where_to_go(cli):
    code, _, err = cli(["crossover", "--system", "rtx4090-8x", *QUICK])
    assert code == 2 and "P2P off" in err and "predict" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("command", ["crossover", "sweep", "sensitivity"])
def test_every_experiment_command_lists_the_hardware_flags(cli, command):
    code, helptext, _ = cli([command, "--help"])
    shown = set(re.findall(r"--[a-z-]+", helptext))
    assert code == 0
    assert {"--system", "--nodes", "--num-gpus", "--link-latency", "--intra-link", "--inter-link"} <= shown
    assert {"--gpus", "--link", "--csv", "--out", "--plot-prefix"}.isdisjoint(shown)  # old names: hidden


def test_sweep_takes_a_system(cli):
    code, out, err = cli(["sweep", "--system", "dgx-h100", "--vary", "batch=1..4", "-o", "-"])
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 4 and {r["link"] for r in rows} == {"nvlink4"}


# --- one output convention -----------------------------------------------------------------------


def test_crossover_output_takes_its_format_from_the_extension(cli, tmp_path):
    table, doc = tmp_path / "s.csv", tmp_path / "s.json"
    for path in (table, doc):
        code, _, err = cli(["crossover", *QUICK, "-o", str(path)])
        assert code == 0, err
    assert table.read_text().startswith("batch,link,plan,time_s")
    assert json.loads(doc.read_text())["variable"] == "batch"
    code, out, _ = cli(["crossover", *QUICK, "-o", "-"])
    assert code == 0 and out.splitlines() == table.read_text().splitlines()  # - prints what the .csv holds
    code, out, _ = cli(["crossover", *QUICK, "--csv", "-"])  # the old spelling
    assert code == 0 and out.splitlines() == table.read_text().splitlines()
    code, _, err = cli(["crossover", *QUICK, "-o", str(tmp_path / "s.txt")])
    assert code == 2 and "-o" in err and ".csv, .json" in err


def test_sensitivity_and_scenario_write_their_json_with_o(cli, tmp_path):
    path = tmp_path / "findings.json"
    code, out, err = cli(["scenario", "TTFT", "--no-plot", "-o", str(path)])  # a choice in any case
    assert code == 0, err
    assert json.loads(path.read_text())["scenarios"][0]["name"] == "ttft" and f"written to {path}" in out
    code, out, err = cli(["scenario", "ttft", "-o", "-"])
    assert code == 0 and json.loads(out)["scenarios"][0]["name"] == "ttft"


def test_sensitivity_plot_names_three_figures_from_one_file_name(tmp_path):
    from shardwise.cli.sensitivity import figure_paths

    assert figure_paths(str(tmp_path / "s.svg")) == [
        str(tmp_path / f"s-{p}.svg") for p in ("layers", "hidden", "tornado")
    ]
    assert figure_paths("sensitivity") == [
        "sensitivity-layers.png",
        "sensitivity-hidden.png",
        "sensitivity-tornado.png",
    ]


def test_measure_names_its_files_with_o(cli):
    for sub in ("micro", "tp"):
        code, helptext, _ = cli(["measure", sub, "--help"])
        assert code == 0 and "-o, --output FILE" in helptext and "--out " not in helptext


# --- choices in any case -------------------------------------------------------------------------


def test_choices_match_in_any_case(cli):
    lower = _json(cli, ["crossover", *QUICK, "--workload", "forward", "--precision", "bf16", "--json"])
    assert _json(cli, ["crossover", *QUICK, "--workload", "Forward", "--precision", "BF16", "--json"]) == lower
    code, out, _ = cli(["presets", "GPUS"])
    assert code == 0 and "a100-sxm4-80gb" in out and "links" not in out.split("\n")[0]


# --- presets show FILE; the sequence length of a Hugging Face config -----------------------------


def test_presets_show_reads_a_hugging_face_config(cli):
    code, out, err = cli(["presets", "show", str(DATA / "qwen3-32b-config.json")])
    assert code == 0, err
    assert "(model)" in out and "seq_len: 32768" in out and "parameters: 32.76B" in out
    assert "context window of 40960 tokens capped at 32768" in err and "--seq-len" in err


def test_presets_show_reads_a_yaml_file_of_any_kind(cli, tmp_path):
    model = tmp_path / "tiny.yaml"
    model.write_text("layers: 4\nhidden: 512\nheads: 8\nvocab: 32000\nseq_len: 1024\n")
    code, out, err = cli(["presets", "show", str(model)])
    assert code == 0 and "tiny.yaml (model)" in out and "hidden: 512" in out, err
    link = tmp_path / "fast.yaml"
    link.write_text("bandwidth: 100GB/s\nefficiency: 0.8\nlatency: 2us\n")
    code, out, err = cli(["presets", "show", str(link)])
    assert code == 0 and "fast.yaml (link)" in out, err
    odd = tmp_path / "odd.yaml"
    odd.write_text("colour: blue\n")
    code, _, err = cli(["presets", "show", str(odd)])
    assert code == 2 and "no field tells what it describes" in err and len(err.strip().splitlines()) == 1
    bad = tmp_path / "bad.yaml"
    bad.write_text("layers: 4\nhidden: 512\n")  # a model missing its heads
    code, _, err = cli(["presets", "show", str(bad)])
    assert code == 2 and "bad.yaml" in err and len(err.strip().splitlines()) == 1


def test_an_imported_config_keeps_its_context_window_up_to_the_cap(capsys, tmp_path):
    mixtral = presets.model(str(DATA / "mixtral-config.json"))  # max_position_embeddings 32768
    assert mixtral.seq_len == 32768 and capsys.readouterr().err == ""
    assert presets.model(str(DATA / "qwen3-32b-config.json")).seq_len == 32768  # 40960, capped
    assert "capped at 32768" in capsys.readouterr().err
    cfg = json.loads((DATA / "llama3-8b-config.json").read_text())
    del cfg["max_position_embeddings"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert presets.model(str(path)).seq_len == 8192
    assert "sequence length 8192 assumed" in capsys.readouterr().err
    assert presets.model(str(path), seq_len=2048).seq_len == 2048 and capsys.readouterr().err == ""


# --- the answer's header; the parts of a step ----------------------------------------------------


def test_the_header_names_the_nics_the_network_was_priced_with(cli):
    args = ["predict", "--model", "gpt-7.5b", "--system", "dgx-h100", "--nodes", "2", "--tp", "8"]
    args += ["--global-batch", "16", "--inter-link", "eth-100g"]
    code, out, err = cli(args)
    assert code == 0, err
    assert "eth-100g across servers, 1 NIC per GPU: 12.5 GB/s per GPU" in " ".join(out.split())
    code, out, err = cli([*args, "--nics-per-node", "2"])
    assert code == 0, err
    assert "eth-100g across servers, 2 NICs per server of 8 GPUs: 3.12 GB/s per GPU" in " ".join(out.split())


def test_a_step_lists_only_the_parts_the_plan_has(cli):
    code, out, err = cli(["predict", "--model", "gpt-7.5b", "--system", "dgx-a100", "--tp", "8", "--global-batch", "8"])
    assert code == 0, err
    assert "PP bubble" not in out and "PP point-to-point" not in out and "DP communication" not in out
    code, out, err = cli(["crossover", *QUICK])
    assert code == 0 and "dp comm" not in out and "embedding sync" in out  # pp=8 on 8 GPUs: dp = 1


def test_the_crossover_legend_names_the_tie_zone_and_the_intervals():
    import matplotlib

    matplotlib.use("Agg")
    import numpy as np

    from shardwise import plots
    from shardwise.analyses.crossover import run_crossover
    from shardwise.analyses.experiment import brief_experiment

    result = run_crossover(brief_experiment(), "batch", np.arange(1.0, 33.0))
    fig = plots.crossover_figure(result, "t", "", "s")
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any(label.startswith("tie zone") for label in labels)
    assert not any(label.startswith("80% band") for label in labels)
