"""LoRA fine-tuning (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models"): the
base weights are frozen and each target linear layer Y = X W gets a trainable low-rank update,
Y = X W + (X A) B with A (k x r) and B (r x n), as Megatron-Bridge's `LoRA` PEFT adds it
(src/megatron/bridge/peft/lora.py: targets linear_qkv, linear_proj, linear_fc1 and linear_fc2,
rank `dim` 32 by default; the adapters are separate linear layers beside the base one,
`ParallelLinearAdapter`, in the model's 16-bit dtype). `Plan.lora_targets` narrows the targets as
`target_modules` does: NeMo 1's default was the QKV layer alone (nemo/collections/nlp/parts/
peft_config.py, `get_target_modules(default=("attention_qkv",))`), and NeMo 2's and Megatron-
Bridge's performance recipes set `target_modules = ["linear_qkv"]` (NeMo v2.1.0 recipes/llama3_8b.py
`finetune_performance_optimizations`; Megatron-Bridge v0.5.0 scripts/performance/configs/llama/
llama3_llm_finetune.py). A layer without an adapter is frozen all the same.

What changes against full training, per layer and GPU:
- the base linear layers compute no weight gradient (frozen); their input gradient stays, since
  the loss gradient must reach the layers below;
- each adapter adds two skinny GEMMs forward (m x k by k x r, then m x r by r x n, in the base
  layer's local shapes: under TP the adapter of a column-parallel layer splits B, of a row-parallel
  one A, as the base splits its weight), their input and weight gradients backward, and the
  memory-bound add of its output into the base output (read two, write one m x n tensor; in the
  backward the same for the input gradient, m x k);
- in FP8 the frozen layers quantise their input and output gradient row-wise only (Transformer
  Engine makes the column-wise copies for the weight gradient alone);
- only the adapters' parameters r (k + n) per target have gradients, optimizer state, a data-
  parallel gradient reduction and an optimizer update; the output layer and the embedding are
  frozen too.
Activation memory is kept as in full training (the adapters keep their own inputs, and whether the
frozen layers drop theirs depends on the framework).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from shardwise.arrays import any_true, as_array
from shardwise.physics.casts import Returned, cast_kernels_per_tensor, norm_writes_fp8
from shardwise.physics.compute import (
    FUSED_ACCUMULATE_BYTES,
    ROWWISE_CAST_BYTES_PER_ELEMENT,
    UNFUSED_ACCUMULATE_BYTES,
    GemmTimes,
    LayerTimes,
    attention_precision,
    cast_times,
    memory_s,
    roofline_s,
)
from shardwise.physics.flops import Gemm, LayerForward, gemm, input_gradient, layer_forward, weight_gradient
from shardwise.specs import Gpu, Model
from shardwise.specs._checks import Number
from shardwise.specs.plan_fields import LORA_TARGETS

# Megatron-Bridge LoRA defaults (src/megatron/bridge/peft/lora.py): rank `dim` = 32.
DEFAULT_RANK = 32
# One add of the adapter's output into the base output forward, of its input gradient backward.
ADD_BYTES_PER_ELEMENT = 3.0
# Megatron-Bridge's default `target_modules` (peft/lora.py), in `Plan.lora_targets` names.
DEFAULT_TARGETS = ",".join(LORA_TARGETS)


def adapter_times(gs: list[Gemm], gpu: Gpu, precision: str, fused_accumulation: Number = True) -> list[GemmTimes]:
    """Forward, input- and weight-gradient seconds of the adapters' skinny GEMMs, each a roofline
    (its FLOPs at the GPU's GEMM efficiency or its bytes at the streaming efficiency, whichever is
    longer, plus the launch gap), not the output-tile model of `physics.gemm`.

    Why: one side of every adapter GEMM is the rank r (32 by default): X A reads m x k and
    does 2 r FLOPs per element read, (X A) B writes m x n at 2 r FLOPs each, and their gradients
    likewise, so the arithmetic intensity is about r FLOP per byte, far under the ridge point
    (H100 SXM: 989 TFLOP/s / 3.35 TB/s = 295 FLOP/byte): they are memory-bound. The libraries
    run them with a tile as narrow as the rank (Hopper's wgmma takes N = 8-256 in steps of 8, so
    CUTLASS and cuBLAS have 128 x 32 and 64 x 32 tiles; persistent kernels overlap a tile's loads
    with the previous tile's epilogue), streaming the wide operand once; the tile model's
    128-wide tiles would charge 128 / r times the FLOPs and a fill per wave of short-K tiles."""
    fused = np.asarray(fused_accumulation, dtype=bool)
    accumulate = np.where(fused, FUSED_ACCUMULATE_BYTES, UNFUSED_ACCUMULATE_BYTES)

    def roof(g: Gemm) -> Number:
        return roofline_s(g.flops, g.bytes, gpu, precision)

    return [GemmTimes(roof(g), roof(input_gradient(g)), roof(weight_gradient(g, accumulate))) for g in gs]


def adapter_gemms(g: Gemm, rank: Number, e: float) -> tuple[Gemm, Gemm]:
    """A and B of the adapter beside the base GEMM `g` (its local shape), in `e`-byte elements."""
    return gemm(g.m, rank, g.k, e, g.batch), gemm(g.m, g.n, rank, e, g.batch)


def target_weights(fwd: LayerForward, targets: str = DEFAULT_TARGETS) -> tuple[Number, Number, Number, Number]:
    """1 where the layer's QKV, proj, MLP up (fc1) and MLP down (fc2) carry an adapter, else 0
    (`targets` as `Plan.lora_targets`; an MLP that is not dense has no fc1 / fc2 adapters)."""
    mlp = np.asarray(fwd.has_mlp, dtype=float)
    named = set(targets.split(","))
    on = [1.0 if name in named else 0.0 for name in LORA_TARGETS]
    return on[0], on[1], on[2] * mlp, on[3] * mlp


def adapter_params(fwd: LayerForward, rank: Number, targets: str = DEFAULT_TARGETS) -> Number:
    """The adapters' parameters of one layer on one GPU: r (k + n) per target, in local shapes."""
    weights = target_weights(fwd, targets)
    return rank * sum(w * (g.k + g.n) for w, g in zip(weights, fwd.gemms, strict=True))


def layer_adapter_params(
    model: Model, tp: Number, rank: Number, bytes_per_element: float, targets: str = DEFAULT_TARGETS
) -> Number:
    """`adapter_params` of one dense layer of `model` under `tp`."""
    return adapter_params(layer_forward(model, 1, tp, False, bytes_per_element), rank, targets)


def trainable_params(
    model: Model,
    tp: Number,
    rank: Number,
    bytes_per_element: float,
    layers: Number,
    params: Number,
    targets: str = DEFAULT_TARGETS,
) -> Number:
    """What has gradients and optimizer state on a GPU holding `layers` layers and `params`
    parameters: the adapters under LoRA (`rank` > 0), all of `params` otherwise."""
    rank = as_array(rank)
    if not any_true(rank > 0):
        return params
    return np.where(rank > 0, layers * layer_adapter_params(model, tp, rank, bytes_per_element, targets), params)


def norm_returned(fwd: LayerForward, rank: Number, targets: str = DEFAULT_TARGETS) -> Returned:
    """(QKV, MLP up) where LoRA wraps the norm-fed linear layer and so has Transformer Engine return
    its norm's output in 16 bits (`physics.casts.Returned`: PEFT sets `return_layernorm_output` on a
    TELayerNormColumnParallelLinear with an adapter): under FP8 delayed scaling that norm writes no
    FP8 tensor and the layer casts its input (proj and fc2 adapters leave the norms as they are)."""
    on = (np.asarray(rank, dtype=float) > 0).astype(float)
    qkv, _, up, _ = target_weights(fwd, targets)
    return on * qkv, on * up


def lora_sp_gathers(
    fwd: LayerForward,
    rank: Number,
    targets: str,
    userbuffers: Number,
    gather_in: Number,
    gather_16bit: Number,
    gather_wgrad: Number,
) -> tuple[Number, Number, Number]:
    """Seconds of the sequence-parallel all-gathers in front of QKV and MLP up in the forward pass,
    and of the backward re-gather of their input for the weight gradient, under LoRA (`rank` > 0;
    `gather_in`, `gather_wgrad` as full training has them; `gather_16bit`: one gather of the 16-bit
    activation).

    - Backward: the base weights are frozen, so no weight gradient needs the gathered input and
      Transformer Engine's LayerNormLinear and Linear do not re-gather it (TE v1.13 layernorm_linear.py
      backward: `if weight.requires_grad and ... sequence_parallel: gather_along_first_dim(ln_out, ...)`;
      TE d0067d0: `ctx.ln_out_needs_gather = weight.requires_grad and parallel_mode == "column" and
      sequence_parallel`); PyTorch's own linears keep the gathered input only where the weight has a
      gradient. Nothing in the layer's backward replaces it: the adapter's A keeps its own input.
    - Forward, without userbuffers: PEFT has the wrapped norm-fed layer return its norm output
      gathered (`return_layernorm_output_gathered`, Megatron-Bridge src/megatron/bridge/peft/utils.py
      @067f987 `get_adapter_attributes_from_linear`: sequence parallel and not `ub_overlap_ag`, TE >=
      1.5, then `disable_sequence_parallel_comm = True`: the adapter does not gather again), and
      Transformer Engine then gathers the norm output in 16 bits and casts the gathered tensor (TE
      v1.13: `ln_out` is 16-bit under `return_layernorm_output`, `gather_along_first_dim(ln_out)`, then
      `cast_to_fp8(ln_out_total)`; TE d0067d0: "Perform all-gather in high precision if gathered norm
      output will be returned"): one all-gather still, at 16 bits where the recipe would gather FP8.
      With userbuffers the adapter gathers on its own (not priced here; `gather_in` is kept).
    The adapter's input gradient is added to the base layer's before its one reduce-scatter (TE v1.13
    `dgrad = dgrad + grad_outputs[1]` ahead of `reduce_scatter_along_first_dim`): no collective more."""
    on = np.asarray(rank, dtype=float) > 0
    qkv, up = norm_returned(fwd, rank, targets)
    plain = on & ~np.asarray(userbuffers, dtype=bool)
    gather_q = np.where(plain & (np.asarray(qkv) > 0), gather_16bit, gather_in)
    gather_u = np.where(plain & (np.asarray(up) > 0), gather_16bit, gather_in)
    return gather_q, gather_u, np.where(on, 0.0, gather_wgrad)


def lora_layer_times(
    lt: LayerTimes,
    fwd: LayerForward,
    rank: Number,
    gpu: Gpu,
    precision: str,
    fused_accumulation: Number = True,
    targets: str = DEFAULT_TARGETS,
    fp8_recipe: str = "te",
) -> LayerTimes:
    """`lt` with the base weight gradients gone and the adapters' work added (in `extra`) where
    `rank` > 0 -- on the layers `targets` names; unchanged where it is 0 (full training). The frozen
    layers' casts write the row-wise copy alone; where the norm writes the FP8 input itself
    (`fp8_recipe`, `physics.casts.norm_writes_fp8`) the inputs it feeds are not cast, except those of
    the QKV and MLP-up layers LoRA wraps (`norm_returned`: their norm writes 16 bits; `lt` comes from
    `physics.compute.layer_times` with the same `norm_returned`)."""
    rank = np.asarray(rank, dtype=float)
    if not np.any(rank > 0):
        return lt
    on = (rank > 0).astype(float)
    e = 2.0  # the adapters run in 16 bits
    shapes = [(g, w) for g, w in zip(fwd.gemms, target_weights(fwd, targets), strict=True)]
    adapters = [a for g, _ in shapes for a in adapter_gemms(g, np.maximum(rank, 1.0), e)]
    times = adapter_times(adapters, gpu, attention_precision(precision), fused_accumulation)
    weights = [w for _, w in shapes for _ in range(2)]
    adds_f = sum(w * memory_s(ADD_BYTES_PER_ELEMENT * e * g.m * g.n * g.batch, gpu) for g, w in shapes)
    adds_b = sum(w * memory_s(ADD_BYTES_PER_ELEMENT * e * g.m * g.k * g.batch, gpu) for g, w in shapes)

    def total(field: str) -> Number:
        return sum(w * getattr(t, field) for w, t in zip(weights, times, strict=True))

    frozen = 1.0 - on
    extra = GemmTimes(  # the other linear layers (frozen too) and the adapters
        lt.extra.forward_s + on * (total("forward_s") + adds_f),
        lt.extra.input_grad_s + on * (total("input_grad_s") + adds_b),
        frozen * lt.extra.weight_grad_s + on * total("weight_grad_s"),
    )

    def base(g: GemmTimes) -> GemmTimes:
        return GemmTimes(g.forward_s, g.input_grad_s, frozen * g.weight_grad_s)

    cast_f, cast_b = lt.cast_f_s, lt.cast_b_s
    if precision in ROWWISE_CAST_BYTES_PER_ELEMENT:  # FP8, NVFP4 without wgrad: row-wise copies only
        row_f, row_b = cast_times(
            fwd, gpu, ROWWISE_CAST_BYTES_PER_ELEMENT[precision], cast_kernels_per_tensor(precision),
            norm_fp8=norm_writes_fp8(precision, fp8_recipe), norm_returned=norm_returned(fwd, rank, targets),
        )  # fmt: skip
        cast_f, cast_b = frozen * cast_f + on * row_f, frozen * cast_b + on * row_b
    return replace(
        lt,
        qkv=base(lt.qkv),
        proj=base(lt.proj),
        up=base(lt.up),
        down=base(lt.down),
        extra=extra,
        cast_f_s=cast_f,
        cast_b_s=cast_b,
    )
