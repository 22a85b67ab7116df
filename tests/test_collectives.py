"""The collective model: its limits, and the measured nccl-tests curves of the reference data."""

import csv
from importlib import resources

import numpy as np
import pytest

from shardwise import presets
from shardwise.physics import collectives
from shardwise.physics.collectives import (
    LL_STEP_S,
    NET_POST_OVERHEAD_S,
    all_gather_time_s,
    all_reduce_time_s,
    bus_bandwidth_bytes_per_s,
    p2p_time_s,
    reduce_scatter_time_s,
)
from shardwise.specs import Link

NV3, NV4, NV5 = presets.link("nvlink3"), presets.link("nvlink4"), presets.link("nvlink5")


def test_one_rank_costs_nothing():
    assert all_reduce_time_s(1e9, 1, 1, NV3) == 0.0
    assert reduce_scatter_time_s(1e9, 1, 1, NV3) == 0.0


def test_large_messages_reach_the_ring_bandwidth():
    n, p = 64e9, 8
    t = all_reduce_time_s(n, p, p, NV3)
    ring = 2 * (p - 1) / p * n / NV3.effective_bandwidth_bytes_per_s
    assert t == pytest.approx(ring, rel=0.03)


def test_tiny_messages_cost_the_latency():
    """NCCL's LL protocol on NVLink (its per-step latency), the link's own per step elsewhere."""
    p = 8
    t = all_reduce_time_s(8, p, p, NV3)
    assert t == pytest.approx(NV3.base_latency_s + 2 * (p - 1) * LL_STEP_S, rel=0.05)
    pcie = presets.link("pcie4")
    t = all_reduce_time_s(8, p, p, pcie)
    assert t == pytest.approx(pcie.base_latency_s + 2 * (p - 1) * pcie.latency_s, rel=0.05)


def test_a_slower_nvlink_step_slows_its_low_latency_protocols_too():
    # walkthrough: --link-latency 100us inside an NVLink server changed nothing, NCCL's LL and
    # LL128 steps being fixed at the stock link's; they now scale with the link's own step
    from dataclasses import replace

    slow = replace(NV3, latency_s=100 * NV3.latency_s)
    p = 8
    assert all_reduce_time_s(8, p, p, slow) == pytest.approx(
        NV3.base_latency_s + 2 * (p - 1) * LL_STEP_S * 100, rel=0.05
    )
    # the stock links keep NCCL's own step (the presets' 1 us), and twice the step doubles LL's steps
    assert NV3.latency_s == NV4.latency_s == 1e-6
    doubled = all_reduce_time_s(8, p, p, replace(NV4, latency_s=2e-6)) - NV4.base_latency_s
    assert doubled == pytest.approx(2 * (all_reduce_time_s(8, p, p, NV4) - NV4.base_latency_s), rel=0.05)


def test_reduce_scatter_plus_all_gather_moves_what_an_all_reduce_moves():
    n, p = 4e9, 8
    ar = all_reduce_time_s(n, p, p, NV3)
    rs_ag = reduce_scatter_time_s(n, p, p, NV3) + all_gather_time_s(n, p, p, NV3)
    assert rs_ag == pytest.approx(ar, rel=0.05)


def test_across_nodes_the_nics_bound_the_ring():
    ib = presets.link("ib-hdr")
    n = 16e9
    t = all_reduce_time_s(n, 32, 8, NV3, ib)  # 4 nodes x 8 GPUs, one HDR NIC per GPU
    bw = min(NV3.effective_bandwidth_bytes_per_s, 8 * ib.effective_bandwidth_bytes_per_s)
    # the bandwidth term, and the pipelined steps' latency beside it (62 steps of at least NCCL's
    # network post overhead: `NET_POST_OVERHEAD_S`) a few percent more
    assert 2 * 31 / 32 * n / bw < t < 1.08 * (2 * 31 / 32 * n / bw)


