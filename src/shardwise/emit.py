"""The launch arguments of a plan for the framework that will run it (`plan --emit NAME`).

Each emitter turns a (model, cluster, plan) into the flags that framework takes, with the version
the flag names are from; what a framework cannot express is written as a comment, never dropped:
- megatron: Megatron-LM / Megatron-Core `pretrain_gpt.py` arguments (main branch, August 2026:
  `megatron/training/arguments.py`, `core/model_parallel_config.py`), launched by torchrun;
- torchtitan: `--section.option` flags of torchtitan main (August 2026, `torchtitan/config/
  configs.py`; frozen for backward compatibility, a Python config is the recommended way);
- deepspeed: a DeepSpeed config (`train_micro_batch_size_per_gpu`, `gradient_accumulation_steps`,
  `zero_optimization.stage`, `bf16`/`fp16`) and the Megatron-DeepSpeed parallel arguments;
- vllm (serving): `vllm serve` engine arguments (`--tensor-parallel-size`,
  `--pipeline-parallel-size`, `--max-num-seqs`, `--max-model-len`, `--kv-cache-dtype`,
  `--quantization`), one server per data-parallel replica.
"""

from __future__ import annotations

import json

import numpy as np

from shardwise.specs import Recompute, Scenario, Schedule

FRAMEWORKS = ("megatron", "torchtitan", "deepspeed")


def _i(x: object) -> int:
    return int(np.asarray(x))


def megatron(scn: Scenario) -> str:
    m, c, p = scn.model, scn.cluster, scn.plan
    args = [
        f"--tensor-model-parallel-size {_i(p.tp)}",
        f"--pipeline-model-parallel-size {_i(p.pp)}",
    ]
    if _i(p.cp) > 1:
        args.append(f"--context-parallel-size {_i(p.cp)}")
    if _i(p.vpp) > 1:
        args.append(f"--num-virtual-stages-per-pipeline-rank {_i(p.vpp)}")
    if _i(p.first_stage_layers) > 0:
        args.append(f"--decoder-first-pipeline-num-layers {_i(p.first_stage_layers)}")
    if _i(p.last_stage_layers) > 0:
        args.append(f"--decoder-last-pipeline-num-layers {_i(p.last_stage_layers)}")
    args += [f"--micro-batch-size {_i(p.micro_batch)}", f"--global-batch-size {_i(p.global_batch)}"]
    if bool(p.sequence_parallel):
        args.append("--sequence-parallel")
    rc = Recompute(int(p.recompute))
    if rc == Recompute.FULL:
        args += ["--recompute-granularity full", "--recompute-method uniform", "--recompute-num-layers 1"]
    elif rc == Recompute.SELECTIVE:
        args.append("--recompute-granularity selective")
    z = _i(p.zero_stage)
    if z == 1:
        args.append("--use-distributed-optimizer")
    elif z >= 2:
        args.append(f"# ZeRO-{z}: Megatron-LM's distributed optimizer is ZeRO-1; use --use-megatron-fsdp for ZeRO-3")
    for flag, name in (
        ("overlap_grad_reduce", "--overlap-grad-reduce"),
        ("overlap_param_gather", "--overlap-param-gather"),
    ):
        if bool(getattr(p, flag)) and _i(p.dp) * _i(p.cp) > 1:
            args.append(name)
    if bool(p.tp_comm_overlap) and bool(p.sequence_parallel) and _i(p.tp) > 1:
        args.append("--tp-comm-overlap")
    if not bool(p.grad_accumulation_fusion):
        args.append("--no-gradient-accumulation-fusion")
    if Schedule(int(p.schedule)) == Schedule.INTERLEAVED and not bool(np.asarray(p.overlap_p2p)):
        args.append("--no-overlap-p2p-communication")
    if Schedule(int(p.schedule)) in (Schedule.GPIPE, Schedule.ZB_H1):
        args.append(f"# schedule {Schedule(int(p.schedule)).label}: not a Megatron-LM schedule; it runs 1F1B")
    args.append(
        {
            "bf16": "--bf16",
            "fp16": "--fp16",
            "fp8": "--bf16 --fp8-format hybrid",
            "mxfp8": "--bf16 --fp8-format e4m3 --fp8-recipe mxfp8",
        }[p.precision]
    )
    if not bool(p.flash_attention):
        args.append("--attention-backend unfused")
    args += [
        f"--num-layers {m.layers}",
        f"--hidden-size {m.hidden}",
        f"--num-attention-heads {m.heads}",
        f"--ffn-hidden-size {m.ffn_hidden}",
        f"--seq-length {m.seq_len}",
        f"--max-position-embeddings {m.seq_len}",
    ]
    if m.kv_heads != m.heads:
        args += ["--group-query-attention", f"--num-query-groups {m.kv_heads}"]
    if m.gated_mlp:
        args.append("--swiglu")
    if not m.tied_embeddings:
        args.append("--untie-embeddings-and-output-weights")
    if m.rmsnorm:
        args.append("--normalization RMSNorm")
    if not m.learned_positions:
        args.append("--position-embedding-type rope")
    if not m.bias:
        args.append("--disable-bias-linear")
    launch = f"torchrun --nnodes {_i(c.nodes)} --nproc-per-node {_i(c.gpus_per_node)} pretrain_gpt.py"
    return _command(launch, args)


