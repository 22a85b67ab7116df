"""Check what `--emit` writes against the real tools (a development-time check, not a test).

Given checkouts of Megatron-LM, torchtitan, DeepSpeed and Megatron-DeepSpeed, and a Python that
has PyTorch (CPU) and vLLM installed, this emits every target's launch for a matrix of plans and
runs each tool's own argument parsing and validation on it, in that Python, with the CUDA queries
stubbed (the GPU's compute capability comes from the plan's system):

- megatron: `parse_args`, `validate_args`, `core_transformer_config_from_args`, then
  `get_num_layers_to_build` for every pipeline rank and model chunk, compared with the stages
  shardwise priced; the config's experts, top-k, EP, query groups, FFN, rotary base and FSDP
  sharding compared with the plan;
- torchtitan: `ConfigManager.parse_args` (with the emitted config module), `ParallelDims`, the
  trainer's token arithmetic (gradient accumulation), the model config's shape, and the layers of
  each pipeline rank under the schedule's stage placement; FSDP2's reshard policy as torchtitan
  resolves it (ZeRO-2/3), the HSDP shard group, torch.compile of the model and async TP;
- deepspeed: DeepSpeed's `DeepSpeedConfig` on ds_config.json with the data-parallel world size,
  Megatron-DeepSpeed's `parse_args` and `validate_args` (its `--zero-stage` against the JSON's stage:
  pretrain_gpt.py reads the flag, never the JSON), and DeepSpeed's `partition_balanced`
  stage split compared with the stages shardwise priced;
- vllm: each serving plan through `shardwise serve --emit vllm --json` (in-flight batching, as a
  user runs it), then `FlexibleArgumentParser` + `EngineArgs.add_cli_args` / `from_cli_args`
  (choices and types of every flag), the `ParallelConfig` and `SchedulerConfig` that
  `create_engine_config` builds (their checks: data-parallel ranks, sequences against the token
  budget), each MoE layer's expert layout (`FusedMoEParallelConfig.make`: ep, expert TP,
  sequence-parallel MoE) against the plan, and every `--all2all-backend` a note names kept by
  `ParallelConfig`; `create_engine_config` itself needs a GPU and is not run. A launch over
  several servers (data-parallel attention) is checked server by server, each command through
  `vllm serve`'s own parser (`make_arg_parser`, `validate_parsed_serve_args`: `--headless` is a
  serve flag; this needs vLLM's frontend dependencies, fastapi and openai), the serve command's
  choice of what to start (`ServeSubcommand.cmd`: API servers on the head, `run_headless` on the
  others), and `create_engine_config` (headless on the others) run up to the `ParallelConfig` it
  builds: its data-parallel size, local ranks, first rank, address and load-balancing mode.

    python tools/check_emit.py --python /tmp/venv/bin/python --megatron DIR --torchtitan DIR \\
        --deepspeed DIR --megatron-deepspeed DIR [--out tools/check_emit_results.md]

Nothing from those tools is imported into shardwise: each runs in a worker process
(`--worker TARGET`) that reads the jobs as JSON on stdin and prints one JSON result per job.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- the matrix (shardwise side)

# (id, model, system, nodes, plan fields)
TRAINING_MATRIX: list[tuple[str, str, str, int, dict]] = [
    (
        "gpt175b-z1",
        "gpt3-175b",
        "dgx-a100",
        16,
        dict(
            tp=8,
            pp=8,
            dp=2,
            global_batch=256,
            zero_stage=1,
            sequence_parallel=True,
            recompute="selective",
            flash_attention=False,
        ),
    ),
    (
        "gpt175b-z0",
        "gpt3-175b",
        "dgx-a100",
        16,
        dict(tp=8, pp=8, dp=2, global_batch=256, zero_stage=0, overlap_param_gather=True),
    ),
    (
        "gpt175b-z3",
        "gpt3-175b",
        "dgx-h100",
        16,
        dict(
            tp=8,
            pp=1,
            dp=16,
            global_batch=256,
            zero_stage=3,
            overlap_param_gather=True,
            recompute="full",
            sequence_parallel=True,
        ),
    ),
    (
        "gpt175b-z2",
        "gpt3-175b",
        "dgx-h100",
        16,
        dict(tp=8, pp=1, dp=16, global_batch=256, zero_stage=2, recompute="full", sequence_parallel=True),
    ),
    (
        "gpt175b-interl",
        "gpt3-175b",
        "dgx-a100",
        16,
        dict(tp=8, pp=8, dp=2, vpp=4, schedule="interleaved", global_batch=512, zero_stage=1, sequence_parallel=True),
    ),
    ("gpt175b-fp16", "gpt3-175b", "dgx-a100", 16, dict(tp=8, pp=16, dp=1, global_batch=64, precision="fp16")),
    ("gpt1.7b-dp", "gpt-1.7b", "dgx-a100", 1, dict(tp=1, pp=1, dp=8, global_batch=64, micro_batch=2)),
    ("gpt1.7b-z3", "gpt-1.7b", "dgx-a100", 1, dict(tp=1, pp=1, dp=8, global_batch=64, zero_stage=3)),
    ("gpt1.7b-gpipe", "gpt-1.7b", "dgx-a100", 1, dict(tp=2, pp=4, dp=1, global_batch=64, schedule="gpipe")),
    ("gpt1.7b-zbh1", "gpt-1.7b", "dgx-a100", 1, dict(tp=2, pp=4, dp=1, global_batch=64, schedule="zb-h1")),
    ("gpt22b-full", "gpt-22b", "dgx-a100", 4, dict(tp=8, pp=2, dp=2, global_batch=128, recompute="full", zero_stage=1)),
    ("l8b-z3", "llama3-8b", "dgx-h100", 1, dict(tp=1, pp=1, dp=8, global_batch=64, zero_stage=3)),
    # bf16 gradient reduction: Megatron's --grad-reduce-in-bf16; torchtitan re-prices it as fp32 (its
    # training.mixed_precision_reduce is Literal["float32"]) (review 33)
    (
        "l8b-z3-bf16-reduce",
        "llama3-8b",
        "dgx-h100",
        1,
        dict(tp=1, pp=1, dp=8, global_batch=64, zero_stage=3, grad_reduce_bf16=True),
    ),
    # the model file's own features (review 33): Mistral's window on every layer, Qwen2.5's QKV biases,
    # Qwen3's QK norm
    ("mistral7b-window", "mistral-7b", "dgx-h100", 1, dict(tp=2, pp=1, dp=4, global_batch=32, zero_stage=1)),
    ("qwen3-8b", "qwen3-8b", "dgx-h100", 1, dict(tp=2, pp=1, dp=4, global_batch=32, zero_stage=1)),
    (
        "l8b-tp2-z1",
        "llama3-8b",
        "dgx-h100",
        1,
        dict(tp=2, pp=1, dp=4, global_batch=64, zero_stage=1, sequence_parallel=True),
    ),
    ("l8b-z0", "llama3-8b", "dgx-h100", 1, dict(tp=1, pp=1, dp=8, global_batch=64, zero_stage=0)),
    ("l8b-z2", "llama3-8b", "dgx-h100", 1, dict(tp=1, pp=1, dp=8, global_batch=64, zero_stage=2, recompute="full")),
    ("l8b-pp2-z2", "llama3-8b", "dgx-h100", 1, dict(tp=1, pp=2, dp=4, global_batch=64, zero_stage=2)),
    ("l8b-pp2-z3", "llama3-8b", "dgx-h100", 1, dict(tp=1, pp=2, dp=4, global_batch=64, zero_stage=3)),
    (
        "l8b-fp8",
        "llama3-8b",
        "dgx-h100",
        1,
        dict(tp=2, pp=1, dp=4, global_batch=64, precision="fp8", sequence_parallel=True, zero_stage=1),
    ),
    (
        "l8b-mxfp8-b200",
        "llama3-8b",
        "dgx-b200",
        1,
        dict(tp=1, pp=1, dp=8, global_batch=64, precision="mxfp8", zero_stage=1),
    ),
    ("l8b-lora", "llama3-8b", "dgx-h100", 1, dict(tp=1, pp=1, dp=8, global_batch=64, lora_rank=16)),
    (
        "l8b-cp2",
        "llama3-8b",
        "dgx-h100",
        2,
        dict(tp=2, pp=1, dp=4, cp=2, global_batch=64, sequence_parallel=True, zero_stage=1),
    ),
    (
        "l8b-cp4-a2a",
        "llama3-8b",
        "dgx-h100",
        2,
        dict(tp=2, pp=1, dp=2, cp=4, cp_comm="a2a", global_batch=64, sequence_parallel=True, zero_stage=1),
    ),
    (
        "l8b-cp2-ag",
        "llama3-8b",
        "dgx-h100",
        1,
        dict(tp=2, pp=1, dp=2, cp=2, cp_comm="all_gather", global_batch=32, sequence_parallel=True),
    ),
    ("l8b-pp4-1f1b", "llama3-8b", "dgx-h100", 1, dict(tp=2, pp=4, dp=1, global_batch=32, sequence_parallel=True)),
    ("l8b-pp3-uneven", "llama3-8b", "dgx-h100", 3, dict(tp=8, pp=3, dp=1, global_batch=32, sequence_parallel=True)),
    (
        "l70b-interl",
        "llama3-70b",
        "dgx-h100",
        4,
        dict(tp=8, pp=4, dp=1, vpp=5, schedule="interleaved", global_batch=512, sequence_parallel=True, zero_stage=1),
    ),
    (
        "l70b-pp2-interl-noov",
        "llama3-70b",
        "dgx-h100",
        2,
        dict(
            tp=8, pp=2, dp=1, vpp=2, schedule="interleaved", global_batch=64, sequence_parallel=True, overlap_p2p=False
        ),
    ),
    (
        "l70b-pp8-firstlast",
        "llama3-70b",
        "dgx-h100",
        8,
        dict(tp=8, pp=8, dp=1, first_stage_layers=9, last_stage_layers=9, global_batch=128, sequence_parallel=True),
    ),
    (
        "l70b-z3-fsdp",
        "llama3-70b",
        "dgx-h100",
        4,
        dict(tp=8, pp=1, dp=4, global_batch=128, zero_stage=3, sequence_parallel=True, recompute="full"),
    ),
    (
        "l70b-fp8-cp2",
        "llama3-70b",
        "dgx-h100",
        8,
        dict(tp=8, pp=4, dp=1, cp=2, global_batch=64, precision="fp8", sequence_parallel=True),
    ),
    (
        "l70b-tpoverlap",
        "llama3-70b",
        "dgx-h100",
        4,
        dict(tp=8, pp=4, dp=1, global_batch=64, sequence_parallel=True, tp_comm_overlap=True),
    ),
    (
        "l405b-auto-pp8",
        "llama3-405b",
        "dgx-h100",
        16,
        dict(tp=8, pp=8, dp=2, global_batch=256, sequence_parallel=True, zero_stage=1),
    ),
    (
        "l405b-7-8x14-7-v8",
        "llama3-405b",
        "dgx-h100",
        16,
        dict(
            tp=8,
            pp=16,
            dp=1,
            vpp=8,
            schedule="interleaved",
            first_stage_layers=7,
            last_stage_layers=7,
            global_batch=256,
            sequence_parallel=True,
        ),
    ),
    (
        "l405b-explicit",
        "llama3-405b",
        "dgx-h100",
        16,
        dict(tp=8, pp=16, dp=1, stage_layers=(6,) + (8,) * 14 + (8,), global_batch=256, sequence_parallel=True),
    ),
    (
        "l405b-cp2-v2",
        "llama3-405b",
        "dgx-h100",
        32,
        dict(
            tp=8,
            pp=16,
            dp=1,
            cp=2,
            vpp=2,
            schedule="interleaved",
            global_batch=256,
            sequence_parallel=True,
            recompute="full",
        ),
    ),
    ("l2-7b-mha", "llama2-7b", "dgx-a100", 1, dict(tp=4, pp=2, dp=1, global_batch=32, sequence_parallel=True)),
    (
        "mistral-z1",
        "mistral-7b",
        "dgx-h100",
        1,
        dict(tp=2, pp=1, dp=4, global_batch=64, zero_stage=1, sequence_parallel=True),
    ),
    ("qwen2.5-7b", "qwen2.5-7b", "dgx-h100", 1, dict(tp=4, pp=1, dp=2, global_batch=16, sequence_parallel=True)),
    (
        "nemotron4-15b",
        "nemotron4-15b",
        "dgx-h100",
        2,
        dict(tp=4, pp=2, dp=2, global_batch=64, sequence_parallel=True, zero_stage=1),
    ),
    (
        "mixtral-ep8",
        "mixtral-8x7b",
        "dgx-h100",
        2,
        dict(tp=2, pp=1, dp=8, ep=8, etp=1, global_batch=128, sequence_parallel=True, zero_stage=1),
    ),
    (
        "mixtral-ep4-pp2",
        "mixtral-8x7b",
        "dgx-h100",
        2,
        dict(tp=2, pp=2, dp=4, ep=4, etp=1, global_batch=128, sequence_parallel=True, zero_stage=1),
    ),
    (
        "mixtral-ep2-etp2",
        "mixtral-8x7b",
        "dgx-h100",
        1,
        dict(tp=2, pp=1, dp=4, ep=2, global_batch=64, sequence_parallel=True),
    ),
    ("qwen3-30b-ep8", "qwen3-30b-a3b", "dgx-h100", 1, dict(tp=1, pp=1, dp=8, ep=8, global_batch=64, zero_stage=1)),
    (
        "qwen3-30b-flex",
        "qwen3-30b-a3b",
        "dgx-h100",
        2,
        dict(tp=1, pp=2, dp=8, ep=8, global_batch=64, zero_stage=1, moe_dispatcher="flex"),
    ),
    (
        "qwen3-30b-overlap",
        "qwen3-30b-a3b",
        "dgx-h100",
        1,
        dict(tp=1, pp=1, dp=8, ep=8, global_batch=64, zero_stage=1, moe_overlap=True),
    ),
    (
        "dsv3-mla",
        "deepseek-v3",
        "dgx-h100",
        32,
        dict(tp=1, pp=16, dp=16, ep=16, global_batch=1024, zero_stage=1, recompute="full"),
    ),
    ("moonlight-ep", "moonlight-16b", "dgx-h100", 1, dict(tp=1, pp=1, dp=8, ep=8, global_batch=64, zero_stage=1)),
    (
        "llama4-scout-ep",
        "llama4-scout",
        "dgx-h100",
        4,
        dict(tp=4, pp=1, dp=8, ep=8, etp=1, global_batch=64, zero_stage=1, sequence_parallel=True),
    ),
    (
        "llama4-maverick-freq",
        "llama4-maverick",
        "dgx-h100",
        8,
        dict(tp=4, pp=2, dp=8, ep=8, etp=1, global_batch=128, zero_stage=1, sequence_parallel=True),
    ),
    ("gpt-oss-20b", "gpt-oss-20b", "dgx-h100", 1, dict(tp=1, pp=1, dp=8, ep=8, global_batch=64, zero_stage=1)),
    # FSDP2's reshard policy (ZeRO-2 never, ZeRO-3 always) with TP and PP, dense and MoE
    (
        "l8b-tp4-pp2-z2",
        "llama3-8b",
        "dgx-h100",
        2,
        dict(tp=4, pp=2, dp=2, global_batch=64, zero_stage=2, sequence_parallel=True),
    ),
    (
        "l70b-tp8-pp2-z3",
        "llama3-70b",
        "dgx-h100",
        4,
        dict(tp=8, pp=2, dp=2, global_batch=64, zero_stage=3, sequence_parallel=True),
    ),
    ("qwen3-30b-z3", "qwen3-30b-a3b", "dgx-h100", 1, dict(tp=1, pp=1, dp=8, ep=8, global_batch=64, zero_stage=3)),
    (
        "qwen3-30b-pp2-z2",
        "qwen3-30b-a3b",
        "dgx-h100",
        1,
        dict(tp=1, pp=2, dp=4, ep=4, global_batch=64, zero_stage=2, recompute="full"),
    ),
    # element-wise kernels eager (the torchtitan preset) against fused (torchtitan-compile, the default)
    (
        "l8b-eager",
        "llama3-8b",
        "dgx-h100",
        1,
        dict(tp=1, pp=1, dp=8, global_batch=64, zero_stage=3, eager_kernels=True),
    ),
    (
        "l8b-fp8-compile-pp",
        "llama3-8b",
        "dgx-h100",
        1,
        dict(tp=2, pp=2, dp=2, global_batch=64, precision="fp8", fp8_recipe="rowwise", zero_stage=3),
    ),
    (
        "l405b-eager",
        "llama3-405b",
        "dgx-h100",
        16,
        dict(tp=8, pp=8, dp=2, global_batch=256, sequence_parallel=True, zero_stage=3, eager_kernels=True),
    ),
    (
        "l70b-tpoverlap-eager",
        "llama3-70b",
        "dgx-h100",
        4,
        dict(tp=8, pp=4, dp=1, global_batch=64, sequence_parallel=True, tp_comm_overlap=True, eager_kernels=True),
    ),
    # hybrid sharding (HSDP): shard groups of dp x cp / replicas
    (
        "l8b-hsdp-z1",
        "llama3-8b",
        "dgx-h100",
        2,
        dict(tp=1, pp=1, dp=16, global_batch=128, zero_stage=1, shard_group=8),
    ),
    (
        "l70b-hsdp-z3",
        "llama3-70b",
        "dgx-h100",
        4,
        dict(tp=8, pp=1, dp=4, global_batch=128, zero_stage=3, shard_group=2, sequence_parallel=True),
    ),
    (
        "l8b-hsdp-cp2",
        "llama3-8b",
        "dgx-h100",
        1,
        dict(tp=1, pp=1, dp=4, cp=2, global_batch=32, zero_stage=3, shard_group=4),
    ),
    (
        "qwen3-30b-hsdp-ep8",
        "qwen3-30b-a3b",
        "dgx-h100",
        2,
        dict(tp=1, pp=1, dp=16, ep=8, global_batch=64, zero_stage=3, shard_group=8),
    ),
    (
        "qwen3-30b-hsdp-ep8-small",
        "qwen3-30b-a3b",
        "dgx-h100",
        2,
        dict(tp=1, pp=1, dp=16, ep=8, global_batch=64, zero_stage=3, shard_group=4),
    ),
]

# (id, model, system, plan text, workload: serve's flags by field name; batch is --concurrency)
SERVING_MATRIX: list[tuple[str, str, str, str, dict]] = [
    (
        "l70b-tp4-fp8",
        "llama3-70b",
        "dgx-h100",
        "tp=4",
        dict(input_len=512, output_len=128, batch=64, weight_precision="fp8"),
    ),
    (
        "l70b-tp8-kvfp8",
        "llama3-70b",
        "dgx-h100",
        "tp=8",
        dict(input_len=2048, output_len=512, batch=32, kv_precision="fp8"),
    ),
    ("l70b-pp2-tp4", "llama3-70b", "dgx-h100", "tp=4,pp=2", dict(input_len=1024, output_len=256, batch=16)),
    (
        "l8b-tp1-eager",
        "llama3-8b",
        "dgx-h100",
        "tp=1",
        dict(input_len=512, output_len=512, batch=256, runtime="pytorch-eager"),
    ),
    (
        "l8b-tp2-car",
        "llama3-8b",
        "dgx-h100",
        "tp=2",
        dict(input_len=512, output_len=512, batch=64, custom_all_reduce="vllm"),
    ),
    ("mixtral-ep", "mixtral-8x7b", "dgx-h100", "tp=4,ep=4", dict(input_len=1024, output_len=256, batch=64)),
    ("qwen3-30b", "qwen3-30b-a3b", "dgx-h100", "tp=2", dict(input_len=1024, output_len=256, batch=64)),
    # the in-flight chunk budget and the sequences a replica runs at once
    (
        "l8b-chunk256-maxtp",
        "llama3-8b",
        "dgx-h100",
        "tp=2",
        dict(input_len=1024, output_len=1024, max_throughput=True, max_batched_tokens=256),
    ),
    ("l8b-maxtp", "llama3-8b", "dgx-h100", "tp=2", dict(input_len=1024, output_len=1024, max_throughput=True)),
    ("l8b-static", "llama3-8b", "dgx-h100", "tp=4", dict(input_len=512, output_len=128, batch=32, batching="static")),
    # data-parallel attention: whole experts over all dp x tp GPUs of one server (ep = tp x dp > tp)
    ("mixtral-dpattn", "mixtral-8x7b", "dgx-h100", "tp=1,ep=8", dict(input_len=1024, output_len=256, batch=64)),
    ("qwen3-30b-dpattn", "qwen3-30b-a3b", "dgx-h100", "tp=2,ep=8", dict(input_len=1024, output_len=256, batch=64)),
    ("qwen3-30b-dpattn-tp4", "qwen3-30b-a3b", "dgx-h100", "tp=4,ep=8", dict(input_len=2048, output_len=128, batch=32)),
    ("mixtral-dpattn-etp2", "mixtral-8x7b", "dgx-h100", "tp=1,ep=4", dict(input_len=1024, output_len=256, batch=64)),
    ("mixtral-ep4-etp2", "mixtral-8x7b", "dgx-h100", "tp=4,ep=4,etp=2", dict(input_len=1024, output_len=256, batch=64)),
    # data-parallel attention over several servers: one command a server, the head's and headless ones
    (
        "dsv3-dpattn-2srv",
        "deepseek-v3",
        "dgx-h200",
        "tp=1,ep=16",
        dict(num_gpus=16, input_len=1000, output_len=1000, batch=256, weight_precision="fp8"),
    ),
    ("qwen3-30b-dpattn-2srv", "qwen3-30b-a3b", "dgx-h100", "tp=2,ep=16", dict(num_gpus=16, batch=64)),
    ("qwen3-30b-dpattn-4srv", "qwen3-30b-a3b", "dgx-h100", "tp=4,ep=32", dict(num_gpus=32, batch=64)),
    ("qwen3-30b-dpattn-pp2", "qwen3-30b-a3b", "dgx-h100", "tp=1,pp=2,ep=16", dict(num_gpus=32, batch=64)),
    ("qwen3-30b-dpattn-tp16", "qwen3-30b-a3b", "dgx-h100", "tp=16,ep=32", dict(num_gpus=32, batch=64)),
    ("qwen3-30b-tp4-ep2", "qwen3-30b-a3b", "dgx-h100", "tp=4,ep=2", dict(input_len=1024, output_len=256, batch=64)),
    (
        "l70b-int4",
        "llama3-70b",
        "dgx-h100",
        "tp=2",
        dict(input_len=512, output_len=128, batch=16, weight_precision="int4"),
    ),
]


def training_jobs() -> list[dict]:
    from shardwise import presets
    from shardwise.emit import TRAINING_TARGETS, EmitError, adapt, emit
    from shardwise.emit.facts import cuda_major, stage_layers
    from shardwise.specs import Plan, Scenario

    jobs = []
    for key, model_name, system, nodes, fields in TRAINING_MATRIX:
        model, cluster = presets.model(model_name), presets.system(system, nodes=nodes)
        scn = Scenario(model, cluster, Plan(**fields))
        for target in TRAINING_TARGETS:
            job = {"id": key, "target": target, "model": model_name, "plan": _describe(fields)}
            try:
                run, changes = adapt(scn, target)
                launch = emit(scn, target)
            except EmitError as exc:
                jobs.append({**job, "refused": str(exc)})
                continue
            p = run.plan
            jobs.append(
                {
                    **job,
                    "changes": list(changes),
                    "argv": launch.argv(),
                    "env": dict(launch.env),
                    "files": dict(launch.files),
                    "world_size": int(cluster.num_gpus),
                    "cuda_major": cuda_major(cluster.gpu),
                    "expect": {
                        "stages": stage_layers(model, p),
                        "tp": int(p.tp), "pp": int(p.pp), "dp": int(p.dp), "cp": int(p.cp), "vpp": int(p.vpp),
                        "ep": int(p.ep), "etp": int(p.expert_tp), "zero": int(p.zero_stage),
                        "micro_batch": int(p.micro_batch), "global_batch": int(p.global_batch),
                        "m": int(p.num_micro_batches), "seq_len": int(model.seq_len),
                        "layers": int(model.layers), "hidden": int(model.hidden), "heads": int(model.heads),
                        "kv_heads": int(model.kv_heads), "ffn": int(model.ffn_hidden), "vocab": int(model.vocab),
                        "experts": model.experts, "topk": model.experts_per_token,
                        "lora_rank": int(p.lora_rank), "precision": p.precision,
                        "compile": not bool(p.eager_kernels), "shard_group": int(p.shard_group),
                        "tp_overlap": bool(p.tp_comm_overlap),
                        "features": _features(model),
                    },
                }
            )  # fmt: skip
    return jobs


def serving_jobs(workdir: Path) -> list[dict]:
    """Each serving plan through `shardwise serve --emit vllm --json` (in-flight batching at
    --concurrency, vLLM's pricing, as a user runs it); what it priced from the same scenario."""
    import contextlib
    import io

    from shardwise import presets
    from shardwise.cli import main as shardwise_cli
    from shardwise.engines.dp_attention import serving_expert_layout
    from shardwise.loaders import parse_plan_spec
    from shardwise.requests.serve_plans import scenario

    flags = {"weight_precision": "--weight-precision", "kv_precision": "--kv-precision", "runtime": "--runtime",
             "input_len": "--input-len", "output_len": "--output-len", "batch": "--concurrency",
             "max_batched_tokens": "--max-batched-tokens", "batching": "--batching",
             "num_gpus": "--num-gpus"}  # fmt: skip
    jobs = []
    for key, model_name, system, plan_text, wl in SERVING_MATRIX:
        model, cluster = presets.model(model_name), presets.system(system)
        if "num_gpus" in wl:
            cluster = presets.system(system, nodes=-(-int(wl["num_gpus"]) // int(cluster.gpus_per_node)))
        model_dir = workdir / f"hf-{model_name}"
        model_dir.mkdir(exist_ok=True)
        (model_dir / "config.json").write_text(json.dumps(_hf_config(model)))
        args = ["serve", "--model", model_name, "--system", system, "--plan", plan_text, "--emit", "vllm",
                "--hf-id", str(model_dir), "--json"]  # fmt: skip
        for k, v in wl.items():
            if k == "custom_all_reduce":
                args.append("--custom-all-reduce" if v != "none" else "--no-custom-all-reduce")
            elif k == "max_throughput":
                args.append("--max-throughput")
            else:
                args += [flags[k], str(v)]
        job = {"id": key, "target": "vllm", "model": model_name, "plan": f"{plan_text} " + _describe(wl)}
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                shardwise_cli(args)
                code = 0
            except SystemExit as exc:
                code = int(exc.code or 0)
        if code:
            jobs.append({**job, "refused": err.getvalue().strip().splitlines()[-1]})
            continue
        row = json.loads(out.getvalue())["plans"][0]
        launch = row["launch"]
        p = serving_expert_layout(scenario(model, cluster, parse_plan_spec(plan_text)).plan)
        engines = int(p.dp) if model.is_moe and int(p.ep) * int(p.expert_tp) > int(p.tp) else 1  # one server's
        expect = {"tp": int(p.tp), "pp": int(p.pp), "stages": None, "dp": engines,
                  "moe": bool(model.is_moe), "ep": int(p.ep), "etp": int(p.expert_tp),
                  "sp_moe": bool(model.is_moe) and bool(p.sequence_parallel) and int(p.tp) > 1,
                  "chunk_budget": row["max_batched_tokens"] if row["batching"] == "inflight" else None}  # fmt: skip
        base = {**job, "env": launch["env"], "notes": launch["notes"],
                "launcher": shlex.split(" ".join(launch["launcher"]))}  # fmt: skip
        samples = launch.get("placeholders", {})  # --json's argv holds "$HEAD_ADDR": the parser gets its sample

        def sampled(argv: list[str], samples: dict[str, str] = samples) -> list[str]:
            return [samples.get(w, w) for w in argv]

        if not launch["nodes"]:
            jobs.append({**base, "argv": sampled(launch["argv"]), "expect": expect})
            continue
        # one job a server: its ranks as the servers before it leave them (gpus per server / tp each)
        per = int(cluster.gpus_per_node) // int(p.tp)
        for node in launch["nodes"]:
            r = node["node"]
            server = {"local": min(per, engines - r * per), "start": r * per, "headless": r > 0}
            jobs.append({**base, "id": f"{key}/server{r}", "argv": sampled(node["argv"]),
                         "expect": {**expect, "server": server}})  # fmt: skip
    return jobs


def _features(m: object) -> dict:
    """The model's own features as Megatron's TransformerConfig holds them, from the Model (review 33):
    the rotary base (None: unknown, not written), the window (W - 1 tokens to the left, none to the
    right), the full-attention layers among windowed ones, QKV biases, QK norm, the router's score
    function, the attention softmax (GPT-OSS's sinks: learnable)."""
    arch, theta = m.architecture or "", float(m.rope_theta)  # type: ignore[attr-defined]
    window = int(m.sliding_window)  # type: ignore[attr-defined]
    return {
        "rotary_base": int(theta) if theta > 0 and theta == int(theta) and not m.learned_positions else None,  # type: ignore[attr-defined]
        "window_size": [window - 1, 0] if window else None,
        "window_attn_skip_freq": int(m.full_attention_every) or None,  # type: ignore[attr-defined]  # 0: all windowed
        "add_qkv_bias": bool(m.bias) or arch in ("qwen2", "qwen2_moe"),  # type: ignore[attr-defined]
        "qk_layernorm": arch in ("qwen3", "qwen3_moe"),
        "moe_router_score_function": "sigmoid" if m.is_moe and arch in ("deepseek_v3", "kimi_k2") else "softmax",  # type: ignore[attr-defined]
        "softmax_type": "learnable" if arch == "gpt_oss" else "vanilla",
    }


def _hf_config(m: object) -> dict:
    """A Hugging Face config.json of the priced shape (Llama or Mixtral architecture)."""
    cfg = {
        "architectures": ["MixtralForCausalLM" if m.is_moe else "LlamaForCausalLM"],  # type: ignore[attr-defined]
        "model_type": "mixtral" if m.is_moe else "llama",  # type: ignore[attr-defined]
        "hidden_size": int(m.hidden), "intermediate_size": int(m.expert_ffn_hidden if m.is_moe else m.ffn_hidden),  # type: ignore[attr-defined]
        "num_hidden_layers": int(m.layers), "num_attention_heads": int(m.heads),  # type: ignore[attr-defined]
        "num_key_value_heads": int(m.kv_heads), "head_dim": int(m.head_dim), "vocab_size": int(m.vocab),  # type: ignore[attr-defined]
        "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
        "tie_word_embeddings": bool(m.tied_embeddings), "torch_dtype": "bfloat16", "hidden_act": "silu",  # type: ignore[attr-defined]
    }  # fmt: skip
    if m.is_moe:  # type: ignore[attr-defined]
        cfg.update(num_local_experts=m.experts, num_experts_per_tok=m.experts_per_token)  # type: ignore[attr-defined]
    return cfg


def _describe(fields: dict) -> str:
    return " ".join(f"{k}={','.join(map(str, v)) if isinstance(v, tuple) else v}" for k, v in fields.items())


# ---------------------------------------------------------------- driver


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--python", default=sys.executable, help="a Python with torch (CPU) and vllm")
    ap.add_argument("--megatron", help="Megatron-LM checkout")
    ap.add_argument("--torchtitan", help="torchtitan checkout")
    ap.add_argument("--deepspeed", help="DeepSpeed checkout")
    ap.add_argument("--megatron-deepspeed", help="Megatron-DeepSpeed checkout")
    ap.add_argument("--vllm", action="store_true", help="check vllm serve (vllm installed in --python)")
    ap.add_argument("--out", help="write the result table (Markdown) here")
    ap.add_argument("--only", help="run only jobs whose id contains this")
    a = ap.parse_args()
    if a.worker:
        from check_emit_workers import run_worker  # type: ignore[import-not-found]

        return run_worker(a.worker, json.loads(sys.stdin.read()), vars(a))
    sys.path.insert(0, str(ROOT / "src"))
    with tempfile.TemporaryDirectory() as tmp:
        jobs = training_jobs() + (serving_jobs(Path(tmp)) if a.vllm else [])
        if a.only:
            jobs = [j for j in jobs if a.only in j["id"]]
        repos = {"megatron": a.megatron, "torchtitan": a.torchtitan, "deepspeed": a.deepspeed, "vllm": a.vllm}
        results = []
        for target, repo in repos.items():
            todo = [j for j in jobs if j["target"] == target and "refused" not in j]
            results += [{**j, "result": "refused by shardwise", "detail": j["refused"]} for j in jobs
                        if j["target"] == target and "refused" in j]  # fmt: skip
            if not repo or not todo:
                continue
            results += _run(a, target, todo, Path(tmp))
    rows = _table(results)
    print(rows)
    if a.out:
        Path(a.out).write_text(rows + "\n")
    bad = [r for r in results if r["result"] not in ("ok", "refused by shardwise")]
    return 1 if bad else 0


def _run(a: argparse.Namespace, target: str, jobs: list[dict], tmp: Path) -> list[dict]:
    args = [a.python, str(Path(__file__).resolve()), "--worker", target]
    for name in ("megatron", "torchtitan", "deepspeed", "megatron_deepspeed"):
        if getattr(a, name):
            args += [f"--{name.replace('_', '-')}", getattr(a, name)]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent), "DS_ACCELERATOR": "cpu"}
    env.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
    proc = subprocess.run(args, input=json.dumps(jobs), capture_output=True, text=True, env=env, cwd=tmp)
    out = {}
    for line in proc.stdout.splitlines():
        if line.startswith("@@RESULT "):
            r = json.loads(line[len("@@RESULT ") :])
            out[(r["id"], r["target"])] = r
    if not out:
        sys.stderr.write(proc.stderr[-4000:])
    return [
        {**j, **out.get((j["id"], j["target"]), {"result": "worker failed", "detail": proc.stderr[-300:]})}
        for j in jobs
    ]


def _table(results: list[dict]) -> str:
    head = "| plan | target | result | detail |\n|---|---|---|---|"
    lines = []
    for r in sorted(results, key=lambda r: (r["target"], r["id"])):
        detail = (r.get("detail") or "").replace("|", "/").replace("\n", " ")[:220]
        changes = "; ".join(r.get("changes") or [])
        if changes:
            detail = (f"re-priced: {changes}. " + detail).strip()
        lines.append(f"| {r['id']} | {r['target']} | {r['result']} | {detail} |")
    counts: dict[str, int] = {}
    for r in results:
        counts[r["result"]] = counts.get(r["result"], 0) + 1
    summary = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
    return f"{summary}\n\n{head}\n" + "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
