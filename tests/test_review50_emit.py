"""Review 50's serving launch findings: an --hf-id whose storage is not read is not claimed
"detected" (#1), TensorRT-LLM's own stage split priced and launched (#6), context parallelism refused
for the engines that do not serve with it (#7), replicas with their own GPUs and ports and
`--framework trtllm` (#12)."""

from __future__ import annotations

import json

import pytest

SEVENTY = ["serve", "--model", "llama3.1-70b", "--plan", "tp=8"]
INSTRUCT = ["--hf-id", "meta-llama/Llama-3.1-70B-Instruct"]


def _one_line(err: str) -> bool:
    return err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    "engine, weights",
    [("vllm", "int4"), ("sglang", "int4"), ("trtllm", "int4"), ("trtllm", "fp8")],
)
def test_an_unread_hf_id_is_refused_for_weights_it_may_not_store(cli, engine, weights):
    """The review's case: int4 priced, a 16-bit repository named; nothing was read, so nothing is
    'detected' and the launch is refused until the user states what the checkpoint stores."""
    system = ["--system", "dgx-h100" if weights == "fp8" else "rtx4090-8x"]
    code, out, err = cli([*SEVENTY, *system, "--weight-precision", weights, "--emit", engine, *INSTRUCT])
    assert code == 2 and out == "" and _one_line(err), err
    assert "not known here" in err and f"--hf-weights {weights}" in err and "detected" not in err


def test_hf_weights_states_the_checkpoint_and_prices_it(cli):
    awq = ["--hf-id", "hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4", "--hf-weights", "int4"]
    code, out, err = cli([*SEVENTY, "--system", "rtx4090-8x", "--emit", "vllm", *awq, "--json"])
    assert code == 0, err
    got = json.loads(out)
    assert got["workload"]["weight_precision"] == "int4"  # priced as stated, no --weight-precision needed
    launch = got["plans"][0]["launch"]
    assert "--quantization" not in launch["argv"]
    assert any("as --hf-weights int4 states" in n for n in launch["notes"])
    assert not any("detected" in n for n in launch["notes"])
    code, out, err = cli([*SEVENTY, "--system", "rtx4090-8x", "--hf-weights", "int4"])
    assert code == 2 and _one_line(err) and "add --hf-id" in err


def test_fp8_from_an_unread_hf_id_says_it_is_taken_as_16_bit(cli):
    """vLLM converts 16-bit weights to FP8 at load: launched, with a note that says what was assumed."""
    args = ["serve", "--model", "llama3.1-70b", "--system", "dgx-h100", "--plan", "tp=8", "--weight-precision", "fp8"]
    code, out, err = cli([*args, "--emit", "vllm", *INSTRUCT, "--json"])
    assert code == 0, err
    launch = json.loads(out)["plans"][0]["launch"]
    assert launch["argv"][launch["argv"].index("--quantization") + 1] == "fp8"
    assert any("taken to store 16-bit weights" in n and "not read here" in n for n in launch["notes"])


def test_a_local_hf_id_folder_is_read(cli, tmp_path):
    folder = tmp_path / "awq"
    folder.mkdir()
    quant = {"bits": 4, "group_size": 128, "quant_method": "awq", "version": "gemm", "zero_point": True}
    (folder / "config.json").write_text(json.dumps({"quantization_config": quant}))
    base = ["serve", "--model", "llama3.1-8b", "--system", "dgx-h100", "--num-gpus", "1", "--plan", "tp=1"]
    code, out, err = cli([*base, "--weight-precision", "int4", "--emit", "vllm", "--hf-id", str(folder)])
    assert code == 0 and "config.json's quantization_config states" in out, err
    code, out, err = cli([*base, "--weight-precision", "fp8", "--emit", "vllm", "--hf-id", str(folder)])
    assert code == 2 and _one_line(err) and "stores int4" in err


