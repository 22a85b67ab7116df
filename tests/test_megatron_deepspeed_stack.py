"""Megatron-DeepSpeed's layout defaults and its eager element-wise work for Llama-style models
(presets/frameworks.yaml `megatron-deepspeed`): sequence parallelism off unless asked, SwiGLU as a
chunk then SiLU and a multiply, the rotary embedding as 16-bit rotate_half ops."""

from __future__ import annotations

from shardwise import presets
from shardwise.engines.training import estimate_training_step
from shardwise.presets.stack_defaults import framework_sequence_parallel
from shardwise.requests.training import TrainingRequest
from shardwise.specs import Plan, Scenario


def _step(model: str, **over: object) -> float:
    fw = presets.framework("megatron-deepspeed")
    fw.pop("zero_stage")
    fw.update(flash_attention=True, **over)
    plan = Plan(tp=2, pp=2, dp=4, global_batch=64, micro_batch=2, zero_stage=1, **fw)
    scn = Scenario(presets.model(model), presets.system("dgx-a100", nodes=2), plan)
    return float(estimate_training_step(scn).step_time_s)


def test_the_preset_runs_tp_without_sequence_parallelism_unless_asked():
    assert framework_sequence_parallel("megatron-deepspeed") is False
    base = dict(model="llama2-7b", system="dgx-a100", num_gpus=16, tp=2, pp=2, dp=4, global_batch=64)
    assert not TrainingRequest(**base, framework="megatron-deepspeed").scenario().plan.sequence_parallel
    asked = TrainingRequest(**base, framework="megatron-deepspeed", sequence_parallel=True)
    assert asked.scenario().plan.sequence_parallel
    assert TrainingRequest(**base, framework="megatron-core").scenario().plan.sequence_parallel


def test_eager_swiglu_and_rotary_slow_a_llama_layer_but_not_a_gpt_one():
    fw = presets.framework("megatron-deepspeed")
    assert fw["eager_glu"] is True and fw["eager_rotary"] is True
    eager, fused = _step("llama2-7b"), _step("llama2-7b", eager_glu=False, eager_rotary=False)
    assert fused < eager < 1.15 * fused  # element-wise bytes: a few percent of a 7B step on A100
    only_glu = _step("llama2-7b", eager_rotary=False)
    assert fused < only_glu < eager
    # a GPT model (learned positions, plain GeLU MLP) has neither: the flags change nothing
    assert _step("gpt-1.3b") == _step("gpt-1.3b", eager_glu=False, eager_rotary=False)
