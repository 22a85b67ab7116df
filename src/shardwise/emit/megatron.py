"""Megatron-LM `pretrain_gpt.py` (Megatron-Core), launched by torchrun.

Checked with tools/check_emit.py against Megatron-LM's own `parse_args`, `validate_args`,
`core_transformer_config_from_args` and `get_num_layers_to_build` (docs/emit/megatron.md lists
the commits). Versions:
- main: Megatron-LM main of August 2026 (core 0.14 and later): ZeRO-2/3 as Megatron FSDP
  (`--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads[_params]`, which needs
  `--ckpt-format fsdp_dtensor`); stage layouts as `--pipeline-model-parallel-layout`;
- core-0.13: ZeRO-2/3 as `--use-custom-fsdp` with the distributed optimizer; the flex dispatcher
  as `--moe-enable-deepep`.
"""

from __future__ import annotations

import numpy as np

from shardwise.emit.facts import chunk_layers, cuda_major, i, stage_layers
from shardwise.emit.launch import EmitError, Launch, flag_groups, torchrun, unemitted_shape
from shardwise.emit.megatron_model import model_args, model_todo, moe_args
from shardwise.physics.memory import megatron_optimizer_state
from shardwise.specs import Recompute, Scenario, Schedule
from shardwise.specs.hardware import is_fp8

VERSIONS = ("main", "core-0.13")
# the FP8 recipes Megatron-LM runs (Transformer Engine PyTorch: --fp8-recipe delayed / tensorwise)
MEGATRON_FP8_RECIPES = ("te", "te_current")

TODO = (
    "data: --data-path PREFIX (or --mock-data to try the launch), --split",
    "tokenizer: --tokenizer-type HuggingFaceTokenizer --tokenizer-model PATH",
    "schedule: --train-iters or --train-samples, --lr, --min-lr, --lr-decay-style, --lr-warmup-iters",
    "checkpoints: --save DIR --save-interval N, --load DIR",
)


def adapt(scn: Scenario, version: str) -> tuple[Scenario, tuple[str, ...]]:
    """The plan Megatron-LM runs for `scn`, and what differs."""
    p = scn.plan
    if i(p.lora_rank) > 0:
        raise EmitError(
            "--emit megatron: LoRA is not part of Megatron-LM's pretrain_gpt.py (Megatron Bridge has PEFT); "
            "emit full training or use --emit torchtitan"
        )
    if i(p.recompute_layers) > 0 and Recompute(int(p.recompute)) == Recompute.SELECTIVE:
        raise EmitError(
            "--emit megatron: Megatron-LM takes one --recompute-granularity: recompute the first "
            f"{i(p.recompute_layers)} layers of each chunk whole (full, method block) or selective, not both; "
            "plan with --recompute none or without --recompute-layers"
        )
    if p.loss_kernel == "compiled":
        raise EmitError(
            "--emit megatron: a loss compiled alone (--loss-kernel compiled) is torchtitan's; Megatron-LM's "
            "vocab-parallel cross-entropy is fused already: plan with --loss-kernel stack or te"
        )
    if p.loss_kernel.startswith("eager-bf16"):
        # pretrain_gpt.py's loss: the vocab-parallel cross-entropy, or TE's / Megatron's fused ones
        raise EmitError(
            f"--emit megatron: an eager cross-entropy on 16-bit logits (--loss-kernel {p.loss_kernel}) is not a "
            "Megatron-LM loss; plan with --loss-kernel stack or te"
        )
    if p.optimizer_state == "bf16":
        raise EmitError(
            "--emit megatron: bf16 moments without a master weight (--optimizer-state bf16) are Apex's "
            "DistributedFusedAdam in NeMo 1, not a Megatron-LM option; plan with --optimizer-state fp32-remainders"
        )
    if bool(np.any(np.asarray(p.partition_activations))):  # DeepSpeed's checkpointing, not Megatron-LM's
        raise EmitError(
            "--emit megatron: partitioned checkpoints (--partition-activations) are DeepSpeed's; "
            "use --emit deepspeed or plan without them"
        )
    new, changes = unemitted_shape(p, "Megatron-LM")
    if is_fp8(p.precision) and p.fp8_recipe not in MEGATRON_FP8_RECIPES:
        new["fp8_recipe"] = "te"
        kind = "Transformer Engine's JAX path" if p.fp8_recipe == "te-jax" else "torchao.float8"
        changes.append(f"FP8 recipe {p.fp8_recipe} ({kind}) -> Transformer Engine's (Megatron-LM's FP8)")
    state = megatron_optimizer_state(p.optimizer_state, p.precision, new.get("fp8_recipe", p.fp8_recipe))
    if state != p.optimizer_state:
        new["optimizer_state"] = state
        changes.append(
            f"optimizer state {p.optimizer_state} -> {state} (what --use-precision-aware-optimizer keeps "
            f"for {p.precision} training: optimizer_config.py use_precision_aware_optimizer_no_fp8_or_ds_fp8)"
        )
    sched = Schedule(int(p.schedule))
    if sched in (Schedule.GPIPE, Schedule.ZB_H1):
        new["schedule"] = Schedule.ONE_F_ONE_B
        changes.append(f"schedule {sched.label} -> 1f1b (Megatron-LM runs 1F1B or interleaved 1F1B)")
    if sched == Schedule.INTERLEAVED and i(p.pp) == 2 and p.overlap_p2p is False:
        new["overlap_p2p"] = True
        changes.append("pipeline sends overlapped (Megatron-LM interleaves 2 stages only with --overlap-p2p-comm)")
    if not new:
        return scn, ()
    return Scenario(scn.model, scn.cluster, p.with_(**new)), tuple(changes)


