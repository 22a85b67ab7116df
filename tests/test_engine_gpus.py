"""Which GPUs each serving engine runs on, and which weight and KV-cache formats it runs on each
(`engines.engine_formats`): TensorRT-LLM refused on Volta and AMD GPUs, its MXFP4 on Ada, KV-cache
formats checked per engine and architecture, AMD's rules for vLLM and SGLang."""

from __future__ import annotations

import pytest

from shardwise import presets
from shardwise.engines.engine_formats import (
    ARCH_NAMES,
    KV_CACHE,
    RUNS_ON,
    WEIGHTS,
    architecture,
    check_engine_gpu,
    check_kv_format,
    kv_formats_on,
    weight_formats_on,
)
from shardwise.errors import SpecError

MI250X = ("--gpu", "mi250x-gcd", "--num-gpus", "1", "--intra-link", "pcie4")
ARCHS = {
    "v100-sxm2-32gb": "volta",
    "a100-sxm4-80gb": "ampere",
    "rtx-3090": "ampere",
    "l40s": "ada",
    "rtx-4090": "ada",
    "h100-sxm5-80gb": "hopper",
    "h100-pcie-80gb": "hopper",
    "h200-sxm-141gb": "hopper",
    "b200-sxm-180gb": "blackwell",
    "rtx-5090": "blackwell",
    "mi250x-gcd": "cdna2",
    "mi300x": "cdna3",
    "mi325x": "cdna3",
}


@pytest.mark.parametrize("name", sorted(ARCHS))
def test_each_preset_gpu_has_the_architecture_its_datasheet_gives(name):
    assert architecture(presets.gpu(name)) == ARCHS[name]


def test_every_rule_names_known_architectures():
    for table in (WEIGHTS, KV_CACHE):
        for rules in table.values():
            assert all(set(archs) <= set(ARCH_NAMES) for archs in rules.values())
    assert all(set(archs) <= set(ARCH_NAMES) for archs in RUNS_ON.values())


def _serve(argv):
    return ["serve", "--model", "llama3-8b", "--plan", "tp=1", *argv]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--system", "dgx-1-v100"], "tensorrt-llm 1.x (LLM API) does not run on v100-sxm2-32gb (Volta (SM 7.0))"),
        (["--system", "mi300x-8x"], "tensorrt-llm 1.x (LLM API) does not run on mi300x"),
        (["--system", "mi300x-8x", "--framework", "fastertransformer"], "fastertransformer 5.x does not run on mi300x"),
    ],
)
def test_an_engine_on_a_gpu_it_does_not_run_on_is_refused_in_one_line(cli, argv, says):
    code, out, err = cli(_serve(argv))
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert says in err and "--framework" in err, err
    assert "tensorrt-llm" not in err.split("choose --framework")[1], err  # the engines offered run there


def test_the_engine_check_holds_for_the_api_too():
    v100 = presets.gpu("v100-sxm2-32gb")
    with pytest.raises(SpecError, match=r"^serving: engine tensorrt-llm: .*Volta"):
        check_engine_gpu("tensorrt-llm", v100, "serving: engine")
    for engine in ("vllm", "llama.cpp", "fastertransformer", "pytorch"):
        check_engine_gpu(engine, v100)
    # SGLang's model runner: "SGLang only supports sm75 and above." (review 42)
    with pytest.raises(SpecError, match=r"^serving: engine sglang: .*Volta"):
        check_engine_gpu("sglang", v100, "serving: engine")
    check_engine_gpu("tensorrt-llm", presets.gpu("a100-sxm4-80gb"))


