"""Megatron-DeepSpeed `pretrain_gpt.py` with a DeepSpeed config (`ds_config.json`), launched by
torchrun.

What DeepSpeed runs differs from a Megatron-Core plan in places, and the plan is re-priced as it
will run: its pipeline engine runs one 1F1B-like schedule (no interleaving, no GPipe), allows
ZeRO-1 at most with a pipeline (`runtime/pipe/engine.py`), and splits the layers with
`partition_method='type:transformer'` (`runtime/utils.py partition_balanced`: the first
layers % pp stages take one layer more); context parallelism is DeepSpeed-Ulysses
(`--ds-sequence-parallel-size`, the all-to-all kind). Mixture-of-experts, multi-latent
attention, FP8, LoRA and hybrid-sharded plans are refused (DeepSpeed's MiCS needs the model built
under `deepspeed.zero.MiCS_Init`; `pretrain_gpt.py` uses `deepspeed.zero.Init`). Version
`master`: Megatron-DeepSpeed master (July 2025) with DeepSpeed master of August 2026
(`runtime/config.py`).
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np

from shardwise.emit.facts import activation_flags, i, stage_layers
from shardwise.emit.launch import EmitError, Launch, flag_groups, torchrun, unemitted_shape
from shardwise.emit.megatron_model import vocab_divisor
from shardwise.specs import Recompute, Scenario, Schedule
from shardwise.specs.rules import ulysses_rule
from shardwise.specs.stages import describe_counts
from shardwise.specs.zero3 import Zero3Buckets

VERSIONS = ("master",)
# The MLP's activation (`Model.activation`, gated or not) as Megatron-DeepSpeed @4efb479d takes it
# (megatron/model/transformer.py ParallelMLP, megatron/arguments.py): --swiglu a gated SiLU,
# --squared-relu squared ReLU, --openai-gelu tanh-GELU (megatron/model/utils.py openai_gelu); no flag:
# F.gelu (erf). No gated GELU (GeGLU), ReLU or quick GELU: the launch asks for them.
DS_ACTIVATION_FLAGS: dict[tuple[str, bool], tuple[str, ...]] = {
    ("silu", True): ("--swiglu",),
    ("gelu", False): (),
    ("squared_relu", False): ("--squared-relu",),
    ("gelu_tanh", False): ("--openai-gelu",),
}

TODO = (
    "data: --data-path PREFIX --split 949,50,1",
    "tokenizer: --tokenizer-type HFTokenizer --tokenizer-model PATH (or --vocab-file/--merge-file for GPT-2 BPE)",
    "schedule: --train-iters N --lr --min-lr --lr-decay-style --lr-warmup-iters, an optimizer block in ds_config.json",
    "checkpoints: --save DIR --save-interval N, --load DIR",
)

# What to do where Megatron-Core's emitter refuses a plan as well (emit/megatron.py)
NO_LOSS = "plan without --loss-kernel (the stack's own loss)"
FP32_STATE = "plan with --optimizer-state fp32"


def deepspeed_stages(layers: int, pp: int) -> list[int]:
    """DeepSpeed's `type:transformer` partition of equal layers: the first layers % pp stages
    take one layer more (tools/check_emit.py checks it against `partition_balanced`)."""
    base, extra = divmod(layers, pp)
    return [base + (1 if r < extra else 0) for r in range(pp)]


def adapt(scn: Scenario, version: str) -> tuple[Scenario, tuple[str, ...]]:
    m, p = scn.model, scn.plan
    refuse: list[tuple] = [
        (m.is_moe, "a mixture of experts (DeepSpeed-MoE's top-1/2 gating is another model)"),
        (bool(m.kv_lora_rank), "multi-latent attention"),
        (i(p.lora_rank) > 0, "LoRA"),
        (p.precision in ("fp8", "mxfp8", "nvfp4"), f"{p.precision} training"),
        (i(p.recompute_layers) > 0, "recomputing only some layers whole (--recompute-layers)"),
        (i(p.offload_activation_layers) > 0, "Megatron-Core's activation offload (--offload-activations)"),
        (float(p.offload_optimizer) > 0, "optimizer offload (--offload-optimizer; DeepSpeed's offload_optimizer)"),
        (i(p.mtp_layers) > 0, "multi-token prediction (--mtp-layers)"),
        (p.loss_kernel == "te", "Transformer Engine's cross-entropy (--loss-kernel te)"),
        (p.loss_kernel == "compiled", "a loss compiled alone (--loss-kernel compiled, torchtitan's)"),
        # Megatron-DeepSpeed's loss is Megatron's vocab-parallel cross-entropy on fp32 logits
        (
            p.loss_kernel.startswith("eager-bf16"),
            f"an eager cross-entropy on 16-bit logits (--loss-kernel {p.loss_kernel})",
            NO_LOSS,
        ),
        (p.optimizer_state != "fp32", f"an optimizer state of {p.optimizer_state} (--optimizer-state)", FP32_STATE),
        (bool(p.cuda_graph_scope), "Megatron-Core's CUDA graphs (--cuda-graph-scope)"),
        (bool(p.recompute_modules), "per-module selective recomputation (--recompute-modules, Megatron-Core's)"),
        (i(m.head_dim) * i(m.heads) != i(m.hidden), "a head dimension apart from hidden / heads"),
    ]
    for bad, what, *fix in refuse:  # a third element: the fix where --emit megatron refuses it too
        if bad:
            hint = fix[0] if fix else "use --emit megatron"
            raise EmitError(f"--emit deepspeed: {what} is not emitted for Megatron-DeepSpeed; {hint}")
    if 0 < i(p.shard_group) < i(p.dp) * i(p.cp):
        # DeepSpeed's hybrid sharding is MiCS (mics_shard_size): its MiCS_Optimizer asserts that the
        # parameters were built under deepspeed.zero.MiCS_Init (runtime/zero/mics.py), and
        # Megatron-DeepSpeed's pretrain_gpt.py builds them under deepspeed.zero.Init
        raise EmitError(
            f"--emit deepspeed: hybrid sharding (--shard-group {i(p.shard_group)}) is DeepSpeed's MiCS, which "
            "needs the model built under deepspeed.zero.MiCS_Init; Megatron-DeepSpeed's pretrain_gpt.py uses "
            "deepspeed.zero.Init; plan without --shard-group"
        )
    new, changes = unemitted_shape(p, "DeepSpeed's pipeline engine")
    pp, sched = i(p.pp), Schedule(int(p.schedule))
    if i(p.vpp) > 1 or (pp > 1 and sched == Schedule.GPIPE) or (sched == Schedule.ZB_H1 and bool(p.sequence_parallel)):
        new.update(vpp=1, schedule=Schedule.ONE_F_ONE_B)
        why = "ZB-H1 without sequence parallelism only" if sched == Schedule.ZB_H1 else "no interleaving, no GPipe"
        shown = sched.label + (f" v={i(p.vpp)}" if i(p.vpp) > 1 else "")
        changes.append(f"schedule {shown} -> 1f1b (DeepSpeed's pipeline engine: {why})")
    if pp > 1 and i(p.zero_stage) >= 2:
        new["zero_stage"] = 1
        changes.append(f"ZeRO-{i(p.zero_stage)} -> ZeRO-1 (DeepSpeed's pipeline engine allows ZeRO-1 at most)")
    if pp > 1:
        ds = deepspeed_stages(i(m.layers), pp)
        if stage_layers(m, p) != ds:
            new.update(stage_layers=tuple(ds), first_stage_layers=0, last_stage_layers=0)
            changes.append(f"stages {_runs(stage_layers(m, p))} -> {_runs(ds)} (DeepSpeed's type:transformer split)")
    stage3 = i(new.get("zero_stage", p.zero_stage)) == 3  # after the pipeline engine's ZeRO-1
    if stage3 and p.zero3_buckets is None:
        # ZeRO-3 on DeepSpeed is its stage 3, whatever the plan priced: its buckets at its defaults
        new["zero3_buckets"] = Zero3Buckets(fused_linears=True)
        changes.append("ZeRO-3 by layers -> DeepSpeed's stage 3 module by module, at its default buckets")
    elif stage3 and not p.zero3_buckets.fused_linears:
        new["zero3_buckets"] = replace(p.zero3_buckets, fused_linears=True)
        changes.append("ZeRO-3 gathers per projection -> per fused linear (Megatron's QKV and MLP linears)")
    if i(p.cp) > 1:
        if not bool(ulysses_rule(m.heads, m.kv_heads, p.tp, p.cp, "a2a").ok.all()):
            raise EmitError(
                f"--emit deepspeed: context parallelism cp={i(p.cp)} is DeepSpeed-Ulysses here, which needs heads "
                f"({i(m.heads)}) and KV heads ({i(m.kv_heads)}) per TP rank divisible by cp"
            )
        if p.cp_comm != "a2a":
            new["cp_comm"] = "a2a"
            changes.append(f"context parallelism {p.cp_comm} -> a2a (DeepSpeed-Ulysses)")
    if not new:
        return scn, ()
    return Scenario(m, scn.cluster, p.with_(**new)), tuple(changes)


def _runs(counts: list[int]) -> str:
    return describe_counts(list(counts), times="x")


def config(scn: Scenario) -> dict[str, object]:
    """ds_config.json: DeepSpeed checks train_batch_size = micro x accumulation x data-parallel
    ranks (its world size is the data-parallel group's: tensor, pipeline and Ulysses ranks are
    not in it). Under ZeRO-3 the plan's buckets (`Plan.zero3_buckets`, in elements). At every ZeRO
    stage the gradients' reduction dtype the plan was priced with, communication_data_type
    (`physics.memory.grad_bytes_per_param`: fp32 for bf16 training unless `grad_reduce_bf16`;
    DeepSpeed's default is the 16-bit dtype, deepspeedai/DeepSpeed @edaa7221 runtime/engine.py
    communication_data_type), and with Ulysses (cp > 1) seq_parallel_communication_data_type, the
    16-bit activations' dtype its all-to-alls are priced at (`Plan.bytes_per_element`; DeepSpeed's
    default is fp32, runtime/constants.py SEQ_PARALLEL_COMMUNICATION_DATA_TYPE_DEFAULT)."""
    p = scn.plan
    zero: dict[str, object] = {"stage": i(p.zero_stage), "overlap_comm": bool(p.overlap_grad_reduce)}
    if i(p.zero_stage) == 3 and p.zero3_buckets is not None:
        zero.update(p.zero3_buckets.deepspeed_config())
    reduce_16bit = p.precision == "fp16" or bool(p.grad_reduce_bf16)
    out: dict[str, object] = {"communication_data_type": p.precision if reduce_16bit else "fp32"}
    if i(p.cp) > 1:
        out["seq_parallel_communication_data_type"] = p.precision
    return {
        "train_batch_size": i(p.global_batch),
        "train_micro_batch_size_per_gpu": i(p.micro_batch),
        "gradient_accumulation_steps": i(p.num_micro_batches),
        "zero_optimization": zero,
        **out,
        "bf16": {"enabled": p.precision == "bf16"},
        "fp16": {"enabled": p.precision == "fp16"},
        "gradient_clipping": 1.0,
        "steps_per_print": 10,
    }


def launch(scn: Scenario, version: str) -> Launch:
    m, c, p = scn.model, scn.cluster, scn.plan
    tp, pp, cp = i(p.tp), i(p.pp), i(p.cp)
    sp = bool(p.sequence_parallel) and tp > 1
    sched = Schedule(int(p.schedule))
    rc = Recompute(int(p.recompute))
    part = bool(np.all(np.asarray(p.partition_activations)))  # Plan.partition_activations
    base = m.rope_theta  # the model's own rotary base (0: unknown; the flag is type=int)
    args = flag_groups(
        ("--tensor-model-parallel-size", str(tp)),
        ("--pipeline-model-parallel-size", str(pp)),
        ("--no-pipeline-parallel",) if pp == 1 else None,
        ("--enable-zbh1-pipeline",) if pp > 1 and sched == Schedule.ZB_H1 else None,
        ("--ds-sequence-parallel-size", str(cp)) if cp > 1 else None,
        ("--sequence-parallel",) if sp else None,
        ("--micro-batch-size", str(i(p.micro_batch)), "--global-batch-size", str(i(p.global_batch))),
        ("--num-layers", str(i(m.layers)), "--hidden-size", str(i(m.hidden))),
        ("--num-attention-heads", str(i(m.heads)), "--num-key-value-heads", str(i(m.kv_heads))),
        ("--ffn-hidden-size", str(i(m.ffn_hidden))),
        ("--seq-length", str(i(m.seq_len)), "--max-position-embeddings", str(i(m.seq_len))),
        ("--make-vocab-size-divisible-by", str(vocab_divisor(i(m.vocab), tp))),
        activation_flags(m, DS_ACTIVATION_FLAGS, "Megatron-DeepSpeed")[0] or None,
        ("--normalization", "rmsnorm") if m.rmsnorm else None,
        None if m.learned_positions else ("--use-rotary-position-embeddings", "--no-position-embedding"),
        ("--rotary-position-embeddings-theta", str(int(base)))
        if base > 0 and base == int(base) and not m.learned_positions
        else None,
        ("--untie-embeddings-and-output-weights",) if not m.tied_embeddings else None,
        ("--disable-bias-linear",) if not m.bias else None,
        ("--attention-dropout", "0", "--hidden-dropout", "0") if not m.dropout else None,
        ("--use-flash-attn-v2",) if bool(p.flash_attention) else None,
        ("--checkpoint-activations",) if rc == Recompute.FULL else None,
        # DeepSpeed's checkpointing, configured from these flags (megatron/initialize.py @4efb479d)
        ("--deepspeed-activation-checkpointing", "--partition-activations") if rc == Recompute.FULL and part else None,
        ("--recompute-granularity", "selective") if rc == Recompute.SELECTIVE else None,
        ("--bf16",) if p.precision == "bf16" else ("--fp16",),
        # megatron/arguments.py @4efb479d: --zero-stage defaults to 1 and nothing reads the stage back
        # from ds_config.json; pretrain_gpt.py builds the model under deepspeed.zero.Init(enabled=
        # args.zero_stage == 3), training.py branches on args.zero_stage > 0: the flag is the JSON's stage
        ("--deepspeed", "--deepspeed_config", "ds_config.json"),
        ("--zero-stage", str(i(config(scn)["zero_optimization"]["stage"]))),  # type: ignore[index]
    )
    env = (("CUDA_DEVICE_MAX_CONNECTIONS", "1"),) if sp else ()  # Megatron-DeepSpeed asks it on every GPU
    if bool(p.expandable_segments):  # Plan.expandable_segments: the caching allocator's setting
        env = (*env, ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"))
    files = (("ds_config.json", json.dumps(config(scn), indent=2)),)
    launcher = torchrun(i(c.nodes), i(c.gpus_per_node), "pretrain_gpt.py")
    todo = TODO
    if not m.learned_positions and not (base > 0 and base == int(base)):  # megatron/arguments.py@4efb479d: type=int
        todo = (*todo, "rotary base: --rotary-position-embeddings-theta N (the model's rope_theta; default 10000)")
    if m.rope_local_theta and not m.learned_positions:
        todo = (*todo, f"the windowed layers' rotary base, {int(m.rope_local_theta)}: no flag sets a second base")
    if act_todo := activation_flags(m, DS_ACTIVATION_FLAGS, "Megatron-DeepSpeed")[1]:
        todo = (*todo, act_todo)
    return Launch("deepspeed", version, launcher, args, env=env, files=files, todo=todo)
