"""What each side of a TensorRT-LLM TP(k) / TP(k/2) pair of `validate inference_scaling` is made
of, to see which term a ratio's error comes from (issue #37, items 1 and 6): per side, as
`analyses.serving_validation.predict` prices it (one full batch at the KV cache's capacity,
`analyses.serving.at_max_batch`), nothing fitted:

- the batch (sequences in flight) and what limits it: the KV cache ("kv cache": the sequences of
  input + output tokens that 0.9 of the free memory holds, TensorRT-LLM's GUARANTEED_NO_EVICT,
  trtllm-bench's default `--scheduler_policy`, reserves a request's whole output up front:
  tensorrt_llm/bench/benchmark/throughput.py) or the engine's `max_batch_size` ("max_batch_size",
  trtllm-bench's tuning, `engines.trtllm_buffers.bench_engine_settings`), and the token budget
  `max_num_tokens` beside it;
- the memory of one GPU: CUDA's total, the weights, the engine's activation memory (sized by
  `max_num_tokens`), runtime and decoder buffers (sized by `max_batch_size`), the all-reduce
  workspace, the runtime reserve, and the KV cache's bytes and its bytes per token;
- one request's prefill (compute, all-reduces) and one decode step split into the attention's
  KV-dependent time (the step at the batch's mean context less the same step with no context),
  the GEMMs and element-wise kernels, and the all-reduces.

Printed by `tools/serving_tp_breakdown.py`; docs/serving.md ("TP 2 over TP 1 on NVLink: the
decomposition") reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from shardwise.analyses.serving import at_max_batch
from shardwise.analyses.serving_scaling import tp_pairs
from shardwise.analyses.serving_validation import _scenario, inference_rows
from shardwise.engines.engine_presets import engine
from shardwise.engines.serving import (
    BENCH_WEIGHT_BYTES,
    estimate_serving,
    kv_cache_free_bytes,
    memory_per_gpu,
    serving_scenario,
)
from shardwise.engines.trtllm_buffers import (
    activation_bytes,
    allreduce_workspace_bytes,
    bench_engine_settings,
    runtime_buffers_bytes,
)
from shardwise.physics.memory import RUNTIME_RESERVED_BYTES
from shardwise.specs.serving import ServingWorkload


@dataclass(frozen=True)
class SideBreakdown:
    """One side of a pair (module docstring); bytes per GPU, seconds."""

    row: str  # the measured row's id
    gpu: str
    tp: int
    input_len: int
    output_len: int
    batch: int  # sequences in flight, per replica
    limit: str  # "kv cache" or "max_batch_size"
    max_batch_size: int
    max_num_tokens: int
    memory_bytes: float
    weights_bytes: float
    activation_bytes: float
    runtime_buffers_bytes: float
    allreduce_workspace_bytes: float
    reserved_bytes: float
    kv_cache_bytes: float  # what the engine gives its KV cache
    kv_bytes_per_token: float  # keys and values of one token, every layer, this GPU's heads
    prefill_per_request_s: float  # the batch's prefill over its sequences
    prefill_allreduce_per_request_s: float
    decode_attention_s: float  # one decode step: the part that grows with the context
    decode_gemm_s: float  # GEMMs, element-wise kernels, the output layer
    decode_allreduce_s: float
    tpot_s: float
    predicted_tokens_per_s: float
    measured_tokens_per_s: float

    @property
    def error(self) -> float:
        return self.predicted_tokens_per_s / self.measured_tokens_per_s - 1.0

    @property
    def prefill_share(self) -> float:
        """Share of the priced time the batch spends in prefill."""
        prefill = self.batch * self.prefill_per_request_s
        return prefill / (prefill + self.output_len * self.tpot_s)


def _workload(row: dict[str, str]) -> ServingWorkload:
    # as `analyses.serving_validation.predict` prices a TensorRT-LLM row (FP8 weights and KV cache)
    weights = {"FP8": "fp8", "FP4": "nvfp4"}[row["precision"]]
    return ServingWorkload(int(row["isl"]), int(row["osl"]), 1, weights, "fp8", custom_all_reduce="trtllm")


def side(row: dict[str, str]) -> SideBreakdown:
    """The breakdown of one TensorRT-LLM performance-overview row (module docstring)."""
    if not row["framework"].startswith("TensorRT-LLM"):
        raise ValueError(f"{row['id']}: only TensorRT-LLM rows are broken down here")
    scn, wl = _scenario(row), _workload(row)
    if not engine(wl.engine).bench_buffers:
        raise ValueError(f"{row['id']}: engine {wl.engine} is not sized as trtllm-bench sizes it")
    est = at_max_batch(scn, wl)
    batch = int(est.workload.batch)
    s = serving_scenario(scn, wl)
    model, plan, memory = s.model, s.plan, float(s.cluster.gpu.memory_bytes)
    w, kv = BENCH_WEIGHT_BYTES.get(wl.weight_precision, 2.0), BENCH_WEIGHT_BYTES.get(wl.kv_precision, 2.0)
    cap, tokens = bench_engine_settings(model, plan.tp, plan.pp, wl.input_len, wl.output_len, memory, w, kv)
    cap, tokens = int(np.min(cap)), int(np.min(tokens))
    weights, kv_per_sequence = memory_per_gpu(s, wl)
    free = float(kv_cache_free_bytes(s, wl, weights))
    # the same batch with no context: the decode step less its attention over the KV cache
    bare = estimate_serving(scn, replace(wl, input_len=1, output_len=2, batch=batch))
    step_ar = float(est.decode_s["tp_comm"])
    bare_ar = float(bare.decode_s["tp_comm"])
    tpot = float(est.tpot_s)
    return SideBreakdown(
        row=row["id"],
        gpu=row["gpu"],
        tp=int(row["tp"]),
        input_len=wl.input_len,
        output_len=wl.output_len,
        batch=batch,
        limit="max_batch_size" if batch >= cap else "kv cache",
        max_batch_size=cap,
        max_num_tokens=tokens,
        memory_bytes=memory,
        weights_bytes=float(weights),
        activation_bytes=float(activation_bytes(model, plan.tp, tokens)),
        runtime_buffers_bytes=float(runtime_buffers_bytes(cap, plan.pp)),
        allreduce_workspace_bytes=float(allreduce_workspace_bytes(plan.tp)),
        reserved_bytes=RUNTIME_RESERVED_BYTES,
        kv_cache_bytes=free,
        kv_bytes_per_token=float(kv_per_sequence) / (wl.input_len + wl.output_len),
        prefill_per_request_s=float(est.ttft_s) / batch,
        prefill_allreduce_per_request_s=float(est.prefill_s["tp_comm"]) / batch,
        decode_attention_s=tpot - float(bare.tpot_s),
        decode_gemm_s=float(bare.tpot_s) - bare_ar,
        decode_allreduce_s=step_ar,
        tpot_s=tpot,
        predicted_tokens_per_s=float(est.throughput_tokens_per_s),
        measured_tokens_per_s=float(row["value"]),
    )


def trtllm_pair_breakdowns() -> list[tuple[str, SideBreakdown, SideBreakdown]]:
    """(pair key, larger TP side, smaller TP side) of every TensorRT-LLM TP(k) / TP(k/2) pair of
    `analyses.serving_scaling.tp_pairs`."""
    rows = {r["id"]: r for r in inference_rows()}
    out = []
    for pair in tp_pairs():
        big_id, _, small_tp = pair.key.rpartition("/tp")
        big = rows[big_id]
        if not big["framework"].startswith("TensorRT-LLM"):
            continue
        small = next(
            r
            for r in rows.values()
            if r["framework"] == big["framework"]
            and r["model"] == big["model"]
            and r["precision"] == big["precision"]
            and (r["isl"], r["osl"]) == (big["isl"], big["osl"])
            and r["tp"] == small_tp
            and r["metric"] == big["metric"]
        )
        out.append((pair.key, side(big), side(small)))
    return out


def kv_capacity_check(b: SideBreakdown) -> float:
    """The KV cache's bytes less TensorRT-LLM's rule as priced, 0.9 (M - W - R - E) with E the
    activation, runtime and decoder buffers and the all-reduce workspace (`engines.engine_presets`
    `kv_cache_bytes`, `engines.trtllm_buffers`): 0 when the breakdown's memory terms are the ones
    the KV cache was sized from."""
    buffers = b.activation_bytes + b.runtime_buffers_bytes + b.allreduce_workspace_bytes
    rule = engine("tensorrt-llm").kv_fraction * (b.memory_bytes - b.weights_bytes - b.reserved_bytes - buffers)
    return b.kv_cache_bytes - max(rule, 0.0)


def errors_by_length() -> dict[tuple[int, int], list[tuple[str, float]]]:
    """Every TensorRT-LLM row's error (predicted / measured - 1) by its (input, output) lengths: a
    term missing from one TP size would move that size's rows at every length alike; a row out of
    line with the other GPUs and models at its lengths points at the row."""
    from shardwise.analyses.serving_validation import modelled, predict

    out: dict[tuple[int, int], list[tuple[str, float]]] = {}
    for row in inference_rows():
        if not (modelled(row) and row["framework"].startswith("TensorRT-LLM")):
            continue
        _, _, predicted = predict(row)
        key = (int(row["isl"]), int(row["osl"]))
        out.setdefault(key, []).append((row["id"], predicted / float(row["value"]) - 1.0))
    return dict(sorted(out.items()))
