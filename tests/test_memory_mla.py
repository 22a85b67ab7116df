"""What latent attention (MLA) and the routed experts keep for the backward pass: Megatron-Core's
`MLASelfAttention` inventory and its `mla_up_proj` recomputation, and the FP8 casts Transformer
Engine's grouped linears save (`physics.memory_activations`)."""

from __future__ import annotations

import dataclasses

import pytest

from shardwise import presets
from shardwise.engines.training import training_memory
from shardwise.physics import memory as mem
from shardwise.physics.memory_activations import mla_saved_bytes, routed_expert_activation_bytes
from shardwise.specs import Plan, Recompute, Scenario

DSV3 = presets.model("deepseek-v3")
E = 2.0


def _layer(recompute, modules=(), tp=1, sp=False, fp8=0.0, model=DSV3, b=1):
    return float(mem.layer_activation_bytes(model, b, tp, sp, recompute, True, E, None, "attention", 0.0, modules, fp8))


def test_mla_keeps_the_expanded_query_key_and_value_the_attention_kernel_saves():
    m, tokens = DSV3, DSV3.seq_len
    qkv, out, down_in, latents, dropped = mla_saved_bytes(m, tokens, E)
    a, d, r, v = m.heads, m.head_dim, m.rope_head_dim, m.v_head_dim
    assert qkv == E * tokens * a * (2 * (d + r) + v)  # 192-wide queries and keys, 128-wide values
    assert out == tokens * a * v
    assert down_in == E * tokens * m.hidden  # the norm output both down projections read, once
    assert latents == E * tokens * (m.q_lora_rank + m.kv_lora_rank + r) + E * tokens * (m.q_lora_rank + m.kv_lora_rank)
    assert dropped == (E * tokens * (m.q_lora_rank + m.kv_lora_rank), qkv)
    # under FP8 each down projection keeps its own 1-byte cast, the up projections theirs
    _, _, down8, latents8, dropped8 = mla_saved_bytes(m, tokens, E, 1.0)
    assert down8 == 2 * tokens * m.hidden
    assert dropped8[0] == tokens * (m.q_lora_rank + m.kv_lora_rank) and latents8 < latents


@pytest.mark.parametrize(("tp", "sp", "fp8"), [(1, False, 0.0), (2, False, 0.0), (4, True, 0.0), (1, False, 1.0)])
def test_mla_up_proj_drops_the_query_key_value_and_normalised_latents(tp, sp, fp8):
    selective = _layer(Recompute.SELECTIVE, (), tp, sp, fp8)
    up = _layer(Recompute.SELECTIVE, ("mla_up_proj",), tp, sp, fp8)
    normed, qkv = mla_saved_bytes(DSV3, DSV3.seq_len, E, fp8)[4]
    assert selective - up == pytest.approx(qkv / tp + (normed / tp if sp else normed))
    # with flash attention, selective recomputation alone (core_attn) keeps what none does
    assert selective == pytest.approx(_layer(Recompute.NONE, (), tp, sp, fp8))
    # and the module does nothing without selective recomputation's granularity
    assert _layer(Recompute.NONE, ("mla_up_proj",), tp, sp, fp8) == pytest.approx(
        _layer(Recompute.NONE, (), tp, sp, fp8)
    )


def test_standard_attention_is_unchanged_by_mla_up_proj():
    llama = presets.model("llama3-8b")
    assert _layer(Recompute.SELECTIVE, ("mla_up_proj",), model=llama) == _layer(Recompute.SELECTIVE, model=llama)


def test_routed_experts_keep_fp8_casts_of_both_grouped_linear_inputs():
    m, tokens = DSV3, 4096.0
    bf16 = float(routed_expert_activation_bytes(m, tokens, 1, 1.0, E, Recompute.NONE))
    fp8 = float(routed_expert_activation_bytes(m, tokens, 1, 1.0, E, Recompute.NONE, (), 1.0))
    copies = tokens * m.experts_per_token
    assert bf16 - fp8 == pytest.approx(copies * (E - 1.0) * (m.hidden + m.expert_ffn_hidden))
    # moe_act recomputation keeps neither the activation's output nor its cast
    act = float(routed_expert_activation_bytes(m, tokens, 1, 1.0, E, Recompute.SELECTIVE, ("moe_act",), 1.0))
    assert fp8 - act == pytest.approx(copies * 1.0 * m.expert_ffn_hidden)


def _dsv3(precision="bf16", modules=()):
    plan = Plan(
        tp=1, pp=4, vpp=4, dp=32, ep=32, etp=1, global_batch=256, micro_batch=1, schedule="interleaved",
        recompute="selective", recompute_modules=modules, precision=precision,
    )  # fmt: skip
    return Scenario(DSV3, presets.system("dgx-b200", nodes=16), plan)