def launch(scn: Scenario, version: str) -> Launch:
    c, p = scn.cluster, scn.plan
    tp, pp, cp, dp, z = i(p.tp), i(p.pp), i(p.cp), i(p.dp), i(p.zero_stage)
    fsdp = z >= 2 and dp * cp > 1
    env = ()
    if (tp > 1 or cp > 1) and not fsdp and cuda_major(c.gpu) < 10:
        env = (("CUDA_DEVICE_MAX_CONNECTIONS", "1"),)
    if bool(p.expandable_segments):  # Plan.expandable_segments: the caching allocator's setting
        env = (*env, ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"))
    args = flag_groups(
        ("--tensor-model-parallel-size", str(tp)),
        ("--pipeline-model-parallel-size", str(pp)),
        *_pipeline(scn),
        ("--context-parallel-size", str(cp), "--cp-comm-type", p.cp_comm) if cp > 1 else None,
        ("--sequence-parallel",) if bool(p.sequence_parallel) and tp > 1 else None,
        ("--micro-batch-size", str(i(p.micro_batch)), "--global-batch-size", str(i(p.global_batch))),
        *_zero(z, dp * cp, version, i(p.shard_group)),
        ("--overlap-grad-reduce",) if bool(p.overlap_grad_reduce) and dp * cp > 1 else None,
        ("--overlap-param-gather",)
        if bool(p.overlap_param_gather) and bool(p.overlap_grad_reduce) and z >= 1 and dp * cp > 1
        else None,
        ("--tp-comm-overlap",) if bool(p.tp_comm_overlap) and bool(p.sequence_parallel) and tp > 1 else None,
        ("--no-gradient-accumulation-fusion",) if not bool(p.grad_accumulation_fusion) else None,
        *_recompute(Recompute(int(p.recompute)), i(p.recompute_layers), p.recompute_modules),
        # activations of the first N layers to host memory (TransformerConfig.cpu_offloading_num_layers)
        ("--cpu-offloading", "--cpu-offloading-num-layers", str(i(p.offload_activation_layers)))
        if i(p.offload_activation_layers) > 0
        else None,
        # a share of the optimizer on the host CPU (megatron/core/optimizer/cpu_offloading, HybridDeviceOptimizer)
        (
            "--optimizer-cpu-offload",
            "--optimizer-offload-fraction",
            f"{float(p.offload_optimizer):g}",
            "--use-precision-aware-optimizer",
        )
        if float(p.offload_optimizer) > 0
        else None,
        # the fp32 master kept as 16-bit remainders: TE's FusedAdam store_param_remainders under the
        # precision-aware optimizer (megatron/core/optimizer/__init__.py, core 0.12 with TE >= 2.1)
        ("--use-precision-aware-optimizer",)
        if p.optimizer_state == "fp32-remainders" and float(p.offload_optimizer) == 0
        else None,
        # bf16 Adam moments under the precision-aware optimizer (OptimizerConfig exp_avg_dtype,
        # exp_avg_sq_dtype); the master is Megatron-Core's or TE's by the FP8 recipe, as planned
        ("--use-precision-aware-optimizer", "--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16")
        if p.optimizer_state.endswith("bf16-moments") and float(p.offload_optimizer) == 0
        else None,
        _graphs(p.cuda_graph_scope),
        _precision(p.precision, p.fp8_recipe),
        # bf16 gradient buffers and reduction (megatron/training/arguments.py --grad-reduce-in-bf16)
        ("--grad-reduce-in-bf16",) if bool(p.grad_reduce_bf16) and p.precision != "fp16" else None,
        ("--attention-backend", "unfused") if not bool(p.flash_attention) else None,
        # Transformer Engine's cross-entropy (megatron/training/arguments.py --cross-entropy-fusion-impl)
        ("--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl", "te") if p.loss_kernel == "te" else None,
        *model_args(scn),
        *moe_args(scn, version),
        # multi-token prediction, dense or MoE (megatron/training/arguments.py --mtp-num-layers)
        ("--mtp-num-layers", str(i(p.mtp_layers))) if i(p.mtp_layers) > 0 else None,
    )
    launcher = torchrun(i(c.nodes), i(c.gpus_per_node), "pretrain_gpt.py")
    return Launch("megatron", version, launcher, args, env=env, todo=(*TODO, *model_todo(scn.model)))


def _pipeline(scn: Scenario) -> list[tuple[str, ...]]:
    """Even stages: the stage count (and chunks per stage); anything else: the explicit layout,
    one `|`-separated part per model chunk in Megatron's virtual order (chunk 0 of every stage,
    then chunk 1, ...), E the embedding, t a layer, m a multi-token-prediction module, L the loss."""
    p = scn.plan
    pp, vpp = i(p.pp), i(p.vpp)
    if pp == 1:
        return []
    stages = stage_layers(scn.model, p)
    if len(set(stages)) == 1 and stages[0] % vpp == 0:
        if vpp == 1:
            return []
        out = [("--num-virtual-stages-per-pipeline-rank", str(vpp))]
        return out + ([("--no-overlap-p2p-communication",)] if p.overlap_p2p is False else [])
    chunks = chunk_layers(stages, vpp)
    parts = []
    for v in range(vpp):
        for r in range(pp):
            part = "t" * chunks[r][v]
            if r == 0 and v == 0:
                part = "E" + part
            if r == pp - 1 and v == vpp - 1:  # the MTP modules (m) before the loss, as Megatron-Bridge places them
                part += "m" * i(p.mtp_layers) + "L"
            parts.append(part)
    out = [("--pipeline-model-parallel-layout", _compress(parts))]
    return out + ([("--no-overlap-p2p-communication",)] if vpp > 1 and p.overlap_p2p is False else [])


def _compress(parts: list[str]) -> str:
    """The layout in Megatron's short form: runs of t as t*N, runs of equal parts as (part|)*N
    (its parser unrolls `\\(([^)]+)\\)\\*(\\d+)` then `(.)\\*(\\d+)`)."""
    tokens = [_runs_of_t(part) + ("|" if k < len(parts) - 1 else "") for k, part in enumerate(parts)]
    out, k = [], 0
    while k < len(tokens):
        n = 1
        while k + n < len(tokens) and tokens[k + n] == tokens[k]:
            n += 1
        out.append(f"({tokens[k]})*{n}" if n > 1 else tokens[k])
        k += n
    return "".join(out)


def _runs_of_t(part: str) -> str:
    n = part.count("t")
    body = "" if n == 0 else ("t" if n == 1 else f"t*{n}")
    return ("E" if part.startswith("E") else "") + body + "m" * part.count("m") + ("L" if part.endswith("L") else "")


def _zero(z: int, dp_cp: int, version: str, shard_group: int = 0) -> list[tuple[str, ...]]:
    """ZeRO-1: the distributed optimizer (hybrid sharding: dp x cp / shard_group instances of it,
    Megatron-Core's `--num-distributed-optimizer-instances`); ZeRO-2/3: Megatron FSDP sharding
    gradients (and parameters). Nothing to shard with one data-parallel rank."""
    if z == 0 or dp_cp == 1:
        return []
    instances = dp_cp // shard_group if 0 < shard_group < dp_cp else 1
    if z == 1:
        extra = [("--num-distributed-optimizer-instances", str(instances))] if instances > 1 else []
        return [("--use-distributed-optimizer",), *extra]
    if instances > 1:
        raise EmitError(
            f"--emit megatron: hybrid sharding (--shard-group {shard_group}) is emitted for ZeRO-1 (the distributed "
            "optimizer's instances); plan ZeRO-2/3 without it"
        )
    strategy = "optim_grads" if z == 2 else "optim_grads_params"
    if version == "core-0.13":
        return [("--use-custom-fsdp", "--use-distributed-optimizer"), ("--data-parallel-sharding-strategy", strategy)]
    return [
        ("--use-megatron-fsdp",),
        ("--data-parallel-sharding-strategy", strategy),
        ("--ckpt-format", "fsdp_dtensor"),
    ]


def _recompute(rc: Recompute, layers: int = 0, modules: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Megatron-LM's recomputation flags; `layers` > 0: the first `layers` layers of each model chunk
    recomputed whole (transformer_block.py `_checkpointed_forward`, method "block"); `modules`: what
    selective recomputation redoes (megatron/training/arguments.py `--recompute-modules`, nargs *)."""
    if layers > 0 and rc != Recompute.FULL:
        block = ("--recompute-granularity", "full", "--recompute-method", "block")
        return [(*block, "--recompute-num-layers", str(layers))]
    if rc == Recompute.FULL:
        return [("--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1")]
    if rc == Recompute.SELECTIVE:
        return [("--recompute-granularity", "selective", *(("--recompute-modules", *modules) if modules else ()))]
    return []


def _graphs(scope: tuple[str, ...]) -> tuple[str, ...] | None:
    """Megatron-Core's CUDA graph flags (megatron/training/arguments.py, transformer_config.py
    `cuda_graph_impl`): the whole iteration with the local implementation, blocks with Transformer
    Engine's make_graphed_callables."""
    if not scope:
        return None
    impl = "local" if "full_iteration" in scope else "transformer_engine"
    return ("--cuda-graph-impl", impl, "--cuda-graph-scope", *scope)


def _precision(precision: str, fp8_recipe: str = "te") -> tuple[str, ...]:
    if precision == "fp8" and fp8_recipe == "te_current":  # TE Float8CurrentScaling (Bridge: hybrid format)
        return ("--bf16", "--fp8-format", "hybrid", "--fp8-recipe", "tensorwise")
    return {
        "bf16": ("--bf16",),
        "fp16": ("--fp16",),
        "fp8": ("--bf16", "--fp8-format", "hybrid", "--fp8-recipe", "delayed"),
        "mxfp8": ("--bf16", "--fp8-format", "e4m3", "--fp8-recipe", "mxfp8"),
        # Megatron-Core's NVFP4 (Transformer Engine's NVFP4BlockScaling), every layer in FP4
        "nvfp4": ("--bf16", "--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"),
    }[precision]
