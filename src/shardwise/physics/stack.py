"""What the software stack changes in one layer's work: the attention kernel, element-wise work
run as separate eager kernels, the host time to issue kernels, and what "selective" recomputation
recomputes. Every number is a count of bytes or kernels read off the stacks' own code, or a
microbenchmark (docs/gpu_microbench.md); none is fitted to a training run.

Element-wise work (per element of the tensor it works on, e = 2 bytes for bf16):

=========================  ==========================  ==============================================
op                         fused (Megatron-Core, TE,    eager PyTorch, one kernel per op (torchtitan
                           Apex; torch.compile fuses     without compile, HF Transformers, FSDP
                           the same chains)              trainers): ops of the reference code
=========================  ==========================  ==============================================
RMSNorm                    read x, write y: 2e          x.float() (e+4), pow (4+4), mean (4), mul by
                                                        rsqrt (4+4), .type_as (4+e), * weight (e+e):
                                                        36 bytes (HF LlamaRMSNorm, torchtitan RMSNorm)
rotary embedding (q, k)    read, write: 2e              .float() (e+4), complex multiply (4+4),
                                                        .type_as (4+e): 20 bytes (torchtitan
                                                        apply_rotary_emb; HF rotate_half is 26)
gated MLP activation       read 2 f, write f: 3e        silu (e+e), multiply (2e+e): 5e
cross-entropy (per logit)  e + 12 (vocab-parallel,      .float() (e+4), log_softmax (4+4), backward
                           fused passes)                softmax (4+4), .to(bf16) (4+e): 28 + 2e - 2e
=========================  ==========================  ==============================================

Residual adds are one kernel either way (read 2, write 1).

torch.compile (TorchInductor, torchtitan's `--compile`) fuses the norms, the gated activation and
(torchtitan from 2025-04, `build_cross_entropy_loss`) the loss, but not torchtitan's rotary
embedding: `apply_rotary_emb` multiplies complex tensors (`torch.view_as_complex`), and Inductor
generates no code for complex dtypes (torch/_inductor/lowering.py `unsupported_input_tensor`:
"Torchinductor does not support code generation for complex operators", the warning
pytorch/torchtitan#15 reports for this function), so the complex multiply runs as its ATen kernel
between two Inductor casts: `.float()` (e+4), the complex multiply (4+4), `.type_as` (4+e), the
eager 20 bytes per element in three kernels per tensor (`eager_rotary`). The matmuls stay cuBLAS
(`aten.mm` is an extern kernel without max-autotune) and attention stays SDPA's kernel.

The backward of eager element-wise work moves BACKWARD_MEMORY_RATIO x its forward bytes, as the
fused kernels do.

Attention kernels, forward efficiency relative to the GPU's GEMM efficiency: "fused" is what
Megatron-Core runs through Transformer Engine (cuDNN fused attention; on Ampere the same
FlashAttention-2 code path), `physics.attention_kernels.FLASH_RELATIVE_EFFICIENCY`; "flash2" is
FlashAttention-2 (the flash-attn package), whose Ampere kernels do
not use Hopper's warp-group MMA and TMA: on Hopper it reaches a smaller fraction of peak, the
GPU's `flash2_efficiency` (gpus.yaml, microbenchmarked); "sdpa-flash2" is PyTorch SDPA's own build of
it, slower again on Hopper (`physics.attention_kernels.SDPA_FLASH_FORWARD_FRACTION`).

Selective recomputation: "attention" (Megatron-LM, Korthikanti et al. 2022) recomputes the
attention core only; "op" (torchtitan's op-level selective activation checkpointing,
torchtitan/models/llama3/infra/parallelize.py `_op_sac_save_list`) saves the output of the
matrix multiplies and attention except every second matrix multiply of a layer, and recomputes
all element-wise work: with torchtitan's separate wq, wk, wv, wo, w1, w3, w2 the 2nd, 4th and 6th
(wk, wo, w3; for a plain GELU MLP wk, wo, w2).

Per-parameter sharding (PyTorch FSDP2, `fully_shard`; torchtitan, torchtune, OLMo-core,
Accelerate's FSDP2): every parameter is its own DTensor shard, so the bytes an all-gather
returns, interleaved rank by rank, are not the parameters. FSDP2 copies them out
(`split_with_sizes_copy`, pytorch/pytorch #117203 and #119451: "the performance of
all-gather-copy-out is crucial for the viability of per-parameter sharding FSDP") and copies
each gradient into the reduce-scatter's flat buffer (`chunk_cat`, cast to the reduce dtype).
Both run on the compute stream, on the critical path (pytorch/pytorch #157027:
`FSDP::all_gather_copy_out` and `FSDP::post_backward_reduce` "mainly memory copy without any
compute" in a Llama 3 70B trace on 8 GPUs); FSDP1 and DeepSpeed ZeRO-3 gather into a flat
buffer the parameters are views of, without these copies ("FSDP2 does extra device copies
compared to FSDP1/YaFSDP", A. Gu, yandex/YaFSDP#3). Per weight and micro-batch:

=========================  ===============================================  ==================
copy                       bytes per weight (16-bit weights w = 2, fp32      pass
                           reduce g = 4: torchtitan's mixed_precision_reduce)
=========================  ===============================================  ==================
forward all-gather out     read w + write w                                  forward
backward all-gather out    read w + write w (reshard_after_forward: the      backward
                           forward's gather was freed)
reduce-scatter copy-in     read the 16-bit gradient w + write g              backward
=========================  ===============================================  ==================

The copy into the all-gather's input (the fp32 shard cast to 16 bits, 1/dp of the weights)
runs on its own stream beside compute and is left out.

nanotron's host work per layer and micro-batch (huggingface/nanotron, main of February 2025,
commit 0e0a27ea, the Ultra-Scale Playbook's configuration: tp_mode REDUCE_SCATTER,
tp_linear_async_communication, accumulate_grad_in_fp32; src/nanotron/models/llama.py,
parallel/tensor_parallel/functional.py, optim/gradient_accumulator.py). Every linear layer is a
Python autograd.Function that splits its GEMM around an asynchronous collective; the norms and
the rotary embedding are flash-attn's Triton kernels; the layout between them is eager copies;
after every micro-batch's backward pass FP32GradientAccumulator adds each parameter's 16-bit
gradient into its fp32 buffer in a Python loop. Counted per layer with TP > 1 (tp = 1 has no
collectives: about 57 fewer), in units of one ATen op's host time (`host_kernel`, 10 us):

==============================  ====  =====  ===========  =====  ======  =========  ======
part                            ATen  light  collectives  waits  Triton  Functions  units
==============================  ====  =====  ===========  =====  ======  =========  ======
forward: 2 norms, QKV and the   37    41     4            4      4       8          91
gate/up column linears (3 GEMMs
each), q/k/v transposes, k/v
cat, rotary, cu_seqlens (6),
flash_attn_varlen, o/down row
linears, GLU, 2 residual adds,
12 nn.Module calls (6 units)
backward: autograd nodes, the   44    24     6            6      6       8          101
linears' Python backward (row:
all-gather then 3 + 1 GEMMs;
column: re-gather, reduce-
scatter), Triton norm/rotary
backward, flash backward
fp32 accumulation, 6 params:    6     24     0            0      0       0          13
add_, two .grad assignments
and the ZeRO-1 slice each
==============================  ====  =====  ===========  =====  ======  =========  ======

The same layer under nanotron's default linears (`ParallelismArgs`: tp_mode ALL_REDUCE,
tp_linear_async_communication False; parallel/tensor_parallel/functional.py `column_linear` and
`row_linear` without async, distributed_differentiable_primitives.py), counted as differences
from the table above (ATen, light, collectives, waits, Triton, Functions):

================================================================  ====================
what changes                                                      difference
================================================================  ====================
forward, QKV and gate/up column linears: DifferentiableIdentity   2 x (-3, -4, -1, -1,
and one F.linear, not an all-gather beside three torch.mm into     0, 0)
slices of an empty output (no split, no wait)
forward, o and down row linears: F.linear then                    2 x (-1, -1, 0, 0, 0,
DifferentiableAllReduceSum (a synchronous all_reduce in place),    -1)
not the async Function around F.linear and a reduce-scatter
Function with its contiguous and empty output
backward, column linears: autograd's linear backward (2 GEMMs)    2 x (-1, -4, -1, -2,
and the identity's backward applying an all-reduce, not the        0, +1)
re-gather, reduce-scatter and their two waits
backward, row linears: the all-reduce's backward passes the       2 x (-3, -7, -1, -1,
gradient through; autograd's linear backward, not the gathered     0, 0)
output gradient multiplied in three pieces
================================================================  ====================

Forward (29, 31, 2, 2, 4, 6) and 12 module calls: 72.3 units; backward (36, 2, 2, 0, 6, 10):
74.6; the fp32 accumulation unchanged: 13.2. 160 units (`NANOTRON_ALL_REDUCE_LAYER_HOST_OPS`),
the count of the preset's default mode; 206 where the plan runs sequence parallelism with
asynchronous linears (`presets.stack_defaults`). nanotron's synchronous REDUCE_SCATTER linears
(sequence parallelism without async) are counted as 160 too: one all-gather or reduce-scatter
Function around one GEMM, as the all-reduce ones.

Weights per unit: an ATen op (allocation, copy, GEMM, element-wise) 1; a light op (a view, a
.grad assignment) 0.3; a c10d collective call 2 (20 us, the PyTorch collective call's host
latency the link presets use); Work.wait 1; a Triton launch through flash-attn's Python
wrappers 4 (40 us: 40-62 us per launch with PyTorch 2.2's Triton, triton-lang/triton#3503;
108 -> 49 us in one benchmark after triton-lang/triton#3638, Triton 3.0); a Python
autograd.Function call 1. 206 units, 2.1 ms per layer and micro-batch at 10 us: about five times
the 42 kernels counted for a fused stack. The count is read off the code (within about 20%); the
unit is the larger uncertainty (5-25 us, `host_kernel`). Not measured: no GPU run sets it.

nanotron's element-wise work beside its fused norms and rotary (models/llama.py), bytes per token
on one TP rank beyond the fused path's (q, kv: the query and key/value widths over tp; f: the MLP
width over tp; e: bytes per element), read off autograd's backward of each op:

=================================================  ==========  ============  ====================
what                                               forward     backward      flag
=================================================  ==========  ============  ====================
GLUActivation (`self.act(gate_states) * up_states`  2 f e       7 f e         `Plan.eager_glu`
after a `torch.split`): SiLU and multiply apart,
5 f e against fused 3 f e; backward: the multiply's
two products (6 f e) and SiLU's (3 f e) against
fused 6 f e, and SplitBackward's cat of the two
gradients (4 f e)
q, k, v `transpose(0, 1).contiguous()` after the    2 (q+2kv) e  2 (q+2kv) e  `Plan.layout_copies`
split: three copies; backward: contiguous and
transpose pass views, SplitBackward's one cat
k, v `torch.cat` then `permute(...).contiguous()`   8 kv e      0 (views,     `Plan.layout_copies`
for flash-attn's rotary                                         into that cat)
Modalities (gpt2_model.py @8a9b6617 lines 462-464,  2 (q+2kv) e  2 (q+2kv) e  `Plan.head_copies`
552-573): q, k, v each `.transpose(1, 2)
.contiguous()` before attention, three copies; their
gradients reshaped back, a copy each
its SDPA path: the output transposed back and       2 q e       2 q e         `Plan.head_copies`,
copied (`attention_kernel` sdpa-flash2), its                                  SDPA's path only
gradient copied again (flash-attn's path copies q,
k and v once more: not priced, a floor)
=================================================  ==========  ============  ====================

Modalities' copies, multi-head attention in 16 bits: 24 bytes per token and hidden unit a layer
per micro-batch, 32 on SDPA's path (docs/model.md, "Where the FSDP stacks' remaining error is").

nanotron's loss (models/llama.py `cast_to_fp32`, `Loss`; tensor_parallel/functional.py
`_ShardedCrossEntropy`), bytes per logit with 16-bit logits: forward x.float() (2 + 4), max (4),
subtract out of place (4 + 4), exp in place (4 + 4), sum (4), div_ (4 + 4): 38; backward mul_
(4 + 4) and the cast back to 16 bits (4 + 2): 14. 52 bytes against the fused loss's e + 12 = 14.

Megatron-DeepSpeed's loss counts the same 52 bytes per logit, by another route: GPTModelPipe
appends `float16_to_fp32` after the tied output layer (megatron/model/gpt_model.py, `.float()`:
2 + 4), its `CrossEntropy` hands the fp32 logits to Megatron's `_VocabParallelCrossEntropy`
(megatron/mpu/cross_entropy.py: max 4, `sub_` 4 + 4, `torch.exp(out=)` 4 + 4, sum 4, `div_`
4 + 4): 38 forward; backward `mul_` (4 + 4) on the saved softmax and the cast's backward to 16
bits (4 + 2): 14 (bigscience-workshop and deepspeedai Megatron-DeepSpeed, 2021-2023).
"""

