"""What a new user met in the eighth walkthrough: each fix with a test that failed before it."""

from __future__ import annotations

import json

import pytest


def test_sweep_names_the_unit_of_each_range_and_its_json_has_no_float_noise(cli):
    """`sweep` printed 'bandwidth 1..1000 (49)' with no unit (the ranges are in GB/s, µs, ...: the
    JSON's `units`), and its JSON gave the top of 1GB/s..1000GB/s as 1000.0000000000001."""
    grid = ["sweep", "--vary", "batch=1..4", "--vary", "bandwidth=1GB/s..1000GB/s:3", "--no-plot"]
    code, out, err = cli(grid)
    assert code == 0, err
    assert "grid: batch 1..4 (4 values) x bandwidth 1..1000 GB/s (3 values)" in out
    code, out, err = cli([*grid, "--json"])
    assert code == 0, err
    data = json.loads(out)
    # SI, as crossover's and sensitivity's (review 40 #11); the ends exactly as given
    assert data["variables"]["bandwidth"] == [1e9, 1e12, 3] and data["units"]["bandwidth"] == "B/s"


def test_a_missed_target_is_shown_with_the_digits_that_tell_it_from_the_target():
    """`serve --tpot-max 50ms` said a plan stops 'at 240: TPOT 50 ms': a miss that read as meeting the
    target (50.04 ms rounded to three digits). The value now carries the digits that set it apart."""
    from shardwise.units import format_seconds, format_seconds_beside

    assert format_seconds(0.05004) == "50 ms"
    assert format_seconds_beside(0.05004, 0.050) == "50.04 ms"
    assert format_seconds_beside(0.050004, 0.050) == "50.004 ms"
    assert format_seconds_beside(0.0503, 0.050) == "50.3 ms"  # three digits where they suffice
    assert format_seconds_beside(0.536, 0.5) == "536 ms"


@pytest.mark.slow
def test_validate_public_does_not_call_the_inspected_lora_holdout_untouched():
    """README and validation.md say the LoRA holdout rows were inspected while the recipes were read
    (7.1% is not an untouched figure), but `validate public` labelled their row 'holdout (untouched)'."""
    from shardwise.analyses import public_validation as pv
    from shardwise.cli.validate_public import INSPECTED, summary_rows

    labels = {(name, label) for name, label, _ in summary_rows()}
    assert (pv.LORA_TABLE, INSPECTED) in labels and (pv.LORA_TABLE, "holdout (untouched)") not in labels
    assert ("all public sources", "holdout (untouched)") in labels  # the dense holdout keeps its label


def test_a_hugging_face_snapshot_directory_is_answered_with_its_config_json(cli, tmp_path):
    """`--model DIR` of a downloaded checkpoint said only 'a directory; give a model preset's name, a
    YAML file or a config.json'; where the directory holds a config.json that file is read (review 37
    finding 17: naming the file and refusing was one step short)."""
    snapshot = tmp_path / "Meta-Llama-3-8B"
    snapshot.mkdir()
    (snapshot / "config.json").write_text(
        json.dumps(
            {
                "model_type": "llama",
                "hidden_size": 256,
                "intermediate_size": 512,
                "num_attention_heads": 4,
                "num_hidden_layers": 2,
                "vocab_size": 1000,
                "max_position_embeddings": 512,
            }
        )
    )
    code, out, err = cli(["predict", "--model", str(snapshot), "--system", "dgx-h100", "--global-batch", "8"])
    assert code == 0 and out.startswith("Meta-Llama-3-8B ("), err  # its config.json read (review 37)
    code, _, err = cli(
        ["predict", "--model", str(snapshot / "config.json"), "--system", "dgx-h100", "--global-batch", "8"]
    )
    assert code == 0, err
    code, _, err = cli(["predict", "--model", str(tmp_path), "--system", "dgx-h100", "--global-batch", "8"])
    assert code == 2 and "give a model preset's name, a YAML file or a config.json" in err


def test_every_json_memory_breakdown_is_in_whole_bytes(cli):
    """predict's JSON gave the allocator's share as 4297903308.8 bytes (walkthrough7 made the GPU's
    capacity whole, not the breakdown); predict, plan, serve and timeline now give whole bytes."""
    machine = ["--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", "8", "--json"]
    outputs = {}
    for args in (["predict", *machine], ["plan", *machine, "--top", "1"], ["timeline", *machine, "--pp", "2"]):
        code, out, err = cli(args)
        assert code == 0, err
        outputs[args[0]] = json.loads(out)
    code, out, err = cli(["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--plan", "tp=1", "--json"])
    assert code == 0, err
    breakdowns = [
        outputs["predict"]["memory_bytes"],
        outputs["plan"]["plans"][0]["memory_bytes"],
        outputs["timeline"]["memory_bytes"],
        json.loads(out)["plans"][0]["memory_bytes"],
    ]
    for parts in breakdowns:
        assert parts["total"] > 1e9 and all(isinstance(v, int) for v in parts.values()), parts
    for parts in breakdowns[:3]:  # a training step's parts still add up (serve's list only two of its parts)
        assert sum(v for k, v in parts.items() if k not in ("total", "cached")) == parts["total"], parts
    assert outputs["predict"]["memory_bytes"]["allocator"] == round(outputs["predict"]["memory_bytes"]["allocator"])


