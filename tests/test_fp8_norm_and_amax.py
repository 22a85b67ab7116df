"""Two small FP8 terms of Transformer Engine (issue #32), counted by hand on one Llama 3 8B layer:
under per-tensor delayed scaling the norm writes the FP8 input of QKV and MLP up itself (no cast of
it, 1 byte an element out of the norm instead of 2, a transpose kernel where a transposed copy is kept
and the input is not gathered); under current scaling and NVFP4 the amax of each sequence-parallel
tensor is all-reduced over the TP group before its scale (`physics.casts`)."""

from __future__ import annotations

import pytest

from shardwise import presets
from shardwise.engines.costs import layer_cost, plan_layer_times
from shardwise.engines.tp_overlap import tp_comm
from shardwise.physics.casts import (
    AMAX_REDUCTION_BYTES,
    norm_fp8_saved_bytes,
    norm_writes_fp8,
    reduces_amax,
)
from shardwise.physics.collectives import Fabric
from shardwise.physics.compute import layer_times
from shardwise.physics.flops import layer_forward
from shardwise.specs import Plan, Scenario

TOKENS = 8192
H, Q, F = 4096, 4096, 14336  # Llama 3 8B: hidden, query width, MLP width
NORM_FED = TOKENS * (H + H)  # QKV's and MLP up's inputs: the pre-norms' outputs (TE LayerNormLinear)
OTHER_INPUTS = TOKENS * (Q + F)  # the attention output projection's and MLP down's inputs


def _seconds(n_bytes: float, gpu, kernels: int) -> float:
    return n_bytes / (gpu.memory_bandwidth_bytes_per_s * gpu.memory_efficiency) + kernels * gpu.kernel_launch_s


def _layer(gpu, precision="fp8", recipe="te", tp=1, shards=1, backward=True, training=True):
    fwd = layer_forward(presets.model("llama3-8b", seq_len=TOKENS), 1, tp, tp > 1, 2.0)
    lt = layer_times(
        fwd,
        gpu,
        precision,
        True,
        False,
        "fused",
        fp8_recipe=recipe,
        backward=backward,
        gathered_shards=shards,
        training=training,
    )
    return fwd, lt


@pytest.mark.parametrize(
    ("precision", "recipe", "writes"),
    [("fp8", "te", True), ("fp8", "te-jax", True), ("fp8", "te_current", False), ("mxfp8", "te", False)],
)
def test_which_recipes_norm_writes_fp8(precision, recipe, writes):
    assert norm_writes_fp8(precision, recipe) is writes


def test_delayed_scaling_casts_no_norm_output_and_the_norm_writes_one_byte():
    """Hopper, no sequence parallelism: QKV's and MLP up's inputs are not cast; a transpose kernel
    (read 1, write 1) makes each transposed copy (TE 2.x ln_api.cpp `nvte_transpose`); the others are
    cast into both layouts (4 bytes). The norms write 1 byte an element less in the forward pass
    only (their backward reads the 16-bit input, not the output)."""
    gpu = presets.gpu("h100-sxm5-80gb")
    fwd, te = _layer(gpu)
    _, cs = _layer(gpu, recipe="te_current")
    assert float(te.cast_f_s) == pytest.approx(_seconds(4.0 * OTHER_INPUTS + 2.0 * NORM_FED, gpu, 2 + 2))
    assert float(norm_fp8_saved_bytes(fwd)) == pytest.approx(1.0 * NORM_FED)
    saved_s = NORM_FED / (gpu.memory_bandwidth_bytes_per_s * gpu.memory_efficiency)
    assert float(cs.elementwise_s - te.elementwise_s) == pytest.approx(saved_s)
    assert float(te.elementwise_bwd_s) == pytest.approx(float(cs.elementwise_bwd_s))


