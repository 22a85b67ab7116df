"""Serving a model: prefill and decode, latency and throughput, under TP x PP (x DP replicas).

For `batch` concurrent requests per replica of `input_len` prompt tokens and `output_len` new
tokens, with the batch split into m = min(batch, pp) micro-batches of about batch / m sequences:

- prefill (time to first token): every prompt through the model, c_j the forward of one
  micro-batch of b prompts on stage j (r micro-batches of ceil(batch/m) and m - r of
  floor(batch/m): c_j is their mean) (compute by the roofline, 2 all-reduces of b s h per layer
  under TP, one send per stage boundary): TTFT = m max c_j + sum c_j - max c_j;
- decode (time per output token): one new token per sequence attending to the KV cache (on
  average input_len + output_len / 2 tokens); a token passes every stage in turn (sum_j c_j),
  and the busiest stage handles all m micro-batches: TPOT = max(sum_j c_j, m max_j c_j). With
  one request PP adds hops but no speed-up; with p in flight all stages work;
- end-to-end latency TTFT + (output_len - 1) TPOT; throughput (generated tokens per second, all
  replicas) batch output_len / (TTFT + output_len TPOT), timed on the fullest replica when the
  batch does not divide evenly; per-user tokens/s = 1 / TPOT.

Memory per GPU: weights at their storage precision (embeddings and output layer in 16 bits), the
KV cache of every sequence for the stage's layers (keys and values of the KV heads on this TP
rank), and the runtime reserve. Like TensorRT-LLM (`kv_cache_free_gpu_mem_fraction` = 0.9) 90%
of what is left after the weights (and, for TensorRT-LLM, its engine's activation, runtime and
decoder buffers: `engines.trtllm_buffers`) holds KV cache, which sets the largest batch that fits.

Serving engines capture decode steps in CUDA graphs and call NCCL from C++, so by default
(runtime "graphs") the per-kernel gap is 1 us and a collective's base latency NCCL's own 6.6 us
(src/graph/tuning.cc baseLat, ring, LL protocol: what NCCL picks for decode-sized messages)
instead of training's 3 us and 20 us from PyTorch. Inside an NVLink server NCCL's LL and LL128
protocols (0.6 and 1.9 us per step, `physics.collectives`) price what the engine's own
all-reduce kernel does not take.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from shardwise.engines.dp_attention import dp_attention, launch_tp, serving_expert_layout
from shardwise.engines.dp_dense import group_params_delta, refuse_unsupported
from shardwise.engines.engine_attention import serving_attention
from shardwise.engines.engine_kernels import KERNELS, layer_kernels, norm_fusion_max_bytes
from shardwise.engines.engine_presets import engine, kv_cache_bytes, max_batched_tokens, max_sequences
from shardwise.engines.forward import ForwardStages, forward_stages
from shardwise.engines.llamacpp_prefill import ubatch_prefill
from shardwise.engines.llamacpp_tensor import stage_params_delta, tensor_split_stages
from shardwise.engines.moe import stage_layer_params, stage_params
from shardwise.engines.pipeline import (
    overlapped_host_floor_s,
    pipeline_host_s,
    pipeline_makespan_s,
    pipelined_round_s,
)
from shardwise.engines.trtllm_buffers import bench_engine_settings, engine_buffers_bytes
from shardwise.physics.custom_allreduce import is_nvlink_class, trtllm_nccl_from_bytes
from shardwise.physics.flops import kv_cache_elements_per_token, kv_cache_tokens
from shardwise.physics.memory import RUNTIME_RESERVED_BYTES
from shardwise.physics.moe_dispatch import gathered_buffers_bytes
from shardwise.physics.pcie import group_link, p2p_reach
from shardwise.specs import Cluster, Plan, Scenario
from shardwise.specs._checks import Number, SpecError
from shardwise.specs.serving import STORAGE_BYTES, ServingWorkload, check_serving_inputs
from shardwise.specs.stages import plan_split

# The embedding, position table, final norm and output layer stay in 16 bits when the layers are
# quantised (TensorRT-LLM and vLLM leave lm_head alone; see `engines.forward`).
UNQUANTISED_BYTES_PER_PARAM = 2.0
# Share of the memory left after the weights that holds KV cache: TensorRT-LLM's
# `KvCacheConfig.free_gpu_memory_fraction` default, 90% (tensorrt_llm/llmapi/llm_args.py).
KV_CACHE_FRACTION = 0.9
# Bytes per weight (and KV element) trtllm-bench's sizing assumes (tensorrt_llm/bench/build/tuning.py
# BYTES_PER_ELEM: FP8 1, NVFP4 0.5, anything else 2).
BENCH_WEIGHT_BYTES = {"fp8": 1.0, "nvfp4": 0.5}
# Serving runtimes: (gap per kernel, base latency per collective). With CUDA graphs (TensorRT-LLM,
# vLLM) kernels run back to back and NCCL is called from C++ (NCCL's own baseLat, 6.6 us for the
# ring LL protocol in NVIDIA/nccl src/graph/tuning.cc); an eager
# C++ runtime (FasterTransformer) launches each kernel from the CPU; an eager PyTorch loop also
# pays Python's launch cost per collective. The gaps' sources: docs/serving.md "Kernel gaps".
# In a CUDA graph: a small memory-bound kernel's time beyond its bytes (the model's element-wise
# kernels have no fixed time of their own), 0.9-1.3 us measured (pytorch/pytorch#161104: x + y
# replayed 2,000 times in one graph; CUDA.jl's "Graphs" docs), of which the GPU idles 0.5-0.6 us
# between dependent kernels (NVIDIA's "Getting Started with CUDA Graphs", V100; ocannl#488).
GRAPH_KERNEL_GAP_S = 1.0e-6
# What launching each kernel from a host that runs ahead adds on the GPU (a GPU-bound C++ loop):
# 0.4 us on V100 (the blog above: 3.8 against 3.4 us a kernel); 0.43-0.90 us a kernel in
# llama.cpp's switch to graphs for one token (issue 6763, PR 6766: RTX 4090 0.43 and 0.48, RTX
# 3090 0.83, H100 PCIe 0.90), lower bounds as that graph was captured again every token. The
# Hopper figure, 0.9 us.
EAGER_LAUNCH_EXTRA_S = 0.9e-6
# An eager C++ stream whose host runs ahead (FasterTransformer; llama.cpp without graphs): 1.9 us.
CPP_EAGER_KERNEL_GAP_S = GRAPH_KERNEL_GAP_S + EAGER_LAUNCH_EXTRA_S
# An eager PyTorch loop: the GPU presets' `kernel_launch_s` (presets/gpus.yaml), kept, unsourced as
# a gap: at small batches such a loop is host-bound (5-20 us of host time per op), a step then
# max(GPU time, ops x host time), which no serving runtime prices (docs/serving.md).
PYTORCH_EAGER_KERNEL_GAP_S = 3e-6
# NCCL baseLat, ring algorithm, LL protocol (src/graph/tuning.cc; the same in NCCL 2.18 and 2.30.7).
NCCL_RING_LL_BASE_LATENCY_S = 6.6e-6
# A collective called from PyTorch: the link presets' `base_latency` (presets/links.yaml), fitted
# to measured small all-reduces (tests/test_collectives.py).
PYTORCH_COLLECTIVE_BASE_LATENCY_S = 20e-6
RUNTIMES = {
    "graphs": (GRAPH_KERNEL_GAP_S, NCCL_RING_LL_BASE_LATENCY_S),
    "cpp-eager": (CPP_EAGER_KERNEL_GAP_S, NCCL_RING_LL_BASE_LATENCY_S),
    "pytorch-eager": (PYTORCH_EAGER_KERNEL_GAP_S, PYTORCH_COLLECTIVE_BASE_LATENCY_S),
}


@dataclass(frozen=True)
class ServingEstimate:
    scenario: Scenario
    workload: ServingWorkload
    ttft_s: Number
    tpot_s: Number
    e2e_s: Number
    throughput_tokens_per_s: Number  # generated tokens per second, all replicas
    max_batch: Number  # concurrent sequences per replica that fit the KV cache
    weights_bytes: Number
    kv_cache_bytes: Number
    prefill_s: dict[str, Number]
    decode_s: dict[str, Number]
    decode_utilization: Number  # mean share of a decode step each stage is busy
    batching: str = "static"  # one batch prefilled, then decoded ("inflight": engines.inflight)

    @property
    def per_user_tokens_per_s(self) -> Number:
        return 1.0 / self.tpot_s

    @property
    def total_bytes(self) -> Number:
        return self.weights_bytes + self.kv_cache_bytes + RUNTIME_RESERVED_BYTES

    @property
    def fits_in_memory(self) -> Number:
        """The fullest replica's sequences fit the KV cache (and the weights fit at all)."""
        replicas = np.asarray(self.scenario.plan.dp)
        return (np.ceil(np.asarray(self.workload.batch) / replicas) <= self.max_batch) & (self.max_batch >= 1)


