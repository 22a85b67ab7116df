"""What a new user met walking through plan, serve, calibrate, explore, timeline and emit with their
own inputs (sixth pass): each finding's fix, with a test that failed before it."""

from __future__ import annotations

import json


def test_why_says_why_a_neighbour_was_not_searched_when_nothing_was_fixed():
    """Llama 3 70B on 64 H100: the best plan interleaves v=8 at pp=2 (40 layers a stage); its
    neighbour pp=4 keeps v=8, which does not divide 20 layers, so the search (v divides a stage's
    layers) left it out. The why said "outside your fixed values" though the user fixed nothing."""
    from shardwise.requests import PlanRequest

    result = PlanRequest.from_argv("--model llama3-70b --system dgx-h100 --nodes 8 --global-batch 512 --top 1").run()
    assert (result.search.plan(int(result.search.ranked()[0])).vpp, result.rows[0]["pp"]) == (8, 2)
    excluded = {a.change: a.excluded for a in result.why}
    assert "does not divide a stage's 20 layers" in excluded["pp=4, dp=2"]
    assert "--vpp 8" in excluded["pp=4, dp=2"]
    assert not any(e and ("fixed values" in e or "values searched" in e) for e in excluded.values())
    # a value the user fixed is named by its flag, and only that one
    fixed = PlanRequest.from_argv("--model llama3-8b --system dgx-h100 --global-batch 64 --top 1 --tp 2").run()
    named = {a.change: a.excluded for a in fixed.why}
    assert named["tp=4, dp=2"] == "outside the values searched (--tp)"


def test_serve_without_plans_compares_a_moe_s_expert_layouts_and_notes_none_of_them():
    """`serve` with no --plan on a mixture of experts once compared tp x pp layouts only and said so in
    a note; since moedefault it compares the expert-parallel layouts too (ep = tp, and data-parallel
    attention with ep over the GPUs), so the old note is gone. A dense model's answer has no expert
    layouts, nor a note about them."""
    from shardwise.requests import ServeRequest

    moe = ServeRequest.from_argv("--model qwen3-235b-a22b --system dgx-h200 --num-gpus 16").setting()
    assert any(dict(s.options).get("ep", 1) > 1 for s in moe.specs)
    assert not any("no expert parallelism" in n for n in moe.notes)
    dense = ServeRequest.from_argv("--model llama3-70b --system dgx-h200 --num-gpus 16").setting()
    assert all(dict(s.options).get("ep") is None for s in dense.specs)
    assert not any("expert parallelism" in n for n in dense.notes)


def test_predict_warns_when_a_plan_fits_inside_the_headroom_plan_keeps_free(cli):
    """Llama 3 8B on a DGX H100, tp=2 micro-batch 2 ZeRO-1: predict said "fits" (84.7 of 84.9 GB)
    while plan's why said the same layout "does not fit: needs 85 GB per GPU (> 76 GB)". predict now
    says the plan keeps 10% free and drops it; a layout with room to spare gets no such line."""
    base = ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--tp", "2", "--global-batch", "64"]
    code, out, err = cli([*base, "--micro-batch", "2"])
    assert code == 0, err
    assert "fits in" in out and "less than the 10% of each GPU `plan` keeps free" in " ".join(out.split())
    code, out, err = cli([*base, "--micro-batch", "1"])
    assert code == 0, err
    assert "fits in" in out and "keeps free" not in out


