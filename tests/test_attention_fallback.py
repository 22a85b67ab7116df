"""The attention a stack runs on a GPU without the fused kernels (V100, sm70: `requests.attention`):
review 38 found FlashAttention-2 priced on a V100 (DeepSpeed, gpt-1.3b: 1.72 s and 18.7 GB of
activations where the kernel cannot run)."""

import pytest

from shardwise import presets
from shardwise.engines.training import estimate_training_step
from shardwise.errors import SpecError
from shardwise.physics import attention_kernels as ak
from shardwise.requests.training import TrainingRequest

CASE_E = dict(model="gpt-1.3b", system="dgx-1-v100", nodes=1, framework="deepspeed", zero=2, micro_batch=4)


def _built(**kw):
    return TrainingRequest(**{**CASE_E, "global_batch": 64, **kw}).build()


def test_the_gpus_that_run_the_fused_kernels():
    assert not presets.gpu("v100-sxm2-32gb").flash_attention  # sm70
    assert all(presets.gpu(n).flash_attention for n in ("a100-sxm4-80gb", "h100-sxm5-80gb", "l40s", "mi300x"))


def test_deepspeed_on_a_v100_runs_sdpas_memory_efficient_kernel_with_a_note():
    """Hugging Face's default attn_implementation is SDPA, which runs its memory-efficient backend
    before sm80: no s x s scores kept (activations as flash's), attention slower than FA2 would be."""
    built = _built()
    plan = built.scenario.plan
    assert plan.attention_kernel == "sdpa-mem-efficient" and bool(plan.flash_attention)
    assert any("memory-efficient" in n and "8.0" in n for n in built.notes)
    est = estimate_training_step(built.scenario)
    unfused = estimate_training_step(_built(flash_attention=False).scenario)
    assert float(est.memory.activations_bytes) < 0.5 * float(unfused.memory.activations_bytes)
    a100 = TrainingRequest(**{**CASE_E, "system": "dgx-a100", "global_batch": 64, "precision": "fp16"})
    fa2 = estimate_training_step(a100.scenario())
    mem_eff = estimate_training_step(a100.with_(attention_kernel="sdpa-mem-efficient").scenario())
    assert float(mem_eff.step_time_s) > float(fa2.step_time_s)  # the same GPU: the CUTLASS kernel is slower


def test_transformer_engine_stacks_fall_back_to_unfused_attention():
    """TE's get_attention_backend disables FlashAttention and FusedAttention below sm80:
    UnfusedDotProductAttention, the scores written."""
    built = TrainingRequest(model="gpt-1.3b", system="dgx-1-v100", nodes=1, global_batch=64, micro_batch=4).build()
    assert not bool(built.scenario.plan.flash_attention)
    assert any("unfused" in n for n in built.notes)


def test_a_stack_whose_default_is_unfused_is_left_as_it_is():
    built = TrainingRequest(
        model="gpt-1.3b", system="dgx-2", nodes=1, framework="megatron-deepspeed", global_batch=64, micro_batch=4
    ).build()
    assert not bool(built.scenario.plan.flash_attention) and built.scenario.plan.attention_kernel == "flash2"
    assert not any("fused attention" in n for n in built.notes)


def test_a_gpu_with_the_fused_kernels_keeps_the_stacks_kernel():
    built = TrainingRequest(**{**CASE_E, "system": "dgx-a100", "global_batch": 64}).build()
    assert built.scenario.plan.attention_kernel == "flash2" and bool(built.scenario.plan.flash_attention)
    assert not any("fused attention" in n for n in built.notes)


@pytest.mark.parametrize("asked", [{"flash_attention": True}, {"attention_kernel": "flash2"}])
def test_a_fused_kernel_asked_for_on_a_v100_is_refused(asked):
    with pytest.raises(SpecError, match=r"cannot run it .*8\.0.*; use --no-flash-attention"):
        _built(**asked)


def test_the_refusal_is_one_line_and_exit_2(cli):
    code, _out, err = cli(["predict", "--model", "gpt-1.3b", "--system", "dgx-1-v100", "--flash-attention"])
    assert code == 2 and err.startswith("error: --flash-attention:") and err.count("\n") == 1
    assert "Traceback" not in err


def test_memory_efficient_kernel_speeds():
    """xFormers' CUTLASS kernels against FlashAttention (PR #362, A100) and FA2 ~2x FlashAttention
    (Dao 2023): forward 0.95 / 2, backward 1 / 1.55 / 2 of FA2's at the fused plateau."""
    gpu = presets.gpu("v100-sxm2-32gb")
    fwd = ak.attention_relative_efficiency(gpu, "sdpa-mem-efficient")
    bwd = ak.attention_backward_relative_efficiency(gpu, "sdpa-mem-efficient")
    assert fwd == pytest.approx(ak.FLASH_RELATIVE_EFFICIENCY * 0.95 / 2)
    assert bwd == pytest.approx(ak.FLASH_RELATIVE_EFFICIENCY / 1.55 / 2)
    assert bwd < fwd < ak.attention_relative_efficiency(gpu, "fused")


def test_a_deepspeed_launch_on_a_v100_asks_for_no_flash_attention():
    """--emit deepspeed passes --use-flash-attn-v2 where the plan has flash attention; a V100 runs none,
    so it is neither priced nor launched with it (on an A100 it is)."""
    from shardwise.requests.emit_stack import emit_training

    v100 = TrainingRequest(model="gpt-1.3b", system="dgx-1-v100", nodes=1, global_batch=64, micro_batch=4)
    priced, _ = emit_training(v100, "deepspeed")
    assert priced.framework == "megatron-deepspeed" and not priced.flash_attention
    priced_a100, _ = emit_training(v100.with_(system="dgx-a100"), "deepspeed")
    assert priced_a100.flash_attention
