"""`trtllm-serve` (PyTorch backend) for a serving plan: one server per replica, or, under
data-parallel attention, one server for all its attention ranks.

The flags are `trtllm-serve serve`'s own (NVIDIA/TensorRT-LLM tensorrt_llm/commands/serve.py
@00209af1, click options): MODEL, `--backend pytorch` (its default, written out), `--tp_size`
(alias of --tensor_parallel_size), `--pp_size`, `--ep_size` (--moe_expert_parallel_size),
`--max_batch_size`, `--max_num_tokens`, `--kv_cache_free_gpu_memory_fraction` (alias of
--free_gpu_memory_fraction), `--extra_llm_api_options` (alias of --config: a YAML file of LLM API
fields laid over the flags). The YAML's fields as TensorRT-LLM's own example writes them
(examples/serve/deepseek_r1_reasoning_parser.sh @4e69c14f, TensorRT-LLM 1.3.0rc11 docs):
`enable_attention_dp: true` (attention data-parallel over every GPU of --tp_size, attention TP 1;
the experts over --ep_size, MoE TP = tp / ep) and `kv_cache_config: {dtype: fp8}`.
Chunked prefill stays off (serve.py `--enable_chunked_prefill` default false): whole prompts, as
`engines.engine_presets` prices TensorRT-LLM (`whole_prompts`). `--max_batch_size` is the one the
priced buffers and slots were sized with (trtllm-bench's, `engines.trtllm_buffers`), per micro-batch.
"""

from __future__ import annotations

from typing import Any

from shardwise.emit.checkpoint import check_checkpoint, stored_note
from shardwise.emit.facts import i, stage_layers
from shardwise.emit.launch import EmitError, Launch, flag_groups
from shardwise.emit.replicas import Replica, replicas
from shardwise.engines.engine_presets import engine
from shardwise.specs import Scenario
from shardwise.specs.stages import describe_counts, engine_split_counts

VERSIONS = ("1.x",)

KV_DTYPES = {"bf16": None, "fp16": None, "fp8": "fp8"}  # None: the model's (kv_cache_config.dtype auto)
OPTIONS_FILE = "extra_llm_api_options.yaml"
TODO = ("weights: the model must name a checkpoint TensorRT-LLM can load (Hugging Face id or local directory)",)


def _refuse(why: str) -> EmitError:
    return EmitError(f"--emit trtllm: {why}")


