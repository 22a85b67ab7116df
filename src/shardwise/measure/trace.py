"""The measured step as a Chrome trace (the format of `shardwise timeline --trace`: open both in
Perfetto or chrome://tracing to put measured and predicted side by side): one track per rank,
its forward and backward passes per micro-batch and, nested in them or between them, every timed
collective and receive. Times are from each rank's own start of the last timed step (after a
barrier in the pipeline), in microseconds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _category(name: str) -> str:
    kinds = (("forward", "forward"), ("backward", "backward"), ("weight-gradient", "weight-gradient"),
             ("tp_", "tensor-parallel"), ("pp_", "p2p"))  # fmt: skip
    for prefix, cat in kinds:
        if name.startswith(prefix):
            return cat
    return "data-parallel" if name.startswith("dp_") else "compute"


def chrome_trace(kind: str, ranks: list[dict[str, Any]]) -> dict[str, Any]:
    events: list[dict[str, Any]] = []
    for rank, result in enumerate(ranks):
        events.append({"ph": "M", "name": "thread_name", "pid": 0, "tid": rank, "args": {"name": f"rank {rank}"}})
        for name, start, end in result.get("trace", []):
            events.append(
                {
                    "ph": "X",
                    "name": name,
                    "cat": _category(name),
                    "pid": 0,
                    "tid": rank,
                    "ts": start * 1e6,
                    "dur": (end - start) * 1e6,
                }
            )
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"measured": kind, "ranks": len(ranks), "step_s": max(r["step_s"] for r in ranks)},
    }


def write_chrome_trace(kind: str, ranks: list[dict[str, Any]], path: str | Path) -> Path:
    from shardwise.atomic import atomic_path

    p = Path(path)
    with atomic_path(p) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        json.dump(chrome_trace(kind, ranks), fh)
    return p
