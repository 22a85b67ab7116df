"""Serving scaling ratios, measured against predicted: how much more a plan with twice the GPUs
serves (TP(k) / TP(k/2), PP(k) / PP(1)) and, on PCIe boxes, TP against a layer split on the same
GPUs (TP(k) / PP(k)), from the project's published multi-GPU serving measurements, each priced
exactly as its absolute table prices it (nothing here is fitted to these rows):

- TP(k) / TP(k/2), NVLink: pairs of `data/comm_and_inference_measured.csv` rows of one model,
  engine, precision and workload at TP k and k/2 (`analyses.serving_validation.predict`):
  FasterTransformer GPT-13B on A100 40GB (TP 2 against 1, batch 1: prefill, per-token decode and
  total latency, compared as throughputs, the inverse), and TensorRT-LLM's Llama 3.3 70B in FP8,
  TP 2 on H100 against TP 1 on H200 at its maximum throughput (ten workloads). H100 and H200 are one
  GH100 die with different memory (80 GB at 3.35 TB/s, 141 GB at 4.8 TB/s); the model prices each
  GPU as it is, so the ratio checks both the scaling and the memory.
- TP(k) / PP(k), PCIe: `analyses.serving_pcie` (llama.cpp, ExLlamaV2; no P2P), llama.cpp's `-sm row`
  among them.
- PP(k) / PP(1) and PP(k) / PP(k/2), PCIe: llama.cpp's layer split over k GPUs against one (or
  k/2): PR 6017's 8 A100 PCIe, and XiongjieDai/GPU-Benchmarks-on-LLM-Inference's RTX 4090 (2, 4, 8
  GPUs), A100 PCIe, H100 PCIe and L40S (4) against one and RTX 3090 (4 against 2), Llama 3 8B and
  70B (`analyses.serving_pcie.LAYER_SCALING`, the scheduler of its build: `engines.llamacpp`).
- EP(k) / TP(k), NVLink: a mixture of experts with its experts whole on k GPUs (ep = tp = k,
  attention TP k) against split over them (TP k): SGLang PR 3602's DeepSeek-V3 in FP8 on 8 H200
  (`EP_PAIRS`, rows in `data/public_serving_multi_gpu.csv`). Priced as its benchmark ran
  (`as_benchmarked`): `sglang.bench_serving --dataset-name random --num-prompts 600 --random-input
  180 --random-output 400 --request-rate 40`, so 600 requests arriving as a Poisson process at 40
  per second, each prompt drawn uniformly from 1 to 180 tokens and each output from 0 to 400
  (`random_range_ratio` 0.0, the default then: `np.random.randint(max(int(L r), 1), L + 1)` in
  bench_serving.py's `sample_random_requests`; an output of 0 is taken as 1), and the output
  throughput bench_serving prints is every generated token over the benchmark's duration, first
  request to last completion: the run's last ~60 s, after the arrivals stop at 15 s, serve fewer
  and fewer requests, where experts whole on each GPU gain little (a decode step of few tokens
  reads the chosen experts' weights either way). Each side is the replica `shardwise serve` builds
  for it (`--framework sglang`, its budget and KV cache). Before #37 the pair was priced as a
  closed loop of 600 requests in flight (`serve --concurrency 600`): 1.33 against the 1.05
  measured; as benchmarked 1.13. Data-parallel attention has no such pair in the data (`LEFT_OUT`).
- PP(k) / TP(k), NVLink: pipeline against tensor parallelism on the same k GPUs, the two ratios
  NVIDIA's blog "Boosting Llama 3.1 405B Throughput by Another 1.5x on NVIDIA H200 Tensor Core
  GPUs and NVLink Switch" (October 2024) states for TensorRT-LLM, Llama 3.1 405B in FP8 on one
  HGX H200 (`PP_TP_PAIRS`, rows in `data/public_serving_multi_gpu.csv`): at maximum throughput
  PP 8 serves 1.5x TP 8, at minimum latency TP 8 is 5.6x faster (a throughput ratio PP/TP of
  1/5.6). The post gives neither lengths nor a request count: priced at 512/512 tokens, the
  maximum throughput as trtllm-bench measures it (2,000 requests sent at once, every generated
  token over the whole run: `engines.inflight.Simulated.run_tokens_per_s`; 0.85-1.46, median
  1.25, over the perf-overview lengths: docs/serving.md), the minimum latency as one request alone. Each side is
  the replica `shardwise serve --framework tensorrt-llm` builds.
- PP(k) / PP(1) of the other engines: none can be priced (`LEFT_OUT`).

A ratio above 1 is a gain; a case's direction is right when predicted and measured agree on it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from shardwise import presets
from shardwise.analyses.serving_validation import MODELS, SYSTEMS, inference_rows, modelled, predict

if TYPE_CHECKING:
    from shardwise.engines.inflight import Traffic
    from shardwise.requests.serve import ServeSetting
    from shardwise.specs.experiment import PlanSpec
    from shardwise.specs.request_mix import RequestMix

# GPUs that are one compute die (a TP pair across them compares the same kernels)
SAME_DIE = {"H100 SXM 80GB": "GH100", "H200 SXM 141GB": "GH100"}
CITATION = (
    "TensorRT-LLM performance overview and FasterTransformer GPT-13B latencies (NVLink), llama.cpp and ExLlamaV2 "
    "on PCIe GPUs (GitHub PRs and issues, XiongjieDai/GPU-Benchmarks-on-LLM-Inference), SGLang PR 3602's expert "
    "parallelism on 8 H200, NVIDIA's blog on PP against TP for Llama 3.1 405B "
    "on 8 H200 (data/PUBLIC_RUNS.md)"
)
LEFT_OUT = (
    "no TP(k)/TP(k/2) pair on PCIe exists in the public data (public_serving_multi_gpu.csv pairs TP with a layer "
    "split at one GPU count; #37's search of vLLM, SGLang, LMDeploy, TensorRT-LLM threads and cloud blogs found "
    "none with the model, lengths and box at both sizes: vLLM#3297's L40 (no preset) at TP 8 and 4 is rate-bound, "
    "10 requests/s); no other PP(k)/PP(1) pair can be priced: club-3090's 1 against 2 RTX 3090 "
    "(-sm layer, decode) names no model, "
    "llama.cpp#25051 splits over unlike GPUs (RTX 4090 + A16); TensorRT-LLM's Llama 3.1 405B pairs TP 8 in FP8 "
    "(H100, H200) with TP 4 in FP4 (B200, GB200): a precision and a GPU generation apart, not a scaling ratio; "
    "TensorRT-LLM#1102's PP 2 against 1 GPU (Llama 7B FP16, batch 1, 1024/512: 11.30 against 11.51 s) names no GPU "
    "(it bounds TensorRT-LLM's per-stage host time near 0: a cost h per stage would add 512 h); no data-parallel "
    "attention pair: SGLang#2882 (DeepSeek-V3 on 8 H200, --enable-dp-attention at half the throughput of TP 8) "
    "gives its figures only in part and caps the KV cache (--max-total-tokens 65536)"
)


@dataclass(frozen=True)
class ServingPair:
    """Two published serving rows of one model on one system, one engine and its precisions."""

    key: str
    group: str  # comparison_group of the two rows
    model: str
    system: str
    engine: str
    weight_precision: str
    kv_precision: str
    input_len: int
    output_len: int
    requests: int


@dataclass(frozen=True)
class EpPair(ServingPair):
    """Experts whole on `ep` GPUs against split over `tp` (module docstring); the lengths are the
    means of the benchmark's random lengths, `requests` its --num-prompts."""

    tp: int = 1
    ep: int = 1
    rate_per_s: float = 0.0  # its --request-rate (Poisson arrivals)
    input_max: int = 0  # its --random-input: prompts uniform on 1..input_max (range ratio 0)
    output_max: int = 0  # its --random-output: outputs uniform on 1..output_max