def test_a_model_file_without_family_says_what_it_was_given(cli, tmp_path):
    """A Llama-like model YAML that sets gated_mlp and rmsnorm but names no family was priced with
    the gpt family's tied embeddings, learned positions, biases and dropout, and nothing said so:
    every command that reads it notes it (stderr and JSON `notes`), `presets show FILE` marks the
    fields so filled; a file that names its family, and a preset, get no note."""
    from shardwise.requests import PlanRequest, PredictRequest, ServeRequest

    path = tmp_path / "mine.yaml"
    path.write_text(
        "name: my-13b\nlayers: 40\nhidden: 5120\nheads: 40\nkv_heads: 8\nffn_hidden: 13824\n"
        "vocab: 32000\nseq_len: 4096\ngated_mlp: true\nrmsnorm: true\n"
    )
    m = str(path)
    predicted = PredictRequest.from_argv(f"--model {m} --system dgx-h100 --tp 8 --global-batch 8").run()
    assert predicted.estimate.scenario.model.tied_embeddings  # what the note says
    planned = PlanRequest.from_argv(f"--model {m} --system dgx-h100 --global-batch 8 --top 1").run()
    served = ServeRequest.from_argv(f"--model {m} --system dgx-h100 --plan tp=8").setting()
    for notes in (predicted.notes, planned.notes, served.notes):
        assert sum("names no family" in n and "tied_embeddings true" in n for n in notes) == 1, notes
    code, out, err = cli(["crossover", "--model", m, "--json"])
    assert code == 0, err
    assert any("names no family" in n for n in json.loads(out)["notes"])
    code, out, _ = cli(["presets", "show", m])
    assert code == 0 and "tied_embeddings: True  (the default: no family given)" in out
    assert "gated_mlp: True\n" in out  # given by the file: not marked
    path.write_text(path.read_text() + "family: llama\n")
    again = PredictRequest.from_argv(f"--model {m} --system dgx-h100 --tp 8 --global-batch 8").run()
    preset = PredictRequest.from_argv("--model llama3-8b --system dgx-h100 --tp 8 --global-batch 8").run()
    assert not any("family" in n for n in (*again.notes, *preset.notes))


RUNS = """id,model,system,num_gpus,tp,pp,global_batch,micro_batch,recompute,step_time_s
r1,llama3-8b,dgx-h100,8,1,1,64,1,none,9.8
r2,llama3-8b,dgx-h100,8,2,1,64,2,none,9.1
r3,llama3-8b,dgx-h100,8,4,1,64,2,none,9.6
r4,llama3-8b,dgx-h100,16,2,1,128,1,selective,10.4
r5,llama3-70b,dgx-h100,64,8,2,512,1,none,61.0
r6,llama3-70b,dgx-h100,64,4,4,512,1,full,79.5
"""


def test_timeline_names_a_calibrated_fixed_time_in_the_rest_of_the_step(cli, tmp_path):
    """Runs whose short steps the model misses by ~3 s calibrate a fixed time per step; the
    timeline's step then ends ~3 s after its pipeline, and its last line called all of that "the
    optimizer". It names the fixed time; uncalibrated it is not mentioned."""
    runs, cal = tmp_path / "runs.csv", tmp_path / "cal.yaml"
    runs.write_text(RUNS)
    code, _, err = cli(["calibrate", str(runs), "-o", str(cal)])
    assert code == 0, err
    argv = ["timeline", "--model", "llama3-8b", "--system", "dgx-a100", "--nodes", "8", "--tp", "8", "--pp", "8"]
    argv += ["--global-batch", "16", "--no-plot"]
    code, out, err = cli([*argv, "--calibration", str(cal)])
    assert code == 0, err
    text = " ".join(out.split())
    assert "the rest of the step is the optimizer, and " in text and "of fixed time per step (calibrated)" in text
    code, out, err = cli(argv)
    assert code == 0 and "fixed time" not in out


def test_serve_says_a_long_prompt_not_the_weights_leaves_no_sequence_room(cli):
    """Llama 3 70B in int4 on eight RTX 4090s with a 200,000-token prompt: 5 GB of weights per GPU,
    but one request's KV cache (8.2 GB per GPU) is more than the engine's buffers leave. serve blamed
    the weights ("5.0 GB of weights per GPU leave no room for a KV cache"); it names the request's
    KV cache. At tp=2 the 20 GB of weights leave room for a 3.1 GB KV cache, which the engine's
    buffers for that prompt (35 GB) take: those are named (the weights were, till wt6fix)."""
    argv = ["serve", "--model", "llama3-70b", "--system", "rtx4090-8x", "--weight-precision", "int4"]
    code, out, err = cli([*argv, "--input-len", "200000", "--plan", "tp=8", "--plan", "tp=2"])
    assert code == 0, err
    text = " ".join(out.split())
    assert "tp=8: does not fit: one request's KV cache (8.2 GB per GPU for 200,128 tokens) is more than" in text
    assert "tp=2: does not fit: the engine's buffers sized for a 200,000-token prompt (35.1 GB per GPU" in text