def _command(launch: str, args: list[str], head: str = "") -> str:
    """Comments (what the framework cannot express) first, then the command with one flag a line."""
    notes = [a for a in args if a.startswith("#")]
    flags = [a for a in args if not a.startswith("#")]
    return head + "".join(f"{n}\n" for n in notes) + " \\\n    ".join([launch, *flags])


TORCHTITAN_SCHEDULES = {
    Schedule.GPIPE: "GPipe",
    Schedule.ONE_F_ONE_B: "1F1B",
    Schedule.INTERLEAVED: "Interleaved1F1B",
    Schedule.ZB_H1: "InterleavedZeroBubble",
}


def torchtitan(scn: Scenario) -> str:
    m, c, p = scn.model, scn.cluster, scn.plan
    dp, z = _i(p.dp), _i(p.zero_stage)
    shard, replicate = (dp, 1) if z >= 1 else (1, dp)
    tokens_mb = _i(p.micro_batch) * m.seq_len
    args = [
        f"--parallelism.tensor_parallel_degree {_i(p.tp)}",
        f"--parallelism.pipeline_parallel_degree {_i(p.pp)}",
        f"--parallelism.context_parallel_degree {_i(p.cp)}",
        f"--parallelism.data_parallel_shard_degree {shard}",
        f"--parallelism.data_parallel_replicate_degree {replicate}",
        f"--training.max_context_length {m.seq_len}",
        f"--training.num_tokens_per_microbatch_per_dp_rank {tokens_mb}",
        f"--training.num_tokens_per_train_step {_i(p.global_batch) * m.seq_len}",
    ]
    if _i(p.pp) > 1:
        args += [
            f"--parallelism.pipeline_parallel_schedule {TORCHTITAN_SCHEDULES[Schedule(int(p.schedule))]}",
            f"--parallelism.num_pp_microbatches {_i(p.num_micro_batches)}",
        ]
        if _i(p.vpp) > 1:
            per_stage = m.layers // (_i(p.pp) * _i(p.vpp))
            args.append(f"--parallelism.pipeline_parallel_layers_per_stage {per_stage}")
    rc = Recompute(int(p.recompute))
    args.append(f"# activation checkpointing: {rc.label} (the ActivationCheckpointing config of the model)")
    if z in (1, 2):
        args.append(f"# ZeRO-{z}: FSDP2 shards parameters too (ZeRO-3); the shard degree above is FSDP's")
    if p.precision == "fp8":
        args.append("# FP8: enable the float8 model converter in the config")
    if p.precision == "mxfp8":
        args.append("# MXFP8: enable the mx model converter in the config (Blackwell)")
    launch = f"NGPU={_i(c.gpus_per_node)} torchrun --nnodes {_i(c.nodes)} -m torchtitan.train"
    return _command(launch, args)