EP_PAIRS = (
    EpPair("sglang-3602-dsv3-ep8", "sglang-3602-dsv3-ep8-h200", "deepseek-v3", "dgx-h200", "sglang", "fp8", "bf16",
           93, 201, 600, tp=8, ep=8, rate_per_s=40.0, input_max=180, output_max=400),
)  # fmt: skip


@dataclass(frozen=True)
class PpTpPair(ServingPair):
    """PP k against TP k on the same GPUs, one of the blog's two ratios (module docstring); the
    lengths are assumed (the post gives none); `requests` are sent at once, every token over the
    whole run (maximum throughput), 0: one request alone."""

    k: int = 1
    what: str = ""


PP_TP_PAIRS = (
    PpTpPair("nvidia-blog-405b-h200-max-throughput", "nvidia-blog-405b-h200-max-throughput", "llama3-405b",
             "dgx-h200", "tensorrt-llm", "fp8", "fp8", 512, 512, 2000, k=8, what="max throughput"),
    PpTpPair("nvidia-blog-405b-h200-min-latency", "nvidia-blog-405b-h200-min-latency", "llama3-405b",
             "dgx-h200", "tensorrt-llm", "fp8", "fp8", 512, 512, 0, k=8, what="min latency"),
)  # fmt: skip


@dataclass(frozen=True)
class ScalingRow:
    key: str
    ratio: str  # "TP(k)/TP(k/2)", "PP(k)/PP(1)", "PP(k)/PP(k/2)", "TP(k)/PP(k)", "EP(k)/TP(k)", "PP(k)/TP(k)"
    gpu: str
    link: str  # "NVLink" or "PCIe"
    label: str
    metric: str
    predicted: float
    measured: float
    source: str
    measured_sd: float = 0.0  # the measured ratio's run-to-run deviation (`analyses.scaling_noise`; 0: none printed)

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1.0

    @property
    def direction_right(self) -> bool:
        return (self.predicted > 1.0) == (self.measured > 1.0)

    @property
    def within_noise(self) -> bool | None:
        """The measured ratio lies within the run-to-run noise of 1 (`analyses.scaling_noise`; None:
        no deviation printed)."""
        from shardwise.analyses.scaling_noise import within_noise

        return within_noise(self.measured, self.measured_sd)


