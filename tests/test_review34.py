"""What review 34 (consistency and messages) found: each a test that failed before the fix."""

from __future__ import annotations

import pytest

from shardwise import Plan, Scenario, ServingWorkload, estimate_serving, estimate_training_step, presets
from shardwise.errors import SpecError


def _v100(num_gpus: int = 2) -> object:
    return presets.system("dgx-1-v100", nodes=1).with_(gpus_per_node=num_gpus)


def test_bf16_on_a_gpu_without_it_is_refused_by_the_api_as_the_cli_refuses_it():
    """Plan(precision='bf16') (Plan's default) on V100 was priced silently; the CLI refused it."""
    model = presets.model("gpt-1.3b")
    fp16 = estimate_training_step(Scenario(model, _v100(), Plan(tp=2, pp=1, dp=1, global_batch=4, precision="fp16")))
    assert float(fp16.step_time_s) > 0
    with pytest.raises(SpecError, match=r"has no BF16 tensor cores .*use precision='fp16'") as err:
        estimate_training_step(Scenario(model, _v100(), Plan(tp=2, pp=1, dp=1, global_batch=4)))
    assert "\n" not in str(err.value)


def test_serving_bf16_defaults_on_a_gpu_without_it_are_refused():
    scn = Scenario(presets.model("gpt-1.3b"), _v100(), Plan(tp=2, pp=1, dp=1, global_batch=1))
    with pytest.raises(SpecError, match=r"weight_precision bf16: .* use weight_precision='fp16'"):
        estimate_serving(scn, ServingWorkload(512, 128, 8))
    with pytest.raises(SpecError, match=r"kv_precision bf16"):
        estimate_serving(scn, ServingWorkload(512, 128, 8, "fp16"))
    # TensorRT-LLM (the API's default engine) does not run on Volta (`engines.engine_formats`)
    with pytest.raises(SpecError, match=r"^serving: engine tensorrt-llm: .* does not run on v100"):
        estimate_serving(scn, ServingWorkload(512, 128, 8, "fp16", "fp16"))
    assert float(estimate_serving(scn, ServingWorkload(512, 128, 8, "fp16", "fp16", engine="vllm")).tpot_s) > 0


def test_fp8_refusal_suggests_only_what_the_gpu_has():
    v100, a100 = presets.gpu("v100-sxm2-32gb"), presets.gpu("a100-sxm4-80gb")
    with pytest.raises(SpecError, match=r"; use fp16$"):
        v100.peak_flops_per_s("fp8")
    with pytest.raises(SpecError, match=r"; use bf16 or fp16$"):
        a100.peak_flops_per_s("fp8")
    assert (v100.sixteen_bit, a100.sixteen_bit) == ("fp16", "bf16")


def test_calibration_serving_row_without_precision_takes_the_gpus_16_bit_format():
    from shardwise.calibration.runs import _serving_run

    row = {"model": "gpt-1.3b", "system": "dgx-1-v100", "tp": "2", "input_len": "128", "output_len": "16"}
    run = _serving_run({**row, "tpot_s": "0.01", "engine": "vllm"}, "row 1")
    assert (run.case.workload.weight_precision, run.case.workload.kv_precision) == ("fp16", "fp16")
    # the default engine, TensorRT-LLM, does not run on Volta: the row says so in one line
    with pytest.raises(SpecError, match=r"^row 1: the model cannot express this run: serving: engine tensorrt-llm"):
        _serving_run({**row, "tpot_s": "0.01"}, "row 1")


def test_the_explorers_precision_controls_do_not_offer_bf16_on_v100():
    from shardwise.explore import checks

    offered, value = checks.precision_choices("p-precision", "dgx-1-v100")
    assert "bf16" not in offered and "fp16" in offered and value == "fp16"
    offered, value = checks.precision_choices("s-weights", "dgx-1-v100")
    assert "bf16" not in offered and value == "fp16"
    offered, value = checks.precision_choices("p-precision", "dgx-a100")
    assert "bf16" in offered and value is None