def compute_precision(scn: Scenario, weight_precision: str) -> str:
    """FP8 weights run FP8 GEMMs where the GPU has them, FP4 weights (NVFP4, MXFP4) FP4 GEMMs on
    the activations quantised to NVFP4 where it has FP4 tensor cores (Blackwell); anywhere else,
    and for int8/int4, dequantised and multiplied in 16 bits (weight-only; fp16 without BF16, `Gpu.bf16`)."""
    gpu = scn.cluster.gpu
    if weight_precision == "fp8" and bool(np.all(np.asarray(gpu.peak_flops_per_s_fp8) > 0)):
        return "fp8"
    if weight_precision in ("nvfp4", "mxfp4") and bool(np.all(np.asarray(gpu.peak_flops_per_s_fp4) > 0)):
        return "fp4"
    return gpu.sixteen_bit


def serving_scenario(scn: Scenario, wl: ServingWorkload) -> Scenario:
    """The serving stack's hardware view (CUDA graphs, NCCL from C++, the engine's own all-reduce
    kernel) and precision."""
    if scn.model.is_hybrid:  # decode is a state update per Mamba-2 layer, not a KV-cache read: not built yet
        raise SpecError(f"model {scn.model.name!r}: serving a hybrid Mamba-2 model is not priced yet (training is)")
    cluster = scn.cluster
    gap, base = RUNTIMES[wl.runtime]
    quantised = wl.weight_precision not in ("bf16", "fp16")
    inter = cluster.inter_node_link
    # the experts over the TP GPUs, or over all GPUs with data-parallel attention (`engines.dp_attention`)
    plan = serving_expert_layout(scn.plan)
    cluster = cluster.with_(
        custom_all_reduce=wl.custom_all_reduce,
        # the engine's matrix-vector kernels for products of few rows, its MMQ tiles for experts (`LayerKernels`)
        gpu=cluster.gpu.with_(kernel_launch_s=gap, **KERNELS[wl.engine].gpu_fields(quantised)),
        intra_node_link=cluster.intra_node_link.with_(base_latency_s=base),
        inter_node_link=None if inter is None else inter.with_(base_latency_s=base),
    )
    p2p = p2p_reach(cluster.pcie, cluster.p2p, np.minimum(plan.tp, cluster.gpus_per_node))  # the TP group's
    cluster = on_pcie_topology(cluster, plan)
    # TensorRT-LLM's own all-reduce kernel up to the size its price switches to NCCL (`physics.custom_allreduce`)
    own = cluster.custom_all_reduce == "trtllm" and is_nvlink_class(cluster.intra_node_link)
    trtllm_max = trtllm_nccl_from_bytes(plan.tp, bool(np.all(np.asarray(cluster.gpu.peak_flops_per_s_fp4) > 0)))
    fusion = norm_fusion_max_bytes(
        wl.engine, plan.tp, scn.model.hidden, cluster.gpu.gemm_kernels, p2p, trtllm_max * own
    )
    plan = plan.with_(
        # the engine's kernels per dense layer, its fused adds, its all-reduce's norms (`engines.engine_kernels`)
        serving_layer_kernels=layer_kernels(wl.engine, quantised),
        fused_residual_norms=KERNELS[wl.engine].fused_residual_norms,
        norm_fusion_max_bytes=fusion,
        moe_dispatcher=engine(wl.engine).moe_dispatcher,  # read with data-parallel attention alone
        precision=compute_precision(scn, wl.weight_precision),
        **serving_attention(wl.engine, cluster.gpu, wl.attention_kernel),  # its kernel (`engines.engine_attention`)
        recompute="none",
        schedule="1f1b",
        vpp=1,
    )
    refuse_unsupported(scn.model, plan)  # SGLang's Mixtral / Grok have no data-parallel attention
    return replace(scn, cluster=cluster, plan=plan)