from __future__ import annotations

import numpy as np

from shardwise.specs._checks import Number

# bytes moved per element, eager / fused (see the table above)
EAGER_NORM_BYTES_PER_ELEMENT = 36.0
EAGER_ROPE_BYTES_PER_ELEMENT = 20.0
# kernels per layer forward of torchtitan's complex rotary embedding under torch.compile: for q and
# k, an Inductor cast to fp32, the ATen complex multiply and an Inductor cast back
COMPILED_COMPLEX_ROPE_KERNELS = 2 * 3
EAGER_GATED_ACTIVATION_FACTOR = 5.0 / 3.0  # 5e against the fused 3e per output element
EAGER_CROSS_ENTROPY_BYTES_PER_LOGIT = 28.0  # against e + 12 fused
# kernels per layer forward, eager: two norms x 6 ops, rotary on q and k x 4 ops, the activation 2,
# two residual adds (the fused path's count is `physics.layer_parts.ELEMENTWISE_KERNELS` + ROPE_KERNELS)
EAGER_ELEMENTWISE_KERNELS = 2 * 6 + 2 * 4 + 2 + 2
# kernels per layer forward besides the element-wise ones: the linear layers (torchtitan's 7 for a
# gated MLP) and attention; the backward issues about twice as many (two GEMMs per linear layer,
# each element-wise op's backward)
GEMM_AND_ATTENTION_KERNELS = 8
BACKWARD_KERNEL_RATIO = 2.0


