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
    trace = chrome_trace_header(sim)
    events = trace["traceEvents"]
    for stage, kind, mb, chunk, start, end in sim.records:
        name = KIND_NAMES[kind]
        label = _label(name, mb, chunk, sim.v)
        tid = SEND_THREAD_OFFSET + stage if name.startswith("send") else stage
        events.append(
            {
                "ph": "X",
                "name": label,
                "cat": CATEGORIES[name],
                "pid": 0,
                "tid": tid,
                "ts": round(start * 1e6, 3),  # microseconds to the nanosecond
                "dur": round((end - start) * 1e6, 3),
                "args": {"micro_batch": mb, "chunk": chunk},
            }
        )
    return trace


def _label(kind: str, micro_batch: int, chunk: int, v: int) -> str:
    """An operation's name on its track: "F mb3" (", c1" with model chunks)."""
    return kind if micro_batch < 0 else f"{kind} mb{micro_batch}" + (f" c{chunk}" if v > 1 else "")


def chrome_trace_header(sim: SimulationResult) -> dict[str, Any]:
    """The trace without its operations: the tracks' names and order, and the run's settings."""
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
    """Write atomically (temp file renamed into place). The same JSON as `chrome_trace` (what
    `json.loads` gives back is equal to it), written as text line by line: a million operations
    in about a second instead of building a million dictionaries first."""
    from shardwise.atomic import atomic_path

    p = Path(path)
    trace = chrome_trace_header(sim)
    events = trace.pop("traceEvents")
    with atomic_path(p) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        head = json.dumps(trace)
        fh.write(head[:-1] + ', "traceEvents": [\n')
        fh.write(",\n".join(json.dumps(e) for e in events))
        fh.writelines(_operation_lines(sim, bool(events)))
        fh.write("\n]}\n")
    return p


def _operation_lines(sim: SimulationResult, after_first: bool) -> Any:
    """The 'X' events of `chrome_trace`, one JSON object per line (times to the nanosecond, as
    there)."""
    labels = {}
    out = []
    add = out.append
    for stage, kind, mb, chunk, start, end in sim.records:
        key = (kind, mb, chunk)
        label = labels.get(key)
        if label is None:
            name = KIND_NAMES[kind]
            text, cat = json.dumps(_label(name, mb, chunk, sim.v)), json.dumps(CATEGORIES[name])
            head = f'{{"ph": "X", "name": {text}, "cat": {cat}, "pid": 0, "tid": '
            tail = f', "args": {{"micro_batch": {mb}, "chunk": {chunk}}}}}'
            label = labels[key] = (head, tail, SEND_THREAD_OFFSET if name.startswith("send") else 0)
        add(f'{label[0]}{label[2] + stage}, "ts": {start * 1e6:.3f}, "dur": {(end - start) * 1e6:.3f}{label[1]}')
    return [(",\n" if after_first else "") + ",\n".join(out)] if out else []