def test_validate_refuses_rows_where_no_table_lists_runs(cli):
    """`validate narayanan21_table1 --rows dev` ran and ignored --rows; only public, collectives,
    memory and --runs list runs, so elsewhere it is one line and exit status 2."""
    for args in (["narayanan21_table1"], [], ["--calibrated"]):
        code, out, err = cli(["validate", *args, "--rows", "dev"])
        assert code == 2 and not out, args
        assert err.strip().startswith("error: --rows dev lists the runs of validate public, collectives or memory")


def test_messages_name_what_to_drop_and_what_a_runs_csv_is_for(cli, tmp_path):
    """`serve --batching static --requests 100` said 'drop --batching static, or drop it' (which?), and
    `--calibration runs.csv` said 'line 2 is not valid YAML' where the user gave the runs, not their fit."""
    code, _, err = cli(
        [
            "serve",
            "--model",
            "llama3-8b",
            "--system",
            "dgx-h100",
            "--plan",
            "tp=1",
            "--batching",
            "static",
            "--requests",
            "100",
        ]
    )
    assert code == 2 and err.strip().endswith("drop --batching static, or drop --requests")
    runs = tmp_path / "runs.csv"
    runs.write_text("model,system,tp,global_batch,step_time_s\nllama3-8b,dgx-h100,1,8,1.0\n")
    code, out, err = cli(
        ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", "8", "--calibration", str(runs)]
    )
    assert code == 2 and not out
    assert err.strip() == (
        f"error: {runs}: a CSV of runs, not a calibration; fit one first: shardwise calibrate {runs} -o FILE.yaml, "
        "then --calibration FILE.yaml"
    )


def test_a_rate_link_flag_out_of_range_is_not_told_to_give_a_rate(cli):
    """`--inter-link 0GB/s` ended '...; or give a YAML file or a rate like 600GB/s' (it was a rate) and
    `--intra-link 5` suggested a rate twice; the suggestion stays for a name that is no preset."""
    base = ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", "16", "--nodes", "2"]
    for flag, value in (("--inter-link", "0GB/s"), ("--intra-link", "5")):
        code, out, err = cli([*base, flag, value])
        assert code == 2 and not out and "or give a YAML file or a rate like" not in err, err
        assert err.count("\n") == 1
    code, _, err = cli([*base, "--inter-link", "nosuch"])
    assert code == 2 and err.strip().endswith("or give a YAML file or a rate like 600GB/s")


def test_a_crossover_over_the_gpu_count_says_so_in_words():
    """`crossover --vary gpus=...` described its machine as 'gpus swept a100-sxm4-80gb'; now 'a100-sxm4-80gb,
    the GPU count swept' (and a fixed count still reads '8 x a100-sxm4-80gb')."""
    from shardwise.requests.compare import CrossoverRequest, ExperimentRequest

    swept = CrossoverRequest(ExperimentRequest(global_batch=64), vary="gpus=8,16").run().as_dict()
    fixed = CrossoverRequest(ExperimentRequest(), vary="batch=1..4").run().as_dict()
    text = json.dumps(swept)
    assert "a100-sxm4-80gb, the GPU count swept" in text and "gpus swept" not in text
    assert "8 x a100-sxm4-80gb" in json.dumps(fixed)


def test_recompute_layers_beyond_a_stage_says_every_layer_is_recomputed(cli):
    """`predict --recompute-layers 40` on Llama 3 8B (32 layers, one stage) said 'the first 40 layer(s) of each
    stage recomputed whole' (Megatron recomputes the 32 there are); now it says every layer is."""
    base = ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", "8"]
    code, out, err = cli([*base, "--recompute-layers", "40"])
    assert code == 0, err
    text = " ".join(out.split())  # the report wraps its lines
    assert "(+ every layer recomputed whole: the first 40 of each stage, which holds at most 32)" in text
    code, out, err = cli([*base, "--recompute-layers", "4"])
    assert code == 0 and "(+ the first 4 layer(s) of each stage recomputed whole)" in " ".join(out.split())