def test_the_interleaved_schedule_without_virtual_stages_is_refused_in_one_line(cli):
    """`timeline --schedule interleaved` without --vpp simulated "interleaved" with one model chunk
    per stage (a schedule no framework runs: 1F1B under another name, with interleaving's rules and
    overlapped sends) and printed it as interleaved. It is refused, naming --vpp; with --vpp 2 it runs."""
    argv = ["--model", "llama3-70b", "--system", "dgx-h100", "--nodes", "8", "--tp", "8", "--pp", "4"]
    argv += ["--global-batch", "64", "--schedule", "interleaved"]
    for command in (["timeline", "--no-plot"], ["predict"]):
        code, out, err = cli([*command, *argv])
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
        assert "--schedule interleaved needs --vpp N, N >= 2" in err
    code, _, err = cli(["predict", *argv, "--vpp", "2"])
    assert code == 0, err


def test_serve_targets_header_gives_units_and_stdout_starts_with_the_answer(cli):
    """`serve --ttft-max 1` (a bare number: seconds) printed "targets: TTFT <= 1", and its progress
    bar, drawn on stdout, left a blank first line when piped. The targets carry their unit and the
    bar draws on stderr (a bare number is refused now: tests/test_review32_serving.py)."""
    argv = ["serve", "--model", "llama3-70b", "--system", "rtx4090-8x", "--weight-precision", "int4"]
    code, out, err = cli([*argv, "--ttft-max", "1s", "--tpot-max", "150ms"])
    assert code == 0, err
    assert out.startswith("llama3-70b on 8 x rtx-4090")
    assert "targets: TTFT <= 1 s and TPOT <= 150 ms at p90" in " ".join(out.split())


def test_progress_bars_draw_on_stderr_and_only_on_a_terminal(capsys):
    """A bar draws on stderr; piped (not a terminal) it draws nothing, not even the blank line rich
    ends a bar with, which came first in `serve 2>&1 | head`."""
    from shardwise.cli.render import progress_bar, progress_console

    assert progress_console().stderr
    with progress_bar(3, "plans") as advance:
        for _ in range(3):
            advance()
    assert capsys.readouterr() == ("", "")


def test_serve_in_flight_advances_a_progress_bar_over_its_plans_and_pipeline_splits():
    """`serve` in flight simulates each plan's traffic (22 s for qwen3-235b's 14 layouts of 16 H200 at
    20,000 requests) with nothing on the screen: `priced` now advances a bar once per plan and once
    per pipeline plan's scaling split, as many steps as `progress_steps` says at most."""
    from shardwise.requests import ServeRequest
    from shardwise.requests.serve_result import priced, progress_steps

    request = ServeRequest.from_argv("--model llama3-8b --system dgx-h100 --plan tp=8 --plan tp=4,pp=2 --plan pp=8")
    s = request.setting()
    calls = []
    result = priced(request, s, lambda n=1: calls.append(n))
    assert len(calls) == 3
    assert result.scaling is not None
    assert 3 < len(calls) <= progress_steps(s) == 5


def test_emit_vllm_of_a_model_file_without_hf_id_does_not_call_it_a_preset(cli, tmp_path):
    """`serve --model mine.yaml --emit vllm` said "'my-13b' is a shardwise preset": it is the user's
    file. The refusal names what is missing (`hf_id` in the file, or --hf-id); with `hf_id` the file
    emits its server."""
    path = tmp_path / "mine.yaml"
    fields = (
        "name: my-13b\nfamily: llama\nlayers: 40\nhidden: 5120\nheads: 40\nkv_heads: 8\nvocab: 32000\nseq_len: 4096\n"
    )
    path.write_text(fields)
    argv = ["serve", "--model", str(path), "--system", "dgx-h100", "--plan", "tp=8", "--emit", "vllm"]
    code, out, err = cli(argv)
    assert code == 2 and out == "" and "is a shardwise preset" not in err
    assert "a model file without `hf_id: ORG/NAME`" in err and "--hf-id ORG/NAME" in err
    path.write_text(fields + "hf_id: me/my-13b\n")
    code, out, err = cli(argv)
    assert code == 0, err
    assert "vllm serve me/my-13b" in out


