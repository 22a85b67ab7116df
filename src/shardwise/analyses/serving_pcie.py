"""Tensor parallelism against a layer (pipeline) split on PCIe GPUs, from public measurements of
llama.cpp and ExLlamaV2 (`data/public_serving_multi_gpu.csv`, every row with its source).

Absolute numbers depend on each engine's kernels; the question of the articles is the ratio:
how much faster (or slower) TP is than splitting the layers on the same GPUs. So each check is a
pair of rows, TP and layer split, same engine, model, GPUs and workload, compared as the ratio of
their throughputs, predicted against measured. Engines are modelled as they run:

- llama.cpp `-sm layer`: each GPU holds a run of layers; a prompt of N tokens is processed in
  batches of 2,048 tokens (`-b`), each split into 512-token micro-batches (`-ub`) that flow through
  the GPUs as a pipeline (llama.cpp's pipeline parallelism needs n_batch > n_ubatch, so pp512 runs
  the GPUs one after the other); token generation (tg128, batch 1) crosses them in turn.
- llama.cpp `-sm tensor` (PR 19378): Megatron-style TP with two all-reduces per layer by NCCL
  (`ggml-cuda.cu`'s comm backend, NCCL by default on Linux; BF16 on the wire above 262,144 elements
  for 4 GPUs, FP32 below), on the GPUs' PCIe links without P2P (GeForce cards on the stock
  driver), so NCCL stages them through host memory;
- ExLlamaV2's tensor parallelism: no all-reduce; every module ends in an all-gather staged
  through pinned host memory, the MLP's intermediate activation included
  (`physics.host_staged`, read from its source), on the GPU's stream after its kernels;
- CUDA graphs for token generation, eager launches for prompts (`engines.serving.RUNTIMES`).
- ExLlamaV2: prompts in 2,048-token chunks (the issue's "batch 2048"); no pipelining across GPUs.
  Its pair is doubtful as a measurement of prefill: the layer split's 1,045.8 tokens/s on Llama 3.3
  70B, one RTX 3090 at a time, is 2 x 68.5 GFLOP x 1,045.8 = 143 TFLOPS of matrix products, above
  a 3090's tensor peak (71 TFLOPS with FP32 accumulation, 142 with FP16), so the reported rate
  counts work not done (a cached prefix, or a draft model's share); the ratio is kept, with the
  copies ExLlamaV2's TP does (`physics.host_staged`) priced, which take it from 1.55 to 1.43 of
  the 0.36 measured.

GPT-OSS-120B (a mixture of experts, MXFP4) runs as the dense models do, its experts split by TP
under `-sm tensor` (every GPU holds a slice of each expert) and whole on their layer's GPU under
`-sm layer`; only the experts the tokens choose are read, by llama.cpp's quantised kernels
(`physics.kernels.weight_only_s`: a matrix-vector kernel up to 8 tokens, a token tile of 8-128
above; no 128-row tiles).

Left out, with the reason: llama.cpp's older `-sm row` (it gathers every matrix product's output on
the main GPU and runs the rest there: not TP as modelled here), rows with a filled cache before the
prompt ("pp512 @ d65536": a prompt's attention over an earlier context is not priced here), GLM-4.5-Air
in IQ2_XXS and DeepSeek V4 (no preset, no 2-bit storage), and rows that compare different engines or
give no pair.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources

import numpy as np

from shardwise import presets
from shardwise.analyses.validation import ValidationRow
from shardwise.engines.forward import ForwardStages
from shardwise.engines.iteration import stage_costs
from shardwise.engines.pipeline import pipeline_makespan_s
from shardwise.engines.serving import plan_for_serving, serving_scenario
from shardwise.physics.host_staged import exllamav2_tp_layer_s
from shardwise.specs import Cluster, Scenario
from shardwise.specs.serving import ServingWorkload

CITATION = "public llama.cpp and ExLlamaV2 measurements on PCIe GPUs (GitHub PRs and issues; data/PUBLIC_RUNS.md)"
LEFT_OUT = (
    "left out: llama.cpp -sm row (not TP as modelled), prompts after a filled cache (@ d65536), GLM-4.5-Air IQ2_XXS "
    "and DeepSeek V4 (no preset), rows without a TP/layer pair on one engine; exllamav2#734 reports its TP prefill "
    "as a performance problem"
)
LLAMA_CPP_BATCH = 2048  # llama-bench -b default
LLAMA_CPP_UBATCH = 512  # -ub default
EXLLAMA_CHUNK = 2048


@dataclass(frozen=True)
class Pair:
    """One TP-against-layer-split check: rows picked from the data by source, model and workload."""

    key: str
    source: str  # a substring of the rows' source
    model_text: str  # the rows' model column
    workload: str  # the rows' workload column
    preset_model: str
    gpu: str
    gpus: int
    weights: str  # storage precision
    engine: str  # "llama.cpp" or "exllamav2"
    tokens: int  # prompt tokens (0: token generation)
    context: int = 0  # tokens already in the cache


PAIRS = (
    Pair("llamacpp-19378-pp512", "llama.cpp#19378", "llama 1B F16", "pp512", "llama3.2-1b", "rtx-4090", 4, "bf16",
         "llama.cpp", 512),
    Pair("llamacpp-19378-pp8192", "llama.cpp#19378", "llama 1B F16", "pp8192", "llama3.2-1b", "rtx-4090", 4, "bf16",
         "llama.cpp", 8192),
    Pair("llamacpp-19378-tg128", "llama.cpp#19378", "llama 1B F16", "tg128", "llama3.2-1b", "rtx-4090", 4, "bf16",
         "llama.cpp", 0, 64),
    Pair("llamacpp-19378-gptoss-pp512", "llama.cpp#19378", "gpt-oss 120B MXFP4 MoE", "pp512", "gpt-oss-120b",
         "rtx-4090", 4, "mxfp4", "llama.cpp", 512),
    Pair("llamacpp-19378-gptoss-pp8192", "llama.cpp#19378", "gpt-oss 120B MXFP4 MoE", "pp8192", "gpt-oss-120b",
         "rtx-4090", 4, "mxfp4", "llama.cpp", 8192),
    Pair("llamacpp-19378-gptoss-tg128", "llama.cpp#19378", "gpt-oss 120B MXFP4 MoE", "tg128", "gpt-oss-120b",
         "rtx-4090", 4, "mxfp4", "llama.cpp", 0, 64),
    Pair("exllamav2-734-pp16k", "exllamav2#734", "Llama 3.3 70B", "prompt processing, 16k context", "llama3-70b",
         "rtx-3090", 2, "int4", "exllamav2", 16384),
)  # fmt: skip


@cache
def serving_rows() -> list[dict[str, str]]:
    text = resources.files("shardwise.data").joinpath("public_serving_multi_gpu.csv").read_text(encoding="utf-8")
    return list(csv.DictReader(text.splitlines()))


def _workload(row: dict[str, str]) -> str:
    """The row's workload without its settings ("pp512"; "pp512 @ d65536" keeps its depth)."""
    return row["workload"].split(", batch")[0].strip()


