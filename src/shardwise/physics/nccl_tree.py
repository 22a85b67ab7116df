"""NCCL's double binary tree all-reduce across servers when its communicator has one GPU per
server: the share of the bus bandwidth it reaches beside the tree of a communicator with several.

NCCL prices its tree against the same bus bandwidth as its ring (graph.nChannels x bw) and
discounts it by the pattern its graph search found (NVIDIA/nccl src/graph/tuning.cc
ncclTopoTuneModel; read at v2.20.5-1, the NCCL of PyTorch 2.3 and 2.4; later releases test
`comm->maxTreePattern == NCCL_TOPO_PATTERN_TREE` and move the code to src/tuning/):
``if (a == NCCL_ALGO_TREE && graphs[a]->pattern == NCCL_TOPO_PATTERN_TREE) busBw *= .85``.
NCCL_TOPO_PATTERN_TREE is "all NIC traffic going to/from the same GPU" (src/include/graph.h): the
search sets it whenever the communicator has one GPU in the server (src/graph/search.cc
ncclTopoCompute: "if (ngpus == 1) if (graph->pattern != NCCL_TOPO_PATTERN_RING) graph->pattern =
NCCL_TOPO_PATTERN_TREE"), where with several GPUs a balanced tree spreads a server's NIC traffic
over two of them (parent and one child on the first, the other child on the second). That one GPU
receives both children's halves and sends to its parent, and the reverse for the broadcast,
through its one NIC. Hybrid sharding's replica group (one rank per server: FSDP's HYBRID_SHARD
all-reduce across replicas) and any data-parallel group of one GPU per server run such a tree.

`physics.collectives` prices the tree of a communicator with several GPUs per server at the ring's
bus bandwidth (its curves: nccl-tests across 2-4 servers of 8 GPUs); the share here is NCCL's
own discount of the one-GPU pattern against that, taken as NCCL states it (dimensionless, in
(0, 1]): nothing is fitted. NCCL's other tree discounts (busBw x 0.92, its treeCorrectionFactor by
size) apply to every pattern and are already in what those curves measured: priced on top of the
pipelined model they make the 8-GPU servers' curves worse (h100x32 17% -> 37% MAPE), so they are
left out.

Doubts: 0.85 is the discount NCCL's tuning model uses to choose an algorithm, not a measured rate,
and no measured curve of one GPU per server checks it (the one in the project, 2 GH200 nodes, is a
ring's either way). On sm90 and later the search also falls back from a balanced tree to this
pattern when the balanced one misses its target speed (search.cc: `if (ccMin >= 90 &&
tmpGraph.pattern == NCCL_TOPO_PATTERN_BALANCED_TREE) tmpGraph.pattern = NCCL_TOPO_PATTERN_TREE`),
so Hopper servers of several GPUs may pay it too; that fallback is not priced.
"""

from __future__ import annotations

import numpy as np

from shardwise.arrays import ifelse
from shardwise.specs._checks import Number

TREE_ONE_GPU_SHARE = 0.85


def tree_bandwidth_share(per_node: Number) -> Number:
    """The share of the ring's bus bandwidth NCCL's tree reaches across servers: 0.85 where the
    communicator has one GPU per server (`per_node` <= 1), else 1."""
    return ifelse(np.asarray(per_node) <= 1, TREE_ONE_GPU_SHARE, 1.0)
