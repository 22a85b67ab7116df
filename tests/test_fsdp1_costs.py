"""Two costs read off FSDP1's and Modalities' code (docs/model.md #fsdp-residuals, issue #32 item 3):
FSDP1's split backward concatenating each unit's gradients into the flat gradient, 4 bytes a weight
per micro-batch at any reduce dtype (`physics.microbatch`), and Modalities' head-major copies of q,
k and v, 24 bytes per token and hidden unit a layer, 32 on SDPA's path (`physics.stack`)."""

from __future__ import annotations

import pytest

from shardwise import presets
from shardwise.analyses import loso, public_stacks
from shardwise.analyses.search_space import stack_execution
from shardwise.engines.costs import layer_cost
from shardwise.engines.tp_overlap import tp_comm
from shardwise.physics.collectives import Fabric
from shardwise.physics.compute import memory_s
from shardwise.physics.microbatch import (
    BF16_MAIN_GRAD_ADD_BYTES,
    FSDP1_FLAT_GRAD_CAT_BYTES,
    MAIN_GRAD_ADD_BYTES,
    accumulate_bytes,
)
from shardwise.physics.stack import layout_copy_bytes
from shardwise.physics.topology import placement
from shardwise.specs import Plan, Scenario

FSDP1 = ("fsdp", "composer", "hf-transformers", "modalities")
NOT_FSDP1 = ("fsdp2", "torchtitan", "nemo-automodel", "megatron-core", "nanotron", "deepspeed")


def _scenario(framework: str, **over: object) -> Scenario:
    """Modalities' 2.7B shape (32 x 2560, 20 heads) at 4,096 tokens on 8 H100s, FSDP (dp 8)."""
    model = presets.model("gpt-2.7b-hd128", seq_len=4096)
    fw = stack_execution(framework, {}, "bf16")  # the preset's fields, its bf16 accumulate, no ZeRO stage
    fw.update(over)
    plan = Plan(dp=8, global_batch=16, micro_batch=2, zero_stage=3, **fw)
    return Scenario(model, presets.system("dgx-h100", nodes=1), plan)


def _layer(scn: Scenario):
    comm = tp_comm(scn, Fabric.of(scn.cluster), placement(scn.plan, scn.cluster.gpus_per_node)["tp"])
    return layer_cost(scn, comm)[0]


@pytest.mark.parametrize("name", FSDP1)
def test_fsdp1_stacks_pay_the_flat_gradients_concatenation(name):
    """Read 2 + write 2 bytes a weight, whatever the reduce dtype (its cast runs on FSDP's
    post-backward stream): a bf16 gradient buffer's 6-byte add does not replace it."""
    assert FSDP1_FLAT_GRAD_CAT_BYTES == 2 + 2
    assert presets.framework_accumulate_bytes(name, "bf16") == FSDP1_FLAT_GRAD_CAT_BYTES
    assert accumulate_bytes(FSDP1_FLAT_GRAD_CAT_BYTES, True) == FSDP1_FLAT_GRAD_CAT_BYTES
    assert accumulate_bytes(FSDP1_FLAT_GRAD_CAT_BYTES, False) == FSDP1_FLAT_GRAD_CAT_BYTES


@pytest.mark.parametrize("name", NOT_FSDP1)
def test_other_stacks_keep_their_accumulation(name):
    own = presets.framework_accumulate_bytes(name, "bf16")
    assert own != FSDP1_FLAT_GRAD_CAT_BYTES
    # a bf16 gradient buffer still makes Megatron's fp32 add a 16-bit one
    assert accumulate_bytes(MAIN_GRAD_ADD_BYTES, True) == BF16_MAIN_GRAD_ADD_BYTES


def test_the_concatenation_is_two_bytes_a_weight_less_than_a_bf16_add_in_the_layers():
    fsdp = _scenario("fsdp", grad_reduce_bf16=True)
    add = _scenario("fsdp", grad_reduce_bf16=True, unfused_accumulate_bytes=MAIN_GRAD_ADD_BYTES)
    h, f = fsdp.model.hidden, fsdp.model.ffn_hidden
    weights = (3 * h * h, h * h, h * f, f * h)  # QKV, attention output, MLP up, down
    saved = sum(memory_s(6.0 * w, fsdp.cluster.gpu) - memory_s(4.0 * w, fsdp.cluster.gpu) for w in weights)
    assert _layer(add).compute_backward_s - _layer(fsdp).compute_backward_s == pytest.approx(saved)


def test_modalities_head_copies_move_32_bytes_per_token_and_hidden_unit_on_sdpas_path():
    """q, k, v each copied forward and their gradients back (2 x 3h x 2 bytes each pass: 24 T h
    a layer), SDPA's output and its gradient once more (8 T h); multi-head attention, bf16."""
    t, h = 8192, 2560
    (f, b), (fk, bk) = layout_copy_bytes(t, 3 * h, h, 0.0, 2.0, False, False, True, False)
    assert f + b == 24 * t * h and (fk, bk) == (3, 3)
    (f, b), (fk, bk) = layout_copy_bytes(t, 3 * h, h, 0.0, 2.0, False, False, True, True)
    assert f + b == 32 * t * h and (fk, bk) == (4, 4)
    # GQA: q + 2 kv copied, the output q wide
    (f, b), _ = layout_copy_bytes(t, h + 2 * 512, 512, 0.0, 2.0, False, False, True, True)
    assert f == b == t * 2.0 * (2 * (h + 2 * 512) + 2 * h)
    # absent unless asked; nanotron's layout copies unchanged by it
    assert layout_copy_bytes(t, 3 * h, h, 0.0, 2.0, False, False) == ((0.0, 0.0), (0, 0))
    assert layout_copy_bytes(t, 3 * h, h, 0.0, 2.0, False, True) == layout_copy_bytes(
        t, 3 * h, h, 0.0, 2.0, False, True, False, True
    )


def test_the_modalities_preset_pays_the_copies_in_its_layers_and_fsdp_does_not():
    fsdp, modalities = _scenario("fsdp"), _scenario("modalities")
    assert not fsdp.plan.head_copies and modalities.plan.head_copies
    tokens = fsdp.plan.micro_batch * fsdp.model.seq_len
    gpu, h = fsdp.cluster.gpu, fsdp.model.hidden
    a, b = _layer(fsdp), _layer(modalities)
    assert b.compute_forward_s - a.compute_forward_s == pytest.approx(memory_s(16.0 * tokens * h, gpu, 4))
    assert b.compute_backward_s - a.compute_backward_s == pytest.approx(memory_s(16.0 * tokens * h, gpu, 4))
    # the flash-attn package's path: q, k, v only (its further copies not priced)
    flash = _layer(_scenario("modalities", attention_kernel="flash2"))
    plain = _layer(_scenario("fsdp", attention_kernel="flash2"))
    assert flash.compute_forward_s - plain.compute_forward_s == pytest.approx(memory_s(12.0 * tokens * h, gpu, 3))


def test_only_modalities_public_rows_take_the_modalities_preset():
    from shardwise.analyses.public_runs import raw_rows

    rows = [r for r in raw_rows() if r["framework"] == "fsdp"]
    modalities = [r for r in rows if "Modalities/modalities" in r["source"]]
    others = [r for r in rows if r not in modalities]
    assert modalities and others
    assert {public_stacks.execution(r)[0] for r in modalities} == {"modalities"}
    assert {public_stacks.execution(r)[0] for r in others} == {"fsdp"}
    # both remain rows of the fsdp stack in the leave-one-source-out tables
    assert {loso.stack_of(r) for r in rows} == {"fsdp"}