@dataclass(frozen=True)
class ScalingSummary:
    ratio: str
    link: str
    gpus: str
    cases: int
    mape: float  # mean |predicted / measured - 1|
    direction_right: int


def _link(gpu_name: str) -> str:
    from shardwise.physics.custom_allreduce import is_nvlink_class

    return "NVLink" if is_nvlink_class(presets.system(SYSTEMS[gpu_name]).intra_node_link) else "PCIe"


def _short(gpu_name: str) -> str:
    return gpu_name.split()[0]


def tp_pairs() -> list[ScalingRow]:
    """TP(k) / TP(k/2) from the rows of one model, engine, precision, workload and metric."""
    groups: dict[tuple[str, ...], list[dict[str, str]]] = defaultdict(list)
    for row in inference_rows():
        if modelled(row) and int(row["pp"]) == 1:
            key = (row["model"], row["framework"], row["precision"], row["isl"], row["osl"], row["metric"])
            groups[key].append(row)
    out = []
    for rows in groups.values():
        for big in rows:
            for small in rows:
                k = int(big["tp"])
                die = SAME_DIE.get(big["gpu"], big["gpu"])
                if int(small["tp"]) * 2 != k or SAME_DIE.get(small["gpu"], small["gpu"]) != die:
                    continue
                out.append(_tp_row(big, small))
    return sorted(out, key=lambda r: r.key)


def _tp_row(big: dict[str, str], small: dict[str, str]) -> ScalingRow:
    """One pair as a throughput ratio (latencies inverted)."""
    _, metric, pred_b = predict(big)
    _, _, pred_s = predict(small)
    meas_b, meas_s = float(big["value"]), float(small["value"])
    latency = "latency" in metric
    predicted = pred_s / pred_b if latency else pred_b / pred_s
    measured = meas_s / meas_b if latency else meas_b / meas_s
    k = int(big["tp"])
    gpus = _short(big["gpu"]) if big["gpu"] == small["gpu"] else f"{_short(big['gpu'])}/{_short(small['gpu'])}"
    where = (
        f"TP{k} / TP{k // 2} on {_short(big['gpu'])}"
        if big["gpu"] == small["gpu"]
        else f"TP{k} on {_short(big['gpu'])} / TP{k // 2} on {_short(small['gpu'])}"
    )
    what = metric.replace(" (ms)", "").replace("output tokens/s", "max throughput").replace(" latency", "")
    engine = big["framework"].split()[0]
    label = f"{MODELS[big['model']]} {big['isl']}/{big['osl']}, {engine} {what}: {where}"
    return ScalingRow(
        f"{big['id']}/tp{k // 2}", "TP(k)/TP(k/2)", gpus, _link(big["gpu"]), label, f"throughput ratio ({what})",
        predicted, measured, f"{big['source']}, {big['locator']}",
    )  # fmt: skip


