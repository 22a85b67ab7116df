"""The quantisation casts around the linear layers in FP8 and FP4 training and serving: the bytes and
kernels of each cast by precision and recipe (Transformer Engine's delayed and current scaling,
MXFP8, NVFP4; torchao's recipes as `physics.fp8_recipes` describes them), what a sequence-parallel
all-gather of a quantised tensor moves, and each layer's casts a micro-batch (`cast_times`).
The GEMMs that read the quantised operands: `physics.linears`.
"""

from __future__ import annotations

import numpy as np

from shardwise.physics import fp8_recipes
from shardwise.physics.kernels import memory_s
from shardwise.physics.layer_parts import Gemm, LayerForward
from shardwise.specs import Gpu
from shardwise.specs._checks import Number
from shardwise.specs.hardware import is_nvfp4

# FP8 (Transformer Engine, per-tensor scaling): each linear layer's input is cast to FP8 and
# transposed for the weight gradient (read 2 bytes, write 1 + 1) in the forward pass, and each
# output gradient likewise in the backward pass. MXFP8 quantises the row-wise and column-wise
# copies each with its own scales, one byte per 32 elements (TE's MXFP8 docs: the two copies
# "must be quantized independently from the full-precision data"): 2 x 1/32 more bytes. Weights
# are cast once per step (cached across micro-batches): `engines.training_layout.optimizer_time_s`.
FP8_CAST_BYTES_PER_ELEMENT = 4.0
MXFP8_CAST_BYTES_PER_ELEMENT = 4.0 + 2.0 / 32.0
# Without a weight gradient (frozen weights, LoRA) only the row-wise copy is made: Transformer
# Engine quantises the input column-wise only when `weight.requires_grad`, the output gradient
# only when it computes wgrad (transformer_engine/pytorch/module/linear.py).
ROWWISE_CAST_BYTES_PER_ELEMENT = {
    "fp8": 3.0,
    "mxfp8": 3.0 + 1.0 / 32.0,
    "nvfp4": 2.0 + 2.0 + 0.5 + 1.0 / 16.0,  # amax pass, then the row-wise cast alone (NVFP4_CAST_...)
}


# NVFP4: 4-bit values with one FP8 (E4M3) scale per 16 (NVIDIA's NVFP4 format): 0.5 + 1/16 bytes per
# element. Serving quantises each linear layer's input once (read 2 bytes, write 0.5625).
NVFP4_BYTES_PER_ELEMENT = 0.5 + 1.0 / 16.0
FP4_CAST_BYTES_PER_ELEMENT = 2.0 + NVFP4_BYTES_PER_ELEMENT
# NVFP4 training (Transformer Engine's NVFP4BlockScaling, transformer_engine/pytorch/csrc/quantizer.cpp
# NVFP4Quantizer::quantize_impl, TE d0067d0): the per-tensor FP32 scale needs the tensor's absolute
# maximum first, one kernel reading it (`nvte_hadamard_transform_amax`: the amax of the input and of
# its Random Hadamard Transform, 16 x 16, in one pass; read 2 bytes); then one fused kernel
# (`nvte_quantize_with_hadamard_transform`) reads it again and writes the row-wise copy (for fprop /
# dgrad) and the RHT'd, transposed column-wise copy (for wgrad; NVFP4 GEMMs take only the TN layout),
# each 0.5625 bytes: 2 + 2 + 2 x 0.5625 = 5.125 bytes an element, 2 kernels a tensor. Inputs and
# output gradients alike (gradients also round stochastically, in the same kernel). Weights take 16 x 16
# 2D scales without RHT: an amax pass and one cast into both layouts, the same bytes, once a step.
NVFP4_AMAX_BYTES_PER_ELEMENT = 2.0
NVFP4_CAST_BYTES_PER_ELEMENT = NVFP4_AMAX_BYTES_PER_ELEMENT + 2.0 + 2.0 * NVFP4_BYTES_PER_ELEMENT
NVFP4_KERNELS_PER_TENSOR = 2  # the amax, the fused cast