@pytest.mark.parametrize(
    ("argv", "allowed"),
    [
        # TensorRT-LLM's MXFP4 MoE kernels: Hopper and Blackwell, not Ada (review: the FP8 level let Ada through)
        (["--gpu", "l40s", "--num-gpus", "1", "--intra-link", "pcie4", "--weight-precision", "mxfp4"], "int8, int4"),
        (["--system", "mi300x-8x", "--framework", "sglang", "--weight-precision", "mxfp4"], "fp8, nvfp4"),
        (["--system", "mi300x-8x", "--framework", "sglang", "--weight-precision", "int4"], "fp8, nvfp4"),
        ([*MI250X, "--framework", "vllm", "--weight-precision", "fp8"], "bf16, fp16, int8, int4"),
    ],
)
def test_weight_formats_by_architecture_are_refused(cli, argv, allowed):
    code, out, err = cli(_serve(argv))
    value = argv[argv.index("--weight-precision") + 1]
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert f"--weight-precision {value}:" in err and err.rstrip().endswith(allowed), err


@pytest.mark.parametrize(
    "argv",
    [
        ["--system", "dgx-h100", "--weight-precision", "mxfp4"],
        ["--system", "mi300x-8x", "--framework", "vllm", "--weight-precision", "fp8", "--kv-precision", "fp8"],
        ["--system", "mi300x-8x", "--framework", "vllm", "--weight-precision", "mxfp4"],
        ["--system", "mi300x-8x", "--framework", "sglang", "--weight-precision", "fp8"],
        ["--system", "dgx-a100", "--kv-precision", "int8"],  # TensorRT-LLM's INT8 KV cache
        ["--system", "dgx-b200", "--kv-precision", "nvfp4"],
        ["--system", "dgx-h100", "--framework", "vllm", "--kv-precision", "fp8"],
        # FlashInfer's FP8 cache on Ampere: vLLM picks it where FA2 reads no FP8 (issue #37 item 5), SGLang by default
        ["--system", "dgx-a100", "--framework", "vllm", "--kv-precision", "fp8"],
        ["--system", "dgx-a100", "--framework", "sglang", "--kv-precision", "fp8"],
        # TensorRT-LLM 1.x's hardware support matrix: FP8 KV cache on Ampere too (features/quantization.md)
        ["--system", "dgx-a100", "--kv-precision", "fp8"],
        ["--framework", "llama.cpp", "--weight-precision", "q4_k", "--kv-precision", "q8_0"],
    ],
)
def test_formats_the_engine_runs_there_are_priced(cli, argv):
    if "--system" not in argv:
        argv = ["--system", "dgx-h100", *argv]
    code, _, err = cli(_serve(argv))
    assert code == 0, err


@pytest.mark.parametrize(
    ("argv", "allowed"),
    [
        (["--gpu", "v100-sxm2-32gb", "--num-gpus", "1", "--intra-link", "pcie3", "--framework", "vllm"], "fp16"),
        ([*MI250X, "--framework", "vllm"], "bf16, fp16"),
        (["--system", "dgx-h100", "--framework", "fastertransformer"], "bf16, fp16"),
        (["--system", "dgx-h100", "--framework", "llama.cpp"], "bf16, fp16, q8_0, q4_0"),
    ],
)
def test_a_kv_cache_format_the_engine_cannot_keep_is_refused(cli, argv, allowed):
    code, out, err = cli(_serve([*argv, "--kv-precision", "fp8"]))
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert "--kv-precision fp8:" in err and "KV cache" in err and err.rstrip().endswith(f"choose {allowed}"), err


@pytest.mark.parametrize(
    ("model", "plan", "kind"),
    [
        ("gpt-neox-20b", "tp=1", "head size 96"),
        ("deepseek-v2-lite", "tp=1", "latent attention (MLA)"),
        ("gpt-oss-20b", "tp=1", "attention with sinks"),  # review 44 #5: FlashInfer raises for sinks off Blackwell
    ],
)
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_an_fp8_cache_on_ampere_needs_flashinfers_head_sizes(cli, engine, model, plan, kind):
    """On Ampere only FlashInfer reads an FP8 cache (head sizes 64, 128, 256, no MLA); Triton's kernels,
    the fallback, convert e4m3 from SM 8.9: refused in one line naming the model's attention."""
    argv = ["serve", "--model", model, "--plan", plan, "--framework", engine, "--kv-precision", "fp8"]
    code, out, err = cli([*argv, "--system", "dgx-a100"])
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert "--kv-precision fp8:" in err and kind in err and err.rstrip().endswith("choose bf16, fp16"), err
    code, _, err = cli([*argv, "--system", "dgx-h100"])  # Hopper's FA3 reads it
    assert code == 0, err


