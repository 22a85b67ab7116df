"""Tensor parallelism against a layer (pipeline) split on PCIe GPUs, from public measurements of
llama.cpp and ExLlamaV2 (`data/public_serving_multi_gpu.csv`, every row with its source).

Absolute numbers depend on each engine's kernels; the question of the articles is the ratio:
how much faster (or slower) TP is than splitting the layers on the same GPUs. So each check is a
pair of rows, TP and layer split, same engine, model, GPUs and workload, compared as the ratio of
their throughputs, predicted against measured. Engines are modelled as they run:

- llama.cpp `-sm layer`: each GPU holds a run of layers; a prompt of N tokens is processed in
  micro-batches of 512 tokens (`-ub`), which cross the GPUs as llama.cpp's scheduler lets them
  (`engines.llamacpp`): a 2026 build's host waits for each GPU before it launches the next one's
  part ("host": a 512-token prompt crosses the GPUs in turn, a long one gains at most p / (p - 1)),
  a 2024 build queues up to 4 micro-batches on the GPUs' streams ("events": a pipeline, PR 6017's
  8 x A100 checked as PP(8) / PP(1), `LAYER_SCALING`); token generation (tg128, batch 1) crosses
  the GPUs in turn.
- llama.cpp `-sm row` (PR 7716's 2 x RTX 4090 against `-sm layer`, prompts in micro-batches of
  32 and 64 tokens): every weight matrix split by rows, its input copied from the main GPU to the
  others and their rows back for each product, everything else on the main GPU
  (`engines.llamacpp.row_split_terms`);
- llama.cpp `-sm tensor` (PR 19378): Megatron-style TP with two all-reduces per layer by NCCL
  (`ggml-cuda.cu`'s comm backend, NCCL by default on Linux; FP32 below 262,144 elements for 4
  GPUs, above BF16 with a conversion kernel each way), none after the embedding, which every GPU
  holds whole, as it does a tied output layer (Llama 3.2 1B's), run whole on every GPU
  (`engines.llamacpp_tensor`); on the GPUs' PCIe links without P2P (GeForce cards on the stock
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
- llama.cpp `-sm layer` over k PCIe GPUs against fewer (`LAYER_SCALING`): PR 6017's 8 x A100 PCIe
  against one, and XiongjieDai/GPU-Benchmarks-on-LLM-Inference's llama-bench tables (May 2024, one
  RunPod box per GPU type: RTX 4090 at 1, 2, 4 and 8 GPUs, A100 PCIe, H100 PCIe and L40S at 1 and
  4, RTX 3090 at 2 and 4), Llama 3 8B in F16 and Q4_K_M and 70B in Q4_K_M (not on one 24 GB GPU),
  prompts of 512 and 1,024 tokens and 1,024 generated tokens, each priced by the same scheduler as
  PR 6017, the layers placed as llama.cpp places them (`llama_cpp_plan`). Not priced: 70B Q4_K_M's
  1,024-token prompt at 2 and 4 GPUs gains almost nothing from its second micro-batch on every box
  (pp1024 / pp512 1.07-1.27 measured, 1.33 and 1.6 priced), where 70B F16 at 4 GPUs (1.42-1.48),
  8B at 4 GPUs (1.24-1.47) and 70B Q4_K_M at 8 (1.64) do gain: the CUDA launch queue filling
  (`engines.llamacpp.queued_makespan_s`) reproduces the pattern, its threshold within its sources'
  uncertainty (docs/validation.md "llama.cpp 70B Q4_K_M").

GPT-OSS-120B (a mixture of experts, MXFP4) runs as the dense models do, its experts split by TP
under `-sm tensor` (every GPU holds a slice of each expert) and whole on their layer's GPU under
`-sm layer`; only the experts the tokens choose are read, by llama.cpp's quantised kernels: a
matrix-vector kernel up to 8 tokens, above `mul_mat_q` with ids (`physics.mmq_ids`: a token tile
sized from the micro-batch, 128 for 512 tokens, INT8 MMAs after each tile's load).

Left out, with the reason: rows with a filled cache before the prompt ("pp512 @ d65536": a
prompt's attention over an earlier context is not priced here), GLM-4.5-Air in IQ2_XXS and DeepSeek
V4 (no preset, no 2-bit storage), PR 7716's Q4_1 rows (no Q4_1 storage) and its master rows (the
kernels the PR replaced), PR 20793's MI50 rows (no preset; read as evidence in
`engines.llamacpp`), and rows that compare different engines or give no pair.
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
from shardwise.engines.llamacpp import (
    SCHEDULER_BY_YEAR,
    generation_runtime,
    layer_split_counts,
    layer_split_prompt_s,
    prompt_layer_ops,
    row_split_terms,
)
from shardwise.engines.llamacpp_tensor import tensor_split_stages
from shardwise.engines.pipeline import pipeline_makespan_s
from shardwise.engines.serving import compute_precision, plan_for_serving, serving_scenario
from shardwise.physics.host_staged import exllamav2_tp_layer_s
from shardwise.specs import Cluster, Model, Plan, Scenario
from shardwise.specs.serving import ServingWorkload

CITATION = "public llama.cpp and ExLlamaV2 measurements on PCIe GPUs (GitHub PRs and issues; data/PUBLIC_RUNS.md)"
LEFT_OUT = (
    "left out: prompts after a filled cache (@ d65536), GLM-4.5-Air IQ2_XXS and DeepSeek V4 (no preset), "
    "llama.cpp#7716's Q4_1 and master rows, #20793's MI50 rows (no preset), rows without a pair on one engine, "
    "the XiongjieDai L40S box's F16 prompts (pp1024 2,492 and 2,542 tokens/s at 1 and 4 GPUs: 40 TFLOPS, 0.42 and "
    "0.28 of the same box's Q4_K_M rate, pp512 0.37 and 0.36; a kernel path on that box, not the split; its "
    "Q4_K_M prompts are priced); "
    "exllamav2#734 reports its TP prefill as a performance problem"
)
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
    ubatch: int = 512  # llama.cpp's -ub (llama-bench's default)
    year: int = 2026  # the build's year: which scheduler llama.cpp ran (`engines.llamacpp.SCHEDULER_BY_YEAR`)
    split: str = "-sm tensor"  # the TP side of the pair: "-sm tensor" (Megatron-style) or "-sm row"
    group: str = ""  # the rows' comparison_group, where source, model and workload leave several
    system: str = "rtx4090-8x"  # the server preset (its GPU replaced by `gpu`, cut to `gpus`)
    # the run's weights tie the output layer to the embedding where the preset does not (its GGUF has
    # no output.weight: Llama 3.2 1B, tie_word_embeddings true; the preset prices it untied)
    tied_embeddings: bool = False
    base_gpus: int = 1  # a layer split's reference GPU count (`LAYER_SCALING`: k GPUs against base_gpus)
    link: str = ""  # the host CPU's PCIe link, capping host-staged copies below the preset's (`XDAI_BOXES`)


PAIRS = (
    Pair("llamacpp-19378-pp512", "llama.cpp#19378", "llama 1B F16", "pp512", "llama3.2-1b", "rtx-4090", 4, "bf16",
         "llama.cpp", 512, tied_embeddings=True),
    Pair("llamacpp-19378-pp8192", "llama.cpp#19378", "llama 1B F16", "pp8192", "llama3.2-1b", "rtx-4090", 4, "bf16",
         "llama.cpp", 8192, tied_embeddings=True),
    Pair("llamacpp-19378-tg128", "llama.cpp#19378", "llama 1B F16", "tg128", "llama3.2-1b", "rtx-4090", 4, "bf16",
         "llama.cpp", 0, 64, tied_embeddings=True),
    Pair("llamacpp-19378-gptoss-pp512", "llama.cpp#19378", "gpt-oss 120B MXFP4 MoE", "pp512", "gpt-oss-120b",
         "rtx-4090", 4, "mxfp4", "llama.cpp", 512),
    Pair("llamacpp-19378-gptoss-pp8192", "llama.cpp#19378", "gpt-oss 120B MXFP4 MoE", "pp8192", "gpt-oss-120b",
         "rtx-4090", 4, "mxfp4", "llama.cpp", 8192),
    Pair("llamacpp-19378-gptoss-tg128", "llama.cpp#19378", "gpt-oss 120B MXFP4 MoE", "tg128", "gpt-oss-120b",
         "rtx-4090", 4, "mxfp4", "llama.cpp", 0, 64),
    Pair("llamacpp-7716-q4_0-ub32-row", "llama.cpp#7716", "llama 8B", "pp2048, microbatch size 32", "llama3-8b",
         "rtx-4090", 2, "q4_0", "llama.cpp", 2048, 0, 32, 2024, "-sm row", "7716-Q4_0-ub32-PR branch"),
    Pair("llamacpp-7716-q4_0-ub64-row", "llama.cpp#7716", "llama 8B", "pp2048, microbatch size 64", "llama3-8b",
         "rtx-4090", 2, "q4_0", "llama.cpp", 2048, 0, 64, 2024, "-sm row", "7716-Q4_0-ub64-PR branch"),
    Pair("exllamav2-734-pp16k", "exllamav2#734", "Llama 3.3 70B", "prompt processing, 16k context", "llama3-70b",
         "rtx-3090", 2, "int4", "exllamav2", 16384),
)  # fmt: skip


# XiongjieDai/GPU-Benchmarks-on-LLM-Inference (May 2024 builds 2824-2843, the "events" scheduler):
# llama-bench's defaults (-b 2048 -ub 512) on one RunPod box per GPU type, the same host CPU and
# build at every GPU count of a box (its notebooks), Meta Llama 3 GGUFs. A box: (GPU preset, system
# preset, its GPU counts, the link its host CPU's root ports allow: the RTX 4090 box's Xeon Gold 6133
# (Skylake-SP) has PCIe 3.0 lanes only, the H100 box's EPYC 7352 (Rome) PCIe 4.0, below the system
# presets' Gen4 and Gen5; the CPU's datasheet, Intel ARK / AMD's product page). It caps the copies
# because they go through host memory (`HOST_STAGED_SPLITS`): the H100 preset's Gen5 switch and P2P
# are not on their path; the staging's second hop is not priced (docs/validation.md). A model: (model
# preset, storage, the rows' comparison_group part, the GPU counts it does not fit). Every model,
# box and workload is a case: k GPUs against one where the box has a 1-GPU row of the model, else
# against k/2. tg1024 generates 1,024 tokens from an empty cache: priced at its mean context, 512.
# F16 is priced as bf16 (2 bytes, one tensor rate), as PR 19378's. Left out: the L40S box's F16
# prompts (`LEFT_OUT`; stored as data).
XDAI_BOXES = {
    "rtx4090": ("rtx-4090", "rtx4090-8x", (1, 2, 4, 8), "pcie3"),  # Xeon Gold 6133, build 2824, P2P off (GeForce)
    "rtx3090": ("rtx-3090", "rtx4090-8x", (2, 4), ""),  # EPYC 7702P, build 2833; its 1-GPU notebook another box
    "a100pcie": ("a100-pcie-80gb", "a100-pcie-8x", (1, 4), ""),  # EPYC 9554, build 2836
    "h100pcie": ("h100-pcie-80gb", "h100-pcie-8x-switch", (1, 4), "pcie4"),  # EPYC 7352, build 2843
    "l40s": ("l40s", "l40s-8x", (1, 4), ""),  # Xeon Silver 4314, build 2834
}
# The splits whose copies between GPUs go through host memory, where the host CPU's PCIe generation caps
# them: llama.cpp never enables peer access for `-sm layer` (`ggml_cuda_set_peer_access` only for split,
# row, buffers: ggml-cuda.cu at ggerganov/ggml@6d056617), and `cudaMemcpyPeerAsync` between GPUs without
# it is staged through the host (CUDA C++ Programming Guide, "Peer-to-Peer Memory Copy": with peer access
# enabled such a copy "no longer needs to be staged through the host")
HOST_STAGED_SPLITS = ("-sm layer",)
XDAI_MODELS = (
    ("llama3-8b", "bf16", "8b-f16", ()),
    ("llama3-8b", "q4_k", "8b-q4_k_m", ()),
    ("llama3-70b", "q4_k", "70b-q4_k_m", (1,)),  # 39.6 GiB: not run on one 24 GB GeForce (its 80/48 GB boxes did)
)
XDAI_WORKLOADS = (("pp512", 512, 0), ("pp1024", 1024, 0), ("tg1024", 0, 512))  # (workload, prompt, context)
XDAI_LEFT_OUT = ("xdai-l40s-8b-f16-pp512", "xdai-l40s-8b-f16-pp1024")  # data only (`LEFT_OUT`)
XDAI_24GB = ("rtx4090", "rtx3090")


def _xdai_pairs() -> tuple[Pair, ...]:
    """Every XiongjieDai case as a layer-split pair: k GPUs against one GPU of the same box, or
    against k/2 where the box has no 1-GPU row of the model."""
    out = []
    for box, (gpu, system, box_counts, link) in XDAI_BOXES.items():
        for model, storage, short, too_small in XDAI_MODELS:
            counts = [k for k in box_counts if not (box in XDAI_24GB and k in too_small)]
            for workload, tokens, context in XDAI_WORKLOADS:
                group = f"xdai-{box}-{short}-{workload}"
                if group in XDAI_LEFT_OUT:
                    continue
                for k in counts[1:]:
                    base = 1 if counts[0] == 1 else k // 2
                    out.append(Pair(f"{group}-{k}v{base}", "XiongjieDai", "", workload, model, gpu, k, storage,
                                    "llama.cpp", tokens, context, 512, 2024, "-sm layer", group, system,
                                    base_gpus=base, link=link))  # fmt: skip
    return tuple(out)


# A layer split over k GPUs against fewer (PP(k) / PP(base_gpus)), one build's llama-bench tables
# each, `group` the rows' comparison_group: PR 6017's 8 x A100 80GB PCIe against one (March 2024,
# the "events" scheduler), then XiongjieDai's (`_xdai_pairs`).
LAYER_SCALING = (
    Pair("llamacpp-6017-pp1024-pp8", "llama.cpp#6017", "llama 7B F16", "pp1024", "llama2-7b", "a100-pcie-80gb", 8,
         "bf16", "llama.cpp", 1024, 0, 512, 2024, "-sm layer", "6017-a100-llama7b-f16-pp1024", "a100-pcie-8x"),
    Pair("llamacpp-6017-pp2048-pp8", "llama.cpp#6017", "llama 7B F16", "pp2048", "llama2-7b", "a100-pcie-80gb", 8,
         "bf16", "llama.cpp", 2048, 0, 512, 2024, "-sm layer", "6017-a100-llama7b-f16-pp2048", "a100-pcie-8x"),
    *_xdai_pairs(),
)  # fmt: skip


@cache
def serving_rows() -> list[dict[str, str]]:
    text = resources.files("shardwise.data").joinpath("public_serving_multi_gpu.csv").read_text(encoding="utf-8")
    return list(csv.DictReader(text.splitlines()))


def _workload(row: dict[str, str]) -> str:
    """The row's workload without its settings ("pp512"; "pp512 @ d65536" keeps its depth)."""
    return row["workload"].split(", batch")[0].split(", n_batch")[0].strip()