# FP8 per-tensor current scaling (Transformer Engine's Float8CurrentScaling; Megatron-Core
# `--fp8-recipe tensorwise`, Megatron-Bridge `bf16_with_fp8_current_scaling_mixed`, its perf scripts'
# `fp8_cs`; `Plan.fp8_recipe` "te_current"): the scale comes from the tensor itself, so each cast first
# reads it for its absolute maximum (transformer_engine/pytorch/csrc/quantizer.cpp
# `Float8CurrentScalingQuantizer::quantize_impl`, TE d0067d0: `nvte_compute_amax`, then
# `nvte_compute_scale_from_amax`, then `nvte_quantize_v2` into both layouts): 2 bytes more an element
# than delayed scaling's cast, 3 kernels a tensor. A grouped linear layer's experts are quantised
# the same way in 3 kernels over the group (cast.cpp `group_quantize`: group amax, group scale, group
# cast). Delayed scaling ("te") takes its scale from earlier steps' amax history and fuses this step's
# amax into the cast: one kernel.
FP8_CURRENT_AMAX_BYTES_PER_ELEMENT = 2.0
FP8_CURRENT_CAST_BYTES_PER_ELEMENT = FP8_CURRENT_AMAX_BYTES_PER_ELEMENT + FP8_CAST_BYTES_PER_ELEMENT
FP8_CURRENT_KERNELS_PER_TENSOR = 3  # the amax, the scale, the cast


def current_scaling(precision: str, fp8_recipe: str) -> bool:
    """Per-tensor FP8 under Transformer Engine's current scaling (MXFP8's block scales need no amax
    pass: the cast computes each block's scale as it goes)."""
    return precision == "fp8" and fp8_recipe == "te_current"


# A per-tensor FP8 cast on a GPU whose FP8 GEMMs take any operand layout (`Gpu.fp8_any_layout`,
# data-centre Blackwell) writes the row-wise copy alone: the weight gradient's GEMM reads it as it is,
# no transposed copy (Transformer Engine quantizer.cpp: `with_transpose = columnwise_usage &&
# !is_non_tn_fp8_gemm_supported`). MXFP8 keeps both copies everywhere (its scales run along rows in
# one and along columns in the other).
FP8_TRANSPOSE_BYTES_PER_ELEMENT = 1.0
# Where a per-tensor FP8 tensor is gathered quantised (`sp_gather_bytes_per_element`) on a GPU whose
# FP8 GEMMs take only the TN layout (Hopper, Ada), the rank casts its own rows row-wise alone and the
# weight gradient's transposed copy is made after the gather, from the whole gathered FP8 tensor:
# TE v1.11 layernorm_linear.py backward `ln_out_total_t = tex.fp8_transpose(ln_out_total, ...)`,
# base.py `grad_output_preprocess` (`cast_to_fp8` of the own rows, `gather_along_first_dim`, then
# `tex.fp8_transpose(grad_output_c, ...)`); TE 2.x re-gathers it row-wise and transposes likewise
# (module/_common.py `set_quantizer_usage_for_wgrad_all_gather`). Read 1, write 1 per element of the
# gathered tensor, one kernel each, in the backward pass.
FP8_GATHERED_TRANSPOSE_BYTES_PER_ELEMENT = 2.0


def cast_bytes_per_element(precision: str, fp8_recipe: str = "te", any_layout: Number = False) -> Number:
    """Bytes moved to quantise one 16-bit element (FP8, NVFP4 training: in both layouts; 0 in 16 bits);
    Transformer Engine's current scaling reads the element once more for the tensor's amax; a GPU
    whose FP8 GEMMs take any layout (`any_layout`, `Gpu.fp8_any_layout`) gets no transposed
    per-tensor FP8 copy."""
    if precision == "fp8":
        base = (
            FP8_CURRENT_CAST_BYTES_PER_ELEMENT if current_scaling(precision, fp8_recipe) else FP8_CAST_BYTES_PER_ELEMENT
        )
        return base - np.where(np.asarray(any_layout, dtype=bool), FP8_TRANSPOSE_BYTES_PER_ELEMENT, 0.0)
    casts = {
        "fp8": FP8_CAST_BYTES_PER_ELEMENT,
        "mxfp8": MXFP8_CAST_BYTES_PER_ELEMENT,
        "fp4": FP4_CAST_BYTES_PER_ELEMENT,
        "nvfp4": NVFP4_CAST_BYTES_PER_ELEMENT,
    }
    return casts.get(precision, 0.0)


