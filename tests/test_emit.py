"""`plan --emit`: the best plan as the launch flags of the framework that will run it."""

from __future__ import annotations

import json
import re

from shardwise import presets
from shardwise.emit import emit
from shardwise.specs import Plan, Scenario


def _scenario(**plan):
    model, cluster = presets.model("llama3-405b"), presets.system("dgx-h100", nodes=16)
    return Scenario(model, cluster, Plan(**{"tp": 8, "pp": 8, "dp": 2, "global_batch": 256, **plan}))


def _flags(text: str) -> dict[str, str]:
    return dict(re.findall(r"(--[\w.-]+)(?: ([^\s\\-][^\s\\]*))?", text))


def test_megatron_flags_say_the_whole_plan():
    text = emit(
        _scenario(
            vpp=2,
            schedule="interleaved",
            sequence_parallel=True,
            recompute="full",
            zero_stage=1,
            first_stage_layers=14,
            last_stage_layers=14,
        ),
        "megatron",
    )
    f = _flags(text)
    assert f["--tensor-model-parallel-size"] == "8" and f["--pipeline-model-parallel-size"] == "8"
    assert f["--num-virtual-stages-per-pipeline-rank"] == "2"
    assert f["--decoder-first-pipeline-num-layers"] == "14" and f["--decoder-last-pipeline-num-layers"] == "14"
    assert f["--global-batch-size"] == "256" and f["--num-query-groups"] == "8" and f["--num-layers"] == "126"
    for flag in ("--sequence-parallel", "--use-distributed-optimizer", "--swiglu", "--recompute-granularity"):
        assert flag in f
    assert text.startswith("torchrun --nnodes 16 --nproc-per-node 8 pretrain_gpt.py")
    # every line but the last continues the command; comments come before it
    lines = text.splitlines()
    assert all(line.endswith("\\") for line in lines[:-1] if not line.startswith("#"))


def test_torchtitan_tokens_add_up_to_the_global_batch():
    scn = _scenario(zero_stage=3)
    f = _flags(emit(scn, "torchtitan"))
    per_mb = int(f["--training.num_tokens_per_microbatch_per_dp_rank"])
    step = int(f["--training.num_tokens_per_train_step"])
    m = int(f["--parallelism.num_pp_microbatches"])
    assert step == per_mb * m * int(f["--parallelism.data_parallel_shard_degree"]) == 256 * 8192


def test_deepspeed_config_is_valid_json_and_says_what_it_cannot_run(cli):
    text = emit(_scenario(vpp=2, schedule="interleaved", zero_stage=1), "deepspeed")
    config = json.loads(text.split("\n", 1)[1].split("\n#")[0].split("\ndeepspeed")[0])
    assert config["train_batch_size"] == 256 and config["gradient_accumulation_steps"] == 128
    assert "# interleaved stages" in text
    code, out, err = cli(
        [
            "plan",
            "--model",
            "gpt-1.7b",
            "--system",
            "dgx-a100",
            "--global-batch",
            "64",
            "--top",
            "1",
            "--emit",
            "megatron",
            "--json",
        ]
    )
    assert code == 0, err
    assert json.loads(out)["launch"].startswith("torchrun")


def test_serve_emits_one_vllm_server_per_replica(cli):
    code, out, err = cli(
        [
            "serve",
            "--model",
            "llama3-70b",
            "--system",
            "dgx-h100",
            "--plan",
            "tp=4",
            "--concurrency",
            "64",
            "--weight-precision",
            "fp8",
            "--emit",
            "vllm",
            "--json",
        ]
    )
    assert code == 0, err
    launch = json.loads(out)["plans"][0]["launch"]
    f = _flags(launch)
    assert f["--tensor-parallel-size"] == "4" and f["--max-num-seqs"] == "32" and f["--quantization"] == "fp8"
    assert "# 2 replicas" in launch


def test_plan_emit_vllm_points_to_serve(cli):
    code, out, err = cli(
        ["plan", "--model", "llama3-8b", "--system", "rtx4090-8x", "--global-batch", "64", "--emit", "vllm"]
    )
    assert code == 2 and out == "" and err.count("\n") == 1 and "shardwise serve" in err
