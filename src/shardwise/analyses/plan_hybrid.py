"""Hybrid sharding in the planner's join (`analyses.plan_space`): each plan's ZeRO stage paired with
its shard group (`Plan.shard_group`), full sharding (0) and, where the stack runs hybrid sharding at
that stage (`SearchSpace.features`), one server's data-parallel ranks: the group FSDP's
HYBRID_SHARD, FSDP2's and torchtitan's HSDP mesh and Megatron-Core's distributed-optimizer
instances are set up with (PyTorch FSDP docs: "shard within a node, replicate across nodes";
torchtitan docs/fsdp.md; megatron/core/parallel_state.py, intra-instance groups of dp x cp /
instances ranks). Ranks are placed tp-cp-dp-pp (`engines.data_parallel.hybrid_groups`), so a server
of g GPUs holds g / tp consecutive dp x cp ranks.
"""

from __future__ import annotations

import numpy as np

from shardwise.analyses.search_space import SearchSpace

ZERO_STAGES = 4


def shard_sizes(node: np.ndarray, tp: np.ndarray, space: SearchSpace) -> np.ndarray:
    """The shard groups tried per row, (rows, k): full sharding (0) and a server's dp x cp ranks
    (node / tp), or the sizes the space fixes."""
    if space.shard_group is not None:
        return np.broadcast_to(np.asarray(space.shard_group, dtype=np.int64), (node.size, len(space.shard_group)))
    return np.column_stack([np.zeros(node.size, dtype=np.int64), node // tp])


def zero_shard_options(
    zero_ok: np.ndarray,
    node: np.ndarray,
    tp: np.ndarray,
    cp: np.ndarray,
    dp: np.ndarray,
    space: SearchSpace,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (ZeRO stage, shard group) options of each row, the stage varying slowest: a (rows,
    options) mask of the valid ones, their (rows, options) shard groups and each option's stage.
    ZeRO-0, or a single dp x cp rank, shards nothing: its one option is 0. A group > 0 holds at
    least 2 ranks, fewer than dp x cp (all of them is full sharding: 0), divides dp x cp and holds
    whole CP groups (torchtitan's dp_shard x cp mesh); for a mixture of experts see
    `experts_follow_groups`."""
    _, hybrid = space.features()
    sizes = shard_sizes(node, tp, space)
    k = sizes.shape[1]
    ranks = (dp * cp)[:, None]
    if space.shard_group is None:  # the first slot is full sharding, the second a server's ranks
        full = np.broadcast_to(np.arange(k)[None, :] == 0, sizes.shape)
    else:  # a fixed size equal to every rank is full sharding (unless 0 is given too)
        full = (sizes == 0) | ((sizes == ranks) & (0 not in space.shard_group))
    value = np.where(full, 0, sizes)
    group_ok = (value >= 2) & (value < ranks) & (ranks % np.maximum(value, 1) == 0) & (value % cp[:, None] == 0)
    zs = np.arange(ZERO_STAGES)
    sharded = (zs[None, :] > 0) & (ranks > 1)  # (rows, 4): the stage shards something
    first = np.arange(k)[None, None, :] == 0
    allowed = np.isin(zs, hybrid if space.shard_group is None else zs[1:])[None, :, None]
    ok = np.where(
        sharded[:, :, None],
        np.where(value[:, None, :] > 0, group_ok[:, None, :] & allowed, full[:, None, :]),
        first,  # nothing sharded: the first slot stands for 0
    )
    ok &= zero_ok[:, :, None]
    groups = np.where(sharded[:, :, None], value[:, None, :], 0)
    # the (stage, slot) pairs that can hold at all: ZeRO-0 its first slot, a stage without hybrid
    # sharding (searched) its first slot, full sharding
    stages = hybrid if space.shard_group is None else zs[1:]
    pairs = [(z, j) for z in range(ZERO_STAGES) for j in range(k) if j == 0 or (z > 0 and z in stages)]
    index = np.array([z * k + j for z, j in pairs], dtype=np.int64)
    n = zero_ok.shape[0]
    zero_of = np.array([z for z, _ in pairs], dtype=np.int64)
    return ok.reshape(n, ZERO_STAGES * k)[:, index], groups.reshape(n, ZERO_STAGES * k)[:, index], zero_of


def experts_follow_groups(
    group: np.ndarray, ep: np.ndarray, tp: np.ndarray, cp: np.ndarray, dp: np.ndarray
) -> np.ndarray:
    """(rows, options): the expert-data-parallel ranks (tp cp dp / ep, experts whole: etp = 1) split
    into as many replicas as the dense ones (Megatron-Core's parallel_state asserts
    expert_data_parallel_size % num_distributed_optimizer_instances == 0); true without a group."""
    ranks = (dp * cp)[:, None]
    replicas = np.maximum(ranks // np.maximum(group, 1), 1)
    expert_dp = (tp * cp * dp)[:, None] // ep
    return (group == 0) | (expert_dp % replicas == 0)
