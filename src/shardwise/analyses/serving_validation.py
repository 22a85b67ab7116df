"""Serving predictions against the public inference measurements in
`data/comm_and_inference_measured.csv` (each row with its source):

- TensorRT-LLM's performance overview (NVIDIA/TensorRT-LLM docs/source/performance/perf-overview.md,
  trtllm-bench, offline "max throughput": all requests queued): total output tokens/s of
  Llama 3.1 8B, 3.3 70B and 3.1 405B in FP8 on H100 and H200 with TP 1 to 8. Modelled as one full
  batch, the largest that fits the KV cache (FP8 weights and KV cache), capped at the
  `max_batch_size` trtllm-bench runs the engine with (`engines.trtllm_buffers`), with TensorRT-LLM's
  one-shot all-reduce: the steady state of in-flight batching at
  its maximum throughput. The in-flight simulation itself (`engines.inflight`, closed loop at the
  KV cache's capacity) gives 8.4% mean absolute error on these 80 rows against this 8.5%, at ten
  times the cost (tools/serving_inflight_check.py, 2026-12-08; 7.9% against 7.4% on 2026-12-01,
  before NVLS was modelled), so the table keeps the full batch; serve's interval says so. The
  B200/GB200 rows (Llama 3.1 405B on 4 GPUs) use NVFP4 weights: FP4 GEMMs at
  the datasheet's dense FP4 peak with FP8's matmul efficiency (no FP4 rate is published), and
  were added after that model was written, untouched by any fit.
- FasterTransformer, GPT 13B on A100 40GB, TP 1 and 2, batch 1, 512 prompt tokens and 10 new ones
  (kipply, quoted in cli99/llm-analysis): prefill latency, latency per generated token, and total
  latency, which that benchmark counts as prefill + 10 decode steps. An eager C++ runtime.
"""

from __future__ import annotations

import csv
from functools import cache
from importlib import resources

from shardwise import presets
from shardwise.analyses.serving import at_max_batch
from shardwise.analyses.validation import ValidationRow
from shardwise.engines.serving import estimate_serving, plan_for_serving
from shardwise.specs import Scenario
from shardwise.specs.serving import ServingWorkload

MODELS = {
    "Llama-3.1-8B": "llama3-8b",
    "Llama-3.3-70B": "llama3-70b",
    "Llama-3.1-405B": "llama3-405b",
    "13B GPT (kipply test-13b)": "gpt-13b",
}
SYSTEMS = {
    "H100 SXM 80GB": "dgx-h100",
    "H200 SXM 141GB": "dgx-h200",
    "A100 40GB": "dgx-a100-40gb",
    "B200 180GB": "dgx-b200",
    "GB200 192GB": "gb200-nvl72",
}
# TensorRT-LLM's checkpoints: FP8 weights or NVFP4 weights (ModelOpt), the KV cache in FP8 for both.
WEIGHTS = {"FP8": "fp8", "FP4": "nvfp4"}
CITATION = (
    "TensorRT-LLM performance overview (trtllm-bench, FP8 and FP4, max throughput) and FasterTransformer "
    "GPT-13B latencies (kipply via cli99/llm-analysis)"
)


@cache
def inference_rows() -> list[dict[str, str]]:
    text = resources.files("shardwise.data").joinpath("comm_and_inference_measured.csv").read_text(encoding="utf-8")
    return [r for r in csv.DictReader(text.splitlines()) if r["category"] == "inference"]


def _scenario(row: dict[str, str]) -> Scenario:
    tp = int(row["tp"])
    cluster = presets.system(SYSTEMS[row["gpu"]]).with_(gpus_per_node=tp)
    return Scenario(presets.model(MODELS[row["model"]]), cluster, plan_for_serving(tp, 1))


def _label(row: dict[str, str]) -> str:
    # every row's weights, FP8 as FP4 (only FP4 was labelled, as if the rest were 16-bit; review 50 #12)
    weights = f", {row['precision'].upper()}" if row.get("precision") else ""
    return f"{MODELS[row['model']]}, {row['gpu'].split()[0]} TP{row['tp']}, {row['isl']}/{row['osl']} tokens{weights}"


def modelled(row: dict[str, str]) -> bool:
    """Whether the row's model and GPU have presets."""
    return row["model"] in MODELS and row["gpu"] in SYSTEMS


def predict(row: dict[str, str]) -> tuple[str, str, float]:
    """(configuration, metric, predicted value) of one measurement (see the module docstring)."""
    scn = _scenario(row)
    isl, osl = int(row["isl"]), int(row["osl"])
    if row["framework"].startswith("FasterTransformer"):
        wl = ServingWorkload(isl, osl, 1, "fp16", "fp16", "cpp-eager", engine="fastertransformer")
        est = estimate_serving(scn, wl)
        predicted = {
            "prefill latency": float(est.ttft_s),
            "decode latency per token": float(est.tpot_s),
            "total latency": float(est.ttft_s + osl * est.tpot_s),
        }
        key = next(k for k in predicted if row["metric"].startswith(k))
        return _label(row) + ", batch 1, FasterTransformer", f"{key} (ms)", predicted[key] * 1e3
    weights = WEIGHTS[row["precision"]]
    est = at_max_batch(scn, ServingWorkload(isl, osl, 1, weights, "fp8", custom_all_reduce="trtllm"))
    return _label(row) + f", batch {int(est.workload.batch)}", "output tokens/s", float(est.throughput_tokens_per_s)


def validate_serving() -> tuple[list[ValidationRow], int]:
    """(rows, how many measurements were left out as not modelled)."""
    out, skipped = [], 0
    for row in inference_rows():
        if not modelled(row):
            skipped += 1
            continue
        label, metric, predicted = predict(row)
        source = f"{row['source']}, {row['locator']}"
        out.append(ValidationRow(row["id"], "inference", label, metric, predicted, float(row["value"]), source))
    return out, skipped