def deepspeed(scn: Scenario) -> str:
    m, c, p = scn.model, scn.cluster, scn.plan
    dp = _i(p.dp)
    config = {
        "train_batch_size": _i(p.global_batch),
        "train_micro_batch_size_per_gpu": _i(p.micro_batch),
        "gradient_accumulation_steps": _i(p.num_micro_batches),
        "zero_optimization": {"stage": min(_i(p.zero_stage), 1 if _i(p.pp) > 1 else 3), "overlap_comm": True},
        "bf16": {"enabled": p.precision in ("bf16", "fp8", "mxfp8")},
        "fp16": {"enabled": p.precision == "fp16"},
    }
    args = [
        f"--tensor-model-parallel-size {_i(p.tp)}",
        f"--pipeline-model-parallel-size {_i(p.pp)}",
        f"--micro-batch-size {_i(p.micro_batch)}",
        f"--global-batch-size {_i(p.global_batch)}",
        f"--num-layers {m.layers} --hidden-size {m.hidden} --num-attention-heads {m.heads} --seq-length {m.seq_len}",
        "--deepspeed --deepspeed_config ds_config.json",
    ]
    if Recompute(int(p.recompute)) == Recompute.FULL:
        args.append("--checkpoint-activations")
    notes = []
    if _i(p.zero_stage) >= 2 and _i(p.pp) > 1:
        notes.append(f"# ZeRO-{_i(p.zero_stage)} with a pipeline: DeepSpeed's pipeline engine allows stage 1 only")
    if _i(p.vpp) > 1 or _i(p.cp) > 1:
        notes.append("# interleaved stages and context parallelism: not in DeepSpeed's pipeline engine")
    head = f"# ds_config.json ({dp} data-parallel replicas)\n" + json.dumps(config, indent=2) + "\n"
    launch = f"deepspeed --num_nodes {_i(c.nodes)} --num_gpus {_i(c.gpus_per_node)} pretrain_gpt.py"
    return _command(launch, notes + args, head)


def emit(scn: Scenario, framework: str) -> str:
    """The launch command of `scn` for `framework` (one of FRAMEWORKS)."""
    emitters = {"megatron": megatron, "torchtitan": torchtitan, "deepspeed": deepspeed}
    return emitters[framework](scn)


def vllm(scn: Scenario, workload: object, model_id: str = "MODEL") -> str:
    """`vllm serve` for a serving plan (`workload`: a ServingWorkload)."""
    p = scn.plan
    wl = workload
    per_replica = -(-int(np.asarray(wl.batch)) // _i(p.dp))  # type: ignore[attr-defined]
    args = [
        f"--tensor-parallel-size {_i(p.tp)}",
        f"--pipeline-parallel-size {_i(p.pp)}",
        f"--max-num-seqs {per_replica}",
        f"--max-model-len {int(wl.input_len) + int(wl.output_len)}",  # type: ignore[attr-defined]
    ]
    if wl.kv_precision == "fp8":  # type: ignore[attr-defined]
        args.append("--kv-cache-dtype fp8")
    quant = {
        "fp8": "fp8",
        "int8": "# int8 weights: a pre-quantised checkpoint (GPTQ/AWQ int8)",
        "int4": "# int4 weights: a pre-quantised checkpoint (AWQ or GPTQ int4)",
        "nvfp4": "modelopt_fp4",
        "mxfp4": "# mxfp4 weights: a pre-quantised checkpoint (e.g. gpt-oss), detected from its config",
    }.get(wl.weight_precision)  # type: ignore[attr-defined]
    if quant:
        args.append(quant if quant.startswith("#") else f"--quantization {quant}")
    if _i(p.dp) > 1:
        args.append(f"# {_i(p.dp)} replicas: one such server per {_i(p.tp) * _i(p.pp)} GPUs behind a load balancer")
    return _command(f"vllm serve {model_id}", args)
