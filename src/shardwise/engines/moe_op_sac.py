"""An MoE layer under torchtitan's per-op selective activation checkpointing (`Plan.selective_policy`
"op", torchtitan main's default since pytorch/torchtitan#2357): what its routed experts recompute and
keep. Read at pytorch/torchtitan@b5bcd76c (2026-08-21) with torch 2.13.

torchtitan/distributed/activation_checkpoint.py `SelectiveAC` wraps each TransformerBlock in a
non-reentrant checkpoint (early_stop=False: the whole block's forward reruns before its backward)
whose policy saves the outputs of `_get_default_save_ops` -- the partitioner's compute-intensive ops
(torch/_functorch/partitioners.py `get_default_op_list`: mm, bmm, addmm, the SDPA and flash ops,
`_scaled_mm`), topk, `_c10d_functional.reduce_scatter_tensor` and `.all_to_all_single`, DeepEP's and
HybridEP's dispatch and combine -- except every second mm, and the CUDA-to-CPU copies; the router's
gate (`force_recompute_mm_shapes_by_fqns` "moe.router.gate") is recomputed outside the mm count.
Everything else reruns. Per MoE layer (torchtitan/models/common/moe.py, token_dispatcher.py):

- router: the gate's fp32 GEMM and the sigmoid / softmax rerun, topk is saved (its values and
  indices, `physics.memory_activations.op_sac_routed_bytes`);
- permutation: argsort, the gathers into expert order and back, the scores' product and the
  scatter-add rerun;
- the split sizes' copy to the host is saved: no host sync in the recompute;
- routed experts: `torch._grouped_mm` is not in the save set -- w1, w3 and w2's grouped GEMMs and
  the SwiGLU all rerun (`op_sac_expert_masks`: the routed forward once more, less its host sync);
- all-to-alls: saved where they are functional collectives (torch.compile: token_dispatcher.py
  `_dispatch_token_exchange` takes `all_to_all_single` when compiling); eager torchtitan's default
  spmd_types backend (pytorch/torchtitan#4085, 2026-08-18) sends through spmd_types'
  `_AllToAllUneven`, torch.distributed's in-place `all_to_all` (c10d.alltoall_), which the policy
  does not save: dispatch and combine run again in the recompute;
- shared experts: an MLP in the mm count after the attention's four (w1 and w2 saved, w3
  recomputed: `engines.recompute_costs.op_sac_s`, `physics.memory_activations.op_sac_layer_bytes`).

The recompute rebuilds the layer's whole autograd inventory before its backward: for the routed
experts as torchtitan's autograd saves it (`rebuilt_routed_bytes`), the transient a layer's
backward pass holds (`engines.training_memory`).
"""

from __future__ import annotations

import numpy as np

from shardwise.arrays import as_bool
from shardwise.physics import memory as mem
from shardwise.specs import Model, Plan, Recompute
from shardwise.specs._checks import Number


def op_sac_on(plan: Plan) -> np.ndarray:
    """Where the plan recomputes selectively under torchtitan's per-op policy."""
    return (np.asarray(plan.recompute) == Recompute.SELECTIVE) & (plan.selective_policy == "op")


def exchange_saved(plan: Plan) -> np.ndarray:
    """Where the policy saves the all-to-alls' outputs: compiled torchtitan (functional collectives),
    and eager torchtitan before pytorch/torchtitan#4085 (`Plan.functional_a2a`: its expert-parallel
    dispatch called `all_to_all_single_autograd`, a functional collective), not eager torchtitan since
    (spmd_types' torch.distributed all_to_all; module docstring). `Plan.eager_kernels` tells the
    eager stack from the compiled one (the `torchtitan` and `torchtitan-compile` presets)."""
    return ~as_bool(plan.eager_kernels) | as_bool(plan.functional_a2a)


def op_sac_expert_masks(plan: Plan) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(where the routed experts' forward compute reruns, where their forward collectives rerun too,
    where w2's grouped GEMM does not) under the per-op policy (module docstring). Eager PyTorch reruns
    the block's whole forward; a compiled block's partitioner recomputes only what the backward reads
    (torch/_functorch/partitioners.py: SAC's recompute tags mark what may be recomputed), and with
    the combine's all-to-all saved (ep > 1) nothing reads w2's output: its GEMM is not redone."""
    on = op_sac_on(plan)
    compiled_saved = ~as_bool(plan.eager_kernels) & (np.asarray(plan.ep) > 1)  # eager reruns the whole forward
    return on, on & ~exchange_saved(plan), on & compiled_saved


def rebuilt_routed_bytes(
    model: Model, tokens: Number, imbalance: Number, bytes_per_element: float, score_copy_bytes: float
) -> Number:
    """What torchtitan's autograd saves of the routed experts of one layer (busiest rank, c = tokens
    x k x imbalance received copies): the grouped GEMMs' input (h), w1's and w3's outputs, the
    activation's output and the product w2 reads (2 x gate f: silu saves its input, the product both
    factors), and the combine's score multiply's copy of the tokens x k returned outputs
    (`score_copy_bytes` per hidden element: `physics.memory_activations.MOE_SCORE_COPY_BYTES`, the
    fp32 cast eager, the 16-bit output compiled); indices and scores are left out."""
    e, h, f = bytes_per_element, model.hidden, model.expert_ffn_hidden
    gate = 2 if model.gated_mlp else 1
    k = model.experts_per_token
    return tokens * k * (imbalance * e * (h + 2 * gate * f) + score_copy_bytes * h)


def op_sac_routed_memory(
    model: Model, plan: Plan, tokens: Number, load: Number, attention: Number, routed: Number, unsaved: Number
) -> tuple[Number, Number]:
    """(the routed experts' kept bytes, the working set an MoE layer rebuilds in the backward pass)
    under the per-op policy, `routed` and 0 elsewhere. `attention`: the layer's kept attention and
    shared experts; `unsaved`: the same without recomputation."""
    on = op_sac_on(plan)
    e = plan.bytes_per_element
    kept = mem.op_sac_routed_bytes(model, tokens, load, e, plan.ep, exchange_saved(plan))
    score = mem.moe_score_copy_bytes(plan.memory_stack_key, model.architecture)
    working = unsaved - attention + rebuilt_routed_bytes(model, tokens, load, e, score) - kept
    return np.where(on, kept, routed), np.where(on, working, 0.0)
