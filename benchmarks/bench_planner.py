"""How fast `shardwise plan` searches (on demand, not in the tests).

    python benchmarks/bench_planner.py [--repeat 7]

Target (issue 6): the full space for the 1T model of Narayanan et al. 2021 (Table 1, last row:
128 layers, 160 heads) on 3072 A100 GPUs with its global batch of 3072 sequences, in under two
seconds. Four spaces: the default (TP inside a server, micro-batch <= 16, v <= 8, ZeRO <= 1 with
a pipeline), TP also across servers with micro-batches up to 64 and v up to 16, the same with
ZeRO-2/3 allowed with a pipeline, and the throughput-per-GPU objective (every whole number of
servers up to 384). Each is timed as `shardwise plan` runs it (the closed form over every plan,
then the simulator re-timing the best ones) and for the closed-form search alone (issue 16's
target: under 0.1 s). `--allocator` as in bench_vectorized.py (default: as the command runs).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from unit import allocator_option, apply_allocator, numpy_unit_s

from shardwise import presets
from shardwise.analyses import planner
from shardwise.analyses.planner import SearchSpace, search

CASES = {
    "default": SearchSpace(),
    "tp across servers, mb <= 64, v <= 16": SearchSpace(tp_within_node=False, max_micro_batch=64, max_vpp=16),
    "the same + ZeRO-2/3 with pp": SearchSpace(
        tp_within_node=False, max_micro_batch=64, max_vpp=16, zero_with_pipeline=True
    ),
    "throughput per GPU (1..384 servers)": SearchSpace(objective="throughput-per-gpu"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    allocator_option(parser)
    args = parser.parse_args()
    apply_allocator(args.allocator)
    model, cluster = presets.model("gpt-1t"), presets.system("dgx-a100", nodes=384)
    search(model, cluster, 3072)  # warm-up
    unit = numpy_unit_s(args.repeat)
    print(f"unit: numpy a*b+c over 1e7 float64 = {unit * 1e3:.0f} ms; allocator: {args.allocator}")
    heads = ("plans", "fit", "median s", "search s", "in units", "plans/s")
    print(f"{'space':40s} " + " ".join(f"{h:>{w}s}" for h, w in zip(heads, (10, 8, 9, 9, 9, 12), strict=True)))
    for name, space in CASES.items():
        times, alone, result = [], [], None
        for _ in range(args.repeat):
            if hasattr(planner, "CONFIRMED"):  # each run re-times its plans (none kept from the last run)
                planner.CONFIRMED.clear()
            start = time.perf_counter()
            result = search(model, cluster, 3072, space)
            result.ranked(10)
            times.append(time.perf_counter() - start)
            rounds, planner.CONFIRM_ROUNDS = planner.CONFIRM_ROUNDS, 0
            if hasattr(planner, "CONFIRMED"):
                planner.CONFIRMED.clear()
            try:
                start = time.perf_counter()
                search(model, cluster, 3072, space).ranked(10)
                alone.append(time.perf_counter() - start)
            finally:
                planner.CONFIRM_ROUNDS = rounds
        med, med_alone = statistics.median(times), statistics.median(alone)
        assert result is not None
        fit = result.evaluated - result.dropped_for_memory
        print(f"{name:40s} {result.evaluated:10,d} {fit:8,d} {med:9.3f} {med_alone:9.3f} {med_alone / unit:9.2f} "
              f"{result.evaluated / med_alone:12,.0f}")  # fmt: skip


if __name__ == "__main__":
    main()
