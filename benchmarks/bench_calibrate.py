"""How fast `shardwise calibrate` fits (on demand, not in the tests).

    python benchmarks/bench_calibrate.py [--repeat 3]

Target (issue 12): fitting 1,000 runs takes seconds, not minutes. Fits the twelve runs of
examples/calibration/h100_runs.csv, one public stack's dev runs, every public training run the
model can express (distinct after duplicates), and 1,000 runs (those, repeated with each copy's
measurement moved by 5% noise), each with all six parameters; prints the median wall time of
`--repeat` fits.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

from shardwise.analyses import calibration_validation as cv
from shardwise.calibration.fit import fit
from shardwise.calibration.runs import read_runs

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "calibration" / "h100_runs.csv"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    public = cv.public_runs()
    cases = {
        "example (12 runs)": [(r.case, r.measured) for r in read_runs(EXAMPLE)],
        "one stack (dev)": [
            (r.scenario, r.measured_step_s) for r in public if r.split == "dev" and r.stack.startswith("dgxc")
        ],
        "every public run": [(r.scenario, r.measured_step_s) for r in public],
    }
    rng = np.random.default_rng(0)
    base = cases["every public run"]
    cases["1,000 runs"] = [
        (s, m * float(np.exp(rng.normal(0.0, 0.05)))) for s, m in (base[i % len(base)] for i in range(1000))
    ]
    for name, runs in cases.items():
        scns, steps = [s for s, _ in runs], np.array([m for _, m in runs])
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            f = fit(scns, steps)
            times.append(time.perf_counter() - t0)
        print(f"{name}: {len(runs)} runs, {len(f.fitted)} parameters, median {statistics.median(times):.2f} s")


if __name__ == "__main__":
    main()
