"""How fast the cost model evaluates configurations (run on demand, not in the tests).

    python benchmarks/bench_vectorized.py [--repeat 7]

Workloads, each timed `--repeat` times (median reported):
  grid    the brief's experiment as `shardwise sweep` evaluates it: batch x link bandwidth x layers x
          sequence length, outer product, every plan on every link (the sparse-broadcast path);
  random  the same number of independent random plans (tp, pp, dp, micro-batch, recompute, ZeRO)
          in one flat array: no shared axes; drawn from a few values per field, so they repeat
          (`engines.distinct` prices each distinct one once);
  each    the same random plans priced element by element (`estimate_each_training_step`, the
          reference the distinct path is checked against);
  csv     the grid's table written as CSV (`shardwise sweep -o grid.csv`).
Targets (issue 16): 10 million random configurations per second, 30 million for grids. Each
median is also given in units of one numpy `a * b + c` over 1e7 float64 measured in the same run.

`--allocator reuse` (the default) sets glibc's malloc as the `shardwise` command does
(`shardwise.allocator`); `--allocator default` leaves glibc's own settings, as a Python program
that imports the library gets unless it calls `reuse_freed_memory()`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
from unit import allocator_option, apply_allocator, numpy_unit_s

from shardwise import presets
from shardwise.analyses.experiment import brief_experiment
from shardwise.analyses.sweep import run_sweep
from shardwise.engines.training import estimate_each_training_step, estimate_training_step
from shardwise.specs import Plan, Scenario

GRID = [
    ("batch", np.arange(1, 65, dtype=float)),
    ("bandwidth", np.geomspace(1e9, 1e12, 64)),
    ("layers", np.arange(8, 200, 8, dtype=float)),
    ("seq_len", np.array([512.0, 1024, 2048, 4096, 8192])),
]


DESCRIPTIONS = {
    "grid": "grid: batch x bandwidth x layers x sequence length, 2 plans x 2 links (`shardwise sweep`)",
    "random": "random plans (tp, pp, dp, micro-batch, recompute, ZeRO), one flat array, each distinct one priced once",
    "each": "the same random plans priced element by element (the reference)",
    "csv": "the grid written as CSV (`sweep -o grid.csv`)",
}


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


def bench_random(n: int, price: object = estimate_training_step) -> tuple[int, float]:
    scn = random_plans(n)
    start = time.perf_counter()
    est = price(scn)  # type: ignore[operator]
    _ = est.step_time_s, est.memory.total_bytes
    return n, time.perf_counter() - start


def bench_csv() -> tuple[int, float]:
    import tempfile

    from shardwise.tables import write_columns

    result = run_sweep(brief_experiment(), GRID)
    columns = dict(result.columns())
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        write_columns(columns, f"{folder}/grid.csv")
        return result.points, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown (docs/speed.md)")
    allocator_option(parser)
    args = parser.parse_args()
    apply_allocator(args.allocator)
    unit = numpy_unit_s(args.repeat)
    configs, _ = bench_grid()  # warm-up
    cases = (
        ("grid", bench_grid),
        ("random", lambda: bench_random(configs)),
        ("each", lambda: bench_random(configs, estimate_each_training_step)),
        ("csv", bench_csv),
    )
    rows = []
    for name, fn in cases:
        times = [fn()[1] for _ in range(args.repeat if name != "csv" else max(1, args.repeat // 2))]
        med = statistics.median(times)
        rows.append((name, configs, med, med / unit, configs / med))
    if args.markdown:
        print(f"| workload ({configs:,} configurations; unit: numpy a*b+c over 1e7 float64 = {unit * 1e3:.0f} ms; "
              f"allocator: {args.allocator}) "
              "| median | in units | configurations/s |")  # fmt: skip
        print("|---|---:|---:|---:|")
        for name, _, med, units, rate in rows:
            print(f"| {DESCRIPTIONS[name]} | {med:.3f} s | {units:.1f} | {rate:,.0f} |")
        return
    print(f"unit: numpy a*b+c over 1e7 float64 = {unit * 1e3:.1f} ms; allocator: {args.allocator}")
    print(f"{'workload':8s} {'configurations':>15s} {'median s':>9s} {'in units':>9s} {'configs/s':>12s}")
    for name, n, med, units, rate in rows:
        print(f"{name:8s} {n:15,d} {med:9.3f} {units:9.1f} {rate:12,.0f}")


if __name__ == "__main__":
    main()