def cast_kernels_per_tensor(precision: str, fp8_recipe: str = "te") -> int:
    """Kernels that quantise one tensor: NVFP4 training's amax pass and cast; FP8 current scaling's
    amax, scale and cast; one elsewhere (TE's delayed-scaling FP8 casts fuse the amax into the cast:
    the scale comes from the previous steps' history)."""
    if current_scaling(precision, fp8_recipe):
        return FP8_CURRENT_KERNELS_PER_TENSOR
    return NVFP4_KERNELS_PER_TENSOR if is_nvfp4(precision) else 1


# Sequence parallelism's all-gathers in front of Transformer Engine's linear layers move the
# quantised tensor, not the 16-bit one (transformer_engine/pytorch/distributed.py
# `gather_along_first_dim`: `_all_gather_fp8`, `_all_gather_mxfp8`, `_all_gather_nvfp4`, TE d0067d0;
# the NVFP4 path since the recipe's first release, TE PR #2177, 2.10): the layer's input is cast on
# the rank's own rows and gathered row-wise only (layernorm_linear.py / linear.py forward:
# `quantizer.set_usage(rowwise=True, columnwise=False)` before the gather); the backward pass
# re-gathers it in the layout the weight gradient reads (module/_common.py
# `set_quantizer_usage_for_wgrad_all_gather`: column-wise, or row-wise for per-tensor FP8, which
# transposes after the gather); a row-parallel layer's output gradient is cast and gathered with
# the usages it has (base.py `grad_output_preprocess`): both layouts in block scaling (row-wise for
# the input gradient, column-wise for the weight gradient), row-wise alone for per-tensor FP8.
# Bytes per element of the gathered activation: (input, input again for wgrad, output gradient).
# The reduce-scatters carry the GEMMs' 16-bit outputs. Scales: FP8's one per tensor (none per
# element), MXFP8's one byte per 32, NVFP4's per 16. Per-tensor delayed scaling ("te") gathered FP8
# under TE 1.x as well: Megatron-Core's TELayerNormColumnParallelLinear (return_layernorm_output
# False) has the norm kernel write FP8 (TE v1.9-v1.13 layernorm_linear.py forward: `ln_out_dtype =
# torch.uint8 if (fp8 and not return_layernorm_output)`, `_apply_normalization(..., fp8_out)`, then
# `gather_along_first_dim(ln_out, ...)`, re-gathered in the backward from the saved FP8 `ln_out`);
# linear.py casts a sequence-parallel input with `cast_to_fp8` before `gather_along_first_dim`;
# base.py `grad_output_preprocess` casts the output gradient's own rows, then gathers the uint8
# tensor; userbuffers' all-gather buffers are FP8 under an FP8 recipe (module/base.py
# `initialize_ub`: "AllGather buffers use fp8 when using fp8 recipe", qkv_fprop, qkv_dgrad,
# proj_dgrad, fc1_fprop, fc1_dgrad, fc2_dgrad). (TE 1.x's 16-bit gather then cast, `cast_to_fp8(
# ln_out_total, ...)`, is the `return_layernorm_output` branch, which Megatron does not take.) The
# JAX path and torchao's recipes gather the 16-bit activation.
MXFP8_BYTES_PER_ELEMENT = 1.0 + 1.0 / 32.0
TE_SP_GATHER_BYTES_PER_ELEMENT = {
    "fp8": (1.0, 1.0, 1.0),
    "mxfp8": (MXFP8_BYTES_PER_ELEMENT, MXFP8_BYTES_PER_ELEMENT, 2.0 * MXFP8_BYTES_PER_ELEMENT),
    "nvfp4": (NVFP4_BYTES_PER_ELEMENT, NVFP4_BYTES_PER_ELEMENT, 2.0 * NVFP4_BYTES_PER_ELEMENT),
}


