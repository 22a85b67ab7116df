"""Time of NCCL-style collectives: a pipelined alpha-beta model.

Notation: n message bytes (the full buffer), p ranks in the group, g of them per node,
k = p / g nodes, B a link's sustained bandwidth (bytes/s, one direction), alpha a latency.

Plain alpha-beta (Hockney 1994; Thakur, Rabenseifner & Gropp 2005, ring all-reduce):

    T = alpha_base + steps * alpha_step + W / B,      W = 2 (p-1)/p * n  (all-reduce)

NCCL pipelines each ring step in chunks, so the per-step latency and the bandwidth term do not
simply add: a pipeline of depth D with per-chunk overhead alpha, sending W bytes in chunks of
the best size, takes (sqrt(D alpha) + sqrt(W / B))^2 -- the classic optimal-segmentation result
for pipelined chains and trees (e.g. Sanders, Speck & Traeff 2009, "Two-tree algorithms for full
bandwidth broadcast, reduction and scan", Sec. 2). We use

    T = alpha_base + (sqrt(alpha_pipe) + sqrt(W / B))^2,  alpha_pipe = sum of per-step latencies

which is plain alpha-beta at both ends (tiny W: latency; huge W: bandwidth) and reproduces the
slow approach to the asymptotic bus bandwidth that measured nccl-tests curves show between
1 MB and 1 GB (NCCL's own tuning model in NVIDIA/nccl src/graph/tuning.cc, which adds the two,
is 2-3x optimistic there). `tests/test_collectives.py` checks it against measured curves.

Algorithms, as NCCL picks them (src/graph/tuning.cc):
- ring: steps = 2(p-1) for all-reduce, of which 2(k-1) cross nodes (NCCL's nInterSteps);
  bandwidth min(B_intra, g * B_inter) across nodes (g rings, one per NIC). Across nodes the steps
  inside a node cost at least NCCL's network post overhead too (`NET_POST_S`: 3 us on an Intel or Arm
  host, 6 us on an AMD one, `Cluster.host_cpu`): the ring moves one step at a time through the nodes'
  network proxies, which post each step's send and receive, so p - 1 steps pay it however few of them
  cross a node (NCCL's own model does the same: intraLat = max(intraLat, netOverhead) when nNodes > 1).
  At a fixed buffer this grows with the ranks while the bytes per rank do not (FSDP's per-layer gathers);
- tree (all-reduce across nodes only): latency 2((g-1) alpha_intra + log2(k) alpha_inter),
  W = 2n (NCCL: algBw = busBw / 2), at 0.85 of B with one GPU per node (`physics.nccl_tree`);
- NVLS (NVLink SHARP, all-reduce inside one NVSwitch domain, Hopper and later): each rank
  reduces 1/p of the buffer by a multicast load through the switch (the switch reads that slice
  from every GPU: n bytes leave each GPU in all) and stores the result by multicast (n/p out, and
  n in from all ranks), so each direction of a GPU's link carries n (1 + 1/p):
  T = alpha_base + alpha_nvls + (sqrt(alpha) + sqrt(n (1 + 1/p) / (B e_nvls)))^2, with NCCL's
  nvlsEfficiency e_nvls (`Link.nvls_efficiency`) and NVLS latency alpha_nvls (tuning.cc hwLat,
  2.21: 25 us), paid once per call: the data takes one step through the switch, so the chunk
  pipeline has one stage of the link's per-step latency alpha (NCCL adds its hwLat once, not per
  step). On 5-8 H200 this gives 258-275 GB/s of algorithm bandwidth where 259-270 is measured, on
  6-8 B200 449-466 against 467-479 (`shardwise validate collectives`), with no constant fitted
  (with the 25 us inside the pipeline, as first written: 261-279 and 457-474, and 64-256 MiB on
  8 H100 17-24% slow where they are now 5-6% fast);
- NCCL takes whichever is faster, so do we.
Reduce-scatter and all-gather are half an all-reduce: p-1 steps, W = (p-1)/p * n.

Protocols. All of the above is NCCL's Simple protocol: data moves in chunks, each acknowledged
before its slot is reused, hence the pipeline. Inside one NVLink server NCCL also runs LL and
LL128, which put a flag in every 8-byte (LL) or 128-byte (LL128) line so the receiver reads data
as it lands, with no handshake per chunk: latency and transfer add,

    T = alpha_base + steps * alpha_proto + W / (B * share_proto),

with NCCL's per-step latency on NVLink (tuning.cc hwLat, ring: LL 0.6 us, LL128 1.9 us at the
presets' 1 us Simple step, scaled with a link's own) and
share of the bus bandwidth (LL 1/2 up to NCCL's llMaxBws for the GPU generation, the link's
`ll_bandwidth_bytes_per_s`; LL128 120/128 = 0.92). The fastest of Simple, NVLS, LL and LL128 is
taken. On NVIDIA's untouched nccl-tests all-reduce of 8 H100 (8 B to 16 GiB) this and the NVLS
latency paid once take the mean error from 30% to 11% (23 of the 26 sizes below 512 MiB within
20%); NCCL's LL on PCIe is not priced, since the PCIe curves (2 RTX 2080 Ti, 8 RTX 4090) show no
gain from its shorter steps, and LL128 needs an NVLink path. Across servers only Simple is
priced.

All-to-all (NCCL runs it as grouped send/receive to every peer at once): of a rank's n-byte
buffer, (g-1)/p goes to peers in its node over the node's links and (p-g)/p to other nodes,
each GPU through its own NIC; both run together, so
T = alpha_base + (sqrt(alpha) + sqrt(max(W_intra / B_intra, W_inter / B_inter)))^2 with one
latency alpha (the inter-node one when the group spans nodes).

Per collective kind across servers. A ring or tree step sends to one neighbour, rail to rail (GPU
i of one server to GPU i of the next), so it gets the NIC's rate; an all-to-all sends to every
peer at once, crossing rails (through the spine, or NVLink and PXN) with many flows into each NIC
(incast, ECMP collisions) and n/p bytes per peer, and a pipeline send is one flow between two
GPUs. `Cluster.inter_node_all_to_all_scale` and `Cluster.inter_node_p2p_scale` (1 unless
calibrated) scale the inter-node rate those two see, beside the ring and tree collectives'.
"""

