"""`python -m sglang.launch_server` for a serving plan: one server per replica, or, under
data-parallel attention, one server for all its attention ranks.

Every flag is one of SGLang 0.5.6.post2's own (PyPI sglang 0.5.6.post2, sglang/srt/server_args.py
`ServerArgs.add_cli_args`; the version `engines.engine_presets` reads SGLang's defaults from):
`--model-path`, `--tp-size`, `--pp-size`, `--dp-size`, `--enable-dp-attention`, `--ep-size`,
`--moe-a2a-backend` (choices none, deepep, mooncake, ascend_fuseep), `--chunked-prefill-size`,
`--mem-fraction-static`, `--max-running-requests`, `--kv-cache-dtype` (auto, fp8_e5m2, fp8_e4m3,
bf16, bfloat16, fp4_e2m1), `--context-length`, `--quantization`, `--disable-custom-all-reduce`,
`--disable-cuda-graph`, `--nnodes`, `--node-rank`, `--dist-init-addr`. What the server does with
them, in the same file: under `--enable-dp-attention` `--tp-size` is every GPU of the server
(`tp_size % dp_size == 0`, attention TP = tp / dp) and `_handle_data_parallelism` divides
`--chunked-prefill-size` by `--dp-size`; `--max-running-requests` is divided by `--dp-size` there too
(managers/tp_worker.py); `_handle_gpu_memory_settings` sets `mem_fraction_static` = round((M -
reserved) / M, 3) where it is not given, which `engines.engine_presets.sglang_reserved_bytes` prices:
written out, so that the server keeps the KV pool priced. The stage split is
`SGLANG_PP_LAYER_PARTITION` (distributed/utils.py `get_pp_indices`); a context beyond the model's
needs `SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1` (configs/model_config.py).
"""

from __future__ import annotations

from typing import Any

from shardwise.emit.checkpoint import check_checkpoint, stored_note
from shardwise.emit.facts import i, stage_layers
from shardwise.emit.launch import EmitError, Launch, Node, Var, flag_groups
from shardwise.emit.replicas import Replica, replicas
from shardwise.specs import Scenario

VERSIONS = ("0.5.6.post2",)

# KV-cache precisions SGLang stores (`--kv-cache-dtype`), by shardwise's name ("auto": the model's dtype)
KV_DTYPES = {"bf16": "auto", "fp16": "auto", "fp8": "fp8_e4m3"}
# weights SGLang quantises itself at load (`--quantization fp8` on a 16-bit checkpoint)
WEIGHT_QUANTIZATION = {"fp8": "fp8"}
TODO = ("weights: the model path must name a checkpoint SGLang can load (Hugging Face id or local directory)",)
HEAD_ADDR = Var("$HEAD_ADDR", "127.0.0.1")
DIST_PORT = "20000"  # any free port of the first server (SGLang's multi-node docs use 20000 or 5000)
DIST_ADDR = Var(f"{HEAD_ADDR.text}:{DIST_PORT}", f"{HEAD_ADDR.sample}:{DIST_PORT}")
HEAD_TODO = (
    f"{HEAD_ADDR.text}: the first server's address, reachable from every server (--dist-init-addr), "
    f"and port {DIST_PORT} free on it"
)


def layout(scn: Scenario) -> tuple[bool, int]:
    """(data-parallel attention, the GPUs one server instance spans) of the plan, refusing in one
    line what SGLang does not run: under data-parallel attention --tp-size is all tp x dp GPUs,
    attention TP = tp, the experts over --ep-size of them with MoE TP = tp x dp / ep; otherwise
    the experts over ep of a replica's tp GPUs, MoE TP = tp / ep."""
    from shardwise.engines.dp_attention import dp_attention as experts_beyond_tp

    m, p = scn.model, scn.plan
    tp, pp, dp, ep, etp = i(p.tp), i(p.pp), i(p.dp), i(p.ep), i(p.expert_tp)
    dp_attention = m.is_moe and bool(experts_beyond_tp(p))
    if i(p.cp) > 1:
        raise EmitError("--emit sglang: context parallelism is not emitted for SGLang; price plans without cp")
    if dp_attention and pp > 1:
        raise EmitError(f"--emit sglang: data-parallel attention with pp={pp} is not emitted; price it without pp")
    group = tp * dp if dp_attention else tp
    if m.is_moe and (ep * etp != group or group % ep):
        raise EmitError(
            f"--emit sglang: experts over ep={ep} with expert tp={etp}: SGLang splits each MoE layer's "
            f"{group} GPUs (--tp-size {group}) into --ep-size groups, expert TP = {group} / ep; plan ep x etp = {group}"
        )
    return dp_attention, group * pp