# nanotron's host operations per layer and micro-batch and its loss's bytes per logit (table above):
# units of one ATen op's host time per ATen op, light op (a view, a .grad assignment), collective call,
# wait, Triton launch, Function
NANOTRON_HOST_UNIT_WEIGHTS = (1.0, 0.3, 2.0, 1.0, 4.0, 1.0)
NANOTRON_FORWARD_OPS = (37, 41, 4, 4, 4, 8)  # + 12 nn.Module calls at 0.5
NANOTRON_MODULE_CALLS = 12
NANOTRON_BACKWARD_OPS = (44, 24, 6, 6, 6, 8)
NANOTRON_ACCUMULATE_OPS = (6, 24, 0, 0, 0, 0)  # FP32GradientAccumulator._accumulate_grad, 6 parameters
# the same under nanotron's default synchronous ALL_REDUCE linears (second table above)
NANOTRON_ALL_REDUCE_FORWARD_OPS = (29, 31, 2, 2, 4, 6)
NANOTRON_ALL_REDUCE_BACKWARD_OPS = (36, 2, 2, 0, 6, 10)
NANOTRON_LOSS_BYTES_PER_LOGIT = 38.0 + 14.0
MEGATRON_DEEPSPEED_LOSS_BYTES_PER_LOGIT = (2 + 4) + 4 + 8 + 8 + 4 + 8 + 8 + (4 + 2)  # 52: the docstring above


