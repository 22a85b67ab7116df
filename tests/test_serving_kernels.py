"""Each serving engine's attention kernel by GPU architecture (`engines.engine_attention.ENGINE_KERNELS`,
issue #37 item 5): vLLM and SGLang run FlashAttention-3 on Hopper, FlashAttention-2's design on Ampere /
Ada (vLLM's FLASH_ATTN, SGLang's FlashInfer) and TensorRT-LLM's generated kernels on B200-class
Blackwell; TensorRT-LLM and llama.cpp keep their own fused price; `serve --attention-kernel` overrides
vLLM's and SGLang's, refused in one line where the engine or the GPU cannot run it."""

from __future__ import annotations

import json

import pytest

from shardwise import presets
from shardwise.engines.engine_attention import engine_kernel, serving_attention
from shardwise.engines.serving import estimate_serving, plan_for_serving, serving_scenario
from shardwise.errors import SpecError
from shardwise.specs import Scenario
from shardwise.specs.serving import ServingWorkload


@pytest.mark.parametrize(
    ("engine", "gpu", "kernel"),
    [
        ("vllm", "h100-sxm5-80gb", "flash3"),
        ("sglang", "h200-sxm-141gb", "flash3"),
        ("vllm", "a100-sxm4-80gb", "flash2"),
        ("sglang", "l40s", "flash2"),
        ("vllm", "b200-sxm-180gb", "fused"),
        ("sglang", "gb200", "fused"),
        ("vllm", "mi300x", "fused"),
        ("tensorrt-llm", "h100-sxm5-80gb", "fused"),
        ("llama.cpp", "h100-sxm5-80gb", "fused"),
        ("pytorch", "h100-sxm5-80gb", "fused"),
    ],
)
def test_each_engine_names_its_kernel_per_architecture(engine, gpu, kernel):
    assert engine_kernel(engine, presets.gpu(gpu)) == kernel


def test_tensorrt_llm_keeps_its_own_fused_kernels():
    """TensorRT-LLM's plan is what it was before: no kernel field, the fused price."""
    for gpu in ("h100-sxm5-80gb", "b200-sxm-180gb", "a100-sxm4-80gb"):
        assert serving_attention("tensorrt-llm", presets.gpu(gpu)) == {"flash_attention": True}


def _scn(system: str = "dgx-h100", model: str = "llama3-8b") -> Scenario:
    return Scenario(presets.model(model), presets.system(system), plan_for_serving(1, 1, 8))


def _wl(engine: str, kernel: str | None = None, prompt: int = 32768) -> ServingWorkload:
    return ServingWorkload(prompt, 128, 4, engine=engine, attention_kernel=kernel)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_hopper_prefill_runs_at_flashattention3s_speed_decodes_unchanged(engine):
    """A 32k prompt's attention is compute-bound: FlashAttention-3 (0.84 of the GEMMs' plateau) beats the
    fused kernels' 0.75 and FlashAttention-2's 0.47 on H100; a decode step reads the KV cache whatever
    the kernel (bytes unchanged)."""
    scn = _scn()
    assert serving_scenario(scn, _wl(engine)).plan.attention_kernel == "flash3"
    own, fused, fa2 = (estimate_serving(scn, _wl(engine, k)) for k in (None, "fused", "flash2"))
    assert float(own.ttft_s) < 0.97 * float(fused.ttft_s)
    assert float(fa2.ttft_s) > 1.1 * float(fused.ttft_s)
    assert float(own.tpot_s) == pytest.approx(float(fused.tpot_s), rel=0.01)


def test_ampere_vllm_prefill_at_flashattention2s_a100_speed():
    """FA2's A100 plateau (0.84) is above the fused kernels' (0.75): vLLM's long prompts come faster
    than TensorRT-LLM's kernel price would give them."""
    scn = _scn("dgx-a100")
    own, fused = (estimate_serving(scn, _wl("vllm", k)) for k in (None, "fused"))
    assert float(own.ttft_s) < 0.99 * float(fused.ttft_s)