def _measured(pair: Pair) -> tuple[float, float, str]:
    """(TP throughput, layer-split throughput, source) of a pair, from the data."""
    rows = [
        r
        for r in serving_rows()
        if pair.source in r["source"] and r["model"] == pair.model_text and _workload(r) == pair.workload
    ]
    if pair.engine == "exllamav2":  # one row: "1045.8 (no TP) vs 378.87 (TP)"
        (row,) = rows
        layer, tp = (float(part.split()[0]) for part in row["value"].split(" vs "))
        return tp, layer, f"{row['source']}, {row['locator']}"
    by = {r["layout"]: float(r["value"]) for r in rows}
    return by["-sm tensor"], by["-sm layer"], f"{rows[0]['source']}, {rows[0]['locator']}"


def _cluster(pair: Pair) -> Cluster:
    base = presets.system("rtx4090-8x")  # PCIe Gen4, P2P off (the stock driver)
    return base.with_(gpu=presets.gpu(pair.gpu), gpus_per_node=pair.gpus, nodes=1)


def _stages(scn: Scenario, wl: ServingWorkload, decode: int, tokens: int, context: float) -> ForwardStages:
    return stage_costs(scn, wl, np.asarray(decode), np.asarray(tokens), context)


def throughput(pair: Pair, tp: int, pp: int) -> float:
    """Predicted tokens per second of the pair's workload with `tp` x `pp` GPUs (see the module
    docstring for how each engine runs)."""
    model = presets.model(pair.preset_model)
    runtime = "graphs" if pair.tokens == 0 else "cpp-eager"
    n = max(pair.tokens, 1)
    wl = ServingWorkload(n, 1, 1, pair.weights, "bf16", runtime)
    scn = serving_scenario(Scenario(model, _cluster(pair), plan_for_serving(tp, pp)), wl)
    p = float(pp)
    if pair.tokens == 0:  # one token at a time, crossing the stages in turn
        fs = _stages(scn, wl, 1, 0, pair.context)
        c = fs.per_stage
        return 1.0 / float(pipeline_makespan_s(c[0], c[1], c[2], p, 1, 1, fs.middle_sum_s(p)))
    chunk, batch = (LLAMA_CPP_UBATCH, LLAMA_CPP_BATCH) if pair.engine == "llama.cpp" else (EXLLAMA_CHUNK, EXLLAMA_CHUNK)
    chunk, batch = min(chunk, n), min(batch, n)
    fs = _stages(scn, wl, 0, chunk, n)  # a chunk's share of the whole prompt's attention
    if pair.engine == "exllamav2" and tp > 1:  # its host-staged all-gathers, not all-reduces
        staged = model.layers * exllamav2_tp_layer_s(model, chunk, tp, scn.cluster.intra_node_link)
        fs = replace(fs, tp_comm=(staged, 0.0, staged))
    c = fs.per_stage
    micro = batch // chunk  # micro-batches in flight per batch (1: the stages in turn)
    per_batch = float(pipeline_makespan_s(c[0], c[1], c[2], p, micro, 1, fs.middle_sum_s(p)))
    return batch / per_batch


def validate_pcie_serving() -> list[ValidationRow]:
    """One row per pair: TP's throughput over the layer split's, predicted against measured."""
    out = []
    for pair in PAIRS:
        tp_v, layer_v, source = _measured(pair)
        predicted = throughput(pair, pair.gpus, 1) / throughput(pair, 1, pair.gpus)
        label = f"{pair.preset_model} on {pair.gpus} x {pair.gpu}, {pair.engine}, {pair.workload}"
        out.append(ValidationRow(pair.key, "inference_pcie", label, "TP / layer split throughput", predicted,
                                 tp_v / layer_v, source))  # fmt: skip
    return out