def _measured(pair: Pair) -> tuple[float, float, str]:
    """(TP throughput, layer-split throughput, source) of a pair, from the data."""
    rows = [
        r
        for r in serving_rows()
        if pair.source in r["source"]
        and r["model"] == pair.model_text
        and _workload(r) == pair.workload
        and (not pair.group or r["comparison_group"] == pair.group)
    ]
    if pair.engine == "exllamav2":  # one row: "1045.8 (no TP) vs 378.87 (TP)"
        (row,) = rows
        layer, tp = (float(part.split()[0]) for part in row["value"].split(" vs "))
        return tp, layer, f"{row['source']}, {row['locator']}"
    by = {r["layout"]: float(r["value"]) for r in rows}
    return by[pair.split], by["-sm layer"], f"{rows[0]['source']}, {rows[0]['locator']}"


def pair_model(pair: Pair) -> Model:
    """The pair's model preset, its output layer tied to the embedding where the run's weights tie it."""
    model = presets.model(pair.preset_model)
    return model.with_(tied_embeddings=True) if pair.tied_embeddings else model


def _cluster(pair: Pair) -> Cluster:
    base = presets.system(pair.system)  # rtx4090-8x: PCIe Gen4, P2P off (the stock driver)
    if pair.link and pair.split in HOST_STAGED_SPLITS:  # staged through host: its CPU's PCIe caps them
        base = base.with_(intra_node_link=presets.link(pair.link))
    return base.with_(gpu=presets.gpu(pair.gpu), gpus_per_node=pair.gpus, nodes=1)


