"""`vllm serve` for a serving plan: one server per data-parallel replica.

The model id is the Hugging Face id or local directory the user names (`--hf-id`, or the
directory of the config.json given as --model, or the `hf_id` a preset's source names): a
preset name is not a model id. Checked with
tools/check_emit.py against vLLM's own `EngineArgs` parser and `create_engine_config`. Version
`0.34`: vLLM 0.34.0 (PyPI); `VLLM_PP_LAYER_PARTITION` sets the priced stage split.

Data-parallel attention (ep = tp x dp > tp) is one server, one API endpoint, for all dp engine
ranks (`--data-parallel-size dp --enable-expert-parallel`). Over several servers it is one
`vllm serve` a server (vLLM's docs/serving/data_parallel_deployment.md, internal load balancing):
each with `--data-parallel-size-local` (its ranks), the head's address and RPC port; the others
`--headless` (engines, no API server) with `--data-parallel-start-rank`, which the head leaves
out (with it, a server that is not headless balances only its own ranks: vLLM's hybrid mode,
engine/arg_utils.py `create_engine_config`). The experts' tokens travel by vLLM's default
all2all backend, allgather_reducescatter, written out: what `engines.serving` prices for vLLM
(`engines.engine_presets.EnginePreset.moe_dispatcher`).
"""

from __future__ import annotations

from typing import Any

from shardwise.emit.checkpoint import check_checkpoint, stored_note
from shardwise.emit.facts import i, stage_layers
from shardwise.emit.launch import EmitError, Launch, Node, Var, flag_groups
from shardwise.emit.replicas import Replica, replicas
from shardwise.emit.vllm_kv import KvPool
from shardwise.specs import Scenario

VERSIONS = ("0.34",)

# KV-cache precisions vLLM stores (`--kv-cache-dtype`), by shardwise's name
KV_DTYPES = {"bf16": "auto", "fp16": "auto", "fp8": "fp8"}
# weights vLLM quantises itself at load (`--quantization`); the others come pre-quantised
WEIGHT_QUANTIZATION = {"fp8": "fp8"}
TODO = ("weights: the model id must name a checkpoint vLLM can load (Hugging Face id or local directory)",)
# over several servers: the head server's address, which the user's cluster knows, and a port on it
HEAD_ADDR = Var("$HEAD_ADDR", "127.0.0.1")
RPC_PORT = "13345"  # any free port of the head server (vLLM's data-parallel deployment docs use 13345)
HEAD_TODO = (
    f"{HEAD_ADDR.text}: the head server's address, reachable from every server (--data-parallel-address), "
    f"and port {RPC_PORT} free on it (--data-parallel-rpc-port), and the ports from 29500 its data-parallel "
    "group's torch.distributed set-up takes (vLLM's data_parallel_master_port)"
)


def deepep_low_latency_bytes(hidden: int, experts: int, tokens: int) -> int:
    """DeepEP's low-latency RDMA buffer on each GPU for `tokens` a rank dispatches at most (vLLM
    sizes it by --max-num-batched-tokens: fused_moe/layer.py, all2all_utils.py): two send and two
    receive buffers of `experts` x `tokens` messages of the hidden state in bf16 plus 16 bytes of
    control (dispatch) or one bf16 pair per 128 channels (combine), DeepEP csrc/config.hpp
    `LowLatencyLayout`."""
    scales = hidden // 128
    dispatch_msg = 16 + max(2 * hidden, hidden + 4 * scales)
    combine_msg = 4 * scales + 2 * hidden
    send = max(tokens * dispatch_msg, experts * tokens * combine_msg)
    receive = experts * tokens * max(dispatch_msg, combine_msg)
    return 2 * (send + receive)