SERVING_RUNS = """id,model,system,tp,input_len,output_len,concurrency,tpot_s
s1,llama3-70b,rtx4090-8x,8,512,128,32,0.18
s2,llama3-70b,rtx4090-8x,4,512,128,32,0.12
"""


def test_serving_runs_say_they_are_priced_as_static_batches(cli, tmp_path):
    """A serving row's `concurrency` 32 was priced as one static batch (TPOT 70 ms for llama3-70b on
    eight RTX 4090s) while `serve --concurrency 32` keeps 32 requests in flight (179 ms): the same
    word, two measurements, and nothing said so. calibrate notes it (stderr, JSON `serving`), and
    serve in flight with that calibration notes its runs were static batches."""
    runs, cal = tmp_path / "srv.csv", tmp_path / "srv.yaml"
    runs.write_text(SERVING_RUNS)
    code, out, err = cli(["calibrate", str(runs), "-o", str(cal)])
    assert code == 0, err
    assert "priced as one static batch of `concurrency` sequences" in " ".join(err.split())
    code, out, err = cli(["calibrate", str(runs), "-o", str(cal), "--json"])
    assert code == 0 and "static batch" in json.loads(out)["serving"]
    serve = ["serve", "--model", "llama3-70b", "--system", "rtx4090-8x", "--plan", "tp=8", "--calibration", str(cal)]
    code, _, err = cli(serve)
    assert code == 0 and "were fitted as static batches" in " ".join(err.split())
    code, _, err = cli([*serve, "--batching", "static"])
    assert code == 0 and "static batches" not in err
    training = tmp_path / "train.csv"
    training.write_text(RUNS)
    code, _, err = cli(["calibrate", str(training), "-o", str(tmp_path / "t.yaml")])
    assert code == 0 and "static batch" not in err


def test_in_flight_only_options_are_refused_with_a_static_batch(cli):
    """`serve --batching static` priced one batch in closed form and dropped --max-batched-tokens,
    --requests and --seed without a word; they are refused in one line naming each, as --burstiness
    without --request-rate is. Their defaults, and the options in flight, still run."""
    argv = ["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--plan", "tp=8"]
    for extra, named in (
        (["--max-batched-tokens", "4096", "--seed", "2"], "--max-batched-tokens, --seed shape"),
        (["--requests", "100"], "--requests shapes"),
    ):
        code, out, err = cli([*argv, "--batching", "static", *extra])
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
        assert named in err and "drop --batching static" in err
        code, _, err = cli([*argv, *extra])
        assert code == 0, err
    code, _, err = cli([*argv, "--batching", "static", "--seed", "0"])
    assert code == 0, err


def test_plan_keeps_to_interleaving_and_refuses_ep_on_a_dense_model():
    """`plan --schedule interleaved` ranked pp=1 plans first (shown as 1f1b: no pipeline to
    interleave), and `plan --ep 2` on a dense model searched as if it were not given (predict and
    serve refuse it): the first keeps to pipelines of at least two stages, the second is refused."""
    import numpy as np
    import pytest

    from shardwise.errors import SpecError
    from shardwise.requests import PlanRequest

    base = "--model llama3-8b --system dgx-h100 --global-batch 64 --top 2"
    result = PlanRequest.from_argv(f"{base} --schedule interleaved").run()
    assert np.all(result.search.columns["pp"] >= 2) and np.all(result.search.columns["vpp"] >= 2)
    assert all(r["schedule"] == "interleaved" for r in result.rows)
    with pytest.raises(SpecError, match=r"--ep 2: ep needs a mixture-of-experts model; model 'llama3-8b'"):
        PlanRequest.from_argv(f"{base} --ep 2").run()
    assert PlanRequest.from_argv(f"{base} --ep 1").run().rows


