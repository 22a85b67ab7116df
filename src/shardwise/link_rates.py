"""A link given only as a rate (`--intra-link 600GB/s`): the latency and protocols it takes
(re-exported by `loaders`, where the commands read it)."""

from __future__ import annotations

from shardwise.physics.custom_allreduce import NVLINK_CLASS_BYTES_PER_S
from shardwise.specs import Link

# Per-step latency of a link given only as a rate, by its kind (as the link presets, from NCCL's
# hwLat table and the measured small-message curves, presets/links.yaml): NVLink-class rates
# (>= 100 GB/s per direction) 1 us, PCIe-class 2 us, a network 5 us; 20 us per collective call.
RATE_LINK_LATENCY_S = {"nvlink": 1e-6, "pcie": 2e-6, "network": 5e-6}
RATE_LINK_BASE_LATENCY_S = 20e-6


def link_from_rate(
    name: str, rate_bytes_per_s: float, role: str, replaced: Link | None = None, latency_s: float | None = None
) -> Link:
    """A link given only as a sustained rate (efficiency 1): it keeps the latency, NCCL's LL
    protocols (`Link.ll_bandwidth_bytes_per_s`) and the full mesh (`Link.mesh_links`: the rate is
    then the mesh's, all its links together) of the link it replaces, or takes the latency of its
    kind (`role` "intra": NVLink- or PCIe-class by the rate; "inter": a network) and the chunked
    protocol only; `latency_s` overrides the latency."""
    if latency_s is None:
        if replaced is not None:
            latency_s = float(replaced.latency_s)
        elif role == "inter":
            latency_s = RATE_LINK_LATENCY_S["network"]
        else:
            kind = "nvlink" if rate_bytes_per_s >= NVLINK_CLASS_BYTES_PER_S else "pcie"
            latency_s = RATE_LINK_LATENCY_S[kind]
    base = float(replaced.base_latency_s) if replaced is not None else RATE_LINK_BASE_LATENCY_S
    ll = float(replaced.ll_bandwidth_bytes_per_s) if replaced is not None else 0.0
    mesh = replaced.mesh_links if replaced is not None else 0
    return Link(
        name=name,
        bandwidth_bytes_per_s=rate_bytes_per_s,
        efficiency=1.0,
        latency_s=latency_s,
        base_latency_s=base,
        ll_bandwidth_bytes_per_s=ll,
        mesh_links=mesh,
    )
