"""How fast the cost model evaluates configurations (run on demand, not in the tests).

    python benchmarks/bench_vectorized.py [--repeat 7]

Two workloads, each timed `--repeat` times (median reported):
  grid    the brief's experiment as `shardwise sweep` evaluates it: batch x link bandwidth x layers x
          sequence length, outer product, every plan on every link (the sparse-broadcast path);
  random  the same number of independent random plans (tp, pp, dp, micro-batch, recompute, ZeRO)
          in one flat array: no shared axes to exploit (the worst case).
Target (issue 3): one million configurations in under one second on one core.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

from shardwise import presets
from shardwise.analyses.experiment import brief_experiment
from shardwise.analyses.sweep import run_sweep
from shardwise.engines.training import estimate_training_step
from shardwise.specs import Plan, Scenario

GRID = [
    ("batch", np.arange(1, 65, dtype=float)),
    ("bandwidth", np.geomspace(1e9, 1e12, 64)),
    ("layers", np.arange(8, 200, 8, dtype=float)),
    ("seq_len", np.array([512.0, 1024, 2048, 4096, 8192])),
]


def bench_grid() -> tuple[int, float]:
    exp = brief_experiment()
    start = time.perf_counter()
    result = run_sweep(exp, GRID)
    return result.points, time.perf_counter() - start


def random_plans(n: int, seed: int = 0) -> Scenario:
    rng = np.random.default_rng(seed)
    tp = rng.choice([1, 2, 4, 8], n)
    pp = rng.choice([1, 2, 4, 8], n)
    dp = 64 // (tp * pp)
    mb = rng.choice([1, 2, 4], n)
    plan = Plan(
        tp=tp,
        pp=pp,
        dp=dp,
        micro_batch=mb,
        global_batch=dp * mb * rng.integers(1, 33, n),
        recompute=rng.integers(0, 3, n),
        zero_stage=rng.integers(0, 4, n),
    )
    return Scenario(presets.model("gpt-96l-4096h"), presets.system("dgx-a100", nodes=8), plan)


def bench_random(n: int) -> tuple[int, float]:
    scn = random_plans(n)
    start = time.perf_counter()
    est = estimate_training_step(scn)
    _ = est.step_time_s, est.memory.total_bytes
    return n, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    configs, _ = bench_grid()  # warm-up
    rows = []
    for name, fn in (("grid", bench_grid), ("random", lambda: bench_random(configs))):
        times = [fn()[1] for _ in range(args.repeat)]
        med = statistics.median(times)
        rows.append((name, configs, med, configs / med))
    print(f"{'workload':8s} {'configurations':>15s} {'median s':>9s} {'configs/s':>12s} {'1M configs in':>14s}")
    for name, n, med, rate in rows:
        print(f"{name:8s} {n:15,d} {med:9.3f} {rate:12,.0f} {1e6 / rate:13.2f}s")


if __name__ == "__main__":
    main()