def test_a_ring_across_servers_pays_the_network_post_on_every_step():
    """NCCL's model: inside a communicator that spans servers each of a ring's steps costs at least
    the network post overhead, not only the k - 1 that cross a server."""
    ib = presets.link("ib-ndr")
    p, g = 128, 4  # 32 servers of 4, as MareNostrum 5 or Leonardo
    k = p // g
    t = all_gather_time_s(8, p, g, NV4, ib)  # 8 bytes: the latency alone (no tree, no LL across servers)
    steps = (p - k) * max(NV4.latency_s, NET_POST_OVERHEAD_S) + (k - 1) * ib.latency_s
    assert NV4.latency_s < NET_POST_OVERHEAD_S  # the post, not NVLink's step, sets the pace
    assert t == pytest.approx(max(NV4.base_latency_s, ib.base_latency_s) + steps, rel=0.01)
    assert reduce_scatter_time_s(8, p, g, NV4, ib) == t


def test_the_network_post_grows_a_fixed_gather_with_the_ranks(monkeypatch):
    ib, n = presets.link("ib-ndr"), 168e6  # one layer of a 2.7B model in bf16
    ranks = (32, 128, 512)
    with_post = [all_gather_time_s(n, p, 4, NV4, ib) for p in ranks]
    monkeypatch.setattr(collectives, "NET_POST_OVERHEAD_S", 0.0)
    without = [all_gather_time_s(n, p, 4, NV4, ib) for p in ranks]
    added = [a - b for a, b in zip(with_post, without, strict=True)]
    assert all(a > 0 for a in added) and added[0] < added[1] < added[2]
    assert added[2] > 0.1 * without[2]  # 512 ranks: 384 steps inside servers at 3 us, not 1
    one_server = all_gather_time_s(n, 4, 4, NV4, ib)
    monkeypatch.undo()
    assert all_gather_time_s(n, 4, 4, NV4, ib) == one_server  # inside one server: nothing


def test_an_amd_host_pays_more_per_ring_step_across_servers_and_the_same_inside_one():
    """NCCL's getNetOverhead (src/graph/tuning.cc): 1 us on Intel x86, 2 us on AMD x86, 1 us on Arm
    (Grace), x3 for Simple; charged only where the communicator spans servers."""
    assert collectives.NET_POST_S == {"intel": 3e-6, "amd": 6e-6, "arm": 3e-6}
    n, p, g = 8.0, 64, 8  # 8 bytes: the latency alone; 8 servers of 8 GPUs
    dgx = presets.system("dgx-a100", nodes=8)  # 2x AMD EPYC 7742
    assert dgx.host_cpu == "amd"
    prices = {cpu: collectives.Fabric.of(dgx.with_(host_cpu=cpu)).group(p, g) for cpu in ("intel", "amd", "arm")}
    intel, amd, arm = (prices[c].all_gather(n) for c in ("intel", "amd", "arm"))
    steps_inside = p - p // g  # 56 of the 63 steps stay inside a server, each paying the post
    assert amd - intel == pytest.approx(steps_inside * 3e-6, rel=1e-3)  # 3 us more each (8 B: pipe term ~0)
    assert arm == intel
    assert prices["amd"].reduce_scatter(n) == amd
    for size in (8.0, 1e6, 1e9):  # the tree (no post) where it is faster: never cheaper on AMD
        assert prices["amd"].all_reduce(size) >= prices["intel"].all_reduce(size)
    one = {cpu: collectives.Fabric.of(dgx.with_(host_cpu=cpu, nodes=1)).group(g, g) for cpu in ("intel", "amd")}
    for size in (8.0, 1e6, 1e9):  # inside one server: no network proxy, no post
        assert one["amd"].all_reduce(size) == one["intel"].all_reduce(size)
        assert one["amd"].all_gather(size) == one["intel"].all_gather(size)


def test_tree_wins_for_small_messages_across_many_nodes():
    ib = presets.link("ib-hdr")
    small = all_reduce_time_s(1e3, 1024, 1, NV3, ib)
    ring_latency = 2 * 1023 * ib.latency_s
    assert small < ring_latency / 10


def test_p2p_is_latency_plus_bytes_over_bandwidth():
    link = Link("l", 10e9, latency_s=2e-6, efficiency=1.0, base_latency_s=0.0)
    assert p2p_time_s(1e6, link) == pytest.approx(2e-6 + 1e-4)


def test_arrays_broadcast():
    sizes = np.array([1e3, 1e6, 1e9])
    ranks = np.array([[2], [8]])
    t = all_reduce_time_s(sizes, ranks, 8, NV3)
    assert t.shape == (2, 3)
    assert t[1, 2] == pytest.approx(all_reduce_time_s(1e9, 8, 8, NV3))


