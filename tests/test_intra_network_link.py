"""Review 36: `--intra-link IB=ib-hdr` (a network preset as the link inside a server) was taken
silently. Every link flag takes any preset, so it is still priced as given, with a note that says
what it stands for; the note's equivalence is checked here, not only stated."""

import json

import pytest


def _times(cli, args):
    code, out, err = cli(["crossover", "--vary", "batch=1,2", "--json", *args])
    assert code == 0, err
    data = json.loads(out)
    return {(s["plan"], s["link"]): s["time_s"] for s in data["series"]}, data["notes"]


def test_a_network_link_inside_a_server_gets_a_note_and_the_times_of_separate_servers(cli):
    inside, notes = _times(cli, ["--intra-link", "IB=ib-hdr"])
    assert any(
        "ib-hdr is a network link" in n and "of --nodes 8 --gpus-per-node 1 --inter-link ib-hdr" in n for n in notes
    )
    apart, apart_notes = _times(cli, ["--nodes", "8", "--gpus-per-node", "1", "--inter-link", "ib-hdr"])
    assert not any("network link" in n for n in apart_notes)
    for plan in ("tp=8", "pp=8"):  # one GPU per server: the link inside one barely matters (0.2% here)
        assert inside[(plan, "IB")] == pytest.approx(apart[(plan, "NVLink")], rel=1e-3)


def test_a_server_link_gets_no_such_note(cli):
    _, notes = _times(cli, ["--intra-link", "PCIe=pcie4", "--intra-link", "nvlink3"])
    assert not any("network link" in n for n in notes)
