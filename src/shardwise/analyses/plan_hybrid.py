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
    ranks = dp * cp
    if space.shard_group is None:  # the first slot is full sharding, the second a server's ranks
        full = np.broadcast_to(np.arange(k)[None, :] == 0, sizes.shape)
    else:  # a fixed size equal to every rank is full sharding (unless 0 is given too)
        full = (sizes == 0) | ((sizes == ranks[:, None]) & (0 not in space.shard_group))
    value = np.where(full, 0, sizes)
    # (ZeRO stage, slot) pairs, the stage slowest: ZeRO-0 its first slot (nothing sharded: 0), each
    # other stage its first slot and, where it shards hybrid (or the sizes are fixed), the others;
    # a stage > 0 needs dp > 1 (`zero_ok`), so dp x cp > 1 wherever it holds
    stages = hybrid if space.shard_group is None else (1, 2, 3)
    oks, groups, zero_of = [zero_ok[:, 0]], [np.zeros(ranks.size, dtype=np.int64)], [0]
    for j in range(k):
        v = value[:, j]
        group_ok = (v >= 2) & (v < ranks) & (ranks % np.maximum(v, 1) == 0) & (v % cp == 0)
        slot_ok = np.where(v > 0, group_ok, full[:, j])
        for z in range(1, ZERO_STAGES):
            if j == 0 or z in stages:
                oks.append(zero_ok[:, z] & slot_ok)
                groups.append(v)
                zero_of.append(z)
    order = np.argsort(np.array(zero_of), kind="stable")  # the stage slowest, its slots in order
    return (
        np.column_stack([oks[i] for i in order]),
        np.column_stack([groups[i] for i in order]),
        np.array(zero_of, dtype=np.int64)[order],
    )


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
