"""FSDP2's per-parameter sharding copies (physics.stack.per_param_sharding_bytes): counted by hand
for Llama 3 8B on one DGX H100 under torchtitan's preset, and absent where the stack has none."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from shardwise import presets
from shardwise.engines.training import estimate_training_step
from shardwise.physics.stack import per_param_sharding_bytes
from shardwise.specs import Plan, Recompute, Scenario


def _scenario(framework: str, **overrides) -> Scenario:
    flags = presets.framework(framework)
    zero = flags.pop("zero_stage")
    kw = {"dp": 8, "global_batch": 8, "recompute": Recompute.SELECTIVE, "zero_stage": zero, **flags, **overrides}
    model = presets.model("llama3-8b", seq_len=8192)
    return Scenario(model, presets.system("dgx-h100"), Plan(**kw))


def test_the_copies_move_fourteen_bytes_per_weight_in_a_bf16_step():
    # forward copy-out 2 + 2, backward copy-out 2 + 2 and copy-in of the fp32 reduce 2 + 4
    f, b = per_param_sharding_bytes(1.0, 2.0, 4.0)
    assert (f, b) == (4.0, 10.0)
    assert per_param_sharding_bytes(1.0, 2.0, 4.0, trained=0.0) == (4.0, 4.0)  # frozen: no copy-in


def test_torchtitan_pays_the_copies_of_every_weight_at_hbm_speed():
    with_copies = _scenario("torchtitan-compile")
    without = replace(with_copies, plan=replace(with_copies.plan, per_param_sharding=False))
    extra_s = float(estimate_training_step(with_copies).breakdown.compute_s) - float(
        estimate_training_step(without).breakdown.compute_s
    )
    m, gpu = with_copies.model, with_copies.cluster.gpu
    q, kv = m.heads * m.head_dim, m.kv_heads * m.head_dim
    layer = m.hidden * (q + 2 * kv) + q * m.hidden + 3 * m.hidden * m.ffn_hidden  # wq wk wv, wo, w1 w3 w2
    weights = m.layers * layer + 2 * m.vocab * m.hidden  # untied embedding and output layer
    by_hand = 14.0 * weights / (gpu.memory_bandwidth_bytes_per_s * gpu.memory_efficiency)
    assert weights == pytest.approx(8.03e9, rel=0.01)  # Llama 3 8B
    assert extra_s == pytest.approx(by_hand, rel=0.02)  # plus a launch gap per copy kernel
    assert 0.03 < extra_s < 0.05  # about 40 ms of a ~1 s step on an H100


@pytest.mark.parametrize(
    "framework, overrides",
    [
        ("fsdp", {}),  # FSDP1: the parameters are views of the gathered flat buffer
        ("deepspeed", {}),
        ("torchtitan-compile", {"zero_stage": 1}),  # nothing gathered per micro-batch
        ("torchtitan-compile", {"dp": 1, "tp": 8, "global_batch": 1}),  # one replica: nothing sharded
    ],
)
def test_no_copies_without_per_parameter_sharding_over_ranks(framework, overrides):
    scn = _scenario(framework, **overrides)
    flipped = replace(scn, plan=replace(scn.plan, per_param_sharding=not bool(np.any(scn.plan.per_param_sharding))))
    a, b = (float(estimate_training_step(s).step_time_s) for s in (scn, flipped))
    if framework.startswith("torchtitan"):
        assert a == b
    else:
        assert not np.any(scn.plan.per_param_sharding) and b > a


def test_the_simulator_pays_the_copies_as_the_closed_form_does():
    from shardwise.engines.simulated import simulate_training_step

    scn = _scenario("torchtitan-compile", pp=2, dp=4, global_batch=16)
    without = replace(scn, plan=replace(scn.plan, per_param_sharding=False))
    # the copies are compute (the flag also sets FSDP2's exposed units, `physics.fsdp2`, which the
    # simulator hides in the pipeline's drain at pp 2)
    closed = [float(estimate_training_step(s).breakdown.compute_s) for s in (scn, without)]
    simulated = [float(simulate_training_step(s).estimate.breakdown.compute_s) for s in (scn, without)]
    assert closed[0] > closed[1] and simulated[0] > simulated[1]
    assert simulated[0] - simulated[1] == pytest.approx(closed[0] - closed[1], rel=0.1)
