"""serve's printed output says what it priced (review 50 #8-#12): SGLang's reserve named where no
sequence fits, one meaning of the memory column and JSON kv_cache under both batchings, each plan's
chunked-prefill budget, the serving interval's basis in runs and as priced, and the polish items
(vLLM's own FA2 fallback, a wrapped --plot caption, --request-rate's unit, 'all' resolved and shown,
a config.json's training cap kept out of serve, FP8 labelled in validate inference, overload said)."""

from __future__ import annotations

import json

import pytest

from shardwise.calibration import spreads

ONE_H100 = ["--system", "dgx-h100", "--num-gpus", "1", "--plan", "tp=1"]
QWEN3_32B = {
    "architectures": ["Qwen3ForCausalLM"],
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 5120,
    "intermediate_size": 25600,
    "max_position_embeddings": 40960,
    "model_type": "qwen3",
    "num_attention_heads": 64,
    "num_hidden_layers": 64,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 151936,
}


def _text(cli, argv):
    code, out, err = cli(argv)
    assert code == 0, err
    return " ".join(out.split()), " ".join(err.split())


def _json(cli, argv):
    code, out, err = cli([*argv, "--json"])
    assert code == 0, err
    return json.loads(out)


def test_sglang_reserve_under_dp_attention_is_named_not_the_weights(cli):
    """#8: DeepSeek-V3 at --dp 16 on 16 H100s: SGLang's default reserve (55.3 GB, CUDA-graph padding
    for 16 attention ranks) leaves no KV cache, not the 54.6 GB of weights; the flag is named."""
    out, _ = _text(
        cli, ["serve", "--model", "deepseek-v3", "--system", "dgx-h100", "--nodes", "2", "--framework", "sglang",
              "--plan", "tp=1,ep=16"],
    )  # fmt: skip
    assert "tp=1,ep=16: does not fit: SGLang's default reserve under --dp 16 (55.3 GB per GPU" in out
    assert "CUDA-graph padding for its 16 attention ranks) and 54.6 GB of weights leave no room" in out
    assert "--mem-fraction-static (0.349 here)" in out
    assert "54.6 GB of weights per GPU leave no room" not in out


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_memory_means_the_engines_pool_under_both_batchings(cli, engine):
    """#9: memory_bytes.kv_cache is the pool the engine allocates, static or in flight; what the
    requests fill is kv_cache_in_use_bytes in both; the legend's memory line stays under static."""
    argv = ["serve", "--model", "llama3.1-8b", *ONE_H100, "--framework", engine, "--concurrency", "8"]
    static = _json(cli, [*argv, "--batching", "static"])["plans"][0]
    inflight = _json(cli, [*argv, "--requests", "200"])["plans"][0]
    assert static["memory_bytes"]["kv_cache"] == inflight["memory_bytes"]["kv_cache"] > 10e9
    assert static["memory_bytes"]["total"] == inflight["memory_bytes"]["total"]
    assert 0 < static["kv_cache_in_use_bytes"] < static["memory_bytes"]["kv_cache"]
    assert static["kv_cache_in_use_bytes"] == pytest.approx(8 * 640 * 131072)  # 8 sequences of 640 tokens
    assert 0 < inflight["kv_cache_in_use_bytes"] < inflight["memory_bytes"]["kv_cache"]
    out, _ = _text(cli, [*argv, "--batching", "static"])
    assert "memory: weights + the engine's KV pool + a 2 GiB runtime reserve" in out


def test_an_engine_that_allocates_per_batch_shows_the_batchs_cache(cli):
    """#9: plain PyTorch holds no pool: its kv_cache is the batch's, and the legend says so."""
    argv = ["serve", "--model", "llama3.1-8b", *ONE_H100, "--framework", "pytorch", "--concurrency", "8"]
    row = _json(cli, argv)["plans"][0]
    assert row["memory_bytes"]["kv_cache"] == pytest.approx(row["kv_cache_in_use_bytes"], abs=1)
    out, _ = _text(cli, argv)
    assert "memory: weights + the batch's KV cache (the engine allocates per batch)" in out


def test_each_plan_names_its_chunked_prefill_budget(cli):
    """#10: SGLang divides a data-parallel-attention plan's budget among its ranks; the header gave
    the first plan's for both."""
    out, _ = _text(
        cli, ["serve", "--model", "qwen3-30b-a3b", "--system", "dgx-h100", "--framework", "sglang",
              "--plan", "tp=1,ep=8", "--plan", "tp=8", "--requests", "200"],
    )  # fmt: skip
    assert "chunked prefill (<= 1,024 tokens per iteration for tp=1,ep=8, 8,192 for tp=8)" in out
    out, _ = _text(cli, ["serve", "--model", "llama3.1-8b", *ONE_H100, "--requests", "200"])
    assert "chunked prefill (<= 8,192 tokens per iteration)" in out