def test_refusals_in_one_line():
    b200, h100 = presets.gpu("b200-sxm-180gb"), presets.gpu("h100-sxm5-80gb")
    with pytest.raises(SpecError, match=r"flash3 cannot run here: .*sm_90a"):
        serving_attention("vllm", b200, "flash3")
    with pytest.raises(SpecError, match="runs its own attention kernels"):
        serving_attention("tensorrt-llm", h100, "flash3")
    with pytest.raises(SpecError, match="runs no FlashAttention"):
        serving_attention("vllm", presets.gpu("v100-sxm2-32gb"), "flash2")
    with pytest.raises(SpecError, match="attention_kernel 'flash9' is not allowed"):
        ServingWorkload(128, 128, engine="vllm", attention_kernel="flash9")
    assert serving_attention("sglang", b200, "flash4")["attention_kernel"] == "flash4"


def test_serve_takes_attention_kernel(cli):
    argv = ["serve", "--model", "llama3-8b", "--system", "dgx-h100", "--plan", "tp=1", "--input-len", "16384"]
    code, out, err = cli([*argv, "--framework", "sglang", "--json"])
    assert code == 0 and json.loads(out)["workload"]["attention_kernel"] == "flash3", err
    code, out, err = cli([*argv, "--framework", "vllm", "--attention-kernel", "fused"])
    assert code == 0 and "attention fused;" in out, err
    code, _, err = cli([*argv, "--framework", "tensorrt-llm", "--attention-kernel", "flash3"])
    assert code == 2 and "runs its own attention kernels" in err and "Traceback" not in err, err
    b200 = ["serve", "--model", "llama3-8b", "--gpu", "b200-sxm-180gb", "--num-gpus", "1", "--plan", "tp=1"]
    code, _, err = cli([*b200, "--framework", "sglang", "--attention-kernel", "flash3"])
    assert code == 2 and "flash3 cannot run here" in err and len(err.strip().splitlines()) == 1, err
    code, _, err = cli([*argv, "--framework", "vllm", "--attention-kernel", "flash2", "--emit", "vllm"])
    assert code == 2 and "the --emit vllm server runs vllm's own (flash3 here)" in err, err


def test_latent_attention_absorbed_head_dim_runs_on_flashattention3():
    """DeepSeek's absorbed MLA key (576 = 64 rotary + 512 latent) is FA3's hdim-64 + qv-512 path on
    Hopper, as SGLang's fa3 backend runs it: priced, not refused; FA4 on sm100 has no such path."""
    from shardwise.physics import attention_flash34 as fa34

    h200, b200 = presets.gpu("h200-sxm-141gb"), presets.gpu("b200-sxm-180gb")
    assert fa34.head_dim_refusal(h200, "flash3", 576) == ""
    assert "576" in fa34.head_dim_refusal(b200, "flash4", 576)
    assert "320" in fa34.head_dim_refusal(h200, "flash3", 320)


def test_serve_deepseek_on_hopper_under_sglang(cli):
    code, out, err = cli(
        ["serve", "--model", "deepseek-v3", "--system", "dgx-h200", "--plan", "tp=8", "--framework", "sglang"]
    )
    assert code == 0 and "attention flash3" in out, err


def test_flashattention3_and_4_asked_on_ampere_serve_as_flashattention2(cli):
    """Serving runs the forward only: FA3's sm80 build and FA4's sm80 forward are FlashAttention-2's
    design, so either is priced as flash2 with a note, not refused for a training reason."""
    argv = ["serve", "--model", "llama3-8b", "--system", "dgx-a100", "--num-gpus", "1", "--plan", "tp=1"]
    argv += ["--framework", "vllm", "--input-len", "8000", "--json"]
    runs = {k: cli([*argv, "--attention-kernel", k]) for k in ("flash2", "flash3", "flash4")}
    assert all(code == 0 for code, _, _ in runs.values()), runs
    ttft = {k: json.loads(out)["plans"][0]["ttft_s"] for k, (_, out, _) in runs.items()}
    assert ttft["flash3"] == ttft["flash4"] == ttft["flash2"]
    assert any("priced as flash2" in n for n in json.loads(runs["flash4"][1])["notes"])