def nodes_of(gpus: int, per_node: int) -> tuple[Node, ...]:
    """One server instance over several servers: the same command on each, with its --node-rank
    (SGLang's multi-node launch: --nnodes, --node-rank, --dist-init-addr of the first)."""
    if gpus <= per_node:
        return ()
    if gpus % per_node:
        raise EmitError(
            f"--emit sglang: one server instance of {gpus} GPUs over servers of {per_node}: SGLang puts "
            f"{gpus} / --nnodes GPUs on each; plan a layout whose GPUs fill whole servers"
        )
    n = gpus // per_node
    return tuple(
        Node("the first: the API server and rank 0" if r == 0 else f"node rank {r}", (("--node-rank", str(r)),))
        for r in range(n)
    )


def mem_fraction_static(scn: Scenario, dp_attention: bool, chunk: int | None = None) -> float:
    """`mem_fraction_static` as priced: round((M - reserved) / M, 3) with SGLang's reserve
    (`engines.engine_presets.sglang_reserved_bytes`; --tp-size tp x dp under data-parallel attention)
    at `chunk`, the --chunked-prefill-size the KV pool was priced with (None: SGLang's default here)."""
    from shardwise.engines.engine_presets import max_batched_tokens, sglang_reserved_bytes

    p, m = scn.plan, float(scn.cluster.gpu.memory_bytes)
    dp = i(p.dp) if dp_attention else 1
    chunk = max_batched_tokens("sglang", m) if chunk is None else chunk
    reserved = float(sglang_reserved_bytes(m, chunk, i(p.tp) * dp, i(p.pp), dp))
    return round((m - reserved) / m, 3)


