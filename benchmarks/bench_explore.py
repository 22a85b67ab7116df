"""The explorer's server-side time per move: one control changed, a new figure computed (run on
demand, not in the tests; needs the explorer's extra, `pip install 'shardwise[explore]'`).

    python benchmarks/bench_explore.py [--moves 9] [--tab planner ...]

The app is built in this process (`create_app`, with its pool of warm worker processes) and
driven through its HTTP API with Flask's test client: each move is the request the page sends
when a control changes (`/_dash-update-component`, every input and state the page's callback
declares), and its time is the request's, from the body sent to the figures returned (checks,
the command run in a worker, the figures and the summary built). Per default tab, one control
moves over values not asked for before in the run (so no answer is one kept from an earlier
move): the crossover's bandwidth slider, the winner map's batch range, the planner's global
batch, the serving page's prompt length and the timeline's global batch (`--tab` times only the
tabs named). Goal (issue 38): at most 0.15 s per move. Medians of `--moves` moves per tab, also in
units of one numpy `a * b + c` over 1e7 float64 measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

from unit import numpy_unit_s

from shardwise.explore import state
from shardwise.explore.app import create_app
from shardwise.explore.layout import BANDWIDTHS_GB_S

GOAL_S = 0.15
POOL = "shardwise-explore-pool"


def moves(n: int) -> dict[str, tuple[str, list[Any]]]:
    """Per tab: the control moved and `n` + 1 values (the first one warms the tab up)."""
    positions = [i % len(BANDWIDTHS_GB_S) for i in range(1, n + 2)]
    return {
        "crossover": ("x-bw", positions),
        "winner-map": ("w-x", [f"batch=1..{32 + 8 * i}" for i in range(n + 1)]),
        "planner": ("p-batch", [64 * (i + 1) for i in range(n + 1)]),
        "serving": ("s-input", [512 * (i + 1) for i in range(n + 1)]),
        "timeline": ("t-batch", [8 * (i + 2) for i in range(n + 1)]),
    }


def body(app: Any, page: str, values: dict[str, Any], changed: str) -> dict[str, Any]:
    """The request the page sends: every input and state of its `compute` callback, the
    controls' defaults unless `values` says otherwise."""
    key = next(k for k in app.callback_map if f"{page}-text.children" in k)
    entry = app.callback_map[key]
    outputs = [{"id": o.component_id, "property": o.component_property} for o in entry["output"]]

    def item(d: dict[str, str]) -> dict[str, Any]:
        cid, prop = d["id"], d["property"]
        default = state.DEFAULTS.get(cid) if prop == "value" and cid != "x-bw" else None
        return {**d, "value": values.get(cid, default)}

    return {
        "output": key,
        "outputs": outputs,
        "inputs": [item(d) for d in entry["inputs"]],
        "state": [item(d) for d in entry.get("state", [])],
        "changedPropIds": [f"{changed}.value"],
    }


def time_moves(n: int, tabs: list[str] | None = None) -> dict[str, list[float]]:
    app = create_app()
    client = app.server.test_client()
    out: dict[str, list[float]] = {}
    try:
        for page, (control, values) in moves(n).items():
            if tabs and page not in tabs:
                continue
            times = []
            for value in values:
                request = body(app, page, {"page": page, control: value}, control)
                start = time.perf_counter()
                response = client.post("/_dash-update-component", json=request)
                times.append(time.perf_counter() - start)
                text = response.get_data(as_text=True)
                if response.status_code != 200 or "no result for these settings" in text:
                    raise SystemExit(f"{page} {control}={value!r}: {response.status_code} {text[:300]}")
            out[page] = times[1:]  # the first one starts the tab (imports, the worker's first run)
    finally:
        pool = app.server.extensions.get(POOL)
        if pool is not None:
            pool.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--moves", type=int, default=9, help="moves per tab (after one to warm it up)")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--tab", action="append", choices=list(moves(0)), help="time only this tab (repeatable)")
    args = parser.parse_args()
    unit = numpy_unit_s(5)
    result = time_moves(args.moves, args.tab)
    control = {page: c for page, (c, _) in moves(0).items()}
    if args.markdown:
        print(f"| tab (control moved; unit: numpy a*b+c over 1e7 float64 = {unit * 1e3:.0f} ms) "
              f"| median s | min s | max s | in units | goal {GOAL_S} s |")  # fmt: skip
        print("|---|---:|---:|---:|---:|---|")
    else:
        print(f"unit: numpy a*b+c over 1e7 float64 = {unit * 1e3:.1f} ms; {args.moves} moves per tab")
        head = f"{'tab':11s} {'control':9s} {'median s':>9s} {'min s':>7s} {'max s':>7s} {'in units':>9s}"
        print(f"{head}  goal {GOAL_S} s")
    for page, times in result.items():
        med = statistics.median(times)
        verdict = "met" if med <= GOAL_S else f"{med / GOAL_S:.1f} x the goal"
        if args.markdown:
            print(f"| {page} (`{control[page]}`) | {med:.3f} | {min(times):.3f} | {max(times):.3f} "
                  f"| {med / unit:.1f} | {verdict} |")  # fmt: skip
        else:
            row = f"{page:11s} {control[page]:9s} {med:9.3f} {min(times):7.3f} {max(times):7.3f} {med / unit:9.1f}"
            print(f"{row}  {verdict}")


if __name__ == "__main__":
    main()
