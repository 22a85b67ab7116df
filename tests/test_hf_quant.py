"""A config.json's `quantization_config` read as the weights' storage (`hf_quant`), taken as
`serve`'s default weight precision, and `--emit` refusing a checkpoint that stores other weights
than priced (review 45 #3, #5). Each config's quantization_config is shaped as the Hugging Face
repository named beside it states it."""

from __future__ import annotations

import json

import pytest

from shardwise.emit.checkpoint import Stored, check_stored
from shardwise.emit.launch import EmitError
from shardwise.errors import SpecError
from shardwise.hf_quant import checkpoint

# the shape of meta-llama/Llama-3.1-8B's config.json
LLAMA_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
    "max_position_embeddings": 131072, "rope_theta": 500000.0, "tie_word_embeddings": False, "hidden_act": "silu",
}  # fmt: skip
QUANT = {
    # deepseek-ai/DeepSeek-V3, Qwen/Qwen3-30B-A3B-FP8
    "block-fp8": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                  "weight_block_size": [128, 128]},
    # meta-llama/Llama-3.1-405B-Instruct-FP8
    "fbgemm": {"activation_scale_ub": 1200.0, "modules_to_not_convert": ["lm_head"], "quant_method": "fbgemm_fp8"},
    # RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8
    "ct-fp8": {"quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head"],
               "config_groups": {"group_0": {"targets": ["Linear"],
                                             "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
                                             "input_activations": {"num_bits": 8, "type": "float", "dynamic": True}}}},
    # RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8
    "ct-int8": {"quant_method": "compressed-tensors", "format": "int-quantized",
                "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "int", "strategy": "channel"}}}},
    # RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16
    "ct-w4a16": {"quant_method": "compressed-tensors", "format": "pack-quantized",
                 "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "int", "strategy": "group",
                                                           "group_size": 128}}}},
    # RedHatAI/Llama-3.3-70B-Instruct-NVFP4
    "ct-nvfp4": {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
                 "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group",
                                                           "group_size": 16}}}},
    # hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4
    "awq": {"bits": 4, "group_size": 128, "modules_to_not_convert": None, "quant_method": "awq", "version": "gemm",
            "zero_point": True},
    # hugging-quants/Meta-Llama-3.1-8B-Instruct-GPTQ-INT4 (TheBloke's -GPTQ gptq-4bit-32g-actorder branches: 32)
    "gptq-32": {"bits": 4, "damp_percent": 0.1, "desc_act": True, "group_size": 32, "quant_method": "gptq",
                "sym": True, "true_sequential": True},
    # unsloth/llama-3-8b-bnb-4bit
    "bnb": {"_load_in_4bit": True, "bnb_4bit_compute_dtype": "bfloat16", "bnb_4bit_quant_type": "nf4",
            "bnb_4bit_use_double_quant": True, "load_in_4bit": True, "load_in_8bit": False,
            "quant_method": "bitsandbytes"},
    # openai/gpt-oss-120b
    "mxfp4": {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                         "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"},
    # nvidia/Llama-3.3-70B-Instruct-FP4
    "modelopt": {"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8", "group_size": 16},
}  # fmt: skip
EXPECTED = {
    "block-fp8": "fp8", "fbgemm": "fp8", "ct-fp8": "fp8", "ct-int8": "int8", "ct-w4a16": "int4",
    "ct-nvfp4": "nvfp4", "awq": "int4", "gptq-32": "int4", "bnb": "int4", "mxfp4": "mxfp4", "modelopt": "nvfp4",
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(QUANT))
def test_each_quantization_config_reads_as_the_weights_storage(name):
    assert checkpoint({**LLAMA_8B, "quantization_config": QUANT[name]}).precision == EXPECTED[name]


def test_what_a_config_does_not_state_or_is_not_read():
    assert checkpoint(LLAMA_8B) is None  # 16-bit weights
    assert "128 x 128 blocks" in checkpoint({"quantization_config": QUANT["block-fp8"]}).words()
    # int4 groups other than the priced 128: the bytes per weight the price leaves out, said
    words = checkpoint({"quantization_config": QUANT["gptq-32"]}).words()
    assert "groups of 32" in words and "+0.059 bytes per weight" in words
    for bad in ({"quant_method": "hqq", "nbits": 4}, {"quant_method": "gptq", "bits": 3}, "fp8"):
        with pytest.raises(SpecError, match="quantization_config") as exc:
            checkpoint({"quantization_config": bad})
        assert "\n" not in str(exc.value)


def _one_error(err: str) -> bool:
    """One `error:` line, no traceback (the config's own `note:` lines may precede it)."""
    return [x.startswith("error: ") for x in err.splitlines() if not x.startswith("note: ")] == [True]


@pytest.fixture
def config(tmp_path):
    def write(quant: dict | None, name: str = "ckpt") -> str:
        d = tmp_path / name
        d.mkdir()
        cfg = dict(LLAMA_8B) if quant is None else {**LLAMA_8B, "quantization_config": quant}
        (d / "config.json").write_text(json.dumps(cfg))
        return str(d / "config.json")

    return write


