"""PCIe servers with switches and sockets (`specs.pcie`, `physics.pcie`): a group's ring rate by its
size, the system presets, and serving on them."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise import presets
from shardwise.engines.serving import estimate_serving, plan_for_serving, serving_scenario
from shardwise.errors import SpecError
from shardwise.physics.custom_allreduce import P2P_OFF_BANDWIDTH_RATIO
from shardwise.physics.pcie import SHM_STAGED_SHARE, ring_bandwidth_bytes_per_s
from shardwise.specs import Scenario
from shardwise.specs.pcie import PcieTopology
from shardwise.specs.serving import ServingWorkload

PCIE4 = 31.5e9 * 0.76  # the pcie4 preset's sustained rate
TOPOLOGY_PRESETS = (
    "rtx4090-8x-2socket",
    "rtx4090-8x-switch",
    "l40s-8x-switch",
    "a100-pcie-8x-direct",
    "h100-pcie-8x-switch",
)


# The L40S boxes as a platform that grants P2P prices them (`--p2p on`): these tests are about P2P-capable
# GPUs' PCIe topology; the presets default to P2P off since review 43 (the L40S grants no peer access)
P2P_ON = ("l40s-8x", "l40s-8x-switch")


def system_with_p2p(name: str):
    c = presets.system(name)
    return c.with_(p2p=True) if name in P2P_ON else c


def ring(system: str, ranks, p2p: bool | None = None, **changes) -> np.ndarray:
    c = system_with_p2p(system)
    top = c.pcie.with_(**changes) if changes else c.pcie
    return np.asarray(ring_bandwidth_bytes_per_s(top, c.intra_node_link, c.p2p if p2p is None else p2p, ranks))


def test_a_group_inside_a_switch_keeps_p2p_and_one_that_leaves_it_moves_at_the_staged_share_of_its_path():
    """8 L40S, 4 behind each switch: TP 2 and 4 move at the link's rate; TP 8 crosses to the other
    switch (and socket), which NCCL stages through host memory (SHM) on its default P2P level.
    The GPUs have P2P, so the staged hop moves at 5/6 of its path (the receiver's loads come back
    in 64-byte read completions), 19.9 GB/s, under the socket link NCCL assumes for Sapphire Rapids
    (22 GB/s), and far above the P2P-off copy ratio r of GeForce cards."""
    assert ring("l40s-8x-switch", [2, 4]) == pytest.approx([PCIE4, PCIE4])
    assert float(ring("l40s-8x-switch", 8)) == pytest.approx(SHM_STAGED_SHARE * PCIE4)
    assert float(ring("l40s-8x-switch", 8)) > 2.5 * P2P_OFF_BANDWIDTH_RATIO * PCIE4
    # NCCL_P2P_LEVEL=SYS: P2P across the sockets too, at the socket link's 22 GB/s
    assert float(ring("l40s-8x-switch", 8, p2p_beyond_switch=True)) == pytest.approx(22e9)
    # one socket, both switches on it, a socket link that does not limit: the staged hop between
    # the switches, 5/6 of the link; with P2P there too (and no Intel root complex charge) the link's
    one = {"gpus_per_socket": 8, "socket_link_bandwidth_bytes_per_s": 0.0}
    assert float(ring("l40s-8x-switch", 8, **one)) == pytest.approx(SHM_STAGED_SHARE * PCIE4)
    assert float(ring("l40s-8x-switch", 8, p2p_beyond_switch=True, cpu="", **one)) == pytest.approx(PCIE4)


def test_the_staged_share_follows_from_the_pcie_packets_and_agrees_with_measured_shm_against_p2p():
    """A hop staged through host memory runs at its loads' rate: read completions of a root
    complex's 64-byte read completion boundary with 20 bytes each of framing, header and LCRC,
    against P2P's posted writes of 256 bytes with 24 (Intel AN 855): (64/84) / (256/280) = 5/6,
    the share NCCL's own topology charges such a path on Intel CPUs (INTEL_P2P_OVERHEAD, 6/5).
    Measured SHM over P2P on bare metal, the same NCCL either way (none of it set the share):
    4 RTX PRO 6000 on one AMD Turin socket, 36.0 / 44.9 GB/s at 16 MB and 37.6 / 46.6 at 128 MB
    (NVIDIA/nccl PR #2080); 4 RTX 4090 with P2P enabled on one NUMA node, 18 / 22 (NVIDIA/nccl#1603);
    a copy staged through host memory on a Gen5 pair, 43 / 55.5 (aikitoria's README)."""
    # (a 128-byte completion boundary would give 0.95: above every measurement by more than 0.1)
    assert pytest.approx(5 / 6) == SHM_STAGED_SHARE
    for staged, direct in ((36.0, 44.9), (37.6, 46.6), (18.0, 22.0), (43.0, 55.5)):
        assert staged / direct == pytest.approx(SHM_STAGED_SHARE, rel=0.08)


def test_a_staged_hop_on_p2p_capable_gpus_is_limited_by_host_memory_when_it_is_slow():
    """Two switches on one socket with 2 channels of DDR4-3200 (51.2 GB/s): the two switches' SHM
    streams are each written and read once through that DRAM: 51.2 / 4 GB/s."""
    slow = ring("l40s-8x-switch", 8, gpus_per_socket=8, socket_link_bandwidth_bytes_per_s=0.0,
                host_memory_bandwidth_bytes_per_s=51.2e9)  # fmt: skip
    assert float(slow) == pytest.approx(51.2e9 / 4)


def test_without_p2p_the_gpus_of_a_switch_share_its_uplink():
    """RTX 4090s on the stock driver behind a switch: every hop staged, each GPU's stream up the
    one x16 uplink: 4 GPUs get a quarter of it each; on their own root ports they do not share."""
    assert float(ring("rtx4090-8x-switch", 2)) == pytest.approx(P2P_OFF_BANDWIDTH_RATIO * PCIE4)
    assert float(ring("rtx4090-8x-switch", 4)) == pytest.approx(PCIE4 / 4)
    assert ring("rtx4090-8x-2socket", [2, 4, 8]) == pytest.approx([P2P_OFF_BANDWIDTH_RATIO * PCIE4] * 3)


def test_host_memory_limits_staged_rings_when_it_is_slow():
    """A desktop's 2 channels of DDR4-3200 (51.2 GB/s): 4 staged streams, each written and read once."""
    slow = ring("rtx4090-8x-2socket", 4, host_memory_bandwidth_bytes_per_s=51.2e9)
    assert float(slow) == pytest.approx(51.2e9 / 8)


def test_a_single_gpu_or_a_pair_on_one_switch_is_the_link():
    assert float(ring("h100-pcie-8x-switch", 1)) == pytest.approx(63e9 * 0.76)
    assert float(ring("h100-pcie-8x-switch", 2)) == pytest.approx(63e9 * 0.76)


def test_the_2080ti_pair_behind_a_switch_without_p2p_is_close_to_its_nccl_tests_curve():
    """2 x RTX 2080 Ti behind one PCIe Gen3 switch, P2P unsupported: all_reduce_perf busbw 4.00 GB/s at
    1 GiB (data/public_collectives.csv, AutoDL post): the staged rate within 10%."""
    top = PcieTopology(gpus_per_switch=2, gpus_per_socket=2)
    rate = ring_bandwidth_bytes_per_s(top, presets.link("pcie3"), False, 2)
    assert float(rate) == pytest.approx(4.0e9, rel=0.10)


@settings(max_examples=40, deadline=None)
@given(
    per_switch=st.sampled_from([1, 2, 4]),
    sockets=st.sampled_from([1, 2]),
    p2p=st.booleans(),
    beyond=st.booleans(),
    uplink=st.sampled_from([0.0, 15.75e9, 31.5e9]),
    memory=st.sampled_from([0.0, 51.2e9, 204.8e9]),
)
def test_a_wider_group_never_rings_faster_and_a_wider_uplink_never_slower(
    per_switch, sockets, p2p, beyond, uplink, memory
):
    top = PcieTopology(
        gpus_per_switch=per_switch,
        gpus_per_socket=8 // sockets,
        uplink_bandwidth_bytes_per_s=uplink,
        socket_link_bandwidth_bytes_per_s=16e9,
        host_memory_bandwidth_bytes_per_s=memory,
        p2p_beyond_switch=beyond,
    )
    link = presets.link("pcie4")
    rates = np.asarray(ring_bandwidth_bytes_per_s(top, link, p2p, np.arange(1, 9)))
    assert np.all(np.diff(rates) <= 1e-6 * rates[0])
    assert np.all(rates <= link.effective_bandwidth_bytes_per_s * (1 + 1e-12))
    wider = ring_bandwidth_bytes_per_s(top.with_(uplink_bandwidth_bytes_per_s=63e9), link, p2p, np.arange(1, 9))
    assert np.all(np.asarray(wider) >= rates * (1 - 1e-12)) or uplink == 0.0


def test_p2p_through_an_intel_root_complex_moves_at_five_sixths_of_its_path():
    """NCCL charges a P2P flow through an Intel root complex 6/5 of its rate on the PCIe links
    (src/graph/topo.h INTEL_P2P_OVERHEAD, 64-byte packets): with NCCL_P2P_LEVEL=SYS on `l40s-8x`
    (each L40S on its own root port of a Sapphire Rapids socket) TP 2 and 4 ring at 5/6 of the
    link, and TP 8 no faster (its socket link, 22 GB/s, is above that). The socket hop itself
    (SYS) carries no such charge; NCCL's default, hops staged through host memory, moves at the
    same 5/6 (64-byte read completions, `SHM_STAGED_SHARE`)."""
    share = 5 / 6
    assert ring("l40s-8x", [2, 4, 8], p2p_beyond_switch=True) == pytest.approx([share * PCIE4] * 3)
    assert ring("l40s-8x", [2, 4, 8]) == pytest.approx([SHM_STAGED_SHARE * PCIE4] * 3)  # staged
    # the same box with its CPU not named: the path's rate
    assert ring("l40s-8x", [2, 4], p2p_beyond_switch=True, cpu="") == pytest.approx([PCIE4, PCIE4])
    # one switch per socket: no hop between switches of a socket, so the ring of 8 is the socket link's
    assert float(ring("l40s-8x-switch", 8, p2p_beyond_switch=True)) == pytest.approx(22e9)
    # AMD: no such charge
    assert ring("a100-pcie-8x", 4, p2p_beyond_switch=True) == pytest.approx(PCIE4)


def test_two_gpus_on_amd_run_p2p_across_root_ports_whatever_the_p2p_level():
    """NCCL (src/graph/paths.cc ncclTopoCheckP2p) allows P2P at PATH_SYS on AMD CPUs where the node
    has at most 2 GPUs: a pair then skips host memory, so a host DRAM slow enough to limit staged
    hops does not limit it; a group of 4 is staged and is limited."""
    slow = {"host_memory_bandwidth_bytes_per_s": 51.2e9}  # 2 channels of DDR4-3200
    pair, four = ring("a100-pcie-8x", [2, 4], **slow)
    assert float(pair) == pytest.approx(PCIE4)
    assert float(four) == pytest.approx(51.2e9 / 8)  # 4 staged streams, each written and read once
    assert float(ring("a100-pcie-8x", 2, cpu="", **slow)) == pytest.approx(51.2e9 / 4)
    # GPUs without P2P at all stay staged
    assert float(ring("a100-pcie-8x", 2, p2p=False)) == pytest.approx(P2P_OFF_BANDWIDTH_RATIO * PCIE4)


def test_a_cpu_maker_other_than_intel_or_amd_is_refused_in_one_line(tmp_path):
    with pytest.raises(SpecError, match="pcie: cpu: 'arm' is not allowed; give one of 'intel', 'amd', ''"):
        PcieTopology(cpu="arm")
    box = tmp_path / "box.yaml"
    box.write_text("gpu: l40s\ngpus_per_node: 8\nintra_node_link: pcie4\npcie:\n  cpu: intel\n")
    assert presets.system(str(box)).pcie.cpu == "intel"
    box.write_text("gpu: l40s\ngpus_per_node: 8\nintra_node_link: pcie4\npcie:\n  cpu: via\n")
    with pytest.raises(SpecError, match="cpu: 'via' is not allowed"):
        presets.system(str(box))


@pytest.mark.parametrize("name", TOPOLOGY_PRESETS)
def test_every_topology_preset_loads_with_its_source(name):
    c = presets.system(name)
    assert isinstance(c.pcie, PcieTopology) and c.pcie.source
    assert c.gpus_per_node % c.pcie.gpus_per_socket == 0


def test_a_bad_topology_is_refused_in_one_line(tmp_path):
    with pytest.raises(SpecError, match="gpus_per_socket 6 is not a multiple of gpus_per_switch 4"):
        PcieTopology(gpus_per_switch=4, gpus_per_socket=6)
    bad = tmp_path / "box.yaml"
    bad.write_text("gpu: l40s\ngpus_per_node: 8\nintra_node_link: pcie4\npcie:\n  gpus_per_swich: 4\n")
    with pytest.raises(SpecError, match="did you mean gpus_per_switch"):
        presets.system(str(bad))


def _serve(system: str, tp: int, topology: bool = True):
    cluster = system_with_p2p(system)
    if not topology:
        cluster = cluster.with_(pcie=None)
    scn = Scenario(presets.model("llama3-8b"), cluster, plan_for_serving(tp, 1, 8 // tp))
    return estimate_serving(scn, ServingWorkload(input_len=512, output_len=128, batch=8 // tp * 4))


def test_serving_pays_the_staged_hop_only_for_groups_that_leave_a_switch():
    """TP 4 on 8 L40S behind two switches costs what it costs on one uniform PCIe link; TP 8 decodes
    a little slower once its ring leaves the switch (staged, 19.9 GB/s against the link's 23.9), and far
    faster than if that hop moved at GeForce's P2P-off copy rate."""
    assert float(_serve("l40s-8x-switch", 4).tpot_s) == pytest.approx(float(_serve("l40s-8x-switch", 4, False).tpot_s))
    tp8, uniform = float(_serve("l40s-8x-switch", 8).tpot_s), float(_serve("l40s-8x-switch", 8, False).tpot_s)
    assert uniform < tp8 < 1.1 * uniform


def test_the_staged_link_is_not_staged_twice_and_keeps_no_custom_all_reduce():
    """P2P off with a topology: the group's link already includes the staging, so the cluster NCCL
    sees is marked P2P and the engine's own all-reduce (which needs P2P) stays off."""
    scn = Scenario(presets.model("llama3-8b"), presets.system("rtx4090-8x-switch"), plan_for_serving(2, 1, 4))
    wl = ServingWorkload(input_len=512, output_len=128, custom_all_reduce="vllm")
    served = serving_scenario(scn, wl).cluster
    assert served.p2p and served.custom_all_reduce == "none"
    assert float(served.intra_node_link.effective_bandwidth_bytes_per_s) == pytest.approx(
        P2P_OFF_BANDWIDTH_RATIO * PCIE4
    )


def test_serve_names_the_topology(cli):
    code, out, err = cli(["serve", "--model", "llama3-8b", "--system", "l40s-8x-switch", "--plan", "tp=8"])
    assert code == 0, err
    assert (
        "PCIe: 4 GPUs per switch, 4 per socket (Intel CPUs), hops beyond a switch staged through host memory"
        in " ".join(out.split())
    )


def test_the_generic_pcie_boxes_have_two_sockets_so_tp8_crosses_the_socket_link():
    """l40s-8x and a100-pcie-8x: 4 GPUs per socket on their own root ports (#37). TP 4's hops are
    staged through host memory (5/6 of a GPU's PCIe rate); TP 8's ring also crosses the socket link
    (22 GB/s Sapphire Rapids UPI, 16 GB/s AMD Infinity Fabric, NCCL's values), which binds on AMD
    only; a pair on AMD runs P2P (NCCL's rule for 2 GPUs) at the link's rate."""
    for name, socket in (("l40s-8x", 22e9), ("a100-pcie-8x", 16e9)):
        cluster = presets.system(name)
        top, link = cluster.pcie, cluster.intra_node_link
        assert top is not None and top.gpus_per_socket == 4
        b = float(link.effective_bandwidth_bytes_per_s)
        assert float(ring_bandwidth_bytes_per_s(top, link, True, 4)) == pytest.approx(SHM_STAGED_SHARE * b)
        assert float(ring_bandwidth_bytes_per_s(top, link, True, 8)) == pytest.approx(min(SHM_STAGED_SHARE * b, socket))
    assert ring("a100-pcie-8x", [2, 4, 8]) == pytest.approx([PCIE4, SHM_STAGED_SHARE * PCIE4, 16e9])


def test_eight_pcie_gpus_named_by_gpu_are_one_uniform_link_and_the_note_says_which_systems_have_sockets(cli):
    """--gpu l40s --intra-link pcie4 on 8 GPUs prices one uniform link (no sockets: TP 8 never
    crosses one); the note names the two-socket presets of that GPU. 4 GPUs, or a system preset,
    get no such note."""
    args = ["serve", "--model", "llama3-8b", "--gpu", "l40s", "--intra-link", "pcie4", "--plan", "tp=8"]
    code, _, err = cli([*args, "--num-gpus", "8"])
    text = " ".join(err.split())
    assert code == 0 and "one uniform PCIe link" in text and "--system l40s-8x or l40s-8x-switch" in text
    code, _, err = cli([*args[:-1], "tp=4", "--num-gpus", "4"])
    assert code == 0 and "uniform PCIe link" not in err
    code, _, err = cli(["serve", "--model", "llama3-8b", "--system", "l40s-8x", "--plan", "tp=8"])
    assert code == 0 and "uniform PCIe link" not in err
