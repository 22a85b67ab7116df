"""FP8 training as torchao.float8 runs it (torchtitan's `--model.converters float8` and `mx`), against
Transformer Engine's, which `physics.compute` prices by default (`Plan.fp8_recipe` "te": each
activation cast once into both layouts, 4 bytes per element, weights cast once per step; "te-jax",
its JAX path: the same, but each weight cast at every use, `TE_RECIPES`).

torchao scales dynamically: every cast first reads the tensor for its absolute maximum, and the
weights are cast at every use, so in every micro-batch (FSDP2 gathers them afresh). Bytes moved
per element (16-bit in, 1-byte FP8 out), from torchao's own roofline of its compiled kernels
(torchao/testing/training/roofline_utils.py `get_tensor_memory_traffic_ovhd_s`, pytorch/ao
927cbfb91; fusion with the preceding op not assumed, the roofline's default):

==========================  ===================================  ==============================
recipe                      each linear layer's input (forward)  each weight, per micro-batch:
                            and output gradient (backward)       forward ; backward
==========================  ===================================  ==============================
tensorwise                  amax 2, cast 2 + 1 + 1 (both          amax 2 + cast 3 ; cast 3
                            layouts): 6
tensorwise_fp8_all_gather   6                                    cast on the 1/dp shard before
                                                                 the all-gather (left out, as
                                                                 FSDP2's cast into the gather) ;
                                                                 the FP8 weight laid out again
                                                                 for the input gradient, 1 + 1
rowwise                     cast 2 + 1 with a 16-bit transposed  3 ; transpose 2 + 2, cast 3
                            copy 2, its cast 2 + 1: 8
rowwise_with_gw_hp          2 + 1 = 3 (the weight gradient's     3 ; 3
                            GEMM takes the 16-bit tensors)
MX (precision mxfp8)        two casts, 2 + 1 + 1/32 each         3 + 1/32 ; 3 + 1/32
==========================  ===================================  ==============================

The GEMMs (torchao/float8/float8_ops.py `addmm_float8_unwrapped`, the same in torchao 0.10 and
0.13): tensorwise scales call cuBLAS. Row-wise scales call PyTorch's CUTLASS kernel in the forward
pass (fast accumulation), at ROWWISE_FORWARD_FRACTION of cuBLAS's speed; the backward GEMMs
accumulate in full precision, where that kernel "is so slow ... that we'd rather use the
tensorwise cuBLAS-based kernel and do the scaling manually afterwards" (pytorch/ao#1325): cuBLAS
speed, and the weight gradient's 16-bit output read and written once more to rescale it
(ROWWISE_RESCALE_BYTES; the input gradient's rescale fuses into the compiled op that consumes it).
rowwise_with_gw_hp computes the weight gradient in 16 bits.

Not modelled: op-level SAC's recomputation of the casts of the linear layers it recomputes; the
FP8 all-gather's halved gather bytes (FSDP2's copy-out is counted with 1-byte weights).
"""

from __future__ import annotations

from shardwise.specs._checks import Number

# (input, output gradient, weight forward, weight backward): bytes per element (table above)
_MX_SCALE = 1.0 / 32.0  # one E8M0 scale byte per 32 elements
CAST_BYTES: dict[str, tuple[float, float, float, float]] = {
    "tensorwise": (6.0, 6.0, 5.0, 3.0),
    "tensorwise_fp8_all_gather": (6.0, 6.0, 0.0, 2.0),
    "rowwise": (8.0, 8.0, 3.0, 7.0),
    "rowwise_with_gw_hp": (3.0, 3.0, 3.0, 3.0),
}
MX_CAST_BYTES = (6.0 + 2 * _MX_SCALE, 6.0 + 2 * _MX_SCALE, 3.0 + _MX_SCALE, 3.0 + _MX_SCALE)
# Row-wise scaled forward GEMM (PyTorch's CUTLASS kernel, aten/src/ATen/native/cuda/RowwiseScaledMM.cu,
# fast accumulation) as a fraction of the tensor-wise cuBLAS GEMM's speed (unit: fraction; range
# 0.5-1.0): "most shapes are within 90-100% of tensor-wise efficiency, but there's a long tail
# going down to 50%" (pytorch/pytorch#147971, H100, 2025-02). Taken 0.9. Applied on every GPU
# (Blackwell's and ROCm's row-wise kernels have no published figure of their own).
ROWWISE_FORWARD_FRACTION = 0.9
# The weight gradient's manual rescale: read and write its 16-bit output (bytes per weight)
ROWWISE_RESCALE_BYTES = 4.0
ROWWISE_RECIPES = ("rowwise", "rowwise_with_gw_hp")


# Transformer Engine's recipes: its GEMMs and activation casts (`physics.casts.cast_times`). "te" is
# its PyTorch path with delayed scaling (the scale from earlier steps' amax history, the cast fused
# with it), which casts each weight once per step and caches it for the step's micro-batches
# (`engines.training_layout.optimizer_time_s`); "te_current" its per-tensor current scaling
# (`physics.casts`: an amax pass before each cast); "te-jax" its JAX path, whose FP8 dot quantises
# its kernel at every call: `_fp8_dot_fwd_rule` casts the kernel (v1.0 dot.py `cast_transpose(kernel_,
# ...)`, v1.5-v1.12 `quantize(kernel, fwd_dtype, kernel_scale)`) and keeps it only as a residual of
# that call, and a rematerialised layer (jax.checkpoint: a remat policy saves dots, never these
# casts) calls it again in the backward pass (`physics.casts.weight_cast_s`).
TE_RECIPES = ("te", "te_current", "te-jax")


def is_te(recipe: str) -> bool:
    """One of Transformer Engine's recipes (`TE_RECIPES`): its casts priced by `physics.casts`."""
    return recipe in TE_RECIPES


def is_torchao(recipe: str) -> bool:
    """A torchao.float8 recipe (not Transformer Engine's)."""
    return not is_te(recipe)


def casts_weights_per_use(recipe: str) -> bool:
    """Whether the recipe casts each weight at every use (no per-step FP8 weight cache): Transformer
    Engine's JAX path; torchao's casts sit in `casts.torchao_cast_times` instead."""
    return recipe == "te-jax"


def cast_bytes(recipe: str, precision: str) -> tuple[float, float, float, float]:
    """(input, output gradient, weight forward, weight backward) bytes per element that a torchao
    recipe's casts move in one micro-batch (MX for mxfp8, whatever the recipe's name)."""
    return MX_CAST_BYTES if precision == "mxfp8" else CAST_BYTES[recipe]


def rowwise_gemms(recipe: str, precision: str) -> bool:
    """Whether the recipe's GEMMs take row-wise scales (only in FP8; MX scales per block)."""
    return precision == "fp8" and recipe in ROWWISE_RECIPES


def sixteen_bit_weight_gradient(recipe: str, precision: str) -> bool:
    """Whether the weight gradient's GEMM runs in 16 bits (rowwise_with_gw_hp)."""
    return precision == "fp8" and recipe == "rowwise_with_gw_hp"


def rescale_bytes(recipe: str, precision: str, weights: Number) -> Number:
    """Bytes the weight gradients' manual rescale moves (row-wise scales with cuBLAS)."""
    return ROWWISE_RESCALE_BYTES * weights if precision == "fp8" and recipe == "rowwise" else 0.0 * weights
