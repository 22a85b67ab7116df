"""`--cost-model textbook` hands links to the brief's formulas on one convention: both directions'
total, as the brief's "NVLink 600 GB/s" (A100's 2 x 300 GB/s). A named link was handed at its
per-direction rate, so `--intra-link X=nvlink3` (the brief's own link) doubled the TP time, under
a label saying "as the brief states them" (review 45 #9)."""

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
    assert "pcie4 63 GB/s (pcie4: 2 x 31.5 GB/s per direction)" in text
    assert "as the brief states them" not in text
    code, out, err = cli(ARGS)
    text = " ".join(out.split())
    assert "links as the brief states them: NVLink 600 GB/s, PCIe 32 GB/s (its NVLink figure counts both" in text
