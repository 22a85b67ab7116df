"""Sequence parallelism's all-gathers in front of Transformer Engine's linear layers move the
quantised tensor (`physics.casts.sp_gather_bytes_per_element`): NVFP4 0.5625 bytes an element,
MXFP8 1 + 1/32, per-tensor FP8 1 (delayed scaling on TE 1.x and 2.x, current scaling); the output
gradient of a row-parallel layer in both block-scaled layouts; 16-bit training, torchao's recipes
and TE's JAX path gather 16 bits. Per-tensor FP8 on a GPU without any-layout FP8 GEMMs transposes
each gathered tensor after the gather."""

from __future__ import annotations

import pytest

from shardwise import presets
from shardwise.engines.tp_overlap import tp_comm
from shardwise.engines.training import estimate_training_step
from shardwise.physics.casts import sp_gather_bytes_per_element
from shardwise.physics.collectives import Fabric
from shardwise.specs import Plan, Scenario

NV = 0.5 + 1 / 16  # E2M1 and an E4M3 scale per 16
MX = 1 + 1 / 32  # E4M3 and an E8M0 scale per 32


@pytest.mark.parametrize(
    ("precision", "recipe", "expected"),
    [
        ("nvfp4", "te", (NV, NV, 2 * NV)),  # the output gradient row-wise (dgrad) and column-wise (wgrad)
        ("mxfp8", "te", (MX, MX, 2 * MX)),
        ("mxfp8", "te_current", (MX, MX, 2 * MX)),
        ("fp8", "te_current", (1.0, 1.0, 1.0)),  # per-tensor: row-wise gathered, transposed after
        ("fp8", "te", (1.0, 1.0, 1.0)),  # delayed scaling: TE 1.x's norm writes FP8, gathered as it is
        ("fp8", "tensorwise", (2.0, 2.0, 2.0)),  # torchao
        ("fp8", "te-jax", (2.0, 2.0, 2.0)),
        ("bf16", "te", (2.0, 2.0, 2.0)),
    ],
)
def test_the_gathers_move_the_recipes_quantised_bytes(precision, recipe, expected):
    assert sp_gather_bytes_per_element(precision, recipe, 2.0) == pytest.approx(expected)


def _tp_comm_s(precision: str, fp8_recipe: str = "te", overlap: bool = False) -> float:
    plan = Plan(
        tp=4, pp=1, dp=18, global_batch=36, precision=precision, fp8_recipe=fp8_recipe,
        sequence_parallel=True, tp_comm_overlap=overlap,
    )  # fmt: skip
    scn = Scenario(presets.model("llama3-70b", seq_len=8192), presets.system("gb200-nvl72"), plan)
    return float(estimate_training_step(scn).breakdown.tp_comm_s)


def test_exposed_tp_communication_falls_with_the_gathered_bytes():
    """Without userbuffers the forward all-gathers and the output gradients' gathers are exposed; the
    reduce-scatters (16-bit outputs) are the same in every precision. Current scaling gathers what
    delayed scaling does and all-reduces 4 amaxes a layer over the TP group besides (80 layers, 2
    micro-batches: `physics.casts.reduces_amax`)."""
    bf16, fp8_delayed = _tp_comm_s("bf16"), _tp_comm_s("fp8", "te")
    fp8_current, mxfp8, nvfp4 = _tp_comm_s("fp8", "te_current"), _tp_comm_s("mxfp8"), _tp_comm_s("nvfp4")
    amax = float(Fabric.of(presets.system("gb200-nvl72")).group(4, 4).all_reduce(4.0))
    assert fp8_current - fp8_delayed == pytest.approx(80 * 4 * 2 * amax)
    assert nvfp4 < fp8_current < bf16
    assert nvfp4 < mxfp8 < bf16
    # the reduce-scatters stay: the gathers alone shrink, so nothing falls below half the 16-bit time
    assert nvfp4 > 0.4 * bf16


def test_the_tp_groups_other_collectives_keep_the_activations_bytes():
    """Only the gathers in front of the linear layers shrink: the all-reduce (no sequence
    parallelism), the reduce-scatters and the 16-bit all-gather (the output layer's input, pipeline
    sends) keep the 16-bit message."""
    scn = Scenario(
        presets.model("llama3-70b", seq_len=8192),
        presets.system("gb200-nvl72"),
        Plan(tp=4, pp=1, dp=18, global_batch=36, precision="nvfp4", sequence_parallel=True),
    )
    fabric = Fabric.of(scn.cluster)
    comm = tp_comm(scn, fabric, 4)
    message = 2.0 * 8192 * 8192
    group = fabric.group(4, 4)
    assert comm.all_reduce == pytest.approx(group.all_reduce(message))
    assert comm.all_gather == comm.reduce_scatter == pytest.approx(group.reduce_scatter(message))
    assert comm.gather_input == comm.gather_wgrad_input == pytest.approx(group.all_gather(NV * message / 2))
    assert comm.gather_output_grad == pytest.approx(group.all_gather(NV * message))
    assert comm.gather_input < comm.gather_output_grad < comm.all_gather