def test_timeline_says_when_the_simulated_plan_does_not_fit(cli):
    """Llama 3 70B trained at tp=8 on eight RTX 4090s needs 185 GB per GPU; timeline simulated its
    step and said nothing of memory (predict says "does NOT fit"). The text says so and --json
    carries predict's memory keys."""
    argv = ["timeline", "--model", "llama3-70b", "--system", "rtx4090-8x", "--tp", "8", "--global-batch", "8"]
    code, out, err = cli([*argv, "--no-plot"])
    assert code == 0, err
    assert "does NOT fit: 185.3 GB per GPU (the fullest stage)" in " ".join(out.split())
    code, out, err = cli([*argv, "--json"])
    data = json.loads(out)
    assert code == 0 and data["fits_in_memory"] is False and data["memory_bytes"]["total"] > 1.8e11
    assert data["gpu_memory_bytes"] > 2.5e10
    fits = ["timeline", "--model", "llama3-8b", "--system", "dgx-h100", "--tp", "8", "--global-batch", "8"]
    code, out, _ = cli([*fits, "--no-plot"])
    assert code == 0 and "does NOT fit" not in out


def test_serve_names_the_engine_buffers_when_they_not_the_weights_fill_the_gpu(cli):
    """Llama 3 70B in bf16 on eight RTX 4090s at tp=8: 17.6 GB of weights per GPU leave room for a
    5.1 GB KV cache at a short prompt, but at 200,000 tokens TensorRT-LLM's buffers (sized by the
    prompt: 17.5 GB) take it all. serve said the weights "leave no room"; it names the buffers. Where
    the weights do fill the GPU (tp=2: 70.6 GB), it still blames them."""
    argv = ["serve", "--model", "llama3-70b", "--system", "rtx4090-8x", "--plan", "tp=8"]
    code, out, err = cli([*argv, "--input-len", "200000"])
    assert code == 0, err
    text = " ".join(out.split())
    assert "tp=8: does not fit: the engine's buffers sized for a 200,000-token prompt (17.5 GB per GPU" in text
    assert "take all the room 17.6 GB of weights leave" in text and "a 5.1 GB KV cache without them" in text
    assert "leave no room for a KV cache" not in text
    code, out, err = cli([*argv, "--input-len", "512"])
    assert code == 0 and "does not fit" not in out
    code, out, err = cli([*argv[:-1], "tp=2", "--input-len", "200000"])
    assert "tp=2: does not fit: 70.6 GB of weights per GPU leave no room for a KV cache" in " ".join(out.split())


def test_every_module_is_under_400_lines():
    """The project's style rule (modules < 400 lines): requests/serve.py reached 411 with walkthrough6;
    its load-flag checks moved to requests/serve_flags.py."""
    from pathlib import Path

    import shardwise

    root = Path(shardwise.__file__).parent
    long = {str(p.relative_to(root)): n for p in root.rglob("*.py") if (n := len(p.read_text().splitlines())) >= 400}
    assert long == {}


def test_runs_naming_a_model_file_without_family_say_what_it_was_given(cli, tmp_path):
    """A runs CSV whose rows name a model YAML without `family`: `calibrate runs.csv` and `validate
    --runs runs.csv` priced it with the gpt family's flags without the note every other command gives
    (stderr, and JSON `notes`); once per file, however many rows name it."""
    model = tmp_path / "mine.yaml"
    model.write_text(
        "name: my-8b\nlayers: 32\nhidden: 4096\nheads: 32\nkv_heads: 8\nffn_hidden: 14336\n"
        "vocab: 128256\nseq_len: 8192\ngated_mlp: true\nrmsnorm: true\n"
    )
    runs, cal = tmp_path / "runs.csv", tmp_path / "cal.yaml"
    runs.write_text("\n".join(RUNS.splitlines()[:4]).replace("llama3-8b", str(model)) + "\n")
    for argv in (["calibrate", str(runs), "-o", str(cal)], ["validate", "--runs", str(runs)]):
        code, out, err = cli([*argv, "--json"])
        assert code == 0, err
        assert err.count("names no family") == 1 and "tied_embeddings true" in err
        notes = json.loads(out)["notes"]
        # once per file (calibrate's notes may also say a prior was widened: review 40 #4)
        assert sum("names no family" in n for n in notes) == 1
    model.write_text(model.read_text() + "family: llama\n")
    code, out, err = cli(["validate", "--runs", str(runs), "--json"])
    assert code == 0 and json.loads(out)["notes"] == [] and "family" not in err


