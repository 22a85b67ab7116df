"""Training on a PCIe server's switches and sockets (`physics.pcie` through `physics.collectives.Fabric`,
the same ring rates serving prices), and the wider interval of a training step whose groups run over
PCIe, which no published training run measured (`calibration.link_spread`)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shardwise import presets
from shardwise.analyses.collective_validation import curves, validate_collectives
from shardwise.calibration.intervals import spread
from shardwise.calibration.link_spread import over_pcie
from shardwise.calibration.spreads import PCIE_LINK_LOG_SD, PCIE_LINK_POINTS, Z80, uncalibrated_log_sd
from shardwise.engines.training import estimate_training_step
from shardwise.physics.collectives import Fabric
from shardwise.physics.custom_allreduce import P2P_OFF_BANDWIDTH_RATIO, is_nvlink_class
from shardwise.physics.pcie import group_link, members_per_switch_socket, ring_bandwidth_bytes_per_s
from shardwise.specs import Plan, Scenario

PCIE4 = 31.5e9 * 0.76  # the pcie4 preset's sustained rate


def _step(system: str, topology: bool = True, **plan):
    cluster = presets.system(system)
    cluster = cluster if topology else cluster.with_(pcie=None)
    layout = {"tp": 8, "pp": 1, "dp": 1, "global_batch": 3, "sequence_parallel": False, **plan}
    return estimate_training_step(Scenario(presets.model("gpt-96l-4096h"), cluster, Plan(**layout)))


def _tp_comm_s(system: str, topology: bool = True, **plan) -> float:
    return float(np.asarray(_step(system, topology, **plan).breakdown.tp_comm_s))


def test_a100_pcie_tp8_rings_at_the_socket_link_as_serving_prices_it():
    """8 A100 PCIe on two AMD sockets: TP 8's ring crosses the 16 GB/s socket link (docs/serving.md's
    table), so its all-reduces take 23.9 / 16 = 1.5x their time on one uniform pcie4 link; TP 4 stays
    in one socket (5/6 of the link, staged through host memory) and TP 2 runs P2P (NCCL's AMD pair rule)."""
    cluster = presets.system("a100-pcie-8x")
    fabric = Fabric.of(cluster)
    uniform = Fabric.of(cluster.with_(pcie=None))
    ratio = float(fabric.group(8, 8).all_reduce(1e9) / uniform.group(8, 8).all_reduce(1e9))
    assert ratio == pytest.approx(PCIE4 / 16e9, rel=0.02)
    for tp in (2, 4, 8):
        link = group_link(cluster.pcie, cluster.intra_node_link, True, tp)
        assert float(link.effective_bandwidth_bytes_per_s) == pytest.approx(
            float(ring_bandwidth_bytes_per_s(cluster.pcie, cluster.intra_node_link, True, tp))
        )
    assert _tp_comm_s("a100-pcie-8x") > 1.3 * _tp_comm_s("a100-pcie-8x", topology=False)
    assert _tp_comm_s("a100-pcie-8x", tp=2, dp=4, global_batch=4) == pytest.approx(
        _tp_comm_s("a100-pcie-8x", False, tp=2, dp=4, global_batch=4)
    )


def test_the_rtx4090_boxes_give_the_tp_time_their_pcie_layout_gives():
    """P2P off (the stock driver): the switch box's 4 GPUs share one x16 uplink to host memory, so TP
    8's staged ring moves at a quarter of it (6.0 GB/s) and takes longer than on the uniform box; on the
    two-socket box every hop is staged at r B = 7.4 GB/s, under the 16 GB/s socket link, the uniform
    box's rate (`without_p2p`), so the two give the same time, as serve does."""
    uniform, sockets, switch = (_tp_comm_s(s) for s in ("rtx4090-8x", "rtx4090-8x-2socket", "rtx4090-8x-switch"))
    assert switch > 1.15 * uniform
    assert sockets == pytest.approx(uniform, rel=1e-9)
    c = presets.system("rtx4090-8x-2socket")
    rate = float(ring_bandwidth_bytes_per_s(c.pcie, c.intra_node_link, False, 8))
    assert rate == pytest.approx(P2P_OFF_BANDWIDTH_RATIO * PCIE4) and rate < 16e9


def test_an_nvlink_system_is_priced_as_before_to_1e_12():
    """The topology enters only where a cluster has a pcie: block and a PCIe-class link: an NVLink server
    with one attached (as a preset never has) prices every group exactly as without it."""
    for plan in ({}, {"tp": 2, "pp": 2, "dp": 2, "global_batch": 4}, {"tp": 1, "pp": 8, "dp": 1}):
        base = _step("dgx-a100", **plan)
        cluster = presets.system("dgx-a100").with_(pcie=presets.system("a100-pcie-8x").pcie)
        layout = {"tp": 8, "pp": 1, "dp": 1, "global_batch": 3, "sequence_parallel": False, **plan}
        moved = estimate_training_step(Scenario(presets.model("gpt-96l-4096h"), cluster, Plan(**layout)))
        assert float(moved.step_time_s) == pytest.approx(float(base.step_time_s), rel=1e-12, abs=0)


def test_a_strided_group_sees_fewer_members_per_switch_and_socket():
    """DP over TP 2: members 2 GPUs apart meet 2 per switch of 4 and 2 per socket of 4; 4 apart, one per
    switch; on a100-pcie-8x a data-parallel group of 4 at stride 2 crosses the sockets as TP 8 does."""
    top = presets.system("rtx4090-8x-switch").pcie
    assert [float(x) for x in members_per_switch_socket(top, 2)] == [2.0, 2.0]
    assert [float(x) for x in members_per_switch_socket(top, 4)] == [1.0, 1.0]
    c = presets.system("a100-pcie-8x")
    strided = float(ring_bandwidth_bytes_per_s(c.pcie, c.intra_node_link, True, 4, 2))
    assert strided == pytest.approx(float(ring_bandwidth_bytes_per_s(c.pcie, c.intra_node_link, True, 8)))


def test_predict_prices_the_system_topology(cli):
    """The brief's PCIe example on a100-pcie-8x: TP communication 1.78 s on a uniform link, about 1.45x on
    the two-socket server."""
    args = ["predict", "--model", "gpt-96l-4096h", "--tp", "8", "--global-batch", "3", "--no-sequence-parallel"]
    code, system, err = cli([*args, "--system", "a100-pcie-8x", "--json"])
    assert code == 0, err
    code, uniform, err = cli([*args, "--gpu", "a100-pcie-80gb", "--intra-link", "pcie4", "--json"])
    assert code == 0, err
    a, b = json.loads(system), json.loads(uniform)
    assert a["step_time_s"] > 1.2 * b["step_time_s"]


def test_the_pcie_spread_is_the_collective_models_miss_on_its_held_out_pcie_points():
    """`spreads.PCIE_LINK_LOG_SD`: rms ln(predicted / measured) over the held-out curves whose GPUs meet
    over PCIe (`validate collectives`)."""
    pcie = {
        c.key
        for c in curves()
        if not is_nvlink_class(presets.link(c.intra) if c.intra else presets.system(c.system).intra_node_link)
    }
    points = [p for p in validate_collectives() if p.split == "holdout" and p.curve in pcie]
    e = np.array([np.log(p.predicted_s / p.measured_s) for p in points])
    assert len(e) == PCIE_LINK_POINTS
    assert float(np.sqrt(np.mean(e**2))) == pytest.approx(PCIE_LINK_LOG_SD, abs=5e-5)


def test_the_interval_widens_where_a_group_runs_over_pcie_and_says_why():
    """TP 8 over PCIe adds the PCIe spread in quadrature; PP 8 (no group inside the server but the
    pipeline's sends) and any plan on NVLink keep their stack's and GPU's."""
    gpu_sd = uncalibrated_log_sd(presets.gpu("a100-pcie-80gb"))
    tp8 = _step("a100-pcie-8x").scenario
    pp8 = _step("a100-pcie-8x", tp=1, pp=8).scenario
    dp8 = _step("a100-pcie-8x", tp=1, dp=8, global_batch=8).scenario
    assert bool(over_pcie(tp8)) and bool(over_pcie(dp8)) and not bool(over_pcie(pp8))
    assert not bool(over_pcie(_step("dgx-a100").scenario))
    s = spread([tp8, pp8], None)
    assert s.log_sd[0] == pytest.approx(np.hypot(gpu_sd, PCIE_LINK_LOG_SD))
    assert s.log_sd[1] == pytest.approx(gpu_sd)
    assert "no published training run over PCIe" in s.basis
    assert "PCIe" not in spread([_step("dgx-a100").scenario], None).basis


def test_crossover_widens_the_pcie_tp_band_and_says_so(cli):
    code, out, err = cli(["crossover", "--json"])
    assert code == 0, err
    d = json.loads(out)
    width = {
        (s["plan"], s["link"]): s["time_s_high"][0] / s["time_s"][0] for s in d["series"] if s["time_s"][0] is not None
    }
    widened = np.exp(Z80 * np.hypot(d["interval"]["log_sd"], PCIE_LINK_LOG_SD))
    assert width[("tp=8", "PCIe")] == pytest.approx(widened)
    assert width[("pp=8", "PCIe")] == pytest.approx(width[("pp=8", "NVLink")])
    assert width[("tp=8", "NVLink")] == pytest.approx(width[("pp=8", "NVLink")])
    assert "no published training run over PCIe" in d["interval"]["basis"]


def test_a_swept_link_is_widened_only_where_it_is_below_nvlink_class():
    """crossover --vary bandwidth=4GB/s..900GB/s: the band widens at the PCIe-class points only
    (review 53 #1: every point, 900 GB/s included, was widened once the grid held one)."""
    cluster = presets.system("dgx-a100")
    rates = np.array([16e9, 64e9, 300e9, 900e9])
    link = cluster.intra_node_link.with_(bandwidth_bytes_per_s=rates)
    scn = Scenario(presets.model("gpt-96l-4096h"), cluster.with_(intra_node_link=link), Plan(tp=8, global_batch=8))
    assert np.asarray(over_pcie(scn)).tolist() == [True, True, False, False]


def test_a_swept_link_prices_each_point_as_a_single_run_of_that_rate(cli):
    """On a system with PCIe switches and sockets, a bandwidth sweep from PCIe to NVLink rates prices
    its 900 GB/s point as a sweep of NVLink rates alone does (a GPU fabric, not the switches), and its
    4 GB/s point as a PCIe-only sweep (review of crossover --system a100-pcie-8x --vary bandwidth)."""
    base = "crossover --system a100-pcie-8x --global-batch 8 --no-plot --json --vary"

    def tp_s(grid: str, gb_per_s: float) -> float:
        code, out, _ = cli([*base.split(), grid])
        assert code == 0
        data = json.loads(out)
        tp = next(s for s in data["series"] if s["plan"] == "tp=8")
        return next(t for v, t in zip(data["values"], tp["time_s"], strict=True) if abs(v / 1e9 - gb_per_s) < 1e-6)

    assert tp_s("bandwidth=4GB/s..900GB/s", 900) == pytest.approx(tp_s("bandwidth=200GB/s..900GB/s", 900), rel=1e-9)
    assert tp_s("bandwidth=4GB/s..900GB/s", 4) == pytest.approx(tp_s("bandwidth=4GB/s,8GB/s", 4), rel=1e-9)
