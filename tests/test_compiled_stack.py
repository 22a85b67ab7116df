"""What torch.compile changes in torchtitan and what it does not (physics.stack): Inductor fuses the
norms and the activation, but torchtitan's complex rotary embedding stays ATen kernels
(`Plan.eager_rotary`), counted by hand for Llama 3 8B on one DGX H100."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shardwise import presets
from shardwise.engines.training import estimate_training_step
from shardwise.physics.flops import layer_forward
from shardwise.physics.stack import EAGER_ROPE_BYTES_PER_ELEMENT
from shardwise.specs import Plan, Recompute, Scenario


def _scenario(framework: str, **overrides) -> Scenario:
    flags = presets.framework(framework)
    zero = flags.pop("zero_stage")
    kw = {"dp": 8, "global_batch": 8, "recompute": Recompute.SELECTIVE, "zero_stage": zero, **flags, **overrides}
    model = presets.model("llama3-8b", seq_len=8192)
    return Scenario(model, presets.system("dgx-h100"), Plan(**kw))


def test_only_the_compiled_torchtitan_preset_keeps_its_rotary_embedding_in_aten():
    assert presets.framework("torchtitan-compile")["eager_rotary"] is True
    assert presets.framework("torchtitan-compile")["eager_kernels"] is False
    for name in ("megatron-core", "maxtext", "nanotron", "fsdp2"):
        assert not presets.framework(name).get("eager_rotary", False)


def test_the_complex_rotary_embedding_moves_twenty_bytes_per_element_of_q_and_k():
    m = presets.model("llama3-8b", seq_len=8192)
    fused = layer_forward(m, 1, 1, False, 2.0)
    aten = layer_forward(m, 1, 1, False, 2.0, eager_rotary=True)
    q, kv = m.heads * m.head_dim, m.kv_heads * m.head_dim
    elements = 8192 * (q + kv)  # the rotary embedding works on q and k
    # fused: read and write 2 bytes; ATen: .float() 2 + 4, complex multiply 4 + 4, .type_as 4 + 2
    assert aten.elementwise_bytes - fused.elementwise_bytes == pytest.approx((20.0 - 4.0) * elements)
    assert EAGER_ROPE_BYTES_PER_ELEMENT == 20.0
    assert aten.elementwise_kernels == fused.elementwise_kernels - 1 + 6  # three kernels each for q and k


def test_learned_positions_have_no_rotary_embedding_to_keep_in_aten():
    m = presets.model("gpt3-175b")
    assert layer_forward(m, 1, 8, True, 2.0, eager_rotary=True).elementwise_bytes == pytest.approx(
        layer_forward(m, 1, 8, True, 2.0).elementwise_bytes
    )


def test_compile_sits_between_eager_and_fully_fused_rotary():
    compiled = _scenario("torchtitan-compile")
    fused_rope = replace(compiled, plan=replace(compiled.plan, eager_rotary=False))
    eager = _scenario("torchtitan")
    t_compiled, t_fused, t_eager = (float(estimate_training_step(s).step_time_s) for s in (compiled, fused_rope, eager))
    assert t_fused < t_compiled < t_eager
    # the rotary embedding's extra bytes, forward + backward (2x) + op-level SAC's recompute, 32 layers
    m, gpu = compiled.model, compiled.cluster.gpu
    extra_bytes = 16.0 * 8192 * (m.heads * m.head_dim + m.kv_heads * m.head_dim) * (1 + 2 + 1) * m.layers
    launches = 5 * (1 + 2 + 1) * m.layers * gpu.kernel_launch_s  # six kernels instead of one, every pass
    by_hand = extra_bytes / (gpu.memory_bandwidth_bytes_per_s * gpu.memory_efficiency) + launches
    assert t_compiled - t_fused == pytest.approx(by_hand, rel=0.01)
    assert 0.02 < t_compiled - t_fused < 0.05  # about 30 ms of a ~1.2 s step


def test_eager_rotary_is_checked_like_any_plan_flag():
    with pytest.raises(Exception, match="eager_rotary"):
        Plan(eager_rotary="maybe")
