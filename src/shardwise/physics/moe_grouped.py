"""Transformer Engine's GroupedLinear around the routed experts' GEMMs in Megatron-Core's training
layer (TEGroupedMLP, megatron/core/transformer/moe/experts.py): the host work it does per local
expert, the part of the forward that waits for that work on its own (after the host's read of the
split sizes), and the padding copies its narrow GEMMs need. `engines.moe.experts_parts` prices them."""

from __future__ import annotations

import numpy as np

from shardwise.physics.moe import MOE_KERNELS, MOE_PREPROCESS_KERNELS, MOE_ROUTER_KERNELS, ExpertsForward
from shardwise.specs import Model
from shardwise.specs._checks import Number

# The rest run after the host has read the split sizes (`physics.moe_dispatch.SYNC_HOST_OPS`): chunk sort, activation,
# chunk unsort, unpermute (`post_sync_kernels`).
MOE_POST_SYNC_KERNELS = MOE_KERNELS - MOE_ROUTER_KERNELS - MOE_PREPROCESS_KERNELS

# Transformer Engine's GroupedLinear (Megatron-Core's TEGroupedMLP runs two: fc1, fc2) does host work
# per local expert beyond the per-expert GEMM launches `training_kernels` counts, unchanged from TE 2.8
# to 2.16 (the containers' versions; pytorch/module/grouped_linear.py `_GroupedLinear`, csrc/extensions/
# cast.cpp `split_quantize`, gemm.cpp `te_general_grouped_gemm`; NVIDIA/TransformerEngine#1499: "the CPU
# overheads of PyTorch ops, such as torch.split() and torch.empty() (2x num_gemms calls)"). Per expert
# and call, in (ATen ops, light ops, kernels), weighed as `physics.stack.host_units` weighs them (1, 0.3,
# and 1: a launched kernel's `host_kernel`):
#   every precision: each of the three grouped GEMMs (forward, dgrad, wgrad) wraps the expert's A and B
#   from Python and views its slice of D (at::from_blob): 3 light each; the forward's weight
#   (cast_if_needed / get_weight_workspace) 1 light; the backward's main_grad lookup and assignment and
#   Megatron's grad_added_to_main_grad flag and dummy wgrad (`handle_custom_ddp_from_mcore`): 4 light
#   each split tensor (the forward's input, the backward's output gradient):
#     16-bit   torch.split's view: 1 light
#     FP8      the quantized tensor allocated (`create_tensor`: its data and transpose, 2 ATen) and its
#              Python object (1 light); delayed scaling casts all experts in one kernel
#              (nvte_multi_cast_transpose), current scaling per expert (amax, scale, cast: 3 kernels)
#     MXFP8    views of the bulk buffers (rowwise and columnwise data and scales: 4 light, at::from_blob)
#              and the Python object (1 light), one quantize kernel per expert (NVFP4: the same views,
#              its split kernel fused over the experts from TE 2.14)
#   FP8 and MXFP8: the backward makes each expert's weight column-wise (`update_usage`): 1 light.
# Read off the code; the unit (`Plan.host_kernel_s`) is the larger uncertainty. A full-iteration CUDA
# graph replays none of it, nor the fused grouped MLP that runs with it (one kernel over all experts).
GROUPED_FORWARD = (0, 3 + 1, 0)
GROUPED_BACKWARD = (0, 3 + 3 + 4, 0)
GROUPED_SPLIT = {
    "16-bit": (0, 1, 0),
    "fp8": (2, 1, 0),
    "fp8_current": (2, 1, 3),
    "mxfp8": (0, 5, 1),
    "nvfp4": (0, 5, 0),
}
GROUPED_NARROW_BACKWARD = (0, 1, 0)
# Outside Transformer Engine, per expert and call, backward: each expert's weight is a parameter of its
# own (GroupedLinear's weight0..weightN-1), so the backward hands autograd a (dummy) weight gradient per
# expert (`handle_custom_ddp_from_mcore`), which runs that parameter's AccumulateGrad node and the Python
# hook Megatron-Core's DDP put on it (megatron/core/distributed/distributed_data_parallel.py,
# `grad_acc.register_hook(self._make_backward_post_hook(param))`, core_v0.14 to 0.18): the engine's call
# into Python, weighed as an ATen op (nanotron's table weighs an autograd Function so,
# `physics.stack.NANOTRON_HOST_UNIT_WEIGHTS`), and the hook's is_graph_capturing(), bucket lookup, grad and
# grad_added_to_main_grad checks, `param.grad = None` and register_grad_ready (which returns at once
# before the last micro-batch): 5 light. Every micro-batch, whatever the precision.
GROUPED_WEIGHT_HOOK = (1, 5, 0)
GROUPED_LINEARS = 2  # fc1 and fc2
HOST_UNIT_WEIGHTS = (1.0, 0.3, 1.0)  # an ATen op, a light op (`physics.stack.NANOTRON_HOST_UNIT_WEIGHTS`), a kernel


