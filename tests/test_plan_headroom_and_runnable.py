"""Review 41 #4 and #7, on Llama 3 70B over 32 DGX H100 under nanotron (seq 4096, 256 sequences):
the plans the search drops only for its memory headroom are listed apart with their predicted
time (tp 4 pp 4 dp 16 at 76.8 GB, faster than the pick, was dropped as "needs 77 GB > 76 GB"),
and the neighbours nanotron cannot run (zb-h1, interleaving, ZeRO-2) are listed apart from the
runnable ones."""

from __future__ import annotations

import json

from click.testing import CliRunner

from shardwise.cli import cli

ARGV = "--model llama3-70b --seq-len 4096 --system dgx-h100 --nodes 32 --global-batch 256 --framework nanotron"


def test_plan_prints_headroom_drops_and_unrunnable_neighbours_apart():
    done = CliRunner().invoke(cli, ["plan", *ARGV.split()])
    assert done.exit_code == 0, done.output
    text = done.output
    runnable, _, rest = text.partition("not runnable on nanotron")
    assert rest, text
    why = runnable.split("why:")[1]
    assert "zb-h1" not in why and "interleaved" not in why and "ZeRO-2:" not in why
    assert "schedule zb-h1" in rest and "interleaved, v=2" in rest and "ZeRO-2: +" in rest


def test_plan_json_marks_them():
    done = CliRunner().invoke(cli, ["plan", *ARGV.split(), "--json"])
    data = json.loads(done.output)
    cannot = {w["change"] for w in data["why"] if w["framework_cannot"]}
    assert {"schedule zb-h1", "ZeRO-2"} <= cannot
