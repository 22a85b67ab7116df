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

Residual adds are one kernel either way (read 2, write 1). The backward of eager element-wise
work moves BACKWARD_MEMORY_RATIO x its forward bytes, as the fused kernels do.

Attention kernels, forward efficiency relative to the GPU's GEMM efficiency: "fused" is what
Megatron-Core runs through Transformer Engine (cuDNN fused attention; on Ampere the same
FlashAttention-2 code path), `physics.compute.FLASH_RELATIVE_EFFICIENCY`; "flash2" is
FlashAttention-2 (the flash-attn package), whose Ampere kernels do
not use Hopper's warp-group MMA and TMA: on Hopper it reaches a smaller fraction of peak, the
GPU's `flash2_efficiency` (gpus.yaml, microbenchmarked); "sdpa-flash2" is PyTorch SDPA's own build of
it, slower again on Hopper (`physics.compute.SDPA_FLASH_FORWARD_FRACTION`).

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
"""

from __future__ import annotations

import numpy as np

from shardwise.specs._checks import Number

# bytes moved per element, eager / fused (see the table above)
EAGER_NORM_BYTES_PER_ELEMENT = 36.0
EAGER_ROPE_BYTES_PER_ELEMENT = 20.0
EAGER_GATED_ACTIVATION_FACTOR = 5.0 / 3.0  # 5e against the fused 3e per output element
EAGER_CROSS_ENTROPY_BYTES_PER_LOGIT = 28.0  # against e + 12 fused
# kernels per layer forward, eager: two norms x 6 ops, rotary on q and k x 4 ops, the activation 2,
# two residual adds (the fused path's count is `physics.flops.ELEMENTWISE_KERNELS` + ROPE_KERNELS)
EAGER_ELEMENTWISE_KERNELS = 2 * 6 + 2 * 4 + 2 + 2
# kernels per layer forward besides the element-wise ones: the linear layers (torchtitan's 7 for a
# gated MLP) and attention; the backward issues about twice as many (two GEMMs per linear layer,
# each element-wise op's backward)
GEMM_AND_ATTENTION_KERNELS = 8
BACKWARD_KERNEL_RATIO = 2.0


# FSDP2's copies per weight: an all-gather's copy-out reads and writes each gathered weight once
ALL_GATHER_COPY_OUT_PASSES = 2.0  # (read + write) x weight bytes


def per_param_sharding_bytes(
    weights: Number, weight_bytes: float, reduce_bytes: float, trained: Number | None = None
) -> tuple[Number, Number]:
    """(forward, backward) bytes that FSDP2's copies move on the compute stream for `weights`
    gathered weights in one micro-batch (table above): one copy-out forward; one copy-out and
    the reduce-scatter copy-in of the `trained` ones (default all; read `weight_bytes`, write
    `reduce_bytes` per weight) backward."""
    trained = weights if trained is None else trained
    copy_out = ALL_GATHER_COPY_OUT_PASSES * weight_bytes * weights
    return copy_out, copy_out + (weight_bytes + reduce_bytes) * trained


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


def layer_kernels(eager: Number, fused_elementwise_kernels: Number, recompute_forward: Number = False) -> Number:
    """Kernels one layer's forward and backward issue (host time is paid per kernel); full
    recomputation issues the forward's once more."""
    elementwise = np.where(np.asarray(eager, dtype=bool), EAGER_ELEMENTWISE_KERNELS, fused_elementwise_kernels)
    passes = 1.0 + BACKWARD_KERNEL_RATIO + np.asarray(recompute_forward, dtype=float)
    return passes * (elementwise + GEMM_AND_ATTENTION_KERNELS)


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