def grouped_linear_host_ops(local_experts: Number, precision: str, fp8_recipe: str = "te") -> tuple[Number, Number]:
    """(forward, backward) host operations, in `host_kernel` units, of one MoE layer's two GroupedLinear
    calls for `local_experts` experts on the rank (GROUPED_*): what the host does per expert besides
    launching the GEMMs."""
    from shardwise.physics.casts import current_scaling
    from shardwise.physics.stack import host_units
    from shardwise.specs.hardware import is_fp8, is_narrow, is_nvfp4

    def units(counts: tuple[int, ...]) -> float:
        return host_units(counts, HOST_UNIT_WEIGHTS)

    kind = "16-bit"
    if is_narrow(precision):
        kind = "mxfp8" if precision == "mxfp8" else "nvfp4" if is_nvfp4(precision) else "fp8"
        kind = "fp8_current" if is_fp8(precision) and current_scaling(precision, fp8_recipe) else kind
    split = units(GROUPED_SPLIT[kind])
    narrow = units(GROUPED_NARROW_BACKWARD) if is_narrow(precision) else 0.0
    n = GROUPED_LINEARS * np.asarray(local_experts, dtype=float)
    backward = units(GROUPED_BACKWARD) + split + narrow + units(GROUPED_WEIGHT_HOOK)
    return n * (units(GROUPED_FORWARD) + split), n * backward


def post_sync_kernels(ef: ExpertsForward, grouped_forward_ops: Number) -> Number:
    """Host operations, in `host_kernel` units, of one MoE layer's forward after the host has read the
    split sizes (`physics.moe_dispatch.SYNC_HOST_OPS`): MOE_POST_SYNC_KERNELS element-wise kernels, the
    grouped GEMMs one local expert at a time, a variant's eager kernels (CLAMP_*, BIAS_*) and
    GroupedLinear's own forward work (`grouped_linear_host_ops`). That read empties the GPU's queue,
    so the host cannot be ahead there: where these take it longer than the GPU takes over their work
    (and the all-to-alls it issues among them), the GPU waits the difference, which GPU time elsewhere
    in the layer cannot hide (`engines.moe.experts_parts`). The read itself: Megatron-Core's TEGroupedMLP.forward calls
    `tokens_per_expert.tolist()` (Transformer Engine's GroupedLinear takes `m_splits` as a Python
    list), and the all-to-all and flex dispatchers have copied them to the host before
    (megatron/core/transformer/moe/experts.py, token_dispatcher.py `_maybe_dtoh_and_synchronize`)."""
    forward = MOE_POST_SYNC_KERNELS + ef.up.batch + ef.down.batch + ef.eager_kernels
    return forward + np.asarray(grouped_forward_ops, dtype=float)


# Transformer Engine's grouped GEMMs in FP8 / MXFP8 / NVFP4 need every expert's token count to be a
# multiple of 16 (32 for MXFP8 and NVFP4). Megatron-Core's TEGroupedMLP pads them where it must
# (megatron/core/transformer/moe/experts.py `quantization_padding` / `quantization_unpadding`: TE's
# Fp8Padding and Fp8Unpadding, transformer_engine/pytorch/module/fp8_padding.py: one
# `fused_multi_row_padding` kernel copying the whole permuted input into the padded buffer, one
# `fused_multi_row_unpadding` copying the fc2 output back; their backward the reverse copies of the
# gradients), unless the counts come aligned: the router pads its routing map
# (`moe_router_padding_for_quantization`, off by default and in the NeMo / Megatron-Bridge Qwen3,
# DeepSeek-V3, Kimi K2 and Nemotron 3 Nano recipes) or the flex dispatcher pads inside its permutation
# (token_dispatcher.py: HybridEP's `pad_multiple`, DeepEP's `permute(..., align_size=...)`). A router
# that spreads the copies at random leaves some expert's count unaligned in practice, so the all-to-all
# and all-gather dispatchers' narrow-precision layers pay the copies: 4 passes (a read and a write of
# the input, of the output) over the copies' hidden states forward and 4 backward, 2 kernels each.
QUANTIZATION_PAD_PASSES = 4.0
QUANTIZATION_PAD_KERNELS = 2  # a pass: the padding and the unpadding
QUANTIZATION_PAD_DISPATCHERS = ("alltoall", "allgather")


def capacity_aligned(ef: ExpertsForward, precision: str) -> Number:
    """Whether every expert's count is already a multiple of the narrow GEMMs' alignment (16; 32 for
    MXFP8 and NVFP4), as padding to capacity makes it when capacity x ranks is: TE's Fp8Padding then
    returns its input untouched ("no padding needed", fp8_padding.py, TE 2.7 on)."""
    from shardwise.specs.hardware import is_nvfp4

    align = 32.0 if precision == "mxfp8" or is_nvfp4(precision) else 16.0
    return np.mod(np.asarray(ef.up.m, dtype=float), align) == 0


def quantization_padding_bytes(ef: ExpertsForward, model: Model, bytes_per_element: float) -> Number:
    """Bytes TE's Fp8Padding and Fp8Unpadding move in one pass (forward, or backward) of one MoE layer
    on the busiest rank (QUANTIZATION_PAD_*): 4 passes over its copies' hidden states."""
    copies = np.asarray(ef.up.m, dtype=float) * np.asarray(ef.up.batch, dtype=float)
    return QUANTIZATION_PAD_PASSES * bytes_per_element * model.hidden * copies
