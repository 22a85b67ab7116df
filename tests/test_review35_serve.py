"""Review 35's findings 2, 6-10 and 12 on `serve`'s report and outputs: each a test that failed before the fix."""

from __future__ import annotations

import json

import numpy as np
import pytest

H100_70B = ["--model", "llama3-70b", "--system", "dgx-h100"]
RTX_8B = ["--model", "llama3-8b", "--system", "rtx4090-8x-2socket"]


def _plan(cli, args: list[str]) -> dict:
    code, out, err = cli(["serve", *args, "--json"])
    assert code == 0, err
    return json.loads(out)["plans"][0]


# --- finding 2: the in-flight breakdown is the simulated iterations' ----------------------------------


def test_one_requests_decode_parts_add_up_to_its_tpot_as_static_batching_does(cli):
    """One request in flight: every decode iteration is (1, 0); its parts summed were 16.2 ms against a
    TPOT of 6.86 ms (priced at the run's time-weighted mean prompt tokens), 'tp comm 65%' against
    static batching's 29%. Now they add up to the TPOT and equal static batching's."""
    inflight = _plan(cli, [*RTX_8B, "--plan", "tp=4"])
    static = _plan(cli, [*RTX_8B, "--plan", "tp=4", "--batching", "static"])
    assert sum(inflight["decode_s"].values()) == pytest.approx(inflight["tpot_s"], rel=1e-6)
    for part, seconds in static["decode_s"].items():
        assert inflight["decode_s"][part] == pytest.approx(seconds, rel=1e-6, abs=1e-12)
    # 512 prompt tokens over 128 iterations (one prefill, 127 decodes): 4 a iteration, not a time-weighted 200+
    assert inflight["mean_prompt_tokens_per_iteration"] == pytest.approx(512 / 128)


def test_the_recorded_iterations_hold_every_prompt_and_decode_token_of_the_run():
    """The run's record of its iterations (`Simulated.passes` by decodes and prompt tokens) sums to
    what the run did: every prompt token prefilled once, every output token after the first decoded
    once, and as many iterations as the loop ran."""
    from shardwise import presets
    from shardwise.engines.inflight import Replica, Traffic
    from shardwise.engines.serving import plan_for_serving
    from shardwise.specs import Scenario
    from shardwise.specs.serving import ServingWorkload

    scn = Scenario(presets.model("llama3-8b"), presets.system("dgx-h100"), plan_for_serving(1, 1, 8))
    wl = ServingWorkload(input_len=512, output_len=128, batch=1)
    sim = Replica(scn, wl).run(Traffic(users=96, requests=400))
    n = 96 * 8  # a closed loop runs CLOSED_LOOP_ROUNDS requests per user at least
    assert float((sim.passes * sim.pass_prompt_tokens).sum()) == n * 512
    assert float((sim.passes * sim.pass_decode).sum()) == n * 127
    assert float(sim.passes.sum()) == sim.iterations
    assert sim.prompt_tokens_per_iteration == pytest.approx(n * 512 / sim.iterations)


def test_under_load_the_decode_parts_are_a_decode_tokens_wait_and_the_prompt_tokens_the_throughputs():
    """At 384 users the parts added to twice the TPOT and the report said +957 prompt tokens an
    iteration where the throughput implies about 380: now the parts add to within a few percent of the
    median TPOT (they are the token-weighted mean), and prompt tokens per iteration times iterations
    per second is the prompt rate the throughput implies."""
    from shardwise import presets
    from shardwise.engines.inflight import Replica, Traffic, decode_parts
    from shardwise.engines.serving import plan_for_serving
    from shardwise.specs import Scenario
    from shardwise.specs.serving import ServingWorkload

    scn = Scenario(presets.model("llama3-70b"), presets.system("dgx-h100"), plan_for_serving(2, 1, 4))
    wl = ServingWorkload(input_len=512, output_len=128, batch=1, weight_precision="fp8")
    replica = Replica(scn, wl)
    sim = replica.run(Traffic(users=96))
    parts = decode_parts(replica, sim)
    assert sum(parts.values()) == pytest.approx(float(np.nanmean(sim.tpot_s)), rel=0.05)
    run_s = float(
        (
            sim.passes
            * np.array([replica.table(d, q) for d, q in zip(sim.pass_decode, sim.pass_prompt_tokens, strict=True)])
        ).sum()
    )
    prompt_rate = sim.prompt_tokens_per_iteration * sim.iterations / run_s
    assert prompt_rate == pytest.approx(sim.run_tokens_per_s * 512 / 128, rel=0.1)


