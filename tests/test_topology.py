"""Where groups land: members per node and node crossings (rank order tp-dp-pp)."""

import numpy as np

from shardwise.physics.topology import group_placement, ranks_per_node


def test_aligned_groups():
    assert ranks_per_node(8, 1, 8) == 8  # a TP group of 8 fills a node
    assert ranks_per_node(4, 2, 8) == 4  # 4 members 2 apart fit in 8 GPUs
    assert ranks_per_node(16, 1, 8) == 8  # TP 16 spans two whole nodes
    assert ranks_per_node(32, 8, 8) == 1  # one member per node


def test_a_group_that_straddles_nodes_counts_as_one_per_node():
    # tp=1, dp=6 on 8-GPU nodes: the DP group of ranks 6..11 crosses a node boundary.
    assert ranks_per_node(6, 1, 8) == 1


def test_megatron_order_puts_dp_inside_the_node_and_pp_across():
    place = group_placement(tp=2, dp=4, pp=8, gpus_per_node=8)
    assert place == {"tp": 2, "cp": 1, "dp": 4, "dpcp": 4, "pp": 1}
    place = group_placement(tp=8, dp=4, pp=2, gpus_per_node=8)
    assert place == {"tp": 8, "cp": 1, "dp": 1, "dpcp": 1, "pp": 1}
    # context parallelism sits between TP and DP (order tp-cp-dp-pp)
    place = group_placement(tp=2, dp=2, pp=2, gpus_per_node=8, cp=2)
    assert place == {"tp": 2, "cp": 2, "dp": 2, "dpcp": 4, "pp": 1}


def test_vectorised():
    out = ranks_per_node(np.array([8, 6, 16]), 1, 8)
    np.testing.assert_array_equal(out, [8, 1, 8])
