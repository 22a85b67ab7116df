"""llama.cpp's two older multi-GPU split modes as its source runs them (ggml-org/llama.cpp, read in
2026: `ggml/src/ggml-backend.cpp`, `ggml/src/ggml-cuda/ggml-cuda.cu`, `src/llama-context.cpp`,
`tools/llama-bench/llama-bench.cpp`). `-sm tensor` (PR 19378) is Megatron-style TP, priced as TP
(`engines.serving`) with what llama.cpp's meta backend does differently (`engines.llamacpp_tensor`).

Layer split (`-sm layer`, the default). Each GPU holds a run of layers; `llama_decode` cuts its
batch (n_batch, 2048) into micro-batches of n_ubatch (512) tokens and runs one graph per
micro-batch (`llama_context::decode`, `process_ubatch`), which `ggml_backend_sched` cuts into one
split per GPU. One host thread walks the splits in order (`ggml_backend_sched_compute_splits`):
for each split it copies the split's inputs from the previous GPU, then launches the split's
graph. With every layer on the GPUs (`pipeline_parallel` in the `llama_context` constructor:
n_gpu_layers > n_layer, split mode layer, KV cache offloaded, no tensor overrides, devices with
async compute and events) the scheduler keeps `GGML_SCHED_MAX_COPIES` = 4 copies of every split
input and guards each with an event, so whether micro-batches overlap across GPUs depends on
whether that copy makes the host wait:

- "events": the copy is queued on the source GPU's stream (`ggml_backend_cuda_cpy_tensor_async`:
  `cudaMemcpyPeerAsync` on the source stream, an event the destination stream waits on), the host
  goes straight on, so up to 4 micro-batches are in flight and the GPUs work as a pipeline; nothing
  drains between two `llama_decode` calls (llama-bench's `test_prompt` calls `llama_decode` batch
  after batch and synchronises once at the end). This is PR 6017's design (March 2024).
- "host": the copy is synchronous (the scheduler's fallback: `ggml_backend_synchronize` of the
  source backend, then `ggml_backend_tensor_copy`), so before it launches GPU j's part of a
  micro-batch the host waits for GPU j - 1 to finish that micro-batch. The host then walks the
  chain: micro-batch k + 1 starts on the first GPU when the host reaches micro-batch k's last
  split, and a micro-batch costs sum_{j < p} c_j - c_last (at least max c_j) instead of max c_j.
  llama.cpp's maintainers state that on 2026 master "these copies are entirely synchronous"
  (JohannesGaessler, PR 25319, 2026-07-05), after PRs 17795 (merged early 2026, rolled back for a
  multi-GPU pipeline-parallel bug) and 20793 (its reintroduction: "the event-based pipeline
  parallelism scheduling mechanism very likely implicitly relies on synchronous copies"; its own
  table on 4 ROCm GPUs, layer split, gemma-4 26B: pp2048 / pp512 = 793 / 708 = 1.12 with the copies
  synchronous against 1478 / 708 = 2.09 before) were reverted.

"events" has a second limit: the CUDA driver queues about `LAUNCH_QUEUE_OPS` operations per
stream; once a stream holds that many, the host's next launch on it waits until the GPU retires
one (2 x RTX 3090-era measurements: "the buffer size is about 1000 kernels" per stream, NVIDIA
developer forum thread 68937 / Stack Overflow 53970187; llama.cpp PR 19042, NVIDIA, January 2026:
"With pipeline parallelism, during prompt processing, the CPU-side CUDA command buffer gets full,
stalling the CPU", CUDA_SCALE_LAUNCH_QUEUES=4x gave 25% more prompt throughput on large models;
reverted by PR 19227 for Jetson hangs and kept as advice in docs/build.md). A stage of a
micro-batch is `prompt_layer_ops` operations per layer, so a stage of N operations lets the host
run r = Q / N stages ahead on its GPU: with r >= 2 micro-batches queue as above; with r < 1 the
host is stuck in every stage until the GPU has N - Q of it left to run, so micro-batch k + 1
starts on the first GPU only once the last has nearly finished micro-batch k (`queued_makespan_s`
walks it stage by stage, ops spread evenly over a stage). XiongjieDai's May 2024 tables show the
pattern: Llama 3 70B Q4_K_M prompts pipeline on 6 and 8 GPUs (14 and 11 layers a GPU: 700 and
550 operations) and 70B F16 on 4 (43 a layer: 903), but not Q4_K_M on 2 (41 layers: 2,050) or 4
(21, 20, 20, 19 layers: 1,050, 1,000, 1,000, 950) on eight boxes. With these sourced numbers only
the 4-GPU split's first GPU overflows the queue, where the tables need all four to: the limit
("about 1000") and the count (cuBLAS taken as one kernel a GEMM) are both within a few percent of
the 4-GPU stage, so `analyses.serving_pcie` does not price the queue (docs/validation.md).

The preset's build (2026 master) runs "host"; `SCHEDULER_BY_YEAR` says which a source's build ran.
With p = 2 both give max c_j per micro-batch. Builds and platforms differ, and which one a build
ran is a choice per source, not derived from its hardware: PR 20793's master column (4 MI50, ROCm,
May 2026) still pipelined (2.09 above), and issue 24026 (June 2026, 2 RX 6800, ROCm) saw "exactly
zero difference" in prompt speed between `-b 2048 -ub 1024` and `-b 1024 -ub 1024`, less overlap
than even "host" gives on 2 GPUs.

Row split (`-sm row`). Only the layers' weight matrices sit in split buffers, cut by output rows
over the GPUs (`ggml_backend_cuda_split_buffer_type`); everything else (norms, RoPE, attention, the
KV cache, element-wise ops, the experts: `mul_mat_id does not support split buffers`) runs on the
main GPU. Each matrix product (`ggml_cuda_op_mul_mat`) quantises its input on the main GPU (q8_1:
36 bytes per 32 values, for quantised weights; f32 for 16-bit weights), copies it to every other
GPU (`cudaMemcpyPeerAsync`), lets each GPU compute its rows, copies each GPU's rows back to the
main GPU (`ggml_cuda_Memcpy2DPeerAsync`, f32), and makes the main stream wait on every GPU's
event. A Llama layer has 7 such products (q, k, v, o, gate, up, down). Per product, with T tokens,
K inputs, N outputs and g GPUs: the main GPU's link sends (g - 1) T K b_in and receives
(g - 1) T N 4 / g bytes; the copies and the other GPUs' share run one after the other
(broadcast, product, gather), and the main GPU's share beside them. Without P2P a peer copy is
staged through host memory: 15.23 us and 0.31 of the link's rate (`P2P_OFF_BANDWIDTH_RATIO`; 2 x
RTX 3090, p2pBandwidthLatencyTest, club-3090 docs/PCIE_P2P.md), 1.01 us with P2P, two copies per
product on the critical path. Not priced: the overlap of copies and products across the 128-token
column chunks (`MUL_MAT_SRC1_COL_STRIDE`) of prompts longer than 128 tokens, and the host's launch
of each copy and kernel on every GPU (split buffers run without CUDA graphs).
"""