def host_units(counts: tuple[int, ...], weights: tuple[float, ...] = NANOTRON_HOST_UNIT_WEIGHTS) -> float:
    """Host operations in units of one ATen op: each kind's count times its weight."""
    return float(sum(c * w for c, w in zip(counts, weights, strict=True)))


# the forward's units (91 in the table above), which full recomputation issues once more
NANOTRON_FORWARD_HOST_OPS = host_units(NANOTRON_FORWARD_OPS) + 0.5 * NANOTRON_MODULE_CALLS
NANOTRON_LAYER_HOST_OPS = round(
    NANOTRON_FORWARD_HOST_OPS + host_units(NANOTRON_BACKWARD_OPS) + host_units(NANOTRON_ACCUMULATE_OPS)
)
NANOTRON_ALL_REDUCE_LAYER_HOST_OPS = round(
    host_units(NANOTRON_ALL_REDUCE_FORWARD_OPS)
    + 0.5 * NANOTRON_MODULE_CALLS
    + host_units(NANOTRON_ALL_REDUCE_BACKWARD_OPS)
    + host_units(NANOTRON_ACCUMULATE_OPS)
)
# The forward's share of a stack's own host count (`Plan.layer_host_ops`): nanotron's 91 of 206
# (the table above), the one stack that states a count; the recomputed forward of full
# recomputation adds this share (the backward and the fp32 accumulation are not rerun).
HOST_OPS_FORWARD_SHARE = NANOTRON_FORWARD_HOST_OPS / NANOTRON_LAYER_HOST_OPS


