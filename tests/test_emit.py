"""`--emit`: launches the real tools accept and that run the priced job. The rules below are what
tools/check_emit.py found the tools enforce (Megatron-LM validate_args and get_num_layers_to_build,
torchtitan's config and pipeline split, DeepSpeed's batch check and partition, vLLM's parser);
they run here without those checkouts."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from shardwise import presets
from shardwise.emit import EmitError, adapt, emit, vllm_launch
from shardwise.emit.deepspeed import deepspeed_stages
from shardwise.emit.megatron import _compress
from shardwise.specs import Plan, Scenario


def _scn(model="llama3-405b", system="dgx-h100", nodes=16, **plan):
    return Scenario(presets.model(model), presets.system(system, nodes=nodes), Plan(**plan))


def _args(launch) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for group in launch.args:
        out[group[0]] = list(group[1:])
    return out


def _unroll(layout: str) -> list[str]:
    """Megatron-LM's layout parser (PipelineParallelLayerLayout.parse_str_to_list), rewritten."""
    s = layout.replace(",", "")
    while m := re.search(r"\(([^)]+)\)\*(\d+)", s):
        s = s[: m.start()] + m.group(1) * int(m.group(2)) + s[m.end() :]
    s = re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), s)
    return s.split("|")


def test_megatron_405b_uneven_interleaved_is_a_layout_with_the_priced_layers_per_rank():
    scn = _scn(tp=8, pp=16, dp=1, vpp=8, schedule="interleaved", first_stage_layers=7, last_stage_layers=7,
               global_batch=256, sequence_parallel=True)  # fmt: skip
    launch = emit(scn, "megatron")
    a = _args(launch)
    assert "--decoder-first-pipeline-num-layers" not in a and "--num-virtual-stages-per-pipeline-rank" not in a
    parts = _unroll(a["--pipeline-model-parallel-layout"][0])
    assert len(parts) == 16 * 8 and parts[0].startswith("E") and parts[-1].endswith("L")
    per_rank = [sum(parts[v * 16 + r].count("t") for v in range(8)) for r in range(16)]
    assert per_rank == [7] + [8] * 14 + [7]
    assert ("CUDA_DEVICE_MAX_CONNECTIONS", "1") in launch.env


def test_megatron_even_stages_need_no_layout_and_blackwell_no_connection_limit():
    launch = emit(_scn("llama3-8b", "dgx-b200", 1, tp=2, pp=4, dp=1, global_batch=32, sequence_parallel=True),
                  "megatron")  # fmt: skip
    a = _args(launch)
    assert "--pipeline-model-parallel-layout" not in a and a["--pipeline-model-parallel-size"] == ["4"]
    assert launch.env == ()


def test_a_blackwell_of_ones_own_file_gets_the_blackwell_launch_rule():
    """The rule reads the GPU's GEMM kernels, not its preset's name: a B200 copied under a new name
    keeps it; without `gemm_kernels: sm100` the copy is taken as an older GPU."""
    from dataclasses import replace

    from shardwise.loaders import gpu_from_dict

    mine = gpu_from_dict("my-b200", dict(presets.raw("gpus")["b200-sxm-180gb"]))
    cluster = presets.system("dgx-b200")
    for gpu, env in ((mine, ()), (replace(mine, gemm_kernels="generic"), (("CUDA_DEVICE_MAX_CONNECTIONS", "1"),))):
        scn = Scenario(presets.model("llama3-8b"), cluster.with_(gpu=gpu), Plan(tp=2, pp=4, dp=1, global_batch=32))
        assert emit(scn, "megatron").env == env


def test_layout_short_form_unrolls_to_the_same_parts():
    parts = ["Et*3", "tttt", "tttt", "tttt", "tttL"]
    parts = ["E" + "t" * 3, "t" * 4, "t" * 4, "t" * 4, "t" * 3 + "L"]
    assert _unroll(_compress(parts)) == parts


def test_megatron_zero_stages_are_the_distributed_optimizer_or_megatron_fsdp():
    base = dict(model="gpt3-175b", tp=8, pp=1, dp=16, global_batch=256, overlap_param_gather=True)
    z0, z1, z3 = (_args(emit(_scn(**base, zero_stage=z), "megatron")) for z in (0, 1, 3))
    assert "--overlap-param-gather" not in z0 and "--use-distributed-optimizer" not in z0
    assert "--use-distributed-optimizer" in z1 and "--overlap-param-gather" in z1
    assert "--use-megatron-fsdp" in z3 and z3["--data-parallel-sharding-strategy"] == ["optim_grads_params"]
    assert z3["--ckpt-format"] == ["fsdp_dtensor"]
    fsdp = emit(_scn(**base, zero_stage=3), "megatron")
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in dict(fsdp.env)  # Megatron FSDP asserts it is not 1
    old = _args(emit(_scn(**base, zero_stage=3), "megatron", "core-0.13"))
    assert "--use-custom-fsdp" in old


