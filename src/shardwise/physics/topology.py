"""Where each communication group lands on the cluster.

Ranks are numbered as in Megatron-LM (`parallel_state`, default order "tp-cp-ep-dp-pp"): TP
innermost (consecutive GPUs, so a TP group of <= gpus_per_node stays on NVLink), then context
parallelism, then DP, then PP outermost. Gradients are reduced over the DP and CP ranks together
(they hold the same weights): the "dpcp" group. A group whose members are `stride` ranks apart
and that spans nodes runs its collectives over the inter-node link, with as many NICs per node as it has members there.
"""

from __future__ import annotations

import numpy as np

from shardwise.specs._checks import Number


def ranks_per_node(size: Number, stride: Number, gpus_per_node: Number) -> Number:
    """Members of a group (members `stride` ranks apart) in the node that holds the fewest of them.

    Aligned groups are exact: a group inside one node has all `size` there; one whose members
    are whole nodes apart has 1 per node; one that spans whole nodes has gpus_per_node / stride.
    A group that straddles node boundaries unevenly counts as 1 per node (the slowest case, and
    the one its collectives wait for).
    """
    n, st, g = np.asarray(size), np.asarray(stride), np.asarray(gpus_per_node)
    span = n * st
    inside = np.mod(g, span) == 0
    whole_nodes = (np.mod(span, g) == 0) & (np.mod(g, st) == 0)
    return np.where(inside, n, np.where(whole_nodes, np.maximum(1, g // st), 1))


def group_placement(tp: Number, dp: Number, pp: Number, gpus_per_node: Number, cp: Number = 1) -> dict[str, Number]:
    """Members per node of the TP, CP, DP, DP x CP and PP groups (order tp-cp-dp-pp)."""
    tcp = np.asarray(tp) * cp
    return {
        "tp": ranks_per_node(tp, 1, gpus_per_node),
        "cp": ranks_per_node(cp, tp, gpus_per_node),
        "dp": ranks_per_node(dp, tcp, gpus_per_node),
        "dpcp": ranks_per_node(np.asarray(dp) * cp, tp, gpus_per_node),
        "pp": ranks_per_node(pp, tcp * dp, gpus_per_node),
    }


def placement(plan: object, gpus_per_node: Number) -> dict[str, Number]:
    """`group_placement` of a Plan."""
    return group_placement(plan.tp, plan.dp, plan.pp, gpus_per_node, plan.cp)  # type: ignore[attr-defined]
