"""What a TensorRT-LLM engine allocates on a GPU before its KV cache, besides the weights, as
`trtllm-bench` builds and runs it: the engine's activation memory, sized by its build-time
`max_num_tokens`, and the runtime and decoder buffers, sized by its `max_batch_size`. The KV cache
gets `free_gpu_memory_fraction` of what is left after these (TensorRT-LLM docs/source/reference/
memory.md: "weights, internal activation tensors, and I/O tensors"; the activation memory is
pre-computed at build time from the max tensor shapes, "close to max number of input tokens *
some constant factor").

Notation: h hidden size, f the MLP's intermediate size, t the TP size, p the PP size, N the
engine's `max_num_tokens`, S its `max_batch_size` (per micro-batch), I and O the dataset's prompt
and output lengths.

1. trtllm-bench's engine settings (tensorrt_llm/bench/build/tuning.py, `calc_engine_setting`,
   `finetune_setting`): requests the KV cache of all t p GPUs could hold, R = f (t p M - P w)
   / (2 L max(t, k) d e_kv (I + O)) (P parameters, w bytes each, k KV heads of d); d is the
   config's head size as `ModelConfig` reads it (tensorrt_llm/bench/build/dataclasses.py @04cba882:
   the `head_size`, `head_dim` or `attention_head_dim` key, else hidden_size // num_attention_heads,
   from `AutoConfig.from_pretrained(..., trust_remote_code=True).to_dict()`): DeepSeek-V3's
   config.json (latent attention; the repository's own DeepseekV3Config, which trust_remote_code
   loads) has none, so d = 7168 // 128 = 56, not its 128-wide query/key heads
   (`Model.head_dim_in_config`, review 35); raw batch
   r = min(R, 4096) / p; S = max(64, 32 ceil(r / 32)) below 256, 128 ceil(r / 128) below 1024,
   else 256 ceil(r / 256); N from n = min(r (1 + I / O), 32768): max(2048, 256 ceil(n / 256))
   below 4096, 512 ceil(n / 512) below 8192, else 1024 ceil(n / 1024). f = 0.90: `trtllm-bench
   throughput` on its default PyTorch backend passes its `--kv_cache_free_gpu_mem_fraction` (0.90)
   to this heuristic (tensorrt_llm/bench/benchmark/utils/general.py `get_settings`,
   bench/benchmark/throughput.py); 0.95 is the function's own default, which only `trtllm-bench
   build` (TensorRT engines) leaves in place. Chunked prefill is off unless asked for
   (`--enable_chunked_context`, default False), so `get_settings` raises N to the longest prompt
   plus S: N = max(N, I + S), one whole prompt beside a full batch of decodes. S is the engine's
   `max_batch_size`: the capacity scheduler admits at most S requests per micro-batch
   (`BindCapacityScheduler`/`CapacityScheduler(max_num_requests)`), the cap on sequences in flight
   (`engines.serving.max_sequences_per_replica`); trtllm-bench's dynamic batch-size tuning
   (`DynamicBatchConfig`, its batch-size table) is set only for the TensorRT backend.
   t is the launch's tensor-parallel size, `--tp` (`get_settings` passes `params.get("tp")`,
   bench/benchmark/utils/general.py at NVIDIA/TensorRT-LLM@0171265e): under data-parallel attention
   the whole expert group's, ep x etp (`--tp 8 --ep 8` with `enable_attention_dp`;
   `engines.dp_attention.launch_tp`), not the attention's tp = 1, which would price all of Mixtral
   on one GPU (no room: S = 64, review 32). S is then each attention rank's cap (each schedules its
   own requests). Later TensorRT-LLM (bench/tuning/heuristics.py `calc_engine_setting(...,
   enable_attention_dp)`, NVIDIA/TensorRT-LLM@0b42ceaf) sizes S per rank instead, from one GPU's
   memory less 1/t of the weights: on Mixtral 8x7B over 8 H100 (512 + 128 tokens, 16 bits) 896
   against 4,096 here, both above the 637 requests a rank's KV cache holds; not modelled.
2. Activation memory, N c_a (5 h + 6 f / t) bytes: the MLP's live tensors per token (its input
   and the residual in 16 bits, 4 h; the FP8 copy of the input, h; the fused gate-up output, 2 f /
   t, and the SwiGLU output, f / t, in 16 bits, 6 f / t). c_a = 1.37 is set from one public log:
   Llama-2-7B in FP8 (h 4096, f 11008, t 1), N 8192: "Allocated 928.77 MiB for execution context
   memory" (TensorRT-LLM benchmarks/cpp README, trtllm-bench example at 0.12.0.dev2024073000):
   118,882 B per token against 86,528 (the docs' known issue: "When FP8 GEMM is used, the
   activation memory might be larger than the theoretical optimized memory size"). Under pipeline
   parallelism every stage holds one layer's full-size tensors, as at t = 1 (memory.md).
3. Runtime and decoder buffers, B_s S p bytes (p micro-batches of S sequences: the scheduler keeps
   one micro-batch per stage): the same log's "Allocated 1.14 GB GPU memory for runtime buffers"
   and "Allocated 4.35 GB GPU memory for decoder" at S = 4096, binary units (TensorRT-LLM's
   MemoryCounters::bytesToString divides by 1024 per step and prints "GB"): B_s = 5.49 GiB / 4096 =
   1.44 MB per sequence slot. Those buffers are logits, sampling workspaces and token arrays, sized by the
   vocabulary (32,000 there) and the maximum sequence length (4,098); how they split between the
   two is not in the log, so B_s is used as measured for every model (a lower value for Llama 3's
   128,256-token vocabulary).

The memory these come out of is what CUDA reports, as everywhere (`Gpu.memory_bytes`): the same log
prints "Memory usage when calculating max tokens in paged kv cache: total: 79.10 GiB" on an 80 GB H100.
trtllm-bench sizes the engine from NVML's total instead (tensorrt_llm/bench/build/utils.py
`get_device_memory`, nvmlDeviceGetMemoryInfo: 81559 MiB = 79.65 GiB on an H100), 0.5 GiB more; that
difference moves S and N by under 1% and is not modelled.

4. The all-reduce workspace under TP (t > 1): every rank maps its peers' IPC buffers for
   TensorRT-LLM's own all-reduce kernels, 4 W t bytes: W t of IPC buffers and 3 W t of Lamport
   buffers (tensorrt_llm/_torch/distributed/ops.py `get_allreduce_workspace` ->
   tensorrt_llm/plugin/plugin.py `CustomAllReduceHelper.allocate_allreduce_fusion_workspace`),
   W = `max_workspace_size_auto(t)` = 16,000,000 bytes up to 2 ranks, 8,000,000 above (the same
   limits as the kernels' message sizes, cpp/tensorrt_llm/common/customAllReduceUtils.h
   `getMaxRequiredWorkspaceSize`): 128 MB at t = 2 and 4, 256 MB at t = 8. Newer builds size W at
   64 MiB whatever t (up to 2 GiB at t = 8); NCCL's own buffers are not counted here (part of
   `RUNTIME_RESERVED_BYTES`).

Range: c_a is 1 for a memory planner that keeps exactly the MLP's tensors, up to about 2; B_s is
0.3-5 MB for vocabularies of 32k-256k. Only TensorRT-LLM is sized this way: vLLM and SGLang profile
their activation peak inside their own memory fraction (`engines.engine_presets`).
"""