def layout(scn: Scenario) -> tuple[bool, int]:
    """(data-parallel attention, --tp_size) of the plan, refusing in one line what trtllm-serve's
    flags and the YAML written here do not run."""
    from shardwise.engines.dp_attention import dp_attention as experts_beyond_tp

    m, p = scn.model, scn.plan
    tp, pp, dp, ep, etp = i(p.tp), i(p.pp), i(p.dp), i(p.ep), i(p.expert_tp)
    dp_attention = m.is_moe and bool(experts_beyond_tp(p))
    if i(p.cp) > 1:
        raise _refuse("context parallelism is not emitted for TensorRT-LLM; price plans without cp")
    if dp_attention and (tp > 1 or pp > 1):
        raise _refuse(
            f"data-parallel attention with tp={tp}, pp={pp}: TensorRT-LLM's enable_attention_dp runs each "
            "rank's attention on one GPU (attention TP 1), without a pipeline; plan tp=1"
        )
    size = dp if dp_attention else tp
    if m.is_moe and (ep * etp != size or size % ep):
        raise _refuse(f"experts over ep={ep} with expert tp={etp}: TensorRT-LLM splits {size} GPUs, ep x etp = {size}")
    return dp_attention, size


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
    """The server of one replica (as `emit.vllm.launch`; `max_num_seqs` here the max_batch_size
    the estimate sized its buffers with, per micro-batch; `stored`: `emit.checkpoint`)."""
    m, p, wl = scn.model, scn.plan, workload
    check_checkpoint("trtllm", m.name, model_id, wl.weight_precision, stored)
    if wl.kv_precision not in KV_DTYPES:
        raise _refuse(f"KV-cache precision {wl.kv_precision} is not emitted; plan with {', '.join(KV_DTYPES)}")
    if wl.runtime != "graphs":
        raise _refuse(
            f"runtime {wl.runtime} is not TensorRT-LLM's PyTorch backend with CUDA graphs; price --runtime graphs"
        )
    if wl.custom_all_reduce == "none" and i(p.tp) > 1:
        raise _refuse("NCCL for every all-reduce (--no-custom-all-reduce) is not emitted; price the default")
    priced_len = i(wl.input_len) + i(wl.output_len)
    if priced_len > m.serving_context:
        raise _refuse(f"{priced_len:,}-token requests are longer than {m.name}'s {m.context_words}; price shorter ones")
    dp_attention, tp_size = layout(scn)
    pp, dp, ep = i(p.pp), i(p.dp), i(p.ep)
    gpus, per_node = tp_size * pp, i(scn.cluster.gpus_per_node)
    if gpus > per_node:
        raise _refuse(
            f"one server instance of {gpus} GPUs spans {-(-gpus // per_node)} servers: a multi-server "
            "launch (MPI or Slurm) is not emitted for TensorRT-LLM; price a plan within one server"
        )
    per_rank = -(-i(wl.batch) // dp) if max_num_seqs is None else int(max_num_seqs)
    budget = max_batched_tokens
    if budget is None:  # static batching prices each batch's prompts at once
        budget = max(per_rank * i(wl.input_len), priced_len)
    notes = [
        f"--max_batch_size {per_rank}, --max_num_tokens {int(budget)}: as priced (the engine's buffers and "
        "slots are sized by them); --kv_cache_free_gpu_memory_fraction 0.9 of what weights and buffers leave"
    ]
    if (weights := stored_note("trtllm", str(model_id), wl.weight_precision, stored)) is not None:
        notes.append(weights)
    yaml: list[str] = []
    copies: tuple[Replica, ...] = ()
    if dp_attention:
        yaml.append("enable_attention_dp: true")
        notes.append(
            f"one server for all {dp} attention ranks (enable_attention_dp in {OPTIONS_FILE}), the experts over "
            f"--ep_size {ep}; --max_batch_size and --max_num_tokens are each rank's"
        )
    else:
        copies, note = replicas("trtllm", dp, gpus, i(scn.cluster.gpus_per_node))
        notes += [note] if note else []
    if KV_DTYPES[wl.kv_precision]:
        yaml += ["kv_cache_config:", f"  dtype: {KV_DTYPES[wl.kv_precision]}"]
    if pp > 1:
        stages = stage_layers(m, p)
        own = engine_split_counts("tensorrt-llm", i(m.layers), pp) or (i(m.layers) // pp,) * pp
        if tuple(stages) == own:
            notes.append(
                f"stages of {describe_counts(stages)} layers: TensorRT-LLM's own split (Mapping.pp_layers, "
                + (
                    "torch.tensor_split: the first ranks one layer more), as priced"
                    if len(set(stages)) > 1
                    else "even)"
                )
            )
        else:
            yaml.append(f"pp_partition: [{', '.join(str(n) for n in stages)}]")
            notes.append(
                f"stages of {describe_counts(stages)} layers as priced: pp_partition in {OPTIONS_FILE} (an LLM API "
                "field from TensorRT-LLM 1.2 on: 1.0 and 1.1 refuse the file; Mapping.pp_layers splits by it; "
                "its own split is "
                f"{describe_counts(list(own))})"
            )
    files = ((OPTIONS_FILE, "\n".join(yaml) + "\n"),) if yaml else ()
    args = flag_groups(
        ("--backend", "pytorch"),
        ("--tp_size", str(tp_size), "--pp_size", str(pp)),
        ("--ep_size", str(ep)) if m.is_moe and ep > 1 else None,
        ("--max_batch_size", str(per_rank), "--max_num_tokens", str(int(budget))),
        ("--kv_cache_free_gpu_memory_fraction", f"{engine('tensorrt-llm').kv_fraction:g}"),
        ("--extra_llm_api_options", OPTIONS_FILE) if files else None,
    )
    return Launch(
        "trtllm", version, ("trtllm-serve", model_id), args, files=files, notes=tuple(notes), todo=TODO, replicas=copies
    )