# bytes per element of that work (table above), forward and backward, and its kernels beyond the
# fused path's: GLU the multiply (forward), the multiply's second product and the cat (backward);
# the layout three copies, a cat and a permute (forward), one cat (backward)
EAGER_GLU_BYTES = (2.0, 7.0)  # x f e
QKV_COPY_BYTES = (2.0, 2.0)  # x (q + 2 kv) e
KV_CAT_PERMUTE_BYTES = (8.0, 0.0)  # x kv e
EAGER_GLU_KERNELS = (1, 2)
LAYOUT_COPY_KERNELS = (5, 1)
# Modalities' head-major copies (table above): q, k, v each, and SDPA's output, one kernel a copy
HEAD_OUTPUT_COPY_BYTES = (2.0, 2.0)  # x q e, SDPA's path
HEAD_COPY_KERNELS = (3, 3)


def layout_copy_bytes(
    tokens: Number,
    qkv_width: Number,
    kv_width: Number,
    ffn_width: Number,
    e: float,
    eager_glu: Number,
    copies: Number,
    head_copies: Number = False,
    sdpa_output: Number = False,
) -> tuple[tuple[Number, Number], tuple[Number, Number]]:
    """((forward, backward) bytes, (forward, backward) kernels) of one layer's element-wise work
    beyond the fused path's on one TP rank (table above): an eager gated activation on `ffn_width`
    (0 without a gated MLP), the copies that lay q, k and v out for flash-attn (`qkv_width` =
    q + 2 kv, `kv_width`, both over tp; nanotron's `copies`) and Modalities' head-major copies of
    q, k and v (`head_copies`), with SDPA's output copy where `sdpa_output`."""
    glu = np.asarray(eager_glu, dtype=bool) & (np.asarray(ffn_width) > 0)
    lay = np.asarray(copies, dtype=bool)
    heads = np.asarray(head_copies, dtype=bool)
    out = heads & np.asarray(sdpa_output, dtype=bool)
    q_width = np.asarray(qkv_width) - 2 * np.asarray(kv_width)

    def per_pass(i: int) -> tuple[Number, Number]:
        width = (
            np.where(glu, EAGER_GLU_BYTES[i] * ffn_width, 0.0)
            + np.where(lay, QKV_COPY_BYTES[i] * qkv_width + KV_CAT_PERMUTE_BYTES[i] * kv_width, 0.0)
            + np.where(heads, QKV_COPY_BYTES[i] * qkv_width, 0.0)
            + np.where(out, HEAD_OUTPUT_COPY_BYTES[i] * q_width, 0.0)
        )
        kernels = np.where(glu, EAGER_GLU_KERNELS[i], 0) + np.where(lay, LAYOUT_COPY_KERNELS[i], 0)
        kernels = kernels + np.where(heads, HEAD_COPY_KERNELS[i], 0) + np.where(out, 1, 0)
        return tokens * e * width, kernels

    (f_bytes, f_kernels), (b_bytes, b_kernels) = per_pass(0), per_pass(1)
    return (f_bytes, b_bytes), (f_kernels, b_kernels)


# FSDP2's copies per weight: an all-gather's copy-out reads and writes each gathered weight once
ALL_GATHER_COPY_OUT_PASSES = 2.0  # (read + write) x weight bytes


def per_param_sharding_bytes(
    weights: Number,
    weight_bytes: float,
    reduce_bytes: float,
    trained: Number | None = None,
    grad_bytes: Number | None = None,
) -> tuple[Number, Number]:
    """(forward, backward) bytes that FSDP2's copies move on the compute stream for `weights`
    gathered weights in one micro-batch (table above): one copy-out forward; one copy-out and
    the reduce-scatter copy-in of the `trained` ones (default all; read `grad_bytes`, default
    `weight_bytes`, write `reduce_bytes` per weight) backward. `weight_bytes` is what is gathered
    (1 where torchao's FP8 all-gather gathers FP8 weights, whose gradients stay 16-bit)."""
    trained = weights if trained is None else trained
    grad = weight_bytes if grad_bytes is None else grad_bytes
    copy_out = ALL_GATHER_COPY_OUT_PASSES * weight_bytes * weights
    return copy_out, copy_out + (grad + reduce_bytes) * trained


