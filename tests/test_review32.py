"""What review 32 (the one-tool pass over the CLI) found: each a test that failed before the fix."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

H100_8B = ["--model", "llama3-8b", "--system", "dgx-h100"]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_an_answer_stdout_cannot_hold_is_one_line_not_a_traceback():
    """`predict --json > /dev/full` raised OSError (ENOSPC) out of click.echo: a traceback."""
    args = [sys.executable, "-m", "shardwise", "predict", *H100_8B, "--global-batch", "16", "--tp", "2", "--json"]
    with open("/dev/full", "w") as full:
        proc = subprocess.run(args, stdout=full, stderr=subprocess.PIPE, text=True)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == ["error: cannot write the output (no space left on the device)"]


def test_plan_o_writes_every_plan_when_none_fits(cli, tmp_path):
    """`plan -o FILE` wrote nothing when no plan fits, though -o holds 'every evaluated plan, fitting or not'."""
    import csv

    path = tmp_path / "all.csv"
    code, _, err = cli(
        ["plan", "--model", "llama3-405b", "--system", "dgx-h100", "--global-batch", "16", "-o", str(path)]
    )
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "none of the" in err and f"evaluated plans written to {path}" in err
    rows = list(csv.DictReader(path.open()))
    assert len(rows) > 100 and all(r["fits_in_memory"] == "false" for r in rows)