from __future__ import annotations

import numpy as np

from shardwise.arrays import where
from shardwise.engines.engine_kernels import layer_kernels
from shardwise.engines.forward import ForwardStages
from shardwise.physics.compute import layer_times
from shardwise.physics.custom_allreduce import P2P_OFF_BANDWIDTH_RATIO
from shardwise.physics.flops import layer_forward
from shardwise.specs import Cluster, Model
from shardwise.specs._checks import Number
from shardwise.specs.serving import STORAGE_BYTES, ServingWorkload

# ggml-backend.cpp: scheduler copies of every split input (micro-batches in flight, "events")
SCHED_MAX_COPIES = 4
SCHEDULERS = ("events", "host")
# Operations the CUDA driver queues on a stream before a launch makes the host wait (module
# docstring: "about 1000 kernels", NVIDIA forum 68937; CUDA_SCALE_LAUNCH_QUEUES scales it).
LAUNCH_QUEUE_OPS = 1024
# A prompt micro-batch's products in a 2024 build (ggml-cuda.cu at ggerganov/ggml@6d056617, the
# sync of llama.cpp of 10 May 2024): a weight product runs `ggml_cuda_op_mul_mat_cublas` (input to
# FP16, cublasGemmEx, output to FP32: 2 kernels beside the GEMM; quantised weights are first
# dequantised to FP16: 1 more, where decode's q8_1 quantisation was), KQ and KQV run
# `ggml_cuda_mul_mat_batched_cublas` (input to FP16, the pointer kernel of cublasGemmBatchedEx
# with grouped KV heads, output to FP32: 3 beside the GEMM). cuBLAS counted as one kernel a GEMM.
WEIGHT_PRODUCTS = 7
PROMPT_PRODUCT_EXTRA_OPS = 2
BATCHED_PRODUCT_EXTRA_OPS = 3
# Which scheduler a build ran (module docstring): PR 6017 (March 2024) to 2025 "events"; 2026 builds
# "host" (PR 17795 in early 2026, then synchronous copies on master: PR 25319).
SCHEDULER_BY_YEAR = {2024: "events", 2025: "events", 2026: "host"}
# Whether a layer split over several GPUs generates tokens inside CUDA graphs, per build year. One
# GPU has since PR 6766 (May 2024; its review: RTX 4090, Llama 8B F16, tg128 56.68 -> 57.85 t/s).
# With pipeline parallelism on (the scheduler cycling its SCHED_MAX_COPIES copies) the ggml graph
# changed at every evaluation, so CUDA graphs "could not be used" until PR 13814 (slaren, merged
# 2025-05-30: "ggml : allow CUDA graphs when using pipeline parallelism"); 2025 builds before it
# launch every kernel from the host. No source of the data is a 2025 build. The year is coarse for
# one GPU: `generation_runtime(2024, 1)` gives graphs, true from PR 6766's merge (XiongjieDai's
# builds 2824-2843, run 9-10 May 2024, generate faster on one GPU than on k), not for a 2024 build
# before it (PR 6017's March build had graphs nowhere). No such build's generation is priced (PR
# 6017's and 7716's rows are prompts); a rule by build number waits for one.
LAYER_SPLIT_GRAPHS_BY_YEAR = {2024: False, 2025: False, 2026: True}


