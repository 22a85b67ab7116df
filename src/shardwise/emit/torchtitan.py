"""torchtitan `torchtitan.train`, launched by torchrun, for the models torchtitan defines.

torchtitan builds only the models of its own registry (`--module NAME --config FUNCTION`), so a
plan is emitted when the priced model has the shape of one of them (TITAN_MODELS, checked against
torchtitan's own configs by tools/check_emit.py); FP8, MXFP8 and LoRA are model converters that
only a Python config sets: they come as a small config module (`shardwise_job.py`) built on that
function. Data parallelism is DDP (ZeRO-0) or FSDP2, which shards the gradients too: ZeRO-2 with
`--parallelism.fsdp_reshard_after_forward never`, ZeRO-3 with `always` (no ZeRO-1); context
parallelism joins the FSDP group. torch.compile and async TP are written out as priced, whatever
the config function's own defaults (`_compile`). Version `main`: torchtitan main of August 2026
(`torchtitan/config/configs.py`, the frozen `--section.field` command line).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardwise.emit.facts import chunk_layers, i, stage_layers
from shardwise.emit.launch import EmitError, Launch, flag_groups, torchrun, unemitted_shape
from shardwise.specs import Model, Recompute, Scenario, Schedule

VERSIONS = ("main",)


@dataclass(frozen=True)
class TitanModel:
    module: str
    config: str
    flavor: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn_hidden: int
    vocab: int
    experts: int = 0
    experts_per_token: int = 0
    fp8_in_config: bool = False  # the config function converts the model to Float8 itself
    # the MLP's activation (`Model.activation`, gated): Llama 3's, Qwen3's and DeepSeek-V3's FeedForward
    # is w2(silu(w1 x) * w3 x); GPT-OSS's experts' (up + 1) x gate x sigmoid(1.702 gate), clamped
    activation: str = "silu"
    # the config function's activation_checkpoint, as `Recompute` names it: SelectiveAC.Config() (per-op
    # selective, the Trainer's default, "selective") or FullAC.Config() ("full"); what a launch of it
    # runs where the plan leaves recompute open (`requests.emit_stack.emit_training`)
    recompute: str = "selective"


# torchtitan's registered configs (torchtitan/models/*/config_registry.py @b5bcd76c, main of August 2026)
# and their shapes; `recompute`: each config function's activation_checkpoint (full: FullAC)
_FULL, _GELU = {"recompute": "full"}, {"activation": "quick_gelu", "recompute": "full"}
TITAN_MODELS = (
    TitanModel("llama3", "llama3_8b", "8B", 32, 4096, 32, 8, 14336, 128256),
    TitanModel("llama3", "llama3_70b", "70B", 80, 8192, 64, 8, 28672, 128256, **_FULL),
    TitanModel("llama3", "llama3_405b", "405B", 126, 16384, 128, 8, 53248, 128256, fp8_in_config=True, **_FULL),
    TitanModel("qwen3", "qwen3_30b_a3b", "30B-A3B", 48, 2048, 32, 4, 6144, 151936, 128, 8, **_FULL),
    TitanModel("deepseek_v3", "deepseek_v3_671b", "671B", 61, 7168, 128, 128, 18432, 129280, 256, 8),
    TitanModel("gpt_oss", "gpt_oss_20b", "20b", 24, 2880, 64, 8, 2880, 201088, 32, 4, **_GELU),
    TitanModel("gpt_oss", "gpt_oss_120b", "120b", 36, 2880, 64, 8, 2880, 201088, 128, 4, **_GELU),
)

SCHEDULES = {Schedule.GPIPE: "GPipe", Schedule.ONE_F_ONE_B: "1F1B", Schedule.INTERLEAVED: "Interleaved1F1B"}

TODO = (
    "data: the config's dataset, or --dataloader.dataset.* for yours",
    "tokenizer and weights: --hf-assets-path DIR (python scripts/download_hf_assets.py)",
    "schedule: --training.steps N, --optimizer.lr, --lr-scheduler.warmup-steps",
    "checkpoints: --checkpoint.enable --checkpoint.folder DIR",
)


# The recipes torchtitan main's Float8LinearConverter.Config takes (recipe_name, default rowwise;
# torchtitan/components/quantization/float8.py): no tensorwise, no FP8 all-gather
TITAN_FP8_RECIPES = ("rowwise", "rowwise_with_gw_hp")


def t_fp8_in_config(model: Model) -> bool:
    """Whether torchtitan's own config function converts `model` to Float8 (its recipe is the config's)."""
    t = titan_model(model)
    return t is not None and t.fp8_in_config


def titan_model(model: Model) -> TitanModel | None:
    shape = (model.layers, model.hidden, model.heads, model.kv_heads, model.ffn_hidden, model.vocab)
    kind = (model.experts, model.experts_per_token, model.activation, model.gated_mlp)
    for t in TITAN_MODELS:
        t_shape = (t.layers, t.hidden, t.heads, t.kv_heads, t.ffn_hidden, t.vocab)
        if shape == t_shape and kind == (t.experts, t.experts_per_token, t.activation, True):
            return t
    return None


def adapt(scn: Scenario, version: str) -> tuple[Scenario, tuple[str, ...]]:
    m, p = scn.model, scn.plan
    if titan_model(m) is None:
        names = ", ".join(sorted({t.config for t in TITAN_MODELS}))
        raise EmitError(
            f"--emit torchtitan: torchtitan builds only its registered models ({names}); "
            f"{m.name} has another shape or MLP ({'gated ' if m.gated_mlp else ''}{m.activation}): "
            "write a config_registry function for it"
        )
    if p.precision == "fp16":
        raise EmitError("--emit torchtitan: fp16 is not a torchtitan training precision; plan with --precision bf16")
    if p.precision == "nvfp4":
        raise EmitError("--emit torchtitan: nvfp4 is Transformer Engine's recipe; plan with --precision mxfp8 or bf16")
    if bool(np.any(np.asarray(p.partition_activations))):
        raise EmitError(
            "--emit torchtitan: partitioned checkpoints (--partition-activations) are DeepSpeed's; "
            "use --emit deepspeed or plan without them"
        )
    if i(p.recompute_layers) > 0:
        raise EmitError(
            "--emit torchtitan: torchtitan main checkpoints per op (SelectiveAC) or every layer whole (FullAC), "
            "not the first N layers of each stage; plan without --recompute-layers"
        )
    if i(p.mtp_layers) > 0:
        raise EmitError("--emit torchtitan: multi-token prediction (--mtp-layers) is not a torchtitan option")
    if p.loss_kernel in ("te", "eager-bf16", "eager-bf16-freed"):
        # torchtitan's loss casts the logits to fp32 (components/loss.py: `pred.flatten(0, 1).float()`)
        raise EmitError(
            f"--emit torchtitan: --loss-kernel {p.loss_kernel} is not a torchtitan option (its cross-entropy "
            "runs on fp32 logits)"
        )
    if p.fsdp2_grad_sync == "last-micro-batch" and i(p.pp) == 1:
        # trainer.py's accumulation loop leaves FSDP2's gradient sync on (presets/frameworks.yaml torchtitan)
        raise EmitError(
            "--emit torchtitan: --fsdp2-grad-sync last-micro-batch is not a torchtitan option (its gradient "
            "accumulation reduce-scatters every micro-batch); plan with every-micro-batch"
        )
    if p.optimizer_state != "fp32":
        raise EmitError(
            f"--emit torchtitan: an optimizer state of {p.optimizer_state} (--optimizer-state) is not a torchtitan "
            "option (FSDP2 keeps fp32 shards and fp32 moments)"
        )
    if float(p.offload_optimizer) > 0:
        raise EmitError(
            "--emit torchtitan: --offload-optimizer is not emitted (FSDP2's CPUOffloadPolicy moves the weights too)"
        )
    if i(p.offload_activation_layers) > 0:
        raise EmitError(
            "--emit torchtitan: --offload-activations is Megatron-Core's CPU offload of the first N layers' "
            "activations; plan without it or use --emit megatron"
        )
    if p.cuda_graph_scope:
        raise EmitError("--emit torchtitan: --cuda-graph-scope names Megatron-Core's CUDA graphs; plan without it")
    if p.recompute_modules:
        raise EmitError(
            "--emit torchtitan: --recompute-modules names Megatron-Core's modules; torchtitan's selective "
            "checkpointing is op- or layer-level; plan without --recompute-modules"
        )
    if i(p.shard_group) > 0 and i(p.shard_group) % i(p.cp):
        raise EmitError(
            f"--emit torchtitan: FSDP2 shards over data_parallel_shard_degree x cp ranks, so --shard-group "
            f"{i(p.shard_group)} must be a multiple of cp={i(p.cp)}"
        )
    new, changes = unemitted_shape(p, "torchtitan")
    if p.precision == "fp8" and not t_fp8_in_config(m) and p.fp8_recipe not in TITAN_FP8_RECIPES:
        new["fp8_recipe"] = "rowwise"
        changes.append(
            f"FP8 recipe {p.fp8_recipe} -> rowwise (torchtitan main's Float8LinearConverter: "
            f"{' or '.join(TITAN_FP8_RECIPES)}, rowwise by default)"
        )
    sched = Schedule(int(p.schedule))
    if i(p.pp) > 1 and sched == Schedule.ZB_H1:
        new["schedule"] = Schedule.ONE_F_ONE_B
        changes.append("schedule zb-h1 -> 1f1b (torchtitan's zero-bubble schedules are looped or V-shaped)")
    z, cp = i(p.zero_stage), i(p.cp)
    fsdp = _fsdp(p)
    if fsdp and z < 2:  # FSDP2 shards the gradients with the optimizer state: ZeRO-2 is the nearest
        new["zero_stage"] = 2
        why = "context parallelism joins FSDP's group" if z == 0 else "FSDP2 shards the gradients as well"
        changes.append(f"ZeRO-{z} -> ZeRO-2 ({why}; fsdp_reshard_after_forward never)")
    if cp > 1 and p.cp_comm != "p2p":
        new["cp_comm"] = "p2p"
        changes.append(f"context parallelism {p.cp_comm} -> p2p (torchtitan's ring attention)")
    if m.is_moe and i(p.ep) > 1 and i(p.expert_tp) != 1:
        new["etp"] = 1
        changes.append(f"expert TP {i(p.expert_tp)} -> 1 (torchtitan's expert parallelism borrows the TP ranks)")
    if m.is_moe and p.moe_dispatcher != "alltoall":
        new["moe_dispatcher"] = "alltoall"
        changes.append(f"MoE dispatcher {p.moe_dispatcher} -> alltoall (torchtitan's default expert all-to-all)")
    if m.is_moe and bool(p.moe_overlap):
        new["moe_overlap"] = False
        changes.append("no combined 1F1B MoE overlap (not a torchtitan option)")
    if bool(p.sequence_parallel) is False and i(p.tp) > 1:
        new["sequence_parallel"] = True
        changes.append("sequence parallelism on (torchtitan's default with TP)")
    if bool(p.tp_comm_overlap) and i(p.tp) > 1 and bool(p.eager_kernels):
        new["tp_comm_overlap"] = False
        changes.append(
            "TP communication not overlapped (torchtitan's async TP is an Inductor pass: it needs torch.compile, "
            "which the plan leaves off; --framework torchtitan-compile runs it)"
        )
    if bool(p.grad_reduce_bf16):
        # FSDP2's reduce dtype is training.mixed_precision_reduce, which torchtitan declares
        # Literal["float32"] (torchtitan/config/configs.py@b5bcd76c line 102): its parser refuses bfloat16
        new["grad_reduce_bf16"] = False
        why = "training.mixed_precision_reduce takes float32 only" if fsdp else "DDP and one GPU keep fp32 gradients"
        changes.append(f"gradients reduced in fp32, not bf16 (torchtitan: {why})")
    run = p.with_(**new) if new else p
    shard, _ = _data_mesh(run)
    sparse = shard * i(run.cp) * i(run.tp)
    if m.is_moe and i(run.ep) > 1 and sparse % i(run.ep):
        raise EmitError(
            f"--emit torchtitan: expert parallelism ep={i(run.ep)} must divide torchtitan's dp_shard x cp x tp = "
            f"{shard} x {i(run.cp)} x {i(run.tp)} = {sparse} (ParallelDims); "
            + (
                "shard over more ranks (--shard-group)"
                if i(run.shard_group) > 0
                else "use --zero 2 or 3 or a smaller --ep"
            )
        )
    if not new:
        return scn, ()
    return Scenario(m, scn.cluster, run), tuple(changes)


def _fsdp(p: object) -> bool:
    """Whether torchtitan wraps `p`'s model in FSDP2: more than one data-parallel or context-parallel
    rank, and ZeRO asked or context parallelism (which joins FSDP's group)."""
    z, dp, cp = i(p.zero_stage), i(p.dp), i(p.cp)  # type: ignore[attr-defined]
    return dp * cp > 1 and (z >= 1 or cp > 1)


def _reshard(p: object) -> tuple[str, ...] | None:
    """FSDP2's `reshard_after_forward` as torchtitan's `--parallelism.fsdp_reshard_after_forward`
    (config/configs.py: default | always | never; distributed/fsdp.py
    get_fsdp_reshard_after_forward_policy: default reshards only without PP): always for ZeRO-3
    (the parameters gathered again in backward), never for ZeRO-2 (kept whole from forward to
    backward, sharded again after it: FSDP1's SHARD_GRAD_OP). Written out either way, so that the
    launch does not depend on the default."""
    if not _fsdp(p):
        return None
    return ("--parallelism.fsdp_reshard_after_forward", "always" if i(p.zero_stage) == 3 else "never")  # type: ignore[attr-defined]


def _data_mesh(p: object) -> tuple[int, int]:
    """(data_parallel_shard_degree, data_parallel_replicate_degree) of `p`: FSDP2 over all the
    data-parallel ranks (ZeRO >= 1), the HSDP mesh (dp x cp / shard_group replicas, cp inside the
    shard group) with --shard-group, or DDP (ZeRO-0: every rank a replica)."""
    dp, z, cp, group = i(p.dp), i(p.zero_stage), i(p.cp), i(p.shard_group)  # type: ignore[attr-defined]
    if z < 1:
        return 1, dp
    if group > 0:
        replicate = dp * cp // group
        return dp // replicate, replicate
    return dp, 1


def launch(scn: Scenario, version: str) -> Launch:
    m, c, p = scn.model, scn.cluster, scn.plan
    t = titan_model(m)
    assert t is not None
    cp = i(p.cp)
    shard, replicate = _data_mesh(p)  # HSDP: (dp_replicate, dp_shard x cp) mesh
    module, config, files = t.module, t.config, ()
    converters = _converters(p, t)
    if converters or (t.fp8_in_config and p.precision != "fp8"):
        module, config = "shardwise_job", "job"
        files = (("shardwise_job.py", _job_module(t, converters, p.precision)),)
    args = flag_groups(
        ("--module", module, "--config", config),
        ("--parallelism.tensor_parallel_degree", str(i(p.tp))),
        ("--parallelism.enable_sequence_parallel",) if i(p.tp) > 1 else None,
        ("--parallelism.context_parallel_degree", str(cp)),
        ("--parallelism.data_parallel_shard_degree", str(shard)),
        ("--parallelism.data_parallel_replicate_degree", str(replicate)),
        _reshard(p),
        ("--parallelism.expert_parallel_degree", str(i(p.ep))) if m.is_moe else None,
        *_pipeline(scn),
        ("--training.max_context_length", str(i(m.seq_len))),
        ("--training.num_tokens_per_microbatch_per_dp_rank", str(i(p.micro_batch) * i(m.seq_len))),
        ("--training.num_tokens_per_train_step", str(i(p.global_batch) * i(m.seq_len))),
        ("--training.disable_cuda_graphs",) if i(p.pp) > 1 or (m.is_moe and i(p.ep) > 1) else None,
        *_compile(p),
        *_ac(Recompute(int(p.recompute))),
    )
    launcher = torchrun(i(c.nodes), i(c.gpus_per_node), "-m", "torchtitan.train")
    env = (("PYTHONPATH", "."),) if files else ()
    if bool(p.expandable_segments):  # Plan.expandable_segments: the caching allocator's setting
        env = (*env, ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"))
    return Launch("torchtitan", version, launcher, args, env=env, files=files, todo=TODO)


def _pipeline(scn: Scenario) -> list[tuple[str, ...]]:
    """The stages as explicit module lists, one per model chunk in stage order (chunk v of stage r
    is stage r + v pp, as torchtitan's looped schedules place them)."""
    p = scn.plan
    pp, vpp = i(p.pp), i(p.vpp)
    if pp == 1:
        return []
    sched = SCHEDULES[Schedule(int(p.schedule))]
    chunks = chunk_layers(stage_layers(scn.model, p), vpp)
    parts, layer = [], 0
    for v in range(vpp):
        for r in range(pp):
            names = ["tok_embeddings"] if (r, v) == (0, 0) else []
            names += [f"layers.{layer + k}" for k in range(chunks[r][v])]
            layer += chunks[r][v]
            if (r, v) == (pp - 1, vpp - 1):
                names += ["norm", "lm_head"]
            parts.append(",".join(names))
    return [
        ("--parallelism.pipeline_parallel_degree", str(pp)),
        ("--parallelism.pipeline_parallel_schedule", sched),
        ("--parallelism.num_pp_microbatches", str(i(p.num_micro_batches))),
        ("--parallelism.module_fqns_per_model_part", *parts),
    ]


def _compile(p: object) -> list[tuple[str, ...]]:
    """torch.compile as priced, written out either way (config/configs.py CompileConfig is off by
    default, but llama3_405b's config turns it and async TP on, and deepseek_v3_671b's compiles the
    loss alone, `--loss-kernel compiled` on the eager preset): element-wise work fused
    (torchtitan-compile, or a fused stack's plan) compiles the model and the loss (`model,loss`,
    torchtitan's comma-separated list); eager kernels (the torchtitan preset) compile nothing, or
    the loss alone under `--loss-kernel compiled` (`loss`). Async TP (Inductor's micro-pipelined all-gather and
    reduce-scatter around the matmuls, distributed/compile.py) is the plan's overlap of every TP
    collective with its GEMM (`tp_comm_overlap`); it needs the model compiled (`adapt`)."""
    if bool(p.eager_kernels) and p.loss_kernel == "compiled":  # type: ignore[attr-defined]
        return [("--compile.enable", "--compile.components", "loss"), ("--compile.no-enable_async_tensor_parallel",)]
    if bool(p.eager_kernels):  # type: ignore[attr-defined]
        return [("--compile.no-enable", "--compile.no-enable_async_tensor_parallel")]
    overlap = bool(p.tp_comm_overlap) and i(p.tp) > 1  # type: ignore[attr-defined]
    return [
        ("--compile.enable", "--compile.components", "model,loss"),
        ("--compile.enable_async_tensor_parallel" if overlap else "--compile.no-enable_async_tensor_parallel",),
    ]


def _ac(rc: Recompute) -> list[tuple[str, ...]]:
    return [("activation-checkpoint:" + {Recompute.NONE: "none", Recompute.SELECTIVE: "selective",
                                         Recompute.FULL: "full"}[rc],)]  # fmt: skip


def _converters(p: object, t: TitanModel) -> list[str]:
    """The model converters' configs; the quantising ones told whether the model is compiled
    (`model_compile_enabled`, as torchtitan's own config functions set it: their warnings)."""
    out = []
    precision = p.precision  # type: ignore[attr-defined]
    compiled = not bool(p.eager_kernels)  # type: ignore[attr-defined]
    if precision == "fp8" and not t.fp8_in_config:
        recipe = p.fp8_recipe if p.fp8_recipe in TITAN_FP8_RECIPES else "rowwise"  # type: ignore[attr-defined]
        out.append(f"Float8LinearConverter.Config(recipe_name={recipe!r}, model_compile_enabled={compiled})")
    elif precision == "mxfp8":
        out.append(f"MXFP8LinearConverter.Config(model_compile_enabled={compiled})")
    if t.experts and precision in ("fp8", "mxfp8"):  # the experts' grouped GEMMs, priced in it too: the
        # Linear converters leave them bf16 (components/quantization float8.py, mx.py; deepseek_v3's
        # float8 config adds Float8GroupedExpertsConverter as well)
        kind = "Float8" if precision == "fp8" else "MXFP8"
        out.append(f"{kind}GroupedExpertsConverter.Config(model_compile_enabled={compiled})")
    rank = i(p.lora_rank)  # type: ignore[attr-defined]
    if rank > 0:
        out.append(f"LoRAConverter.Config(rank={rank}, alpha={2.0 * rank})")
    return out


def _job_module(t: TitanModel, converters: list[str], precision: str) -> str:
    """A config module built on torchtitan's own config function, its model converted."""
    return "\n".join(
        [
            '"""torchtitan config written by shardwise --emit torchtitan."""',
            "import dataclasses",
            "",
            "from torchtitan.components.lora import LoRAConverter",
            "from torchtitan.components.quantization import (",
            "    Float8GroupedExpertsConverter,",
            "    Float8LinearConverter,",
            "    MXFP8GroupedExpertsConverter,",
            "    MXFP8LinearConverter,",
            ")",
            f"from torchtitan.models.{t.module} import model_registry",
            f"from torchtitan.models.{t.module}.config_registry import {t.config}",
            "",
            "",
            "def job():",
            f"    config = {t.config}()",
            *(
                [f"    config.model_spec = model_registry({t.flavor!r})  # without its Float8 converter"]
                if t.fp8_in_config and precision != "fp8"
                else []
            ),
            "    model = config.model_spec.model",
            f"    for converter in [{', '.join(converters)}]:",
            "        model = converter.build().convert(model)",
            "    config.model_spec = dataclasses.replace(config.model_spec, model=model)",
            "    return config",
            "",
        ]
    )
