"""`--cost-model textbook` hands a named link to the brief's formulas as the brief counts its kind:
NVLink at both directions' total, as the brief's "NVLink 600 GB/s" (A100's 2 x 300 GB/s), PCIe at one
direction, as its "PCIe 32 GB/s" (PCIe 4.0 x16). A named link was handed at its per-direction rate,
so `--intra-link X=nvlink3` (the brief's own link) doubled the TP time, under a label saying "as the
brief states them" (review 45 #9); then a named pcie4 went at 63 GB/s, twice the brief's (review 46 #5)."""

from __future__ import annotations

import json

ARGS = ["crossover", "--cost-model", "textbook", "--vary", "batch=1,4", "--no-plot"]


def _tp_s(cli, *extra: str, link: str = "X") -> list[float]:
    code, out, err = cli([*ARGS, *extra, "--json"])
    assert code == 0, err
    series = json.loads(out)["series"]
    return next(s for s in series if s["plan"] == "tp=8" and s["link"] == link)["time_s"]


def test_a_named_nvlink3_prices_as_the_briefs_600_gb_s(cli):
    named = _tp_s(cli, "--intra-link", "X=nvlink3")
    assert named == _tp_s(cli, "--intra-link", "X=600GB/s") == _tp_s(cli, link="NVLink")


def test_the_label_says_which_convention(cli):
    code, out, err = cli([*ARGS, "--intra-link", "X=nvlink3", "--intra-link", "pcie4"])
    text = " ".join(out.split())
    assert code == 0, err
    assert "X 600 GB/s (nvlink3: 2 x 300 GB/s per direction)" in text
    assert "pcie4 31.5 GB/s (pcie4: 31.5 GB/s per direction)" in text
    assert "as the brief states them" not in text
    code, out, err = cli(ARGS)
    text = " ".join(out.split())
    assert "links as the brief states them: NVLink 600 GB/s, PCIe 32 GB/s (its NVLink figure counts both" in text


def test_a_named_pcie4_prices_as_the_briefs_32_gb_s(cli):
    """pcie4's 31.5 GB/s per direction is the brief's ~32 GB/s: the same TP time within 2%."""
    named = _tp_s(cli, "--intra-link", "X=pcie4")
    brief = _tp_s(cli, link="PCIe")
    assert all(abs(a / b - 1) < 0.02 for a, b in zip(named, brief, strict=True))