def sp_gather_bytes_per_element(precision: str, fp8_recipe: str, activation_bytes: float) -> tuple[float, float, float]:
    """Bytes per element of a sequence-parallel all-gather feeding a linear layer: (its input in the
    forward pass, its input re-gathered for the weight gradient, a row-parallel layer's output
    gradient). Transformer Engine's PyTorch recipes gather the quantised tensor
    (`TE_SP_GATHER_BYTES_PER_ELEMENT`: MXFP8, NVFP4, per-tensor FP8 with delayed scaling, TE 1.x and
    2.x, or current scaling); 16-bit training, torchao's recipes and the JAX path gather the
    `activation_bytes` activation."""
    te = fp8_recipe in ("te", "te_current")  # Transformer Engine's PyTorch path
    if precision in TE_SP_GATHER_BYTES_PER_ELEMENT and te:
        return TE_SP_GATHER_BYTES_PER_ELEMENT[precision]
    return (activation_bytes,) * 3


def gathered_shards(precision: str, fp8_recipe: str, tp: Number, sequence_parallel: Number) -> Number:
    """The ranks over which a layer's gathered tensors are cast (`cast_times`): the TP group under
    sequence parallelism where the recipe gathers the quantised tensor (each rank casts its own rows
    before the all-gather: TE layernorm_linear.py / linear.py forward, base.py
    `grad_output_preprocess`); 1 where it gathers 16 bits and casts the whole gathered tensor."""
    quantised = sp_gather_bytes_per_element(precision, fp8_recipe, 2.0)[0] < 2.0
    if not quantised:
        return 1
    return np.where(np.asarray(sequence_parallel, dtype=bool), np.maximum(np.asarray(tp, dtype=float), 1.0), 1.0)


def _weighted_linears(fwd: LayerForward) -> tuple[tuple[Gemm, ...], tuple[Number, ...]]:
    """A layer's linear layers and the share of them each is there (the dense MLP's share, a
    hybrid mean layer's attention and Mamba-2 shares, `physics.mamba`)."""
    mlp = np.asarray(fwd.has_mlp, dtype=float)
    a = fwd.attention_share
    gemms, on = (*fwd.gemms, *fwd.extra), (a, a, mlp, mlp) + (1.0,) * len(fwd.extra)
    if fwd.mamba is None:
        return gemms, on
    return (*gemms, fwd.mamba.in_proj, fwd.mamba.out_proj), (*on, fwd.mamba.share, fwd.mamba.share)


def norm_fed_saving(precision: str, fp8_recipe: str) -> tuple[float, int]:
    """(bytes per element, kernels per tensor) that the input of a linear layer fed by Transformer
    Engine's own norm does not pay under FP8 current scaling: TE's LayerNormLinear (Megatron's
    QKV, MLP up and Mamba-2 in_proj, `TELayerNormColumnParallelLinear`) computes the amax in the norm
    kernel (transformer_engine/pytorch/csrc/extensions/normalization.cpp `FUSED_NORM_AMAX_FP8`), so
    no amax pass reads it; (0, 0) under any other recipe."""
    if current_scaling(precision, fp8_recipe):
        return FP8_CURRENT_AMAX_BYTES_PER_ELEMENT, 1
    return 0.0, 0


