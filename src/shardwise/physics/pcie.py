"""A communicator group on a PCIe server with switches and sockets (`specs.pcie.PcieTopology`):
the ring bandwidth its slowest hop leaves, by group size.

Notation: p GPUs in the group (consecutive, as NCCL and the engines place them), s per switch,
c per socket; B a GPU's sustained link rate, U a switch uplink's (B where none is given), X the
socket interconnect's, D one socket's DRAM, r = `custom_allreduce.P2P_OFF_BANDWIDTH_RATIO` the
rate of a transfer staged through host memory over a direct one on GPUs without P2P (0.31, 2 x
RTX 3090), q = `SHM_STAGED_SHARE` the same on GPUs that have P2P (5/6, below).

NCCL's ring visits the p GPUs in order, so its hops are of three kinds (nvidia-smi topo's names):
PIX inside a switch, PHB between switches (or root ports) of one socket, SYS across sockets.
Each hop runs peer-to-peer (P2P) or through host memory (NCCL's SHM transport):
- P2P needs the GPUs' peer access at all (`Cluster.p2p`: off on GeForce cards' stock driver) and,
  beyond a switch, `PcieTopology.p2p_beyond_switch` (NCCL >= 2.23.4 keeps P2P inside switches by
  default, src/graph/paths.cc: `p2pLevel = PATH_PXB`);
- a P2P hop moves at B inside a switch, min(B, U) through the root complex, min(B, U, X) across
  sockets;
- an SHM hop between GPUs that have P2P (NCCL stages it only because of its P2P level) moves at
  min(q min(B, U), X, D / (2 k_m)): NCCL's SHM transport pipelines the two legs (the sender's
  kernel stores into a host buffer on the receiver's side, src/transport/shm.cc `SHM_LOCALITY` =
  receiver, "direct" unless NCCL_SHM_USE_CUDA_MEMCPY; the receiver's kernel loads from it), so the
  hop runs at its slower leg: the loads. Their data comes back as read completions, which a root
  complex splits at its read completion boundary (RCB, 64 or 128 bytes for a root complex: PCI
  Express Base Specification, quoted by Intel AN 855 "Throughput for Reads"; 64, a cache line, on
  the x86 hosts here), each with 20 bytes of framing, sequence number, 3-dword header and LCRC (AN
  855): 64 / 84 of the wire. A P2P hop, and the store leg, move posted writes of 256 bytes (the
  max payload size) with 24 bytes (a 4-dword header): 256 / 280. So q = (64 / 84) / (256 / 280) =
  5/6 (`SHM_STAGED_SHARE`), the same share NCCL's own topology charges such a path on Intel CPUs:
  a GPU -> GPU path without P2P is diverted through the receiver's CPU (src/graph/paths.cc
  `addInterStep`, type PHB within a socket), and src/graph/search.cc `followPath` charges
  `INTEL_P2P_OVERHEAD` (6/5) on any PHB path from a GPU through an Intel CPU, P2P or not; on AMD
  CPUs NCCL charges nothing, though the read completions are the same. Measured, bare metal, the
  same NCCL with SHM against P2P on one socket: 4 RTX PRO 6000 (PCIe Gen5, two AMD Turin) 36.0-37.6
  against 44.9-46.6 GB/s all-reduce busbw from 16 to 128 MB, 0.80-0.81 (NVIDIA/nccl PR #2080,
  NCCL 2.29.7); 4 RTX 4090 with P2P enabled, one NUMA node, 18 against 22 GB/s, 0.82
  (NVIDIA/nccl#1603); a copy staged through host memory on a Gen5 pair 43 against 55-56 GB/s,
  0.77-0.78 (aikitoria's open-gpu-kernel-modules README, quoted by club-3090 docs/PCIE_P2P.md).
  8 A40 on two AMD EPYC 7302 (nccl-tests#74, NCCL 2.8): on the 4 GPUs of one socket P2P beats
  SHM, as here; across the sockets SHM is slightly faster than P2P, both bound by the socket link
  here. Before #37's staged
  share (this rule) the staged hop moved at its path's rate (q = 1);
- an SHM hop on GPUs without P2P at all (`Cluster.p2p` off) at min(r B, U / k_u, D / (2 k_m), X
  across sockets), with k_u the staged streams that share one uplink (every GPU of the group
  behind that switch) and k_m those staged through one socket's DRAM (each written once, read
  once). r is measured on such cards only (2 x RTX 3090 in a VM; the 2 x RTX 2080 Ti nccl-tests
  curves check it), and is not carried over to server GPUs: those measurements ran every hop
  through host memory from cards that have no P2P, in a VM (VFIO passthrough) for the 0.31.

The ring moves at its slowest hop (its busbw): min over the hop kinds the group has. A group
inside one switch keeps P2P's B; one that leaves it on P2P-capable GPUs drops to its path's rate
(the socket link where it crosses sockets); on GPUs without P2P every hop is staged at r B, and
groups behind a switch share its uplink (U / k_u falls with the group).
Latency is the link's, as for P2P off (`custom_allreduce.P2P_OFF_EXTRA_LATENCY_S`).

Two rules of NCCL's topology depend on the CPU's maker (`PcieTopology.cpu`):
- Intel: "Intel CPU convert GPU P2P traffic into 64B PCI TLPs, so GPU to GPU traffic consumes more
  PCI bandwidth" (NVIDIA/nccl src/graph/topo.h, `INTEL_P2P_OVERHEAD(bw)` = bw x 6/5, charged by
  src/graph/search.cc `followPath` on paths of type PATH_PHB that start at a GPU and cross an
  Intel CPU). So a P2P hop between switches or root ports of one Intel socket moves at
  `INTEL_RC_P2P_SHARE` = 5/6 of its path's rate. Physically the root complex splits the peer
  writes into 64-byte packets, whose ~20-24 bytes of header and framing per packet leave about
  0.73 of the wire for data against about 0.92 with the 256-byte packets a GPU's own DMA uses: a
  ratio of about 0.8, which NCCL rounds to 5/6. NCCL charges no such overhead on a SYS path (its
  rate is the socket link's), and neither does this module. Where P2P runs beyond a switch within
  a socket (`p2p_beyond_switch`, NCCL_P2P_LEVEL=SYS on Intel) a hop between root ports moves at
  5/6 of its path; NCCL's default stages it through host memory instead, whose loads come back in
  64-byte read completions: the same 5/6 (`SHM_STAGED_SHARE`, above). On `l40s-8x` (each L40S on
  its own root port) TP 2, 4 and 8 ring at 19.9 GB/s either way (TP 8's hops across the sockets at
  Sapphire Rapids' 22 are not the slowest).
- AMD: "Allow P2P between pairs of GPU devices on AMD systems" (src/graph/paths.cc
  `ncclTopoCheckP2p`: p2pLevel = PATH_SYS where the communicator's node has at most 2 GPUs), so a
  group of 2 GPUs on an AMD server runs P2P whatever lies between them, on GPUs that have P2P at
  all: at its path's rate, not the staged hop's 5/6 (on `a100-pcie-8x` TP 2 rings at 23.9 GB/s,
  TP 4 staged at 19.9, TP 8 at the socket link's 16).

Why not r B beyond a switch (the rule before this change, #37): on `l40s-8x-switch` it priced TP 8's
ring at 7.4 GB/s against TP 4's 23.9, and TP8/TP4 serving throughput of Llama 3 70B at a median
0.5 (0.39 at 128/128 tokens), where #37 reports measured ratios near 1.05 (held out; nothing set from them).
With the path's rate TP 8 rang at 22 GB/s (the Sapphire Rapids socket link NCCL assumes), with
the staged share at 19.9 (its hops across the switch uplinks, below the socket link).

Checks (nothing here is fitted to them): 8 GPUs on PCIe Gen5, P2P everywhere (behind switches on
one CPU, or two AMD Turin sockets with NCCL_P2P_LEVEL=SYS), measure 37.6-41.7 GB/s all-reduce
busbw (voipmonitor/rtx6kpro hardware/pcie-bandwidth.md, RTX PRO 6000 cards): this module gives
47.9 GB/s (pcie5: 63 GB/s x 0.76), 15-27% fast, as `links.yaml`'s pcie5 is for any ring. The same
page's 22.2 GB/s with NCCL's defaults on the Turin box (32 MB; NCCL stages every hop between root
ports through host memory there) is priced at its path's rate, 16 GB/s (NCCL's AMD_BW socket
link), 28% slow (r B, the rule before, gave 14.8): the socket links NCCL assumes are lower bounds.
2 x RTX 2080 Ti behind one switch with P2P unsupported: 4.0 GB/s measured, 3.7 here.
"""

