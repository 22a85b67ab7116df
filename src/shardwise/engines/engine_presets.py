"""Serving engines as shardwise prices them, one preset per engine and the version its defaults
were read from: the runtime (CUDA graphs or eager launches), the all-reduce kernel it uses on
small messages, how much memory its KV cache gets, its chunked-prefill token budget, and the
per-stage cost of its pipeline parallelism where a public measurement gives one.

KV-cache memory rules (M the GPU's memory, W the weights on it, R = `RUNTIME_RESERVED_BYTES`):
- TensorRT-LLM: `KvCacheConfig.free_gpu_memory_fraction` = 0.9 of what is free after the weights,
  the runtime and the engine's own buffers E (activations sized by `max_num_tokens`, runtime and
  decoder buffers by `max_batch_size`, as trtllm-bench builds the engine: `engines.trtllm_buffers`):
  0.9 (M - W - R - E) (tensorrt_llm/llmapi/llm_args.py);
- vLLM: `gpu_memory_utilization` = 0.9 of the whole GPU for weights, activations and cache:
  0.9 M - W - R (vllm/config/cache.py; the worker profiles the activation peak, here R);
- SGLang: `mem_fraction_static` = (M - reserved) / M holds weights and cache, reserved (MiB) =
  512 + 1.5 max(chunk, 2048) + 2 cuda_graph_max_bs + 1024 tp pp / 8, at least 10 GiB on GPUs
  over 60 GiB: M - reserved - W (python/sglang/srt/server_args.py `_handle_gpu_memory_settings`);
- llama.cpp: the cache the user sizes with -c, here all memory left after weights and runtime.

Chunked-prefill budgets (tokens per iteration): TensorRT-LLM `max_num_tokens` 8192; vLLM
`max_num_batched_tokens` for its OpenAI server 16384 on GPUs of >= 160 GiB (B200, B300, MI300X),
8192 on GPUs of >= 70 GiB other than A100 (and vLLM's GB10, not a preset here), else 2048 (vllm/engine/arg_utils.py
`get_batch_defaults`, vLLM 0.34); SGLang `chunked_prefill_size` 2048 below
35 GiB, 4096 below 60 GiB, 8192 below 160 GiB, 16384 above (server_args.py); llama.cpp's
`n_batch` 2048 (common/common.h).

Sequence caps (requests in flight per replica): vLLM's `max_num_seqs` for its OpenAI server, 1024
on GPUs of >= 70 GiB other than A100 (>= 160 GiB too), else 256, in the same branch of vllm/engine/arg_utils.py
`get_batch_defaults` as its token budget (V0 and V1 before that branch: 256); one cap for the whole
batch queue under pp (one scheduler); at most the token budget (`seqs_within_budget`).
TensorRT-LLM: `max_batch_size`, per micro-batch, as trtllm-bench sets it for the dataset's mean
lengths, min(requests the KV cache of all the GPUs holds, 4096) / pp rounded up
(tensorrt_llm/bench/build/tuning.py; the same setting its buffers are sized by,
`engines.trtllm_buffers`; `engines.serving.max_sequences_per_replica`); 2048
(`DEFAULT_MAX_SEQUENCES`, the LLM API's default) where no workload sizes it. SGLang:
`max_running_requests` unset is min(K // 2, R) with K the KV-cache tokens of one GPU (the smallest
over the pp ranks) and R the request pool's size, clamp(int(K / context_len x 512), 2048, 4096)
(python/sglang/srt/model_executor/model_runner.py, `init_memory_pool` and the
`max_running_requests` after it, read in SGLang's repository; the same formula in its newer
`_resolve_max_num_reqs`); under pp its scheduler gives each micro-batch `pp_max_micro_batch_size` =
max(max_running_requests // pp, 1) (managers/scheduler.py), so the cap stays one for all
micro-batches. llama.cpp: llama-server's slots, `-np` (--parallel); left out it is -1 (auto), which
becomes 4 slots sharing one unified KV cache of -c tokens (tools/server/server.cpp: `if (params.n_parallel
< 0) { params.n_parallel = 4; params.kv_unified = true; }`; common/arg.cpp sets -1 for the server only,
common/common.h's default is 1); an explicit -np N keeps kv_unified false, so each slot gets -c / N
tokens (src/llama-context.cpp n_ctx_seq). So 4 run at once unless the server is launched for more:
`--concurrency N` prices it launched with -np N (and -c N x tokens per request), `LLAMA_SERVER_SLOTS`
otherwise (--max-throughput, --request-rate). The others: 2048, as before.

Per-stage cost of pipeline parallelism, llama.cpp (seconds per micro-batch and stage, on top of
the send of its activations): 0.30-0.44 ms, from one public table of decode speed against the GPU
count with the work per token fixed (ggml-org/llama.cpp #19922, "Baseline: scaling vs number of
GPUs", gpt-oss-120B MXFP4 on ROCm, tg1024: 82.44, 76.84, 73.43 tokens/s on 2, 4, 6 GPUs: 12.13,
13.01, 13.62 ms per token, (13.01 - 12.13) / 2 = 0.44 ms and (13.62 - 13.01) / 2 = 0.30 ms per
added stage; the one-token activations, 2880 values, cross in microseconds), taken as their mean,
0.37 ms.

Host time of the Python engines under pipeline parallelism (`engines.pipeline.pipelined_round_s`): vLLM, SGLang
and TensorRT-LLM's PyTorch executor run one scheduler step per micro-batch, and every stage's
process prepares each micro-batch on the CPU before its kernels launch, h(n) = h_0 + h_1 n seconds
for a micro-batch of n requests. h_1 = 21 us per request (range 10-30): vLLM's step gap, decode to
decode, measured at 5-6 ms for 256 requests (Llama-2-7B, ShareGPT, V0 with asynchronous output
processing; vllm-project/vllm#10634), 5.5 ms / 256 = 21 us; V1 prepares inputs from a persistent
batch (fewer tensors rebuilt) but its scheduler and output processor still walk every request in
Python, and SGLang's scheduler and TensorRT-LLM's PyExecutor do the same, so one figure for the
three. h_0 = 0.25 ms (range 0.2-0.5): the same issue's estimate of what is left once the per-
request work overlaps, 200-300 us (the step's messages to the workers, the intermediate tensors'
metadata sent from Python through a CPU process group, the launch). vLLM's last stage also waits
for its sampled tokens (`.tolist()`) before it prepares the next micro-batch (no asynchronous
scheduling under pp before vllm-project/vllm#32618, January 2026), so its host time adds to that
stage's work (`sync_last_stage`); SGLang's pipeline loop and TensorRT-LLM's read an older
micro-batch's outputs and keep it off the stage's critical path. What is not hidden under pp: a
micro-batch's next step cannot be scheduled before its tokens come back, so each round of pp
micro-batches waits one host step beyond its GPU work; vllm-project/vllm#32618 measured what
overlapping that step gives under pp 4 (Qwen3-30B-A3B FP8, 128 sequences): 31.8% lower TPOT
(priced at 0.76 of the TPOT on H100 and 0.64 on B200, the GPU not named; tests/test_pipeline_host.py).
The vLLM preset keeps the pipeline as vLLM ran it through 2025; since that change, with
asynchronous scheduling on by default, vLLM overlaps the wait and the round's host step. With
one stage the engines overlap the host with the GPU (vLLM's batch queue and async scheduling,
SGLang's overlap scheduler, TensorRT-LLM's overlap scheduler), so nothing is added at pp = 1 while
the GPU's step is the longer; a step never lasts less than its host work, max(gpu, h_0 + h_1 n)
(`engines.pipeline.overlapped_host_floor_s`, #37), which binds where a wide TP group or a small
model makes the GPU's step short against thousands of requests (Llama 3 8B at TP 8 on B200 at
its maximum throughput: 3,500 requests, about 76 ms of host work against about 25 ms of GPU work).
TensorRT-LLM's PyExecutor runs that host work in Python every step (scheduling, `_prepare_inputs`,
sampling, responses): its maintainers measure it as GPU idle between decode steps at high
concurrency (NVIDIA/TensorRT-LLM#13957: ~580 us an iteration exposed at 64 requests on B200;
PRs #16047, #16313 trim it). h_1 there is not measured; the vLLM figure above is used.

llama.cpp under pp (its layer split): llama-server decodes every running sequence and the prompt
chunks in one batch per step, which `llama_decode` cuts into micro-batches of n_ubatch = 512
tokens; a 2026 build's scheduler copies synchronously between GPUs, so the host walks the stages
of each micro-batch and the next one starts when the host reaches this one's last stage
(`engines.llamacpp`, `ubatch_tokens`, `scheduler`): a step of up to 512 tokens crosses the stages
in turn, whatever the number of sequences.

Sends between stages: vLLM and SGLang send the hidden states and the residual of Llama-style
models (vLLM `make_empty_intermediate_tensors_factory(["hidden_states", "residual"])`, SGLang
`PPProxyTensors`), two activations per micro-batch and boundary (`pp_send_tensors`).

Budgets under pipeline parallelism: with pp stages the engines keep pp micro-batches in flight
and schedule each one on its own, so each gets the whole chunked-prefill token budget:
TensorRT-LLM sets `mNumMicroBatches` = pp and runs its `MicroBatchScheduler` once per
micro-batch with `maxNumTokens` and `maxBatchSize` (cpp/tensorrt_llm/batch_manager/
trtGptModelInflightBatching.cpp), and sizes its sequence slots as `mMaxNumSequences` =
`mMaxBatchSize` x pp (trtGptModel.h): `max_batch_size` is per micro-batch; vLLM V1 keeps a
batch queue of pp scheduled batches, each `Scheduler.schedule()` call with its own
`max_num_batched_tokens` budget, under one `max_num_seqs` for all of them
(vllm/v1/engine/core.py `step_with_batch_queue`); SGLang's pipeline event loop forms one batch
per micro-batch, each with its `chunked_prefill_size` (python/sglang/srt/managers/
scheduler_pp_mixin.py). `EnginePreset.budget_per_micro_batch` and `slots_per_micro_batch`
say which.

Whole prompts (TensorRT-LLM and vLLM under pp, `whole_prompts`): a micro-batch holds whole
requests and each stage runs the micro-batches in one order. TensorRT-LLM keeps pp micro-batch
slots (`mNumMicroBatches` = pp, trtGptModelInflightBatching.cpp); before it schedules a slot again
it waits for that slot's previous micro-batch and frees its finished requests (`forwardSync`), then
its `MicroBatchScheduler` takes, in order, every active request not in flight in another slot, a
waiting prompt's context whole or as one chunk within `max_num_tokens` (microBatchScheduler.cpp):
a request stays in its slot, and new prompts join the slot being scheduled when they are admitted.
vLLM V1's batch queue (vllm/v1/engine/core.py `step_with_batch_queue`) schedules one batch per free
queue place the same way, a request in flight being skipped until its output is back. So the
prompt tokens of a round of m micro-batches are not split evenly over them: the heaviest holds
ceil(prompts / m) whole prompts (at most one budget), beside its 1/m of the decodes, and the
micro-batches behind it cross each stage after it, so the round lasts at least its pass through
every stage plus a host step (`engines.iteration`). A ring of m = p micro-batches with work drawn
that way, simulated event by event (every stage first come first served), keeps 0.31 and 0.74 of
the even split where this bound gives 0.31 and 0.72 (a check, nothing fitted). Equal requests sent
together (a throughput benchmark's burst) stay in waves in which every micro-batch takes a full
budget: there the bound costs nothing.

Prefill apart (SGLang under pp, `prefill_apart`): SGLang's scheduler runs a prefill batch first
whenever prompts wait and the running requests decode only when none do, one or the other per
step: `get_next_batch_to_run` returns the new prefill batch alone, and `enable_mixed_chunk`, which
would add the running decodes to it, is off by default (python/sglang/srt/managers/scheduler.py,
server_args.py). Under pp every micro-batch keeps its own running batch (`running_mbs[mb_id]`) and
the loop takes the micro-batches in one order on every stage ("Each stage runs in the same order
and is notified by the previous stage", `event_loop_pp` in managers/scheduler_pp_mixin.py; sends
asynchronous, receives blocking), so a prefill micro-batch is an extra slot of the loop in which
its sequences do not decode, and the light micro-batches behind it cross the stages at its pace
(`engines.pipeline.prefill_apart_round_s`). vLLM (V1, chunked prefill always on) and TensorRT-LLM
put prompt chunks and decodes in one batch. With one stage the same rule makes an iteration a
prefill step and a decode step, c(0, q) + c(d, 0), where a mixed batch reads the weights once;
the overlap scheduler hides the host's scheduling, not the second pass. The prompts' first tokens
come at the end of the prefill step (`engines.inflight.Replica.prefill_step_first`), and its
prompts have the whole budget (`Replica.decodes_share_budget`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardwise.physics.memory import RUNTIME_RESERVED_BYTES
from shardwise.specs._checks import Number
from shardwise.specs.serving import ENGINE_NAMES

GIB = 1024**3
MIB = 1024**2
# TensorRT-LLM's LLM-API default max_batch_size, the cap of the engines without their own (`max_sequences`)
DEFAULT_MAX_SEQUENCES = 2048
# llama-server's sequences at once without -np (module docstring): n_parallel auto -> 4
LLAMA_SERVER_SLOTS = 4
# llama.cpp's per-stage cost (module docstring): the mean of the two slopes of #19922.
LLAMA_CPP_STAGE_S = (0.44e-3 + 0.30e-3) / 2
# Python engines' host time per micro-batch under pp (module docstring): vllm-project/vllm#10634,
# 5-6 ms for 256 requests (per request), and the 200-300 us it expects once that overlaps (fixed).
PYTHON_STAGE_HOST_S = 0.25e-3
PYTHON_STAGE_HOST_PER_REQUEST_S = 5.5e-3 / 256
# SGLang's request pool (model_runner.py): clamp(KV tokens / context_len x 512, 2048, 4096)
SGLANG_POOL_PER_CONTEXT = 512
SGLANG_POOL_MIN, SGLANG_POOL_MAX = 2048, 4096
# the choices of `EnginePreset.tensor_split` and `ends_placement`
PLACEMENTS = frozenset({"megatron", "llama.cpp"})


@dataclass(frozen=True)
class EnginePreset:
    """One serving engine at one version (module docstring for every rule and its source)."""

    name: str
    version: str
    runtime: str  # engines.serving.RUNTIMES
    all_reduce: str  # physics.custom_allreduce kernel on small messages ("none": NCCL only)
    kv_rule: str  # "free-fraction", "total-fraction", "sglang", "all-free"
    kv_fraction: float = 0.9
    nvls: bool = True  # whether it lets NCCL reduce in the NVLink switch
    stage_overhead_s: float = 0.0
    # host time per micro-batch and stage under pp > 1, h_0 + h_1 n for n requests (module docstring)
    stage_host_s: float = 0.0
    stage_host_per_request_s: float = 0.0
    sync_last_stage: bool = False  # the last stage waits for its sampled tokens before the next micro-batch
    pp_send_tensors: int = 1  # activations sent per micro-batch and stage boundary
    # the engine's activation, runtime and decoder buffers come out of the free memory before the
    # KV cache's fraction, sized as trtllm-bench builds it (`engines.trtllm_buffers`)
    bench_buffers: bool = False
    # under pp > 1 each of the pp micro-batches gets the whole token budget (module docstring)
    budget_per_micro_batch: bool = False
    # ... and its own sequence slots (TensorRT-LLM's max_batch_size is per micro-batch)
    slots_per_micro_batch: bool = False
    # no more sequences at once than the token budget: vLLM's max_num_seqs defaults to
    # min(its default, max_num_batched_tokens) and SchedulerConfig refuses a larger one
    # (vllm/engine/arg_utils.py `_set_default_max_num_seqs_and_batched_tokens_args`,
    # vllm/config/scheduler.py `verify_max_model_len`, vLLM 0.34)
    seqs_within_budget: bool = False
    # the sequence cap sized by one GPU's KV-cache tokens (SGLang's request pool,
    # `sglang_max_running_requests`), not a fixed default
    seqs_from_kv_pool: bool = False
    # a batch (a micro-batch under pp) prefills or decodes, never both; under pp in a fixed order
    # (module docstring)
    prefill_apart: bool = False
    # under pp a prompt's chunk sits whole in one micro-batch, the round lasting at least its
    # heaviest micro-batch's pass (module docstring)
    whole_prompts: bool = False
    weight_formats: tuple[str, ...] = ()
    # llama.cpp: a step's batch cut into micro-batches of this many tokens (n_ubatch), which cross a
    # layer split as its scheduler lets them, "host" or "events" (`engines.llamacpp`); 0: not so
    ubatch_tokens: int = 0
    scheduler: str = "events"
    # how a stage's GPUs run tp > 1: "megatron" (`engines.iteration.stage_costs`) or "llama.cpp"
    # (its `-sm tensor`, `engines.llamacpp_tensor.tensor_split_stages`)
    tensor_split: str = "megatron"
    # where the embedding and the output layer sit: "megatron" (the first and the last stage, split
    # by vocabulary over tp) or "llama.cpp" (the input embedding in host memory, the output layer as
    # it places it, `engines.llamacpp_tensor.stage_params_delta`)
    ends_placement: str = "megatron"
    # how its data-parallel attention moves tokens to the experts (`Plan.moe_dispatcher`, read where
    # the experts spread beyond the TP group, `engines.dp_attention`): "alltoall", a copy per chosen
    # expert; vLLM 0.34's default all2all backend, allgather_reducescatter, all-gathers every rank's
    # tokens over the EP group and reduce-scatters the outputs ("allgather": vllm/config/parallel.py
    # `all2all_backend`, distributed/device_communicators/all2all.py AgRsAll2AllManager), which
    # `--emit vllm` writes (docs/serving.md); SGLang's default, `--moe-a2a-backend none`, gathers the
    # whole TP group's hidden states in 16 bits and routes them on every rank, by all-reduces in a
    # batch with prompt tokens ("dp-gather": `physics.moe_dispatch.DP_GATHER_BYTES_PER_ELEMENT`)
    moe_dispatcher: str = "alltoall"
    # under data-parallel attention each attention rank prefills 1/dp of the token budget (SGLang
    # divides --chunked-prefill-size by --dp: server_args.py `_handle_data_parallelism`, 0.5.6.post2)
    dp_attention_splits_budget: bool = False
    # requests join and leave the running batch between iterations (in-flight / continuous batching);
    # False: a batch runs to its end before the next starts, `serve`'s default then --batching static
    # (FasterTransformer 5.x: its Triton backend's dynamic batcher groups requests, each group decoded
    # to the end; a plain PyTorch loop, HF `generate`, the same)
    continuous_batching: bool = True
    source: str = ""


ENGINES = {
    "tensorrt-llm": EnginePreset(
        "tensorrt-llm", "1.x (LLM API)", "graphs", "trtllm", "free-fraction", 0.9, bench_buffers=True,
        budget_per_micro_batch=True, slots_per_micro_batch=True, whole_prompts=True,
        stage_host_s=PYTHON_STAGE_HOST_S, stage_host_per_request_s=PYTHON_STAGE_HOST_PER_REQUEST_S,
        weight_formats=("bf16", "fp8", "int8", "int4", "nvfp4", "mxfp4"),
        source="tensorrt_llm/llmapi/llm_args.py (KvCacheConfig, max_num_tokens 8192); allreducePlugin.cpp",
    ),
    "vllm": EnginePreset(
        "vllm", "0.34 (V1 engine)", "graphs", "vllm", "total-fraction", 0.9, budget_per_micro_batch=True,
        stage_host_s=PYTHON_STAGE_HOST_S, stage_host_per_request_s=PYTHON_STAGE_HOST_PER_REQUEST_S,
        sync_last_stage=True, pp_send_tensors=2, whole_prompts=True, seqs_within_budget=True,
        moe_dispatcher="allgather",
        weight_formats=("bf16", "fp8", "int8", "int4", "nvfp4", "mxfp4"),
        source="vllm/config/cache.py gpu_memory_utilization 0.9; vllm/engine/arg_utils.py get_batch_defaults",
    ),
    "sglang": EnginePreset(
        "sglang", "0.5.x", "graphs", "sglang", "sglang", nvls=False, budget_per_micro_batch=True, prefill_apart=True,
        seqs_from_kv_pool=True,
        stage_host_s=PYTHON_STAGE_HOST_S, stage_host_per_request_s=PYTHON_STAGE_HOST_PER_REQUEST_S,
        pp_send_tensors=2, moe_dispatcher="dp-gather", dp_attention_splits_budget=True,
        weight_formats=("bf16", "fp8", "int8", "int4", "nvfp4", "mxfp4"),
        source="python/sglang/srt/server_args.py _handle_gpu_memory_settings; --enable-nccl-nvls default false",
    ),
    "llama.cpp": EnginePreset(
        "llama.cpp", "2026 master (llama-server)", "graphs", "none", "all-free", 1.0,
        stage_overhead_s=LLAMA_CPP_STAGE_S, ubatch_tokens=512, scheduler="host", tensor_split="llama.cpp",
        ends_placement="llama.cpp",
        weight_formats=("bf16", "q8_0", "q4_0", "q4_k", "mxfp4"),
        source="common/common.h n_batch 2048; ggml-common.h block formats; per-stage cost from llama.cpp #19922; "
        "kernels a layer: a 2024 build's count (engines.engine_kernels, 23; 30 quantised) for every build, the "
        "2025-26 fusions (flash attention on by default, RMS norm with its weight, RoPE with the cache write, "
        "SwiGLU, add chains) not counted, so a 2026 build's decode at small batches is priced slower",
    ),
    "fastertransformer": EnginePreset(
        "fastertransformer", "5.x", "cpp-eager", "none", "free-fraction", 0.9, continuous_batching=False
    ),
    "pytorch": EnginePreset("pytorch", "-", "pytorch-eager", "none", "free-fraction", 0.9, continuous_batching=False),
}  # fmt: skip
assert set(ENGINES) == set(ENGINE_NAMES)
assert all({e.tensor_split, e.ends_placement} <= PLACEMENTS for e in ENGINES.values())


def engine(name: str) -> EnginePreset:
    return ENGINES[name]


def _vllm_batch_defaults(gpu_memory_bytes: float, gpu_name: str) -> tuple[int, int]:
    """vLLM's OpenAI server's (max_num_batched_tokens, max_num_seqs) on a GPU (vllm/engine/arg_utils.py
    `get_batch_defaults`, 0.34): >= 160 GiB, >= 70 GiB other than an A100, the rest."""
    if gpu_memory_bytes >= 160 * GIB:
        return 16384, 1024
    return (8192, 1024) if gpu_memory_bytes >= 70 * GIB and "a100" not in gpu_name.lower() else (2048, 256)


def max_batched_tokens(name: str, gpu_memory_bytes: float, gpu_name: str = "") -> int:
    """The engine's default chunked-prefill budget on a GPU of `gpu_memory_bytes` (module docstring)."""
    if name == "vllm":
        return _vllm_batch_defaults(gpu_memory_bytes, gpu_name)[0]
    if name == "sglang":
        for limit, tokens in ((35, 2048), (60, 4096), (160, 8192)):
            if gpu_memory_bytes < limit * GIB:
                return tokens
        return 16384
    if name == "llama.cpp":
        return 2048
    return 8192  # TensorRT-LLM's max_num_tokens (and the others', as before)


