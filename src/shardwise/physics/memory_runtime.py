"""What every training process holds whatever its model: the CUDA context, the libraries'
workspaces and NCCL's buffers, per communicator the plan runs (the `reserved` row of
`physics.memory.MemoryBreakdown`). Serving keeps its own estimate (`physics.memory.RUNTIME_RESERVED_BYTES`).
"""

from __future__ import annotations

import numpy as np

from shardwise.specs._checks import Number
from shardwise.specs.memo import kept
from shardwise.units import GIB, KIB, MIB

# CUDA context of one process (CUDA 12, lazy module loading) on an 80 GB H100: the "non-PyTorch
# memory" of single-GPU out-of-memory reports, in use minus allocated minus reserved-unallocated:
# pytorch/pytorch#152135 (79.14 - 74.77 - 3.87 = 0.50 GiB) and a one-GPU run's report of
# 79.23 - 78.42 - 0.34 = 0.47 GiB.
CUDA_CONTEXT_BYTES = 0.5 * GIB
# cuBLAS / cuBLASLt workspaces: 32 MiB per handle and stream on Hopper (PyTorch's default
# CUBLAS_WORKSPACE_CONFIG :4096:8; Transformer Engine's get_cublas_workspace_size_bytes), on the
# compute stream and up to three communication-overlap streams.
LIBRARY_WORKSPACE_BYTES = 4 * 32 * MIB
# NCCL's buffers for one connection (src/init.cc, DEFAULT_LL_BUFFSIZE, DEFAULT_LL128_BUFFSIZE,
# DEFAULT_BUFFSIZE): LL 8 lines x 512 threads x 8 steps x 16 B = 512 KiB, LL128 120 x 640 threads
# x 8 steps x 8 B = 4.6875 MiB, Simple NCCL_BUFFSIZE = 4 MiB.
NCCL_CONNECTION_BYTES = 8 * 512 * 8 * 16 + 120 * 640 * 8 * 8 + 4 * MIB
# Channels of a collective communicator: "24 coll channels" in NCCL_DEBUG=INFO logs of 8-GPU H100
# (AWS p5) and A100 servers. Each rank's ring receives from one peer per channel; since NCCL 2.22
# (NCCL_RUNTIME_CONNECT=1) only the algorithms a communicator runs are connected, and large
# messages run the ring.
NCCL_CHANNELS = 24
# NVLink SHARP buffers of a communicator inside one switch domain with more than two ranks
# (src/transport/nvls.cc, ncclNvlsBufferSetup): nvlsChannels (16) x 2 x buffSize per head, buffSize
# = NCCL_NVLS_CHUNKSIZE 128 KiB x NCCL_STEPS 8, one head per local rank. (NCCL 2.18-2.20 used
# 288 MiB per head, 2.25 GiB for 8 GPUs: vllm-project/vllm#9699's log, nvlsTotalSize 2415919104.)
NVLS_CHANNELS = 16
NVLS_BUFFER_BYTES = 128 * KIB * 8
NVLS_MIN_RANKS = 3
# Connections per channel with the tree connected at init (`communicator_bytes`): the ring's
# receive from its previous rank and the tree's from its other neighbour.
TREE_CONNECTIONS = 2.0
# One NVLS head's buffers: 32 MiB (NCCL 2.21 on). NCCL 2.18-2.20 set them up when a communicator
# was created, whether or not it ran NVLS, at nChannels x 2 x (buffSize + memSize) a head: NCCL
# 2.18.1 src/transport/nvls.cc ncclNvlsSetup, nvlsPerRankSize with NCCL_NVLS_NCHANNELS 16,
# buffSize = NCCL_BUFFSIZE 4 MiB and memSize = NVLS_MEM_ALIGN_SIZE 2 MiB: 192 MiB a head, 1.5 GiB for
# 8 GPUs, every rank allocating the whole (cuMemCreate of nvlsTotalSize). vllm-project/vllm#9699's
# log (buffSize 4194304, memSize 2097152, nvlsPerRankSize 301989888: 288 MiB a head) is the same
# formula with 24 NVLS channels, not 2.18.1's default. NVIDIA/NeMo-Framework-Launcher#127 and
# sgl-project/sglang#631 turned NVLS off to get that memory back. A stack whose runs used such a
# NCCL says so (`StackMemory.nvls_head_bytes`).
NVLS_HEAD_BYTES = NVLS_CHANNELS * 2 * NVLS_BUFFER_BYTES
# Point-to-point (send/recv) connections: NCCL connects them on a pair's first send or receive
# (2.18.1 src/enqueue.cc taskAppend: `p2pnChannelsPerPeer` channels marked for preconnect), on the
# connector index collectives do not use (send[1]/recv[1]), each with the receive buffers of a
# collective's connection (src/transport/p2p.cc p2pRecvSetup: LL, LL128 and Simple; under P2P read,
# Ampere's default, the Simple buffer sits on the sender: the same per rank where each sends to and
# receives from the other, as a 1F1B pipeline's neighbours do). Channels per peer
# (src/graph/paths.cc ncclTopoComputeP2pChannels, 2.18.1): the next power of two of the
# smallest of the communicator's channels (`NCCL_CHANNELS`) and, for every rank of the
# communicator, 2 x the NVLinks to it (18 on H100 SXM: 36) or 2 over PCIe or a network
# (NCCL_NCHANNELS_PER_NET_PEER): 32 a peer where every rank is over NVLink in one server
# (nextPow2(24); 2.30 takes nextPow2(36) = 64 and caps it at its 32 p2p channels), 2 once one rank
# is in another server (2.18's NCCL_NCHANNELS_PER_NET_PEER; later versions one a NIC or more by its
# rate, and the network transport keeps part of its buffers on the host). NCCL logs: "16 coll
# channels, ... 16 p2p channels per peer" on 8 H800 (8 NVLinks; NVIDIA/nccl#892), "8 coll channels,
# ... 2 p2p channels per peer" on two servers (NVIDIA/nccl#1189).
P2P_CHANNELS_NVLINK_PEER = 32
P2P_CHANNELS_OTHER_PEER = 2
NVLS_HEAD_BYTES_NCCL_2_18 = NVLS_CHANNELS * 2 * (4 * MIB + 2 * MIB)


