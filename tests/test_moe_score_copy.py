"""Review 44's leftover 3: torchtitan's fp32 score multiply has one price (`MOE_SCORE_COPY_BYTES`),
kept by the layer or rebuilt by the per-op recompute; before, the rebuilt inventory took a constant of
its own (COMBINE_FP32_BYTES, 4 bytes) where the compiled stack keeps the 16-bit output (2), and the
kept copy was counted on the busiest rank's received copies (x imbalance) where the multiply runs on
the rank's own tokens x k (after the combine all-to-all)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shardwise import presets
from shardwise.engines.moe_op_sac import op_sac_routed_memory
from shardwise.physics import memory as mem
from shardwise.specs import Plan, Recompute, Scenario


def _scenario(framework: str, recompute: Recompute) -> Scenario:
    flags = presets.framework(framework)
    zero = flags.pop("zero_stage")
    plan = Plan(dp=8, ep=8, global_batch=8, micro_batch=1, recompute=recompute, zero_stage=zero, **flags)
    return Scenario(presets.model("qwen3-30b-a3b"), presets.system("dgx-h100"), plan)


def test_the_kept_copy_is_the_ranks_own_tokens_x_k():
    model = presets.model("qwen3-30b-a3b")
    kw = {"model": model, "tokens": 4096, "etp": 1, "bytes_per_element": 2.0, "recompute": Recompute.NONE}
    for imbalance in (1.0, 1.5):
        plain = mem.routed_expert_activation_bytes(**kw, imbalance=imbalance)
        scored = mem.routed_expert_activation_bytes(**kw, imbalance=imbalance, score_copy_bytes=4.0)
        # before: 4 x 4096 x k x h x imbalance
        assert float(scored - plain) == pytest.approx(4.0 * 4096 * model.experts_per_token * model.hidden)


@pytest.mark.parametrize(("stack", "score"), [("torchtitan", 4.0), ("torchtitan-compile", 2.0)])
def test_the_rebuilt_layer_prices_the_copy_as_its_stack_keeps_it(stack, score):
    scn = _scenario(stack, Recompute.SELECTIVE)
    model, plan = scn.model, scn.plan
    assert mem.moe_score_copy_bytes(plan.memory_stack_key, model.architecture) == score
    args = (model, plan, 4096, 1.0, 0.0, 0.0, 0.0)
    _, working = op_sac_routed_memory(*args)
    other = replace(plan, memory_stack="megatron-core")  # no score multiply of its own: 0 bytes
    _, bare = op_sac_routed_memory(model, other, *args[2:])
    assert float(working - bare) == pytest.approx(score * 4096 * model.experts_per_token * model.hidden)