def pcie_rows() -> list[ScalingRow]:
    """TP(k) / PP(k) on PCIe (`analyses.serving_pcie`)."""
    from shardwise.analyses.scaling_noise import ratio_sd
    from shardwise.analyses.serving_pcie import LAYER_SCALING, PAIRS, validate_pcie_serving

    layer = {p.key: "PP(k)/PP(1)" if p.base_gpus == 1 else "PP(k)/PP(k/2)" for p in LAYER_SCALING}
    sd = {p.key: ratio_sd(p.group, p.gpus, p.base_gpus) for p in LAYER_SCALING}

    gpu = {p.key: p.gpu.replace("-", " ").upper() for p in (*PAIRS, *LAYER_SCALING)}
    return [
        ScalingRow(
            r.run_id,
            layer.get(r.run_id, "TP(k)/PP(k)"),
            gpu[r.run_id],
            "PCIe",
            r.label,
            r.metric,
            r.predicted,
            r.measured,
            r.source,
            sd.get(r.run_id, 0.0),
        )
        for r in validate_pcie_serving()
    ]


def ep_rows() -> list[ScalingRow]:
    """EP(k) / TP(k) on NVLink (`EP_PAIRS`)."""
    from shardwise.analyses.serving_pcie import serving_rows

    out = []
    for pair in EP_PAIRS:
        rows = [r for r in serving_rows() if r["comparison_group"] == pair.group]
        ep = next(r for r in rows if "--enable-ep-moe" in r["layout"])
        tp = next(r for r in rows if "--enable-ep-moe" not in r["layout"])
        measured = float(ep["value"]) / float(tp["value"])
        with_ep, without = as_benchmarked(pair)
        predicted = with_ep / without
        label = (
            f"{pair.model} 1-{pair.input_max}/1-{pair.output_max}, {pair.requests} requests at {pair.rate_per_s:g}/s, "
            f"{pair.engine}: tp={pair.tp},ep={pair.ep} / tp={pair.tp} on {pair.system}"
        )
        out.append(
            ScalingRow(pair.key, "EP(k)/TP(k)", "H200", "NVLink", label, "output tokens/s", predicted, measured,
                       f"{ep['source']}, {ep['locator']}")
        )  # fmt: skip
    return out


def pp_tp_rows() -> list[ScalingRow]:
    """PP(k) / TP(k) on NVLink (`PP_TP_PAIRS`): the measured ratio is the PP row's value over the
    TP row's (both relative, as the post states them)."""
    from shardwise.analyses.serving_pcie import serving_rows

    out = []
    for pair in PP_TP_PAIRS:
        rows = [r for r in serving_rows() if r["comparison_group"] == pair.group]
        tp = next(r for r in rows if r["layout"].startswith("TP"))
        pp = next(r for r in rows if r["layout"].startswith("PP"))
        measured = float(pp["value"]) / float(tp["value"])
        with_pp, with_tp = pp_against_tp(pair)
        how = f"{pair.requests:,} requests at once" if pair.requests else "one request"
        label = (
            f"{pair.model} {pair.input_len}/{pair.output_len} (assumed), {pair.engine} {pair.what} ({how}): "
            f"pp={pair.k} / tp={pair.k} on {pair.system}"
        )
        out.append(
            ScalingRow(pair.key, "PP(k)/TP(k)", "H200", "NVLink", label, "output tokens/s", with_pp / with_tp,
                       measured, f"{pp['source']}, {pp['locator']}")
        )  # fmt: skip
    return out


def pp_against_tp(pair: PpTpPair) -> tuple[float, float]:
    """Generated tokens/s of `pair`'s pipeline plan and of its TP plan: `pair.requests` requests sent
    at once and every token over the whole run (trtllm-bench's throughput mode), or, where
    `pair.requests` is 0, one request alone (its output tokens over its latency); each replica as
    `shardwise serve` builds it."""
    from shardwise.engines.inflight import Traffic
    from shardwise.requests.serve import ServeRequest

    request = ServeRequest.from_argv(
        f"--model {pair.model} --system {pair.system} --plan pp={pair.k} --plan tp={pair.k} "
        f"--framework {pair.engine} --weight-precision {pair.weight_precision} --kv-precision {pair.kv_precision} "
        f"--input-len {pair.input_len} --output-len {pair.output_len}"
    )
    if not pair.requests:
        result = request.run()
        with_pp, with_tp = (float(est.e2e_s) for _, est in result.rows)
        return pair.output_len / with_pp, pair.output_len / with_tp
    s = request.setting()
    traffic = Traffic(rate_per_s=math.inf, requests=pair.requests)
    with_pp, with_tp = (whole_run_tokens_per_s(s, spec, traffic) for spec in s.specs)
    return with_pp, with_tp