def generation_runtime(year: int, gpus: int) -> str:
    """The runtime (`engines.serving.RUNTIMES`) of a build's token generation over `gpus` GPUs of a
    layer split: CUDA graphs on one GPU, and on several where the build has PR 13814
    (`LAYER_SPLIT_GRAPHS_BY_YEAR`), else eager launches."""
    return "graphs" if gpus == 1 or LAYER_SPLIT_GRAPHS_BY_YEAR[year] else "cpp-eager"


# cudaMemcpy between two GPUs, p2pBandwidthLatencyTest, 2 x RTX 3090 (club-3090 docs/PCIE_P2P.md)
PEER_COPY_LATENCY_P2P_OFF_S = 15.23e-6
PEER_COPY_LATENCY_P2P_ON_S = 1.01e-6
Q8_1_BYTES_PER_VALUE = 36.0 / 32.0  # block_q8_1: 32 int8 + half scale + half sum
F32_BYTES = 4.0
SIXTEEN_BIT = ("bf16", "fp16")


def chained_makespan_s(
    c_first: Number, c_middle_sum: Number, c_last: Number, c_max: Number, pp: Number, micro_batches: Number
) -> Number:
    """Seconds for m micro-batches through p stages when the host waits for each stage before it
    launches the next ("host", module docstring): the first micro-batch's whole pass, then one
    period per micro-batch, period = max(sum_j c_j - c_last, max_j c_j); p = 1: m c_first."""
    p = np.asarray(pp, dtype=float)
    m = np.asarray(micro_batches, dtype=float)
    c_sum = where(p == 1, c_first, c_first + where(p > 2, c_middle_sum, 0.0) + c_last)
    period = where(p == 1, c_first, np.maximum(c_sum - c_last, c_max))
    return (m - 1.0) * period + c_sum


def events_makespan_s(c_sum: Number, c_max: Number, pp: Number, micro_batches: Number) -> Number:
    """Seconds for m micro-batches with the copies queued on the GPUs ("events"): a pipeline with
    at most `SCHED_MAX_COPIES` micro-batches in flight and no drain between batches, period =
    max(max_j c_j, sum_j c_j / 4)."""
    m = np.asarray(micro_batches, dtype=float)
    period = np.maximum(c_max, c_sum / SCHED_MAX_COPIES)
    return where(np.asarray(pp) == 1, m * c_sum, (m - 1.0) * period + c_sum)


def prompt_layer_ops(quantised: bool) -> int:
    """Stream operations of one dense Llama layer for a prompt micro-batch in a 2024 build
    (`WEIGHT_PRODUCTS`): decode's 23 kernels (`engines.engine_kernels`, products as one kernel)
    plus each weight product's conversions, KQ's and KQV's batched-GEMM kernels and, quantised, the
    dequantisation: 43 (16-bit) or 50."""
    extra = WEIGHT_PRODUCTS * (PROMPT_PRODUCT_EXTRA_OPS + (1 if quantised else 0)) + 2 * BATCHED_PRODUCT_EXTRA_OPS
    return layer_kernels("llama.cpp", False) + extra