def test_a_moe_layers_attention_takes_mla_up_proj_but_not_the_dense_mlps_module():
    base = float(training_memory(_dsv3()).activations_bytes)
    up = float(training_memory(_dsv3(modules=("mla_up_proj",))).activations_bytes)
    assert up < 0.8 * base
    # "mlp" checkpoints the dense layers' MLPs alone: an MoE layer's shared expert keeps its tensors
    # (the shared expert's checkpointed tensors are about a tenth of the layer; only the working set
    # of a recomputed layer, the stack-wide term, moves)
    scn = _dsv3(modules=("mlp",))
    moe_only = dataclasses.replace(scn, model=DSV3.with_(dense_layers=0))
    plain = dataclasses.replace(_dsv3(), model=DSV3.with_(dense_layers=0))
    assert float(training_memory(moe_only).activations_bytes) == pytest.approx(
        float(training_memory(plain).activations_bytes), rel=0.01
    )


def test_fp8_cuts_the_routed_experts_saved_inputs():
    bf16 = float(training_memory(_dsv3("bf16")).activations_bytes)
    fp8 = float(training_memory(_dsv3("mxfp8")).activations_bytes)
    assert fp8 < bf16


def test_whole_moe_recomputation_frees_the_routed_and_shared_experts():
    """Selective "moe" checkpoints the whole MoE layer on its input (moe_layer.py
    `moe_layer_recompute`): the routed experts keep nothing and the shared expert's MLP tensors go,
    its 16-bit input kept by the checkpoint instead."""
    from shardwise.physics.memory_activations import mlp_checkpointed_bytes, moe_checkpointed_shared_bytes

    m, tokens = DSV3, 4096.0
    assert float(routed_expert_activation_bytes(m, tokens, 1, 1.0, E, Recompute.SELECTIVE, ("moe",), 1.0)) == 0.0
    shared = m.shared_experts * m.expert_ffn_hidden
    freed = moe_checkpointed_shared_bytes(m, 1, 1, False, E, shared, 0.0, 1.0)
    assert freed == pytest.approx(
        mlp_checkpointed_bytes(m, 1, 1, False, E, shared, 0.0, 1.0) - E * m.seq_len * m.hidden
    )
    base = float(training_memory(_dsv3("mxfp8")).activations_bytes)
    whole = float(training_memory(_dsv3("mxfp8", ("moe",))).activations_bytes)
    assert whole < 0.7 * base


def test_the_nemotron_3_nano_study_fits_and_its_moe_layernorm_delta_is_the_norms():
    """Megatron-Bridge's recompute study (SKILL.md): "moe" and "moe, layernorm" ran on 16 H100 with
    rank-0 peaks of 64.653 and 63.639 GB; the recipe reduces gradients in bf16 and sets expandable
    segments. The estimate fits both and puts about the measured 1.014 GB between them."""
    from shardwise.analyses import public_validation as pv

    rows = {r["id"]: r for r in map(pv.public_moe.resolved, pv.raw_rows()) if r["id"] in ("PUB-0877", "PUB-0878")}
    scn = {k: pv.scenario_for(r) for k, r in rows.items()}
    assert all(bool(s.plan.grad_reduce_bf16) and bool(s.plan.expandable_segments) for s in scn.values())
    total = {k: float(training_memory(s).total_bytes) for k, s in scn.items()}
    cap = float(scn["PUB-0877"].cluster.gpu.memory_bytes)
    assert max(total.values()) < cap
    assert total["PUB-0877"] - total["PUB-0878"] == pytest.approx(1.014e9, rel=0.2)


def test_the_moonlight_study_sees_mla_up_proj_and_moe_act_free_about_what_was_measured():
    """Megatron-Bridge's recompute study of Moonlight 16B (SKILL.md, 8 H100, TP2 EP8, BF16): peak
    allocated 36.618 GB without modules, 35.902 with mla_up_proj (-0.716) and 35.941 with moe_act
    (-0.677). The estimate's allocated memory (all but the allocator's share) is within 15% of the
    control, and each module frees between half and twice what it freed there."""
    from shardwise.analyses import public_validation as pv

    ids = {"PUB-0871": (), "PUB-0873": ("mla_up_proj",), "PUB-0875": ("moe_act",)}
    rows = {r["id"]: r for r in map(pv.public_moe.resolved, pv.raw_rows()) if r["id"] in ids}
    allocated = {}
    for run_id, modules in ids.items():
        scn = pv.scenario_for(rows[run_id])
        assert scn.plan.recompute_modules == modules and scn.plan.optimizer_state == "fp32-remainders-bf16-moments"
        m = training_memory(scn)
        allocated[run_id] = float(m.total_bytes) - float(m.allocator_bytes)
    assert allocated["PUB-0871"] == pytest.approx(36.618e9, rel=0.15)
    for run_id, measured in (("PUB-0873", 0.716e9), ("PUB-0875", 0.677e9)):
        assert 0.5 * measured < allocated["PUB-0871"] - allocated[run_id] < 2.0 * measured