def test_plan_interleaved_without_a_pipeline_or_chunks_says_so(cli):
    """plan --schedule interleaved with --pp 1, --vpp 1 or one GPU left nothing to search and said
    only "no valid layout ... the fixed values given must allow a layout"; it says interleaving
    needs pp >= 2 and vpp >= 2, and what rules them out, in one line (exit 2)."""
    argv = ["plan", "--model", "llama3-8b", "--global-batch", "64", "--schedule", "interleaved", "--top", "1"]
    cases = {
        ("--system", "dgx-h100", "--pp", "1"): "which --pp 1 rules out",
        ("--system", "dgx-h100", "--vpp", "1"): "which --vpp 1 rules out",
        ("--gpu", "h100-sxm5-80gb", "--num-gpus", "1"): "which one GPU rules out",
    }
    for extra, why in cases.items():
        code, out, err = cli([*argv, *extra])
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
        assert "--schedule interleaved needs a pipeline (pp >= 2) of at least 2 model chunks a stage (vpp >= 2)" in err
        assert why in err and "no valid layout" not in err
    code, _, err = cli([*argv, "--system", "dgx-h100", "--pp", "2"])
    assert code == 0, err


def test_static_batch_refusal_reads_the_request_defaults_and_says_it_for_one_flag():
    """serve --batching static refused --max-batched-tokens, --requests and --seed by comparing them
    with copies of their defaults (1000, 0), and told a user who gave one flag to "drop them". The
    defaults are the request's own (equal to the fields the command line reads), and one flag is "it"."""
    from dataclasses import fields

    import pytest

    from shardwise.errors import SpecError
    from shardwise.requests.serve import SERVE_FIELDS, ServeRequest

    own = {f.name: f.default for f in fields(ServeRequest)}
    for name in ("max_batched_tokens", "requests", "seed"):
        assert next(f.default for f in SERVE_FIELDS if f.name == name) == own[name]
    base = "--model llama3-8b --system dgx-h100 --plan tp=1 --batching static"
    ServeRequest.from_argv(f"{base} --requests {own['requests']} --seed {own['seed']}").setting()
    with pytest.raises(SpecError, match=r"^--seed shapes .*drop --batching static, or drop --seed$"):
        ServeRequest.from_argv(f"{base} --seed 3").setting()
    with pytest.raises(SpecError, match=r"^--requests, --seed shape .*or drop --requests and --seed$"):
        ServeRequest.from_argv(f"{base} --seed 3 --requests 100").setting()


def test_predict_json_carries_the_plan_headroom_note(cli):
    """llama3-8b tp=2 micro-batch 2 on a DGX H100 fits with 0.26 GB to spare, less than the 10%
    `plan` keeps free: predict's text said `plan` drops it, predict --json's notes did not."""
    argv = ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--global-batch", "64", "--tp", "2"]
    code, out, err = cli([*argv, "--micro-batch", "2", "--json"])
    assert code == 0, err
    notes = json.loads(out)["notes"]
    assert sum("`plan` drops this layout as not fitting" in n for n in notes) == 1, notes
    assert "to spare" not in err  # the text prints it under the memory table, not as a stderr note
    code, out, err = cli([*argv, "--micro-batch", "2"])
    assert code == 0 and "`plan` drops this layout" in " ".join(out.split())
    code, out, _ = cli([*argv, "--micro-batch", "1", "--json"])
    assert code == 0 and not any("to spare" in n for n in json.loads(out)["notes"])


def test_presets_show_file_json_names_what_the_family_default_gave(cli, tmp_path):
    """presets show FILE --json of a model file without family lists the fields the gpt family's
    defaults filled under from_family_default; presets.md names the key (it did not)."""
    from pathlib import Path

    path = tmp_path / "mine.yaml"
    path.write_text("name: my-1b\nlayers: 16\nhidden: 2048\nheads: 16\nvocab: 32000\nseq_len: 2048\nrmsnorm: true\n")
    code, out, err = cli(["presets", "show", str(path), "--json"])
    assert code == 0, err
    given = json.loads(out)["models"]["from_family_default"]
    assert "tied_embeddings" in given and "rmsnorm" not in given
    docs = Path(__file__).parents[1] / "docs" / "commands" / "presets.md"
    assert "`from_family_default`" in docs.read_text()