def on_pcie_topology(cluster: Cluster, plan: Plan) -> Cluster:
    """A PCIe server with switches and sockets (`Cluster.pcie`): the server's link as the plan's
    widest group inside it sees it (`physics.pcie.group_link`): the TP group, else the replica's
    pipeline (its sends cross the same hops), or the expert group where it is wider. The link
    then already includes any staging through host memory, so the cluster is marked P2P for
    NCCL's sake, an engine's own all-reduce kept only where the GPUs have P2P; the topology dropped."""
    top = cluster.pcie
    if top is None:
        return cluster
    tp, pp = np.asarray(plan.tp), np.asarray(plan.pp)
    group = np.where(tp > 1, tp, tp * pp)
    group = np.maximum(group, np.asarray(plan.ep) * np.asarray(plan.expert_tp))
    group = np.minimum(group, cluster.gpus_per_node)
    link = group_link(top, cluster.intra_node_link, cluster.p2p, group)
    kernel = cluster.custom_all_reduce if cluster.p2p else "none"
    return cluster.with_(intra_node_link=link, p2p=True, custom_all_reduce=kernel, pcie=None)


def kv_cache_free_bytes(
    scn: Scenario, wl: ServingWorkload, weights_bytes: Number, budget_tokens: float | None = None
) -> Number:
    """Bytes of KV cache on one GPU under the engine's memory rule (`engines.engine_presets`), less
    TensorRT-LLM's activation, runtime and decoder buffers (`engines.trtllm_buffers`) and, under
    data-parallel attention, vLLM's gathered expert buffers at its token budget `budget_tokens`
    (default the engine's on this GPU; `physics.moe_dispatch.gathered_buffers_bytes`); SGLang's
    reserve grows with its --dp there instead, and with `budget_tokens`, its chunk (`engine_presets`)."""
    plan, memory, preset = scn.plan, scn.cluster.gpu.memory_bytes, engine(wl.engine)
    buffers = 0.0
    if preset.bench_buffers:
        w, kv = BENCH_WEIGHT_BYTES.get(wl.weight_precision, 2.0), BENCH_WEIGHT_BYTES.get(wl.kv_precision, 2.0)
        buffers = engine_buffers_bytes(
            scn.model, plan.tp, plan.pp, wl.input_len, wl.output_len, memory, w, kv, launch_tp(plan)
        )
    on = dp_attention(plan) if scn.model.is_moe else False
    if preset.moe_dispatcher == "allgather" and np.any(on):
        budget = budget_tokens
        if budget is None:
            budget = max_batched_tokens(wl.engine, float(np.max(memory)), scn.cluster.gpu.name)
        # with attention tp > 1 vLLM's sequence-parallel MoE chunks each rank's tokens by tp first
        # (`sequence_parallel_chunk`), so the group gathers dp x T tokens, not tp x dp x T
        group = np.asarray(plan.ep) * np.asarray(plan.expert_tp) / np.asarray(plan.tp)
        buffers = buffers + np.where(on, gathered_buffers_bytes(scn.model, budget, group), 0.0)
    attention_dp = np.where(on, plan.dp, 1)
    return kv_cache_bytes(wl.engine, memory, weights_bytes, plan.tp, plan.pp, buffers, attention_dp, budget_tokens)