def eager_elementwise_bytes(
    norm_elements: Number,
    rope_elements: Number,
    activation_bytes_fused: Number,
    residual_bytes: Number,
    gated: bool,
) -> Number:
    """Forward bytes of a layer's element-wise work run as eager kernels: `norm_elements` elements
    through the two norms and `rope_elements` through the rotary embedding (their fp32
    intermediates dominate: the counts above, for 16-bit inputs), the activation
    (`activation_bytes_fused` as the fused kernel moves them; a gated one in two kernels) and the
    residual adds (unchanged)."""
    activation = activation_bytes_fused * (EAGER_GATED_ACTIVATION_FACTOR if gated else 1.0)
    return (
        EAGER_NORM_BYTES_PER_ELEMENT * norm_elements
        + EAGER_ROPE_BYTES_PER_ELEMENT * rope_elements
        + activation
        + residual_bytes
    )


def layer_kernels(
    eager: Number, fused_elementwise_kernels: Number, recompute_forward: Number = False, host_ops: Number = 0.0
) -> Number:
    """Kernels one layer's forward and backward issue (host time is paid per kernel); full
    recomputation issues the forward's once more. `host_ops` > 0: the stack's own count of host
    operations per layer and micro-batch, forward and backward (`Plan.layer_host_ops`, e.g.
    NANOTRON_LAYER_HOST_OPS), in its place; recomputation adds its forward share
    (HOST_OPS_FORWARD_SHARE: nanotron's 91 of 206, not the fused count's 1/3)."""
    elementwise = np.where(np.asarray(eager, dtype=bool), EAGER_ELEMENTWISE_KERNELS, fused_elementwise_kernels)
    passes = 1.0 + BACKWARD_KERNEL_RATIO + np.asarray(recompute_forward, dtype=float)
    counted = passes * (elementwise + GEMM_AND_ATTENTION_KERNELS)
    if not np.any(host_ops):
        return counted
    own = np.asarray(host_ops, dtype=float) * (1.0 + HOST_OPS_FORWARD_SHARE * np.asarray(recompute_forward, float))
    return np.where(np.asarray(host_ops) > 0, own, counted)


# Megatron-Core's CUDA graph scopes: `shardwise.recompute_policies.CUDA_GRAPH_SCOPES` (`Plan.cuda_graph_scope`).
# A captured block is replayed by one graph launch forward and one backward (make_graphed_callables
# captures both passes): the host issues these instead of its kernels.
GRAPH_LAUNCHES_PER_BLOCK = 2
# The attention block's share of a dense layer's kernels: of GEMM_AND_ATTENTION_KERNELS (8, the linear
# layers of a gated MLP counted as torchtitan's wq, wk, wv, wo, w1, w2, w3, and attention) the five
# before the MLP; of the element-wise ones half (input norm, rotary, residual add against pre-MLP
# norm, activation, residual add). A project split of the counts above.
ATTENTION_GEMM_KERNELS = 5
ATTENTION_ELEMENTWISE_SHARE = 0.5


def graphed_layer_kernels(
    kernels: Number, elementwise: Number, scope: tuple[str, ...], moe_layer: bool = False
) -> Number:
    """The host's issues for one layer's attention and dense MLP under CUDA graphs (`scope`):
    `kernels` (`layer_kernels`, `elementwise` of them per forward element-wise) less the captured
    blocks' kernels, plus GRAPH_LAUNCHES_PER_BLOCK per captured block. full_iteration: none. The
    mlp scope captures dense layers only (Megatron-Core), not an MoE layer's shared experts."""
    if "full_iteration" in scope:
        return 0.0 * kernels
    per_pass = elementwise + GEMM_AND_ATTENTION_KERNELS
    attention = (ATTENTION_ELEMENTWISE_SHARE * elementwise + ATTENTION_GEMM_KERNELS) / per_pass
    share, blocks = 0.0, 0
    if "attn" in scope:
        share, blocks = share + attention, blocks + 1
    if "mlp" in scope and not moe_layer:
        share, blocks = share + (1.0 - attention), blocks + 1
    return kernels * (1.0 - share) + GRAPH_LAUNCHES_PER_BLOCK * blocks


def host_bound_s(gpu_s: Number, kernels: Number, host_kernel_s: Number) -> Number:
    """What the GPU waits for the host issuing `kernels` kernels at `host_kernel_s` each, beyond
    `gpu_s` of its own work on them: the stream runs ahead of the host while kernels are longer
    than their issue time, and starves when they are shorter."""
    return np.maximum(0.0, kernels * host_kernel_s - gpu_s)
