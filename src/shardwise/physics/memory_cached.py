"""What PyTorch's caching allocator keeps reserved beyond what is allocated where a stack's optimizer
step allocates flat tensors of the whole optimizer shard (`StepCache`, `StackMemory.step_cache`).

The caching allocator hands a request a cached free block at least as large (best fit within the
pool) and never merges blocks of different segments; it gives cached segments back to the device
only when a cudaMalloc fails (`release_cached_blocks`, then the allocation is retried) or on
`torch.cuda.empty_cache()` (PyTorch c10/cuda/CUDACachingAllocator.cpp, v1.13 to 2.x). A step whose
fullest allocations are one tensor of 4 bytes for every parameter of the shard (GiBs) finds no
cached block that large among those the forward and backward passes freed (activations, logits,
each parameter's gradient, the reduction buckets: each smaller), so it maps new segments beside
them, and from the second step on it reuses its own. What `nvidia-smi` and
`torch.cuda.max_memory_reserved` show at that moment is therefore the step's allocations plus
every block freed before them, not the larger of the two phases. None of it is an out-of-memory
cause: the allocator releases those cached segments before it gives up, so the estimate's total
(`MemoryBreakdown.total_bytes`, what `fits_in_memory` tests) leaves it out and only a measured
reserved or device peak includes it (`MemoryBreakdown.cached_bytes`), up to the GPU's memory.

InternEvo's HybridZeroOptimizer (internlm/solver/optimizer/hybrid_zero_optim.py, tag v0.2.1dev20231121,
commit eba2b85, the same at 34fc28d; the version of doc/en/train_performance.md's memory table, torch 1.13.1): `_step`
flattens the rank's averaged 16-bit gradients into one tensor (`flatten(gradients)`, 2 bytes a
parameter), drops the per-parameter gradients, casts the flat copy to fp32 (`.to(dtype)`, 4) and
drops it, then torch.optim.AdamW's single-tensor step on the one flat fp32 master
(`_single_tensor_adamw`, foreach off by default in torch 1.13: `exp_avg_sq.sqrt() /
bias_correction2_sqrt`, 4 + 4) runs; every block it asks for is the shard's size or half of it.
The reduction hooks (`_store_and_try_reduce_grads_by_bucket`) flatten the 16-bit gradients into
buckets of `reduce_bucket_size` elements (configs/7B_sft.py: 512 * 1024 * 1024) and all-reduce them
over the data-parallel group (a group of one included), the new bucket's flat copy made before the
previous one, in `_bucket_in_progress`, is waited on and dropped (`_reduce_grads_by_rank`): two at
once, 1 GiB each. The FSDP path (`parallel.zero1.fsdp`, FSDPadaptOptimizer) steps per parameter
and keeps none of this.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardwise.specs._checks import Number

# torch.optim.AdamW unfused (foreach or for-loop) on the fp32 shard: the denominator
# sqrt(v) / sqrt(1 - beta2^t) + eps is built out of place over every parameter it steps at once.
# torch 1.13 `_single_tensor_adamw`: `denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)`,
# the sqrt (4 B) and the quotient (4 B) alive together; torch 2.0 `_multi_tensor_adamw` (foreach,
# the default on CUDA): `exp_avg_sq_sqrt = torch._foreach_sqrt(...)` then the out-of-place
# `denom = torch._foreach_add(exp_avg_sq_sqrt, eps)`: 8 B a parameter either way (torch 2.1 on adds
# eps in place: 4; the fused kernels: 0). "At once" is the whole shard where the optimizer holds one
# flat tensor (InternEvo's HybridZeroOptimizer: `param_group["params"] = [fp32_flat_current_rank]`)
# or steps a list with foreach (InternEvo's FSDP path on torch >= 2.0.1).
UNFUSED_ADAMW_TEMP_BYTES_PER_PARAM = 8.0
# InternEvo's step at its fullest (v0.2.1dev20231121 eba2b85 as 34fc28d, torch 1.13.1 / 2.0.1 for FSDP): the fp32
# gradient of the rank's shard, which stays the master's `.grad` until after `optim.step()` (4:
# HybridZeroOptimizer._step `flat_fp16_avg_grads.to(dtype)`, FSDPadaptOptimizer.step
# `[p.grad.to(dtype) for p in fp16_params]`; internlm/solver/optimizer/hybrid_zero_optim.py,
# fsdp_optimizer.py), beside the unfused AdamW's temporaries (torch.optim.AdamW without `fused`,
# internlm/train/training_internlm.py initialize_optimizer): 4 + 8. The earlier moment, the flat
# 16-bit copy beside its fp32 cast (2 + 4, the 16-bit gradients freed), is smaller.
INTERNEVO_STEP_BYTES_PER_PARAM = 4.0 + UNFUSED_ADAMW_TEMP_BYTES_PER_PARAM
# InternEvo's HybridZeroOptimizer reduction buckets (configs/7B_sft.py `hybrid_zero_optimizer`
# reduce_bucket_size, eba2b85 and 34fc28d): elements of the 16-bit gradients each
HYBRID_ZERO_BUCKET_ELEMENTS = 512.0 * 1024**2
# the bucket being filled and the one in flight (`_bucket_in_progress`)
HYBRID_ZERO_BUCKETS_HELD = 2
# `flatten(gradients)` in `_step`: the shard's averaged 16-bit gradients as one tensor
HYBRID_ZERO_FLAT_COPY_BYTES = 2.0


@dataclass(frozen=True)
class StepCache:
    """Where a stack's step allocates whole-shard flat tensors (see the module docstring).

    `flat_copy_bytes_per_param`: what the step allocates and frees before its fullest moment, per
    parameter of the shard, in blocks too small for what follows (InternEvo: the flat 16-bit copy, 2).
    `bucket_elements`, `buckets`: the reduction buckets' size (16-bit elements) and how many the
    backward pass holds at once; their blocks stay cached through the step."""

    flat_copy_bytes_per_param: float = HYBRID_ZERO_FLAT_COPY_BYTES
    bucket_elements: float = HYBRID_ZERO_BUCKET_ELEMENTS
    buckets: int = HYBRID_ZERO_BUCKETS_HELD
    source: str = "InternEvo hybrid_zero_optim.py (eba2b85): _step's flat copies, _reduce_grads_by_rank's buckets"

    def bucket_bytes(self, trained: Number) -> Number:
        """The reduction buckets' blocks: `buckets` of `bucket_elements` 16-bit elements, or every
        gradient of the stage where they are fewer."""
        return 2.0 * np.minimum(self.buckets * self.bucket_elements, np.asarray(trained, dtype=float))


def step_cached_bytes(
    cache: StepCache,
    state_bytes: Number,
    activations: Number,
    step_bytes_per_param: float,
    trained: Number,
    shards: Number,
    total_bytes: Number,
) -> Number:
    """What the caching allocator holds reserved at the step's fullest moment beyond the estimate's
    total (`total_bytes`, allocated and unusable): the model state (its 16-bit gradients' blocks stay
    reserved when the step frees them), every block of the forward and backward passes
    (`activations`: the saved activations and the loss's logits at their peak) and of the reduction
    buckets, the flat copy the step frees (`StepCache.flat_copy_bytes_per_param`) and the step's own
    allocations (`step_bytes_per_param` over the rank's share of the `trained` parameters, 1 / `shards`)."""
    shard = np.asarray(trained, dtype=float) / np.asarray(shards, dtype=float)
    reserved = (
        state_bytes
        + activations
        + cache.bucket_bytes(trained)
        + (cache.flat_copy_bytes_per_param + step_bytes_per_param) * shard
    )
    return np.maximum(reserved - total_bytes, 0.0)