def max_sequences_per_replica(scn: Scenario, wl: ServingWorkload) -> int:
    """The engine's cap on sequences in flight in one replica: TensorRT-LLM's `max_batch_size` as
    trtllm-bench sets it for the workload's lengths (`engines.trtllm_buffers.bench_engine_settings`,
    the same setting its buffers are sized by), the other engines' defaults
    (`engines.engine_presets.max_sequences`); times pp where each micro-batch has its own slots."""
    preset, plan, gpu = engine(wl.engine), scn.plan, scn.cluster.gpu
    pp = int(np.max(plan.pp))
    if preset.bench_buffers:
        w, kv = BENCH_WEIGHT_BYTES.get(wl.weight_precision, 2.0), BENCH_WEIGHT_BYTES.get(wl.kv_precision, 2.0)
        batch, _ = bench_engine_settings(  # at the launch's tp (attention DP: ep x etp), as trtllm-bench
            scn.model, launch_tp(plan), plan.pp, wl.input_len, wl.output_len, gpu.memory_bytes, w, kv
        )
        cap = int(np.min(batch))
    else:
        cap = max_sequences(wl.engine, float(np.max(gpu.memory_bytes)), gpu.name, int(np.max(wl.batch)))
    return cap * (pp if preset.slots_per_micro_batch else 1)


def with_stage_overhead(fs: ForwardStages, pp: Number, wl: ServingWorkload) -> ForwardStages:
    """Each stage's micro-batch with the activations the engine sends per boundary
    (`EnginePreset.pp_send_tensors`) and its per-stage cost (`EnginePreset.stage_overhead_s`,
    llama.cpp's host time per micro-batch and stage), counted with the send; none without
    pipelining."""
    preset = engine(wl.engine)
    if not preset.stage_overhead_s and preset.pp_send_tensors == 1:
        return fs
    over = np.where(np.asarray(pp) > 1, preset.stage_overhead_s, 0.0)
    return replace(fs, send_s=fs.send_s * preset.pp_send_tensors + over)


