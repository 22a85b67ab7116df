"""Calibrate on twelve published DGX H100 runs, then predict a new layout with and without the
calibration (docs/calibration.md). Runs the two commands a user would type, in a temporary
directory so nothing is left behind."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

RUNS = Path(__file__).resolve().parent / "calibration" / "h100_runs.csv"
PREDICT = [
    *("predict", "--model", "llama3-70b", "--system", "dgx-h100", "--nodes", "4"),
    *("--tp", "8", "--pp", "4", "--sequence-parallel", "--global-batch", "256"),
]


def shardwise(*args: str) -> None:
    print(f"# shardwise {' '.join(args)}", flush=True)
    subprocess.run([sys.executable, "-m", "shardwise", *args], check=True, stderr=subprocess.STDOUT)
    print(flush=True)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        os.symlink(RUNS, "h100_runs.csv")
        shardwise("calibrate", "h100_runs.csv", "-o", "h100.yaml")
        shardwise(*PREDICT)
        shardwise(*PREDICT, "--calibration", "h100.yaml")


if __name__ == "__main__":
    main()
