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
from shardwise.specs.memo import kept


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


@kept
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


def expert_placement(ep: Number, etp: Number, expert_dp: Number, gpus_per_node: Number) -> dict[str, Number]:
    """Members per node of the expert groups. Megatron-Core numbers the expert ranks with the same
    order string, the expert TP ranks innermost, then EP, then the expert-data-parallel ranks
    (`parallel_state.initialize_model_parallel`, its expert `RankGenerator`)."""
    return {
        "etp": ranks_per_node(etp, 1, gpus_per_node),
        "ep": ranks_per_node(ep, etp, gpus_per_node),
        "edp": ranks_per_node(expert_dp, np.asarray(ep) * etp, gpus_per_node),
    }


def placement(plan: object, gpus_per_node: Number, experts: bool = False) -> dict[str, Number]:
    """`group_placement` of a Plan, with its expert groups (`expert_placement`) when `experts`
    (a mixture of experts: dense models do not pay for them in the planner's hot path)."""
    p = plan
    out = group_placement(p.tp, p.dp, p.pp, gpus_per_node, p.cp)  # type: ignore[attr-defined]
    if not experts:
        return out
    return out | expert_placement(p.ep, p.expert_tp, p.expert_dp, gpus_per_node)  # type: ignore[attr-defined]