from __future__ import annotations

import numpy as np

from shardwise.physics.custom_allreduce import TRTLLM_WORKSPACE_BYTES
from shardwise.physics.params import total_params
from shardwise.specs import Model
from shardwise.specs._checks import Number

# tuning.py, with the fraction trtllm-bench throughput passes on its PyTorch backend (module docstring)
BENCH_KV_FRACTION = 0.90
BENCH_MAX_BATCH = 4096
BENCH_MAX_TOKENS = 32768
BENCH_MIN_BATCH = 64
BENCH_MIN_TOKENS = 2048
# Activation bytes per token over the MLP's live tensors (5 h + 6 f / t), from the Llama-2-7B FP8
# log: 928.77 MiB / 8192 tokens / (5 x 4096 + 6 x 11008) B.
ACTIVATION_PLANNER_FACTOR = 928.77 * 2**20 / 8192 / (5 * 4096 + 6 * 11008)
# Runtime + decoder buffers per sequence slot: (1.14 + 4.35) GiB / 4096, the same log (its "GB" are GiB).
BUFFER_BYTES_PER_SEQUENCE = (1.14 + 4.35) * 2**30 / 4096
# The all-reduce workspace: one IPC buffer and three Lamport buffers of W t bytes (module docstring, 4).
ALLREDUCE_IPC_AND_LAMPORT_BUFFERS = 4


