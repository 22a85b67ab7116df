"""How the GPUs of a PCIe server hang together: switches, sockets, and what crosses them
(`physics.pcie` prices a communicator group on it). SI units; bandwidths one direction.

GPUs are numbered as NCCL and the engines place a group: consecutive GPUs fill a PCIe switch,
then the next switch of the same socket, then the next socket.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from shardwise.specs import _checks as chk
from shardwise.specs._checks import Number, SpecError

# the CPU makers NCCL's topology rules tell apart ("": not known, neither rule applied)
CPU_MAKERS = ("intel", "amd", "")


@dataclass(frozen=True)
class PcieTopology:
    """A PCIe server's layout.

    - `gpus_per_switch`: GPUs behind one PCIe switch (1: each GPU on its own CPU root port,
      "direct attach");
    - `gpus_per_socket`: GPUs attached to one CPU socket (NUMA node);
    - `uplink_bandwidth_bytes_per_s`: a switch's link up to the CPU (0: as wide as a GPU's link,
      an x16 uplink of the same generation);
    - `socket_link_bandwidth_bytes_per_s`: what GPU traffic gets across the socket interconnect
      (UPI, xGMI), one direction;
    - `host_memory_bandwidth_bytes_per_s`: one socket's sustained DRAM bandwidth, which every
      transfer staged through host memory crosses twice (0: not limiting);
    - `p2p_beyond_switch`: NCCL uses peer-to-peer between GPUs that are not behind the same switch
      (through a CPU's root complex or across sockets). NCCL's default since 2.23.4 is no (P2P up to
      PATH_PXB only, src/graph/paths.cc `ncclTopoCheckP2p`; AMD CPUs with at most 2 GPUs excepted);
      NCCL_P2P_LEVEL=SYS makes it yes.
    - `cpu`: the CPUs' maker, "intel", "amd" or "" (not known), for NCCL's two rules that depend on
      it (`physics.pcie`): a P2P hop through an Intel root complex loses a sixth of its rate, and on
      AMD CPUs a group of at most 2 GPUs runs P2P across root ports and sockets.
    """

    gpus_per_switch: int = 1
    gpus_per_socket: int = 8
    uplink_bandwidth_bytes_per_s: Number = 0.0
    socket_link_bandwidth_bytes_per_s: Number = 0.0
    host_memory_bandwidth_bytes_per_s: Number = 0.0
    p2p_beyond_switch: bool = False
    cpu: str = ""
    source: str = ""

    def __post_init__(self) -> None:
        chk.positive_int("pcie: gpus_per_switch", self.gpus_per_switch)
        chk.positive_int("pcie: gpus_per_socket", self.gpus_per_socket)
        if self.gpus_per_socket % self.gpus_per_switch:
            raise SpecError(
                f"pcie: gpus_per_socket {self.gpus_per_socket} is not a multiple of gpus_per_switch "
                f"{self.gpus_per_switch}; a switch hangs off one socket"
            )
        for name in ("uplink", "socket_link", "host_memory"):
            field = f"{name}_bandwidth_bytes_per_s"
            chk.within(f"pcie: {field}", getattr(self, field), 0, 1e13, "B/s")
        if not isinstance(self.p2p_beyond_switch, bool):
            raise SpecError(f"pcie: p2p_beyond_switch: {self.p2p_beyond_switch!r} is not allowed; give true or false")
        if self.cpu not in CPU_MAKERS:
            allowed = ", ".join(repr(c) for c in CPU_MAKERS)
            raise SpecError(f"pcie: cpu: {self.cpu!r} is not allowed; give one of {allowed}")
        chk.text("pcie: source", self.source)

    def with_(self, **changes: object) -> PcieTopology:
        return replace(self, **changes)  # type: ignore[arg-type]
