"""Chrome trace export (the JSON `chrome://tracing` and Perfetto open) of a simulated step."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from shardwise.engines.simulator import KIND_NAMES, SimulationResult

CATEGORIES = {
    "F": "forward",
    "B": "backward",
    "W": "weight-gradient",
    "send-F": "p2p",
    "send-B": "p2p",
    "dp": "data-parallel",
    "optimizer": "optimizer",
}
SEND_THREAD_OFFSET = 100_000  # sends of stage i go on their own track under it


def chrome_trace(sim: SimulationResult) -> dict[str, Any]:
    """Trace Event Format: one 'X' (complete) event per operation, microseconds, one process, a
    track per stage for compute and one per stage for its sends."""
    events: list[dict[str, Any]] = []
    for i in range(sim.p):
        events.append({"ph": "M", "name": "thread_name", "pid": 0, "tid": i, "args": {"name": f"stage {i}"}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": 0, "tid": i, "args": {"sort_index": 2 * i}})
        events.append(
            {
                "ph": "M",
                "name": "thread_name",
                "pid": 0,
                "tid": SEND_THREAD_OFFSET + i,
                "args": {"name": f"stage {i} sends"},
            }
        )
        events.append(
            {
                "ph": "M",
                "name": "thread_sort_index",
                "pid": 0,
                "tid": SEND_THREAD_OFFSET + i,
                "args": {"sort_index": 2 * i + 1},
            }
        )
    for stage, kind, mb, chunk, start, end in sim.records:
        name = KIND_NAMES[kind]
        label = name if mb < 0 else f"{name} mb{mb}" + (f" c{chunk}" if sim.v > 1 else "")
        tid = SEND_THREAD_OFFSET + stage if name.startswith("send") else stage
        events.append(
            {
                "ph": "X",
                "name": label,
                "cat": CATEGORIES[name],
                "pid": 0,
                "tid": tid,
                "ts": start * 1e6,
                "dur": (end - start) * 1e6,
                "args": {"micro_batch": mb, "chunk": chunk},
            }
        )
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "schedule": sim.schedule,
            "stages": sim.p,
            "micro_batches": sim.m,
            "virtual_stages": sim.v,
            "makespan_s": sim.makespan_s,
        },
    }


def write_chrome_trace(sim: SimulationResult, path: str | Path) -> Path:
    """Write atomically (temp file renamed into place)."""
    from shardwise.atomic import atomic_path

    p = Path(path)
    with atomic_path(p) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        json.dump(chrome_trace(sim), fh)
    return p