def test_tensorrt_llm_prices_and_launches_its_own_stage_split(cli):
    from shardwise import presets
    from shardwise.loaders import parse_plan_spec
    from shardwise.requests.serve_plans import scenario
    from shardwise.specs.stages import engine_split_counts

    assert engine_split_counts("tensorrt-llm", 126, 8) == (16,) * 6 + (15, 15)  # torch.tensor_split
    assert engine_split_counts("tensorrt-llm", 80, 8) is None and engine_split_counts("vllm", 126, 8) is None
    model, cluster = presets.model("llama3.1-405b"), presets.system("dgx-h200")
    spec = parse_plan_spec("pp=8")
    assert scenario(model, cluster, spec, None, "tensorrt-llm").plan.stage_layers == (16,) * 6 + (15, 15)
    assert scenario(model, cluster, spec, None, "vllm").plan.stage_layers is None  # get_pp_indices: 15, 16 x6, 15
    args = ["serve", "--model", "llama3.1-405b", "--system", "dgx-h200", "--emit", "trtllm", "--json"]
    args += ["--hf-id", "meta-llama/Llama-3.1-405B"]
    code, out, err = cli([*args, "--plan", "pp=8"])
    assert code == 0, err
    launch = json.loads(out)["plans"][0]["launch"]
    assert launch["files"] == {} and any("TensorRT-LLM's own split" in n for n in launch["notes"])
    code, out, err = cli([*args, "--plan", "pp=8,first=15,last=15"])  # another split: written out
    assert code == 0, err
    launch = json.loads(out)["plans"][0]["launch"]
    assert launch["files"]["extra_llm_api_options.yaml"] == "pp_partition: [15, 16, 16, 16, 16, 16, 16, 15]\n"


@pytest.mark.parametrize(
    "framework, says",
    [
        ("llama.cpp", "llama.cpp runs no context parallelism"),
        ("sglang", "SGLang 0.5.6.post2 runs no context parallelism"),
        ("vllm", "only with latent attention (MLA)"),
    ],
)
def test_context_parallelism_is_refused_where_the_engine_does_not_serve_with_it(cli, framework, says):
    args = ["serve", "--model", "llama3.1-8b", "--system", "dgx-h100", "--plan", "cp=2", "--framework", framework]
    code, out, err = cli(args)
    assert code == 2 and out == "" and _one_line(err) and says in err and "give cp=1" in err


def test_context_parallelism_stays_priced_for_tensorrt_llm(cli):
    args = ["serve", "--model", "llama3.1-8b", "--system", "dgx-h100", "--plan", "tp=4,cp=2", "--json"]
    code, out, err = cli([*args, "--framework", "tensorrt-llm"])
    assert code == 0 and json.loads(out)["plans"][0]["plan"] == "tp=4,cp=2", err


@pytest.mark.parametrize("engine, port", [("vllm", 8000), ("sglang", 30000), ("trtllm", 8000)])
def test_replicas_get_their_own_gpus_and_ports(cli, engine, port):
    args = ["serve", "--model", "llama3.1-8b", "--system", "dgx-h100", "--nodes", "2", "--plan", "tp=2"]
    code, out, err = cli([*args, "--emit", engine, "--json"])
    assert code == 0, err
    launch = json.loads(out)["plans"][0]["launch"]
    got = [(r["devices"], r["port"]) for r in launch["replicas"]]
    assert got == [("0,1", port), ("2,3", port + 1), ("4,5", port + 2), ("6,7", port + 3)]
    assert any("8 replicas (4 on each of 2 servers)" in n for n in launch["notes"])
    assert not any("group of" in n for n in launch["notes"])
    first = launch["replicas"][0]["command"]
    assert first.startswith("CUDA_VISIBLE_DEVICES=0,1 ") and first.endswith(f"--port {port}")
    assert launch["shell"].count("CUDA_VISIBLE_DEVICES=") == 4


def test_framework_trtllm_is_tensorrt_llm(cli):
    args = ["serve", "--model", "llama3.1-8b", "--system", "dgx-h100", "--num-gpus", "1", "--plan", "tp=1", "--json"]
    code, out, err = cli([*args, "--framework", "trtllm"])
    assert code == 0, err
    assert json.loads(out)["engine"]["name"] == "tensorrt-llm"


def test_vllm_context_parallelism_of_latent_attention_is_launched_as_priced(cli):
    """vLLM 0.34 runs PCP with MLA backends: the prompt split over cp ranks, the cache sharded over
    them and attended on every rank in decode (DCP over the PCP ranks), as `engines.forward` prices."""
    args = ["serve", "--model", "deepseek-v3", "--system", "dgx-h200", "--nodes", "2", "--plan", "tp=8,cp=2"]
    code, out, err = cli([*args, "--emit", "vllm", "--json"])
    assert code == 0, err
    argv = json.loads(out)["plans"][0]["launch"]["argv"]
    assert argv[argv.index("--prefill-context-parallel-size") + 1] == "2"
    assert argv[argv.index("--decode-context-parallel-size") + 1] == "2"
