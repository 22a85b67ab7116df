"""How fast the discrete-event pipeline simulator runs (on demand, not in the tests).

    python benchmarks/bench_simulator.py [--repeat 5]

Target (issue 4): p = 64 stages, m = 1024 micro-batches, v = 2 model chunks (interleaved 1F1B,
about 262,000 compute operations and as many sends) simulated in under one second.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from shardwise.engines.schedules import SCHEDULES, SPLIT_BACKWARD
from shardwise.engines.simulator import StageTimes, simulate

CASES = [("interleaved", 64, 1024, 2), ("1f1b", 64, 1024, 1), ("zb-h1", 64, 1024, 1)]


def once(name: str, p: int, m: int, v: int) -> tuple[int, float]:
    rng = np.random.default_rng(0)
    z = np.zeros(p)
    times = StageTimes(
        rng.uniform(0.9, 1.1, p),
        rng.uniform(1.8, 2.2, p),
        rng.uniform(0.4, 0.6, p),
        np.full(p, 0.01),
        np.full(p, 0.01),
        z,
        z,
    )
    start = time.perf_counter()
    ops = SCHEDULES[name](p, m, v)
    sim = simulate(ops, times, v, name in SPLIT_BACKWARD, name)
    return len(sim.records), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"{'schedule':12s} {'p':>3s} {'m':>5s} {'v':>2s} {'operations':>11s} {'median s':>9s}")
    for name, p, m, v in CASES:
        runs = [once(name, p, m, v) for _ in range(args.repeat)]
        print(f"{name:12s} {p:3d} {m:5d} {v:2d} {runs[0][0]:11,d} {statistics.median(t for _, t in runs):9.3f}")


if __name__ == "__main__":
    main()