# --- measured curves (data/comm_and_inference_measured.csv; sources in its columns) -------------


def _curve(prefix: str) -> list[tuple[float, float]]:
    text = resources.files("shardwise.data").joinpath("comm_and_inference_measured.csv").read_text()
    rows = [r for r in csv.DictReader(text.splitlines()) if r["id"].startswith(prefix) and r["message_size_bytes"]]
    return sorted((float(r["message_size_bytes"]), float(r["value"])) for r in rows)


# (curve id prefix, ranks, ranks per node, intra link, inter link or None). The H100x32 curve's
# fabric is undocumented; 100 Gb/s per GPU matches its 92 GB/s plateau (the source says
# "inter-node fabric not documented").
CURVES = [
    ("MLE-B200-1n", 8, 8, NV5, None),
    ("MLE-B200-4n", 32, 8, NV5, presets.link("ib-ndr")),
    (
        "NCCLT44-2080Ti",
        2,
        2,
        Link("nvlink-bridge-2080ti", 25e9, latency_s=1e-6, efficiency=0.84, base_latency_s=20e-6),
        None,
    ),
    ("MLE-H100x32", 32, 8, NV4, presets.link("ib-edr")),
]


def _ratios(prefix, ranks, per_node, intra, inter):
    out = []
    for n, busbw in _curve(prefix):
        t = all_reduce_time_s(n, ranks, per_node, intra, inter)
        out.append((n, float(bus_bandwidth_bytes_per_s("all_reduce", n, ranks, t)) / (busbw * 1e9)))
    return out


@pytest.mark.parametrize(("prefix", "ranks", "per_node", "intra", "inter"), CURVES, ids=[c[0] for c in CURVES])
def test_large_messages_within_25_percent_of_measured_bus_bandwidth(prefix, ranks, per_node, intra, inter):
    big = _ratios(prefix, ranks, per_node, intra, inter)[-3:]  # the three largest sizes of the curve
    assert min(n for n, _ in big) >= 32 * 2**20
    for n, ratio in big:
        assert 0.8 <= ratio <= 1.25, f"{prefix} at {n:.0f} B: model/measured = {ratio:.2f}"


@pytest.mark.parametrize(
    ("prefix", "ranks", "per_node", "intra", "inter"),
    [c for c in CURVES if c[4] is None or c[0] == "MLE-H100x32"],
    ids=lambda c: str(c)[:12],
)
def test_small_and_medium_messages_within_a_factor_1_8(prefix, ranks, per_node, intra, inter):
    # The B200 curve is timed through torch.distributed (stas00's all_reduce_bench.py): from 32 KiB
    # to 4 MiB it floors at 47-96 us, above the model's 20 us per call plus NCCL's LL and LL128
    # (physics.collectives), which the untouched nccl-tests curve of 8 H100 follows within 20%
    # (test_custom_allreduce); there a factor 2.
    tol = 2.0 if prefix == "MLE-B200-1n" else 1.8
    for n, ratio in _ratios(prefix, ranks, per_node, intra, inter):
        assert 1 / tol <= ratio <= tol, f"{prefix} at {n:.0f} B: model/measured = {ratio:.2f}"


def test_a100_node_curve():
    # stas00/ml-engineering nccl-tests on one 8x A100 node (links.csv, nccl_model.md Sec. 6), run
    # as `all_reduce_perf -g 8`: one thread drives all 8 GPUs, so up to 16 MB each call waits for
    # eight launches in turn (a flat 101 us from 1 to 4 MiB). The model (one process per GPU, NCCL's
    # LL and LL128) is up to 2.1x faster there; from 128 MB the curve is bandwidth and within 20%.
    measured = {
        32768: 1.31,
        2**20: 18.0,
        16 * 2**20: 106,
        128e6: 176.9,
        256 * 2**20: 194,
        2**30: 229,
        16 * 2**30: 234.89,
    }
    for n, busbw in measured.items():
        t = all_reduce_time_s(n, 8, 8, NV3)
        ratio = float(bus_bandwidth_bytes_per_s("all_reduce", n, 8, t)) / (busbw * 1e9)
        low, high = (1 / 1.2, 1.2) if n >= 128e6 else (1.0, 2.2)
        assert low <= ratio <= high, f"A100 at {n:.0f} B: model/measured = {ratio:.2f}"