def _micro_batches(scn: Scenario, per_replica: Number) -> tuple[np.ndarray, np.ndarray, Scenario, Scenario]:
    """m = min(batch, pp) micro-batches: r of ceil(batch / m) sequences and m - r of floor(batch / m)
    (engines split a batch unevenly rather than pad it). Returns (m, r, scenario at floor, at ceil)."""
    p = np.asarray(scn.plan.pp)
    m = np.minimum(per_replica, p)
    lo = per_replica // m
    r = per_replica - m * lo
    hi = lo + (r > 0)

    def at(b: np.ndarray) -> Scenario:
        return replace(scn, plan=scn.plan.with_(micro_batch=b, global_batch=np.asarray(scn.plan.dp) * b * m))

    return m, r, at(lo), at(hi)


def _mix(lo: Number, hi: Number, r: Number, m: Number) -> Number:
    """Mean per-micro-batch cost when r of the m micro-batches are the larger ones."""
    return (r * hi + (m - r) * lo) / m


def memory_per_gpu(scn: Scenario, wl: ServingWorkload) -> tuple[Number, Number]:
    """(weight bytes, KV-cache bytes per sequence) on the GPU that runs out of memory first: of the
    first, the fullest middle and the last stage, the one whose free memory holds the fewest
    sequences. Transformer layers are stored at the weight precision; the embedding, position
    table, final norm and output layer in 16 bits; each stage keeps the KV cache of its layers.
    llama.cpp: the input embedding in host memory, the output layer as it places it
    (`engines.llamacpp_tensor.stage_params_delta`)."""
    model, plan = scn.model, scn.plan
    split = plan_split(model.layers, plan)
    params = stage_params(model, plan, split)
    if engine(wl.engine).ends_placement == "llama.cpp":  # input embedding in host memory, the output as it splits it
        params = tuple(q + d for q, d in zip(params, stage_params_delta(model, plan.tp, plan.pp), strict=True))
    in_layers = stage_layer_params(model, plan, split)
    # SGLang under data-parallel attention: dense MLPs, shared experts and lm_head over tp x dp (`engines.dp_dense`)
    layers_delta, params_delta = group_params_delta(model, plan, split)
    in_layers = tuple(n + d for n, d in zip(in_layers, layers_delta, strict=True))
    params = tuple(q + d for q, d in zip(params, params_delta, strict=True))
    p = np.asarray(plan.pp)
    layers = (split.first, np.where(p > 2, split.middle_max, split.first), split.last)
    context = wl.input_len + wl.output_len
    tokens = kv_cache_tokens(model, context)  # a sliding window keeps its last w tokens
    kv_per_layer = tokens * kv_cache_elements_per_token(model, plan.tp) * STORAGE_BYTES[wl.kv_precision]
    kv_per_layer = kv_per_layer / np.asarray(plan.cp)  # context parallelism: each rank keeps 1/cp of it
    weights = [
        n * STORAGE_BYTES[wl.weight_precision] + (q - n) * UNQUANTISED_BYTES_PER_PARAM
        for n, q in zip(in_layers, params, strict=True)
    ]
    kv = [n * kv_per_layer for n in layers]
    room = [(np.asarray(scn.cluster.gpu.memory_bytes) - w) / k for w, k in zip(weights, kv, strict=True)]
    pick = np.where(room[0] <= np.minimum(room[1], room[2]), 0, np.where(room[2] <= room[1], 2, 1))
    return np.choose(pick, weights), np.choose(pick, kv)