def layer_split_counts(layers: int, gpus: int) -> tuple[int, int, int]:
    """(first, fullest middle, last) GPU's layers under llama.cpp's default `-sm layer` on equal
    GPUs: layer i goes to GPU upper_bound(splits, i / (layers + 1)), the output layer counting as
    one more (`llm_load_tensors`, 2024: act_gpu_layers = min(n_gpu_layers, n_layer + 1); splits by
    free memory). Llama 3 8B on 4 GPUs: 9, 8, 8, 7 (XiongjieDai's L40S_4_v3.ipynb: KV buffers of
    288, 256, 256 and 224 MiB at 32 MiB a layer; 6 and 8 GPUs' logs agree); 70B: 21, 20, 20, 19."""
    units = layers + 1
    bounds = [int(np.floor(g * units / gpus - 1e-9)) + 1 if g else 0 for g in range(gpus + 1)]
    counts = [bounds[g + 1] - bounds[g] for g in range(gpus)]
    counts[-1] -= 1  # the output layer
    return counts[0], max(counts[1:-1], default=0), counts[-1]


def queued_makespan_s(
    costs: tuple[Number, Number, Number],
    ops: tuple[Number, Number, Number],
    pp: Number,
    micro_batches: Number,
    queue_ops: float = LAUNCH_QUEUE_OPS,
) -> Number:
    """Seconds for m micro-batches over p stages under "events" with a launch queue of `queue_ops`
    operations per stream (module docstring): the host walks micro-batch k's stages in order,
    waits for stage j's copy slot (micro-batch k - 4 on GPU j), and queues the stage's `ops`
    operations, each when the stream holds fewer than `queue_ops`; a stage starts when its
    first operation is queued, its input is ready and its GPU is free, and retires its operations
    evenly over its cost. `costs`/`ops` are the first, a middle and the last stage's."""
    p = np.asarray(pp, dtype=float)
    m = np.asarray(micro_batches, dtype=float)
    shape = np.broadcast(p, m, *costs, *ops).shape
    p, m = np.broadcast_to(p, shape), np.broadcast_to(m, shape)
    n_p, n_m = int(np.max(p)), int(np.max(m))
    starts = np.zeros((n_m, n_p, *shape))
    ends = np.zeros((n_m, n_p, *shape))
    host = np.zeros(shape)

    def done(j: int, x: np.ndarray, c: np.ndarray, n: np.ndarray, k: int) -> np.ndarray:
        kk = np.clip(np.floor(x / n), 0, k)  # the stage of stream j's x-th operation
        at = np.take_along_axis(starts[:, j], kk[None].astype(int), axis=0)[0]
        return where(x >= 0, at + (x - kk * n + 1.0) * c / n, -np.inf)

    for k in range(n_m):
        for j in range(n_p):
            live = (k < m) & (j < p)
            c = np.broadcast_to(where(j == 0, costs[0], where(j == p - 1, costs[2], costs[1])), shape)
            n = np.broadcast_to(np.maximum(where(j == 0, ops[0], where(j == p - 1, ops[2], ops[1])), 1.0), shape)
            h = np.maximum(host, ends[k - SCHED_MAX_COPIES, j]) if k >= SCHED_MAX_COPIES else host
            first = np.maximum(h, done(j, k * n - queue_ops, c, n, k))
            start = np.maximum(first, ends[k - 1, j] if k else 0.0)
            start = np.maximum(start, ends[k, j - 1] if j else 0.0)
            starts[k, j], ends[k, j] = where(live, start, 0.0), where(live, start + c, 0.0)
            host = where(live, np.maximum(first, done(j, (k + 1) * n - 1.0 - queue_ops, c, n, k)), host)
    last = np.take_along_axis(ends.reshape(n_m * n_p, *shape), ((m - 1) * n_p + p - 1)[None].astype(int), axis=0)[0]
    return where(p == 1, m * np.asarray(costs[0]), last)


def layer_split_prompt_s(
    per_stage: tuple[Number, Number, Number],
    middle_sum: Number,
    pp: Number,
    micro_batches: Number,
    scheduler: str,
    stage_ops: tuple[Number, Number, Number] | None = None,
) -> Number:
    """Seconds for a prompt of m micro-batches over a layer split of p GPUs; `per_stage` the first,
    a middle and the last stage's cost per micro-batch (sends included), `middle_sum` all middle
    stages together; `stage_ops` their stream operations where "events" meets the launch queue
    (`queued_makespan_s`; None: a queue without limit)."""
    if scheduler not in SCHEDULERS:
        raise ValueError(f"llama.cpp scheduler {scheduler!r}: choose {', '.join(SCHEDULERS)}")
    if scheduler == "events" and stage_ops is not None:
        return queued_makespan_s(per_stage, stage_ops, pp, micro_batches)
    p = np.asarray(pp, dtype=float)
    c0, cm, cl = per_stage
    c_max = np.maximum(np.maximum(c0, where(p > 2, cm, 0.0)), where(p > 1, cl, 0.0))
    if scheduler == "host":
        return chained_makespan_s(c0, middle_sum, cl, c_max, p, micro_batches)
    c_sum = where(p == 1, c0, c0 + where(p > 2, middle_sum, 0.0) + cl)
    return events_makespan_s(c_sum, c_max, p, micro_batches)


