"""Review 35's serving numbers: 'would fit with' names only changes under which the asked batch
fits, and a plan that does not fit has no times or rates ("-", JSON null) in every mode (#1);
trtllm-bench's head size is its config.json's (#3); a weight format the engine cannot run on the
GPU is refused in one line, on the command line and in the API (#4); engines without continuous
batching default to static batches (#5). llama.cpp's ep > 1: tests/test_serve_moe_layouts.py."""

from __future__ import annotations

import json

import pytest

from shardwise import presets
from shardwise.errors import SpecError

H100 = ["--model", "llama3-70b", "--system", "dgx-h100", "--plan", "tp=8"]


def _plan(cli, argv: list[str]) -> dict:
    code, out, err = cli(["serve", *argv, "--json"])
    assert code == 0, err
    return json.loads(out)["plans"][0]


def test_a_fit_hint_names_only_changes_under_which_the_asked_batch_fits(cli):
    """A static batch of 5,000 on 8 H100: fp8 weights hold 2,343, int4 2,500, fp8 + fp8 KV 4,518,
    all short of 5,000; nothing is suggested. At 2,200 (bf16 holds 2,065) fp8 weights fit, and the
    plan it names fits when run."""
    static = [*H100, "--batching", "static"]
    row = _plan(cli, [*static, "--concurrency", "5000"])
    assert not row["fits_in_memory"] and row["would_fit"] == ""
    row = _plan(cli, [*static, "--concurrency", "5000", "--weight-precision", "fp8", "--kv-precision", "fp8"])
    assert row["max_batch_per_replica"] == 4518 and row["would_fit"] == ""
    row = _plan(cli, [*static, "--concurrency", "2200"])
    assert row["max_batch_per_replica"] < 2200 and row["would_fit"].startswith("--weight-precision fp8")
    assert _plan(cli, [*static, "--concurrency", "2200", "--weight-precision", "fp8"])["fits_in_memory"]


@pytest.mark.parametrize("mode", [["--batching", "static", "--concurrency", "5000"], []])
def test_a_plan_that_does_not_fit_has_no_times_or_rates(cli, mode):
    """Static over the KV cache, and DeepSeek-V3 in 16 bits (no room for one sequence) in flight:
    '-' in the table and null in JSON for every time and rate, its memory still given."""
    argv = [*H100, *mode] if mode else ["--model", "deepseek-v3", "--system", "dgx-h100", "--plan", "tp=8"]
    row = _plan(cli, argv)
    assert not row["fits_in_memory"] and row["memory_bytes"]["total"] > 0
    for key in ("ttft_s", "tpot_s", "e2e_s", "throughput_tokens_per_s", "per_user_tokens_per_s"):
        assert row[key] is None, key
    assert row["throughput_tokens_per_s_low"] is None and row["decode_s"] == {}
    code, out, _ = cli(["serve", *argv])
    line = next(ln for ln in out.splitlines() if ln.startswith(" tp=8"))
    cells = line.split()
    assert code == 0 and cells[-8:-3] == ["-"] * 5, line  # TTFT, TPOT, latency, tok/s, per user
    assert "GB" in line


def test_trtllm_bench_takes_the_head_size_its_config_json_states():
    """tensorrt_llm/bench/build/dataclasses.py @04cba882: head_size/head_dim/attention_head_dim, else
    hidden // heads. DeepSeek-V3's config.json (latent attention) has none: 7168 // 128 = 56, and
    trtllm-bench's max_batch_size for 1,000 + 1,000 tokens on 8 H200 in FP8 is 384 (128 with 128)."""
    from dataclasses import replace

    from shardwise.engines.trtllm_buffers import bench_engine_settings, bench_head_size

    v3 = presets.model("deepseek-v3")
    assert not v3.head_dim_in_config and v3.head_dim == 128 and bench_head_size(v3) == 56
    assert bench_head_size(presets.model("qwen3-32b")) == 128  # its config states head_dim 128 (hidden / heads 80)
    assert bench_head_size(presets.model("llama3-70b")) == 128
    memory = presets.system("dgx-h200").gpu.memory_bytes
    batch, _ = bench_engine_settings(v3, 8, 1, 1000, 1000, memory, 1.0, 1.0)
    assert float(batch) == 384
    batch, _ = bench_engine_settings(replace(v3, head_dim_in_config=True), 8, 1, 1000, 1000, memory, 1.0, 1.0)
    assert float(batch) == 128


def test_a_config_json_says_whether_it_states_the_head_size(tmp_path):
    from shardwise.hf_config import read

    base = {"model_type": "deepseek_v3", "num_hidden_layers": 4, "hidden_size": 1024, "num_attention_heads": 8,
            "vocab_size": 1000, "max_position_embeddings": 4096, "qk_nope_head_dim": 128}  # fmt: skip
    for extra, stated in (({}, False), ({"head_dim": 128}, True)):
        path = tmp_path / f"config{int(stated)}.json"
        path.write_text(json.dumps({**base, **extra}))
        assert read(path)["head_dim_in_config"] is stated