# Under per-tensor delayed scaling Transformer Engine's norm writes the FP8 tensor itself: no cast of
# its output runs, and the norm kernel writes 1 byte an element where it would write 2 (priced in the
# layer's element-wise work, `physics.flops`). TE 1.x (v1.9-v1.13, PyTorch) layernorm_linear.py forward:
# `ln_out_dtype = torch.uint8 if (fp8 and not return_layernorm_output)`, `_apply_normalization(...,
# fp8_out=fp8 and not return_layernorm_output, ...)` (module/_common.py: `layernorm_fwd_fp8` /
# `rmsnorm_fwd_fp8`), the FP8 `ln_out` gathered under sequence parallelism and saved for the backward,
# which transposes the whole (gathered) tensor for the weight gradient (`ln_out_total_t =
# tex.fp8_transpose(ln_out_total, ...)`, with or without sequence parallelism); no 16-bit copy is made
# (only under `return_layernorm_output`, which Megatron-Core's TELayerNormColumnParallelLinear does not
# set). TE 2.0-2.18: `with_quantized_norm = fp8 and not return_layernorm_output` hands the input
# quantizer to the norm, and csrc/extensions/normalization.cpp runs the norm kernel straight into the
# FP8 tensor for `Float8Quantizer` (2.2-2.6: "Always used fused kernel for FP8 delayed scaling"; 2.8 on:
# `Impl::FULLY_FUSED`); where the tensor keeps a transposed copy (no sequence-parallel gather, TN-only
# FP8 GEMMs) common/normalization/{layernorm/ln_api.cpp, rmsnorm/rmsnorm_api.cpp} transpose it after the
# kernel (`nvte_transpose`, "Compute FP8 transpose if required"); under sequence parallelism the norm
# writes the row-wise shard that is gathered (`FP8_GATHERED_TRANSPOSE_BYTES_PER_ELEMENT` after the
# gather). TE JAX 1.x likewise (jax/layernorm.py `_layernorm_fp8_dot_fwd_rule`, layernorm_mlp.py:
# `layernorm_fwd_fp8` / `rmsnorm_fwd_fp8`, `tex.transpose(ln_out_)` in the backward; v1.11), which its
# flax LayerNormDenseGeneral and LayerNormMLP run. Current scaling writes a 16-bit norm output and its
# amax (`FUSED_NORM_AMAX_FP8`, `norm_fed_saving`), MXFP8 a 16-bit output cast apart (`Impl::UNFUSED`
# unless NVTE_NORM_FWD_USE_CUDNN): neither changes here.
NORM_FP8_WRITE_SAVED_BYTES_PER_ELEMENT = 1.0  # the norm writes 1 byte, not 2
# the transposed copy, where the layer keeps one and is not gathered: one transpose kernel reading the
# FP8 copy (read 1, write 1), placed in the forward pass as TE 2.x runs it (TE 1.x: in the backward)
NORM_FP8_TRANSPOSE_BYTES_PER_ELEMENT = 2.0


def norm_writes_fp8(precision: str, fp8_recipe: str) -> bool:
    """Whether Transformer Engine's norm writes the FP8 input of the linear layers it feeds itself:
    per-tensor FP8 under delayed scaling, its PyTorch ("te") or JAX ("te-jax") path."""
    return precision == "fp8" and fp8_recipe in ("te", "te-jax")


# A LayerNormLinear whose norm output is also returned (`return_layernorm_output`) writes it in 16 bits and
# casts it like any other input, whatever the recipe: TE v1.9-v1.13 layernorm_linear.py `ln_out_dtype =
# torch.uint8 if (fp8 and not return_layernorm_output)`, then `tex.cast_to_fp8(ln_out, ...)` ("we need
# `ln_out_return` tensor in higher precision, this comes at the cost of an extra fp8 cast"); TE 2.x
# `with_quantized_norm = fp8 and not return_layernorm_output`, then `input_quantizer(ln_out)`. PEFT sets it
# on every TELayerNormColumnParallelLinear that carries a LoRA adapter -- QKV, MLP up (fc1) -- since the
# adapter reads the norm output ("LoRA is applied after layernorm, so layernorm output must be returned"):
# NVIDIA-NeMo/Megatron-Bridge src/megatron/bridge/peft/utils.py@29836cce `get_adapter_attributes_from_linear`,
# NVIDIA/NeMo nemo/collections/llm/peft/utils.py@0cdc2a00. (QKV share, MLP-up share) of such layers.
Returned = tuple[Number, Number]


