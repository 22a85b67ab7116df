"""`serve --emit sglang` and `serve --emit trtllm` (review 45 #7): each emitted command parses with a
mirror of the flags verified upstream (SGLang 0.5.6.post2's `ServerArgs.add_cli_args`, PyPI wheel;
TensorRT-LLM tensorrt_llm/commands/serve.py @00209af1, click options), and carries what was priced."""

from __future__ import annotations

import argparse
import json
import shlex

import pytest

from shardwise.emit import EmitError


def sglang_parser() -> argparse.ArgumentParser:
    """The flags `emit.sglang` writes, with the types and choices of sglang/srt/server_args.py 0.5.6.post2."""
    p = argparse.ArgumentParser(prog="sglang.launch_server", allow_abbrev=False, exit_on_error=False)
    p.add_argument("--model-path", required=True)
    for flag in ("--tp-size", "--pp-size", "--dp-size", "--ep-size", "--chunked-prefill-size"):
        p.add_argument(flag, type=int)
    p.add_argument("--max-running-requests", type=int)
    p.add_argument("--context-length", type=int)
    p.add_argument("--mem-fraction-static", type=float)
    p.add_argument("--kv-cache-dtype", choices=["auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1"])
    p.add_argument("--moe-a2a-backend", choices=["none", "deepep", "mooncake", "ascend_fuseep"])
    p.add_argument("--quantization", choices=["awq", "fp8", "gptq", "modelopt_fp4", "mxfp4", "compressed-tensors"])
    for flag in ("--enable-dp-attention", "--disable-custom-all-reduce", "--disable-cuda-graph"):
        p.add_argument(flag, action="store_true")
    p.add_argument("--nnodes", type=int)
    p.add_argument("--node-rank", type=int)
    p.add_argument("--dist-init-addr")
    p.add_argument("--port", type=int)
    return p


def trtllm_parser() -> argparse.ArgumentParser:
    """The flags `emit.trtllm` writes, as trtllm-serve's click options declare them."""
    p = argparse.ArgumentParser(prog="trtllm-serve", allow_abbrev=False, exit_on_error=False)
    p.add_argument("model")
    p.add_argument("--backend", choices=["pytorch", "tensorrt", "_autodeploy"])
    for flag in ("--tp_size", "--pp_size", "--ep_size", "--max_batch_size", "--max_num_tokens"):
        p.add_argument(flag, type=int)
    p.add_argument("--kv_cache_free_gpu_memory_fraction", type=float)
    p.add_argument("--extra_llm_api_options")
    p.add_argument("--port", type=int)
    return p


def _launches(cli, args: list[str]) -> list[dict]:
    code, out, err = cli(["serve", "--json", *args])
    assert code == 0, err
    return [plan["launch"] for plan in json.loads(out)["plans"]]


def _parse(parser: argparse.ArgumentParser, launch: dict, launcher: str) -> argparse.Namespace:
    """The command as a user copies it from the shell text (the first replica's, where several run),
    parsed after its launcher words."""
    text = launch["replicas"][0]["command"] if launch["replicas"] else launch["shell"]
    words = shlex.split(text[text.index(launcher) :].replace("\\\n", " "))
    return parser.parse_args(words[len(launcher.split()) :])


SGLANG, TRTLLM = "python -m sglang.launch_server", "trtllm-serve"
LLAMA = ["--model", "llama3-70b", "--system", "dgx-h100", "--concurrency", "64"]
DSV3 = ["--model", "deepseek-v3", "--system", "dgx-h200", "--weight-precision", "fp8", "--concurrency", "64"]


def test_sglang_dense_replicas_and_pipeline(cli):
    tp4, pp2 = _launches(cli, [*LLAMA, "--plan", "tp=4", "--plan", "tp=2,pp=2", "--emit", "sglang"])
    a = _parse(sglang_parser(), tp4, SGLANG)
    assert a.model_path == "meta-llama/Meta-Llama-3-70B" and a.tp_size == 4 and a.pp_size == 1
    assert a.max_running_requests == 32 and a.kv_cache_dtype == "auto" and 0.5 < a.mem_fraction_static < 0.95
    assert a.chunked_prefill_size == 8192 and not a.enable_dp_attention  # SGLang's budget on an 80 GB GPU
    assert any("2 replicas" in n for n in tp4["notes"])
    b = _parse(sglang_parser(), pp2, SGLANG)
    assert b.tp_size == 2 and b.pp_size == 2 and pp2["env"] == {"SGLANG_PP_LAYER_PARTITION": "40,40"}


