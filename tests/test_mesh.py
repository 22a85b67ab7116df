"""A server wired as a full mesh without a switch (AMD Infinity Fabric on MI300X): a group of g GPUs
drives g - 1 of the mesh's links, a send between two GPUs one (physics/collectives.py `mesh_share`)."""

import pytest

from shardwise import presets
from shardwise.errors import SpecError
from shardwise.loaders import link_from_dict, link_from_rate
from shardwise.physics.collectives import Fabric, bus_bandwidth_bytes_per_s, mesh_share
from shardwise.specs import Link

GIB = 2**30
XGMI_LINK_BYTES_PER_S = 64e9  # one MI300X Infinity Fabric link, one direction (AMD platform datasheet)


def _busbw(system: str, ranks: int, op: str = "all_reduce", n_bytes: float = 4 * GIB) -> float:
    group = Fabric.of(presets.system(system)).group(ranks, ranks)
    seconds = getattr(group, op)(n_bytes)
    return float(bus_bandwidth_bytes_per_s(op, n_bytes, ranks, seconds))


def test_two_mi300x_reach_one_link_not_the_whole_mesh():
    # RCCL counts 48 GB/s per xGMI link after protocol and error-correction overheads (ROCm/rccl#1210)
    two = _busbw("mi300x-8x", 2)
    assert 0.6 * XGMI_LINK_BYTES_PER_S < two < 48e9
    assert _busbw("mi300x-8x", 8) > 6 * two


@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_an_mi300x_groups_rate_grows_with_the_links_it_drives(ranks):
    link = presets.link("xgmi-mi300x")
    per_link = float(link.effective_bandwidth_bytes_per_s) / 7
    busbw = _busbw("mi300x-8x", ranks, "all_gather")
    assert busbw == pytest.approx((ranks - 1) * per_link, rel=0.05)


def test_a_switch_gives_every_group_the_whole_rate():
    assert mesh_share(presets.link("nvlink4"), 2) == 1.0
    # all-gather (no NVLS): 2 H100s reach the bus bandwidth 8 do, where 2 MI300Xs reach a seventh
    assert _busbw("dgx-h100", 2, "all_gather") == pytest.approx(_busbw("dgx-h100", 8, "all_gather"), rel=0.1)


def test_a_pipeline_send_on_the_mesh_takes_one_link():
    mesh, switch = Fabric.of(presets.system("mi300x-8x")), Fabric.of(presets.system("dgx-h100"))
    n = 1 * GIB
    assert n / float(mesh.p2p(n, False)) == pytest.approx(0.70 * XGMI_LINK_BYTES_PER_S, rel=0.02)
    # NVSwitch: a send gets the GPU's whole NVLink rate
    assert n / float(switch.p2p(n, False)) > 300e9


def test_mesh_share_broadcasts_over_groups_and_links():
    link = Link("m", 448e9, mesh_links=7)
    shares = mesh_share(link, [1, 2, 4, 8, 16])
    assert list(shares) == pytest.approx([1 / 7, 1 / 7, 3 / 7, 1.0, 1.0])


def test_mesh_links_read_from_yaml_and_kept_by_a_rate_that_replaces_the_link():
    link = link_from_dict("m", {"bandwidth": "448GB/s", "mesh_links": 7})
    assert link.mesh_links == 7
    assert link_from_rate("r", 600e9, "intra", replaced=link).mesh_links == 7
    assert link_from_rate("r", 600e9, "intra").mesh_links == 0


def test_a_negative_mesh_is_refused_in_one_line():
    with pytest.raises(SpecError, match=r"mesh_links: -1 is not allowed"):  # as written (review 37)
        link_from_dict("m", {"bandwidth": "448GB/s", "mesh_links": -1})
