"""List the hybrid Mamba-2 public rows (Nemotron-H, Nemotron 3 Nano) with their errors, from
`shardwise validate public --json --rows all` output; given two files (before, after), both errors.

    shardwise validate public --json --rows all > before.json
    ... change the model ...
    shardwise validate public --json --rows all > after.json
    python tools/hybrid_rows.py before.json after.json
"""

from __future__ import annotations

import json
import sys
from statistics import mean

HYBRID_MODELS = ("nemotron-h-", "nemotron-3-nano-")


def hybrid_rows(path: str) -> dict[str, dict]:
    with open(path, encoding="utf-8") as f:
        rows = json.load(f)["rows"]
    return {r["run_id"]: r for r in rows if r["label"].startswith(HYBRID_MODELS) and not r["skip"]}


def error(row: dict) -> float:
    return row["predicted_step_s"] / row["measured_step_s"] - 1.0


def main(paths: list[str]) -> int:
    if not 1 <= len(paths) <= 2:
        print("usage: python tools/hybrid_rows.py BEFORE.json [AFTER.json]", file=sys.stderr)
        return 2
    tables = [hybrid_rows(p) for p in paths]
    first, last = tables[0], tables[-1]
    for run_id in sorted(first):
        r = first[run_id]
        errors = " -> ".join(f"{error(t[run_id]):+.3f}" for t in tables)
        print(f"{run_id} {r['split']:7s} {r['label'][:72]:72s} measured {r['measured_step_s']:8.3f} s  {errors}")
    for name, t in (("before", first), ("after", last))[: len(tables)]:
        e = [error(r) for r in t.values()]
        print(f"{name}: {len(e)} rows, MAPE {mean(abs(x) for x in e):.3f}, bias {mean(e):+.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
