"""The serving engines' presets in words and numbers, for `shardwise presets engines` and
`presets show ENGINE`: each `engines.engine_presets.EnginePreset` field that a user chooses between
engines by, and the token budget and sequence cap its defaults give on common GPUs."""

from __future__ import annotations

from typing import Any

from shardwise.engines.engine_attention import kernels_by_arch
from shardwise.engines.engine_presets import ENGINES, EnginePreset, max_batched_tokens, max_sequences

# GPUs whose memory sets the engines' default budgets and caps (vLLM also tells the A100 apart)
REFERENCE_GPUS = ("rtx-4090", "l40s", "a100-sxm4-80gb", "h100-sxm5-80gb", "h200-sxm-141gb", "b200-sxm-180gb")

KV_RULES = {
    "free-fraction": "{f:g} of the memory left after the weights and the runtime",
    "total-fraction": "{f:g} of the GPU's memory, less the weights and the runtime",
    "sglang": "the memory less SGLang's reserve (activations of a chunk, CUDA graphs, groups) and the weights",
    "all-free": "all the memory left after the weights and the runtime (the -c the user sizes)",
}
ALL_REDUCE = {
    "none": "NCCL",
    "trtllm": "TensorRT-LLM's custom all-reduce on small messages",
    "vllm": "vLLM's custom all-reduce on small messages",
    "sglang": "SGLang's custom all-reduce on small messages",
}


def sequence_cap_text(e: EnginePreset) -> str:
    """How the engine caps the sequences in flight per replica (`engines.engine_presets`)."""
    if e.seqs_from_kv_pool:
        return "max_running_requests unset: min(one GPU's KV-cache tokens / 2, a request pool of 2048-4096)"
    if e.slots_per_micro_batch:
        return (
            "max_batch_size as trtllm-bench sets it for the workload (the requests the KV cache holds, "
            "at most 4096) / pp; 2048 without one"
        )
    if e.seqs_within_budget:
        return "max_num_seqs: 1024 on GPUs of >= 70 GiB other than A100, else 256; at most the token budget"
    if e.name == "llama.cpp":
        return (
            "llama-server's slots: 4 without -np (n_parallel auto, one unified KV cache); --concurrency N "
            "prices -np N, launched with -c sized for N requests"
        )
    return "no engine default read: serve lets at most 2048 run (the model's own cap; --concurrency sets it)"


def kv_rule_text(e: EnginePreset) -> str:
    text = KV_RULES[e.kv_rule].format(f=e.kv_fraction)
    return text + (", and the engine's buffers as trtllm-bench sizes them" if e.bench_buffers else "")


def defaults_on(e: EnginePreset) -> dict[str, dict[str, int | None]]:
    """{GPU preset: {"token_budget": ..., "max_sequences": ...}} from the engine's defaults; the cap
    None where the KV cache or the workload sets it (`sequence_cap_text`)."""
    from shardwise import presets

    out = {}
    for name in REFERENCE_GPUS:
        memory = float(presets.gpu(name).memory_bytes)
        fixed = e.seqs_within_budget or e.name == "llama.cpp"  # vLLM's max_num_seqs, llama-server's 4 slots
        out[name] = {
            "token_budget": max_batched_tokens(e.name, memory, name),
            "max_sequences": max_sequences(e.name, memory, name) if fixed else None,
        }
    return out


def describe_engines() -> list[dict[str, Any]]:
    """One row per engine: what `presets engines` lists and `presets show ENGINE` prints."""
    rows = []
    for e in ENGINES.values():
        rows.append(
            {
                "name": e.name,
                "version": e.version,
                "runtime": e.runtime,
                "all_reduce": ALL_REDUCE.get(e.all_reduce, e.all_reduce),
                "kv_cache": kv_rule_text(e),
                "sequence_cap": sequence_cap_text(e),
                "nvls": e.nvls,
                "weight_formats": list(e.weight_formats) or ["bf16", "fp16"],
                "pipeline_stage_host_s": e.stage_host_s,
                "pipeline_stage_host_per_request_s": e.stage_host_per_request_s,
                "pipeline_stage_overhead_s": e.stage_overhead_s,
                "defaults_by_gpu": defaults_on(e),
                "attention_kernel": kernels_by_arch(e.name),  # `engines.engine_attention`
                "source": e.source or "engines/engine_presets.py (module docstring)",
            }
        )
    return rows


def llama_server_note(engine: str, concurrency: int | None, saturated: bool, tokens_per_request: int) -> str:
    """How llama-server must be launched for the sequences serve prices at once (engine_presets
    `LLAMA_SERVER_SLOTS`): -np N and a -c of N requests' tokens (an explicit -np splits -c evenly over
    the slots), or its default 4 slots; "" for other engines and loads its 4 slots hold
    (`saturated`: --max-throughput or --request-rate)."""
    from shardwise.engines.engine_presets import LLAMA_SERVER_SLOTS

    if engine != "llama.cpp" or not (saturated or (concurrency or 1) > LLAMA_SERVER_SLOTS):
        return ""
    if concurrency is not None and concurrency > LLAMA_SERVER_SLOTS:
        return (
            f"llama.cpp: --concurrency {concurrency:,} priced as llama-server launched for it: each replica's "
            f"server with -np n -c n x {tokens_per_request:,} tokens, n its share of the {concurrency:,} "
            f"requests (one replica: -np {concurrency} -c {concurrency * tokens_per_request:,}); without -np "
            f"it runs {LLAMA_SERVER_SLOTS}"
        )
    return (
        f"llama.cpp: at most {LLAMA_SERVER_SLOTS} sequences at once, llama-server's slots without -np; more "
        f"needs -np N and -c of N x {tokens_per_request:,} tokens (--concurrency N prices that)"
    )
