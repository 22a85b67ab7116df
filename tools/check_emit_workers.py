"""The worker side of tools/check_emit.py: runs inside a Python that has the tools' dependencies,
imports each tool from its checkout, and checks one emitted launch per job. CUDA queries are
stubbed with the plan's GPU; nothing here imports shardwise."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
import tempfile
import traceback
import typing
from pathlib import Path
from typing import Any


class Mismatch(Exception):
    """The tool accepted the launch but would build or run something else than was priced."""


def expect(what: str, got: object, want: object) -> None:
    if got != want:
        raise Mismatch(f"{what}: tool has {got!r}, plan priced {want!r}")


def run_worker(target: str, jobs: list[dict], opts: dict) -> int:
    typing.override = getattr(typing, "override", lambda f: f)  # Python < 3.12 (Megatron-LM imports it)
    check = {"megatron": megatron, "torchtitan": torchtitan, "deepspeed": deepspeed, "vllm": vllm}[target]
    setup = {"megatron": setup_megatron, "torchtitan": setup_torchtitan, "deepspeed": setup_deepspeed,
             "vllm": lambda o: None}[target]  # fmt: skip
    with contextlib.redirect_stdout(io.StringIO()):
        setup(opts)
    for job in jobs:
        saved = dict(os.environ)
        sink = io.StringIO()
        try:
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                detail = check(job, opts) or ""
            result = "ok"
        except Mismatch as exc:
            result, detail = "mismatch", str(exc)
        except BaseException as exc:  # the tool's own rejection: an assertion, ValueError, SystemExit
            tb = traceback.extract_tb(exc.__traceback__)
            where = f"{Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else ""
            result, detail = "rejected", f"{type(exc).__name__} at {where}: {exc}"[:400]
            if isinstance(exc, SystemExit):
                detail += " " + sink.getvalue()[-300:]
        finally:
            os.environ.clear()
            os.environ.update(saved)
        print("@@RESULT " + json.dumps({"id": job["id"], "target": job["target"], "result": result, "detail": detail}))
        sys.stdout.flush()
    return 0


def _env(job: dict) -> None:
    os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
    os.environ.update({"WORLD_SIZE": str(job["world_size"]), "RANK": "0", "LOCAL_RANK": "0", **job["env"]})


# ---------------------------------------------------------------- Megatron-LM

MEGATRON: dict[str, Any] = {}


def setup_megatron(opts: dict) -> None:
    sys.path.insert(0, opts["megatron"])
    import megatron.training.arguments as A
    import torch
    from megatron.core import parallel_state
    from megatron.core.transformer import transformer_block

    torch.cuda.get_device_capability = lambda *a, **k: (MEGATRON["major"], 0)
    A.get_device_arch_version = lambda: MEGATRON["major"]
    A.is_te_min_version = lambda *a, **k: True  # Transformer Engine is not installed on the CPU
    from megatron.core.models.common.embeddings import rope_utils

    rope_utils.fused_apply_rotary_pos_emb = rope_utils.fused_apply_rotary_pos_emb or (lambda *a, **k: None)  # TE's
    MEGATRON.update(A=A, ps=parallel_state, tb=transformer_block)


def megatron(job: dict, opts: dict) -> str:
    A, ps, tb = MEGATRON["A"], MEGATRON["ps"], MEGATRON["tb"]
    MEGATRON["major"] = job["cuda_major"]
    _env(job)
    sys.argv = ["pretrain_gpt.py", *job["argv"]]
    args = A.parse_args()
    A.validate_args(args)
    cfg = A.core_transformer_config_from_args(args)
    e = job["expect"]
    expect("data-parallel size", args.data_parallel_size, e["dp"])
    expect("layers", cfg.num_layers, e["layers"])
    expect("hidden", cfg.hidden_size, e["hidden"])
    expect("attention heads", cfg.num_attention_heads, e["heads"])
    expect("query groups", cfg.num_query_groups or cfg.num_attention_heads, e["kv_heads"])
    expect("FFN", cfg.ffn_hidden_size, e["ffn"])
    expect("experts", cfg.num_moe_experts or 0, e["experts"])
    if e["experts"]:
        expect("router top-k", cfg.moe_router_topk, e["topk"])
        expect("expert parallelism", cfg.expert_model_parallel_size, e["ep"])
        expect("expert TP", cfg.expert_tensor_parallel_size, e["etp"])
    for name, want in e["features"].items():  # the model's own features (review 33)
        got = getattr(cfg, name, getattr(args, name, None))
        if name == "rotary_base" and want is None:
            continue  # unknown: asked for in the launch's "you add"
        expect(name, list(got) if isinstance(got, tuple) else got, want)
    sharded = e["zero"] >= 2 and e["dp"] * e["cp"] > 1
    expect("Megatron FSDP", bool(getattr(args, "use_megatron_fsdp", False)), sharded)
    if sharded:
        want = "optim_grads_params" if e["zero"] == 3 else "optim_grads"
        expect("FSDP sharding", args.data_parallel_sharding_strategy, want)
    elif e["zero"] == 1 and e["dp"] * e["cp"] > 1:
        expect("distributed optimizer", args.use_distributed_optimizer, True)
        group = e["shard_group"] or e["dp"] * e["cp"]  # HSDP: an instance of it per shard group
        expect("distributed optimizer instances", args.num_distributed_optimizer_instances, e["dp"] * e["cp"] // group)
    got = []
    vpp = args.virtual_pipeline_model_parallel_size or 1
    real_rank = ps.get_pipeline_model_parallel_rank
    real_vpp = ps.get_virtual_pipeline_model_parallel_world_size
    try:
        ps.get_virtual_pipeline_model_parallel_world_size = lambda: args.virtual_pipeline_model_parallel_size
        for r in range(e["pp"]):
            ps.get_pipeline_model_parallel_rank = lambda r=r: r
            got.append(sum(tb.get_num_layers_to_build(cfg, vp_stage=v if vpp > 1 else None, pp_rank=r)
                           for v in range(vpp)))  # fmt: skip
    finally:
        ps.get_pipeline_model_parallel_rank, ps.get_virtual_pipeline_model_parallel_world_size = real_rank, real_vpp
    expect("layers per pipeline rank", got, e["stages"])
    expect("model chunks per rank", vpp, e["vpp"])
    return f"layers per rank {_runs(got)}" + (f", {vpp} chunks each" if vpp > 1 else "")


def _runs(counts: list[int]) -> str:
    out: list[list[int]] = []
    for c in counts:
        if out and out[-1][0] == c:
            out[-1][1] += 1
        else:
            out.append([c, 1])
    return ", ".join(f"{c}x{n}" if n > 1 else str(c) for c, n in out)


# ---------------------------------------------------------------- torchtitan

TITAN: dict[str, Any] = {}


def setup_torchtitan(opts: dict) -> None:
    sys.path.insert(0, opts["torchtitan"])
    from torchtitan.config.manager import ConfigManager
    from torchtitan.distributed import pipeline_parallel as pipe
    from torchtitan.distributed.fsdp import get_fsdp_reshard_after_forward_policy
    from torchtitan.distributed.parallel_dims import ParallelDims

    TITAN.update(CM=ConfigManager, PD=ParallelDims, pipe=pipe, reshard=get_fsdp_reshard_after_forward_policy)


def torchtitan(job: dict, opts: dict) -> str:
    import importlib

    e = job["expect"]
    for name in ("torchtitan.components.quantization.float8", "torchtitan.components.quantization.mx",
                 "torchtitan.tools.utils"):  # fmt: skip
        mod = importlib.import_module(name)  # the plan's GPU, for the converters' capability checks
        if hasattr(mod, "has_cuda_capability"):
            mod.has_cuda_capability = lambda major, minor: (job["cuda_major"], 0) >= (major, minor)
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in job["files"].items():
            Path(tmp, name).write_text(text)
        sys.path.insert(0, tmp)
        try:
            sys.modules.pop("shardwise_job", None)
            cfg = TITAN["CM"]().parse_args(job["argv"])
        finally:
            sys.path.remove(tmp)
    par = cfg.parallelism
    dims = TITAN["PD"].from_config(par, job["world_size"])
    expect("tensor parallelism", dims.tp, e["tp"])
    expect("pipeline stages", dims.pp, e["pp"])
    expect("context parallelism", dims.cp, e["cp"])
    expect("data parallelism", dims.dp_shard * dims.dp_replicate, e["dp"])
    fsdp = dims.dp_shard > 1 or dims.cp > 1
    expect("FSDP (ZeRO-2/3) or DDP", fsdp, e["zero"] >= 2 and e["dp"] * e["cp"] > 1)
    if fsdp:  # torchtitan's own resolution of the policy (its default depends on PP)
        reshard = TITAN["reshard"](par.fsdp_reshard_after_forward, dims.pp > 1)
        expect("ZeRO stage (FSDP2 reshard_after_forward: ZeRO-3)", 3 if reshard else 2, e["zero"])
    if fsdp and e["shard_group"]:  # HSDP: FSDP2 shards over dp_shard x cp, replicas over dp_replicate
        expect("FSDP shard group (dp_shard x cp)", dims.dp_shard * dims.cp, e["shard_group"])
    compiled = cfg.compile.enable and "model" in cfg.compile.components  # distributed/compile.py apply_compile
    expect("torch.compile of the model (fused element-wise kernels)", compiled, e["compile"])
    expect("async TP (TP collectives overlapped with their GEMMs)", cfg.compile.enable_async_tensor_parallel,
           e["tp_overlap"] and e["tp"] > 1)  # fmt: skip
    if e["experts"]:
        expect("expert parallelism", dims.ep, e["ep"])
    # trainer.py Trainer.__init__: tokens per DP rank per accumulation step, accumulation steps
    pp_mb = par.num_pp_microbatches if dims.pp > 1 else 1
    per_rank = cfg.training.num_tokens_per_microbatch_per_dp_rank * pp_mb
    dp_degree = dims.dp_shard * dims.dp_replicate
    step = cfg.training.num_tokens_per_train_step
    if step % (per_rank * dp_degree):
        raise ValueError(f"num_tokens_per_train_step {step} not divisible by {per_rank * dp_degree}")
    accumulation = step // (per_rank * dp_degree)
    expect("micro-batch tokens", cfg.training.num_tokens_per_microbatch_per_dp_rank, e["micro_batch"] * e["seq_len"])
    expect("micro-batches per step", accumulation * pp_mb, e["m"])
    model = cfg.model_spec.model
    expect("layers", len(model.layers), e["layers"])
    text = repr(model)
    expect("FP8 linear layers", "Float8Linear" in text, e["precision"] == "fp8")
    expect("MXFP8 linear layers", "MXFP8Linear" in text, e["precision"] == "mxfp8")
    expect("LoRA adapters", "LoRA" in text, e["lora_rank"] > 0)
    got = [0] * dims.pp
    if dims.pp > 1:
        parts = par.module_fqns_per_model_part
        for s, part in enumerate(parts):
            ranks = [r for r in range(dims.pp) if s in TITAN["pipe"]._get_pp_rank_to_stage_indices_mapping(
                r, dims.pp, par.pipeline_parallel_schedule, len(parts))]  # fmt: skip
            got[ranks[0]] += sum(1 for m in part if m.startswith("layers."))
        expect("model chunks per rank", len(parts) // dims.pp, e["vpp"])
    else:
        got = [len(model.layers)]
    expect("layers per pipeline rank", got, e["stages"])
    ac = type(cfg.activation_checkpoint).__qualname__ if cfg.activation_checkpoint is not None else "none"
    return f"{cfg.model_spec.name} {cfg.model_spec.flavor}, layers per rank {_runs(got)}, AC {ac}"


# ---------------------------------------------------------------- DeepSpeed + Megatron-DeepSpeed

DS: dict[str, Any] = {}


def setup_deepspeed(opts: dict) -> None:
    sys.path.insert(0, opts["megatron_deepspeed"])
    sys.path.insert(0, opts["deepspeed"])
    import deepspeed

    deepspeed.__version__ = Path(opts["deepspeed"], "version.txt").read_text().strip()  # an archive has no git info
    import megatron.arguments as MA
    from deepspeed.runtime.config import DeepSpeedConfig
    from deepspeed.runtime.utils import partition_balanced

    deepspeed.accelerator.get_accelerator().device_name = lambda *a: "cuda"  # the GPU the plan runs on
    import deepspeed.runtime.config as ds_config

    ds_config.dist.get_rank = lambda *a, **k: 0  # no process group: the rank 0 of the job
    DS.update(Config=DeepSpeedConfig, partition=partition_balanced, MA=MA)


class _Mpu:
    def __init__(self, dp: int) -> None:
        self.dp = dp

    def get_data_parallel_world_size(self) -> int:
        return self.dp

    def get_data_parallel_rank(self) -> int:
        return 0

    def get_model_parallel_world_size(self) -> int:
        return 1


def deepspeed(job: dict, opts: dict) -> str:
    e = job["expect"]
    _env(job)
    config = json.loads(job["files"]["ds_config.json"])
    ds = DS["Config"](config, mpu=_Mpu(e["dp"]))
    expect("ZeRO stage", ds.zero_optimization_stage, e["zero"])
    if e["pp"] > 1 and ds.zero_optimization_stage > 1:
        raise ValueError("DeepSpeed's pipeline engine asserts ZeRO stage < 2")
    sys.argv = ["pretrain_gpt.py", *job["argv"]]
    args = DS["MA"].parse_args()
    DS["MA"].validate_args(args)
    expect("data-parallel size", args.data_parallel_size, e["dp"])
    # --zero-stage (default 1) is what pretrain_gpt.py reads (deepspeed.zero.Init(enabled=args.zero_stage
    # == 3)); nothing reads it from ds_config.json, so the two must agree (review 43)
    expect("--zero-stage against ds_config.json's stage", int(args.zero_stage), ds.zero_optimization_stage)
    expect("KV heads", args.num_key_value_heads, e["kv_heads"])
    expect("FFN", args.ffn_hidden_size, e["ffn"])
    if e["pp"] > 1:  # GPTModelPipe: embedding, the transformer layers, final norm and head; type:transformer
        weights = [0] + [1] * e["layers"] + [0, 0]
        parts = DS["partition"](weights, e["pp"])
        got = [sum(weights[parts[k] : parts[k + 1]]) for k in range(e["pp"])]
    else:
        got = [e["layers"]]
    expect("layers per pipeline rank", got, e["stages"])
    batch = (
        f"{ds.train_batch_size} = {ds.train_micro_batch_size_per_gpu} x {ds.gradient_accumulation_steps} x {e['dp']}"
    )
    return f"layers per rank {_runs(got)}, batch {batch}"


# ---------------------------------------------------------------- vLLM


def vllm(job: dict, opts: dict) -> str:
    import vllm.platforms

    vllm.platforms.current_platform.device_type = "cuda"  # no GPU here: the server's device, for the defaults
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    os.environ.update(job["env"])
    e = job["expect"]
    if "server" in e:  # one server of several: `vllm serve`'s own parser (--headless is its flag)
        ns = _vllm_server(job, e["server"])
    else:
        parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
        parser.add_argument("model_tag", nargs="?")
        ns = parser.parse_args([job["launcher"][2], *job["argv"]])
    ns.model = ns.model_tag
    ea = EngineArgs.from_cli_args(ns)  # create_engine_config needs a GPU: not run here (but see _vllm_server)
    expect("tensor parallelism", ea.tensor_parallel_size, e["tp"])
    expect("pipeline parallelism", ea.pipeline_parallel_size, e["pp"])
    expect("data-parallel engine ranks of the server", ea.data_parallel_size, e["dp"])
    # create_engine_config's ParallelConfig (its checks; the model and the GPU left out)
    from vllm.config import ParallelConfig

    pc = ParallelConfig(
        pipeline_parallel_size=ea.pipeline_parallel_size, tensor_parallel_size=ea.tensor_parallel_size,
        data_parallel_size=ea.data_parallel_size, is_moe_model=e["moe"],
        enable_expert_parallel=ea.enable_expert_parallel, all2all_backend=ea.all2all_backend,
        disable_custom_all_reduce=ea.disable_custom_all_reduce,
    )  # fmt: skip
    detail = ""
    if e["moe"]:  # the experts' layout as each FusedMoE layer builds it (layer.py make_parallel_config)
        from types import SimpleNamespace

        import vllm.model_executor.layers.fused_moe.config as moe

        moe.get_dp_group = moe.get_pcp_group = lambda: SimpleNamespace(rank_in_group=0)  # rank 0, no groups
        moe.get_tensor_model_parallel_rank = lambda: 0
        layout = moe.FusedMoEParallelConfig.make(
            tp_size_=pc.tensor_parallel_size, pcp_size_=1, dp_size_=pc.data_parallel_size, sp_size_=1,
            vllm_parallel_config=pc,
        )  # fmt: skip
        expect("expert parallelism", layout.ep_size, e["ep"])
        expect("expert TP", layout.tp_size, e["etp"])
        expect("sequence-parallel MoE (reduce-scatter / all-gather around the experts)",
               pc.use_sequence_parallel_moe, e["sp_moe"])  # fmt: skip
        detail = f", dp {pc.data_parallel_size}, ep {layout.ep_size}, etp {layout.tp_size}"
    # create_engine_config's SchedulerConfig and its check against the context length (chunked
    # prefill on: vLLM's default for a generative model)
    from vllm.config import SchedulerConfig

    chunked = True if ea.enable_chunked_prefill is None else ea.enable_chunked_prefill
    sched = SchedulerConfig(
        max_num_batched_tokens=ea.max_num_batched_tokens, max_num_seqs=ea.max_num_seqs,
        max_model_len=ea.max_model_len, enable_chunked_prefill=chunked, is_encoder_decoder=False,
    )  # fmt: skip
    sched.verify_max_model_len(ea.max_model_len)
    if e["chunk_budget"] is not None:
        expect("chunk budget (max_num_batched_tokens)", sched.max_num_batched_tokens, e["chunk_budget"])
    # an all-to-all backend a note asks for must be one this vLLM keeps (ParallelConfig drops removed ones)
    for note in job.get("notes", []):
        for backend in re.findall(r"--all2all-backend (\w+)", note):
            kept = ParallelConfig(all2all_backend=backend, enable_expert_parallel=True).all2all_backend
            expect(f"all2all backend the note names ({backend})", kept, backend)
    kv = ea.kv_cache_dtype
    if "server" in e:
        detail += f", {ea.all2all_backend}, {job['server_detail']}"
    return f"max_num_seqs {ea.max_num_seqs}, max_num_batched_tokens {ea.max_num_batched_tokens}, kv {kv}{detail}"


def _vllm_server(job: dict, want: dict) -> Any:
    """One server's command of a launch over several: parsed by `vllm serve`'s parser and checked
    by it (`validate_parsed_serve_args`), the serve command's choice of what it starts (API
    servers, or engines alone under --headless) with the starters stubbed, and the `ParallelConfig`
    that `create_engine_config` builds from it (the model's config read, the rest not built: it
    needs a GPU). Returns the parsed arguments; `job["server_detail"]` says what it found."""
    from types import SimpleNamespace

    import vllm.engine.arg_utils as arg_utils
    import vllm.entrypoints.cli.serve as serve
    from vllm.entrypoints.common.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    argv = [job["launcher"][2], *job["argv"]]
    validate_parsed_serve_args(make_arg_parser(FlexibleArgumentParser()).parse_args(argv))
    started: list[str] = []
    stubs = {"run_headless": lambda a: started.append("headless"),
             "run_multi_api_server": lambda a: started.append("api servers"),
             "run_dp_supervisor": lambda a: started.append("dp supervisor"),
             "uvloop": SimpleNamespace(run=lambda c: (c.close(), started.append("api server")))}  # fmt: skip
    saved = {k: getattr(serve, k) for k in stubs}
    try:
        for k, v in stubs.items():
            setattr(serve, k, v)
        serve.ServeSubcommand.cmd(make_arg_parser(FlexibleArgumentParser()).parse_args(argv))
    finally:
        for k, v in saved.items():
            setattr(serve, k, v)
    expect("what the server starts", started, ["headless"] if want["headless"] else ["api servers"])
    ns = make_arg_parser(FlexibleArgumentParser()).parse_args(argv)
    ns.model = ns.model_tag
    ea = arg_utils.EngineArgs.from_cli_args(ns)

    class Built(Exception):
        pass

    real, built = arg_utils.ParallelConfig, []

    class Defaults(type):  # the class's defaults, which create_engine_config reads before the call
        def __getattr__(cls, name: str) -> Any:
            return getattr(real, name)

    class Stand(metaclass=Defaults):
        def __new__(cls, **kw: Any) -> Any:
            built.append(real(**kw))
            raise Built

    arg_utils.ParallelConfig = Stand
    try:
        ea.create_engine_config(headless=want["headless"])
    except Built:
        pass
    finally:
        arg_utils.ParallelConfig = real
    if not built:
        raise Mismatch("create_engine_config built no ParallelConfig")
    pc = built[0]
    expect("data-parallel ranks in all", pc.data_parallel_size, job["expect"]["dp"])
    expect("data-parallel ranks on this server", pc.data_parallel_size_local, want["local"])
    expect("this server's first data-parallel rank", pc.data_parallel_rank, want["start"])
    expect("hybrid load balancing (a server balancing its own ranks only)", ea.data_parallel_hybrid_lb, False)
    expect("external load balancing", pc.data_parallel_external_lb, False)
    if want["headless"] and pc.data_parallel_size_local <= 0:  # run_headless's own check
        raise Mismatch("data_parallel_size_local must be > 0 in headless mode")
    job["server_detail"] = (
        f"{started[0]}, dp ranks {pc.data_parallel_rank}+{pc.data_parallel_size_local} of "
        f"{pc.data_parallel_size} via {pc.data_parallel_master_ip}:{pc.data_parallel_rpc_port}"
    )
    return ns