def test_each_rank_casts_its_own_rows_before_the_gather():
    """Column-parallel inputs (QKV, MLP up) and row-parallel output gradients (attention output, MLP
    down) are cast on the rank's 1/t of the sequence; the others whole, as before."""
    from shardwise.physics.casts import cast_times, gathered_shards
    from shardwise.physics.flops import layer_forward

    model, gpu, t = presets.model("llama3-70b", seq_len=8192), presets.gpu("gb200"), 4
    fwd = layer_forward(model, 1, t, True, 2.0)
    assert gathered_shards("nvfp4", "te", t, True) == t
    assert gathered_shards("fp8", "te", t, True) == t
    assert gathered_shards("nvfp4", "te", t, False) == 1 and gathered_shards("fp8", "te-jax", t, True) == 1
    per_byte = 1.0 / (gpu.memory_bandwidth_bytes_per_s * gpu.memory_efficiency)
    whole_f, whole_b = cast_times(fwd, gpu, 1.0, 0)
    own_f, own_b = cast_times(fwd, gpu, 1.0, 0, gathered_shards=t)
    gathered_in = (fwd.qkv.m * fwd.qkv.k + fwd.mlp_up.m * fwd.mlp_up.k) * per_byte
    gathered_out = (fwd.attn_out.m * fwd.attn_out.n + fwd.mlp_down.m * fwd.mlp_down.n) * per_byte
    assert float(whole_f - own_f) == pytest.approx(gathered_in * (1 - 1 / t))
    assert float(whole_b - own_b) == pytest.approx(gathered_out * (1 - 1 / t))


def _gathered_elements(fwd) -> tuple[float, float]:
    """Elements of the gathered inputs (QKV, MLP up) and gathered output gradients (attention
    output, MLP down) of one layer, whole."""
    inputs = fwd.qkv.m * fwd.qkv.k + fwd.mlp_up.m * fwd.mlp_up.k
    outputs = fwd.attn_out.m * fwd.attn_out.n + fwd.mlp_down.m * fwd.mlp_down.n
    return float(inputs), float(outputs)


def test_per_tensor_fp8_gathered_row_wise_is_transposed_whole_after_the_gather():
    """TE's per-tensor FP8 on Hopper (TN-only FP8 GEMMs): the own rows are cast row-wise alone (no
    transposed copy, 1 byte an element less) and the gathered tensor is transposed whole for the
    weight gradient (read 1, write 1), one kernel each, in the backward pass."""
    from shardwise.physics.casts import (
        FP8_GATHERED_TRANSPOSE_BYTES_PER_ELEMENT,
        FP8_TRANSPOSE_BYTES_PER_ELEMENT,
        cast_times,
    )
    from shardwise.physics.flops import layer_forward

    model, gpu, t = presets.model("llama3-70b", seq_len=8192), presets.gpu("h100-sxm5-80gb"), 8
    fwd = layer_forward(model, 1, t, True, 2.0)
    per_byte = 1.0 / (gpu.memory_bandwidth_bytes_per_s * gpu.memory_efficiency)
    gathered_in, gathered_out = _gathered_elements(fwd)
    own_f, own_b = cast_times(fwd, gpu, 4.0, 1, gathered_shards=t)
    tr_f, tr_b = cast_times(
        fwd, gpu, 4.0, 1, gathered_shards=t, gathered_transpose=FP8_GATHERED_TRANSPOSE_BYTES_PER_ELEMENT
    )
    row_byte = FP8_TRANSPOSE_BYTES_PER_ELEMENT * per_byte / t
    assert float(own_f - tr_f) == pytest.approx(gathered_in * row_byte)
    transposes = FP8_GATHERED_TRANSPOSE_BYTES_PER_ELEMENT * (gathered_in + gathered_out) * per_byte
    four_kernels = 4 * gpu.kernel_launch_s
    assert float(tr_b - own_b) == pytest.approx(transposes - gathered_out * row_byte + four_kernels)
    # no quantised gather (one shard): nothing is transposed after a gather
    assert cast_times(fwd, gpu, 4.0, 1, gathered_shards=1, gathered_transpose=2.0) == cast_times(fwd, gpu, 4.0, 1)


def test_the_layer_transposes_per_tensor_fp8_only_where_the_gemms_need_one_layout():
    """`layer_times` charges the transposes after the gather for per-tensor FP8 on Hopper, not on a
    GPU whose FP8 GEMMs take any layout (data-centre Blackwell), nor for MXFP8 (both layouts cast
    on the own rows)."""
    from shardwise.physics.casts import gathered_shards
    from shardwise.physics.compute import layer_times
    from shardwise.physics.flops import layer_forward

    model, t = presets.model("llama3-70b", seq_len=8192), 8
    fwd = layer_forward(model, 1, t, True, 2.0)
    hopper, blackwell = presets.gpu("h100-sxm5-80gb"), presets.gpu("gb200")
    assert not hopper.fp8_any_layout and blackwell.fp8_any_layout

    def cast_b(gpu, precision: str) -> float:
        shards = gathered_shards(precision, "te", t, True)
        return float(layer_times(fwd, gpu, precision, True, gathered_shards=shards).cast_b_s)

    gathered_in, gathered_out = _gathered_elements(fwd)
    per_byte = 1.0 / (hopper.memory_bandwidth_bytes_per_s * hopper.memory_efficiency)
    # Hopper: the whole gathered tensors transposed, far more than their own rows' transposed copies
    assert cast_b(hopper, "fp8") > 2.0 * (gathered_in + gathered_out) * per_byte
    blackwell_per_byte = 1.0 / (blackwell.memory_bandwidth_bytes_per_s * blackwell.memory_efficiency)
    assert cast_b(blackwell, "fp8") < 2.0 * (gathered_in + gathered_out) * blackwell_per_byte
