"""Transformer Engine's FP8 casts by recipe and GPU (physics.casts): current scaling's amax pass
(fused into the norm where TE's LayerNormLinear feeds the GEMM), no transposed copy where the FP8
GEMMs take any layout (data-centre Blackwell), counted by hand for one Llama 3 8B layer and one
hybrid Mamba-2 mean layer; which public rows ran current scaling."""

from __future__ import annotations

import pytest

from shardwise import presets
from shardwise.analyses import public_moe, public_runs, public_stacks
from shardwise.engines.training import estimate_training_step
from shardwise.physics.casts import cast_bytes_per_element, cast_kernels_per_tensor
from shardwise.physics.compute import layer_times
from shardwise.physics.flops import layer_forward

TOKENS = 8192
H, Q, KV, F = 4096, 4096, 1024, 14336  # Llama 3 8B: hidden, query width, key/value width, MLP width
NORM_FED = TOKENS * (H + H)  # QKV's and MLP up's inputs: the pre-norms' outputs (TE LayerNormLinear)
OTHER_INPUTS = TOKENS * (Q + F)  # the attention output projection's and MLP down's inputs
OUTPUTS = TOKENS * ((Q + 2 * KV) + H + 2 * F + H)  # the output gradients cast in the backward


def _seconds(n_bytes: float, gpu, kernels: int) -> float:
    return n_bytes / (gpu.memory_bandwidth_bytes_per_s * gpu.memory_efficiency) + kernels * gpu.kernel_launch_s


def _layer(recipe: str, gpu, model=None):
    model = model or presets.model("llama3-8b", seq_len=TOKENS)
    fwd = layer_forward(model, 1, 1, False, 2.0)
    return layer_times(fwd, gpu, "fp8", True, False, "fused", fp8_recipe=recipe)


@pytest.mark.parametrize(
    ("precision", "recipe", "any_layout", "expected", "kernels"),
    [
        ("fp8", "te", False, 4.0, 1),  # read 2, write 1 + 1 (Hopper: the transposed copy for wgrad)
        ("fp8", "te_current", False, 6.0, 3),  # the amax pass reads 2 more; amax, scale, cast
        ("fp8", "te", True, 3.0, 1),  # Blackwell: no transposed copy
        ("fp8", "te_current", True, 5.0, 3),
        ("mxfp8", "te_current", True, 4.0 + 2 / 32, 1),  # block scales: no amax pass, both copies
        ("bf16", "te_current", False, 0.0, 1),
    ],
)
def test_cast_bytes_and_kernels_by_recipe_and_gpu(precision, recipe, any_layout, expected, kernels):
    assert float(cast_bytes_per_element(precision, recipe, any_layout)) == pytest.approx(expected)
    assert cast_kernels_per_tensor(precision, recipe) == kernels


def test_current_scaling_reads_every_cast_tensor_once_more_except_where_the_norm_computes_its_amax():
    gpu = presets.gpu("h100-sxm5-80gb")
    te, cs = _layer("te", gpu), _layer("te_current", gpu)
    # delayed scaling: the norm writes the FP8 inputs of QKV and MLP up itself, then a transpose kernel
    # (read 1, write 1) makes their transposed copies (`physics.casts.norm_writes_fp8`)
    assert float(te.cast_f_s) == pytest.approx(_seconds(4.0 * OTHER_INPUTS + 2.0 * NORM_FED, gpu, 4))
    # norm-fed inputs: the scale and the cast (the norm kernel wrote the amax); the others: amax, scale, cast
    assert float(cs.cast_f_s) == pytest.approx(_seconds(4.0 * NORM_FED + 6.0 * OTHER_INPUTS, gpu, 2 * 2 + 2 * 3))
    assert float(te.cast_b_s) == pytest.approx(_seconds(4.0 * OUTPUTS, gpu, 4))
    assert float(cs.cast_b_s) == pytest.approx(_seconds(6.0 * OUTPUTS, gpu, 4 * 3))