def test_gathered_or_any_layout_norm_output_is_not_cast_at_all():
    """Under sequence parallelism (tp 8) the norm writes the FP8 shard that is gathered: its own-row
    cast (3 bytes over 1/8 of the rows) goes; the transpose after the gather stays in the backward.
    Data-centre Blackwell keeps no transposed copy: nothing at all for the norm-fed inputs."""
    h100 = presets.gpu("h100-sxm5-80gb")
    fwd, sp = _layer(h100, tp=8, shards=8)
    others = sum(g.m * g.k * g.batch for g in (fwd.attn_out, fwd.mlp_down))
    assert float(sp.cast_f_s) == pytest.approx(_seconds(4.0 * others, h100, 2))
    assert float(norm_fp8_saved_bytes(fwd, 8)) == pytest.approx(NORM_FED / 8)
    b200 = presets.gpu("b200-sxm-180gb")
    _, bw = _layer(b200)
    assert float(bw.cast_f_s) == pytest.approx(_seconds(3.0 * OTHER_INPUTS, b200, 2))


def test_serving_and_other_recipes_keep_the_norm_output_cast():
    """Serving engines are not Transformer Engine's training layers: their forward casts stay; so do
    current scaling's and MXFP8's (a 16-bit norm output quantised apart)."""
    gpu = presets.gpu("h100-sxm5-80gb")
    full_cast = _seconds(4.0 * (OTHER_INPUTS + NORM_FED), gpu, 4)
    _, serve = _layer(gpu, backward=False, training=False)
    assert float(serve.cast_f_s) == pytest.approx(full_cast)
    # a serving engine's forward through `layer_cost` (`training` False), its backward fields priced
    fwd = layer_forward(presets.model("llama3-8b", seq_len=TOKENS), 1, 1, False, 2.0)
    plan = Plan(tp=1, pp=1, dp=8, global_batch=8, precision="fp8")
    assert float(plan_layer_times(fwd, gpu, plan, training=False).cast_f_s) == pytest.approx(full_cast)
    assert float(plan_layer_times(fwd, gpu, plan).cast_f_s) < full_cast
    b200 = presets.gpu("b200-sxm-180gb")
    for g, precision, recipe in ((gpu, "fp8", "te_current"), (b200, "mxfp8", "te")):
        _, bf16 = _layer(g, precision="bf16")
        _, lt = _layer(g, precision, recipe)
        assert float(lt.elementwise_s) == pytest.approx(float(bf16.elementwise_s))


@pytest.mark.parametrize(
    ("precision", "recipe", "reduces"),
    [
        ("fp8", "te_current", True),
        ("nvfp4", "te", True),
        ("fp8", "te", False),  # delayed: the scale from the amax history
        ("mxfp8", "te_current", False),  # block scales, each block its own
        ("fp8", "tensorwise", False),  # torchao
    ],
)
def test_which_recipes_reduce_the_amax(precision, recipe, reduces):
    assert reduces_amax(precision, recipe) is reduces


def _layer_cost(recipe: str, sp: bool, tp: int = 4, precision: str = "fp8"):
    plan = Plan(
        tp=tp, pp=1, dp=72 // tp, global_batch=72 // tp, precision=precision, fp8_recipe=recipe,
        sequence_parallel=sp,
    )  # fmt: skip
    scn = Scenario(presets.model("llama3-70b", seq_len=8192), presets.system("gb200-nvl72"), plan)
    comm = tp_comm(scn, Fabric.of(scn.cluster), tp)
    return layer_cost(scn, comm)[0], comm


def test_current_scaling_all_reduces_four_amaxes_a_layer_under_sequence_parallelism():
    """QKV's and MLP up's inputs in the forward pass, proj's and MLP down's output gradients in the
    backward: one 4-byte all-reduce each over the TP group, exposed."""
    current, comm = _layer_cost("te_current", True)
    delayed, _ = _layer_cost("te", True)
    amax = float(Fabric.of(presets.system("gb200-nvl72")).group(4, 4).all_reduce(AMAX_REDUCTION_BYTES))
    assert float(comm.amax_all_reduce) == pytest.approx(amax)
    assert float(current.tp_forward_s - delayed.tp_forward_s) == pytest.approx(2 * amax)
    assert float(current.tp_backward_s - delayed.tp_backward_s) == pytest.approx(2 * amax)
    assert float(current.tp_hidden_s) == pytest.approx(float(delayed.tp_hidden_s))


