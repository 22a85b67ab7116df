"""FP8 training as torchao.float8 runs it (physics.fp8_recipes): dynamic scaling's casts counted by
hand for one Llama 3 8B layer, the row-wise recipes' GEMMs, and which recipe a public row states."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shardwise import presets
from shardwise.analyses import public_stacks
from shardwise.engines.training import estimate_training_step
from shardwise.engines.training_layout import optimizer_time_s
from shardwise.errors import SpecError
from shardwise.physics import fp8_recipes
from shardwise.physics.compute import FP8_CAST_BYTES_PER_ELEMENT, layer_times, linears_times
from shardwise.physics.flops import layer_forward
from shardwise.specs import Plan, Recompute, Scenario

TOKENS = 8192
H, Q, KV, F = 4096, 4096, 1024, 14336  # Llama 3 8B: hidden, query width, key/value width, MLP width
INPUTS = TOKENS * (H + Q + H + F)  # what wqkv, wo, w13 and w2 read: the elements each cast reads
OUTPUTS = TOKENS * ((Q + 2 * KV) + H + 2 * F + H)  # the output gradients cast in the backward
WEIGHTS = H * (Q + 2 * KV) + Q * H + H * 2 * F + F * H  # 218.1 M per layer


def _layer(precision: str, recipe: str, gpu_name: str = "h100-sxm5-80gb"):
    model = presets.model("llama3-8b", seq_len=TOKENS)
    gpu = presets.gpu(gpu_name)
    fwd = layer_forward(model, 1, 1, False, 2.0)
    return layer_times(fwd, gpu, precision, True, False, "sdpa-flash2", fp8_recipe=recipe), gpu


def _seconds(n_bytes: float, gpu, kernels: int) -> float:
    return n_bytes / (gpu.memory_bandwidth_bytes_per_s * gpu.memory_efficiency) + kernels * gpu.kernel_launch_s


def test_the_layer_shapes_are_llama_3_8b():
    assert WEIGHTS == 218_103_808


def test_tensorwise_reads_each_tensor_once_more_for_its_amax_and_casts_weights_at_every_use():
    te, gpu = _layer("fp8", "te")
    ao, _ = _layer("fp8", "tensorwise")
    # Transformer Engine: the norm writes QKV's and w13's FP8 inputs itself, a transpose (read 1, write 1)
    # makes their transposed copies (`physics.casts.norm_writes_fp8`); wo's and w2's cast into both layouts
    norm_fed = TOKENS * (H + H)
    cast_in = FP8_CAST_BYTES_PER_ELEMENT * (INPUTS - norm_fed) + 2.0 * norm_fed
    assert float(te.cast_f_s) == pytest.approx(_seconds(cast_in, gpu, 4))
    # amax 2 + cast 2 + 1 + 1 per input element; the weight's amax 2 and forward cast 2 + 1
    assert float(ao.cast_f_s) == pytest.approx(_seconds(6.0 * INPUTS + 5.0 * WEIGHTS, gpu, 16))
    assert float(ao.cast_b_s) == pytest.approx(_seconds(6.0 * OUTPUTS + 3.0 * WEIGHTS, gpu, 16))


def test_fp8_all_gather_moves_the_weight_cast_to_the_shard_and_the_rowwise_recipes_cast_more():
    def per_layer(recipe: str) -> float:
        lt, _ = _layer("fp8", recipe)
        return float(lt.cast_f_s + lt.cast_b_s)

    gathered, tensorwise, rowwise, gw_hp = (
        per_layer(r) for r in ("tensorwise_fp8_all_gather", "tensorwise", "rowwise", "rowwise_with_gw_hp")
    )
    assert gw_hp < gathered < tensorwise < rowwise
    _, gpu = _layer("fp8", "te")
    # rowwise: 8 per input and per output gradient, 3 + 7 per weight
    assert rowwise == pytest.approx(_seconds(8.0 * (INPUTS + OUTPUTS) + 10.0 * WEIGHTS, gpu, 32))


def test_mx_casts_two_copies_with_a_scale_byte_per_32_whatever_the_recipe_name():
    mx, gpu = _layer("mxfp8", "tensorwise", "b200-sxm-180gb")
    assert float(mx.cast_f_s) == pytest.approx(_seconds((6 + 2 / 32) * INPUTS + (3 + 1 / 32) * WEIGHTS, gpu, 16))
    assert float(_layer("mxfp8", "rowwise", "b200-sxm-180gb")[0].cast_f_s) == pytest.approx(float(mx.cast_f_s))


def test_rowwise_forward_runs_cutlass_below_cublas_and_rescales_the_weight_gradient():
    fwd = layer_forward(presets.model("llama3-8b", seq_len=TOKENS), 1, 1, False, 2.0)
    gpu = presets.gpu("h100-sxm5-80gb")
    tensorwise = linears_times(fwd.gemms, gpu, "fp8", False, fp8_recipe="tensorwise")
    rowwise = linears_times(fwd.gemms, gpu, "fp8", False, fp8_recipe="rowwise")
    gw_hp = linears_times(fwd.gemms, gpu, "fp8", False, fp8_recipe="rowwise_with_gw_hp")
    bf16 = linears_times(fwd.gemms, gpu, "bf16", False)
    for t, r, g, b, gemm in zip(tensorwise, rowwise, gw_hp, bf16, fwd.gemms, strict=True):
        assert float(r.forward_s) == pytest.approx(float(t.forward_s) / fp8_recipes.ROWWISE_FORWARD_FRACTION)
        assert float(r.input_grad_s) == pytest.approx(float(t.input_grad_s))  # cuBLAS, rescale fused
        rescale = _seconds(4.0 * gemm.k * gemm.n, gpu, 1)  # read and write the 16-bit weight gradient
        assert float(r.weight_grad_s) == pytest.approx(float(t.weight_grad_s) + rescale)
        assert float(g.weight_grad_s) == pytest.approx(float(b.weight_grad_s))  # in 16 bits
        assert float(g.weight_grad_s) > float(t.weight_grad_s)


def _scenario(recipe: str, precision: str = "fp8") -> Scenario:
    flags = presets.framework("torchtitan-compile")
    zero = flags.pop("zero_stage")
    flags["fp8_recipe"] = recipe
    plan = Plan(dp=8, global_batch=8, recompute=Recompute.SELECTIVE, zero_stage=zero, precision=precision, **flags)
    return Scenario(presets.model("llama3-8b", seq_len=TOKENS), presets.system("dgx-h100"), plan)


def test_torchao_casts_no_weights_in_the_optimizer_step():
    te, ao = _scenario("te"), _scenario("tensorwise")
    n = 1e9
    assert float(optimizer_time_s(ao, n)) < float(optimizer_time_s(te, n))
    assert float(optimizer_time_s(ao, n)) == pytest.approx(
        float(optimizer_time_s(replace(ao, plan=replace(ao.plan, precision="bf16")), n))
    )


def test_a_step_orders_the_recipes_as_their_kernels_do():
    steps = {
        r: float(estimate_training_step(_scenario(r)).step_time_s)
        for r in ("tensorwise_fp8_all_gather", "tensorwise", "rowwise")
    }
    bf16 = float(estimate_training_step(_scenario("tensorwise", "bf16")).step_time_s)
    assert steps["tensorwise_fp8_all_gather"] < steps["tensorwise"] < steps["rowwise"] < bf16
    assert bf16 == pytest.approx(float(estimate_training_step(_scenario("te", "bf16")).step_time_s))  # bf16: no recipe


def test_the_plan_names_an_unknown_recipe():
    with pytest.raises(SpecError, match="fp8_recipe 'delayed' is not allowed"):
        Plan(fp8_recipe="delayed")


@pytest.mark.parametrize(
    "notes, precision, recipe",
    [
        ("fp8_scaling=tensorwise; fp8_lib=torchao; fp8_allgather=on", "fp8", "tensorwise_fp8_all_gather"),
        ("fp8_scaling=rowwise; fp8_lib=torchao; fp8_allgather=off", "fp8", "rowwise"),
        ("fp8_scaling=rowwise_with_gw_hp", "fp8", "rowwise_with_gw_hp"),
        ("fp8_lib=torchao; compile=on", "fp8", "tensorwise"),  # torchao's default recipe
        ("mxfp8_gemm=cublas", "mxfp8", ""),  # the framework's
        ("fp8_scaling=rowwise", "bf16", ""),
        ("te=on", "fp8", ""),
    ],
)
def test_a_row_states_its_recipe(notes, precision, recipe):
    assert public_stacks.fp8_recipe({"parse_notes": notes, "precision": precision}) == recipe


def test_fp8_all_gather_copies_out_one_byte_per_weight_and_copies_in_sixteen_bit_gradients():
    from shardwise.engines.fsdp2_copies import sharding_copies

    (gathered, *_), (plain, *_) = (sharding_copies(_scenario(r)) for r in ("tensorwise_fp8_all_gather", "tensorwise"))
    gpu = presets.gpu("h100-sxm5-80gb")
    bw = gpu.memory_bandwidth_bytes_per_s * gpu.memory_efficiency
    per_layer = WEIGHTS + 2 * H  # and the two norms' weights
    # copy-out (read + write) of 1-byte instead of 2-byte weights, forward and backward
    assert float(plain.compute_forward_s - gathered.compute_forward_s) == pytest.approx(2.0 * per_layer / bw)
    assert float(plain.compute_backward_s - gathered.compute_backward_s) == pytest.approx(2.0 * per_layer / bw)