def test_the_serving_interval_counts_runs_and_says_how_they_were_priced(cli):
    """#11: 86 measurements of 82 runs (FasterTransformer's 2 runs give 3 each), priced as one static
    batch, not by the in-flight simulation serve runs by default."""
    assert (spreads.SERVING_MEASUREMENTS, spreads.SERVING_RUNS) == (86, 82)
    out, _ = _text(cli, ["serve", "--model", "llama3.1-8b", *ONE_H100, "--requests", "200"])
    assert "spread on 82 published runs (86 measurements, static batches)" in out


def test_vllm_flash3_off_hopper_gives_vllms_own_reason(cli):
    """#12: vLLM's fa_utils falls back to FA2 off compute capability 9; no training-stack reasons."""
    _, err = _text(
        cli, ["serve", "--model", "llama3.1-8b", "--system", "dgx-a100", "--num-gpus", "1", "--framework", "vllm",
              "--attention-kernel", "flash3", "--batching", "static"],
    )  # fmt: skip
    assert "vLLM's FlashAttention backend runs FA2 there (fa_utils.get_flash_attn_version" in err
    assert "Hugging Face" not in err and "flash_attn_interface" not in err


def test_one_panel_plot_is_not_widened_by_its_caption(cli, tmp_path):
    """#12: the unwrapped caption made a 3,351-pixel-wide PNG of one 6.2-inch panel."""
    from PIL import Image

    path = tmp_path / "f.png"
    argv = ["serve", "--model", "llama3.1-8b", "--system", "rtx4090-8x", "--plan", "tp=8", "--batching", "static"]
    code, _, err = cli([*argv, "--plot", str(path)])
    assert code == 0, err
    width, height = Image.open(path).size
    assert width < 1.3 * height


def test_request_rate_with_a_unit_names_the_unit(cli):
    code, out, err = cli(["serve", "--model", "llama3.1-8b", *ONE_H100, "--request-rate", "5req/s"])
    assert code == 2 and not out
    assert "'5req/s' is not a number; the unit is requests per second: give a number such as 5" in err
    assert len(err.strip().splitlines()) == 1


def test_all_resolves_against_the_other_axes_and_shows_its_degree(cli):
    """#12: tp=all labelled as the degree it is; pp=all,tp=2 on 8 GPUs is pp 4, not "tp x pp = 16"."""
    data = _json(
        cli, ["serve", "--model", "llama3.1-8b", "--system", "dgx-h100", "--plan", "tp=all", "--plan", "pp=all,tp=2",
              "--batching", "static"],
    )  # fmt: skip
    plans = {p["plan"]: p for p in data["plans"]}
    assert set(plans) == {"tp=8", "pp=4,tp=2"}
    assert (plans["pp=4,tp=2"]["tp"], plans["pp=4,tp=2"]["pp"]) == (2, 4)
    code, _, err = cli(["serve", "--model", "llama3.1-8b", "--system", "dgx-h100", "--plan", "pp=all,tp=3"])
    assert code == 2 and "--plan pp=all,tp=3: tp x pp = 24 does not divide the 8 GPUs" in err


def test_a_configs_training_cap_is_not_noted_in_serve(cli, tmp_path):
    """#12: serve prices the config's whole window (40,960); the 32,768 cap is training's."""
    path = tmp_path / "qwen3-32b" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(QWEN3_32B))
    _, err = _text(
        cli, ["serve", "--model", str(path), "--system", "dgx-h100", "--plan", "tp=2", "--batching", "static"]
    )
    assert "capped at" not in err
    code, _, err = cli(["predict", "--model", str(path), "--system", "dgx-h100", "--tp", "8", "--global-batch", "8"])
    assert code == 0, err
    assert "context window of 40960 tokens capped at 32768" in err


def test_validate_inference_labels_every_rows_weights():
    """#12: FP4 rows were labelled, FP8 ones (every other TensorRT-LLM row) not."""
    from shardwise.analyses.serving_validation import validate_serving

    rows, _ = validate_serving()
    trt = [r.label for r in rows if r.run_id.startswith("TRTLLM")]
    assert all(", FP8" in x or ", FP4" in x for x in trt) and sum(", FP8" in x for x in trt) >= 60


def test_an_overloaded_run_says_so_and_gives_the_rate_it_serves(cli):
    """#12: a closed loop of 10 million users printed a TTFT of days without a word; a rate above
    what the plan serves now names that rate."""
    out, _ = _text(
        cli, ["serve", "--model", "llama3.1-8b", *ONE_H100, "--concurrency", "10000000", "--requests", "300"]
    )
    assert "tp=1" in out and "[overloa" in out  # the plan's cell, folded in an 80-column console
    assert "overloaded, more waiting than running, each request queued about" in out
    assert "requests/s the plan serves (fewer --concurrency, or more replicas)" in out
    out, _ = _text(cli, ["serve", "--model", "llama3.1-8b", *ONE_H100, "--request-rate", "1000", "--requests", "2000"])
    assert "[overloa" in out and "overloaded: 1000 requests/s is more than the" in out
    out, _ = _text(cli, ["serve", "--model", "llama3.1-8b", *ONE_H100, "--concurrency", "8", "--requests", "300"])
    assert "[overloa" not in out
