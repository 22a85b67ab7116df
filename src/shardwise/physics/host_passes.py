"""The host's issue time per pass where a pipeline stage's GPU queue runs dry between its passes
(issue #33): each pass waits for its own kernels' issue (`engines.costs.layer_cost`)."""

from __future__ import annotations

import numpy as np

from shardwise.arrays import as_bool
from shardwise.physics.stack import BACKWARD_KERNEL_RATIO, HOST_OPS_FORWARD_SHARE
from shardwise.specs import Plan
from shardwise.specs._checks import Number


def forward_kernel_share(recompute_forward: Number = False, host_ops: Number = 0.0) -> Number:
    """The forward pass's share of `layer_kernels` (the rest in the backward, with full
    recomputation's rerun forward): 1 of 1 + BACKWARD_KERNEL_RATIO (+ 1) passes of counted kernels;
    HOST_OPS_FORWARD_SHARE of a stack's own host count."""
    rc = np.asarray(recompute_forward, dtype=float)
    counted = 1.0 / (1.0 + BACKWARD_KERNEL_RATIO + rc)
    own = HOST_OPS_FORWARD_SHARE / (1.0 + HOST_OPS_FORWARD_SHARE * rc)
    return np.where(np.asarray(host_ops) > 0, own, counted)


def drained_passes(plan: Plan) -> Number:
    """Where a training stage's GPU queue runs dry between its forward and backward passes: a
    pipeline whose blocking sends end in a device sync (Megatron-LM's `torch.cuda.synchronize()`
    after each batched send/receive, `training_stages.PIPELINE_SYNC_S`). The host cannot issue a
    pass's kernels ahead during the previous one, so each pass is bound by its own kernels' issue
    time (not the layer's two passes together): max(GPU work, kernels x host time) per pass, which
    also keeps a pass from growing when the other one's kernels get faster (issue #33)."""
    return (np.asarray(plan.pp) > 1) & as_bool(plan.pipeline_sync) & ~as_bool(plan.overlap_p2p)
