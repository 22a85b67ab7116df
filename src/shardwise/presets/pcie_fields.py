"""A system preset's PCIe block and host CPU (`specs.pcie.PcieTopology`, `Cluster.host_cpu`), read
from a systems.yaml entry or a user's system file (`presets.system`)."""

from __future__ import annotations

from typing import Any

from shardwise import loaders, units
from shardwise.specs import SpecError

# A system's PCIe layout (`specs.pcie.PcieTopology`): counts, rates (e.g. 31.5GB/s), a flag.
PCIE_COUNTS = ("gpus_per_switch", "gpus_per_socket")
PCIE_RATES = ("uplink_bandwidth", "socket_link_bandwidth", "host_memory_bandwidth")


def host_cpu_of(key: str, data: dict[str, Any], pcie_cpu: str) -> str:
    """A system's host CPU vendor (`Cluster.host_cpu`): its `host_cpu`, else its `pcie:` block's
    `cpu`, else Intel's; the two, where both are given, must agree."""
    from shardwise.specs.hardware import HOST_CPUS

    host = data.get("host_cpu", pcie_cpu or "intel")
    if host not in HOST_CPUS:
        raise SpecError(f"system {key!r}: host_cpu: {host!r} is not allowed; choose {', '.join(HOST_CPUS)}")
    if pcie_cpu and host != pcie_cpu:
        raise SpecError(f"system {key!r}: host_cpu: {host} but pcie: cpu: {pcie_cpu}; give one vendor")
    return str(host)


def pcie_from_dict(key: str, data: Any) -> Any:
    """A system's `pcie:` mapping as a `PcieTopology` (rates like 31.5GB/s, one direction)."""
    from shardwise.specs.pcie import PcieTopology

    where = f"system {key!r}: pcie"
    if not isinstance(data, dict):
        raise SpecError(f"{where}: {data!r} is not allowed; give a mapping of {', '.join(PCIE_COUNTS + PCIE_RATES)}")
    kwargs: dict[str, Any] = {"source": str(data.get("source", ""))}
    for field, value in data.items():
        try:
            if field in PCIE_COUNTS:
                kwargs[field] = loaders.whole(value)
            elif field in PCIE_RATES:
                kwargs[f"{field}_bytes_per_s"] = units.parse_rate_bytes_per_s(value)
            elif field in ("p2p_beyond_switch", "cpu"):
                kwargs[field] = value
            elif field != "source":
                allowed = (*PCIE_COUNTS, *PCIE_RATES, "p2p_beyond_switch", "cpu", "source")
                raise SpecError(f"{where}: {loaders.unknown_field(field, allowed)}")
        except ValueError as exc:
            raise SpecError(f"{where}: {field}: {exc}") from None
    return PcieTopology(**kwargs)
