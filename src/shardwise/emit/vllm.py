"""`vllm serve` for a serving plan: one server per data-parallel replica.

The model id is the Hugging Face id or local directory the user names (`--hf-id`, or the
directory of the config.json given as --model, or the `hf_id` a preset's source names): a
preset name is not a model id. Checked with
tools/check_emit.py against vLLM's own `EngineArgs` parser and `create_engine_config`. Version
`0.34`: vLLM 0.34.0 (PyPI); `VLLM_PP_LAYER_PARTITION` sets the priced stage split.
"""

from __future__ import annotations

from typing import Any

from shardwise.emit.facts import i, stage_layers
from shardwise.emit.launch import EmitError, Launch, flag_groups
from shardwise.specs import Scenario

VERSIONS = ("0.34",)

# KV-cache precisions vLLM stores (`--kv-cache-dtype`), by shardwise's name
KV_DTYPES = {"bf16": "auto", "fp16": "auto", "fp8": "fp8"}
# weights vLLM quantises itself at load (`--quantization`); the others come pre-quantised
WEIGHT_QUANTIZATION = {"fp8": "fp8"}
PREQUANTISED = {
    "int8": "an int8 checkpoint (GPTQ/compressed-tensors W8A16), detected from its config",
    "int4": "an int4 checkpoint (AWQ or GPTQ), detected from its config",
    "nvfp4": "an NVFP4 checkpoint (ModelOpt), detected from its config",
    "mxfp4": "an MXFP4 checkpoint (e.g. gpt-oss), detected from its config",
}

TODO = ("weights: the model id must name a checkpoint vLLM can load (Hugging Face id or local directory)",)


def launch(
    scn: Scenario,
    workload: Any,
    model_id: str | None,
    version: str = VERSIONS[0],
    max_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
) -> Launch:
    """The server of one replica for the priced serving estimate's scenario and workload. Under
    in-flight batching `max_batched_tokens` is the chunk budget it was priced with and
    `max_num_seqs` the sequences one replica ran at once (`engines.inflight`); without them the
    plan is a static batch: its prompts prefilled at once, every sequence at once."""
    m, p, wl = scn.model, scn.plan, workload
    if not model_id:
        raise EmitError(
            f"--emit vllm: {m.name!r} is a shardwise preset, not a model vLLM can load; give --hf-id "
            "ORG/NAME (or --model path/to/config.json)"
        )
    if wl.kv_precision not in KV_DTYPES:
        allowed = ", ".join(KV_DTYPES)
        raise EmitError(
            f"--emit vllm: KV-cache precision {wl.kv_precision} is not one vLLM stores; plan with {allowed}"
        )
    if wl.runtime == "cpp-eager":
        raise EmitError("--emit vllm: runtime cpp-eager is not vLLM's; price --runtime graphs or pytorch-eager")
    if i(p.cp) > 1:
        raise EmitError("--emit vllm: context parallelism is not emitted for vLLM; price plans without cp")
    tp, pp, dp = i(p.tp), i(p.pp), i(p.dp)
    # data-parallel attention (ep x etp > tp, as `engines.dp_attention` prices it): one server of dp
    # engine ranks whose whole experts spread over all dp x tp GPUs (vLLM --data-parallel-size with
    # --enable-expert-parallel: ep = tp x dp, etp 1)
    from shardwise.engines.dp_attention import dp_attention as experts_beyond_tp

    dp_attention = m.is_moe and bool(experts_beyond_tp(p))
    whole = i(p.ep) == tp * dp and i(p.expert_tp) == 1
    if dp_attention and (not whole or pp > 1 or tp * dp > i(scn.cluster.gpus_per_node)):
        raise EmitError(
            f"--emit vllm: data-parallel attention with ep={i(p.ep)}: vLLM's --data-parallel-size with "
            f"--enable-expert-parallel spreads whole experts over all dp x tp = {tp * dp} GPUs of one server "
            "(ep = tp x dp, no pipeline); other layouts, or one over several servers, are not emitted"
        )
    if m.is_moe and not dp_attention and i(p.ep) not in (1, tp):
        raise EmitError(
            f"--emit vllm: expert parallelism ep={i(p.ep)}: vLLM's spans a server's TP ranks (ep=1 or {tp}) "
            f"or, with data-parallel attention, all of them (ep={tp * dp})"
        )
    per_replica = -(-i(wl.batch) // dp) if max_num_seqs is None else int(max_num_seqs)
    max_len = i(wl.input_len) + i(wl.output_len)
    budget = max_batched_tokens
    if budget is None:  # static batching prices each batch's prompts prefilled at once
        budget = max(per_replica * i(wl.input_len), max_len)
    notes = []
    if wl.weight_precision in PREQUANTISED:
        notes.append(f"weights {wl.weight_precision}: {PREQUANTISED[wl.weight_precision]}")
    if dp_attention:
        notes.append(f"one server for all {dp} data-parallel ranks (attention data-parallel, experts over all GPUs)")
        # vLLM 0.34's backends (config/parallel.py All2AllBackend; pplx and naive were removed: they fall
        # back to allgather_reducescatter); deepep_high_throughput turns CUDA graphs off under data
        # parallelism (config/compilation.py), deepep_low_latency keeps them
        notes.append(
            "priced with a true all-to-all (one copy per chosen expert); vLLM's default allgather_reducescatter "
            "moves every token to every rank: add --all2all-backend deepep_low_latency (CUDA graphs kept) or "
            "--all2all-backend deepep_high_throughput (CUDA graphs off under data parallelism: price "
            "--runtime pytorch-eager), with DeepEP installed"
        )
    elif dp > 1:
        notes.append(f"{dp} replicas: run this server on each group of {tp * pp} GPUs behind a load balancer")
    servers = -(-tp * pp // i(scn.cluster.gpus_per_node))
    if servers > 1:  # vLLM's distributed serving: a replica beyond one server runs on a Ray cluster
        notes.append(
            f"one replica spans {servers} servers: start a Ray cluster over them first (`ray start --head` on "
            "one, `ray start --address=HEAD:6379` on the others) and run this on the head server (or vLLM's "
            "--nnodes/--node-rank/--master-addr, --headless on the others)"
        )
    env: tuple[tuple[str, str], ...] = ()
    if pp > 1:
        env = (("VLLM_PP_LAYER_PARTITION", ",".join(str(n) for n in stage_layers(m, p))),)
    args = flag_groups(
        ("--tensor-parallel-size", str(tp), "--pipeline-parallel-size", str(pp)),
        ("--max-num-seqs", str(per_replica), "--max-model-len", str(max_len)),
        ("--max-num-batched-tokens", str(int(budget))),
        ("--kv-cache-dtype", KV_DTYPES[wl.kv_precision]),
        ("--quantization", WEIGHT_QUANTIZATION[wl.weight_precision])
        if wl.weight_precision in WEIGHT_QUANTIZATION
        else None,
        ("--data-parallel-size", str(dp)) if dp_attention else None,
        ("--enable-expert-parallel",) if m.is_moe and i(p.ep) > 1 else None,
        ("--disable-custom-all-reduce",) if wl.custom_all_reduce == "none" and tp > 1 else None,
        ("--enforce-eager",) if wl.runtime == "pytorch-eager" else None,
    )
    return Launch("vllm", version, ("vllm", "serve", model_id), args, env=env, notes=tuple(notes), todo=TODO)