def max_sequences(name: str, gpu_memory_bytes: float, gpu_name: str = "", concurrency: int = 1) -> int:
    """The engine's default cap on sequences in flight per replica (per micro-batch where
    `slots_per_micro_batch`), on a GPU of `gpu_memory_bytes` (module docstring). SGLang's depends on
    the KV tokens of one GPU (`sglang_max_running_requests`, applied by `engines.inflight.Replica`);
    here its pool's floor, 2048. llama.cpp's: llama-server's 4 slots, or the `concurrency` asked
    (the workload's batch) where that is more, as launched with -np for it."""
    if name == "vllm":
        return _vllm_batch_defaults(gpu_memory_bytes, gpu_name)[1]
    if name == "llama.cpp":
        return max(LLAMA_SERVER_SLOTS, int(concurrency))
    return DEFAULT_MAX_SEQUENCES


def sglang_max_running_requests(kv_tokens: float, context_len: int) -> int:
    """SGLang's `max_running_requests` left unset (module docstring): min(K // 2, request pool)."""
    pool = int(kv_tokens / context_len * SGLANG_POOL_PER_CONTEXT)
    pool = min(max(pool, SGLANG_POOL_MIN), SGLANG_POOL_MAX)
    return max(1, min(int(kv_tokens) // 2, pool))


def sglang_reserved_bytes(
    gpu_memory_bytes: Number, chunk: int, tp: Number, pp: Number, attention_dp: Number = 1
) -> Number:
    """SGLang's memory outside `mem_fraction_static` (module docstring): activations of a chunk,
    CUDA graph buffers (cuda_graph_max_bs 512 from 60 GiB up with tp >= 4, 256 below tp 4; here 512
    where tp >= 4), and the parallel groups' buffers. `tp` is SGLang's --tp, every GPU of a stage
    under data-parallel attention (`attention_dp` > 1, its --dp), which adds cuda_graph_max_bs x dp
    x 3 MiB ("more padding") and x 1.5 more above 300 graphs (server_args.py
    `_handle_gpu_memory_settings`, 0.5.6.post2): its gathered buffers, G x T x h x 2 bytes at most
    (117 MB for DeepSeek-V3 at its 8,192-token chunk), fit in it."""
    m = np.asarray(gpu_memory_bytes, dtype=float)
    graphs = np.where(np.asarray(tp) >= 4, 512, 256)
    mib = 512 + 1.5 * max(chunk, 2048) + 2 * graphs + 1024 * np.asarray(tp) * np.asarray(pp) / 8
    dp = np.asarray(attention_dp, dtype=float)
    mib = mib + np.where(dp > 1, graphs * dp * (3 + np.where(graphs > 300, 1.5, 0.0)), 0.0)
    return np.where(m > 60 * GIB, np.maximum(mib * MIB, 10 * GIB), mib * MIB)


def kv_cache_bytes(
    name: str,
    gpu_memory_bytes: Number,
    weights_bytes: Number,
    tp: Number,
    pp: Number,
    buffers_bytes: Number = 0.0,
    attention_dp: Number = 1,
    chunk_tokens: int | None = None,
) -> Number:
    """Bytes the engine gives its KV cache on one GPU (module docstring), at least 0; `buffers_bytes`
    (TensorRT-LLM's activation, runtime and decoder buffers; vLLM's gathered expert buffers, which
    its profiled activation peak holds) come out of the free memory first. `attention_dp`: the
    attention ranks of a data-parallel-attention plan (1 otherwise), SGLang's --dp, its --tp then
    tp x dp (`sglang_reserved_bytes`). `chunk_tokens`: SGLang's --chunked-prefill-size as given (the
    whole server's, before its division by --dp), which its reserve follows (server_args.py
    `_handle_gpu_memory_settings` reads `self.chunked_prefill_size`, the user's or the default);
    None: the engine's default on this GPU (`max_batched_tokens`)."""
    preset = ENGINES[name]
    m, w = np.asarray(gpu_memory_bytes, dtype=float), np.asarray(weights_bytes, dtype=float)
    if preset.kv_rule == "total-fraction":
        free = preset.kv_fraction * m - w - RUNTIME_RESERVED_BYTES - np.asarray(buffers_bytes, dtype=float)
    elif preset.kv_rule == "sglang":
        chunk = max_batched_tokens(name, float(np.max(m))) if chunk_tokens is None else int(chunk_tokens)
        dp = np.asarray(attention_dp)
        free = m - sglang_reserved_bytes(m, chunk, np.asarray(tp) * dp, pp, dp) - w
    else:  # a fraction of what the weights, the runtime and the engine's buffers leave
        free = preset.kv_fraction * (m - w - RUNTIME_RESERVED_BYTES - np.asarray(buffers_bytes, dtype=float))
    return np.maximum(free, 0.0)