from __future__ import annotations

import numpy as np

from shardwise.physics.custom_allreduce import NVLINK_CLASS_BYTES_PER_S, P2P_OFF_BANDWIDTH_RATIO
from shardwise.specs import Link
from shardwise.specs._checks import Number
from shardwise.specs.pcie import PcieTopology

# NCCL src/graph/topo.h INTEL_P2P_OVERHEAD: a P2P flow through an Intel root complex takes 6/5 of
# its rate on the PCIe links, so a PHB hop moves at 5/6 of its path's rate (module docstring).
INTEL_RC_P2P_SHARE = 5.0 / 6.0
# NCCL src/graph/paths.cc ncclTopoCheckP2p: on AMD CPUs, P2P at PATH_SYS for at most 2 GPUs.
AMD_P2P_ANYWHERE_MAX_GPUS = 2
# A hop staged through host memory on GPUs that have P2P (module docstring): its loads come back as
# read completions of a root complex's read completion boundary, 64 bytes, each with 20 bytes of
# framing, header and LCRC; a P2P hop moves posted writes of 256 bytes with 24 (PCI Express Base
# Specification via Intel AN 855). The staged hop's share of a P2P hop's rate: (64/84) / (256/280) = 5/6.
PCIE_READ_COMPLETION_BYTES, PCIE_COMPLETION_OVERHEAD_BYTES = 64.0, 20.0
PCIE_WRITE_PAYLOAD_BYTES, PCIE_WRITE_OVERHEAD_BYTES = 256.0, 24.0
SHM_STAGED_SHARE = (PCIE_READ_COMPLETION_BYTES / (PCIE_READ_COMPLETION_BYTES + PCIE_COMPLETION_OVERHEAD_BYTES)) / (
    PCIE_WRITE_PAYLOAD_BYTES / (PCIE_WRITE_PAYLOAD_BYTES + PCIE_WRITE_OVERHEAD_BYTES)
)


