"""Transformer Engine's JAX FP8 path (`Plan.fp8_recipe` "te-jax", the `paxml` preset's): the TE
GEMMs and activation casts, but every weight cast at every use (no per-step FP8 weight cache), and
again where a rematerialised layer reruns its forward in the backward pass."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shardwise import presets
from shardwise.engines.training import estimate_training_step
from shardwise.engines.training_layout import optimizer_time_s
from shardwise.physics import fp8_recipes
from shardwise.physics.compute import FP8_CAST_BYTES_PER_ELEMENT, layer_times
from shardwise.physics.flops import layer_forward
from shardwise.physics.params import total_params
from shardwise.specs import Plan, Scenario

H, F = 4096, 16384  # GPT-3 5B (paxml GPT5B): hidden, MLP width
WEIGHTS = H * 3 * H + H * H + H * F + F * H  # a layer's linear weights: 201.3 M


def _layer(recipe: str):
    model = presets.model("gpt3-5b")
    gpu = presets.gpu("h100-sxm5-80gb")
    fwd = layer_forward(model, 4, 1, False, 2.0)
    return layer_times(fwd, gpu, "fp8", True, True, "fused", fp8_recipe=recipe), gpu


def _scenario(recipe: str, micro_batches: int = 1, policy: str = "minimal") -> Scenario:
    plan = Plan(dp=8, global_batch=8 * 4 * micro_batches, micro_batch=4, precision="fp8", fp8_recipe=recipe,
                zero_stage=3, recompute="selective", selective_policy=policy, flash_attention=True)  # fmt: skip
    return Scenario(presets.model("gpt3-5b"), presets.system("dgx-h100", nodes=1), plan)


def test_te_jax_is_transformer_engine_not_torchao():
    assert not fp8_recipes.is_torchao("te-jax") and fp8_recipes.casts_weights_per_use("te-jax")
    assert not fp8_recipes.casts_weights_per_use("te") and fp8_recipes.is_torchao("tensorwise")
    te, _ = _layer("te")
    jax, gpu = _layer("te-jax")
    # the same GEMMs and backward casts; the forward adds each weight's cast into both layouts
    assert [g.forward_s for g in jax.linears] == [g.forward_s for g in te.linears]
    assert float(jax.cast_b_s) == float(te.cast_b_s)
    weight_cast = FP8_CAST_BYTES_PER_ELEMENT * WEIGHTS / (gpu.memory_bandwidth_bytes_per_s * gpu.memory_efficiency)
    assert float(jax.weight_cast_s) == pytest.approx(weight_cast + 4 * gpu.kernel_launch_s)
    assert float(jax.cast_f_s) == pytest.approx(float(te.cast_f_s) + float(jax.weight_cast_s))
    assert float(te.weight_cast_s) == 0.0


def test_te_jax_has_no_per_step_weight_cast_in_the_optimizer_step():
    te, jax = _scenario("te"), _scenario("te-jax")
    n = 5e9
    assert float(optimizer_time_s(jax, n)) < float(optimizer_time_s(te, n))
    bf16 = replace(te, plan=replace(te.plan, precision="bf16"))
    assert float(optimizer_time_s(jax, n)) == pytest.approx(float(optimizer_time_s(bf16, n)))


def test_te_jax_casts_every_weight_twice_a_rematerialised_micro_batch():
    layers = presets.model("gpt3-5b").layers
    lt, _ = _layer("te-jax")
    cast = layers * float(lt.weight_cast_s)
    for m in (1, 4):
        te, jax = (float(estimate_training_step(_scenario(r, m)).step_time_s) for r in ("te", "te-jax"))
        n = total_params(presets.model("gpt3-5b"))  # TE PyTorch casts every weight once a step, embeddings too
        once = float(optimizer_time_s(_scenario("te", m), n) - optimizer_time_s(_scenario("te-jax", m), n))
        # forward and rematerialised forward each micro-batch, against TE PyTorch's one cast a step
        assert jax - te == pytest.approx(2 * m * cast - once, rel=0.05)