def test_sglang_data_parallel_attention_is_one_server_of_every_gpu(cli):
    (launch,) = _launches(cli, [*DSV3, "--plan", "tp=1,ep=8", "--emit", "sglang", "--hf-id", "deepseek-ai/DeepSeek-V3"])
    a = _parse(sglang_parser(), launch, SGLANG)
    assert a.enable_dp_attention and a.tp_size == 8 and a.dp_size == 8 and a.ep_size == 8
    assert a.moe_a2a_backend == "none"  # what is priced for SGLang (`moe_dispatcher` dp-gather)
    # SGLang divides the chunk and the running cap by --dp-size: the server's are 8 ranks' worth
    assert a.chunked_prefill_size % 8 == 0 and a.max_running_requests == 64
    assert a.quantization is None  # --hf-id: the deepseek-v3 preset's own checkpoint, which stores FP8 (review 50 #1)
    assert any(
        "deepseek-ai/DeepSeek-V3 stores them, as the deepseek-v3 preset's checkpoint" in n for n in launch["notes"]
    )


def test_sglang_over_two_servers_gets_node_ranks(cli):
    args = [*LLAMA[:-2], "--num-gpus", "16", "--plan", "tp=8,pp=2", "--emit", "sglang"]
    (launch,) = _launches(cli, args)
    assert [n["node"] for n in launch["nodes"]] == [0, 1]
    for r, node in enumerate(launch["nodes"]):
        a = sglang_parser().parse_args(shlex.split(node["command"].replace("\\\n", " "))[3:])
        assert a.nnodes == 2 and a.node_rank == r and a.dist_init_addr == "$HEAD_ADDR:20000"


def test_trtllm_flags_and_options_file(cli):
    args = [*LLAMA, "--plan", "tp=4", "--plan", "tp=2,pp=2", "--kv-precision", "fp8", "--emit", "trtllm"]
    tp4, pp2 = _launches(cli, args)
    a = _parse(trtllm_parser(), tp4, TRTLLM)
    assert a.model == "meta-llama/Meta-Llama-3-70B" and a.backend == "pytorch" and a.tp_size == 4
    assert a.max_num_tokens == 8192 and a.max_batch_size >= 64 and a.kv_cache_free_gpu_memory_fraction == 0.9
    assert tp4["files"] == {a.extra_llm_api_options: "kv_cache_config:\n  dtype: fp8\n"}
    assert _parse(trtllm_parser(), pp2, TRTLLM).pp_size == 2


def test_trtllm_attention_data_parallel(cli):
    hf = ["--hf-id", "deepseek-ai/DeepSeek-V3"]
    (launch,) = _launches(cli, [*DSV3, "--plan", "tp=1,ep=8", "--emit", "trtllm", *hf])
    a = _parse(trtllm_parser(), launch, TRTLLM)
    assert a.tp_size == 8 and a.ep_size == 8 and "enable_attention_dp: true" in launch["files"][a.extra_llm_api_options]


@pytest.mark.parametrize(
    "args, says",
    [
        ([*LLAMA, "--plan", "tp=4", "--emit", "trtllm", "--weight-precision", "fp8"], "stores 16-bit"),
        ([*LLAMA, "--plan", "tp=4", "--emit", "sglang", "--weight-precision", "int4"], "--hf-id"),
        ([*LLAMA, "--plan", "tp=4", "--emit", "sglang", "--framework", "vllm"], "use --framework sglang"),
        ([*LLAMA[:-2], "--num-gpus", "16", "--plan", "tp=8,pp=2", "--emit", "trtllm"], "not emitted"),
    ],
)
def test_what_is_not_emitted_is_refused_in_one_line(cli, args, says):
    code, out, err = cli(["serve", *args])
    assert code == 2 and out == "" and err.count("\n") == 1 and says in err


def test_the_emitters_refuse_what_they_do_not_launch():
    from shardwise import presets
    from shardwise.emit import sglang, trtllm
    from shardwise.engines.serving import estimate_serving
    from shardwise.loaders import parse_plan_spec
    from shardwise.requests.serve_plans import scenario
    from shardwise.specs.serving import ServingWorkload

    scn = scenario(presets.model("llama3-8b"), presets.system("dgx-h100"), parse_plan_spec("tp=2,cp=2"))
    wl = ServingWorkload(512, 128, 8, engine="sglang")
    est = estimate_serving(scn, wl)
    for module in (sglang, trtllm):
        with pytest.raises(EmitError, match="context parallelism"):
            module.launch(est.scenario, wl, "org/model")
        with pytest.raises(EmitError, match="--hf-id"):
            module.launch(est.scenario, wl, None)