def _p2p_beyond_switch(top: PcieTopology, p2p: bool, ranks: Number) -> Number:
    """P2P beyond a switch: NCCL_P2P_LEVEL=SYS (`p2p_beyond_switch`), or NCCL's own rule for 2 GPUs
    on AMD CPUs; on GPUs that have P2P at all."""
    pair_on_amd = (top.cpu == "amd") & (np.asarray(ranks) <= AMD_P2P_ANYWHERE_MAX_GPUS)
    return np.asarray(bool(p2p) & (top.p2p_beyond_switch | pair_on_amd))


def members_per_switch_socket(top: PcieTopology, stride: Number = 1) -> tuple[Number, Number]:
    """A group's members per switch and per socket where they lie `stride` GPUs apart (training's
    DP, CP and expert groups, Megatron-LM's rank order `physics.topology`; a pipeline's stages):
    s / stride and c / stride, at least 1 each. The group's ring then has the hops of a group of
    consecutive GPUs on a server of that many GPUs per switch and socket: members 2 apart on a
    switch of 4 meet 2 per switch, one hop inside it and one out; members a switch apart, one each."""
    t = np.maximum(np.asarray(stride, dtype=float), 1.0)
    s = np.maximum(np.floor(top.gpus_per_switch / t), 1.0)
    return s, np.maximum(np.floor(top.gpus_per_socket / t / s) * s, s)


def p2p_reach(top: PcieTopology | None, p2p: bool, ranks: Number, stride: Number = 1) -> Number:
    """Whether every hop of a group of `ranks` GPUs (`stride` apart: `members_per_switch_socket`)
    runs P2P, by the rule the ring's rate is priced with (`ring_bandwidth_bytes_per_s`): inside a
    switch where the GPUs have P2P at all, beyond it where `_p2p_beyond_switch`; `p2p` alone on a
    server without a PCIe block."""
    p = np.maximum(np.asarray(ranks, dtype=float), 1.0)
    if top is None:
        return np.full(p.shape, bool(p2p)) if p.ndim else np.asarray(bool(p2p))
    inside = p <= members_per_switch_socket(top, stride)[0]
    return bool(p2p) & (inside | _p2p_beyond_switch(top, p2p, p))