def _serve(argv: list[str]) -> list[str]:
    """Llama 3 8B at tp 2 on `argv`'s --system (a DGX H100 without one)."""
    system = [] if "--system" in argv else ["--system", "dgx-h100"]
    return ["serve", "--model", "llama3-8b", *system, "--plan", "tp=2", *argv]


@pytest.mark.parametrize(
    ("argv", "allowed"),
    [
        (["--framework", "llama.cpp", "--weight-precision", "fp8"], "bf16, fp16, q8_0, q4_0, q4_k, mxfp4"),
        (["--framework", "llama.cpp", "--weight-precision", "nvfp4"], "bf16, fp16, q8_0, q4_0, q4_k, mxfp4"),
        (["--weight-precision", "q4_k"], "bf16, fp16, fp8, int8, int4, mxfp4"),
        (["--system", "dgx-a100", "--weight-precision", "nvfp4"], "bf16, fp16, int8, int4"),
        (["--system", "dgx-a100", "--weight-precision", "fp8"], "bf16, fp16, int8, int4"),
        (["--system", "dgx-1-v100", "--framework", "vllm", "--weight-precision", "fp8"], "fp16, int8, int4"),
        (["--framework", "fastertransformer", "--weight-precision", "int8"], "bf16, fp16"),
    ],
)
def test_a_weight_format_the_engine_cannot_run_is_refused(cli, argv, allowed):
    code, out, err = cli(_serve(argv))
    value = argv[argv.index("--weight-precision") + 1]
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert f"--weight-precision {value}:" in err and err.rstrip().endswith(f"choose {allowed}"), err


@pytest.mark.parametrize(
    "argv",
    [
        ["--system", "dgx-a100", "--framework", "vllm", "--weight-precision", "fp8"],  # Marlin W8A16
        ["--system", "dgx-a100", "--framework", "sglang", "--weight-precision", "nvfp4"],  # FP4 Marlin
        ["--system", "dgx-1-v100", "--framework", "vllm", "--weight-precision", "int4"],  # GPTQ
        ["--framework", "llama.cpp", "--weight-precision", "q4_k"],
        ["--system", "dgx-b200", "--weight-precision", "nvfp4"],
    ],
)
def test_a_weight_format_the_engine_runs_is_priced(cli, argv):
    code, _, err = cli(_serve(argv))
    assert code == 0, err


def test_the_api_refuses_the_same_formats():
    """`ServeRequest` (the Python API; the explorer's serving page) raises the command's error. The
    engines' `estimate_serving` prices what it is given: `analyses.serving_pcie` prices ExLlamaV2's
    EXL2 weights as int4 under the plain-PyTorch preset's kernel counts."""
    from shardwise.requests import ServeRequest
    from shardwise.requests.training import TrainingRequest

    target = TrainingRequest(model="llama3-8b", system="dgx-a100")
    req = ServeRequest(target, plans=("tp=2",), framework="llama.cpp", weight_precision="fp8")
    with pytest.raises(SpecError, match=r"^--weight-precision fp8: llama.cpp cannot run fp8 weights on a100"):
        req.run()
    with pytest.raises(SpecError, match=r"^--weight-precision nvfp4: tensorrt-llm cannot run .*choose bf16"):
        ServeRequest(target, plans=("tp=2",), weight_precision="nvfp4").run()
    assert ServeRequest(target, plans=("tp=2",), framework="vllm", weight_precision="nvfp4").run().rows


def test_the_latency_search_tries_only_formats_the_engine_runs():
    from shardwise.analyses.serving_targets import precisions

    b200 = presets.system("dgx-b200")
    # every weight format the engine runs there (review 50 #5: llama.cpp was searched in bf16 alone)
    assert [w for w, _ in precisions(b200)] == ["bf16", "fp8", "int8", "int4", "nvfp4"]
    assert [w for w, _ in precisions(b200, "llama.cpp")] == ["bf16", "q8_0", "q4_k"]
    assert precisions(presets.system("dgx-a100"), "tensorrt-llm") == [
        ("bf16", "bf16"),
        ("int8", "bf16"),
        ("int4", "bf16"),
    ]
    assert ("nvfp4", "fp8") in precisions(b200) and ("int4", "bf16") in precisions(b200)


def test_engines_without_continuous_batching_default_to_static_batches(cli):
    """FasterTransformer 5.x and plain PyTorch were simulated with in-flight batching and chunked
    prefill; now a static batch by default, said in the header, and what needs in-flight batching is
    refused in one line."""
    for engine in ("fastertransformer", "pytorch"):
        argv = [*H100, "--framework", engine]
        code, out, _ = cli(["serve", *argv])
        assert code == 0 and "no in-flight batching: static batches" in " ".join(out.split())
        code, out, _ = cli(["serve", *argv, "--json"])
        data = json.loads(out)
        assert data["plans"][0]["batching"] == "static" and "--batching" not in data["command"]
        for extra in (["--batching", "inflight"], ["--request-rate", "2"], ["--ttft-max", "1s"]):
            code, out, err = cli(["serve", *argv, *extra])
            assert code == 2 and out == "" and err.count("\n") == 1, (extra, err)
            assert f"{engine} runs no in-flight (continuous) batching" in err
    assert _plan(cli, H100)["batching"] == "inflight"