def bench_engine_settings(
    model: Model,
    tp: Number,
    pp: Number,
    input_len: int,
    output_len: int,
    gpu_memory_bytes: Number,
    weight_bytes_per_param: float,
    kv_bytes_per_element: float,
    chunked_prefill: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """(max_batch_size, max_num_tokens) trtllm-bench runs the engine with (module docstring, 1); without
    chunked prefill (its default) the token budget holds the whole prompt and a full batch."""
    t, p = np.asarray(tp, dtype=float), np.asarray(pp, dtype=float)
    gib = 1024.0**3  # tuning.py counts in GiB (of NVML's total; here CUDA's, module docstring)
    per_token = 2 * model.layers * np.maximum(t, model.kv_heads) * bench_head_size(model) * kv_bytes_per_element / gib
    engine = np.asarray(total_params(model), dtype=float) * weight_bytes_per_param / gib
    available = np.asarray(gpu_memory_bytes, dtype=float) / gib * t * p - engine
    requests = np.maximum(BENCH_KV_FRACTION * available / (per_token * (input_len + output_len)), 0.0)
    raw = np.minimum(requests, BENCH_MAX_BATCH) / p
    batch = np.where(
        raw < 256,
        np.maximum(BENCH_MIN_BATCH, 32 * np.ceil(raw / 32)),
        np.where(raw < 1024, 128 * np.ceil(raw / 128), 256 * np.ceil(raw / 256)),
    )
    n = np.minimum(raw * (1 + input_len / output_len), BENCH_MAX_TOKENS)
    tokens = np.where(
        n < 4096,
        np.maximum(BENCH_MIN_TOKENS, 256 * np.ceil(n / 256)),
        np.where(n < 8192, 512 * np.ceil(n / 512), 1024 * np.ceil(n / 1024)),
    )
    if not chunked_prefill:
        tokens = np.maximum(tokens, input_len + batch)
    return batch, tokens


def bench_head_size(model: Model) -> Number:
    """The head size trtllm-bench reads from the model's config.json (module docstring, 1): its
    `head_size`, `head_dim` or `attention_head_dim`, else hidden_size // num_attention_heads (model
    fields may be arrays: a sweep over the model's shape)."""
    if model.head_dim_in_config:
        return np.asarray(model.head_dim, dtype=float)
    return np.floor_divide(np.asarray(model.hidden, dtype=float), np.asarray(model.heads, dtype=float))


def activation_bytes(model: Model, tp: Number, max_num_tokens: Number) -> Number:
    """The engine's activation memory on one GPU (module docstring, 2)."""
    t = np.asarray(tp, dtype=float)
    h, f = np.asarray(model.hidden, dtype=float), np.asarray(model.ffn_hidden, dtype=float)
    return np.asarray(max_num_tokens, dtype=float) * ACTIVATION_PLANNER_FACTOR * (5 * h + 6 * f / t)


def runtime_buffers_bytes(max_batch_size: Number, pp: Number) -> Number:
    """Runtime and decoder buffers on one GPU (module docstring, 3)."""
    return BUFFER_BYTES_PER_SEQUENCE * np.asarray(max_batch_size, dtype=float) * np.asarray(pp, dtype=float)


def allreduce_workspace_bytes(tp: Number) -> Number:
    """TensorRT-LLM's all-reduce workspace on one GPU of a TP group (module docstring, 4)."""
    t = np.asarray(tp, dtype=float)
    small, large = TRTLLM_WORKSPACE_BYTES
    return np.where(t > 1, ALLREDUCE_IPC_AND_LAMPORT_BUFFERS * np.where(t <= 2, small, large) * t, 0.0)


def engine_buffers_bytes(
    model: Model,
    tp: Number,
    pp: Number,
    input_len: int,
    output_len: int,
    gpu_memory_bytes: Number,
    weight_bytes_per_param: float,
    kv_bytes_per_element: float,
    bench_tp: Number | None = None,
) -> Number:
    """Bytes a trtllm-bench engine holds on one GPU besides its weights and KV cache; `bench_tp`: the
    tensor-parallel size of the launch, which trtllm-bench's settings are computed with (default `tp`;
    under data-parallel attention ep x etp, `engines.dp_attention.launch_tp`)."""
    batch, tokens = bench_engine_settings(
        model, tp if bench_tp is None else bench_tp, pp, input_len, output_len, gpu_memory_bytes,
        weight_bytes_per_param, kv_bytes_per_element,
    )  # fmt: skip
    return activation_bytes(model, tp, tokens) + runtime_buffers_bytes(batch, pp) + allreduce_workspace_bytes(tp)