def _returned(fwd: LayerForward, norm_returned: Returned = (0.0, 0.0)) -> tuple[Number, ...]:
    """Per `_weighted_linears(fwd)`: the share (0 to 1) of it whose norm output is returned in 16 bits
    (`Returned`); 0 for the layers no norm feeds and for Mamba-2's in_proj (no adapter)."""
    qkv, up = norm_returned
    out = (qkv, 0.0, up, 0.0) + (0.0,) * len(fwd.extra)
    return out if fwd.mamba is None else (*out, 0.0, 0.0)


def norm_fp8_saved_bytes(
    fwd: LayerForward, norm_shards: Number = 1, mlp_norm_fed: bool = True, norm_returned: Returned = (0.0, 0.0)
) -> Number:
    """Bytes the layer's norms do not write where they write the FP8 tensor (`norm_writes_fp8`): 1 an
    element of each norm-fed linear layer's input (`_norm_fed`) whose norm output is not returned in
    16 bits (`norm_returned`, `_returned`), on the rank's own rows where sequence parallelism splits
    the norm over `norm_shards` ranks."""
    gemms, on = _weighted_linears(fwd)
    flags, kept = _norm_fed(fwd, mlp_norm_fed), _returned(fwd, norm_returned)
    fed = sum(w * g.m * g.k * g.batch * (1.0 - r) for w, g, f, r in zip(on, gemms, flags, kept, strict=True) if f)
    return NORM_FP8_WRITE_SAVED_BYTES_PER_ELEMENT * fed / np.asarray(norm_shards, dtype=float)


# Transformer Engine's current scaling (Float8CurrentScaling, TE 2.2 on) and NVFP4 (NVFP4BlockScaling,
# TE 2.8 on) give a sequence-parallel tensor one scale across the TP group: the input quantizer of a
# column-parallel layer and the output-gradient quantizer of a row-parallel one all-reduce the amax
# (MAX) over the TP group between the amax and the scale, on the critical path (csrc/quantizer.cpp
# `Float8CurrentScalingQuantizer::quantize_impl`: `amax_reduction_group->allreduce(tensors,
# opts)->wait()` after `nvte_compute_amax_with_config`, before `nvte_compute_scale_from_amax`; also
# after the norm's fused amax, `quantize_with_amax`; `NVFP4Quantizer::quantize_impl`:
# `allreduce_coalesced` of its amaxes; TE d0067d0). Set where the layer runs sequence-parallel:
# module/linear.py, layernorm_linear.py, layernorm_mlp.py `_customize_quantizers_float8_current_scaling`
# / `_customize_quantizers_nvfp4` (v2.2-v2.17: `if self.sequence_parallel and self.parallel_mode ==
# "column"`: the input quantizer, `"row"`: the output-gradient quantizer), d0067d0
# `set_quantizer_amax_reduction_group(..., tp_group if (sequence_parallel and parallel_mode == ...))`.
# The weight-gradient re-gather moves the saved quantised shard: no second reduction. Grouped linear
# layers (experts) and MXFP8 reduce none. One FP32 amax (NVFP4: its amaxes coalesced into one call).
AMAX_REDUCTION_BYTES = 4.0


def reduces_amax(precision: str, fp8_recipe: str) -> bool:
    """Whether Transformer Engine all-reduces a sequence-parallel tensor's amax over the TP group
    before quantising it (`AMAX_REDUCTION_BYTES`): FP8 current scaling, NVFP4 on its PyTorch path."""
    te = fp8_recipe in ("te", "te_current")
    return current_scaling(precision, fp8_recipe) or (precision == "nvfp4" and te)