def test_megatron_moe_flags_launch_the_mixture():
    a = _args(emit(_scn("mixtral-8x7b", nodes=2, tp=2, pp=1, dp=8, ep=8, etp=1, global_batch=128,
                        sequence_parallel=True), "megatron"))  # fmt: skip
    assert a["--num-experts"] == ["8", "--moe-router-topk", "2"]
    assert a["--expert-model-parallel-size"] == ["8", "--expert-tensor-parallel-size", "1"]
    assert a["--moe-token-dispatcher-type"] == ["alltoall"] and "--moe-grouped-gemm" in a
    gathered = _args(emit(_scn("mixtral-8x7b", nodes=2, tp=2, pp=1, dp=8, ep=8, etp=1, global_batch=128,
                               sequence_parallel=True, moe_dispatcher="allgather"), "megatron"))  # fmt: skip
    assert gathered["--moe-token-dispatcher-type"] == ["allgather"]
    dsv3 = _args(emit(_scn("deepseek-v3", nodes=32, tp=1, pp=16, dp=16, ep=16, global_batch=1024), "megatron"))
    assert dsv3["--moe-layer-freq"] == ["([0]*3+[1]*58)"] and "--multi-latent-attention" in dsv3
    top1 = _args(emit(_scn("llama4-scout", nodes=4, tp=4, pp=1, dp=8, ep=8, etp=1, global_batch=64,
                           sequence_parallel=True), "megatron"))  # fmt: skip
    assert "--moe-router-pre-softmax" in top1  # Megatron-Core asks it with top-1


def test_megatron_llama_shape_and_what_to_add():
    launch = emit(_scn("llama3-70b", nodes=4, tp=8, pp=4, dp=1, global_batch=64, sequence_parallel=True), "megatron")
    a = _args(launch)
    assert a["--position-embedding-type"] == ["rope", "--rotary-base", "500000"]
    assert a["--num-query-groups"] == ["8"] if "--num-query-groups" in a else a["--group-query-attention"][-1] == "8"
    assert "--untie-embeddings-and-output-weights" in a and "--disable-bias-linear" in a and "--swiglu" in a
    assert 128256 % (int(a["--make-vocab-size-divisible-by"][0]) * 8) == 0  # the priced vocabulary, unpadded
    assert any("tokenizer" in t for t in launch.todo) and any("data" in t for t in launch.todo)


def test_megatron_refuses_lora_and_reprices_gpipe():
    with pytest.raises(EmitError, match="LoRA"):
        emit(_scn("llama3-8b", nodes=1, tp=1, pp=1, dp=8, global_batch=64, lora_rank=16), "megatron")
    run, changes = adapt(_scn("gpt-1.7b", "dgx-a100", 1, tp=2, pp=4, global_batch=64, schedule="gpipe"), "megatron")
    assert run.plan.schedule == 1 and "gpipe -> 1f1b" in changes[0]


def test_block_recomputation_of_some_layers_is_megatrons_block_method_and_refused_elsewhere():
    scn = _scn("llama3-8b", nodes=1, tp=2, pp=2, dp=2, global_batch=64, recompute_layers=3)
    flags = " ".join(" ".join(group) for group in emit(scn, "megatron").args)
    assert "--recompute-granularity full --recompute-method block --recompute-num-layers 3" in flags
    plain = " ".join(
        " ".join(g) for g in emit(_scn("llama3-8b", nodes=1, tp=2, pp=2, dp=2, global_batch=64), "megatron").args
    )
    assert "--recompute" not in plain
    with pytest.raises(EmitError, match="one --recompute-granularity"):
        emit(
            _scn("llama3-8b", nodes=1, tp=2, pp=2, dp=2, global_batch=64, recompute="selective", recompute_layers=3),
            "megatron",
        )
    for target in ("torchtitan", "deepspeed"):
        with pytest.raises(EmitError, match="recompute"):
            emit(scn, target)


def test_torchtitan_names_its_config_and_prices_zero1_as_fsdp2_without_resharding():
    scn = _scn("llama3-8b", nodes=1, tp=2, pp=1, dp=4, global_batch=64, zero_stage=1, sequence_parallel=True)
    run, changes = adapt(scn, "torchtitan")
    assert run.plan.zero_stage == 2 and "ZeRO-1 -> ZeRO-2" in changes[0]
    launch = emit(scn, "torchtitan")
    a = _args(launch)
    assert a["--module"] == ["llama3", "--config", "llama3_8b"]
    assert a["--parallelism.data_parallel_shard_degree"] == ["4"]
    assert launch.launcher[:3] == ("torchrun", "--nproc-per-node", "8")
    with pytest.raises(EmitError, match="registered models"):
        emit(_scn("gpt3-175b", tp=8, pp=8, dp=2, global_batch=256), "torchtitan")


