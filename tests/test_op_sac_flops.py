"""Hardware FLOPs under torchtitan's op-level selective checkpointing (engines/training_flops.py
`op_sac_flops`): the recomputed wk, wo and w3 count, counted by hand for Llama 3 8B."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shardwise import presets
from shardwise.engines.training_flops import flops_per_step
from shardwise.specs import Plan, Recompute, Scenario


def _scenario(framework: str, recompute: Recompute) -> Scenario:
    flags = presets.framework(framework)
    zero = flags.pop("zero_stage")
    plan = Plan(dp=8, global_batch=8, recompute=recompute, zero_stage=zero, **flags)
    return Scenario(presets.model("llama3-8b", seq_len=8192), presets.system("dgx-h100"), plan)


def test_op_sac_counts_wk_wo_and_w3_once_more():
    scn = _scenario("torchtitan", Recompute.SELECTIVE)
    m = scn.model
    model_flops, hardware_flops = flops_per_step(scn)
    kv = m.kv_heads * m.head_dim
    per_layer = 2 * m.seq_len * m.hidden * (kv + m.heads * m.head_dim + m.ffn_hidden)  # wk, wo, w3
    assert hardware_flops - model_flops == pytest.approx(8 * m.layers * per_layer, rel=1e-9)
    assert 0.08 < hardware_flops / model_flops - 1 < 0.12  # about 10% more work than the model's


def test_no_recomputation_or_megatron_selective_with_flash_adds_nothing():
    none = _scenario("torchtitan", Recompute.NONE)
    assert flops_per_step(none)[0] == flops_per_step(none)[1]
    megatron = replace(none, plan=replace(none.plan, recompute=Recompute.SELECTIVE, selective_policy="attention"))
    assert flops_per_step(megatron)[0] == flops_per_step(megatron)[1]  # flash: the core is never stored