def test_a_pipelines_iteration_is_a_round_and_its_budget_says_so(cli):
    """pp=8: '(<= 8,192 tokens per iteration)' stood above 'an iteration (+34,572 prompt tokens)': the
    iteration is a round of 8 micro-batches, each with its own budget (TensorRT-LLM)."""
    args = [*H100_70B, "--plan", "pp=8", "--request-rate", "100", "--requests", "200"]
    p = _plan(cli, args)
    assert p["iteration_budget_tokens"] == 8 * p["max_batched_tokens"] == 65536
    assert 0 < p["mean_prompt_tokens_per_iteration"] <= p["iteration_budget_tokens"]
    _, out, _ = cli(["serve", *args])
    text = " ".join(out.split())
    assert "(<= 8,192 tokens a micro-batch, pp a round)" in text
    assert "pp=8: TTFT" in text and "prompt tokens a round) = compute" in text


# --- finding 6: -o/--output, --csv, the header and notes in JSON --------------------------------------


def test_serve_writes_json_and_csv_by_the_extension_and_prints_csv(cli, tmp_path):
    args = [*H100_70B, "--plan", "tp=8", "--plan", "tp=4", "--requests", "100"]
    code, out, err = cli(["serve", *args, "-o", str(tmp_path / "a.json")])
    assert code == 0, err and "TTFT" in out  # the report still printed
    answer = json.loads((tmp_path / "a.json").read_text())
    assert answer["model"]["name"] == "llama3-70b" and answer["system"] == "dgx-h100" and answer["gpus"] == 8
    assert answer["engine"]["name"] == "tensorrt-llm"
    assert answer["all_reduce"] == {
        "custom_kernel": "TensorRT-LLM",
        "custom_used_for": "small messages",
        "otherwise": "nccl",
    }
    for key in ("e2e_s", "per_user_tokens_per_s", "max_request_rate_per_s", "ttft_s", "tpot_s"):
        low, mid, high = (answer["plans"][0][f"{key}{s}"] for s in ("_low", "", "_high"))
        assert low < mid < high, key
    code, out, err = cli(["serve", *args, "-o", str(tmp_path / "a.csv")])
    assert code == 0, err
    rows = (tmp_path / "a.csv").read_text().splitlines()
    assert len(rows) == 3 and rows[0].startswith("model,system,gpus,engine,plan,")
    assert "decode_s.compute" in rows[0] and rows[1].startswith("llama3-70b,dgx-h100,8,tensorrt-llm,tp=8,")
    code, out, err = cli(["serve", *args, "--csv"])
    assert code == 0, err and out.splitlines()[0] == rows[0] and len(out.splitlines()) == 3


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["-o", "x.txt"], "-o x.txt: unknown file format '.txt'"),
        (["--csv", "--json"], "give one of --json, --csv"),
        (["-o", "-", "--json"], "give one of --json, -o -"),
    ],
)
def test_serve_output_refusals_are_one_line_and_write_nothing(cli, tmp_path, monkeypatch, extra, said):
    monkeypatch.chdir(tmp_path)
    code, _, err = cli(["serve", *H100_70B, "--plan", "tp=8", *extra])
    assert code == 2 and len(err.strip().splitlines()) == 1 and said in err, err
    assert not list(tmp_path.iterdir())


def test_the_superlinear_pipeline_paragraph_is_in_the_json_notes(cli):
    code, out, err = cli(["serve", *H100_70B, "--plan", "tp=2", "--plan", "tp=2,pp=4", "--max-throughput", "--json"])
    assert code == 0, err
    notes = json.loads(out)["notes"]
    assert any(n.startswith("tp=2,pp=4: at full load") and "the pipeline keeps" in n for n in notes), notes


# --- finding 7: one meaning per column; memory at the engine's KV pool ---------------------------------


def test_the_load_column_is_users_or_the_mean_running_and_memory_is_the_kv_pool(cli):
    code, out, err = cli(["serve", *H100_70B, "--plan", "tp=8", "--concurrency", "5000", "--requests", "100"])
    assert code == 0, err
    head = out.split("────")[0]
    assert "users" in head and "in flight" not in head and "5,000" in out  # thousands separated (review 50 #12)
    code, out, err = cli(["serve", *H100_70B, "--plan", "tp=8", "--max-throughput", "--requests", "100"])
    head = out.split("────")[0]
    assert "running" in head and "(mean)" in head and "users" not in head
    assert "memory: weights + the engine's KV pool + a 2 GiB runtime reserve" in " ".join(out.split())
    one = _plan(cli, [*H100_70B, "--plan", "tp=8"])
    memory = one["memory_bytes"]
    # one request fills a sliver of the pool the engine allocated at start (TensorRT-LLM: 90% of the free memory)
    assert one["kv_cache_in_use_bytes"] < 0.01 * memory["kv_cache"]
    assert memory["total"] > 0.8 * 80e9


# --- finding 8: the SLO search's lock-step step -------------------------------------------------------