@pytest.mark.parametrize("pp", [1, 2])
def test_torchtitan_zero2_is_fsdp2_never_resharding_and_zero3_always(pp):
    """FSDP2 without resharding after forward is ZeRO-2 (torchtitan's --parallelism.fsdp_reshard_after_forward
    never), with it ZeRO-3 (always); the policy is written out because its default depends on PP."""
    base = dict(nodes=1, tp=1, pp=pp, dp=8 // pp, global_batch=64, recompute="full")
    for zero, policy in ((2, "never"), (3, "always")):
        scn = _scn("llama3-8b", zero_stage=zero, **base)
        run, changes = adapt(scn, "torchtitan")
        assert int(run.plan.zero_stage) == zero and not any("ZeRO" in c for c in changes)
        a = _args(emit(scn, "torchtitan"))
        assert a["--parallelism.fsdp_reshard_after_forward"] == [policy]
        assert a["--parallelism.data_parallel_shard_degree"] == [str(8 // pp)]
    ddp = _args(emit(_scn("llama3-8b", zero_stage=0, **base), "torchtitan"))
    assert "--parallelism.fsdp_reshard_after_forward" not in ddp


def test_torchtitan_stage_lists_hold_the_priced_layers():
    scn = _scn("llama3-70b", nodes=8, tp=8, pp=8, dp=1, first_stage_layers=9, last_stage_layers=9,
               global_batch=128, sequence_parallel=True)  # fmt: skip
    a = _args(emit(scn, "torchtitan"))
    parts = a["--parallelism.module_fqns_per_model_part"]
    counts = [sum(m.startswith("layers.") for m in p.split(",")) for p in parts]
    assert counts == [9, 11, 11, 10, 10, 10, 10, 9]
    assert parts[0].startswith("tok_embeddings") and parts[-1].endswith("norm,lm_head")
    assert "--training.disable_cuda_graphs" in a  # torchtitan refuses CUDA graphs under PP


def test_torchtitan_bf16_405b_drops_the_configs_float8_and_fp8_adds_it():
    bf16 = emit(_scn(tp=8, pp=16, dp=1, global_batch=256, sequence_parallel=True), "torchtitan")
    job = dict(bf16.files)["shardwise_job.py"]
    assert "model_registry('405B')" in job and "Float8LinearConverter.Config()" not in job.split("for converter")[1]
    fp8 = emit(_scn("llama3-8b", nodes=1, tp=2, dp=4, global_batch=64, precision="fp8", sequence_parallel=True,
                    zero_stage=3), "torchtitan")  # fmt: skip
    job = dict(fp8.files)["shardwise_job.py"]
    assert "Float8LinearConverter.Config(recipe_name='rowwise', model_compile_enabled=True)" in job
    assert any(c.startswith("FP8 recipe te -> rowwise") for c in fp8.changes)  # no TE, no tensorwise there


def test_torchtitan_quantises_the_experts_it_prices_in_fp8():
    """A mixture of experts in FP8 or MXFP8 is priced with its experts' grouped GEMMs in it
    (engines.moe): the job converts them too (torchtitan's Linear converters leave GroupedExperts
    bf16; its deepseek_v3 float8 config adds Float8GroupedExpertsConverter); a dense model gets none."""
    for precision, kind in (("fp8", "Float8"), ("mxfp8", "MXFP8")):
        scn = _scn("qwen3-30b-a3b", nodes=1, tp=1, dp=8, ep=8, global_batch=64, precision=precision, zero_stage=3,
                   recompute="full")  # fmt: skip
        job = dict(emit(scn, "torchtitan").files)["shardwise_job.py"]
        assert f"{kind}GroupedExpertsConverter.Config(model_compile_enabled=" in job.split("def job")[1], precision
    dense = _scn("llama3-8b", nodes=1, tp=1, dp=8, global_batch=64, precision="fp8", zero_stage=3)
    assert "GroupedExpertsConverter.Config" not in dict(emit(dense, "torchtitan").files)["shardwise_job.py"]


def test_launches_carry_or_reprice_this_sessions_plan_fields():
    """MTP on a dense model is Megatron's --mtp-num-layers too; torchao recipes are not Megatron's
    FP8; torchtitan main writes its recipe; pipeline flushes and packed documents, which no launch
    here sets, are re-priced as one schedule a step on whole sequences."""
    dense = emit(_scn("llama3-8b", nodes=1, tp=1, pp=2, dp=4, global_batch=64, mtp_layers=1), "megatron")
    assert ("--mtp-num-layers", "1") in dense.args
    fp8 = dict(nodes=1, tp=1, dp=8, global_batch=64, precision="fp8", zero_stage=3)
    mega = emit(_scn("llama3-8b", **fp8, fp8_recipe="rowwise"), "megatron")
    assert mega.changes == ("FP8 recipe rowwise (torchao.float8) -> Transformer Engine's (Megatron-LM's FP8)",)
    titan = emit(_scn("llama3-8b", **fp8, fp8_recipe="rowwise_with_gw_hp"), "torchtitan")
    job = dict(titan.files)["shardwise_job.py"]
    assert "Float8LinearConverter.Config(recipe_name='rowwise_with_gw_hp', model_compile_enabled=True)" in job
    assert not titan.changes
    shaped = _scn("llama3-8b", nodes=1, tp=1, pp=2, dp=4, global_batch=64, pipeline_flushes=2, packed_document_len=1024)
    for target in ("megatron", "torchtitan", "deepspeed"):
        run, changes = adapt(shaped, target)
        assert (int(run.plan.pipeline_flushes), int(run.plan.packed_document_len)) == (1, 0), target
        assert len(changes) >= 2 and "packed documents of 1024 tokens" in changes[1], (target, changes)


def test_deepspeed_batch_adds_up_over_data_parallel_ranks_only():
    scn = _scn("llama3-8b", nodes=2, tp=2, pp=1, dp=2, cp=4, cp_comm="a2a", global_batch=64, sequence_parallel=True)
    launch = emit(scn, "deepspeed")
    config = json.loads(dict(launch.files)["ds_config.json"])
    assert config["train_batch_size"] == config["train_micro_batch_size_per_gpu"] * config[
        "gradient_accumulation_steps"] * 2  # fmt: skip
    a = _args(launch)
    assert a["--ds-sequence-parallel-size"] == ["4"] and a["--seq-length"] == [
        "8192",
        "--max-position-embeddings",
        "8192",
    ]
    assert a["--num-attention-heads"] == ["32", "--num-key-value-heads", "8"] and "--swiglu" in a


def test_deepspeed_launch_names_the_json_zero_stage():
    """Megatron-DeepSpeed's --zero-stage defaults to 1 (megatron/arguments.py @4efb479d) and nothing
    reads ds_config.json's stage back: pretrain_gpt.py builds the model under deepspeed.zero.Init only
    when args.zero_stage == 3, so a ZeRO-3 JSON without the flag builds every rank unsharded (review 43)."""
    plans = [dict(tp=1, pp=1, dp=8, global_batch=64, zero_stage=z) for z in (0, 1, 2, 3)]
    plans.append(dict(tp=1, pp=2, dp=4, global_batch=64, zero_stage=3))  # the pipeline engine: ZeRO-1
    for fields in plans:
        launch = emit(_scn("llama3-8b", nodes=1, **fields), "deepspeed")
        stage = json.loads(dict(launch.files)["ds_config.json"])["zero_optimization"]["stage"]
        assert _args(launch)["--zero-stage"] == [str(stage)], fields
        assert stage == (1 if fields["pp"] > 1 else fields["zero_stage"]), fields


def test_deepspeed_config_passes_deepspeeds_own_check_when_installed():
    ds = pytest.importorskip("deepspeed.runtime.config")
    launch = emit(_scn("gpt-1.7b", "dgx-a100", 1, tp=1, pp=1, dp=8, global_batch=64, micro_batch=2), "deepspeed")

    class Mpu:
        def get_data_parallel_world_size(self):
            return 8

    ds.DeepSpeedConfig(json.loads(dict(launch.files)["ds_config.json"]), mpu=Mpu())


def test_deepspeed_splits_stages_its_way_and_reprices():
    assert deepspeed_stages(126, 8) == [16] * 6 + [15] * 2
    run, changes = adapt(_scn(tp=8, pp=8, dp=2, global_batch=256, sequence_parallel=True, zero_stage=3,
                              vpp=2, schedule="interleaved"), "deepspeed")  # fmt: skip
    assert run.plan.stage_layers == (16,) * 6 + (15,) * 2 and run.plan.zero_stage == 1 and run.plan.vpp == 1
    assert len(changes) == 3
    with pytest.raises(EmitError, match="mixture of experts"):
        emit(_scn("mixtral-8x7b", nodes=2, tp=2, dp=8, ep=8, etp=1, global_batch=128, sequence_parallel=True),
             "deepspeed")  # fmt: skip


def test_shell_lines_are_quoted():
    from shardwise.engines.serving import estimate_serving
    from shardwise.specs.serving import ServingWorkload

    scn = _scn("llama3-70b", nodes=1, tp=4, pp=1, dp=2, global_batch=2)
    est = estimate_serving(scn, ServingWorkload(512, 128, 64, "fp8"))
    launch = vllm_launch(est.scenario, est.workload, "my model $(touch pwned)")
    command = launch.shell().splitlines()[-len(launch.args) - 2 :]  # the last replica's: its GPUs, its port
    words = shlex.split(" ".join(line.rstrip("\\") for line in command))
    assert words[:4] == ["CUDA_VISIBLE_DEVICES=4,5,6,7", "vllm", "serve", "my model $(touch pwned)"]
    assert words[-2:] == ["--port", "8001"]
    assert "--max-num-batched-tokens" in words and words[words.index("--quantization") + 1] == "fp8"
    with pytest.raises(EmitError, match="--hf-id"):
        vllm_launch(est.scenario, est.workload, None)
    with pytest.raises(EmitError, match="KV-cache precision int4"):
        vllm_launch(est.scenario, ServingWorkload(512, 128, 64, "fp8", "int4"), "org/model")


def test_a_vllm_replica_over_several_servers_says_it_needs_a_ray_cluster():
    """vLLM serves one replica beyond a server only on a Ray cluster (its distributed-serving docs);
    the command alone (tp=16 on 2 DGX) would not start."""
    from shardwise.engines.serving import estimate_serving
    from shardwise.specs.serving import ServingWorkload

    two = estimate_serving(_scn("llama3-70b", nodes=2, tp=16, pp=1, dp=1, global_batch=1), ServingWorkload(512, 128, 1))
    assert any(
        "spans 2 servers" in n and "ray start --head" in n for n in vllm_launch(two.scenario, two.workload, "m").notes
    )
    one = estimate_serving(_scn("llama3-70b", nodes=2, tp=8, pp=1, dp=2, global_batch=2), ServingWorkload(512, 128, 2))
    assert not any("Ray" in n for n in vllm_launch(one.scenario, one.workload, "m").notes)


def test_plan_emit_is_case_insensitive_and_json_carries_the_launch(cli):
    args = ["plan", "--model", "gpt-1.7b", "--system", "dgx-a100", "--global-batch", "64", "--top", "1"]
    code, out, err = cli([*args, "--emit", "Megatron", "--json"])
    assert code == 0, err
    launch = json.loads(out)["launch"]
    assert launch["target"] == "megatron" and launch["shell"].startswith("# megatron")
    assert launch["launched_step_time_s"] > 0 and "--num-layers" in launch["argv"]
    code, out, err = cli([*args, "--emit", "megatron", "--emit-version", "1.0"])
    assert code == 2 and err.count("\n") == 1 and "core-0.13" in err


def test_serve_emit_needs_a_model_id_and_refuses_what_does_not_fit(cli):
    args = ["serve", "--model", "llama3-70b", "--system", "dgx-h100", "--concurrency", "64", "--emit", "VLLM"]
    no_id = ["serve", "--model", "llama3-405b", "--system", "dgx-h100", "--concurrency", "64", "--emit", "vllm"]
    code, out, err = cli([*no_id, "--plan", "tp=8", "--weight-precision", "fp8", "--json"])
    assert code == 2 and out == "" and "--hf-id" in err and err.count("\n") == 1  # its source names no id
    code, out, err = cli([*args, "--plan", "tp=4", "--weight-precision", "fp8", "--json"])
    assert code == 0, err  # the preset's source names its Hugging Face id: vLLM loads that
    assert (
        json.loads(out)["plans"][0]["launch"]["shell"].count("vllm serve meta-llama/Meta-Llama-3-70B") == 2
    )  # 2 replicas
    code, out, err = cli([*args, "--plan", "tp=4", "--weight-precision", "fp8", "--layers", "40", "--json"])
    assert code == 2 and "--hf-id" in err  # a reshaped preset is not the checkpoint its source names
    code, out, err = cli([*args, "--plan", "tp=4", "--weight-precision", "fp8", "--hf-id", "meta-llama/X", "--json"])
    assert code == 0, err
    launch = json.loads(out)["plans"][0]["launch"]
    assert launch["argv"][:2] == ["--tensor-parallel-size", "4"] and any("2 replicas" in n for n in launch["notes"])
    assert [(r["devices"], r["port"]) for r in launch["replicas"]] == [("0,1,2,3", 8000), ("4,5,6,7", 8001)]
    code, out, err = cli([*args, "--plan", "tp=1", "--hf-id", "meta-llama/X"])
    assert code == 2 and out == "" and "does not fit" in err and err.count("\n") == 1


def test_serve_emit_vllm_prices_the_plans_as_vllm_runs_them(cli):
    """--emit vllm prints vLLM servers: without --framework the plans are priced as vLLM (not
    TensorRT-LLM, serve's default), and another --framework is refused in one line."""
    args = ["serve", "--model", "llama3-70b", "--system", "dgx-h100", "--plan", "tp=4", "--concurrency", "64"]
    code, out, err = cli([*args, "--emit", "vllm", "--json"])
    assert code == 0, err
    assert "--framework vllm" in json.loads(out)["command"]
    code, out, err = cli([*args, "--framework", "sglang", "--emit", "vllm"])
    assert code == 2 and out == "" and err.count("\n") == 1 and "use --framework vllm" in err
    code, out, err = cli([*args, "--json"])
    assert code == 0 and "--framework tensorrt-llm" in json.loads(out)["command"]


def test_serve_emit_vllm_carries_the_priced_chunk_budget_and_running_cap(cli):
    """In-flight plans are priced with the engine's chunk budget (vLLM's 8192 on an H100, or
    --max-batched-tokens) and the sequences a replica runs at once: the server says the same (it
    wrote a static batch's whole prompts, 32 x 512, and ignored --max-batched-tokens)."""
    args = ["serve", "--model", "llama3-70b", "--system", "dgx-h100", "--plan", "tp=4", "--weight-precision", "fp8",
            "--emit", "vllm", "--hf-id", "m/x", "--json"]  # fmt: skip

    def flags(*extra: str) -> tuple[str, str]:
        code, out, err = cli([*args, *extra])
        assert code == 0, err
        argv = json.loads(out)["plans"][0]["launch"]["argv"]
        return argv[argv.index("--max-num-batched-tokens") + 1], argv[argv.index("--max-num-seqs") + 1]

    assert flags("--concurrency", "64") == ("8192", "32")
    assert flags("--concurrency", "64", "--max-batched-tokens", "4096") == ("4096", "32")
    assert flags("--concurrency", "64", "--batching", "static") == (str(32 * 512), "32")
    assert flags("--max-throughput")[1] == "1024"  # vLLM's max_num_seqs on an H100, below the KV cache's


def test_plan_emit_vllm_points_to_serve(cli):
    code, out, err = cli(
        ["plan", "--model", "llama3-8b", "--system", "rtx4090-8x", "--global-batch", "64", "--emit", "vllm"]
    )
    assert code == 2 and out == "" and err.count("\n") == 1 and "shardwise serve" in err


def test_predict_emits_the_launch_of_the_plan_it_priced_as_plan_does(cli):
    """A planned layout launched from `predict` (walkthrough: `predict --emit megatron` was 'No such
    option'): the same launch as `plan --emit` gives for that plan, refused in one line where the
    plan does not fit or the target is vLLM."""
    job = ["--model", "gpt-1.7b", "--system", "dgx-a100", "--global-batch", "64"]
    code, out, err = cli(["plan", *job, "--top", "1", "--emit", "megatron", "--json"])
    assert code == 0, err
    planned = json.loads(out)
    command = planned["plans"][0]["command"].split()[2:]  # the predict flags of the best plan
    code, out, err = cli(["predict", *command, "--emit", "Megatron", "--json"])
    assert code == 0, err
    launch = json.loads(out)["launch"]
    assert launch["shell"] == planned["launch"]["shell"] and launch["priced_step_time_s"] > 0
    code, out, err = cli(["predict", *command, "--emit", "megatron"])
    assert code == 0 and "launch this plan with megatron (main):" in out and "pretrain_gpt.py" in out
    for extra, message in (
        (["--emit", "vllm"], "shardwise serve"),
        (["--emit-version", "main"], "--emit-version needs --emit"),
        (["--emit", "megatron", "--emit-version", "9"], "--emit-version"),
    ):
        code, out, err = cli(["predict", *command, *extra])
        assert code == 2 and out == "" and err.count("\n") == 1 and message in err, (extra, err)
    too_big = ["predict", "--model", "llama3-70b", "--system", "dgx-h100", "--global-batch", "8", "--emit", "megatron"]
    code, out, err = cli(too_big)
    assert code == 2 and out == "" and err.count("\n") == 1 and "per GPU, more than" in err


def test_hybrid_sharding_is_torchtitans_replicate_mesh_megatrons_optimizer_instances_not_mics():
    """--shard-group: FSDP2's (dp_replicate, dp_shard) mesh with cp inside the shard group, the
    distributed optimizer's instances for ZeRO-1; the rest refused, DeepSpeed's MiCS among them."""
    scn = _scn("llama3-8b", nodes=4, dp=16, cp=2, global_batch=64, zero_stage=3, shard_group=8)
    a = _args(emit(scn, "torchtitan"))
    assert a["--parallelism.data_parallel_shard_degree"] == ["4"]
    assert a["--parallelism.data_parallel_replicate_degree"] == ["4"]
    with pytest.raises(EmitError, match="multiple of cp=2"):
        emit(_scn("llama3-8b", nodes=4, dp=16, cp=2, global_batch=64, zero_stage=3, shard_group=1), "torchtitan")
    a = _args(emit(_scn("llama3-8b", nodes=4, dp=32, global_batch=64, zero_stage=1, shard_group=8), "megatron"))
    assert a["--num-distributed-optimizer-instances"] == ["4"]
    with pytest.raises(EmitError, match="ZeRO-1"):
        emit(_scn("llama3-8b", nodes=4, dp=32, global_batch=64, zero_stage=3, shard_group=8), "megatron")
    # DeepSpeed's MiCS asserts its parameters came from MiCS_Init; pretrain_gpt.py builds under zero.Init
    with pytest.raises(EmitError, match="MiCS_Init"):
        emit(_scn("llama3-8b", nodes=4, dp=32, global_batch=64, zero_stage=3, shard_group=8), "deepspeed")
    full = emit(_scn("llama3-8b", nodes=4, dp=32, global_batch=64, zero_stage=3), "deepspeed")
    assert "mics_shard_size" not in json.loads(dict(full.files)["ds_config.json"])["zero_optimization"]


def test_megatron_bf16_gradient_reduction_is_its_flag():
    on = _args(emit(_scn("llama3-8b", "dgx-h100", 1, dp=8, global_batch=8, grad_reduce_bf16=True), "megatron"))
    off = _args(emit(_scn("llama3-8b", "dgx-h100", 1, dp=8, global_batch=8), "megatron"))
    assert "--grad-reduce-in-bf16" in on and "--grad-reduce-in-bf16" not in off


def test_torchtitan_reduces_gradients_in_fp32_under_fsdp2_and_ddp_alike():
    """review33: torchtitan declares training.mixed_precision_reduce Literal["float32"]
    (torchtitan/config/configs.py@b5bcd76c:102), so its parser refused the bfloat16 written under
    FSDP2; DDP keeps fp32 gradients. Either way the plan it runs reduces in fp32 (re-priced, said in a
    change) and the flag is not written."""
    for zero in (3, 0):
        scn = _scn("llama3-8b", "dgx-h100", 1, dp=8, global_batch=8, zero_stage=zero, grad_reduce_bf16=True)
        run, changes = adapt(scn, "torchtitan")
        assert not bool(run.plan.grad_reduce_bf16) and any("fp32, not bf16" in c for c in changes), zero
        assert "--training.mixed_precision_reduce" not in _args(emit(scn, "torchtitan"))
    fsdp = _scn("llama3-8b", "dgx-h100", 1, dp=8, global_batch=8, zero_stage=3, grad_reduce_bf16=True)
    assert any("takes float32 only" in c for c in adapt(fsdp, "torchtitan")[1])


def test_megatron_launches_te_current_scaling_as_its_tensorwise_recipe():
    """Transformer Engine's current scaling is Megatron-Core's `--fp8-recipe tensorwise` (the hybrid
    format, as Megatron-Bridge's bf16_with_fp8_current_scaling_mixed); delayed scaling stays `delayed`."""
    fp8 = dict(nodes=1, tp=1, dp=8, global_batch=64, precision="fp8")
    current = emit(_scn("llama3-8b", **fp8, fp8_recipe="te_current"), "megatron")
    assert ("--bf16", "--fp8-format", "hybrid", "--fp8-recipe", "tensorwise") in current.args and not current.changes
    delayed = emit(_scn("llama3-8b", **fp8), "megatron")
    assert ("--bf16", "--fp8-format", "hybrid", "--fp8-recipe", "delayed") in delayed.args


def test_the_optimizer_state_is_megatrons_precision_aware_optimizer_and_refused_elsewhere():
    """fp32-remainders is Megatron-LM's --use-precision-aware-optimizer (TE's store_param_remainders);
    bf16 moments without a master are Apex's, no launcher here emits them."""
    base = {"dp": 8, "global_batch": 8, "zero_stage": 1}
    on = _args(emit(_scn("llama3-8b", "dgx-h100", 1, optimizer_state="fp32-remainders", **base), "megatron"))
    off = _args(emit(_scn("llama3-8b", "dgx-h100", 1, **base), "megatron"))
    assert "--use-precision-aware-optimizer" in on and "--use-precision-aware-optimizer" not in off
    for target, state in (("megatron", "bf16"), ("torchtitan", "fp32-remainders"), ("deepspeed", "bf16")):
        with pytest.raises(EmitError, match="optimizer-state"):
            emit(_scn("llama3-8b", "dgx-h100", 1, optimizer_state=state, **base), target)


@pytest.mark.parametrize(
    ("precision", "recipe", "planned", "runs"),
    [
        ("bf16", "te", "fp32-bf16-moments", "fp32-remainders-bf16-moments"),
        ("fp8", "te", "fp32-bf16-moments", "fp32-remainders-bf16-moments"),
        ("mxfp8", "te", "fp32-remainders-bf16-moments", "fp32-bf16-moments"),
        ("fp8", "te_current", "fp32-remainders", "fp32"),
        ("fp16", "te", "fp32-remainders-bf16-moments", "fp32-bf16-moments"),
        ("mxfp8", "te", "fp32-bf16-moments", "fp32-bf16-moments"),
        ("bf16", "te", "fp32-remainders", "fp32-remainders"),
    ],
)
def test_the_emitted_optimizer_state_is_the_one_megatron_keeps_for_the_precision(precision, recipe, planned, runs):
    """--use-precision-aware-optimizer keeps Megatron-Core's fp32 master under current scaling and MXFP8,
    TE's remainders beside bf16 weights, a whole fp32 master beside fp16 ones: a plan that says otherwise
    is adapted, and the change is said."""
    scn = _scn(
        "llama3-8b",
        "dgx-h100",
        1,
        dp=8,
        global_batch=8,
        zero_stage=1,
        precision=precision,
        fp8_recipe=recipe,
        optimizer_state=planned,
    )
    new, changes = adapt(scn, "megatron")
    assert new.plan.optimizer_state == runs
    assert any("optimizer state" in c for c in changes) == (planned != runs)


def test_torchtitan_refuses_an_expert_group_its_mesh_cannot_hold():
    """torchtitan's ParallelDims: ep must divide dp_shard x cp x tp. A hybrid-sharded plan whose
    shard group (4) is smaller than ep (8) was emitted, and torchtitan raised at start."""
    with pytest.raises(EmitError, match=r"ep=8 must divide torchtitan's dp_shard x cp x tp = 4 x 1 x 1"):
        emit(_scn("qwen3-30b-a3b", nodes=2, dp=16, ep=8, global_batch=64, zero_stage=3, shard_group=4), "torchtitan")
    a = _args(emit(_scn("qwen3-30b-a3b", nodes=2, dp=16, ep=8, global_batch=64, zero_stage=3, shard_group=8),
                   "torchtitan"))  # fmt: skip
    assert a["--parallelism.data_parallel_shard_degree"] == ["8"] and a["--parallelism.expert_parallel_degree"] == ["8"]


def test_torchtitan_compiles_where_the_plan_was_priced_with_fused_kernels(cli):
    """--framework torchtitan-compile prices Inductor's fused element-wise kernels: the launch turns
    torch.compile on (torchtitan's CompileConfig.enable is off by default: it ran eager)."""
    args = ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--nodes", "1", "--global-batch", "64",
            "--emit", "torchtitan", "--json"]  # fmt: skip
    code, out, err = cli([*args, "--framework", "torchtitan-compile"])
    assert code == 0, err
    assert "--compile.enable" in json.loads(out)["launch"]["argv"]
    code, out, err = cli([*args, "--framework", "torchtitan"])
    assert code == 0 and "--compile.enable" not in json.loads(out)["launch"]["argv"]


def test_serve_emits_data_parallel_attention_as_one_vllm_server(cli):
    """ep above tp is data-parallel attention: vLLM's --data-parallel-size with
    --enable-expert-parallel, one server for all the ranks (it was refused as EP outside TP)."""
    args = ["serve", "--model", "qwen3-30b-a3b", "--system", "dgx-h100", "--num-gpus", "8", "--concurrency", "64",
            "--emit", "vllm", "--hf-id", "Qwen/Qwen3-30B-A3B", "--json"]  # fmt: skip
    code, out, err = cli([*args, "--plan", "tp=2,ep=8"])
    assert code == 0, err
    launch = json.loads(out)["plans"][0]["launch"]
    argv = launch["argv"]
    assert argv[argv.index("--data-parallel-size") + 1] == "4" and "--enable-expert-parallel" in argv
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2" and "one server for all 4" in launch["notes"][0]
    code, out, err = cli([*args, "--plan", "tp=2,ep=4"])  # experts split in two (etp 2): not vLLM's
    assert code == 2 and "ep = tp x dp" in err and err.count("\n") == 1
    # priced as data-parallel attention (ep x etp = 8 > tp = 4) though ep = tp: not emitted as TP-EP replicas
    code, out, err = cli([*args, "--plan", "tp=4,ep=4,etp=2"])
    assert code == 2 and "ep = tp x dp" in err and err.count("\n") == 1


def test_the_python_api_gets_predicts_launch_from_the_request(cli):
    """`PredictRequest(..., emit=...)` decides and prices the launch itself (the request layer, as
    `PlanRequest` does): the Python API gets the launch, and the text, that `predict --emit` prints;
    --emit goes back to the command line and is read from it."""
    from shardwise.errors import SpecError
    from shardwise.requests import PredictRequest, TrainingRequest

    argv = ["--model", "gpt-1.7b", "--system", "dgx-a100", "--tp", "2", "--global-batch", "64"]
    req = PredictRequest(TrainingRequest.from_argv(argv), emit="Megatron")
    assert req.emit == "megatron" and PredictRequest.from_argv(req.to_argv()) == req
    assert req.command().endswith("--emit megatron")
    result = req.run()
    code, out, err = cli(["predict", *argv, "--emit", "megatron", "--json"])
    assert code == 0, err
    printed = json.loads(out)
    assert printed["launch"] == json.loads(json.dumps(result.launch))
    assert "--emit" not in printed["command"]  # the command that prices the step, as before
    code, out, err = cli(["predict", *argv, "--emit", "megatron"])
    assert code == 0 and out.endswith(result.launch_text() + "\n")
    assert PredictRequest(req.training).run().launch is None
    with pytest.raises(SpecError, match="shardwise serve"):
        PredictRequest(req.training, emit="vllm")


def test_the_request_layer_knows_the_training_emitters():
    """`requests.training.EMIT_TARGETS` names the emitters `shardwise.emit` has."""
    from shardwise.emit import TRAINING_TARGETS
    from shardwise.requests.training import EMIT_TARGETS

    assert EMIT_TARGETS == TRAINING_TARGETS


def test_serve_emit_vllm_runs_no_more_sequences_than_its_token_budget(cli):
    """vLLM refuses max_num_seqs above max_num_batched_tokens (SchedulerConfig) and lowers its own
    default to it: a 256-token budget runs at most 256 sequences, priced and emitted (493 were)."""
    args = ["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--plan", "tp=2", "--input-len", "1024",
            "--output-len", "1024", "--max-throughput", "--emit", "vllm", "--hf-id", "x/y", "--json"]  # fmt: skip
    code, out, err = cli([*args, "--max-batched-tokens", "256"])
    assert code == 0, err
    argv = json.loads(out)["plans"][0]["launch"]["argv"]
    assert int(argv[argv.index("--max-num-seqs") + 1]) == 256
    assert argv[argv.index("--max-num-batched-tokens") + 1] == "256"
    code, out, err = cli(args)  # vLLM's own budget (8192 on an H100) leaves the KV cache's cap
    argv = json.loads(out)["plans"][0]["launch"]["argv"]
    assert code == 0 and 256 < int(argv[argv.index("--max-num-seqs") + 1]) <= 1024


def test_serve_emit_vllm_names_the_all_to_all_backends_vllm_keeps():
    """The data-parallel attention note names vLLM 0.34's true all-to-all backends as flags; pplx,
    which it named, was removed (vLLM falls back to allgather_reducescatter, what was not priced)."""
    from shardwise.emit.vllm import launch
    from shardwise.engines.serving import estimate_serving
    from shardwise.loaders import parse_plan_spec
    from shardwise.requests.serve_plans import scenario
    from shardwise.specs.serving import ServingWorkload

    model, cluster = presets.model("qwen3-30b-a3b"), presets.system("dgx-h100")
    est = estimate_serving(scenario(model, cluster, parse_plan_spec("tp=2,ep=8")),
                           ServingWorkload(1024, 256, batch=64, engine="vllm"))  # fmt: skip
    notes = " ".join(launch(est.scenario, est.workload, "Qwen/Qwen3-30B-A3B").notes)
    assert "--all2all-backend deepep_low_latency" in notes and "--all2all-backend deepep_high_throughput" in notes
    assert "pplx" not in notes


def test_torchtitan_writes_compile_out_as_priced_whatever_the_config_defaults():
    """llama3_405b's config compiles with async TP and deepseek_v3_671b's compiles the loss alone:
    an eager plan turns both off, a fused one compiles the model, async TP only with TP overlap."""
    eager = _args(emit(_scn(tp=8, pp=8, dp=2, global_batch=256, zero_stage=3, eager_kernels=True), "torchtitan"))
    assert eager["--compile.no-enable"] == ["--compile.no-enable_async_tensor_parallel"]
    # the loss compiled alone, the model eager (--loss-kernel compiled; deepseek_v3_16b's config of 2025-10)
    loss_only = _scn(tp=8, pp=8, dp=2, global_batch=256, zero_stage=3, eager_kernels=True, loss_kernel="compiled")
    assert _args(emit(loss_only, "torchtitan"))["--compile.enable"] == ["--compile.components", "loss"]
    fused = _args(emit(_scn(tp=8, pp=8, dp=2, global_batch=256, zero_stage=3), "torchtitan"))
    assert fused["--compile.enable"] == ["--compile.components", "model,loss"]
    assert "--compile.no-enable_async_tensor_parallel" in fused
    dsv3 = _args(emit(_scn("deepseek-v3", nodes=32, tp=1, pp=16, dp=16, ep=16, global_batch=1024, zero_stage=3),
                      "torchtitan"))  # fmt: skip
    assert dsv3["--compile.enable"] == ["--compile.components", "model,loss"]
    overlap = dict(tp=8, pp=4, dp=1, global_batch=64, sequence_parallel=True, tp_comm_overlap=True)
    assert "--compile.enable_async_tensor_parallel" in _args(emit(_scn("llama3-70b", nodes=4, **overlap), "torchtitan"))
    run, changes = adapt(_scn("llama3-70b", nodes=4, eager_kernels=True, **overlap), "torchtitan")
    assert not bool(run.plan.tp_comm_overlap) and any("async TP" in c for c in changes)


def test_the_check_emit_matrix_emits_or_refuses_every_plan_in_one_line(tmp_path):
    """tools/check_emit.py's matrix, shardwise's side (no tool checkouts): every plan is emitted
    or refused by `--emit` in one line, never an error of another kind."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    try:
        import check_emit
    finally:
        sys.path.pop(0)
    training, serving = check_emit.training_jobs(), check_emit.serving_jobs(tmp_path)
    jobs = training + serving
    assert len(training) == 3 * len(check_emit.TRAINING_MATRIX)
    # a launch over several servers is one job a server ("ID/serverN")
    assert {j["id"].split("/")[0] for j in serving} == {row[0] for row in check_emit.SERVING_MATRIX}
    assert any(j["id"].endswith("/server1") and "--headless" in j["argv"] for j in serving)
    refused = [j["refused"] for j in jobs if "refused" in j]
    assert all(r.startswith(("--emit ", "error: --emit ")) and "\n" not in r for r in refused), refused
    assert all(j["argv"] for j in jobs if "refused" not in j)


def test_a_re_priced_launch_gives_its_memory_in_whole_bytes():
    """review25: `--emit --json`'s launched_memory_bytes was a float (fractions of a byte), where every
    other memory in the JSON is whole bytes (units.whole_bytes)."""
    from shardwise.emit.report import training_launch

    ddp = _scn("llama3-8b", "dgx-h100", 1, dp=8, global_batch=8, zero_stage=0, grad_reduce_bf16=True)
    launch = training_launch(ddp, "torchtitan", None, 1e15, 1.0)
    assert launch["changes"] and isinstance(launch["launched_memory_bytes"], int)
    assert launch["launched_memory_bytes"] > 0