def test_the_explorers_training_precision_offers_what_the_gpu_computes():
    """FP8 before Hopper, MXFP8 and NVFP4 before Blackwell are refused by the estimate, so the
    training control does not offer them; weights and KV cache keep every storage format."""
    from shardwise.explore import checks

    assert checks.precision_choices("p-precision", "dgx-1-v100")[0] == ["fp16"]
    assert checks.precision_choices("p-precision", "dgx-a100")[0] == ["bf16", "fp16"]
    assert checks.precision_choices("p-precision", "dgx-h100")[0] == ["bf16", "fp16", "fp8"]
    assert {"mxfp8", "nvfp4"} <= set(checks.precision_choices("p-precision", "dgx-b200")[0])
    assert "fp8" in checks.precision_choices("s-weights", "dgx-a100")[0]  # stored, widened for the GEMMs


NVL_100 = ["--model", "llama3-70b", "--system", "gb200-nvl72", "--num-gpus", "100"]
DOMAINS = "--num-gpus 100: not a whole number of 72-GPU NVLink domains, so laid out as 2 domains of 50 GPUs"


def test_plan_and_serve_say_the_nvlink_domain_rule_as_predict_does(cli):
    """plan --tp 4 on 100 GB200 GPUs said 'no valid layout ... every rule it lists holds'; serve --plan tp=4
    'tp=4 neither divides nor is a multiple of gpus_per_node=50', a value the user never gave."""
    code, _, err = cli(["plan", *NVL_100, "--tp", "4", "--global-batch", "200"])
    assert code == 2 and len(err.strip().splitlines()) == 1 and DOMAINS in err and "no valid layout" not in err, err
    code, _, err = cli(["serve", *NVL_100, "--plan", "tp=4"])
    assert code == 2 and f"--plan tp=4: {DOMAINS}" in err and "gpus_per_node" not in err, err
    code, out, err = cli(["serve", *NVL_100, "--plan", "tp=4", "--plan", "tp=2"])
    assert code == 0 and f"--plan tp=4: not computed: {DOMAINS}" in out + err and "gpus_per_node" not in out + err
    code, _, err = cli(["plan", *NVL_100, "--tp", "2,4", "--global-batch", "200", "--top", "1"])
    assert code == 0, err  # tp 2 tiles the domains of 50


def test_plans_nothing_fits_line_names_the_capacity_less_the_headroom_and_what_fits_without_it(cli, tmp_path):
    """'none of the 3,622 plans fits in 79.11 GiB' while -o had rows with fits_in_memory true (the headroom
    dropped them): the line names the capacity less the headroom, and how many fit without it."""
    import csv
    import re

    path = tmp_path / "p70.csv"
    args = ["plan", "--model", "llama3-70b", "--system", "dgx-h100", "--nodes", "2", "--global-batch", "128"]
    code, _, err = cli([*args, "-o", str(path)])
    rows = list(csv.DictReader(path.open()))
    fit = sum(r["fits_in_memory"] == "true" for r in rows)
    assert (
        code == 0 and err.startswith("note: ") and fit > 0 and not any(r["fits_with_headroom"] == "true" for r in rows)
    ), err
    assert "fits in 71.20 GiB per GPU, the 79.11 GiB" in err and "less the --memory-headroom of 7.91 GiB" in err
    assert re.search(rf"; {fit} fits? without the headroom", err), err
    code, _, err = cli(["plan", "--model", "llama3-405b", "--system", "dgx-h100", "--global-batch", "16",
                        "--memory-headroom", "0"])  # fmt: skip
    assert code == 2 and "without the headroom" not in err and "headroom of" not in err, err


@pytest.mark.parametrize("flag", ["--ttft-max", "--tpot-max"])
def test_a_latency_targets_bad_unit_hint_does_not_offer_the_bare_number_it_refuses(cli, flag):
    base = ["serve", "--model", "llama3-8b", "--system", "dgx-h100", flag]
    code, _, err = cli([*base, "5kg"])
    assert code == 2 and "'5kg' is not a time" in err and "as a number" not in err and "500ms" in err, err
    code, _, err = cli([*base, "0.05"])
    assert code == 2 and "give a time with its unit" in err, err