def test_the_slo_search_notes_a_lockstep_step_of_fixed_lengths(cli):
    args = ["serve", *H100_70B, "--ttft-max", "500ms", "--tpot-max", "50ms", "--plan", "tp=2"]
    code, out, err = cli(args)
    assert code == 0, err
    text = " ".join(out.split())
    assert "lock-step waves" in text and "--lengths sharegpt" in text
    code, out, err = cli([*args, "--json"])
    assert any("lock-step" in n for n in json.loads(out)["notes"])


def test_no_step_is_noted_where_the_miss_grows_smoothly():
    from types import SimpleNamespace

    from shardwise.requests.serve_notes import lockstep_cliff

    p = {"ttft_s": {"p90": 0.4}, "tpot_s": {"p90": 0.02}}
    best = SimpleNamespace(
        estimate=SimpleNamespace(percentiles_s=p),
        meets=True,
        why="at 96: TTFT 540 ms",
        label="tp=2",
        users_per_replica=88,
    )
    assert lockstep_cliff(best, 0.5, 0.05, "p90") == ""  # 400 ms under 500: a slope
    p["ttft_s"]["p90"] = 0.05
    assert "lock-step" in lockstep_cliff(best, 0.5, 0.05, "p90")


# --- finding 9: errors in serving terms -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "said", "unsaid"),
    [
        (
            ["--model", "deepseek-v3", "--system", "dgx-h200", "--plan", "tp=2,pp=2,ep=8"],
            "under pp=2 data-parallel attention spreads the experts over one pipeline stage's 4 GPUs",
            "",
        ),
        ([*H100_70B, "--plan", "pp=2,first=100"], "change first= / last=", "vpp"),
        ([*H100_70B, "--plan", "tpp=2"], "KEY one of tp, pp, cp, first, last, ep, etp (serving)", "schedule"),
        (
            [*H100_70B, "--plan", "tp=8", "--seed", "-1"],
            "--seed: -1 is not allowed; it must be a whole number from 0 to",
            "Invalid value",
        ),
    ],
)
def test_serving_plan_errors_speak_serving(cli, args, said, unsaid):
    code, _, err = cli(["serve", *args])
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert said in err, err
    assert not unsaid or unsaid not in err, err


# --- finding 12: cosmetics ------------------------------------------------------------------------------


def test_sharegpts_mean_is_said_from_one_constant(cli):
    from shardwise.specs.request_mix import SHAREGPT_MEAN_OUTPUT_TOKENS

    _, out, _ = cli(["serve", "--help"])
    assert f"{SHAREGPT_MEAN_OUTPUT_TOKENS:.0f} new tokens" in " ".join(out.split())


def test_plain_pytorch_names_no_version_and_a_plan_that_fits_nowhere_says_nothing_was_simulated(cli):
    code, out, err = cli(["serve", *H100_70B, "--plan", "tp=8", "--framework", "pytorch"])
    assert code == 0, err
    assert "engine pytorch (no in-flight batching: static batches);" in " ".join(out.split())
    code, out, err = cli(["serve", "--model", "llama3-405b", "--system", "dgx-h100", "--plan", "tp=1"])
    text = " ".join(out.split())
    assert "medians of 0" not in text and "nothing simulated" in text


def test_data_parallel_attention_ranks_are_not_called_replicas(cli):
    args = ["serve", "--model", "deepseek-v3", "--system", "dgx-h200", "--nodes", "2", "--plan", "tp=1,ep=16"]
    code, out, err = cli([*args, "--weight-precision", "fp8", "--requests", "100"])
    assert code == 0, err
    text = " ".join(out.split())
    assert "(16 attention ranks)" in text and "x16 replicas" not in text


def test_a_piped_table_is_printed_at_its_own_width_when_columns_is_unset(cli, monkeypatch):
    """`validate inference_scaling | less` wrapped each cell onto lines of its own: 700 lines for 30 rows."""
    monkeypatch.delenv("COLUMNS", raising=False)
    code, out, err = cli(["validate", "inference_scaling"])
    assert code == 0, err
    rows = [line for line in out.splitlines() if line.startswith("│")]
    assert rows and all("│" in line[1:] for line in rows)
    assert len(out.splitlines()) < 200
    monkeypatch.setenv("COLUMNS", "100")  # a width given still binds (the docs are made at 100)
    code, out, err = cli(["validate", "inference_scaling"])
    assert max(len(line) for line in out.splitlines()) <= 100


def test_vllms_max_num_seqs_sized_by_the_concurrency_says_so(cli):
    args = ["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--plan", "tp=1", "--emit", "vllm"]
    code, out, err = cli([*args, "--hf-id", "meta-llama/Llama-3.1-8B", "--requests", "100"])
    assert code == 0, err
    assert "--max-num-seqs 1: sized for the load asked, --concurrency 1" in out
    code, out, err = cli([*args, "--hf-id", "meta-llama/Llama-3.1-8B", "--requests", "100", "--max-throughput"])
    assert "sized for the load asked" not in out