def data_parallel_nodes(tp: int, dp: int, gpus_per_node: int) -> tuple[Node, ...]:
    """One command a server for dp engine ranks of tp GPUs each (module docstring): each server
    holds gpus_per_node / tp ranks, the last the rest; the head (server 0) the first and the API
    server, the others headless from their first rank on."""
    per = gpus_per_node // tp
    servers = -(-dp // per)
    nodes = []
    for r in range(servers):
        local, start = min(per, dp - r * per), r * per
        ranks = f"ranks {start}-{start + local - 1}" if local > 1 else f"rank {start}"
        role = f"head: the API server and data-parallel {ranks}" if r == 0 else f"headless: data-parallel {ranks}"
        args = (("--data-parallel-size-local", str(local)),)
        if r:
            args += (("--data-parallel-start-rank", str(start)), ("--headless",))
        nodes.append(Node(role, args))
    return tuple(nodes)


def max_model_len(m: Any, priced_len: int, pool: KvPool | None, max_batched_tokens: int) -> tuple[int, str]:
    """--max-model-len and the note that says what it is: the model's serving context
    (`Model.serving_context`: config.json max_position_embeddings, which vLLM takes when the flag is
    left out: config/model.py `_get_and_verify_max_len`) where one replica's KV cache holds a request
    that long as vLLM counts it, in whole blocks (`emit.vllm_kv`: vLLM refuses to start otherwise),
    and the priced request is no longer; else the priced request's prompt + output, and the server
    refuses longer requests. A priced request that its blocks do not hold is refused here, as vLLM
    would refuse to start. The length prices nothing: vLLM sizes its KV pool by memory
    (gpu_memory_utilization) and profiles with --max-num-batched-tokens, whatever --max-model-len is."""
    context = m.serving_context
    if pool is not None and not pool.fits(priced_len, max_batched_tokens):
        raise EmitError(
            f"--emit vllm: vLLM would not start: a request of the priced {priced_len:,} tokens needs "
            f"{-(-priced_len // pool.block)} KV blocks of {pool.block} tokens in every layer, more than the "
            f"{pool.blocks:,} a replica's KV cache holds as priced; price shorter requests or a larger plan"
        )
    held = (
        "" if pool is None else f"{pool.blocks:,} blocks of {pool.block} tokens ({pool.blocks * pool.block:,} tokens)"
    )
    if priced_len <= context and pool is not None and pool.fits(context, max_batched_tokens):
        default = ", vLLM's default" if int(m.max_position_embeddings) == context else ""
        return context, (
            f"--max-model-len {context}: {m.name}'s {m.context_words}{default}; the KV cache holds {held} per "
            f"replica as priced (priced with {priced_len:,}-token requests)"
        )
    if priced_len > context:
        why = f"longer than {m.name}'s {m.context_words}: vLLM refuses it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"
    else:
        why = f"{m.name}'s {m.context_words} does not fit the KV cache ({held or 'fewer tokens'} per replica as priced)"
    return (
        priced_len,
        f"--max-model-len {priced_len}: the priced request's prompt + output; {why}; longer requests are refused",
    )


def launch(
    scn: Scenario,
    workload: Any,
    model_id: str | None,
    version: str = VERSIONS[0],
    max_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    asked: int | None = None,
    kv_pool: KvPool | None = None,
    stored: Any = None,
) -> Launch:
    """The server of one replica for the priced serving estimate's scenario and workload. Under
    in-flight batching `max_batched_tokens` is the chunk budget it was priced with and
    `max_num_seqs` the sequences one replica ran at once (`engines.inflight`); without them the
    plan is a static batch: its prompts prefilled at once, every sequence at once. `asked`: the
    requests in flight the estimate was asked for (--concurrency), where they size --max-num-seqs.
    `kv_pool`: one replica's KV cache as priced, in vLLM's blocks (`emit.vllm_kv`); --max-model-len is
    the model's context where they hold it (`max_model_len`). `stored`: what the checkpoint stores
    (`emit.checkpoint.Stored`), refused where it is not (or not known to be) what was priced."""
    m, p, wl = scn.model, scn.plan, workload
    check_checkpoint("vllm", m.name, model_id, wl.weight_precision, stored)
    if wl.kv_precision not in KV_DTYPES:
        allowed = ", ".join(KV_DTYPES)
        raise EmitError(
            f"--emit vllm: KV-cache precision {wl.kv_precision} is not one vLLM stores; plan with {allowed}"
        )
    if wl.runtime == "cpp-eager":
        raise EmitError("--emit vllm: runtime cpp-eager is not vLLM's; price --runtime graphs or pytorch-eager")
    tp, pp, dp, cp = i(p.tp), i(p.pp), i(p.dp), i(p.cp)
    if cp > 1 and not m.kv_lora_rank:
        raise EmitError(
            "--emit vllm: context parallelism: vLLM 0.34's --prefill-context-parallel-size runs only with latent "
            "attention (MLA) backends; price plans without cp"
        )
    # data-parallel attention (ep x etp > tp, as `engines.dp_attention` prices it): one server of dp
    # engine ranks whose whole experts spread over all dp x tp GPUs (vLLM --data-parallel-size with
    # --enable-expert-parallel: ep = tp x dp, etp 1)
    from shardwise.engines.dp_attention import dp_attention as experts_beyond_tp

    dp_attention = m.is_moe and bool(experts_beyond_tp(p))
    whole = i(p.ep) == tp * dp and i(p.expert_tp) == 1
    per_node = i(scn.cluster.gpus_per_node)
    if dp_attention and (not whole or pp > 1 or cp > 1):
        raise EmitError(
            f"--emit vllm: data-parallel attention with ep={i(p.ep)}"
            + (f", pp={pp}" if pp > 1 else "")
            + (f", cp={cp}" if cp > 1 else "")
            + f": vLLM's --data-parallel-size with --enable-expert-parallel spreads whole experts over all "
            f"dp x tp = {tp * dp} GPUs (ep = tp x dp, no pipeline or cp); other layouts are not emitted"
        )
    if dp_attention and tp * dp > per_node and per_node % tp:
        raise EmitError(
            f"--emit vllm: data-parallel attention over {-(-tp * dp // per_node)} servers: each data-parallel "
            f"rank's tp={tp} GPUs must sit in one server of {per_node} GPUs; plan a tp that divides {per_node}"
        )
    nodes = data_parallel_nodes(tp, dp, per_node) if dp_attention and tp * dp > per_node else ()
    if m.is_moe and not dp_attention and i(p.ep) not in (1, tp):
        raise EmitError(
            f"--emit vllm: expert parallelism ep={i(p.ep)}: vLLM's spans a server's TP ranks (ep=1 or {tp}) "
            f"or, with data-parallel attention, all of them (ep={tp * dp})"
        )
    per_replica = -(-i(wl.batch) // dp) if max_num_seqs is None else int(max_num_seqs)
    priced_len = i(wl.input_len) + i(wl.output_len)
    budget = max_batched_tokens
    if budget is None:  # static batching prices each batch's prompts prefilled at once
        budget = max(per_replica * i(wl.input_len), priced_len)
    max_len, length_note = max_model_len(m, priced_len, kv_pool, int(budget))
    notes = []
    if (weights := stored_note("vllm", str(model_id), wl.weight_precision, stored)) is not None:
        notes.append(weights)
    if dp_attention and nodes:
        notes.append(
            f"one API endpoint for all {dp} data-parallel ranks (attention data-parallel, experts over all GPUs) "
            f"on {len(nodes)} servers: run each server's command below, the head's first; the others are "
            "headless (engines only)"
        )
    elif dp_attention:
        notes.append(f"one server for all {dp} data-parallel ranks (attention data-parallel, experts over all GPUs)")
    copies: tuple[Replica, ...] = ()
    if dp_attention:
        # vLLM 0.34's backends (config/parallel.py All2AllBackend); deepep_high_throughput turns CUDA graphs
        # off under data parallelism (config/compilation.py), deepep_low_latency keeps them
        buffer = deepep_low_latency_bytes(i(m.hidden), i(m.experts), int(budget))
        notes.append(
            "priced with vLLM's default all2all backend, written out: allgather_reducescatter (every rank gathers "
            "all ranks' tokens, the outputs reduce-scattered). DeepEP's move fewer bytes and were not priced: "
            "--all2all-backend deepep_low_latency (a copy per chosen expert) sizes its RDMA buffer by "
            f"--max-num-batched-tokens ({buffer / 1e9:.1f} GB per GPU here, not in the priced memory), "
            "--all2all-backend deepep_high_throughput (a copy per server) turns CUDA graphs off under data parallelism"
        )
    else:
        copies, note = replicas("vllm", dp, tp * pp * cp, i(scn.cluster.gpus_per_node))
        notes += [note] if note else []
    servers = -(-tp * pp * cp // i(scn.cluster.gpus_per_node))
    if servers > 1:  # vLLM's distributed serving: a replica beyond one server runs on a Ray cluster
        notes.append(
            f"one replica spans {servers} servers: start a Ray cluster over them first (`ray start --head` on "
            "one, `ray start --address=HEAD:6379` on the others) and run this on the head server (or vLLM's "
            "--nnodes/--node-rank/--master-addr, --headless on the others)"
        )
    asked = i(wl.batch) if max_num_seqs is None else asked
    if asked is not None and per_replica == -(-asked // dp):  # a copied command runs no more at once
        notes.append(
            f"--max-num-seqs {per_replica}: sized for the load asked, --concurrency {asked:,} ({per_replica:,} per "
            f"{'rank' if dp_attention else 'replica'}): the server runs no more at once; raise it (or price a "
            "larger --concurrency) to serve more"
        )
    notes.append(length_note)
    env: tuple[tuple[str, str], ...] = ()
    if pp > 1:
        env = (("VLLM_PP_LAYER_PARTITION", ",".join(str(n) for n in stage_layers(m, p))),)
    args = flag_groups(
        ("--tensor-parallel-size", str(tp), "--pipeline-parallel-size", str(pp)),
        ("--max-num-seqs", str(per_replica), "--max-model-len", str(max_len)),
        ("--max-num-batched-tokens", str(int(budget))),
        ("--kv-cache-dtype", KV_DTYPES[wl.kv_precision]),
        ("--quantization", WEIGHT_QUANTIZATION[wl.weight_precision])
        if wl.weight_precision in WEIGHT_QUANTIZATION and not (stored and stored.quantised)
        else None,
        # context parallelism as priced (`engines.forward.serving_context_parallel`): the prompt split over cp
        # ranks, each keeping 1/cp of the cache, which decoding attends to on every rank: PCP with DCP over
        # the same ranks (config/parallel.py: DCP may span the PCP axis; DCP alone would replicate the cache)
        ("--prefill-context-parallel-size", str(cp), "--decode-context-parallel-size", str(cp)) if cp > 1 else None,
        ("--data-parallel-size", str(dp)) if dp_attention else None,
        ("--data-parallel-address", HEAD_ADDR) if nodes else None,
        ("--data-parallel-rpc-port", RPC_PORT) if nodes else None,
        ("--enable-expert-parallel",) if m.is_moe and i(p.ep) > 1 else None,
        ("--all2all-backend", "allgather_reducescatter") if dp_attention else None,
        ("--disable-custom-all-reduce",) if wl.custom_all_reduce == "none" and tp > 1 else None,
        ("--enforce-eager",) if wl.runtime == "pytorch-eager" else None,
    )
    todo = (*TODO, HEAD_TODO) if nodes else TODO
    return Launch(
        "vllm",
        version,
        ("vllm", "serve", model_id),
        args,
        env=env,
        notes=tuple(notes),
        todo=todo,
        nodes=nodes,
        replicas=copies,
    )