def _norm_fed(fwd: LayerForward, mlp_norm_fed: bool = True) -> tuple[bool, ...]:
    """Which of `_weighted_linears(fwd)` take their input from the layer's pre-norm (QKV, MLP up,
    Mamba-2's in_proj: Transformer Engine's LayerNormLinear in Megatron-Core's layer specs); with
    `mlp_norm_fed` True, also the column-parallel layers whose inputs sequence parallelism gathers.
    `mlp_norm_fed` False: a mixture-of-experts layer, whose pre-MLP norm is a TENorm of its own
    (16-bit out: it feeds the router too), so its shared experts' fc1 (TEColumnParallelLinear) is not
    norm-fed (megatron/core/models/gpt/gpt_layer_specs.py: `pre_mlp_layernorm=TENorm if num_experts
    else IdentityOp`, the dense MLP's `linear_fc1=TELayerNormColumnParallelLinear`)."""
    fed = (True, False, mlp_norm_fed, False) + (False,) * len(fwd.extra)
    return fed if fwd.mamba is None else (*fed, True, False)


def _row_parallel(fwd: LayerForward) -> tuple[bool, ...]:
    """Which of `_weighted_linears(fwd)` are row-parallel (attention output, MLP down, Mamba-2's
    out_proj): under sequence parallelism their output gradients are all-gathered before the GEMMs."""
    rows = (False, True, False, True) + (False,) * len(fwd.extra)
    return rows if fwd.mamba is None else (*rows, False, True)


def cast_times(
    fwd: LayerForward,
    gpu: Gpu,
    bytes_per_element: Number,
    kernels_per_tensor: int = 1,
    norm_saving: tuple[float, int] = (0.0, 0),
    gathered_shards: Number = 1,
    gathered_transpose: Number = 0.0,
    norm_fp8: bool = False,
    mlp_norm_fed: bool = True,
    norm_returned: Returned = (0.0, 0.0),
) -> tuple[Number, Number]:
    """(forward, backward) seconds of quantising each linear layer's input and output gradient,
    `bytes_per_element` moved per 16-bit element (`cast_bytes_per_element`) by `kernels_per_tensor`
    kernels each (`cast_kernels_per_tensor`), less `norm_saving` on the inputs the layer's norm
    feeds (`norm_fed_saving`). `gathered_shards`: the sequence-parallel ranks over which a recipe
    that gathers the quantised tensor (`sp_gather_bytes_per_element`) casts the column-parallel
    layers' inputs and the row-parallel layers' output gradients before the all-gather, each rank
    its own rows (1: cast whole after a 16-bit gather, or no sequence parallelism).
    `gathered_transpose` > 0 (bytes per element, `FP8_GATHERED_TRANSPOSE_BYTES_PER_ELEMENT`): those
    gathered tensors are cast row-wise alone (no transposed copy, `FP8_TRANSPOSE_BYTES_PER_ELEMENT`
    less on the own rows) and transposed whole after the gather, one kernel each, in the backward
    pass; only where `gathered_shards` > 1. `norm_fp8` (`norm_writes_fp8`): the norm-fed inputs are
    not cast at all; where the cast would have written a transposed copy, one transpose kernel makes
    it from the FP8 copy (`NORM_FP8_TRANSPOSE_BYTES_PER_ELEMENT`); the norm's own smaller write is
    `norm_fp8_saved_bytes`. The inputs whose norm output is returned in 16 bits (`norm_returned`,
    `Returned`: LoRA's QKV and MLP up) have neither this nor `norm_saving`: cast in full. `mlp_norm_fed` False: a
    mixture-of-experts layer's MLP (its shared experts) is not fed by the norm (`_norm_fed`)."""
    gemms, on = _weighted_linears(fwd)
    shards = np.asarray(gathered_shards, dtype=float)
    own = 1.0 / shards
    transpose = np.where(shards > 1, np.asarray(gathered_transpose, dtype=float), 0.0)
    own_bytes = bytes_per_element - np.where(transpose > 0, FP8_TRANSPOSE_BYTES_PER_ELEMENT, 0.0)
    col_flags, fed_flags, row_flags = _norm_fed(fwd), _norm_fed(fwd, mlp_norm_fed), _row_parallel(fwd)
    ins = [w * g.m * g.k * g.batch for w, g in zip(on, gemms, strict=True)]
    outs = [w * g.m * g.n * g.batch for w, g in zip(on, gemms, strict=True)]
    # the column-parallel inputs (gathered under sequence parallelism, whole as gathered): the norm-fed
    # ones and those a norm of its own feeds (a mixture-of-experts layer's shared experts)
    fed = sum(x for x, f in zip(ins, fed_flags, strict=True) if f)
    col = sum(x for x, c, f in zip(ins, col_flags, fed_flags, strict=True) if c and not f)
    rows = sum(x for x, r in zip(outs, row_flags, strict=True) if r)
    inputs = sum(x for x, c in zip(ins, col_flags, strict=True) if not c)
    # each output gradient where its linear layer is there (a mixture-of-experts layer has no dense MLP:
    # its experts cast their own, `engines.moe`)
    outputs = sum(x for x, r in zip(outs, row_flags, strict=True) if not r)
    saved, saved_kernels = norm_saving
    # the inputs whose norm runs quantised for its layer (TE's `with_quantized_norm`), not those whose norm
    # output is returned in 16 bits (`_returned`): these are cast whole, with no saving either way
    rets = _returned(fwd, norm_returned)
    quantised_in = sum(x * (1.0 - r) for x, f, r in zip(ins, fed_flags, rets, strict=True) if f)
    n_quantised = sum(1.0 - r for f, r in zip(fed_flags, rets, strict=True) if f)
    fed_cast = (own_bytes - saved) * quantised_in + own_bytes * (fed - quantised_in)
    fed_kernels = n_quantised * saved_kernels  # not run
    if norm_fp8:  # no cast; the transposed copy the cast would write (own_bytes beyond the row-wise cast's)
        kept = own_bytes - ROWWISE_CAST_BYTES_PER_ELEMENT["fp8"]
        fed_cast = NORM_FP8_TRANSPOSE_BYTES_PER_ELEMENT * kept * quantised_in + own_bytes * (fed - quantised_in)
        fed_kernels = n_quantised * (kernels_per_tensor - np.where(kept > 0, 1, 0))
    transposes = np.where(transpose > 0, sum(col_flags) + sum(row_flags), 0)
    forward = bytes_per_element * inputs + own_bytes * own * col + own * fed_cast
    backward = bytes_per_element * outputs + own_bytes * own * rows + transpose * (fed + col + rows)
    return (
        memory_s(forward, gpu, kernels=kernels_per_tensor * len(gemms) - fed_kernels),
        memory_s(backward, gpu, kernels=kernels_per_tensor * len(gemms) + transposes),
    )


