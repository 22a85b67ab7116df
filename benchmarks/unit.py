"""What the benchmarks share: the unit every median is also given in (one numpy `a * b + c` over
1e7 float64, measured in the same run, so figures compare across machines) and a median timer."""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np


def timed(fn: Callable[[], object], repeat: int) -> float:
    """Median seconds of `repeat` calls of `fn`."""
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def numpy_unit_s(repeat: int) -> float:
    """Median seconds of one `a * b + c` over 1e7 float64 (the unit of the ratios)."""
    rng = np.random.default_rng(0)
    a, b, c = (rng.random(10_000_000) for _ in range(3))
    return timed(lambda: a * b + c, repeat)


def allocator_option(parser: argparse.ArgumentParser) -> None:
    """`--allocator reuse` (default: glibc's malloc set as the `shardwise` command sets it,
    `shardwise.allocator`) or `default` (glibc's own settings, what a Python program importing
    the library gets unless it calls `reuse_freed_memory()`)."""
    parser.add_argument("--allocator", choices=("reuse", "default"), default="reuse", help="glibc malloc settings")


def apply_allocator(choice: str) -> None:
    from shardwise.allocator import reuse_freed_memory

    if choice == "reuse" and not reuse_freed_memory():
        print("note: could not set the allocator (not glibc); timings use its defaults")