from __future__ import annotations

import numpy as np

from shardwise.arrays import ifelse, minimum, one_value, sqrt
from shardwise.physics.bus_bandwidth import bus_bandwidth_bytes_per_s, bus_factor  # noqa: F401 (kept importable here)
from shardwise.physics.custom_allreduce import custom_all_reduce_s, is_nvlink_class, without_p2p
from shardwise.physics.nccl_tree import tree_bandwidth_share
from shardwise.physics.pcie import group_link
from shardwise.specs import Cluster, Link
from shardwise.specs._checks import Number
from shardwise.specs.memo import Memo, unwrapped
from shardwise.specs.pcie import PcieTopology

# NCCL's low-latency protocols (src/graph/tuning.cc, the same in 2.18 and 2.30): per-step latency
# on NVLink (hwLat, ring), and the share of the link's bus bandwidth each reaches (LL: half, at
# most the link's `ll_bandwidth_bytes_per_s`, NCCL's llMaxBws; LL128: 120 of each 128 bytes).
LL_STEP_S = 0.6e-6  # at the NVLink presets' Simple step, NVLINK_STEP_S; a link's own scales them
LL128_STEP_S, NVLINK_STEP_S = 1.9e-6, 1e-6
LL_SHARE = 0.5
LL128_SHARE = 0.92
NVLS_LATENCY_S = 25e-6  # NCCL src/graph/tuning.cc hwLat[NVLINK][NVLS] (2.21), once per call
# A ring across servers advances no faster than its network proxy posts one step: NCCL's own model
# charges each of the ring's steps inside a server at least the network post overhead when the
# communicator spans servers (src/graph/tuning.cc ncclTopoTuneModel, 2.18.1 to 2.30: "Inter-node
# rings still have to launch nsteps * net overhead", intraLat = max(intraLat, netOverhead)), with
# getNetOverhead() by the host CPU NCCL detects (comm->cpuArch, cpuVendor): 1 us on Intel x86, 2 us
# on AMD x86, 1 us on any other (Arm: Grace), x3 for Simple, the only protocol priced across servers.
# Seconds per ring step, by `Cluster.host_cpu`; NET_POST_OVERHEAD_S: a Group built without a cluster.
NET_POST_S = {"intel": 3 * 1.0e-6, "amd": 3 * 2.0e-6, "arm": 3 * 1.0e-6}
NET_POST_OVERHEAD_S = NET_POST_S["intel"]