def uniform_lengths(pair: EpPair) -> RequestMix:
    """bench_serving's random dataset at range ratio 0: prompt and output lengths independent and
    uniform on 1..input_max and 1..output_max (module docstring)."""
    from shardwise.specs.request_mix import RequestMix

    prompts, outputs = np.meshgrid(np.arange(1, pair.input_max + 1), np.arange(1, pair.output_max + 1), indexing="ij")
    return RequestMix(
        f"random 1-{pair.input_max}/1-{pair.output_max}",
        "sglang.bench_serving --dataset-name random, random_range_ratio 0.0",
        input_lens=prompts.ravel(),
        output_lens=outputs.ravel(),
    )


def as_benchmarked(pair: EpPair) -> tuple[float, float]:
    """Generated tokens/s of `pair`'s two plans (experts over `ep` GPUs, then TP only) over the whole
    benchmark as it ran (module docstring): `pair.requests` requests of `uniform_lengths` arriving
    at `pair.rate_per_s`, every token over the time from the first arrival to the last completion
    (`engines.inflight.Simulated.run_tokens_per_s`); each replica as `shardwise serve` builds it."""
    from shardwise.engines.inflight import Traffic
    from shardwise.requests.serve import ServeRequest

    request = ServeRequest.from_argv(
        f"--model {pair.model} --system {pair.system} --plan tp={pair.tp},ep={pair.ep} --plan tp={pair.tp} "
        f"--framework {pair.engine} --weight-precision {pair.weight_precision} --kv-precision {pair.kv_precision} "
        f"--input-len {pair.input_len} --output-len {pair.output_len}"
    )
    s = request.setting()
    mix, traffic = uniform_lengths(pair), Traffic(rate_per_s=pair.rate_per_s, requests=pair.requests)
    with_ep, without = (whole_run_tokens_per_s(s, spec, traffic, mix) for spec in s.specs)
    return with_ep, without


def whole_run_tokens_per_s(s: ServeSetting, spec: PlanSpec, traffic: Traffic, mix: RequestMix | None = None) -> float:
    """Generated tokens/s of `spec`'s replicas together (each as `shardwise serve` builds it from
    the setting `s`, each running `traffic`) over the whole run: every token from the first
    arrival to the last completion (`engines.inflight.Simulated.run_tokens_per_s`), as
    trtllm-bench's throughput mode and sglang.bench_serving report it."""
    from shardwise.engines.inflight import Replica
    from shardwise.requests.serve_plans import scenario

    replica = Replica(
        scenario(s.model, s.cluster, spec, s.stages, s.workload.engine), s.workload, s.max_batched_tokens, mix
    )
    return replica.replicas * replica.run(traffic).run_tokens_per_s


def scaling_rows() -> list[ScalingRow]:
    return tp_pairs() + pcie_rows() + ep_rows() + pp_tp_rows()


def summarize(rows: list[ScalingRow]) -> list[ScalingSummary]:
    """Per ratio, link type and GPU(s), and per ratio and link type over every GPU ("all")."""
    groups: dict[tuple[str, str, str], list[ScalingRow]] = defaultdict(list)
    for r in rows:
        groups[(r.ratio, r.link, r.gpu)].append(r)
        groups[(r.ratio, r.link, "all")].append(r)
    out = []
    for (ratio, link, gpus), rs in groups.items():
        if gpus == "all" and len({r.gpu for r in rs}) < 2:
            continue
        mape = float(np.mean([abs(r.error) for r in rs]))
        out.append(ScalingSummary(ratio, link, gpus, len(rs), mape, sum(r.direction_right for r in rs)))
    return sorted(out, key=lambda s: (s.ratio, s.link, s.gpus == "all", s.gpus))
