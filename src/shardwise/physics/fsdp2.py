"""PyTorch FSDP2's units: which parameters the all-gather that opens a micro-batch and the
reduce-scatter that closes it move, with no compute beside them.

FSDP2 (`torch.distributed.fsdp.fully_shard`) gathers and reduces one *unit* at a time: the
parameters of one module given to `fully_shard`. torchtitan wraps the word embedding, every
transformer block, the final norm with the output layer, then the root
(torchtitan/distributed/fsdp.py `apply_fsdp_to_decoder`, since pytorch/torchtitan#1094 of
2025-07-28; before it the root held the embedding, the norm and the output layer together);
torchtune, OLMo-core and Accelerate's FSDP2 plugin wrap every block and the root the same way.
The all-gather of the next unit is prefetched behind the current unit's compute (FSDP2's
implicit forward prefetch, its post-forward order in the backward pass,
torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py), but two have nothing to hide behind:

- forward: the embedding unit's gather, then block 0's, before any GEMM runs (the embedding
  lookup is a gather of h values per token, microseconds). The backward pass opens with the
  output layer's unit, which is not resharded after the forward (torchtitan's
  `reshard_after_forward=False` for [norm, output]; FSDP2's root is never resharded,
  `FSDPState._lazy_init`), and the last block's gather hides behind the output layer's backward
  GEMMs (2 x 2 s V h FLOPs).
- backward: block 0's reduce-scatter is issued after its backward ends and the embedding's
  after the embedding's backward (a scatter-add); `_root_post_backward_final_callback` waits for
  both before the optimizer step.

Megatron-Core's buckets (40M parameters, `engines.data_parallel.DP_BUCKET_PARAMS`) are 1/5 of
one Llama 3 8B block (218M) and 1/13 of the embedding with it; these units are what FSDP2
exposes. Per GPU, with the matrices split over tp (DTensor TP: the embedding is vocab-parallel,
RowwiseParallel):

=====================  ===========================================  ===========================
stage                  exposed gather per pass (forward + backward  exposed reduce-scatter
                       over two passes, as ZeRO-3's two gathers     (once per step, as the
                       per micro-batch are priced)                  other stacks' last bucket)
=====================  ===========================================  ===========================
first (holds the       (V h / tp + one block) / 2                   one block + V h / tp
embedding)
others                 one block / 2                                one block
=====================  ===========================================  ===========================

Under pipeline parallelism torchtitan keeps the gathered weights through the step
(`reshard_after_forward = not pp_enabled`, `get_fsdp_reshard_after_forward_policy`), so a
stage's first block is gathered once per step: its collectives are priced as one micro-batch's
(`engines.dp_step.comm_micro_batches`), the table's two passes an upper bound by one. A
mixture-of-experts layer's routed experts are reduced over their own group and not counted here
(the dense part keeps Megatron-Core's bucket: `units_apply` is false).
"""

from __future__ import annotations

import numpy as np

from shardwise.physics.params import layer_params_split
from shardwise.specs import Model
from shardwise.specs._checks import Number


def block_params_per_gpu(model: Model, tp: Number) -> Number:
    """Parameters of one dense transformer block on one GPU: its matrices over tp, its norms
    whole (`physics.params.layer_params_split`)."""
    split, replicated = layer_params_split(model)
    return split / np.asarray(tp, dtype=float) + replicated


def edge_units(model: Model, tp: Number, first_stage: bool) -> tuple[Number, Number]:
    """(parameters of the exposed all-gather per pass, parameters of the exposed reduce-scatter)
    of one GPU of a stage under FSDP2 (the table above): the first stage adds the word
    embedding's unit (V h / tp) to its first block's."""
    block = block_params_per_gpu(model, tp)
    embedding = model.vocab * model.hidden / np.asarray(tp, dtype=float) if first_stage else 0.0
    return (block + embedding) / 2.0, block + embedding


def units_apply(model: Model) -> bool:
    """Whether the units replace Megatron-Core's buckets: dense and hybrid models (a
    mixture-of-experts model's units hold routed experts reduced apart)."""
    return not model.is_moe