def pipelined_time_s(base_s: Number, pipe_latency_s: Number, wire_bytes: Number, bw: Number) -> Number:
    """alpha_base + (sqrt(alpha_pipe) + sqrt(W/B))^2 (see module docstring)."""
    return base_s + (np.sqrt(pipe_latency_s) + np.sqrt(wire_bytes / bw)) ** 2


class Group:
    """A communicator of `ranks` GPUs, `per_node` of them in each node, on a cluster's links.

    Everything that depends only on the group (nodes spanned, ring and tree latencies, the
    bandwidth its rings get) is computed once, so each collective costs a few array operations.
    A group of one rank costs nothing.
    """

    __slots__ = (
        "_a2a",
        "_ar_factor",
        "_ar_latency",
        "_base",
        "_custom",
        "_inv_bw",
        "_ll",
        "_multi",
        "_nvls",
        "_nvls_step",
        "_rs_factor",
        "_rs_latency",
        "_tree_inv_bw",
        "_tree_latency",
    )

    def __init__(
        self,
        ranks: Number,
        per_node: Number,
        intra: Link,
        inter: Link | None,
        custom: tuple[str, bool, bool, bool] | None = None,
        all_to_all_scale: Number = 1.0,
        net_post_s: Number | None = None,
    ) -> None:
        post = NET_POST_OVERHEAD_S if net_post_s is None else net_post_s  # seconds per ring step
        p = np.asarray(ranks, dtype=float)
        g = np.minimum(np.asarray(per_node, dtype=float), p)
        k = np.maximum(p / g, 1.0)
        intra = on_mesh(intra, g)
        multi = k > 1
        a_in = intra.latency_s
        if inter is None:
            if np.any(multi):
                raise ValueError("a group spans nodes but the cluster has no inter-node link")
            a_out, bw, base = a_in, intra.effective_bandwidth_bytes_per_s, intra.base_latency_s
        else:
            a_out = inter.latency_s
            bw_intra = intra.effective_bandwidth_bytes_per_s
            bw = np.where(multi, np.minimum(bw_intra, g * inter.effective_bandwidth_bytes_per_s), bw_intra)
            base = np.where(multi, np.maximum(intra.base_latency_s, inter.base_latency_s), intra.base_latency_s)
        active = p > 1
        self._base = np.where(active, base, 0.0)
        self._inv_bw = 1.0 / bw
        # ring: 2(p-1) steps for an all-reduce, 2(k-1) of them across nodes (NCCL's nInterSteps);
        # across nodes the steps inside a node cost at least the network proxy's post (module docstring)
        a_ring = np.where(multi, np.maximum(a_in, post), a_in) if inter is not None else a_in
        self._ar_latency = 2 * (p - k) * a_ring + 2 * (k - 1) * a_out
        self._rs_latency = (p - k) * a_ring + (k - 1) * a_out
        self._ar_factor = 2 * (p - 1) / p
        self._rs_factor = (p - 1) / p
        self._multi = multi if np.any(multi) else None
        # NVLS: inside one switch domain, (1 + 1/p) n over each direction at nvls_efficiency
        nvls = intra.nvls_efficiency
        self._nvls = None
        if np.any(np.asarray(nvls) > 0) and not np.all(multi):
            off = multi | (p < 2) | (np.asarray(nvls) <= 0)  # there 1e30 s per byte: never chosen
            rate = intra.effective_bandwidth_bytes_per_s * np.maximum(nvls, 1e-9)
            self._nvls = np.where(off, 1e30, (1 + 1 / p) / rate)
            self._nvls_step = a_in  # one step through the switch
        self._tree_latency = 2 * ((g - 1) * a_in + np.log2(k) * a_out) if self._multi is not None else None
        self._tree_inv_bw = self._inv_bw / tree_bandwidth_share(g) if self._multi is not None else None
        # all-to-all: latency, seconds per byte in the node and out of it, the shares of a buffer
        inv_in = 1.0 / intra.effective_bandwidth_bytes_per_s
        inv_out = 1.0 / (inter.effective_bandwidth_bytes_per_s * all_to_all_scale) if inter is not None else 0.0
        self._a2a = (np.where(active, np.where(multi, a_out, a_in), 0.0), inv_in, inv_out, (g - 1) / p, (p - g) / p)
        # NCCL's LL and LL128 inside one server, where the link runs them (module docstring): the
        # latency of an all-reduce's 2(p-1) steps and of a reduce-scatter's p-1, seconds per byte
        self._ll = None
        ll_cap = np.asarray(intra.ll_bandwidth_bytes_per_s, dtype=float)
        if np.any(ll_cap > 0) and not np.all(multi):
            # not across servers, not where the link has no LL (a group of one rank costs 0 anyway)
            off = multi | (ll_cap <= 0) if self._multi is not None or np.any(ll_cap <= 0) else None
            base = self._base if off is None else np.where(off, np.inf, self._base)
            b = intra.effective_bandwidth_bytes_per_s
            steps = p - 1
            self._ll = tuple(
                (base + steps * (2 * step_s * a_in / NVLINK_STEP_S), base + steps * step_s * a_in / NVLINK_STEP_S, inv)
                for step_s, inv in (
                    (LL_STEP_S, 1.0 / np.maximum(np.minimum(LL_SHARE * b, ll_cap), 1e-9)),
                    (LL128_STEP_S, 1.0 / (LL128_SHARE * b)),
                )
            )
        # (kernel, NVLink-class, P2P on, Blackwell) of the serving engine's own all-reduce, inside one server
        self._custom = (p, intra, ~multi, *custom) if custom is not None and custom[0] != "none" else None
        if p.ndim == 0:  # one group: numpy scalars for its 0-d arrays (the same values, cheaper to use)
            for name in self.__slots__:
                if hasattr(self, name):
                    setattr(self, name, unwrapped(getattr(self, name)))

    @staticmethod
    def _pipe(latency: Number, transfer: Number) -> Number:
        return latency + transfer + 2.0 * sqrt(latency * transfer)  # (sqrt(a) + sqrt(b))^2

    def all_reduce(self, n_bytes: Number) -> Number:
        """Ring, NVLS inside one switch domain, or NCCL's double binary tree across nodes, whichever
        is faster; the serving engine's own kernel where it would use it (`physics.custom_allreduce`)."""
        ring = self._base + self._pipe(self._ar_latency, self._ar_factor * n_bytes * self._inv_bw)
        if self._nvls is not None:
            ring = minimum(ring, self._base + NVLS_LATENCY_S + self._pipe(self._nvls_step, n_bytes * self._nvls))
        if self._ll is not None:
            wire = self._ar_factor * n_bytes
            for latency, _, inv in self._ll:
                ring = minimum(ring, latency + wire * inv)
        if self._custom is not None:
            p, link, inside, kernel, nvlink, p2p, blackwell = self._custom
            own = custom_all_reduce_s(n_bytes, p, link, kernel, nvlink, p2p, blackwell)
            ring = np.where(np.isfinite(own) & inside, own, ring)
        if self._multi is None:
            return ring
        tree = self._base + self._pipe(self._tree_latency, 2.0 * n_bytes * self._tree_inv_bw)
        return ifelse(self._multi & (self._ar_factor > 0), minimum(ring, tree), ring)

    def reduce_scatter(self, n_bytes: Number) -> Number:
        """Ring reduce-scatter of an `n_bytes` buffer (each rank keeps 1/p); an all-gather of an
        `n_bytes` result costs the same."""
        wire = self._rs_factor * n_bytes
        ring = self._base + self._pipe(self._rs_latency, wire * self._inv_bw)
        if self._ll is not None:
            for _, latency, inv in self._ll:
                ring = minimum(ring, latency + wire * inv)
        return ring

    all_gather = reduce_scatter

    def all_to_all(self, n_bytes: Number) -> Number:
        """All-to-all of an `n_bytes` buffer per rank (1/p of it to each rank; module docstring)."""
        *_, share_in, share_out = self._a2a
        return self.exchange(n_bytes * share_in, n_bytes * share_out)

    def exchange(self, intra_bytes: Number, inter_bytes: Number) -> Number:
        """Each rank sends `intra_bytes` to peers in its node and `inter_bytes` out of it at once
        (an all-to-all, or a dispatch that sends each token once per node: `physics.moe`)."""
        latency, inv_in, inv_out, _, _ = self._a2a
        transfer = np.maximum(intra_bytes * inv_in, inter_bytes * inv_out)
        return self._base + self._pipe(latency, transfer)


