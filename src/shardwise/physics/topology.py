"""Where each communication group lands on the cluster.

Ranks are numbered as in Megatron-LM (`parallel_state`, default order "tp-dp-pp"): TP
innermost (consecutive GPUs, so a TP group of <= gpus_per_node stays on NVLink), then DP, then
PP outermost. A group whose members are `stride` ranks apart has
min(size, gpus_per_node // stride) members in one node (at least 1), and spans the rest
across nodes, where its collectives use the inter-node link.
"""

from __future__ import annotations

import numpy as np

from shardwise.specs._checks import Number


def ranks_per_node(size: Number, stride: Number, gpus_per_node: Number) -> Number:
    """How many members of a group (members `stride` ranks apart) share one node."""
    return np.minimum(size, np.maximum(1, gpus_per_node // np.asarray(stride)))


def spans_nodes(size: Number, stride: Number, gpus_per_node: Number) -> Number:
    """True where the group crosses node boundaries."""
    return ranks_per_node(size, stride, gpus_per_node) < size


def group_placement(tp: Number, dp: Number, pp: Number, gpus_per_node: Number) -> dict[str, Number]:
    """Members per node of the TP, DP and PP groups (order tp-dp-pp)."""
    return {
        "tp": ranks_per_node(tp, 1, gpus_per_node),
        "dp": ranks_per_node(dp, tp, gpus_per_node),
        "pp": ranks_per_node(pp, np.asarray(tp) * dp, gpus_per_node),
    }