def estimate_serving(scn: Scenario, wl: ServingWorkload) -> ServingEstimate:
    """Latency, throughput and memory of serving `wl` on `scn` (see the module docstring)."""
    check_serving_inputs(scn, wl)
    scn = serving_scenario(scn, wl)
    p = np.asarray(scn.plan.pp, dtype=float)
    replicas = np.asarray(scn.plan.dp)
    per_replica = np.maximum(1, np.ceil(np.asarray(wl.batch) / replicas)).astype(int)
    m, r, scn_lo, scn_hi = _micro_batches(scn, per_replica)
    w, kv = STORAGE_BYTES[wl.weight_precision], STORAGE_BYTES[wl.kv_precision]
    preset = engine(wl.engine)

    def phase(q_len: Number, kv_len: Number) -> tuple[tuple[Number, ...], Number, Number, Number, Number]:
        """Mean per-micro-batch cost of each stage (first, middle, last, all middle ones together),
        the slowest stage's cost and its compute and TP parts, and the send (with the engine's
        per-stage cost)."""
        lo = with_stage_overhead(forward_stages(scn_lo, q_len, kv_len, False, w, kv), p, wl)
        hi = with_stage_overhead(forward_stages(scn_hi, q_len, kv_len, False, w, kv), p, wl)
        if preset.tensor_split == "llama.cpp" and np.any(np.asarray(scn.plan.tp) > 1):  # `-sm tensor`
            lo, hi = (
                tensor_split_stages(f, s, np.asarray(s.plan.micro_batch) * q_len, s.plan.micro_batch)
                for f, s in ((lo, scn_lo), (hi, scn_hi))
            )
        per_stage = tuple(_mix(a, b, r, m) for a, b in zip(lo.per_stage, hi.per_stage, strict=True))
        per_stage = (*per_stage, _mix(lo.middle_sum_s(p), hi.middle_sum_s(p), r, m))
        slow = tuple(_mix(a, b, r, m) for a, b in zip(lo.slowest(p), hi.slowest(p), strict=True))
        return per_stage, slow[0], slow[1], slow[2], _mix(lo.send_s, hi.send_s, r, m)

    # the host time of each micro-batch's step under pp (`engines.pipeline.pipelined_round_s`)
    host = np.where(p > 1, pipeline_host_s(preset, np.ceil(per_replica / m)), 0.0)
    c, c_max, compute, tp, send = phase(wl.input_len, wl.input_len)
    ttft = pipeline_makespan_s(c[0], c[1], c[2], p, m, 1, c[3]) + host  # the first micro-batch's step
    # pp_wait: the first micro-batch's host step under pp
    prefill = {"compute": m * compute, "tp_comm": m * tp, "pp_p2p": m * send, "pp_wait": host}
    prefill["pp_bubble"] = ttft - host - m * c_max
    if preset.ubatch_tokens:  # llama.cpp: the batch's prompts in n_ubatch micro-batches
        ttft, prefill = ubatch_prefill(scn, wl, per_replica)

    # a decode step: each stage handles every micro-batch once, and each micro-batch crosses
    # every stage: TPOT = max(sum_j c_j, m max_j c_j)
    context = wl.input_len + wl.output_len / 2
    d, d_max, d_compute, d_tp, d_send = phase(1, context)
    through = pipeline_makespan_s(d[0], d[1], d[2], p, 1, 1, d[3])  # one micro-batch crossing every stage
    gpu_bound = np.maximum(through, m * d_max)
    tpot = np.maximum(gpu_bound, pipelined_round_s(d_max, d[2], through, m, host, preset.sync_last_stage))
    # one stage: at least the host step (`engines.pipeline.overlapped_host_floor_s`)
    tpot = np.where(p > 1, tpot, overlapped_host_floor_s(tpot, preset, per_replica))
    share = gpu_bound / d_max  # the GPU's part in units of the slowest stage's micro-batch
    # the sends apart from what the step waits beyond the GPU's work (the host steps under pp)
    decode = {
        "compute": share * d_compute,
        "tp_comm": share * d_tp,
        "pp_p2p": share * d_send,
        "pp_wait": tpot - gpu_bound,
    }

    e2e = ttft + (wl.output_len - 1) * tpot
    throughput = np.asarray(wl.batch) * wl.output_len / (ttft + wl.output_len * tpot)
    weights, kv_per_seq = memory_per_gpu(scn, wl)
    max_batch = np.floor(kv_cache_free_bytes(scn, wl, weights) / kv_per_seq)
    return ServingEstimate(
        scenario=scn,
        workload=wl,
        ttft_s=ttft,
        tpot_s=tpot,
        e2e_s=e2e,
        throughput_tokens_per_s=throughput,
        max_batch=max_batch,
        weights_bytes=weights,
        kv_cache_bytes=per_replica * kv_per_seq,
        prefill_s=prefill,
        decode_s=decode,
        decode_utilization=m * (through / p) / tpot,  # m micro-batches at the mean stage cost
    )


def plan_for_serving(tp: Number, pp: Number, dp: Number = 1) -> Plan:
    """A Plan to serve with (batch sizes are set per workload)."""
    return Plan(tp=tp, pp=pp, dp=dp, global_batch=dp, micro_batch=1)