def nccl_buffer_bytes(
    tp: Number,
    cp: Number,
    dp: Number,
    pp: Number,
    ep: Number,
    gpus_per_node: Number,
    nvls: Number,
    head_bytes: float = NVLS_HEAD_BYTES,
    tree: bool = False,
) -> Number:
    """NCCL's buffers on one GPU: a ring's connections (`NCCL_CHANNELS` x `NCCL_CONNECTION_BYTES`)
    for each communicator the plan runs (tp, cp, the gradients' dp x cp, pp's sends, ep), and NVLink
    SHARP buffers for those with more than two ranks in a server where `nvls` allows them.
    Ranks are placed tp first, then cp, dp and pp (Megatron-LM's order), so a group spans its size
    times the sizes inside it. `tree`: the NCCL connects the tree at init too (`communicator_bytes`)."""
    tp, cp, dp, pp, ep = (np.asarray(x) for x in (tp, cp, dp, pp, ep))
    out = np.where(ep > 1, NCCL_CHANNELS * NCCL_CONNECTION_BYTES, 0.0)  # the experts' all-to-all (NVLS does not apply)
    for size, span in ((tp, tp), (cp, tp * cp), (dp * cp, tp * cp * dp), (pp, tp * cp * dp * pp)):
        out = out + communicator_bytes(size, local_ranks(size, span, gpus_per_node), nvls, head_bytes, tree)
    return out


def local_ranks(size: Number, span: Number, gpus_per_node: Number) -> Number:
    """The ranks a communicator of `size` ranks spread evenly over `span` GPUs (one every span /
    size) has in each server of `gpus_per_node`: all of them inside one server, one where the
    stride is a server or more."""
    size, span = np.asarray(size, dtype=float), np.asarray(span, dtype=float)
    return np.minimum(size, np.maximum(1.0, np.asarray(gpus_per_node) * size / np.maximum(span, 1.0)))