def ring_bandwidth_bytes_per_s(top: PcieTopology, link: Link, p2p: bool, ranks: Number, stride: Number = 1) -> Number:
    """Sustained one-direction rate of a ring over `ranks` GPUs of one server, `stride` apart
    (consecutive: 1; `members_per_switch_socket`) (module docstring); B for a single GPU."""
    p = np.maximum(np.asarray(ranks, dtype=float), 1.0)
    s, c = members_per_switch_socket(top, stride)
    b = np.asarray(link.effective_bandwidth_bytes_per_s, dtype=float)
    up = top.uplink_bandwidth_bytes_per_s
    u = b if not np.any(np.asarray(up) > 0) else np.asarray(up, dtype=float) * link.efficiency
    x = np.asarray(top.socket_link_bandwidth_bytes_per_s, dtype=float)
    x = np.where(x > 0, x, np.inf)
    d = np.asarray(top.host_memory_bandwidth_bytes_per_s, dtype=float)
    switches, sockets = np.ceil(p / s), np.ceil(p / c)
    inside = (s > 1) & (p > 1)  # PIX hops
    within = np.ceil(np.minimum(p, c) / s) > 1  # PHB hops: two switches (or root ports) of one socket
    across = sockets > 1  # SYS hops
    p2p_inside = bool(p2p)
    p2p_beyond = _p2p_beyond_switch(top, p2p, p)
    all_staged = not p2p_inside  # GPUs without P2P: every hop through host memory
    k_u = np.minimum(p, s) if all_staged else np.ones_like(p)
    k_m = np.minimum(p, c) if all_staged else np.minimum(switches, c / s)
    memory = np.where(d > 0, d / (2.0 * k_m), np.inf)
    # SHM: GPUs without P2P at r B (measured on such cards), the uplink shared; P2P-capable GPUs at
    # the staged share of their path (the receiver's loads in 64-byte read completions)
    if p2p:
        staged = np.minimum(SHM_STAGED_SHARE * np.minimum(b, u), memory)
    else:
        staged = np.minimum(np.minimum(P2P_OFF_BANDWIDTH_RATIO * b, u / k_u), memory)
    pix = b if p2p_inside else staged
    path = np.minimum(b, u)
    # a P2P hop through an Intel root complex (PHB) at 5/6; across sockets (SYS) the socket link's
    phb = np.where(p2p_beyond, path * (INTEL_RC_P2P_SHARE if top.cpu == "intel" else 1.0), staged)
    sys = np.where(p2p_beyond, np.minimum(path, x), np.minimum(staged, x))
    out = np.where(inside, pix, np.inf)
    out = np.where(within, np.minimum(out, phb), out)
    out = np.where(across, np.minimum(out, sys), out)
    return np.where(np.isfinite(out), out, b)


def group_link(top: PcieTopology, link: Link, p2p: bool, ranks: Number, stride: Number = 1) -> Link:
    """The server's link as a group of `ranks` GPUs (`stride` apart) sees it: its sustained rate the
    ring's (`ring_bandwidth_bytes_per_s`), NCCL's LL protocol only where every hop is P2P. Serving
    prices its widest group on it (`engines.serving.on_pcie_topology`), training each group and
    its pipeline's sends (`physics.collectives.Fabric`)."""
    rate = ring_bandwidth_bytes_per_s(top, link, p2p, ranks, stride)
    direct = np.isclose(rate, np.asarray(link.effective_bandwidth_bytes_per_s, dtype=float))
    ll = np.where(direct, link.ll_bandwidth_bytes_per_s, 0.0)
    raw = rate / link.efficiency
    # a swept link rate (crossover --vary bandwidth=4GB/s..900GB/s): its NVLink-class points are a GPU
    # fabric, not these switches and sockets, and keep the link as given
    fabric = np.asarray(link.bandwidth_bytes_per_s) >= NVLINK_CLASS_BYTES_PER_S
    raw, ll = np.where(fabric, link.bandwidth_bytes_per_s, raw), np.where(fabric, link.ll_bandwidth_bytes_per_s, ll)
    return link.with_(
        name=f"{link.name} (PCIe topology)",
        bandwidth_bytes_per_s=_scalar(raw),
        ll_bandwidth_bytes_per_s=_scalar(ll),
    )


def _scalar(x: Number) -> Number:
    return float(x) if np.ndim(x) == 0 else x