def weight_cast_s(fwd: LayerForward, gpu: Gpu, precision: str) -> Number:
    """Seconds to quantise one layer's weights once (`fp8_recipes.casts_weights_per_use`): every
    linear layer's k x n weights at `cast_bytes_per_element` (Transformer Engine's cast into both
    layouts: read 2, write 1 + 1), one kernel each."""
    gemms, on = _weighted_linears(fwd)
    weights = sum(w * g.k * g.n * g.batch for w, g in zip(on, gemms, strict=True))
    return memory_s(cast_bytes_per_element(precision) * weights, gpu, kernels=len(gemms))


def torchao_cast_times(fwd: LayerForward, gpu: Gpu, precision: str, recipe: str) -> tuple[Number, Number]:
    """(forward, backward) seconds of a torchao recipe's casts in one layer and micro-batch: each
    linear layer's input, output gradient and weight (`physics.fp8_recipes.cast_bytes`), two
    kernels (the absolute maximum, the cast) per tensor and pass."""
    gemms, on = _weighted_linears(fwd)
    inputs = sum(w * g.m * g.k * g.batch for w, g in zip(on, gemms, strict=True))
    outputs = sum(w * g.m * g.n * g.batch for w, g in zip(on, gemms, strict=True))
    weights = sum(w * g.k * g.n * g.batch for w, g in zip(on, gemms, strict=True))
    a_in, a_out, w_f, w_b = fp8_recipes.cast_bytes(recipe, precision)
    kernels = 2 * 2 * len(gemms)
    return (
        memory_s(a_in * inputs + w_f * weights, gpu, kernels=kernels),
        memory_s(a_out * outputs + w_b * weights, gpu, kernels=kernels),
    )
