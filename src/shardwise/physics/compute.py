"""Time of compute kernels on one GPU.

GEMMs (the linear layers, the output layer, unfused attention's batched products) are timed from
their shape by the tile/wave model of `physics.gemm`; everything else by a roofline with an
achievable peak and a launch gap:

    T_op = max(F / (peak * eta_mm), Q / (BW * eta_mem)) + t_launch

F FLOPs, Q bytes moved; eta_mm the GPU's achievable fraction of dense peak, eta_mem the
achievable fraction of HBM bandwidth.

Backward passes: each linear layer Y = X W becomes dX = dY W^T (an m x n @ n x k product) and
dW = X^T dY (k x m @ m x n, K = the tokens), each timed with its own shape, so the backward is
about, not exactly, twice the forward (Narayanan et al. 2021 Sec. 5.1). The weight gradient is
accumulated into the fp32 main_grad inside the GEMM (Megatron's gradient-accumulation fusion,
8 bytes per weight per micro-batch in the epilogue) or, without fusion, written in 16 bits and
added by a separate kernel. Memory-bound kernels read the saved input and the incoming gradient
and write the outgoing one, BACKWARD_MEMORY_RATIO x the forward traffic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from shardwise.physics import fp8_recipes
from shardwise.physics.attention import backward_slowdown, forward_slowdown
from shardwise.physics.flops import Gemm, LayerForward, input_gradient, weight_gradient
from shardwise.physics.gemm import gemm_time_s, table_time_s
from shardwise.specs import Gpu
from shardwise.specs._checks import Number
from shardwise.specs.hardware import is_fp8, is_narrow
from shardwise.specs.plan import FLASH2_KERNELS

# dX and dW per forward GEMM: the backward is twice the forward's FLOPs (Narayanan et al. 2021
# Eq. 3 and Sec. 5.1); used for unfused attention's batched products.
BACKWARD_GEMM_RATIO = 2.0
# Memory-bound kernels: the backward reads the input and the gradient and writes the gradient
# against the forward's read and write; by that tensor count (no published source), 2x the bytes.
BACKWARD_MEMORY_RATIO = 2.0
# Megatron-LM's fused scale-mask-softmax and the attention dropout, two kernels over the score
# matrix (megatron/core/fusions/fused_softmax.py `FusedScaleMaskSoftmax`; Korthikanti et al. 2022
# Sec. 4.1 lists both tensors); charged with or without dropout, a project simplification.
SOFTMAX_KERNELS = 2
# FlashAttention-2 reaches 50-73 % of A100 peak forward vs ~87 % for a large GEMM
# (Dao 2023, Fig. 5; MAMF): about 0.75 of the GEMM efficiency. Its backward recomputes the
# scores and does 5 GEMM-sized products against 2 forward (Dao 2023, Sec. 3.1.2): 2.5x the FLOPs,
# run at up to 63 % of peak against the forward's 73 % (Dao 2023, Sec. 4.1), so 2.5 x 73/63 =
# 2.9x the forward's time.
FLASH_RELATIVE_EFFICIENCY = 0.75
FLASH_BACKWARD_RATIO = 2.5 * 73.0 / 63.0
# PyTorch SDPA's flash backend ("sdpa-flash2") runs PyTorch's own build of FlashAttention-2
# (aten/src/ATen/native/transformers/cuda/flash_attn), slower on Hopper than the flash-attn
# package whose speeds `flash2_efficiency` carries (Shah et al. 2024, Fig. 4-5). Its speed as a
# fraction of upstream FlashAttention-2's at the same shape, H100 SXM5, BF16, head dim 128:
# - forward (unit: fraction; range 0.78-0.90): SDPA's flash forward, non-causal, batch 128 x 8
#   heads, 287, 293, 298, 288, 304 TFLOP/s at 1k-16k tokens (pytorch/benchmark PR #2296,
#   tritonbench flash_attention, commit d5f0a12) against FA2's 350, 362, 368, 370, 370: 0.78-0.82;
#   1 x 24 heads x 4608 tokens, 329 TFLOP/s (pytorch/pytorch#142132, tritonbench, PyTorch 2.6
#   nightly) against FA2's ~368 at 4k: 0.89. Taken 0.82.
# - backward (unit: fraction; range 0.60-0.95): SDPA's flash backward at Llama-3-8B training
#   shapes (32 heads, head dim 128, causal), 183 TFLOP/s (pytorch/pytorch#135431, H100) against
#   upstream FA2's causal backward modelled at 260-280 (322 TFLOP/s non-causal plateau x
#   `physics.attention.CAUSAL_PLATEAU` x its ramp at 4-8k): 0.65-0.70; huggingface/transformers
#   PR #48163 measures cuDNN's SDPA 1.7-2.3x faster than SDPA's flash for Hopper training shapes
#   (forward + backward), where cuDNN runs ~1.6x upstream FA2 (Shah et al. 2024: 595-617 vs 370
#   forward, 516 vs 322 backward): SDPA flash at 0.70-0.94 of upstream, with the forward above a
#   backward of 0.67-0.99. Taken 0.70.
# Applied where FA2 runs below the fused kernels (a GPU with its own `flash2_efficiency`: Hopper,
# Blackwell by assumption); on Ampere SDPA's copy and upstream run the same sm80 kernels (none
# of the figures above is an Ampere one), factor 1.
SDPA_FLASH_FORWARD_FRACTION = 0.82
SDPA_FLASH_BACKWARD_FRACTION = 0.70
# On ROCm SDPA's flash backend is AOTriton (`Gpu.sdpa_flash_backend` "aotriton"), not a copy of the
# kernels whose speed `flash2_efficiency` carries there (ROCm's CK FlashAttention-2, the flash-attn
# package's ROCm build). Its speed as a fraction of CK's at the same shape (unit: fraction): no
# public figure for AOTriton 0.10-0.11 (PyTorch 2.8-2.9) was found; PyTorch 2.5's nightly ran
# SDPA's flash backward at 19.9 TFLOP/s at Llama-3-8B shapes on an MI300X (2.3: 9.6;
# pytorch/pytorch#135431, 2024-09, before AOTriton 0.7b's "performance on par" fix, PR #134498),
# 0.10 of CK's ~200 -- the floor of the range; taken 1 (AOTriton at CK's speed), range 0.1-1.0.
# AOTriton 0.11b (pytorch/pytorch PR #161754, 2025-08-29) dispatches AITER's assembly kernels on
# gfx942, "over 500 TFLOPS training performance" by its release notes: builds with it run faster
# than this (PyTorch 2.9.0.dev20250811, the pytorch/ao MI300X rows' build, has AOTriton 0.10b).
AOTRITON_FORWARD_FRACTION = 1.0
AOTRITON_BACKWARD_FRACTION = 1.0
# FlashAttention-2's backward does 2.5x the forward's FLOPs (Dao 2023, Sec. 3.1.2; the FLOP count
# of its benchmark scripts); a GPU's `flash2_backward_efficiency` is its backward TFLOP/s on that
# count over the GEMMs', and the backward's time FLASH_BACKWARD_RATIO x the forward FLOPs at
# `flash2_backward_efficiency` x FLASH_BACKWARD_RATIO / FLASH_BACKWARD_FLOPS of the GEMMs' rate.
FLASH_BACKWARD_FLOPS = 2.5
# The precisions a measured GEMM table (`Gpu.gemm_table`, timed in 16 bits) prices.
SIXTEEN_BIT = ("bf16", "fp16")


def roofline_s(flops: Number, n_bytes: Number, gpu: Gpu, precision: str, efficiency: Number = 1.0) -> Number:
    """max(compute, memory) for one kernel, plus its launch gap."""
    compute = flops / (gpu.peak_flops_per_s(precision) * gpu.matmul_efficiency_for(precision) * efficiency)
    memory = n_bytes / (gpu.memory_bandwidth_bytes_per_s * gpu.memory_efficiency)
    return np.maximum(compute, memory) + gpu.kernel_launch_s


def memory_s(n_bytes: Number, gpu: Gpu, kernels: Number = 1) -> Number:
    """Memory-bound kernels: bytes at the achievable HBM bandwidth plus one gap per kernel."""
    return n_bytes / (gpu.memory_bandwidth_bytes_per_s * gpu.memory_efficiency) + kernels * gpu.kernel_launch_s


def gemm_s(g: Gemm, gpu: Gpu, precision: str) -> Number:
    """One GEMM kernel: the tile/wave model of `physics.gemm` when the shape is known (a measured
    GEMM table instead for 16-bit GEMMs where the GPU has one), else the roofline; plus the launch
    gap."""
    return gemms_s((g,), gpu, precision)[0]


# GEMMs whose broadcast shape has at most this many elements are priced in one stacked call of
# the tile model (a layer's dozen GEMMs cost one call's numpy overhead instead of twelve); larger
# ones one by one, where stacking would broadcast their scalar dimensions to full arrays.
STACK_MAX_ELEMENTS = 4096


def gemms_s(gs: Sequence[Gemm], gpu: Gpu, precision: str) -> list[Number]:
    """`gemm_s` of each GEMM, all in one precision; the same numbers as one call each (the model
    is elementwise), with the small ones priced together (STACK_MAX_ELEMENTS)."""
    out: list[Number] = [0.0] * len(gs)
    shaped = []
    for i, g in enumerate(gs):
        if np.all(np.asarray(g.m) == 0):
            out[i] = roofline_s(g.flops, g.bytes, gpu, precision)
        else:
            shaped.append(i)
    if not shaped:
        return out
    fields = [(gs[i].m, gs[i].n, gs[i].k, gs[i].batch, gs[i].operand_bytes, gs[i].out_bytes) for i in shaped]
    # each GEMM's time takes the shape of its fields and the GPU's (a calibration's GPU may hold arrays)
    read = (gpu.peak_flops_per_s(precision), gpu.matmul_efficiency_for(precision), gpu.memory_bandwidth_bytes_per_s)
    by_gpu = [np.shape(x) for x in (*read, gpu.memory_efficiency, gpu.sm_count, gpu.kernel_launch_s)]
    owns = [np.broadcast_shapes(*by_gpu, *(np.shape(x) for x in f)) for f in fields]
    shape = np.broadcast_shapes(*owns)
    if len(shaped) > 1 and int(np.prod(shape)) <= STACK_MAX_ELEMENTS:
        stacked = np.empty((6, len(fields), *shape))
        for row, f in enumerate(fields):
            for j, x in enumerate(f):
                stacked[j, row] = x
        times = _shaped_s(*stacked, gpu, precision)
        for row, (i, own) in enumerate(zip(shaped, owns, strict=True)):
            lead = (0,) * (len(shape) - len(own))
            out[i] = times[(row, *lead, *(slice(0, 1) if d == 1 else slice(None) for d in own))]
    else:
        for i, f in zip(shaped, fields, strict=True):
            out[i] = _shaped_s(*f, gpu, precision)
    return out


def _shaped_s(
    m: Number, n: Number, k: Number, batch: Number, operand_bytes: Number, out_bytes: Number, gpu: Gpu, precision: str
) -> Number:
    """A GEMM of known shape: the tile model, or the GPU's measured table in 16 bits; plus the
    launch gap."""
    peak, eff = gpu.peak_flops_per_s(precision), gpu.matmul_efficiency_for(precision)
    if gpu.gemm_table is not None and precision in SIXTEEN_BIT:
        bw = gpu.memory_bandwidth_bytes_per_s * gpu.memory_efficiency
        roof = (operand_bytes + m * n * batch * out_bytes) / bw
        return table_time_s(gpu.gemm_table, m, n, k, batch, roof, peak, eff) + gpu.kernel_launch_s
    return gemm_time_s(m, n, k, batch, operand_bytes, out_bytes, gpu, peak, eff) + gpu.kernel_launch_s


def attention_precision(precision: str) -> str:
    """Attention runs in 16 bits when training in FP8 (Transformer Engine's FP8 recipes cast the
    linear layers' inputs; its fused attention stays BF16 unless FP8 attention is asked for)."""
    return "bf16" if is_narrow(precision) else precision


@dataclass(frozen=True)
class GemmTimes:
    """One linear layer's three GEMMs on one GPU: forward Y = XW, input gradient dX = dY W^T,
    weight gradient dW = X^T dY (accumulated into the fp32 main_grad or written in 16 bits)."""

    forward_s: Number
    input_grad_s: Number
    weight_grad_s: Number


@dataclass(frozen=True)
class LayerTimes:
    """Forward / backward / recompute times of one layer on one GPU, split by kind of work.

    Seconds, arrays broadcast with the inputs. The four linear layers carry their own GEMM times
    (forward, input gradient, weight gradient) so that each TP collective can overlap only its
    own GEMM. `attention_core_s` is what selective recomputation redoes. `cast_*_s` are FP8
    quantisation kernels (0 in 16-bit training).
    """

    qkv: GemmTimes
    proj: GemmTimes
    up: GemmTimes
    down: GemmTimes
    attention_s: Number
    attention_bwd_s: Number
    elementwise_s: Number
    elementwise_bwd_s: Number
    attention_core_s: Number
    cast_f_s: Number = 0.0
    cast_b_s: Number = 0.0
    extra: GemmTimes = GemmTimes(0.0, 0.0, 0.0)  # the other linear layers together (`LayerForward.extra`)

    @property
    def linears(self) -> tuple[GemmTimes, ...]:
        return (self.qkv, self.proj, self.up, self.down, self.extra)

    @property
    def gemm_s(self) -> Number:
        """The forward GEMMs."""
        return sum(g.forward_s for g in self.linears)

    @property
    def weight_grad_s(self) -> Number:
        """The weight-gradient GEMMs (what ZB-H1 defers)."""
        return sum(g.weight_grad_s for g in self.linears)

    @property
    def forward_s(self) -> Number:
        return self.gemm_s + self.attention_s + self.elementwise_s + self.cast_f_s

    @property
    def backward_s(self) -> Number:
        grads = sum(g.input_grad_s + g.weight_grad_s for g in self.linears)
        return grads + self.attention_bwd_s + self.elementwise_bwd_s + self.cast_b_s


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
ROWWISE_CAST_BYTES_PER_ELEMENT = {"fp8": 3.0, "mxfp8": 3.0 + 1.0 / 32.0}


# NVFP4: 4-bit values with one FP8 (E4M3) scale per 16 (NVIDIA's NVFP4 format): 0.5 + 1/16 bytes per
# element. Serving quantises each linear layer's input once (read 2 bytes, write 0.5625).
NVFP4_BYTES_PER_ELEMENT = 0.5 + 1.0 / 16.0
FP4_CAST_BYTES_PER_ELEMENT = 2.0 + NVFP4_BYTES_PER_ELEMENT


def cast_bytes_per_element(precision: str) -> float:
    """Bytes moved to quantise one 16-bit element (FP8: in both layouts; 0 in 16 bits)."""
    casts = {
        "fp8": FP8_CAST_BYTES_PER_ELEMENT,
        "mxfp8": MXFP8_CAST_BYTES_PER_ELEMENT,
        "fp4": FP4_CAST_BYTES_PER_ELEMENT,
    }
    return casts.get(precision, 0.0)


# Weight gradient accumulated into Megatron's fp32 main_grad inside the GEMM (gradient
# accumulation fusion, `fused_weight_gradient_mlp_cuda.wgrad_gemm_accum_fp32` in
# megatron/core/tensor_parallel/layers.py): 4 bytes read + 4 written per weight; without it the
# GEMM writes a 16-bit gradient and a separate kernel adds it to main_grad (read 2 + 4, write 4).
FUSED_ACCUMULATE_BYTES = 8.0
UNFUSED_GRAD_BYTES = 2.0
UNFUSED_ACCUMULATE_BYTES = 10.0


def linear_times(
    g: Gemm,
    gpu: Gpu,
    precision: str,
    fused_accumulation: Number = True,
    accumulate_bytes: Number = UNFUSED_ACCUMULATE_BYTES,
) -> GemmTimes:
    """Forward, input-gradient and weight-gradient GEMMs of one linear layer."""
    return linears_times((g,), gpu, precision, fused_accumulation, accumulate_bytes)[0]


def linears_times(
    gs: Sequence[Gemm],
    gpu: Gpu,
    precision: str,
    fused_accumulation: Number = True,
    accumulate_bytes: Number = UNFUSED_ACCUMULATE_BYTES,
    fp8_recipe: str = "te",
) -> list[GemmTimes]:
    """`linear_times` of each linear layer, their GEMMs priced together (`gemms_s`); without
    fused accumulation a separate kernel adds the 16-bit gradient to the fp32 accumulator,
    moving `accumulate_bytes` per weight (`physics.microbatch`). A torchao FP8 recipe's GEMMs as
    `physics.fp8_recipes` describes them."""
    if is_fp8(precision) and fp8_recipes.is_torchao(fp8_recipe):
        return _torchao_linears_times(gs, gpu, precision, fused_accumulation, accumulate_bytes, fp8_recipe)
    fused = np.asarray(fused_accumulation, dtype=bool)
    if is_fp8(precision):  # operands read as 1-byte FP8, outputs in 16 bits
        gs = [g._replace(a_bytes=1.0, b_bytes=1.0) for g in gs]
    elif precision == "fp4":  # activations quantised to NVFP4; the weights as stored
        gs = [g._replace(a_bytes=NVFP4_BYTES_PER_ELEMENT) for g in gs]
    # one framework for all plans (a scalar): price only its kind of weight-gradient accumulation
    kinds = [bool(fused)] if fused.ndim == 0 else [True, False]
    accumulate = {True: FUSED_ACCUMULATE_BYTES, False: UNFUSED_GRAD_BYTES}
    per_layer = [(g, input_gradient(g), *(weight_gradient(g, accumulate[kind]) for kind in kinds)) for g in gs]
    times = gemms_s([x for layer in per_layer for x in layer], gpu, precision)
    per = 2 + len(kinds)  # forward, input gradient, one weight gradient per kind
    out = []
    for i, g in enumerate(gs):
        fwd, dx, *dw = times[i * per : (i + 1) * per]
        if False in kinds:  # the 16-bit gradient is added to main_grad by a separate kernel
            plain = kinds.index(False)
            dw[plain] = dw[plain] + memory_s(accumulate_bytes * g.batch * g.k * g.n, gpu)
        out.append(GemmTimes(fwd, dx, dw[0] if len(dw) == 1 else np.where(fused, dw[0], dw[1])))
    return out


def _torchao_linears_times(
    gs: Sequence[Gemm],
    gpu: Gpu,
    precision: str,
    fused_accumulation: Number,
    accumulate_bytes: Number,
    recipe: str,
) -> list[GemmTimes]:
    """torchao.float8's GEMMs (`physics.fp8_recipes`): row-wise scales' CUTLASS forward at
    ROWWISE_FORWARD_FRACTION of cuBLAS, the weight gradient rescaled by hand, or computed in 16
    bits (rowwise_with_gw_hp)."""
    out = linears_times(gs, gpu, precision, fused_accumulation, accumulate_bytes)
    if not fp8_recipes.rowwise_gemms(recipe, precision):
        return out
    if fp8_recipes.sixteen_bit_weight_gradient(recipe, precision):
        wgrad = [t.weight_grad_s for t in linears_times(gs, gpu, "bf16", fused_accumulation, accumulate_bytes)]
    else:
        wgrad = [t.weight_grad_s for t in out]
    kernels = 1 if recipe == "rowwise" else 0  # the rescale (rowwise_with_gw_hp: none)
    rescale = [memory_s(fp8_recipes.rescale_bytes(recipe, precision, g.batch * g.k * g.n), gpu, kernels) for g in gs]
    return [
        GemmTimes(t.forward_s / fp8_recipes.ROWWISE_FORWARD_FRACTION, t.input_grad_s, w + r)
        for t, w, r in zip(out, wgrad, rescale, strict=True)
    ]


def cast_times(fwd: LayerForward, gpu: Gpu, bytes_per_element: float) -> tuple[Number, Number]:
    """(forward, backward) seconds of quantising each linear layer's input and output gradient,
    `bytes_per_element` moved per 16-bit element (`cast_bytes_per_element`)."""
    mlp = np.asarray(fwd.has_mlp, dtype=float)
    gemms = (*fwd.gemms, *fwd.extra)
    on = (1.0, 1.0, mlp, mlp) + (1.0,) * len(fwd.extra)
    inputs = sum(w * g.m * g.k * g.batch for w, g in zip(on, gemms, strict=True))
    outputs = sum(g.m * g.n * g.batch for g in gemms)
    return (
        memory_s(bytes_per_element * inputs, gpu, kernels=len(gemms)),
        memory_s(bytes_per_element * outputs, gpu, kernels=len(gemms)),
    )


def torchao_cast_times(fwd: LayerForward, gpu: Gpu, precision: str, recipe: str) -> tuple[Number, Number]:
    """(forward, backward) seconds of a torchao recipe's casts in one layer and micro-batch: each
    linear layer's input, output gradient and weight (`physics.fp8_recipes.cast_bytes`), two
    kernels (the absolute maximum, the cast) per tensor and pass."""
    mlp = np.asarray(fwd.has_mlp, dtype=float)
    gemms = (*fwd.gemms, *fwd.extra)
    on = (1.0, 1.0, mlp, mlp) + (1.0,) * len(fwd.extra)
    inputs = sum(w * g.m * g.k * g.batch for w, g in zip(on, gemms, strict=True))
    outputs = sum(w * g.m * g.n * g.batch for w, g in zip(on, gemms, strict=True))
    weights = sum(w * g.k * g.n * g.batch for w, g in zip(on, gemms, strict=True))
    a_in, a_out, w_f, w_b = fp8_recipes.cast_bytes(recipe, precision)
    kernels = 2 * 2 * len(gemms)
    return (
        memory_s(a_in * inputs + w_f * weights, gpu, kernels=kernels),
        memory_s(a_out * outputs + w_b * weights, gpu, kernels=kernels),
    )


def attention_relative_efficiency(gpu: Gpu, kernel: str) -> Number:
    """A fused attention kernel's forward efficiency relative to the GPU's GEMMs (`physics.stack`)."""
    if kernel in FLASH2_KERNELS:
        own = np.asarray(gpu.flash2_efficiency, dtype=float)
        upstream = np.where(own > 0, own, FLASH_RELATIVE_EFFICIENCY)
        if kernel == "sdpa-flash2":
            return upstream * sdpa_flash_fractions(gpu)[0]
        return upstream
    return FLASH_RELATIVE_EFFICIENCY


def sdpa_flash_fractions(gpu: Gpu) -> tuple[Number, Number]:
    """(forward, backward) speed of PyTorch SDPA's flash backend as a fraction of the flash-attn
    package's on this GPU (`SDPA_FLASH_FORWARD_FRACTION`): below 1 where FA2 has its own, lower
    efficiency (Hopper, Blackwell), 1 elsewhere; on ROCm AOTriton's against CK's
    (`AOTRITON_FORWARD_FRACTION`)."""
    if gpu.sdpa_flash_backend == "aotriton":
        return AOTRITON_FORWARD_FRACTION, AOTRITON_BACKWARD_FRACTION
    hopper = np.asarray(gpu.flash2_efficiency, dtype=float) > 0
    return np.where(hopper, SDPA_FLASH_FORWARD_FRACTION, 1.0), np.where(hopper, SDPA_FLASH_BACKWARD_FRACTION, 1.0)


def attention_backward_relative_efficiency(gpu: Gpu, kernel: str) -> Number:
    """The efficiency, relative to the GPU's GEMMs, at which `layer_times` prices a fused attention
    kernel's backward (FLASH_BACKWARD_RATIO x the forward's FLOPs): the forward's, or for
    FlashAttention-2 where the GPU carries a backward figure of its own (`flash2_backward_efficiency`,
    `FLASH_BACKWARD_FLOPS`) that one; SDPA's build times its backward fraction."""
    forward = attention_relative_efficiency(gpu, kernel)
    if kernel not in FLASH2_KERNELS:
        return forward
    f_frac, b_frac = sdpa_flash_fractions(gpu) if kernel == "sdpa-flash2" else (1.0, 1.0)
    own = np.asarray(gpu.flash2_backward_efficiency, dtype=float)
    upstream = np.where(own > 0, own * FLASH_BACKWARD_RATIO / FLASH_BACKWARD_FLOPS, forward / np.asarray(f_frac))
    return upstream * b_frac


def torch_ring_s(fwd: LayerForward, gpu: Gpu) -> tuple[Number, Number]:
    """(forward, backward) seconds of PyTorch's eager ring bookkeeping in one layer: per ring step
    after the first and once per layer, the bytes per element of the rank's attention output that
    `physics.attention` counts (0 without context parallelism)."""
    from shardwise.physics import attention as at

    steps = np.maximum(np.asarray(fwd.cp, dtype=float) - 1, 0.0)
    out = fwd.attn_out.m * fwd.attn_out.k  # tokens x the rank's query heads x head dim
    on = steps > 0
    f_bytes = steps * at.TORCH_RING_FORWARD_BYTES + at.TORCH_RING_FORWARD_LAYER_BYTES
    b_bytes = steps * at.TORCH_RING_BACKWARD_BYTES + at.TORCH_RING_BACKWARD_LAYER_BYTES
    f_kernels = steps * at.TORCH_RING_FORWARD_KERNELS + at.TORCH_RING_FORWARD_LAYER_KERNELS
    b_kernels = steps * at.TORCH_RING_BACKWARD_KERNELS + at.TORCH_RING_BACKWARD_LAYER_KERNELS
    forward, backward = memory_s(f_bytes * out, gpu, f_kernels), memory_s(b_bytes * out, gpu, b_kernels)
    return np.where(on, forward, 0.0), np.where(on, backward, 0.0)


def layer_times(
    fwd: LayerForward,
    gpu: Gpu,
    precision: str,
    flash: Number,
    fused_accumulation: Number = True,
    attention_kernel: str = "fused",
    eager: Number = False,
    accumulate_bytes: Number = UNFUSED_ACCUMULATE_BYTES,
    fp8_recipe: str = "te",
) -> LayerTimes:
    """Times of every kernel of one layer (see the module docstring for the ratios); the
    attention kernel and eager element-wise kernels as `physics.stack` describes."""
    flash = np.asarray(flash, dtype=bool)
    qkv, proj, up, down, *extra = linears_times(
        (*fwd.gemms, *fwd.extra), gpu, precision, fused_accumulation, accumulate_bytes, fp8_recipe
    )
    mlp = np.asarray(fwd.has_mlp, dtype=float)
    if not np.all(mlp == 1.0):  # no dense MLP: nothing to time
        up, down = (GemmTimes(*(mlp * x for x in (g.forward_s, g.input_grad_s, g.weight_grad_s))) for g in (up, down))
    others = GemmTimes(*(sum(getattr(g, f) for g in extra) for f in ("forward_s", "input_grad_s", "weight_grad_s")))
    attn_p = attention_precision(precision)
    softmax = memory_s(fwd.softmax_bytes, gpu, kernels=SOFTMAX_KERNELS)
    scores, context = gemms_s((fwd.scores, fwd.context), gpu, attn_p)
    bmm = scores + context
    relative = attention_relative_efficiency(gpu, attention_kernel)
    # the fused kernel below its plateau: short sequences, the causal mask, ring steps (`physics.attention`)
    s_q, s_kv = fwd.scores.m, fwd.scores.n
    if fwd.document_len is not None:  # packed sequences: L-token causal calls (`physics.flops.layer_forward`)
        s_q = s_kv = fwd.document_len
    worked = fwd.flash.flops * fwd.causal_fraction
    fused = roofline_s(worked, fwd.flash.bytes, gpu, attn_p, relative / forward_slowdown(s_q, s_kv, fwd.cp))
    relative_bwd = attention_backward_relative_efficiency(gpu, attention_kernel)
    fused_bwd = roofline_s(worked, fwd.flash.bytes, gpu, attn_p, relative_bwd / backward_slowdown(s_q, s_kv, fwd.cp))
    attention = np.where(flash, fused, bmm + softmax)
    elementwise = memory_s(fwd.elementwise_bytes, gpu, fwd.elementwise_kernels)
    eager = np.asarray(eager, dtype=bool)
    if np.any(eager) and fwd.eager_elementwise_bytes is not None:
        from shardwise.physics.stack import EAGER_ELEMENTWISE_KERNELS

        unfused = memory_s(fwd.eager_elementwise_bytes, gpu, EAGER_ELEMENTWISE_KERNELS)
        elementwise = np.where(eager, unfused, elementwise)
    attention_bwd = np.where(
        flash, FLASH_BACKWARD_RATIO * fused_bwd, BACKWARD_GEMM_RATIO * bmm + BACKWARD_MEMORY_RATIO * softmax
    )
    if attention_kernel in FLASH2_KERNELS and np.any(np.asarray(fwd.cp) > 1):  # PyTorch's ring (`physics.attention`)
        ring_f, ring_b = torch_ring_s(fwd, gpu)
        attention, attention_bwd = attention + ring_f, attention_bwd + ring_b
    cast_f = cast_b = 0.0
    if is_fp8(precision) and fp8_recipes.is_torchao(fp8_recipe):
        cast_f, cast_b = torchao_cast_times(fwd, gpu, precision, fp8_recipe)
    elif is_narrow(precision):
        cast_f, cast_b = cast_times(fwd, gpu, cast_bytes_per_element(precision))
    return LayerTimes(
        qkv=qkv,
        proj=proj,
        up=up,
        down=down,
        attention_s=attention,
        attention_bwd_s=attention_bwd,
        elementwise_s=elementwise,
        elementwise_bwd_s=BACKWARD_MEMORY_RATIO * elementwise,
        # Selective recomputation redoes the attention core: its score matrices with standard
        # attention; with a fused (flash) kernel, its forward again -- Megatron-Core checkpoints
        # the core attention module whatever its kernel (transformer/attention.py,
        # `_checkpointed_attention_forward`: tensor_parallel.checkpoint reruns the forward before
        # the backward). Megatron-Bridge's Moonlight 16B study measures +3.9% a step for `core_attn`
        # under fused attention (skills/nemo-mbridge-perf-activation-recompute/SKILL.md).
        attention_core_s=np.where(flash, attention, bmm + softmax),
        cast_f_s=cast_f,
        cast_b_s=cast_b,
        extra=others,
    )