def _stages(scn: Scenario, wl: ServingWorkload, decode: int, tokens: int, context: float) -> ForwardStages:
    return stage_costs(scn, wl, np.asarray(decode), np.asarray(tokens), context)


def pair_workload(pair: Pair, pp: int = 1) -> ServingWorkload:
    """The pair's workload: one request of its prompt (one token for generation), eager launches
    for prompts, CUDA graphs for token generation, except a layer split over `pp` GPUs in a build
    without them there (`engines.llamacpp.generation_runtime`)."""
    runtime = "cpp-eager" if pair.tokens else generation_runtime(pair.year, pp)
    # llama.cpp's kernels per layer (`engines.engine_kernels`); ExLlamaV2's are not counted: the shared count
    engine = "llama.cpp" if pair.engine == "llama.cpp" else "pytorch"
    return ServingWorkload(max(pair.tokens, 1), 1, 1, pair.weights, "bf16", runtime, engine=engine)


def pair_chunk(pair: Pair) -> tuple[int, int]:
    """(tokens per micro-batch, micro-batches) of a llama.cpp pair's workload: its prompt in
    micro-batches of `ubatch` tokens; one token for generation."""
    if pair.tokens == 0:
        return 1, 1
    chunk = min(pair.ubatch, pair.tokens)
    return chunk, -(-pair.tokens // chunk)


def llama_cpp_plan(pair: Pair, tp: int, pp: int) -> Plan:
    """The plan of a llama.cpp pair over `tp` x `pp` GPUs: a layer split places its layers as
    llama.cpp does (`engines.llamacpp.layer_split_counts`: Llama 3 70B on 4 GPUs 21, 20, 20, 19)."""
    plan = plan_for_serving(tp, pp)
    if pp == 1:
        return plan
    first, _, last = layer_split_counts(pair_model(pair).layers, pp)
    return plan.with_(first_stage_layers=first, last_stage_layers=last)


def stage_ops(pair: Pair, pp: int) -> tuple[int, int, int]:
    """Stream operations of a prompt micro-batch on the first, a middle and the last GPU of a
    2024 build's layer split (`engines.llamacpp.prompt_layer_ops` a layer)."""
    per_layer = prompt_layer_ops(pair.weights not in ("bf16", "fp16"))
    first, middle, last = layer_split_counts(pair_model(pair).layers, pp)
    return first * per_layer, middle * per_layer, last * per_layer


def llama_cpp_stages(pair: Pair, tp: int, pp: int) -> ForwardStages:
    """One micro-batch's stages of a llama.cpp pair over `tp` x `pp` GPUs: a token of generation,
    or `pair_chunk`'s prompt tokens with their share of the whole prompt's attention; `-sm tensor`
    where tp > 1 (`engines.llamacpp_tensor`), the prompt's last token getting logits once per
    prompt (llama-bench)."""
    wl = pair_workload(pair, pp)
    scn = serving_scenario(Scenario(pair_model(pair), _cluster(pair), llama_cpp_plan(pair, tp, pp)), wl)
    if pair.tokens == 0:
        return tensor_split_stages(_stages(scn, wl, 1, 0, pair.context), scn, 1, 1)
    chunk, micro = pair_chunk(pair)
    return tensor_split_stages(_stages(scn, wl, 0, chunk, pair.tokens), scn, chunk, 1.0 / micro)


def row_split_terms_of(pair: Pair, gpus: int) -> tuple[float, float]:
    """llama.cpp's `-sm row` over `gpus` GPUs (`engines.llamacpp.row_split_terms`): one micro-batch's
    seconds on the main GPU, its forward less the products' share moved to the others, and the
    seconds of their copies."""
    model, wl = pair_model(pair), pair_workload(pair)
    one = serving_scenario(Scenario(model, _cluster(replace(pair, gpus=1)), plan_for_serving(1, 1)), wl)
    chunk, _ = pair_chunk(pair)
    decode, prompt = (1, 0) if pair.tokens == 0 else (0, chunk)
    fs = _stages(one, wl, decode, prompt, pair.context or max(pair.tokens, 1))
    precision = compute_precision(one, pair.weights)
    main, copies = row_split_terms(fs.per_stage[0], model, _cluster(pair), wl, chunk, gpus, precision)
    return float(main), float(copies)


def _one_token_per_s(fs: ForwardStages, p: float) -> float:
    """Tokens per second of one token at a time, crossing the stages in turn."""
    c = fs.per_stage
    return 1.0 / float(pipeline_makespan_s(c[0], c[1], c[2], p, 1, 1, fs.middle_sum_s(p)))


def throughput(pair: Pair, tp: int, pp: int, row: bool = False) -> float:
    """Predicted tokens per second of the pair's workload with `tp` x `pp` GPUs (see the module
    docstring for how each engine runs); `row`: llama.cpp's `-sm row` over `tp` GPUs, its
    micro-batches one after the other (one main GPU)."""
    if row:
        return pair_chunk(pair)[0] / sum(row_split_terms_of(pair, tp))
    p = float(pp)
    if pair.engine == "llama.cpp":
        fs = llama_cpp_stages(pair, tp, pp)
        if pair.tokens == 0:
            return _one_token_per_s(fs, p)
        # n_ubatch micro-batches, as llama.cpp's scheduler runs them
        _, micro = pair_chunk(pair)
        scheduler = SCHEDULER_BY_YEAR[pair.year]
        # the launch queue (`engines.llamacpp.queued_makespan_s`, `stage_ops`) is not priced here: with its
        # sourced numbers (1,024 operations, 50 a Q4_K layer) only 70B's first GPU on 4 overflows it,
        # where the tables need every GPU to (docs/validation.md "llama.cpp 70B Q4_K_M")
        return pair.tokens / float(layer_split_prompt_s(fs.per_stage, fs.middle_sum_s(p), p, micro, scheduler))
    model, wl = pair_model(pair), pair_workload(pair)
    scn = serving_scenario(Scenario(model, _cluster(pair), plan_for_serving(tp, pp)), wl)
    if pair.tokens == 0:
        return _one_token_per_s(_stages(scn, wl, 1, 0, pair.context), p)
    n = pair.tokens
    chunk = min(EXLLAMA_CHUNK, n)
    fs = _stages(scn, wl, 0, chunk, n)
    if tp > 1:  # ExLlamaV2's host-staged all-gathers, not all-reduces
        staged = model.layers * exllamav2_tp_layer_s(model, chunk, tp, scn.cluster.intra_node_link)
        fs = replace(fs, tp_comm=(staged, 0.0, staged))
    c = fs.per_stage
    return chunk / float(pipeline_makespan_s(c[0], c[1], c[2], p, 1, 1, fs.middle_sum_s(p)))


def validate_pcie_serving() -> list[ValidationRow]:
    """One row per pair: TP's throughput over the layer split's, predicted against measured."""
    out = []
    for pair in PAIRS:
        tp_v, layer_v, source = _measured(pair)
        row = pair.split == "-sm row"
        predicted = throughput(pair, pair.gpus, 1, row) / throughput(pair, 1, pair.gpus)
        label = f"{pair.preset_model} on {pair.gpus} x {pair.gpu}, {pair.engine}, {pair.workload}"
        metric = f"{'row' if row else 'TP'} / layer split throughput"
        out.append(ValidationRow(pair.key, "inference_pcie", label, metric, predicted, tp_v / layer_v, source))
    return out + validate_layer_scaling()


def validate_layer_scaling() -> list[ValidationRow]:
    """One row per `LAYER_SCALING` pair: the layer split over k GPUs against `base_gpus` (one GPU,
    or a layer split over k/2)."""
    out = []
    for pair in LAYER_SCALING:
        rows = [r for r in serving_rows() if r["comparison_group"] == pair.group]
        by = {int(r["num_gpus"]): float(r["value"]) for r in rows}
        base = pair.base_gpus
        predicted = throughput(pair, 1, pair.gpus) / throughput(replace(pair, gpus=base), 1, base)
        what = f"{pair.preset_model} ({pair.weights})"
        label = f"{what} on {pair.gpus} x {pair.gpu} against {base}, llama.cpp, {pair.workload}"
        against = "one GPU" if base == 1 else f"{base} GPUs"
        metric = f"layer split ({pair.gpus} GPUs) / {against} throughput"
        source = f"{rows[0]['source']}, {rows[0]['locator']}"
        measured = by[pair.gpus] / by[base]
        out.append(ValidationRow(pair.key, "inference_pcie", label, metric, predicted, measured, source))
    return out