def test_the_fp8_cache_rule_reads_the_model_where_given():
    a100, h100 = presets.gpu("a100-sxm4-80gb"), presets.gpu("h100-sxm5-80gb")
    llama, neox = presets.model("llama3-8b"), presets.model("gpt-neox-20b")
    assert kv_formats_on("vllm", a100) == kv_formats_on("vllm", a100, llama) == ["bf16", "fp16", "fp8"]
    assert kv_formats_on("vllm", a100, neox) == ["bf16", "fp16"]
    assert kv_formats_on("vllm", h100, neox) == ["bf16", "fp16", "fp8"]
    assert kv_formats_on("tensorrt-llm", a100, neox) == ["bf16", "fp16", "fp8", "int8"]  # its own kernels
    with pytest.raises(SpecError, match=r"^--kv-precision fp8: sglang .* gpt-neox-20b .*head size 96"):
        check_kv_format("sglang", a100, "fp8", "--kv-precision", neox)


def test_int4_and_fp4_kv_caches_only_where_an_engine_keeps_them():
    h100, b200 = presets.gpu("h100-sxm5-80gb"), presets.gpu("b200-sxm-180gb")
    for engine in ("tensorrt-llm", "vllm", "sglang", "llama.cpp"):
        assert "int4" not in kv_formats_on(engine, b200) and "mxfp4" not in kv_formats_on(engine, b200)
    assert "nvfp4" in kv_formats_on("tensorrt-llm", b200) and "nvfp4" not in kv_formats_on("tensorrt-llm", h100)
    with pytest.raises(SpecError, match=r"^--kv-precision int4: vllm cannot keep its KV cache in int4 .*not a format"):
        check_kv_format("vllm", h100, "int4", "--kv-precision")


def test_the_fit_hint_suggests_an_fp8_cache_only_where_the_engine_keeps_one(cli):
    """int4 weights (the narrowest both engines run there), a batch whose 16-bit cache does not fit:
    vLLM keeps an FP8 cache on an A100 through FlashInfer for Llama's head size 128, not GPT-NeoX's 96."""
    load = ["--input-len", "8192", "--output-len", "1024", "--batching", "static", "--weight-precision", "int4"]
    for model, argv, fp8 in (
        ("llama3-70b", ["--system", "dgx-a100", "--framework", "vllm", "--concurrency", "160"], True),
        ("llama3-70b", ["--system", "dgx-h100", "--concurrency", "160"], True),
        ("gpt-neox-20b", ["--system", "dgx-a100", "--framework", "vllm", "--concurrency", "80"], False),
        ("gpt-neox-20b", ["--system", "dgx-h100", "--framework", "vllm", "--concurrency", "80"], True),
    ):
        code, out, err = cli(["serve", "--model", model, "--plan", "tp=2", *load, *argv])
        assert code == 0 and "does not fit" in out, err
        assert ("--kv-precision fp8" in " ".join(out.split())) is fp8, out


def test_the_formats_offered_are_those_allowed():
    mi300 = presets.gpu("mi300x")
    assert weight_formats_on("vllm", mi300) == ["bf16", "fp16", "fp8", "int8", "int4", "nvfp4", "mxfp4"]
    assert weight_formats_on("sglang", mi300) == ["bf16", "fp16", "fp8", "nvfp4"]
    assert kv_formats_on("vllm", mi300) == ["bf16", "fp16", "fp8"]
    assert weight_formats_on("tensorrt-llm", presets.gpu("h100-sxm5-80gb"))[-1] == "mxfp4"