def test_a_better_neighbour_the_emitted_stack_does_not_implement_says_so(cli):
    """--emit torchtitan --zero 0,1,2 notes 'ZeRO 1 not searched' yet the why said only 'ZeRO-1: 0.8% better but
    does not fit'."""
    args = ["plan", "--model", "llama3-8b", "--system", "dgx-h100", "--nodes", "1", "--global-batch", "64"]
    code, out, err = cli([*args, "--emit", "torchtitan", "--zero", "0,1,2", "--json"])
    assert code == 0, err
    import json

    why = {a["change"]: a for a in json.loads(out)["why"]}
    assert why["ZeRO-1"]["relative"] < 0, why["ZeRO-1"]
    assert "better but torchtitan-compile implements ZeRO 0, 2, 3 only" in why["ZeRO-1"]["text"], why["ZeRO-1"]


def test_the_fewest_layers_recomputed_whole_is_not_said_of_a_neighbour_that_does_not_fit(cli):
    import json

    args = ["plan", "--model", "gpt-6.7b", "--system", "rtx4090-8x", "--nodes", "2", "--global-batch", "64"]
    code, out, err = cli([*args, "--json"])
    assert code == 0, err
    why = json.loads(out)["why"]
    unfit = [a for a in why if not a["fits_with_headroom"]]
    assert {"ZeRO-0", "micro-batch 2", "schedule gpipe"} <= {a["change"] for a in unfit}, why
    assert not any("fewest layers recomputed whole" in a["text"] for a in unfit), unfit
    assert any(
        "fewest layers recomputed whole" in a["text"] for a in why if a["fits_with_headroom"]
    )  # still said where it holds


@pytest.mark.parametrize(
    "args",
    [
        ["plan", "--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", "16"],  # rich's console
        ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", "16", "--tp", "2", "--json"],
    ],
)
def test_a_closed_pipe_ends_the_command_quietly_with_status_0(args):
    """`shardwise plan ... | head -1` exited with status 1 and no message (rich's console), `predict --json`
    too (click's own handler of EPIPE); other commands exited 0: one rule, 0 and no message."""
    import os
    import subprocess
    import sys

    read, write = os.pipe()
    os.close(read)  # the reader gone before the first line: every write meets a closed pipe
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "shardwise", *args], stdout=write, stderr=subprocess.PIPE, text=True
        )
    finally:
        os.close(write)
    assert proc.returncode == 0 and proc.stderr == "", (proc.returncode, proc.stderr)


def test_figure_legends_name_the_tp_term_as_the_tables_do():
    """colors.TERM_NAMES['tp_comm'] was 'TP communication' in every stacked-bar legend, while the tables and
    why-lines say 'CP communication' (tp 1) or 'TP/CP communication' (`engines.result.tp_comm_name`)."""
    pytest.importorskip("dash")
    pytest.importorskip("matplotlib")
    from shardwise.explore import pages
    from shardwise.plots import stacked_bars

    parts = {"compute": 1.0, "tp_comm": 0.5}
    rows = [{"tp": t, "pp": 1, "dp": 4, "cp": c, "vpp": 1, "micro_batch": 1, "breakdown_s": parts} for t, c in
            ((1, 2), (2, 2))]  # fmt: skip
    names = [bar["name"] for bar in pages._plans_figure(rows)["data"]]
    assert names == ["compute", "TP/CP communication"], names
    names = [bar["name"] for bar in pages._plans_figure(rows[:1])["data"]]
    assert names == ["compute", "CP communication"], names
    assert pages._tp_comm({"tp=1,cp=2": parts, "pp=8": parts}) == "CP communication"
    assert pages._tp_comm({"tp=8": parts}) == "TP communication"
    fig = stacked_bars(["a"], {"compute": [1.0], "tp_comm": [0.5]}, "s", "t", tp_comm="CP communication")
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["compute", "CP communication"]
