"""Serving on a GPU without FlashAttention (V100, SM 7.0) prices what each engine runs there
(`engines.engine_attention`): vLLM's and SGLang's Triton kernels and plain PyTorch's SDPA
memory-efficient kernel at the memory-efficient kernel's speed, FasterTransformer's unfused context
attention (its decodes fused), llama.cpp's own kernels as before; training already did
(`requests.attention`). FasterTransformer's GPT context attention is unfused on every GPU, as its
default builds run it (FMHA_ENABLE unset; issue #37 item 5)."""

from __future__ import annotations

import pytest

from shardwise import presets
from shardwise.engines.serving import estimate_serving, plan_for_serving, serving_scenario
from shardwise.errors import SpecError
from shardwise.specs import Scenario
from shardwise.specs.serving import ServingWorkload


def _scn(gpu_flash: bool = False, model: str = "llama2-13b", tp: int = 1) -> Scenario:
    cluster = presets.system("dgx-1-v100")
    if gpu_flash:  # the same V100 as if it ran the fused kernels: what serving priced before
        cluster = cluster.with_(gpu=cluster.gpu.with_(flash_attention=True))
    return Scenario(presets.model(model), cluster, plan_for_serving(tp, 1, 8 // tp))


def _wl(engine: str, prompt: int = 4096) -> ServingWorkload:
    return ServingWorkload(prompt, 128, 8, "fp16", "fp16", engine=engine)


@pytest.mark.parametrize(
    ("engine", "kernel", "flash"),
    [
        ("vllm", "sdpa-mem-efficient", True),
        ("pytorch", "sdpa-mem-efficient", True),
        ("fastertransformer", "fused", False),
        ("llama.cpp", "fused", True),
    ],
)
def test_each_engine_runs_its_own_attention_on_a_v100(engine, kernel, flash):
    plan = serving_scenario(_scn(), _wl(engine)).plan
    assert (plan.attention_kernel, bool(plan.flash_attention)) == (kernel, flash)
    a100 = Scenario(presets.model("llama2-13b"), presets.system("dgx-a100"), plan_for_serving(1, 1, 8))
    plan = serving_scenario(a100, ServingWorkload(4096, 128, 8, engine=engine)).plan
    fused = engine != "fastertransformer"  # unchanged where FA2 runs, but FasterTransformer's (unfused everywhere)
    own = "flash2" if engine == "vllm" else "fused"  # vLLM's FLASH_ATTN backend runs FA2 on Ampere (#37 item 5)
    assert (plan.attention_kernel, bool(plan.flash_attention)) == (own, fused)


@pytest.mark.parametrize("engine", ["vllm", "pytorch"])
def test_the_fallbacks_cost_prompts_not_decodes(engine):
    """A long prompt's attention is compute: the fallback kernels take longer than the fused ones; a
    decode step reads the KV cache whichever kernel runs it (FasterTransformer's decoder kernel is
    fused, `engines.costs.layer_cost`)."""
    now, fused = (estimate_serving(_scn(flag), _wl(engine)) for flag in (False, True))
    assert float(now.ttft_s) > 1.03 * float(fused.ttft_s)
    assert float(now.tpot_s) == pytest.approx(float(fused.tpot_s), rel=0.01)


def test_fastertransformer_prompts_are_unfused_on_every_gpu_its_decodes_fused(monkeypatch):
    """FasterTransformer 5.x's GPT context attention takes the fused kernels only with FMHA_ENABLE=ON
    (BaseAttentionLayer.h, from NVIDIA/FasterTransformer@7921074; none before 5.2): on an A100 its
    prompts cost what the unfused kernels cost, its one-token decodes what the fused decoder kernel
    costs (`engines.costs.layer_cost`), on a V100 the same whether the GPU runs fused kernels or not."""
    from shardwise.engines import engine_attention

    a100 = Scenario(presets.model("llama2-13b"), presets.system("dgx-a100"), plan_for_serving(1, 1, 8))
    now = estimate_serving(a100, _wl("fastertransformer"))
    monkeypatch.setattr(engine_attention, "UNFUSED_EVERYWHERE", frozenset())  # as priced before: fused on A100
    fused = estimate_serving(a100, _wl("fastertransformer"))
    assert float(now.ttft_s) > 1.03 * float(fused.ttft_s)
    assert float(now.tpot_s) == pytest.approx(float(fused.tpot_s), rel=0.01)
    monkeypatch.undo()
    v100, flagged = (estimate_serving(_scn(flag), _wl("fastertransformer")) for flag in (False, True))
    assert float(v100.ttft_s) == pytest.approx(float(flagged.ttft_s))


def test_serve_says_fastertransformer_prompts_are_unfused(cli):
    argv = ["serve", "--model", "llama3-8b", "--system", "dgx-a100", "--plan", "tp=1", "--framework"]
    code, _, err = cli([*argv, "fastertransformer"])
    assert code == 0 and "context attention is unfused" in err and "FMHA_ENABLE=ON" in err, err
    code, _, err = cli([*argv, "vllm"])
    assert code == 0 and "unfused" not in err, err


def test_unfused_prompts_cost_more_than_the_memory_efficient_kernel():
    ft, vllm = (float(estimate_serving(_scn(), _wl(e, 8192)).ttft_s) for e in ("fastertransformer", "vllm"))
    assert ft > vllm


def test_llama_cpp_keeps_its_own_kernels_on_volta():
    now, fused = (estimate_serving(_scn(flag), _wl("llama.cpp")) for flag in (False, True))
    assert float(now.ttft_s) == pytest.approx(float(fused.ttft_s)) and float(now.tpot_s) == pytest.approx(
        float(fused.tpot_s)
    )


def test_tensorrt_llm_is_refused_on_volta():
    with pytest.raises(SpecError, match=r"^serving: engine tensorrt-llm: tensorrt-llm 1.x .*Volta"):
        estimate_serving(_scn(), _wl("tensorrt-llm"))


def test_serve_says_what_it_priced(cli):
    v100 = ["serve", "--model", "llama3-8b", "--system", "dgx-1-v100", "--plan", "tp=1", "--framework", "vllm"]
    code, _, err = cli(v100)
    assert code == 0, err
    assert "v100-sxm2-32gb runs no FlashAttention" in err and "TRITON_ATTN" in err, err
    code, _, err = cli(["serve", "--model", "llama3-8b", "--system", "dgx-a100", "--plan", "tp=1"])
    assert code == 0 and "FlashAttention" not in err, err


def test_context_parallel_prompts_on_volta_take_no_pytorch_ring():
    """vLLM's prefill context parallelism all-gathers keys and values; the memory-efficient kernel's
    PyTorch ring bookkeeping (training's) is not added (`cp_comm` all_gather)."""
    scn = serving_scenario(_scn(tp=2), _wl("vllm"))
    assert scn.plan.cp_comm == "all_gather"


def test_in_flight_batching_prices_the_engines_attention_kernel_too(cli, monkeypatch):
    """The in-flight simulator's per-step costs (`engines.iteration.stage_costs`) read the plan's
    attention kernel as the static path does: vLLM's Triton fallback on a V100 makes its prompts
    slower than the fused price (#37 item 5: it was priced fused under in-flight batching)."""
    import json

    from shardwise.engines import engine_attention

    argv = ["serve", "--model", "llama2-13b", "--system", "dgx-1-v100", "--plan", "tp=2", "--framework", "vllm"]
    argv += ["--input-len", "4096", "--output-len", "128", "--concurrency", "8", "--json"]

    def priced() -> dict:
        code, out, err = cli(argv)
        assert code == 0, err
        return json.loads(out)["plans"][0]

    now = priced()
    monkeypatch.setitem(engine_attention.NO_FLASH, "vllm", {})  # the fused price
    fused = priced()
    assert now["batching"] == "inflight" and now["ttft_s"] > 1.03 * fused["ttft_s"]