def test_no_amax_reduction_without_sequence_parallelism_or_tp():
    for sp, tp in ((False, 4), (True, 1)):
        current, _ = _layer_cost("te_current", sp, tp)
        delayed, _ = _layer_cost("te", sp, tp)
        assert float(current.tp_forward_s) == pytest.approx(float(delayed.tp_forward_s))
        assert float(current.tp_backward_s) == pytest.approx(float(delayed.tp_backward_s))


def test_the_norm_writes_its_own_rows_under_sequence_parallelism_on_either_path():
    """The JAX path gathers 16 bits (no quantised gather) but its norm, split over the TP ranks by
    sequence parallelism, writes 1 byte less on its own rows only, as the PyTorch path's."""
    gpu = presets.gpu("h100-sxm5-80gb")
    fwd = layer_forward(presets.model("llama3-8b", seq_len=TOKENS), 1, 8, True, 2.0)
    per_byte = 1.0 / (gpu.memory_bandwidth_bytes_per_s * gpu.memory_efficiency)
    for recipe in ("te", "te-jax"):
        plan = Plan(tp=8, pp=1, dp=1, global_batch=1, precision="fp8", fp8_recipe=recipe, sequence_parallel=True)
        current = plan_layer_times(fwd, gpu, plan.with_(fp8_recipe="te_current"))
        lt = plan_layer_times(fwd, gpu, plan)
        assert float(current.elementwise_s - lt.elementwise_s) == pytest.approx(NORM_FED / 8 * per_byte)


def test_a_mixture_of_experts_layers_shared_experts_are_not_norm_fed():
    """Megatron-Core's MoE layer runs its pre-MLP norm as a TENorm of its own (it feeds the router
    too): the shared experts' fc1 input is cast like any other (4 bytes), only QKV's is written by the
    norm; the norm-write saving covers QKV's input alone."""
    gpu = presets.gpu("h100-sxm5-80gb")
    fwd = layer_forward(presets.model("llama3-8b", seq_len=TOKENS), 1, 1, False, 2.0)
    kw = {"fp8_recipe": "te"}
    moe = layer_times(fwd, gpu, "fp8", True, False, "fused", mlp_norm_fed=False, **kw)
    assert float(moe.cast_f_s) == pytest.approx(_seconds(4.0 * (OTHER_INPUTS + TOKENS * H) + 2.0 * TOKENS * H, gpu, 4))
    assert float(norm_fp8_saved_bytes(fwd, 1, mlp_norm_fed=False)) == pytest.approx(TOKENS * H)


def test_shared_experts_fc1_input_is_still_cast_on_its_own_rows_and_gathered():
    """Not norm-fed is not un-gathered: under sequence parallelism the shared experts' fc1 input is
    cast row-wise on the rank's 1/8 of the rows (3 bytes) and transposed whole after the gather."""
    gpu = presets.gpu("h100-sxm5-80gb")
    fwd = layer_forward(presets.model("llama3-8b", seq_len=TOKENS), 1, 8, True, 2.0)
    kw = {"fp8_recipe": "te", "gathered_shards": 8}
    dense = layer_times(fwd, gpu, "fp8", True, False, "fused", **kw)
    moe = layer_times(fwd, gpu, "fp8", True, False, "fused", mlp_norm_fed=False, **kw)
    up_in = fwd.mlp_up.m * fwd.mlp_up.k * fwd.mlp_up.batch
    per_byte = 1.0 / (gpu.memory_bandwidth_bytes_per_s * gpu.memory_efficiency)
    assert float(moe.cast_f_s - dense.cast_f_s) == pytest.approx(3.0 * up_in / 8 * per_byte + gpu.kernel_launch_s)
    assert float(moe.cast_b_s) == pytest.approx(float(dense.cast_b_s))