def all_reduce_time_s(
    message_bytes: Number, ranks: Number, ranks_per_node: Number, intra: Link, inter: Link | None = None
) -> Number:
    """All-reduce of `message_bytes` over `ranks` GPUs, `ranks_per_node` of them per node."""
    return Group(ranks, ranks_per_node, intra, inter).all_reduce(message_bytes)


def reduce_scatter_time_s(
    message_bytes: Number, ranks: Number, ranks_per_node: Number, intra: Link, inter: Link | None = None
) -> Number:
    """Reduce-scatter of a `message_bytes` buffer (each rank keeps 1/p of it), or the all-gather
    producing a `message_bytes` buffer on every rank (`all_gather_time_s`: the same cost). Ring."""
    return Group(ranks, ranks_per_node, intra, inter).reduce_scatter(message_bytes)


all_gather_time_s = reduce_scatter_time_s


def mesh_share(link: Link, members: Number) -> Number:
    """The share of a full-mesh link's rate (`Link.mesh_links`) that `members` GPUs of one server
    drive: each sends to the others over its own direct link to each, g - 1 of the mesh's links
    (ROCm/rccl README, "Improving performance on MI300 when using less than 8 GPUs": with fewer
    than 8 MI300X GPUs only a fraction of the links' bandwidth is reachable; RCCL's own topology
    for 4 MI300X counts 3 links: "maxBw 48.0 totalBw 144.0", ROCm/rccl#1210). 1 off a mesh."""
    m = np.asarray(link.mesh_links, dtype=float)
    if m.ndim == 0 and float(m) <= 0:
        return 1.0
    on = m > 0
    links = np.where(on, m, 1.0)
    return np.where(on, np.minimum(np.maximum(np.asarray(members, dtype=float) - 1.0, 1.0), links) / links, 1.0)


