"""`validate inference_scaling`: serving scaling ratios, measured against predicted."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from shardwise.analyses.serving_pcie import (
    LAYER_SCALING,
    XDAI_BOXES,
    XDAI_LEFT_OUT,
    XDAI_MODELS,
    serving_rows,
    throughput,
)
from shardwise.analyses.serving_scaling import (
    EP_PAIRS,
    PP_TP_PAIRS,
    ScalingRow,
    as_benchmarked,
    pp_against_tp,
    scaling_rows,
    summarize,
    uniform_lengths,
)
from shardwise.analyses.serving_validation import inference_rows, predict

XDAI_SHORT = [m[2] for m in XDAI_MODELS]


@pytest.fixture(scope="module")
def rows() -> list[ScalingRow]:
    return scaling_rows()


def test_tp_pairs_are_the_published_rows_at_k_and_k_over_2(rows):
    tp = [r for r in rows if r.ratio == "TP(k)/TP(k/2)"]
    assert {r.gpu for r in tp} == {"A100", "H100/H200"} and {r.link for r in tp} == {"NVLink"}
    assert len([r for r in tp if r.gpu == "A100"]) == 3 and len([r for r in tp if r.gpu == "H100/H200"]) == 10
    # FasterTransformer GPT-13B, 22.0 ms per token at TP 1 and 13.5 ms at TP 2: 1.63x the throughput
    decode = next(r for r in tp if r.key == "FT13B-TP2-decode/tp1")
    assert decode.measured == pytest.approx(22.0 / 13.5)
    by_id = {r["id"]: r for r in inference_rows()}
    one, two = predict(by_id["FT13B-TP1-decode"])[2], predict(by_id["FT13B-TP2-decode"])[2]
    assert decode.predicted == pytest.approx(one / two)  # latencies inverted into throughputs
    # a throughput row: TensorRT-LLM's Llama 3.3 70B, TP 2 on H100 over TP 1 on H200
    trt = next(r for r in tp if r.key == "TRTLLM-Llama-3.3-70B-H100-TP2-128_128/tp1")
    assert trt.measured == pytest.approx(6378 / 3803)
    # no pair across a precision or a GPU generation (405B: TP 8 FP8 on Hopper, TP 4 FP4 on Blackwell)
    assert not any("405B" in r.key for r in rows)


def test_pcie_rows_are_tp_against_a_layer_split(rows):
    """PCIe: TP (or llama.cpp's row split) against a layer split, and llama.cpp's layer split over k
    GPUs against one (llama.cpp#6017's 8 A100, XiongjieDai's RTX 4090, A100 PCIe, H100 PCIe, L40S)
    or against k/2 (XiongjieDai's RTX 3090 and the 70B model on RTX 4090)."""
    pcie = [r for r in rows if r.link == "PCIe"]
    assert len(pcie) == 69 and {r.ratio for r in pcie} == {"TP(k)/PP(k)", "PP(k)/PP(1)", "PP(k)/PP(k/2)"}
    single = {r.key for r in pcie if r.ratio == "PP(k)/PP(1)"}
    assert {"llamacpp-6017-pp1024-pp8", "llamacpp-6017-pp2048-pp8"} <= single and len(single) == 45
    assert {r.gpu for r in pcie if r.ratio == "PP(k)/PP(1)"} == {"A100 PCIE 80GB", "H100 PCIE 80GB", "L40S", "RTX 4090"}
    assert {r.gpu for r in pcie if r.ratio == "PP(k)/PP(k/2)"} == {"RTX 3090", "RTX 4090"}


def test_xdai_layer_scaling_is_read_from_one_box_per_gpu(rows):
    """XiongjieDai/GPU-Benchmarks-on-LLM-Inference's llama-bench tables: each ratio is two GPU counts
    of one box (host CPU and llama.cpp build alike), as printed; a prompt of one 512-token
    micro-batch cannot pipeline over the layer split (predicted below 1), one of two can (above)."""
    by = {r.key: r for r in rows}
    r = by["xdai-rtx4090-8b-f16-pp1024-4v1"]
    assert r.measured == pytest.approx(12304.19 / 9056.26) and "XiongjieDai" in r.source
    r = by["xdai-rtx3090-8b-f16-pp1024-4v2"]
    assert r.ratio == "PP(k)/PP(k/2)" and r.measured == pytest.approx(5713.41 / 4690.50)
    assert by["xdai-h100pcie-8b-f16-tg1024-4v1"].measured == pytest.approx(62.90 / 67.79)
    for box in ("rtx4090", "a100pcie", "h100pcie"):
        assert by[f"xdai-{box}-8b-f16-pp512-4v1"].predicted < 1 < by[f"xdai-{box}-8b-f16-pp1024-4v1"].predicted
    assert by["xdai-a100pcie-70b-q4_k_m-pp1024-4v1"].measured == pytest.approx(978.06 / 726.65)
    # every stored group is priced, but the L40S box's F16 prompts (40 TFLOPS at 1 and 4 GPUs alike)
    assert not any(k.startswith("xdai-l40s-8b-f16-pp") for k in by)
    groups = {row["comparison_group"] for row in serving_rows() if row["comparison_group"].startswith("xdai-")}
    assert len(groups) == 45 and groups - {p.group for p in LAYER_SCALING} == set(XDAI_LEFT_OUT)
    # each box's three models (70B not on one 24 GB GPU) at pp512, pp1024 and tg1024
    assert {g.rsplit("-", 1)[0] for g in groups} == {f"xdai-{b}-{m}" for b in XDAI_BOXES for m in XDAI_SHORT}


def test_a_pair_against_k_over_2_divides_by_its_base(rows):
    """4 RTX 3090 against 2: the row's prediction is the layer split over 4 GPUs over the layer split
    over 2, not over one GPU. A 1,024-token prompt is two micro-batches: over 2 GPUs the second
    follows the first a stage later (1.5 passes), over 4 a quarter pass later (1.25 passes), so
    about 1.2 (one GPU: 2 passes, 1.6); generation launches every kernel on 2 and 4 GPUs alike (1.0;
    one GPU has CUDA graphs)."""
    by = {r.key: r for r in rows}
    pairs = {p.key: p for p in LAYER_SCALING}
    for key in ("xdai-rtx3090-8b-f16-pp1024-4v2", "xdai-rtx3090-8b-f16-tg1024-4v2"):
        pair = pairs[key]
        assert pair.base_gpus == 2
        two = throughput(replace(pair, gpus=2), 1, 2)
        assert by[key].predicted == pytest.approx(throughput(pair, 1, 4) / two)
    assert 1.1 < by["xdai-rtx3090-8b-f16-pp1024-4v2"].predicted < 1.3
    assert by["xdai-rtx3090-8b-f16-tg1024-4v2"].predicted == pytest.approx(1.0, abs=0.01)


def test_expert_parallel_pair_is_sglang_3602_priced_as_its_benchmark_ran(rows, cli):
    """DeepSeek-V3 FP8 on 8 H200: experts whole on each GPU (ep 8) against split 8 ways, 1,468.48
    against 1,403.02 output tokens/s. The benchmark sent 600 requests at 40/s with uniform random
    lengths and reported every token over its whole duration: priced so, the gain is far smaller
    than `serve --concurrency 600`'s closed loop (the tail of few requests gains little from whole
    experts), and still a gain."""
    (ep,) = [r for r in rows if r.ratio == "EP(k)/TP(k)"]
    assert ep.measured == pytest.approx(1468.48 / 1403.02) and ep.link == "NVLink" and "sglang#3602" in ep.source
    pair = EP_PAIRS[0]
    with_ep, without = as_benchmarked(pair)
    assert ep.predicted == pytest.approx(with_ep / without)
    args = "serve --model deepseek-v3 --system dgx-h200 --plan tp=8,ep=8 --plan tp=8 --framework sglang"
    more = " --weight-precision fp8 --kv-precision bf16 --input-len 93 --output-len 201 --concurrency 600 --json"
    code, out, _ = cli((args + more).split())
    tok = [p["throughput_tokens_per_s"] for p in json.loads(out)["plans"]]
    closed = tok[0] / tok[1]
    assert code == 0 and 1.0 < ep.predicted < closed - 0.1
    # both sides slower than the closed loop's steady state: the run's tail serves few requests
    assert with_ep < tok[0] and without < tok[1]


def test_pp_against_tp_pairs_are_nvidias_blog_ratios(rows):
    """Llama 3.1 405B in FP8 on 8 H200: PP 8 serves 1.5x TP 8 at maximum throughput, TP 8 is 5.6x
    faster at minimum latency (the post's text; rows in public_serving_multi_gpu.csv). Priced at
    512/512 (the post gives no lengths): a burst of 2,000 requests counted over the whole run, and
    one request alone. Both directions right: PP gains at full load and loses at one request."""
    pp = {r.key: r for r in rows if r.ratio == "PP(k)/TP(k)"}
    assert set(pp) == {p.key for p in PP_TP_PAIRS}
    high, low = pp["nvidia-blog-405b-h200-max-throughput"], pp["nvidia-blog-405b-h200-min-latency"]
    assert high.measured == pytest.approx(1.5) and low.measured == pytest.approx(1 / 5.6)
    assert high.link == "NVLink" and high.gpu == "H200" and "NVIDIA Technical Blog" in high.source
    assert high.direction_right and low.direction_right
    assert high.predicted == pytest.approx(1.5, rel=0.15) and low.predicted == pytest.approx(1 / 5.6, rel=0.15)
    # the burst's own pricing, and one request: its output tokens over its end-to-end latency
    with_pp, with_tp = pp_against_tp(PP_TP_PAIRS[1])
    assert low.predicted == pytest.approx(with_pp / with_tp) and with_tp > 4 * with_pp


def test_bench_serving_random_lengths_are_uniform_from_one():
    mix = uniform_lengths(EP_PAIRS[0])
    assert mix.input_lens.min() == 1 and mix.input_lens.max() == 180
    assert mix.output_lens.min() == 1 and mix.output_lens.max() == 400
    assert mix.input_lens.mean() == pytest.approx(90.5) and mix.output_lens.mean() == pytest.approx(200.5)


def test_direction_is_gain_against_no_gain():
    row = ScalingRow("x", "TP(k)/TP(k/2)", "A100", "NVLink", "", "", 1.2, 0.9, "")
    assert not row.direction_right and row.error == pytest.approx(1.2 / 0.9 - 1)
    assert ScalingRow("y", "TP(k)/TP(k/2)", "A100", "NVLink", "", "", 0.8, 0.9, "").direction_right


def test_the_summary_counts_every_case_once_per_group(rows):
    summary = summarize(rows)
    nvlink = next(s for s in summary if s.ratio == "TP(k)/TP(k/2)" and s.gpus == "all")
    assert nvlink.cases == 13 and nvlink.direction_right <= 13
    mine = [r for r in rows if r.ratio == "TP(k)/TP(k/2)"]
    assert nvlink.mape == pytest.approx(sum(abs(r.error) for r in mine) / len(mine))
    per_gpu = [s for s in summary if s.ratio == "TP(k)/TP(k/2)" and s.gpus != "all"]
    assert sum(s.cases for s in per_gpu) == 13
    # one GPU in a group: no "all" line repeating it
    assert len([s for s in summary if s.ratio == "TP(k)/PP(k)" and s.gpus == "all"]) == 1


def test_validate_inference_scaling_prints_both_tables(cli):
    code, out, err = cli(["validate", "inference_scaling", "--markdown"])
    assert code == 0, err
    assert "| ratio | link | GPU | cases | MAPE of the ratio | direction right |" in out
    assert "| FT13B-TP2-decode/tp1 | TP(k)/TP(k/2) |" in out and "no other PP(k)/PP(1) pair can be priced" in out
    code, out, err = cli(["validate", "inference_scaling", "--json"])
    assert code == 0, err
    data = json.loads(out)
    assert len(data["rows"]) == 85
    assert {s["ratio"] for s in data["summary"]} == {
        "TP(k)/TP(k/2)",
        "TP(k)/PP(k)",
        "PP(k)/PP(1)",
        "PP(k)/PP(k/2)",
        "EP(k)/TP(k)",
        "PP(k)/TP(k)",
    }
    code, _, err = cli(["validate", "inference_scaling", "inference"])
    assert code == 2 and "give it alone" in err
