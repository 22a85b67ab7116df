"""One configuration at a time through the API: CPU time and Python calls per configuration
(run on demand, not in the tests).

    python benchmarks/bench_scalar.py [--peers /tmp/peers/bin/python] [--markdown]

Each configuration is `estimate_training_step(Scenario(model, cluster, Plan(...)))` with plain
numbers, its step time and memory total read: the Plan's and the Scenario's checks included.
The brief's model (96 layers, hidden 4,096) on 8 DGX A100, plans drawn from tp, pp in
{1, 2, 4, 8}, a micro-batch of 1, 2 or 4, 1-32 micro-batches per replica, three recomputation
modes and four ZeRO stages (18,432 configurations):

  repeat  the same 64 configurations asked for again and again (an explorer moving back and
          forth, a planner re-timing its best plans): each answer is the one kept (`specs.memo`);
  new     configurations never asked for before (each drawn once): their estimate is computed,
          the parts they share with earlier ones are kept: the per-micro-batch stage costs (they
          read neither dp, the batch, ZeRO nor the schedule) and what the step computes without
          reading the global batch, with the memory per layout and micro-batches in flight (a
          layout of the 576 here is asked for again after a few hundred configurations);
  new layout  the same with nothing of a configuration's layout kept (those two memos emptied
          before each): a layout never asked for before;
  cold    every memo off: everything computed for every configuration.

Goal (issue 38): at most 0.2 ms of CPU per new configuration, and less than every peer's time
measured in the same run (the last line says which holds). `--peers PYTHON` also times
llm-analysis and Calculon in the same run (`benchmarks/peers.py`, run by that interpreter: a
virtual environment where both are installed), and every figure is also given in units of one
numpy `a * b + c` over 1e7 float64 measured in the same run.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
from unit import numpy_unit_s

from shardwise import presets
from shardwise.engines import training
from shardwise.engines.training import estimate_training_step
from shardwise.specs import Plan, Scenario

try:
    from shardwise.specs.memo import disabled
except ImportError:  # a version without memos (to time the one before them the same way)
    from contextlib import nullcontext as disabled

GOAL_MS = 0.2
MODEL, SYSTEM, NODES = "gpt-96l-4096h", "dgx-a100", 8


def configurations(n: int, seed: int = 0) -> list[dict[str, int]]:
    """`n` distinct plans (module docstring), in a random order."""
    rng = np.random.default_rng(seed)
    seen: set[tuple[int, ...]] = set()
    out = []
    while len(out) < n:
        tp, pp = (int(x) for x in rng.choice([1, 2, 4, 8], 2))
        mb = int(rng.choice([1, 2, 4]))
        dp = 8 * NODES // (tp * pp)
        fields = {
            "tp": tp,
            "pp": pp,
            "dp": dp,
            "micro_batch": mb,
            "global_batch": dp * mb * int(rng.integers(1, 33)),
            "recompute": int(rng.integers(0, 3)),
            "zero_stage": int(rng.integers(0, 4)),
        }
        key = tuple(fields.values())
        if key not in seen:
            seen.add(key)
            out.append(fields)
    return out


def pricer() -> Callable[[dict[str, int]], object]:
    model, cluster = presets.model(MODEL), presets.system(SYSTEM, nodes=NODES)

    def price(fields: dict[str, int]) -> object:
        est = estimate_training_step(Scenario(model, cluster, Plan(**fields)))
        return est.step_time_s, est.memory.total_bytes

    return price


def per_configuration_ms(price: Callable[[dict[str, int]], object], plans: list[dict[str, int]]) -> float:
    start = time.process_time()
    for fields in plans:
        price(fields)
    return (time.process_time() - start) / len(plans) * 1e3


def python_calls(price: Callable[[dict[str, int]], object], fields: dict[str, int]) -> int:
    profile = cProfile.Profile()
    profile.enable()
    price(fields)
    profile.disable()
    return pstats.Stats(profile).total_calls  # type: ignore[attr-defined,no-any-return]


def measure(rounds: int, n: int) -> dict[str, tuple[float, int]]:
    """Median ms per configuration and Python calls of one, per workload."""
    price = pricer()
    plans = configurations(n * (2 * rounds + 2) + 64)
    hot, fresh = plans[:64], plans[64:]
    out: dict[str, tuple[float, int]] = {}
    for p in hot:  # warm-up: imports, first-call caches, the repeated set kept
        price(p)
    out["repeat"] = (
        statistics.median(per_configuration_ms(price, hot * (n // 64 or 1)) for _ in range(rounds)),
        python_calls(price, hot[0]),
    )
    times = [per_configuration_ms(price, fresh[i * n : (i + 1) * n]) for i in range(rounds)]
    out["new"] = (statistics.median(times), python_calls(price, fresh[rounds * n]))
    # the same, with nothing of the configuration's layout kept either (what it computes without
    # reading the global batch, and its memory: issue 38 part 6): a layout never seen before
    try:  # the layout terms' module (before its split from engines.training: that module)
        from shardwise.engines import training_layout as kept_in
    except ImportError:
        kept_in = training  # type: ignore[assignment]
    try:  # the memory's memo (in engines.training_step_memory since issue 38 part 7)
        from shardwise.engines import training_step_memory as memory_in
    except ImportError:
        memory_in = kept_in  # type: ignore[assignment]
    names = ("LAYOUTS", "_LAYOUTS", "MEMORY", "_MEMORY")
    found = (getattr(module, name, None) for module in (kept_in, memory_in) for name in names)
    layouts = list({id(m): m for m in found if m is not None}.values())

    def new_layout(fields: dict[str, int]) -> object:
        for kept in layouts:
            kept.clear()
        return price(fields)

    later = fresh[(rounds + 1) * n :]
    times = [per_configuration_ms(new_layout, later[i * n : (i + 1) * n]) for i in range(rounds)]
    out["new layout"] = (statistics.median(times), python_calls(new_layout, later[rounds * n]))
    with disabled():
        times = [per_configuration_ms(price, hot[: max(8, n // 8)]) for _ in range(rounds)]
        out["cold"] = (statistics.median(times), python_calls(price, hot[0]))
    return out


def peers(python: str) -> dict[str, dict[str, float]]:
    script = Path(__file__).with_name("peers.py")
    proc = subprocess.run([python, str(script)], capture_output=True, text=True, timeout=600)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode or not lines:
        return {"peers": {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]}}  # type: ignore[dict-item]
    return json.loads(lines[-1])  # type: ignore[no-any-return]


DESCRIPTIONS = {
    "repeat": "shardwise, a configuration asked for again (kept)",
    "new": "shardwise, a configuration never asked for before",
    "new layout": "shardwise, the same, its layout never asked for either",
    "cold": "shardwise, every memo off (everything computed)",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--n", type=int, default=400, help="configurations per round")
    parser.add_argument("--peers", metavar="PYTHON", help="an interpreter with llm-analysis and Calculon installed")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    unit_ms = numpy_unit_s(args.rounds) * 1e3
    rows = [(DESCRIPTIONS[k], ms, calls) for k, (ms, calls) in measure(args.rounds, args.n).items()]
    for name, result in (peers(args.peers) if args.peers else {}).items():
        if "error" in result:
            rows.append((f"{name}: not measured ({result['error']})", float("nan"), 0))
        else:
            rows.append((name, result["ms"], int(result["python_calls"])))
    if args.markdown:
        print(f"| one configuration (unit: numpy a*b+c over 1e7 float64 = {unit_ms:.0f} ms; goal {GOAL_MS} ms) "
              "| CPU ms | in units x 1e-3 | Python calls | against the goal |")  # fmt: skip
        print("|---|---:|---:|---:|---|")
        for name, ms, calls in rows:
            verdict = "" if ms != ms else ("met" if ms <= GOAL_MS else f"{ms / GOAL_MS:.1f} x the goal")
            print(f"| {name} | {ms:.3f} | {ms / unit_ms * 1e3:.2f} | {calls:,} | {verdict} |")
        print(f"\n{against_peers(rows)}")
        return
    print(f"unit: numpy a*b+c over 1e7 float64 = {unit_ms:.1f} ms; goal {GOAL_MS} ms per configuration")
    for name, ms, calls in rows:
        print(f"{name:60s} {ms:8.3f} ms {calls:8,d} calls")
    print(against_peers(rows))


def against_peers(rows: list[tuple[str, float, int]]) -> str:
    """The goal's second half (issue 38): a new configuration faster than every peer measured in
    the same run."""
    ms = {name: value for name, value, _ in rows}
    new = ms[DESCRIPTIONS["new"]]
    peers = {name: value for name, value in ms.items() if name not in DESCRIPTIONS.values() and value == value}
    if not peers:
        return f"a new configuration: {new:.3f} ms ({'met' if new <= GOAL_MS else 'not met'}); no peer measured"
    ratios = ", ".join(f"{new / value:.2f} x {name}'s" for name, value in peers.items())
    verdict = "met" if new <= GOAL_MS and all(new < value for value in peers.values()) else "not met"
    return f"a new configuration: {ratios} time (goal: <= {GOAL_MS} ms and faster than every peer: {verdict})"


if __name__ == "__main__":
    main()