SERVE = ["serve", "--system", "dgx-h100", "--num-gpus", "1", "--plan", "tp=1", "--json"]


def test_serve_prices_the_checkpoints_weights_unless_told_otherwise(cli, config):
    path = config(QUANT["awq"])
    code, out, err = cli([*SERVE, "--model", path])
    assert code == 0, err
    assert json.loads(out)["workload"]["weight_precision"] == "int4"
    assert "note: weights int4: the checkpoint's" in err and "quant_method awq" in err
    code, out, err = cli([*SERVE, "--model", path, "--weight-precision", "fp8"])  # the user's wins
    assert code == 0 and json.loads(out)["workload"]["weight_precision"] == "fp8"
    assert "the checkpoint's" not in err
    from shardwise.hf_quant import config_checkpoint

    wrapper = config(None, "wrapper")  # a multimodal wrapper's, in its text_config (moonshotai/Kimi-K2.5)
    with open(wrapper, "w") as f:
        json.dump({"model_type": "kimi_k25", "text_config": {**LLAMA_8B, "quantization_config": QUANT["ct-w4a16"]}}, f)
    assert config_checkpoint(wrapper).precision == "int4"
    code, out, err = cli([*SERVE, "--model", config(None, "plain")])  # no quantization_config: 16 bits
    assert code == 0 and json.loads(out)["workload"]["weight_precision"] == "bf16"


def test_a_checkpoint_the_engine_cannot_run_is_refused_in_one_line(cli, config):
    code, out, err = cli(["serve", "--model", config(QUANT["block-fp8"]), "--system", "dgx-a100", "--plan", "tp=8"])
    assert code == 2 and out == "" and _one_error(err)
    assert "quantization_config" in err and "fp8" in err and "--weight-precision" in err
    code, out, err = cli([*SERVE, "--model", config({"quant_method": "hqq"}, "hqq")])
    assert code == 2 and _one_error(err) and "quant_method hqq is not read" in err


def _launch(cli, args: list[str]) -> tuple[int, str, str]:
    return cli(["serve", "--system", "dgx-h100", "--num-gpus", "1", "--plan", "tp=1", "--emit", "vllm", *args])


def test_emit_refuses_a_bf16_checkpoint_for_pre_quantised_weights(cli, config):
    """review 45 #5: int4 priced, the preset's bf16 repository launched."""
    code, out, err = _launch(cli, ["--model", "llama3.1-8b", "--weight-precision", "int4"])
    assert code == 2 and out == "" and _one_error(err)
    assert "meta-llama/Llama-3.1-8B" in err and "16-bit" in err and "--hf-id" in err
    # fp8: vLLM quantises the 16-bit checkpoint at load (--quantization fp8)
    code, out, err = _launch(cli, ["--model", "llama3.1-8b", "--weight-precision", "fp8"])
    assert code == 0 and "--quantization fp8" in out
    # the checkpoint the user names: not read here, so int4 weights need --hf-weights (review 50 #1)
    code, out, err = _launch(cli, ["--model", "llama3.1-8b", "--weight-precision", "int4", "--hf-id", "o/awq"])
    assert code == 2 and out == "" and _one_error(err) and "--hf-weights int4" in err and "detected" not in err
    code, out, err = _launch(
        cli, ["--model", "llama3.1-8b", "--weight-precision", "int4", "--hf-id", "o/awq", "--hf-weights", "int4"]
    )
    assert code == 0 and "vllm serve o/awq" in out and "as --hf-weights int4 states" in out and "detected" not in out
    # a config.json whose quantization_config matches: its directory, no --quantization (read from it)
    path = config(QUANT["ct-fp8"])
    code, out, err = _launch(cli, ["--model", path])
    assert code == 0, err
    assert f"vllm serve {path.removesuffix('/config.json')}" in out and "--quantization" not in out
    code, out, err = _launch(cli, ["--model", path, "--weight-precision", "bf16"])  # priced otherwise
    assert code == 2 and _one_error(err) and "price --weight-precision fp8" in err


def test_a_model_files_own_hf_id_is_taken_as_named(cli, tmp_path):
    """review 46 #1: a file `like: llama3-70b` naming its own AWQ `hf_id` is not the preset's bf16
    checkpoint; one that inherits the preset's id keeps the preset's check; `hf_weights` states it."""
    own = tmp_path / "awq.yaml"
    own.write_text("like: llama3.1-8b\nhf_id: org/llama-awq-int4\n")
    code, out, err = _launch(cli, ["--model", str(own), "--weight-precision", "int4"])
    assert code == 2 and _one_error(err) and "not known here" in err  # its storage unstated (review 50 #1)
    own.write_text("like: llama3.1-8b\nhf_id: org/llama-awq-int4\nhf_weights: int4\n")
    code, out, err = _launch(cli, ["--model", str(own), "--weight-precision", "int4"])
    assert code == 0 and "vllm serve org/llama-awq-int4" in out, err
    stated = tmp_path / "stated.yaml"
    stated.write_text("like: llama3.1-8b\nhf_id: org/llama-fp8\nhf_weights: fp8\n")
    code, out, err = _launch(cli, ["--model", str(stated), "--weight-precision", "int4"])
    assert code == 2 and _one_error(err) and "price --weight-precision fp8" in err