def communicator_bytes(
    size: Number, local: Number, nvls: Number, head_bytes: float = NVLS_HEAD_BYTES, tree: bool = False
) -> Number:
    """NCCL's buffers on one GPU for one communicator of `size` ranks, `local` of them in this
    server (`local_ranks`): a ring's connections, and NVLink SHARP buffers, one head per local rank,
    where more than two of its ranks share the server and `nvls` allows them; nothing for a single
    rank. NCCL sets NVLS up by the communicator's GPUs in the server, whether or not it spans
    servers (src/transport/nvls.cc: ncclNvlsInit returns for `gpuCount <= 2`, gpuCount the
    communicator's GPUs in this node's topology; ncclNvlsTreeConnect joins the servers' NVLS heads
    when nNodes > 1, NCCL 2.18 on; 2.17 returned for nNodes > 1). `head_bytes`: one head's buffers
    (`NVLS_HEAD_BYTES`, or the NCCL version's). `tree`: an NCCL before 2.22 connects every
    channel's tree when the communicator is created, beside its ring (NCCL 2.18.1 src/init.cc
    initTransportsRank: "Connected all rings", then "Connected all trees"; 2.22's
    NCCL_RUNTIME_CONNECT connects an algorithm on its first use). A peer a channel already has is
    not connected again (src/transport.cc ncclTransportP2pConnect skips `connected` peers), so the
    tree's chain adds a receive per channel from its other neighbour (two where its order is not
    the ring's): twice the ring's buffers at least with three ranks or more, nothing more with two
    (`TREE_CONNECTIONS`)."""
    size, local = np.asarray(size), np.asarray(local)
    ring = NCCL_CHANNELS * NCCL_CONNECTION_BYTES * np.where(tree & (size > 2), TREE_CONNECTIONS, 1.0)
    nvls_here = np.asarray(nvls, dtype=bool) & (local >= NVLS_MIN_RANKS)
    return np.where(size > 1, ring, 0.0) + np.where(nvls_here, head_bytes * local, 0.0)


@kept
def stack_group_bytes(
    groups: tuple[str, ...],
    tp: Number,
    cp: Number,
    dp: Number,
    pp: Number,
    gpus_per_node: Number,
    nvls: Number,
    head_bytes: float = NVLS_HEAD_BYTES,
    tree: bool = False,
    tied: bool = False,
) -> Number:
    """NCCL's buffers for the communicators a stack creates beyond the plan's (`StackMemory.extra_groups`),
    each as `communicator_bytes` prices it (`tree`: the NCCL connects the tree at init):
    "default", the default process group over every rank (nanotron's ParallelContext runs
    `dist.barrier()` on it at start, an NCCL all-reduce); "world", a second one over every rank
    (nanotron's `world_pg`, a `dist.new_group` of all ranks, a communicator of its own, first used by
    `create_pg_for_tied_weights`' all_gather_object when the model is built); "node", one over the
    ranks of a server (nanotron's `local_pg` on the nouamane/bench2 branch, whose `measure_bandwidth`
    runs collectives on it before training), unless it is the tp, dp, pp or tp x pp group, whose
    rank set it then is (`create_new_group` returns the group it made for those ranks);
    "tp_pp", one over a model replica's tp x pp ranks where it differs from the tp and pp groups
    (nanotron's mp_pg, over which clip_grad_norm all-reduces the gradient norm); "p2p", with pp > 1
    the two-rank communicator PyTorch's ProcessGroupNCCL makes for each pair of ranks that
    `isend`/`irecv` on their own, outside a batch (`pointToPoint`, key `getKeySendRecv(rank, peer)`):
    one for a first or last stage (the fullest), whose single neighbour it reaches; "tied_ends", with
    pp > 1 and `tied` embeddings, the two-rank group over the first and last stage's ranks that
    `sync_tied_weights_gradients` all-reduces the tied embedding's gradient over."""
    tp, cp, dp, pp = (np.asarray(x) for x in (tp, cp, dp, pp))
    out = np.zeros(np.broadcast(tp, cp, dp, pp).shape)
    world = tp * cp * dp * pp
    every_rank = communicator_bytes(world, local_ranks(world, world, gpus_per_node), nvls, head_bytes, tree)
    out = out + every_rank * (groups.count("world") + groups.count("default"))
    # a block of tp consecutive ranks, then one every tp x cp x dp: the tp ranks in a server
    # times the pipeline stages whose blocks share it
    mp = tp * pp
    mp_local = np.minimum(local_ranks(tp, tp, gpus_per_node) * local_ranks(pp, world, gpus_per_node), mp)
    mp_own = (tp > 1) & (pp > 1)
    if "tp_pp" in groups:
        out = out + np.where(mp_own, communicator_bytes(mp, mp_local, nvls, head_bytes, tree), 0.0)
    if "node" in groups:
        node = np.minimum(world, gpus_per_node)
        # the same rank set as a group already made: the tp group (tp consecutive ranks), the dp
        # group (contiguous only at tp 1), the pp group (at tp x dp 1) or, counted, mp_pg (at dp 1)
        same = (
            (tp == node)
            | ((tp == 1) & (dp * cp == node))
            | ((tp * cp * dp == 1) & (pp == node))
            | (("tp_pp" in groups) & mp_own & (cp * dp == 1) & (mp == node))
        )
        out = out + np.where(same, 0.0, communicator_bytes(node, node, nvls, head_bytes, tree))
    pairs = float("p2p" in groups) + float(tied and "tied_ends" in groups)
    return out + np.where(pp > 1, pairs * NCCL_CHANNELS * NCCL_CONNECTION_BYTES, 0.0)  # two ranks: a ring, no NVLS


