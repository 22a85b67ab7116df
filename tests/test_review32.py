"""What review 32 (the one-tool pass over the CLI) found: each a test that failed before the fix."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

H100_8B = ["--model", "llama3-8b", "--system", "dgx-h100"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_an_answer_stdout_cannot_hold_is_one_line_not_a_traceback():
    """`predict --json > /dev/full` raised OSError (ENOSPC) out of click.echo: a traceback."""
    args = [sys.executable, "-m", "shardwise", "predict", *H100_8B, "--global-batch", "16", "--tp", "2", "--json"]
    with open("/dev/full", "w") as full:
        proc = subprocess.run(args, stdout=full, stderr=subprocess.PIPE, text=True)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == ["error: cannot write the output (no space left on the device)"]


def test_plan_o_writes_every_plan_when_none_fits(cli, tmp_path):
    """`plan -o FILE` wrote nothing when no plan fits, though -o holds 'every evaluated plan, fitting or not'."""
    import csv

    path = tmp_path / "all.csv"
    code, _, err = cli(
        ["plan", "--model", "llama3-405b", "--system", "dgx-h100", "--global-batch", "16", "-o", str(path)]
    )
    assert code == 0 and len(err.strip().splitlines()) == 1, err  # what -o asked for was written (review 37)
    assert err.startswith("note: ") and "none of the" in err and f"evaluated plans written to {path}" in err
    rows = list(csv.DictReader(path.open()))
    assert len(rows) > 100 and all(r["fits_in_memory"] == "false" for r in rows)


def test_fits_in_memory_is_predicts_everywhere_and_the_planners_filter_has_its_own_key(cli):
    """llama3-8b on a100-pcie-8x, dp 8, mb 2, full recompute, ZeRO-1 needs 80.0 GB a GPU: within its capacity,
    not within the planner's 10% headroom; plan's rows said fits_in_memory false where predict said true."""
    import json

    args = ["--model", "llama3-8b", "--system", "a100-pcie-8x", "--global-batch", "64"]
    layout = ["--dp", "8", "--micro-batch", "2", "--recompute", "full", "--zero", "1"]
    code, out, err = cli(["predict", *args, *layout, "--json"])
    assert code == 0, err
    predicted = json.loads(out)
    code, out, err = cli(["plan", *args, *layout, "--tp", "1", "--pp", "1", "--schedule", "1f1b", "--json"])
    assert code == 2 and "none of the" in err  # the headroom drops it
    code, out, err = cli(["plan", *args, *layout, "--tp", "1", "--pp", "1", "--schedule", "1f1b", "-o", "-"])
    header, *rows = out.splitlines()
    names = header.split(",")
    row = dict(zip(names, rows[0].split(","), strict=True))
    assert row["fits_in_memory"] == str(predicted["fits_in_memory"]).lower() == "true"
    assert row["fits_with_headroom"] == "false"
    code, out, err = cli(["plan", *args, *layout, "--memory-headroom", "0", "--json"])
    assert code == 0, err
    best = json.loads(out)["plans"][0]
    assert best["fits_in_memory"] is True and best["fits_with_headroom"] is True


@pytest.mark.parametrize(
    "command",
    [
        ["crossover", "--vary", "batch=1,8", "--no-plot"],
        ["sweep", "--vary", "batch=1..16", "--vary", "layers=8,16"],
        ["sensitivity", "--layers-values", "8,96", "--hidden-values", "1024,4096"],
    ],
)
def test_another_gpu_without_intra_link_is_refused_as_predict_refuses(cli, command):
    """crossover / sweep / sensitivity --gpu h100-sxm5-80gb compared on nvlink3 (A100's) without a word."""
    code, _, err = cli([*command, "--gpu", "h100-sxm5-80gb"])
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "--intra-link is required with --gpu h100-sxm5-80gb" in err and "--intra-link nvlink4" in err
    code, _, err = cli(["predict", "--model", "llama3-8b", "--gpu", "h100-sxm5-80gb", "--global-batch", "8"])
    assert code == 2 and "--intra-link is required with --gpu" in err
    if command[0] == "crossover":  # the brief's own GPU keeps the brief's links
        assert cli([*command, "--gpu", "a100-sxm4-40gb"])[0] == 0


def test_the_context_parallel_ring_is_not_labelled_tp_communication(cli):
    """tp=1, cp=16: the ring's exposed time sat in predict's table and plan's why lines as 'TP communication'."""
    from shardwise.analyses.plan_explain import compare
    from shardwise.engines.result import tp_comm_name
    from shardwise.requests.training import PredictRequest

    args = [*H100_8B, "--nodes", "2", "--global-batch", "16", "--zero", "1"]
    code, out, err = cli(["predict", *args, "--cp", "16", "--dp", "1"])
    assert code == 0, err
    assert "CP communication (exposed)" in out and "TP communication" not in out
    code, out, err = cli(["predict", *args, "--cp", "8", "--tp", "2", "--dp", "1"])
    assert code == 0 and "TP/CP communication (exposed)" in out, err
    runs = [PredictRequest.from_argv([*args, "--cp", str(cp), "--dp", str(16 // cp)]).run() for cp in (1, 16)]
    best, ring = (r.estimate for r in runs)
    assert float(ring.breakdown.tp_comm_s) > 0.1
    said = compare(best, ring, 80e9)
    assert "CP communication +" in said and "TP communication" not in said
    assert [tp_comm_name(1, 1), tp_comm_name(8, 1), tp_comm_name([1, 2], [4, 1])] == [
        "TP communication",
        "TP communication",
        "TP/CP communication",
    ]


def test_refusals_say_the_fix_in_the_users_terms(cli):
    """(a) a mixture of experts under crossover's default tp=8 was refused without saying to write sp=on;
    (b) plan --vpp 2 --schedule 1f1b said 'no valid layout' where predict names the rule; (c) 100 GPUs on a
    GB200 NVL72 with tp 4 failed on 'gpus_per_node=50', a value the user never gave."""
    moe = ["crossover", "--model", "mixtral-8x7b", "--gpu", "h100-sxm5-80gb", "--intra-link", "nvlink4"]
    code, _, err = cli([*moe, "--vary", "batch=1..16", "--no-plot"])
    assert code == 2 and "needs sequence parallelism; write --plan tp=8,sp=on" in err, err
    code, _, err = cli(["plan", *H100_8B, "--vpp", "2", "--schedule", "1f1b", "--global-batch", "16"])
    assert code == 2 and "--vpp 2 needs --schedule interleaved" in err and "no valid layout" not in err, err
    gb200 = ["predict", "--model", "llama3-70b", "--system", "gb200-nvl72", "--tp", "4"]
    code, _, err = cli([*gb200, "--num-gpus", "100", "--global-batch", "100"])
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "gpus_per_node" not in err and "--num-gpus 100: not a whole number of 72-GPU NVLink domains" in err
    assert "give a multiple of 72 GPUs, or 96 or 104" in err
    for n in ("96", "104", "144"):  # the counts it names work
        assert cli([*gb200, "--num-gpus", n, "--global-batch", n])[0] == 0


def test_minor_output_mends(cli):
    """--sequence-parallel at tp 1 printed 'sequence-parallel=on' (it changes nothing there); 'dp 8 x 1
    micro-batches'; presets show --json wrote params as a float; sensitivity --json had no flag for the
    table's '*' (a plan does not fit); scenario --json had no holds/fails verdict."""
    import json

    code, out, err = cli(["predict", *H100_8B, "--global-batch", "8", "--dp", "8", "--sequence-parallel"])
    said = " ".join(out.split())
    assert code == 0 and "sequence-parallel=on (no effect at tp 1)" in said, err
    assert "dp 8 x 1 micro-batch of 1" in said
    code, out, _ = cli(["predict", *H100_8B, "--global-batch", "16", "--dp", "8", "--tp", "1"])
    assert "dp 8 x 2 micro-batches of 1" in " ".join(out.split()) and "sequence-parallel=off" in out
    code, out, _ = cli(["presets", "show", "mixtral-8x7b", "--json"])
    counts = json.loads(out)["models"]
    assert type(counts["params"]) is int and type(counts["activated_params"]) is int
    sens = ["sensitivity", "--gpu", "h100-sxm5-80gb", "--intra-link", "NVLink=nvlink4", "--no-plot"]
    code, out, _ = cli([*sens, "--layers-values", "8,96", "--hidden-values", "1024,4096"])
    stars = [line for line in out.splitlines() if line.rstrip(" │").endswith("*")]
    code, out, err = cli([*sens, "--layers-values", "8,96", "--hidden-values", "1024,4096", "--json"])
    assert code == 0, err
    bars = json.loads(out)["one_at_a_time"]["NVLink"]["bars"]
    unfit = [b for b in bars if not (b["fits_low"] and b["fits_high"])]
    assert stars and len(unfit) == len(stars)
    code, out, _ = cli(["scenario", "small-batch", "thin-layers", "--json"])
    verdicts = {r["name"]: r["holds"] for r in json.loads(out)["scenarios"]}
    assert verdicts == {"small-batch": False, "thin-layers": True}


def test_bf16_on_a_gpu_without_it_is_refused_and_the_default_is_fp16(cli):
    """V100 has no BF16 (its preset's source says so), yet bf16 -- given or the default -- was priced at
    the FP16 peak without a word, where fp8 on A100 is refused in one line."""
    import json

    from shardwise import presets

    assert not presets.gpu("v100-sxm2-32gb").bf16
    assert all(presets.gpu(g).bf16 for g in presets.raw("gpus") if not g.startswith("v100"))
    v100 = ["--model", "gpt-96l-4096h", "--system", "dgx-1-v100", "--nodes", "2", "--global-batch", "16"]
    layout = ["--pp", "8", "--dp", "2"]
    for command in (["predict", *v100, *layout], ["plan", *v100], ["crossover", "--system", "dgx-1-v100"]):
        code, _, err = cli([*command, "--precision", "bf16"])
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert (
            "--precision bf16: gpu 'v100-sxm2-32gb' has no BF16 tensor cores" in err and "use --precision fp16" in err
        )
    code, out, err = cli(["predict", *v100, *layout, "--json"])
    assert code == 0, err
    assert json.loads(out)["scenario"]["plan"]["precision"] == "fp16"
    assert "v100-sxm2-32gb has no BF16 tensor cores: fp16" in err
    code, fp16, _ = cli(["predict", *v100, *layout, "--json", "--precision", "fp16"])
    assert json.loads(fp16)["step_time_s"] == json.loads(out)["step_time_s"]
    # vLLM: TensorRT-LLM, serve's default engine, does not run on Volta (`engines.engine_formats`)
    serve = ["serve", "--model", "llama3-8b", "--system", "dgx-1-v100", "--plan", "tp=1", "--framework", "vllm"]
    code, out, err = cli(serve)
    assert code == 0 and "weights fp16 (GEMMs in fp16), KV cache fp16" in " ".join(out.split()), err
    code, _, err = cli([*serve, "--weight-precision", "bf16"])
    assert code == 2 and "use --weight-precision fp16" in err
    code, out, err = cli(["predict", *H100_8B, "--global-batch", "8", "--json"])  # other GPUs: bf16, no note
    assert json.loads(out)["scenario"]["plan"]["precision"] == "bf16" and "BF16" not in err