def test_a_preset_whose_checkpoint_is_quantised_says_so():
    """deepseek-v3's hf_id (deepseek-ai/DeepSeek-V3) stores FP8 blocks, gpt-oss's MXFP4 experts."""
    from shardwise.hf_quant import model_checkpoint

    assert model_checkpoint("deepseek-v3").precision == "fp8"
    assert model_checkpoint("gpt-oss-120b").precision == "mxfp4"
    assert model_checkpoint("llama3-70b") is None
    fp8 = Stored("fp8", "the preset's hf_weights")
    check_stored("vllm", "deepseek-ai/DeepSeek-V3", "fp8", fp8)
    with pytest.raises(EmitError, match="price --weight-precision fp8"):
        check_stored("vllm", "deepseek-ai/DeepSeek-V3", "bf16", fp8)
    with pytest.raises(EmitError, match="stores 16-bit"):  # TensorRT-LLM's launch converts nothing at load
        check_stored("trtllm", "meta-llama/Llama-3.1-8B", "fp8", Stored(None, "the preset's hf_id"))


def _served(cli, args: list[str]) -> tuple[int, dict, str]:
    code, out, err = cli(["serve", "--json", *args])
    return code, (json.loads(out) if code == 0 else {}), err


def test_a_preset_with_a_quantised_checkpoint_is_served_as_published(cli):
    """servefix #1 (was review 46 #4's note only): deepseek-v3 is priced in its checkpoint's FP8 by
    default, in a one-line note; --weight-precision wins; a 16-bit preset keeps the GPU's 16 bits."""
    args = ["--model", "deepseek-v3", "--system", "dgx-h200", "--plan", "tp=8", "--framework", "sglang"]
    code, got, err = _served(cli, args)
    assert code == 0, err
    assert got["workload"]["weight_precision"] == "fp8"
    said = [n for n in got["notes"] if "published checkpoint" in n]
    assert len(said) == 1 and said[0].startswith("weights fp8: the checkpoint's") and "--weight-precision" in said[0]
    code, got, err = _served(cli, [*args, "--weight-precision", "bf16"])
    assert code == 0 and got["workload"]["weight_precision"] == "bf16"
    assert not any("published checkpoint" in n for n in got["notes"])
    code, got, err = _served(cli, ["--model", "gpt-oss-20b", "--system", "dgx-h100", "--num-gpus", "1"])
    assert code == 0 and got["workload"]["weight_precision"] == "mxfp4", err
    code, got, err = _served(cli, ["--model", "llama3-8b", "--system", "dgx-h100", "--num-gpus", "1"])
    assert code == 0 and got["workload"]["weight_precision"] == "bf16", err


def test_a_preset_checkpoint_the_engine_cannot_run_is_refused_in_one_line(cli):
    """TensorRT-LLM runs no FP8 weights on Ampere: deepseek-v3's FP8 checkpoint there is refused,
    naming --weight-precision; a 16-bit copy priced as asked."""
    args = ["serve", "--model", "deepseek-v3", "--system", "dgx-a100", "--num-gpus", "16", "--plan", "tp=8,pp=2"]
    code, out, err = cli([*args, "--framework", "tensorrt-llm"])
    assert code == 2 and out == "" and _one_error(err)
    assert "deepseek-v3's published checkpoint" in err and "--weight-precision" in err and "fp8" in err
    code, out, err = cli([*args, "--framework", "tensorrt-llm", "--weight-precision", "bf16"])
    assert code == 0, err


def test_emit_launches_a_preset_checkpoint_as_published_without_a_flag(cli):
    """The default is the checkpoint's, so `--emit` needs no --weight-precision to launch it."""
    code, out, err = _launch(cli, ["--model", "gpt-oss-20b"])
    assert code == 0 and "vllm serve openai/gpt-oss-20b" in out and "--quantization" not in out, err
    code, out, err = _launch(cli, ["--model", "gpt-oss-20b", "--weight-precision", "bf16"])
    assert code == 2 and _one_error(err) and "price --weight-precision mxfp4" in err


def test_training_keeps_its_own_precision_on_a_quantised_checkpoint(cli):
    """predict trains gpt-oss-20b in bf16 (the training default), not its checkpoint's MXFP4."""
    code, out, err = cli(
        ["predict", "--model", "gpt-oss-20b", "--system", "dgx-h100", "--global-batch", "64", "--json"]
    )
    assert code == 0, err
    assert json.loads(out)["scenario"]["plan"]["precision"] == "bf16" and "published checkpoint" not in err