def launch(
    scn: Scenario,
    workload: Any,
    model_id: str | None,
    version: str = VERSIONS[0],
    max_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    asked: int | None = None,
    kv_pool: Any = None,
    stored: Any = None,
) -> Launch:
    """The server of one replica (as `emit.vllm.launch`: `max_batched_tokens` the chunk budget and
    `max_num_seqs` the sequences a replica, under data-parallel attention a rank, ran at once in
    flight; None: a static batch; `stored` what the checkpoint stores, `emit.checkpoint`)."""
    m, p, wl = scn.model, scn.plan, workload
    check_checkpoint("sglang", m.name, model_id, wl.weight_precision, stored)
    if wl.kv_precision not in KV_DTYPES:
        raise EmitError(
            f"--emit sglang: KV-cache precision {wl.kv_precision} is not one SGLang stores; plan with "
            + ", ".join(KV_DTYPES)
        )
    if wl.runtime == "cpp-eager":
        raise EmitError("--emit sglang: runtime cpp-eager is not SGLang's; price --runtime graphs or pytorch-eager")
    dp_attention, gpus = layout(scn)
    tp, pp, dp, ep = i(p.tp), i(p.pp), i(p.dp), i(p.ep)
    nodes = nodes_of(gpus, i(scn.cluster.gpus_per_node))
    per_rank = -(-i(wl.batch) // dp) if max_num_seqs is None else int(max_num_seqs)
    budget = max_batched_tokens
    if budget is None:  # static batching prices each batch's prompts prefilled at once
        budget = max(per_rank * i(wl.input_len), i(wl.input_len) + i(wl.output_len))
    ranks = dp if dp_attention else 1  # SGLang divides the chunk and the running cap by --dp-size
    # the KV pool was priced at the chunk the simulation ran (in flight), else at SGLang's default
    fraction = mem_fraction_static(scn, dp_attention, None if max_batched_tokens is None else int(budget) * ranks)
    notes = [
        f"--mem-fraction-static {fraction}: weights and KV pool as priced (SGLang's own rule on this GPU at "
        + ("its default chunk" if max_batched_tokens is None else f"the chunk priced, {int(budget) * ranks:,} tokens")
        + ", as shardwise reads _handle_gpu_memory_settings), written out so that the server keeps that pool"
    ]
    if (weights := stored_note("sglang", str(model_id), wl.weight_precision, stored)) is not None:
        notes.append(weights)
    copies: tuple[Replica, ...] = ()
    if dp_attention:
        notes.append(
            f"one server for all {dp} attention ranks (--tp-size {tp * dp}, attention TP {tp}), the experts over "
            f"--ep-size {ep}; tokens reach the experts by SGLang's default --moe-a2a-backend none (priced: each "
            "rank gathers the group's hidden states), written out; DeepEP's were not priced. SGLang divides "
            f"--chunked-prefill-size and --max-running-requests by --dp-size: {int(budget)} and {per_rank} per rank"
        )
    else:
        copies, note = replicas("sglang", dp, gpus, i(scn.cluster.gpus_per_node))
        notes += [note] if note else []
    if nodes:
        notes.append(
            f"one server instance spans {len(nodes)} servers: run the command on each, --node-rank 0 first "
            "(SGLang's multi-node launch)"
        )
    asked = i(wl.batch) if max_num_seqs is None else asked
    if asked is not None and per_rank == -(-asked // dp):
        notes.append(
            f"--max-running-requests {per_rank * ranks}: sized for the load asked, --concurrency {asked:,}: the "
            "server runs no more at once; raise it (or price a larger --concurrency) to serve more"
        )
    priced_len = i(wl.input_len) + i(wl.output_len)
    env: tuple[tuple[str, str], ...] = ()
    if pp > 1:
        env = (("SGLANG_PP_LAYER_PARTITION", ",".join(str(n) for n in stage_layers(m, p))),)
    longer = priced_len > m.serving_context
    if longer:
        env += (("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "1"),)
        notes.append(f"--context-length {priced_len}: the priced request, longer than {m.name}'s {m.context_words}")
    quantize = wl.weight_precision in WEIGHT_QUANTIZATION and not (stored is not None and stored.quantised)
    args = flag_groups(
        ("--tp-size", str(tp * ranks), "--pp-size", str(pp)),
        ("--dp-size", str(dp), "--enable-dp-attention") if dp_attention else None,
        ("--ep-size", str(ep)) if m.is_moe and ep > 1 else None,
        ("--moe-a2a-backend", "none") if dp_attention else None,
        ("--chunked-prefill-size", str(int(budget) * ranks)),
        ("--max-running-requests", str(per_rank * ranks)),
        ("--mem-fraction-static", str(fraction)),
        ("--kv-cache-dtype", KV_DTYPES[wl.kv_precision]),
        ("--context-length", str(priced_len)) if longer else None,
        ("--quantization", WEIGHT_QUANTIZATION[wl.weight_precision]) if quantize else None,
        ("--disable-custom-all-reduce",) if wl.custom_all_reduce == "none" and tp * ranks > 1 else None,
        ("--disable-cuda-graph",) if wl.runtime == "pytorch-eager" else None,
        ("--nnodes", str(len(nodes)), "--dist-init-addr", DIST_ADDR) if nodes else None,
    )
    todo = (*TODO, HEAD_TODO) if nodes else TODO
    launcher = ("python", "-m", "sglang.launch_server", "--model-path", model_id)
    return Launch(
        "sglang", version, launcher, args, env=env, notes=tuple(notes), todo=todo, nodes=nodes, replicas=copies
    )