def layer_split_iteration(
    fs: ForwardStages, pp: Number, micro_batches: Number, scheduler: str
) -> tuple[Number, Number, Number, Number, Number]:
    """A serving step of llama.cpp over a layer split (`engines.iteration`): its batch as m
    micro-batches through the p stages (`layer_split_prompt_s`; `fs` one micro-batch's stage costs
    with the sends). Returns (total, compute, TP, sends, wait) on the critical path, the total split
    as the slowest stage's cost splits; no wait beyond the GPUs' work."""
    p = np.asarray(pp, dtype=float)
    total = layer_split_prompt_s(fs.per_stage, fs.middle_sum_s(p), p, micro_batches, scheduler)
    c_max, compute, tp = fs.slowest(p)
    share = total / c_max
    return total, share * compute, share * tp, share * fs.send_s, np.zeros_like(np.asarray(total))


def row_split_products(model: Model) -> tuple[tuple[float, float], ...]:
    """(K, N) of a decoder layer's matrix products in llama.cpp's graph (q, k, v, o, gate, up,
    down; the gate only for gated MLPs)."""
    h, f = float(model.hidden), float(model.ffn_hidden)
    q = float(model.heads * model.head_dim)
    kv = float(model.kv_heads * model.head_dim)
    mlp = ((h, f), (h, f), (f, h)) if model.gated_mlp else ((h, f), (f, h))
    return ((h, q), (h, kv), (h, kv), (q, h), *mlp)


def row_split_copies_s(model: Model, tokens: Number, gpus: Number, cluster: Cluster, weights: str) -> Number:
    """Seconds a decoder layer's matrix products spend copying under `-sm row` over `gpus` GPUs
    (module docstring): per product, the input to the other GPUs and their rows back, through the
    main GPU's link, each copy with its latency; 0 on one GPU."""
    t = np.asarray(tokens, dtype=float)
    g = np.asarray(gpus, dtype=float)
    link = cluster.intra_node_link
    p2p = bool(cluster.p2p)
    rate = link.effective_bandwidth_bytes_per_s * (1.0 if p2p else P2P_OFF_BANDWIDTH_RATIO)
    latency = PEER_COPY_LATENCY_P2P_ON_S if p2p else PEER_COPY_LATENCY_P2P_OFF_S
    b_in = F32_BYTES if weights in SIXTEEN_BIT else Q8_1_BYTES_PER_VALUE
    others = np.maximum(g - 1.0, 0.0)
    total = 0.0
    for k, n in row_split_products(model):
        out_bytes = others * t * k * b_in  # the input to every other GPU
        in_bytes = others * t * n * F32_BYTES / np.maximum(g, 1.0)  # their rows back
        total = total + (out_bytes + in_bytes) / rate + 2.0 * latency
    return where(g > 1, total, 0.0)


def layer_gemm_s(model: Model, cluster: Cluster, wl: ServingWorkload, tokens: Number, precision: str) -> Number:
    """One decoder layer's matrix products on one GPU for `tokens` tokens (as `engines.iteration`
    prices a layer's linear layers)."""
    w, kvb = STORAGE_BYTES[wl.weight_precision], STORAGE_BYTES[wl.kv_precision]
    t = np.asarray(tokens, dtype=float)
    fwd = layer_forward(model, 1, 1, False, 2.0, t, t, w, kvb)
    return layer_times(fwd, cluster.gpu, precision, True, backward=False, training=False).gemm_s


def row_split_terms(
    one_gpu_s: Number,
    model: Model,
    cluster: Cluster,
    wl: ServingWorkload,
    tokens: Number,
    gpus: Number,
    precision: str,
) -> tuple[Number, Number]:
    """(the main GPU's seconds, the copies' seconds) of a forward of `tokens` tokens under `-sm row`
    over `gpus` GPUs, from its time on one GPU: the products' share (g - 1) / g moves off the main
    GPU; the copies of every layer's products (module docstring)."""  # fmt: skip
    g = np.maximum(np.asarray(gpus, dtype=float), 1.0)
    gemm = model.layers * layer_gemm_s(model, cluster, wl, tokens, precision)
    copies = model.layers * row_split_copies_s(model, tokens, g, cluster, wl.weight_precision)
    return one_gpu_s - (1.0 - 1.0 / g) * gemm, copies
