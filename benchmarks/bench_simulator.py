"""How fast the discrete-event pipeline simulator and its outputs run (on demand, not in the tests).

    python benchmarks/bench_simulator.py [--repeat 5]

Targets (issue 16): p = 64 stages, m = 1024 micro-batches, v = 2 model chunks (interleaved 1F1B,
about 262,000 compute operations and as many sends) simulated in under 0.3 s, and its Gantt
chart, Chrome trace and `--json` each written in under 1 s. Each median is also given in units
of one numpy `a * b + c` over 1e7 float64 measured in the same run, so figures compare across
machines. The event-heap reference simulator (`engines.simulator_events`) is timed beside the
stage-driven one it checks, and so is what the planner runs per plan it re-times: the step's times
alone over the schedule compiled to integers (`simulator.simulate_times`; its operations are the
compute operations, sends not counted).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
from unit import allocator_option, apply_allocator, numpy_unit_s, timed

from shardwise.engines.schedules import SCHEDULES, SPLIT_BACKWARD
from shardwise.engines.simulator import StageTimes, simulate
from shardwise.engines.simulator_events import simulate_events
from shardwise.engines.simulator_times import compiled

CASES = [("interleaved", 64, 1024, 2), ("1f1b", 64, 1024, 1), ("zb-h1", 64, 1024, 1)]


def stage_times(p: int) -> StageTimes:
    rng = np.random.default_rng(0)
    z = np.zeros(p)
    return StageTimes(
        rng.uniform(0.9, 1.1, p), rng.uniform(1.8, 2.2, p), rng.uniform(0.4, 0.6, p),
        np.full(p, 0.01), np.full(p, 0.01), z + 1.0, z + 1.0,
    )  # fmt: skip


def outputs(repeat: int) -> list[tuple[str, int, float]]:
    """Seconds of `shardwise timeline`'s outputs for a real step of that size (a 128-layer GPT on
    64 stages of 8 DGX A100, 1,024 micro-batches, 2 chunks): the Gantt chart (PNG), the Chrome
    trace and the --json text."""
    from shardwise import export, plots, presets
    from shardwise.engines.simulated import simulate_training_step
    from shardwise.export_trace import write_chrome_trace
    from shardwise.specs import Plan, Scenario

    scn = Scenario(
        presets.model("gpt-96l-4096h", layers=128),
        presets.system("dgx-a100", nodes=8),
        Plan(pp=64, vpp=2, schedule="interleaved", global_batch=1024),
    )
    step = simulate_training_step(scn)
    n = len(step.simulation.records)
    folder = Path(tempfile.mkdtemp())

    def gantt() -> None:
        plots.save(plots.gantt(step.simulation, "benchmark"), folder / "gantt.png", tight=False)

    return [
        ("Gantt chart (PNG)", n, timed(gantt, repeat)),
        ("Chrome trace", n, timed(lambda: write_chrome_trace(step.simulation, folder / "trace.json"), repeat)),
        ("--json", n, timed(lambda: export.dumps(export.simulation_dict(step, 0.0), compact=True), repeat)),
    ]


def _times_only(name: str, p: int, m: int, v: int, times: StageTimes) -> object:
    """What the planner runs per plan it re-times: the step's times without the list of
    operations (`simulate_times`), its schedule compiled afresh (`simulator_times`: not kept)."""
    from shardwise.engines import simulator_times
    from shardwise.engines.simulator import simulate_times

    simulator_times._KEPT.clear()
    return simulate_times(name, p, m, v, times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown (docs/speed.md)")
    allocator_option(parser)
    args = parser.parse_args()
    apply_allocator(args.allocator)
    unit = numpy_unit_s(args.repeat)
    rows = []
    for name, p, m, v in CASES:
        ops = SCHEDULES[name](p, m, v)
        times = stage_times(p)
        split = name in SPLIT_BACKWARD
        fast = timed(lambda: simulate(ops, times, v, split, name), args.repeat)  # noqa: B023
        ref = timed(lambda: simulate_events(ops, times, v, split, name), max(1, args.repeat // 2))  # noqa: B023
        n = len(simulate(ops, times, v, split, name).records)
        rows.append((f"simulate {name} p={p} m={m} v={v}", n, fast))
        rows.append(("  the event-heap reference", n, ref))
        times_only = timed(lambda: _times_only(name, p, m, v, times), args.repeat)  # noqa: B023
        compute_ops = sum(len(stage) for stage in compiled(name, p, m, v).codes)
        rows.append(("  its times alone (the planner's; schedule compiled)", compute_ops, times_only))
    rows += outputs(max(1, args.repeat // 2))
    if args.markdown:
        print(f"| what (unit: numpy a*b+c over 1e7 float64 = {unit * 1e3:.0f} ms; allocator: {args.allocator}) "
              "| operations | median | in units |")  # fmt: skip
        print("|---|---:|---:|---:|")
        for what, n, seconds in rows:
            print(f"| {what.strip()} | {n:,} | {seconds:.3f} s | {seconds / unit:.1f} |")
        return
    print(f"unit: numpy a*b+c over 1e7 float64 = {unit * 1e3:.1f} ms; allocator: {args.allocator}")
    print(f"{'what':40s} {'operations':>11s} {'median s':>9s} {'in units':>9s}")
    for what, n, seconds in rows:
        print(f"{what:40s} {n:11,d} {seconds:9.3f} {seconds / unit:9.1f}")


if __name__ == "__main__":
    main()