def on_mesh(link: Link, members: Number) -> Link:
    """`link` at the rate `members` GPUs of one server reach on it (`mesh_share`); itself off a mesh."""
    share = mesh_share(link, members)
    if np.ndim(share) == 0 and float(share) == 1.0:
        return link
    return link.with_(bandwidth_bytes_per_s=link.bandwidth_bytes_per_s * share)


def p2p_time_s(message_bytes: Number, link: Link) -> Number:
    """One send/receive between two GPUs: alpha_base + alpha + n / B."""
    return link.base_latency_s + link.latency_s + message_bytes / link.effective_bandwidth_bytes_per_s


_FABRICS = Memo("fabrics", size=256)


class Fabric:
    """The links of one cluster: makes communicator `Group`s and prices point-to-point sends."""

    __slots__ = (
        "_groups", "all_to_all_scale", "custom", "inter", "inter_p2p", "intra", "intra_p2p", "net_post_s", "pcie"
    )  # fmt: skip

    def __init__(
        self,
        intra: Link,
        inter: Link | None,
        custom: tuple[str, bool, bool, bool] | None = None,
        all_to_all_scale: Number = 1.0,
        p2p_scale: Number = 1.0,
        net_post_s: Number | None = None,
        pcie: tuple[PcieTopology, bool] | None = None,
    ) -> None:
        self.intra, self.inter, self.custom, self.net_post_s = intra, inter, custom, net_post_s
        self.pcie = pcie  # (the server's switches and sockets, P2P at all): each group's ring on them
        self.intra_p2p = on_mesh(intra, 2)  # a send between two GPUs: one link of a mesh
        self.all_to_all_scale = all_to_all_scale
        # a pipeline send across servers: the inter-node link at its own share of the rate
        scaled = inter is not None and (np.ndim(p2p_scale) or float(p2p_scale) != 1.0)  # type: ignore[arg-type]
        self.inter_p2p = inter.with_(bandwidth_bytes_per_s=inter.bandwidth_bytes_per_s * p2p_scale) if scaled else inter
        self._groups: dict[tuple[object, object], Group] = {}

    @classmethod
    def of(cls, cluster: Cluster) -> Fabric:
        """A cluster's fabric: its links, the server's link as NCCL sees it without P2P when
        `cluster.p2p` is off (or without NVLS when `cluster.nvls` is), and the serving engine's own
        all-reduce when it has one; on a PCIe server with switches and sockets (`Cluster.pcie`) each
        group's ring and each pipeline send at the rate `physics.pcie.group_link` gives it (host
        staging included there). One per cluster (`specs.memo`: kept with its groups)."""
        if cls is not Fabric:
            return cls._build(cluster)
        return _FABRICS.get_or_compute(cluster, lambda: cls._build(cluster))  # type: ignore[no-any-return]

    @classmethod
    def _build(cls, cluster: Cluster) -> Fabric:
        intra = cluster.intra_node_link
        nvlink = is_nvlink_class(intra)
        pcie = (cluster.pcie, bool(cluster.p2p)) if cluster.pcie is not None and not nvlink else None
        if not cluster.p2p and pcie is None:
            intra = without_p2p(intra)
        if not cluster.nvls:
            intra = intra.with_(nvls_efficiency=0.0)
        # Blackwell and later (FP4 tensor cores: compute capability 10+) for TensorRT-LLM's table
        blackwell = bool(np.all(np.asarray(cluster.gpu.peak_flops_per_s_fp4) > 0))
        custom = (cluster.custom_all_reduce, nvlink, bool(cluster.p2p), blackwell)
        return cls(
            intra,
            cluster.inter_node_link,
            custom if cluster.custom_all_reduce != "none" else None,
            cluster.inter_node_all_to_all_scale,
            cluster.inter_node_p2p_scale,
            NET_POST_S[cluster.host_cpu],
            pcie,
        )

    def group(self, ranks: Number, per_node: Number, stride: Number = 1) -> Group:
        """The collectives of a group of `ranks` ranks, `per_node` of them per server, `stride` GPUs
        apart (read on a PCIe topology only); one Group per fabric and size when all are single
        numbers (a Group is never changed once built)."""
        if not (one_value(ranks) and one_value(per_node) and one_value(stride)):  # arrays: a group per call
            return self._new_group(ranks, per_node, stride)
        key = (float(ranks), float(per_node), float(stride))  # type: ignore[arg-type]
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = self._new_group(ranks, per_node, stride)
        return group

    def _new_group(self, ranks: Number, per_node: Number, stride: Number = 1) -> Group:
        intra = self.intra if self.pcie is None else self._on_pcie(np.minimum(ranks, per_node), stride)
        return Group(ranks, per_node, intra, self.inter, self.custom, self.all_to_all_scale, self.net_post_s)

    def _on_pcie(self, members: Number, stride: Number) -> Link:
        top, p2p = self.pcie  # type: ignore[misc]
        return group_link(top, self.intra, p2p, members, stride)

    def p2p(self, n_bytes: Number, crosses_node: Number, members: Number = 2, stride: Number = 1) -> Number:
        """One send between two GPUs, across servers where `crosses_node`; on a PCIe topology at the
        ring rate of the `members` GPUs `stride` apart it runs among (a pipeline's stages in a server)."""
        link = self.intra_p2p if self.pcie is None else self._on_pcie(members, stride)
        intra = p2p_time_s(n_bytes, link)
        if self.inter is None:
            return intra
        return np.where(crosses_node, p2p_time_s(n_bytes, self.inter_p2p), intra)