def pipeline_p2p_bytes(
    tp: Number,
    cp: Number,
    dp: Number,
    pp: Number,
    vpp: Number,
    gpus_per_node: Number,
    nvlink: Number,
    pair_communicators: bool = False,
) -> Number:
    """NCCL's send/recv connections of one pipeline stage (`P2P_CHANNELS_NVLINK_PEER`), with pp > 1:
    per peer it receives from, its channels x `NCCL_CONNECTION_BYTES`. Peers: one for a first or
    last stage (the fullest), two under the interleaved schedule with pp > 2 (the first stage's
    model chunks also receive from the last stage). Ranks are placed tp, cp, dp, then pp, so a
    stage's neighbour is tp x cp x dp ranks away. `pair_communicators`: the stack sends and receives
    outside a batch, so PyTorch gives each pair its own two-rank communicator (ProcessGroupNCCL
    `pointToPoint`; nanotron's `p2p.py`), whose channels are NVLink's where the neighbour is in the
    same server; otherwise the sends run in the pipeline communicator (torch's
    `batch_isend_irecv` on the pp group: Megatron-LM, torchtitan), NVLink's only where all its
    ranks share a server. `nvlink`: the server's GPUs are joined by NVLink (else PCIe: 2 channels)."""
    tp, cp, dp, pp, vpp = (np.asarray(x, dtype=float) for x in (tp, cp, dp, pp, vpp))
    world = tp * cp * dp * pp
    local = local_ranks(pp, world, gpus_per_node)  # the pipeline group's ranks in one server
    same_server = (local >= 2) if pair_communicators else (local >= pp)
    channels = np.where(np.asarray(nvlink, dtype=bool) & same_server, P2P_CHANNELS_NVLINK_PEER, P2P_CHANNELS_OTHER_PEER)
    peers = np.where((vpp > 1) & (pp > 2), 2.0, 1.0)
    return np.where(pp > 1, peers * channels * NCCL_CONNECTION_BYTES, 0.0)


@kept
def runtime_reserved_bytes(
    tp: Number,
    cp: Number,
    dp: Number,
    pp: Number,
    ep: Number,
    gpus_per_node: Number,
    nvls: Number,
    head_bytes: float = NVLS_HEAD_BYTES,
    tree: bool = False,
) -> Number:
    """The CUDA context, the libraries' workspaces and NCCL's buffers of one training process
    (`head_bytes`: one NVLS head's buffers, `NVLS_HEAD_BYTES` or the stack's NCCL's; `tree`: the
    NCCL connects the tree at init, `communicator_bytes`)."""
    return RUNTIME_FLOOR_BYTES + nccl_buffer_bytes(tp, cp, dp, pp, ep, gpus_per_node, nvls, head_bytes, tree)


# what every process holds whatever its plan: `model_state_floor_bytes` counts only this much
RUNTIME_FLOOR_BYTES = CUDA_CONTEXT_BYTES + LIBRARY_WORKSPACE_BYTES