def test_blackwells_per_tensor_casts_write_no_transpose():
    hopper_like = presets.gpu("b200-sxm-180gb").with_(fp8_any_layout=False)
    blackwell = presets.gpu("b200-sxm-180gb")
    assert blackwell.fp8_any_layout and not presets.gpu("h100-sxm5-80gb").fp8_any_layout
    assert not presets.gpu("rtx-pro-6000").fp8_any_layout  # sm_120: TN only (TE)
    a, b = _layer("te", hopper_like), _layer("te", blackwell)
    assert float(b.cast_b_s) == pytest.approx(_seconds(3.0 * OUTPUTS, blackwell, 4))
    assert float(a.cast_b_s) == pytest.approx(_seconds(4.0 * OUTPUTS, hopper_like, 4))


def test_a_hybrid_mean_layer_saves_the_amax_pass_of_in_proj_alone():
    """Mamba-2's in_proj is a TE LayerNormLinear (its amax in the norm); out_proj's input comes from
    the mixer's gated RMSNorm (a Triton kernel) and pays the amax pass."""
    model = presets.model("nemotron-h-8b", seq_len=TOKENS)
    gpu = presets.gpu("h100-sxm5-80gb")
    te, cs = _layer("te", gpu, model), _layer("te_current", gpu, model)
    fwd = layer_forward(model, 1, 1, False, 2.0)
    m, a, p = model.hybrid_shares
    mix = fwd.mamba
    norm_fed = (
        a * fwd.gemms[0].m * fwd.gemms[0].k + p * fwd.gemms[2].m * fwd.gemms[2].k + m * mix.in_proj.m * mix.in_proj.k
    )
    others = (
        a * fwd.gemms[1].m * fwd.gemms[1].k + p * fwd.gemms[3].m * fwd.gemms[3].k + m * mix.out_proj.m * mix.out_proj.k
    )
    extra = float(cs.cast_f_s - te.cast_f_s)
    # 2 bytes more on the inputs no norm feeds (the amax pass); on the norm-fed ones current scaling's cast
    # (4) against delayed scaling's transpose of the FP8 tensor the norm wrote (2); one kernel more per
    # norm-fed input (the scale: scale and cast against the transpose), two more per other (amax, scale)
    assert extra == pytest.approx(_seconds(2.0 * float(others + norm_fed), gpu, 3 * 1 + 3 * 2))
    assert float(norm_fed) > 0


def _row(run_id: str) -> dict[str, str]:
    return next(public_moe.resolved(r) for r in public_runs.raw_rows() if r["id"] == run_id)


@pytest.mark.parametrize(
    ("run_id", "recipe"),
    [
        ("PUB-0057", "te_current"),  # Megatron-Bridge 26.06, Nemotron 3 Nano on H100: fp8_cs
        ("PUB-0826", ""),  # dgxc-benchmarking Nemotron-H 56B: NeMo 2 perf scripts' default ds (delayed)
        ("PUB-0879", "te_current"),  # "FP8 current scaling" stated
        ("PUB-0011", ""),  # MXFP8: no per-tensor recipe to name
    ],
)
def test_the_public_rows_recipe(run_id, recipe):
    assert public_stacks.fp8_recipe(_row(run_id)) == recipe


def test_bridge_25_09_rows_are_delayed_scaling():
    rows = [r for r in public_runs.raw_rows() if r["framework_version"] == "25.09" and r["precision"] == "fp8"]
    assert rows and all(public_stacks.fp8_recipe(r) == "" for r in rows)


def test_current_scaling_slows_the_nano_h100_fp8_row():
    row = _row("PUB-0057")
    req = public_runs.request_for(row)
    assert req.fp8_recipe == "te_current"
    current = float(estimate_training_step(req.scenario()).step_time_s)
    delayed = float(estimate_training_step(req.with_(fp8_recipe="te").scenario()).step_time_s)
    assert 1.02 < current / delayed < 1.06


def test_a_layer_without_a_dense_mlp_casts_no_mlp_output_gradient():
    """A mixture-of-experts layer (ffn 0: no dense MLP; its experts cast their own, `engines.moe`)
    casts the output gradients of QKV and the attention projection alone (before: MLP down's too)."""
    model = presets.model("llama3-8b", seq_len=TOKENS)
    gpu = presets.gpu("h100-sxm5-80gb")
    fwd = layer_forward(model, 1, 1, False, 2.0, ffn=0)
    lt = layer_times(fwd, gpu, "fp8", True, False, "fused", fp8_recipe="te")
    attention_outputs = TOKENS * ((Q + 2 * KV) + H)
    assert float(lt.cast_b_s) == pytest.approx(_seconds(4.0 * attention_outputs, gpu, 4))
