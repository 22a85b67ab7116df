"""A million random plans built, checked and priced in one call each (run on demand, not in the
tests).

    python benchmarks/bench_bulk.py [--n 1000000] [--repeat 5]

What is timed is what a program pricing random layouts does: `Plan(...)` over the arrays (its
checks), `Scenario(model, cluster, plan)` (the cross-object checks) and `estimate_training_step`,
the step time and the memory total read. Two draws on the brief's model (96 layers, hidden 4,096)
on 8 DGX A100:

  random  tp, pp in {1, 2, 4, 8}, dp = 64 / (tp pp), a micro-batch of 1, 2 or 4, 1-32
          micro-batches per replica, recomputation and ZeRO stage at random (the plans of
          `bench_vectorized.py`);
  wide    the same with the schedule (GPipe, 1F1B, interleaved with 2 model chunks, ZB-H1),
          sequence parallelism, context parallelism (1 or 2) and the overlap of the gradient
          reduction drawn too: many more distinct configurations.

Each median is given in reference element-operations per configuration: the median over one
numpy `a * b + c` over 1e7 float64 measured in the same run, times 1e7, over the
configurations. Goal (issue 38): at most 125 per random configuration.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
from unit import allocator_option, apply_allocator, numpy_unit_s, timed

from shardwise import presets
from shardwise.engines.training import estimate_training_step
from shardwise.specs import Plan, Scenario

GOAL_ELEMENT_OPS = 125


def draw(kind: str, n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    tp = rng.choice([1, 2, 4, 8], n)
    pp = rng.choice([1, 2, 4, 8], n)
    fields: dict[str, np.ndarray] = {"tp": tp, "pp": pp}
    cp = np.ones(n, dtype=np.int64)
    if kind == "wide":
        cp = np.where(tp * pp < 64, rng.choice([1, 2], n), 1)
        fields["cp"] = cp
    dp = 64 // (tp * pp * cp)
    mb = rng.choice([1, 2, 4], n)
    batches = rng.integers(1, 33, n)
    fields |= {"dp": dp, "micro_batch": mb, "recompute": rng.integers(0, 3, n), "zero_stage": rng.integers(0, 4, n)}
    if kind == "wide":
        schedule = rng.choice([0, 1, 2, 3], n)
        schedule = np.where(pp < 2, 1, schedule)  # the interleaved schedule needs pp >= 2
        interleaved = schedule == 2
        batches = np.where(interleaved, pp * np.maximum(batches // pp, 1), batches)  # m a multiple of pp
        fields |= {
            "schedule": schedule,
            "vpp": np.where(interleaved, 2, 1),
            "sequence_parallel": rng.random(n) < 0.5,
            "overlap_grad_reduce": rng.random(n) < 0.5,
        }
    fields["global_batch"] = dp * mb * batches
    return fields


def timings(fields: dict[str, np.ndarray], repeat: int) -> dict[str, float]:
    """Median seconds of the plan, the scenario, the estimate and all three in one go."""
    model, cluster = presets.model("gpt-96l-4096h"), presets.system("dgx-a100", nodes=8)

    def whole() -> object:
        est = estimate_training_step(Scenario(model, cluster, Plan(**fields)))  # type: ignore[arg-type]
        return est.step_time_s, est.memory.total_bytes

    def median(fn: Callable[[], object]) -> float:
        return timed(fn, repeat)

    whole()  # warm-up
    plan = Plan(**fields)  # type: ignore[arg-type]
    scn = Scenario(model, cluster, plan)

    def estimate() -> object:
        fresh = Scenario(model, cluster, plan)  # the plan's codes kept, the estimate's not
        return estimate_training_step(fresh).memory.total_bytes

    return {
        "Plan (checks)": median(lambda: Plan(**fields)),  # type: ignore[arg-type]
        "Scenario (checks)": median(lambda: Scenario(model, cluster, plan)),
        "estimate": median(estimate),
        "all three": median(whole),
        "distinct": float(found.count if (found := scn.__dict__.get("_distinct")) else len(fields["tp"])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    allocator_option(parser)
    args = parser.parse_args()
    apply_allocator(args.allocator)
    unit = numpy_unit_s(args.repeat)
    print(f"unit: numpy a*b+c over 1e7 float64 = {unit * 1e3:.1f} ms; allocator: {args.allocator}; n = {args.n:,}")
    print(f"{'draw':6s} {'part':18s} {'median s':>9s} {'element-ops/config':>19s}  goal {GOAL_ELEMENT_OPS} (all three)")
    for kind in ("random", "wide"):
        result = timings(draw(kind, args.n), args.repeat)
        distinct = int(result.pop("distinct"))
        for part, seconds in result.items():
            ops = seconds / unit * 1e7 / args.n
            verdict = ("met" if ops <= GOAL_ELEMENT_OPS else "not met") if part == "all three" else ""
            print(f"{kind:6s} {part:18s} {seconds:9.3f} {ops:19.0f}  {verdict}")
        print(f"{kind:6s} {'distinct configurations':18s} {distinct:,}")


if __name__ == "__main__":
    main()
