"""A YaRN rotary embedding as Megatron-Core runs it (issue 32): GPT-OSS's cos and sin carry YaRN's
concentration factor, which Megatron-Core's fused RoPE does not take, so its q and k pass through
the unfused `_apply_rotary_pos_emb_bshd` (`physics.layer_parts.MEGATRON_YARN_ROPE_PASSES`)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from shardwise import presets
from shardwise.analyses import public_moe
from shardwise.analyses.public_runs import raw_rows, scenario_for
from shardwise.engines.training import estimate_training_step
from shardwise.physics.flops import ROPE_KERNELS, layer_forward
from shardwise.physics.layer_parts import MEGATRON_YARN_ROPE_KERNELS, MEGATRON_YARN_ROPE_PASSES

OSS = presets.model("gpt-oss-120b")


def test_yarn_is_read_from_rope_scaling(tmp_path):
    """openai/gpt-oss-120b's config.json: rope_scaling {"rope_type": "yarn", "factor": 32.0, ...};
    the older "type" key counts too; other scalings and none are not YaRN."""

    def model(scaling):
        cfg = {"model_type": "gpt_oss", "num_hidden_layers": 2, "hidden_size": 2880, "num_attention_heads": 64,
               "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 2880, "vocab_size": 201088,
               "rms_norm_eps": 1e-05, "rope_scaling": scaling}  # fmt: skip
        path = tmp_path / "config.json"
        path.write_text(json.dumps(cfg))
        return presets.model(str(path))

    assert model({"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096}).yarn_rope
    assert model({"type": "yarn", "factor": 4.0}).yarn_rope
    assert not model({"rope_type": "llama3", "factor": 8.0}).yarn_rope
    assert not model(None).yarn_rope
    assert OSS.yarn_rope and presets.model("gpt-oss-20b").yarn_rope
    assert not presets.model("qwen3-30b-a3b").yarn_rope


def test_megatron_core_runs_it_unfused_and_other_stacks_do_not_say_so():
    assert presets.framework("megatron-core")["yarn_rotary_eager"] is True
    for name in ("torchtitan", "torchtitan-compile", "maxtext", "nemo-automodel", "fsdp"):
        assert not presets.framework(name).get("yarn_rotary_eager", False)


def test_the_unfused_rope_moves_twelve_passes_over_q_and_k():
    """GPT-OSS-120B, micro-batch 4 x 4096 tokens, tp 1: q is 64 heads x 64, k 8 x 64, so 16,384 x 4,608
    elements; the fused kernel moves 2 passes of 2 bytes over them, the unfused path 12."""
    fused = layer_forward(OSS, 4, 1, False, 2.0)
    unfused = layer_forward(OSS, 4, 1, False, 2.0, yarn_rotary_eager=True)
    elements = 4 * 4096 * (64 * 64 + 8 * 64)
    assert unfused.elementwise_bytes - fused.elementwise_bytes == pytest.approx(
        (MEGATRON_YARN_ROPE_PASSES - 2.0) * 2.0 * elements
    )
    assert unfused.elementwise_kernels - fused.elementwise_kernels == MEGATRON_YARN_ROPE_KERNELS - ROPE_KERNELS
    # a model without YaRN keeps the fused kernel whatever the stack says
    llama = presets.model("llama3-8b")
    assert layer_forward(llama, 1, 1, False, 2.0, yarn_rotary_eager=True) == layer_forward(llama, 1, 1, False, 2.0)


def test_a_published_megatron_bridge_run_pays_it():
    """GPT-OSS-120B on 64 GB300 (Megatron-Bridge 26.04.01, BF16, ep 64): the step with the unfused rotary
    embedding is longer than with the fused kernel the plan would otherwise price."""
    row = public_moe.resolved(next(r for r in raw_rows() if r["id"] == "PUB-0092"))
    scn = scenario_for(row)
    assert scn.plan.yarn_rotary_eager
    fused = replace(scn, plan=replace(scn.plan, yarn_rotary_eager=False))
    slower = estimate_training_step(scn).step_time_s / estimate_training_step(fused).step_time_s
    assert 1.02 < float(slower) < 1.10


def test_yarn_is_priced_unfused_only_where_it_scales_cos_and_sin():
    """Megatron-Core falls back to the unfused rotary where YaRN's m = 0.1 ln(factor) + 1 is not 1
    (GPT-OSS: factor 32); DeepSeek's mscale / mscale_all_dim ratio is 1, and latent attention
    (kv_lora_rank) rotates its own slice: neither takes the unfused path (review 30)."""
    from shardwise.hf_rope import yarn_scales_rope

    assert yarn_scales_rope({"rope_scaling": {"rope_type": "yarn", "factor": 32.0}})
    assert not yarn_scales_rope({"rope_scaling": {"type": "yarn", "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0}})
    assert not yarn_scales_rope({"rope_scaling": {"type": "yarn", "factor": 40}, "kv_lora_rank": 512})
    assert not yarn_scales_rope({"rope_scaling": {"rope_type": "linear", "factor": 4.0}})
    assert not yarn_scales_rope({"rope_scaling": {"rope_type": "yarn", "factor": 1.0}})
    assert not yarn_scales_rope({})
