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
    "embedding-sync": "embedding sync",
    "dp-gather": "data-parallel",
}
SEND_THREAD_OFFSET = 100_000  # sends of stage i go on their own track under it
DP_THREAD_OFFSET = 200_000  # its data-parallel collectives on a third
SYNC_THREAD_OFFSET = 300_000  # and the tied embeddings' gradient sync (first and last stage) on a fourth
# A track's events must nest or follow one another: the JSON format's rule, which Perfetto
# enforces (https://perfetto.dev/docs/faq, overlapping events: it cuts or drops the later one).
# The gradient reduction overlaps the last backward passes, so it has its own track; a stage gets
# the third and fourth track only where something runs on them (dp = 1: no data-parallel track).

# The collectives after the pipeline by name: the gradient reduction before the optimizer, the tied
# input and output embeddings' gradients all-reduced, the parameters gathered after the optimizer
SHOWN = {"dp": "grad reduce", "embedding-sync": "embedding grad sync", "dp-gather": "param all-gather"}


def chrome_trace(sim: SimulationResult) -> dict[str, Any]:
    """Trace Event Format: one 'X' (complete) event per operation, microseconds, one process, a
    track per stage for compute, one for its sends, one for its data-parallel collectives and one
    for the tied embeddings' sync (these two where the stage runs any)."""
    trace = chrome_trace_header(sim)
    trace["traceEvents"].extend(json.loads(line) for line in _event_lines(sim))
    return trace


def _label(kind: str, micro_batch: int, chunk: int, v: int) -> str:
    """An operation's name on its track: "F mb3" (", c1" with model chunks)."""
    return kind if micro_batch < 0 else f"{kind} mb{micro_batch}" + (f" c{chunk}" if v > 1 else "")


def _track(tid: int, name: str, sort_index: int) -> list[dict[str, Any]]:
    return [
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": tid, "args": {"name": name}},
        {"ph": "M", "name": "thread_sort_index", "pid": 0, "tid": tid, "args": {"sort_index": sort_index}},
    ]


def chrome_trace_header(sim: SimulationResult) -> dict[str, Any]:
    """The trace without its operations: the tracks' names and order, and the run's settings."""
    events: list[dict[str, Any]] = []
    after = sim.after_pipeline()
    dp, sync, gather = (KIND_NAMES.index(k) for k in SHOWN)
    order = 0
    for i in range(sim.p):
        tracks = [(i, f"stage {i}"), (SEND_THREAD_OFFSET + i, f"stage {i} sends")]
        if (i, dp) in after or (i, gather) in after:
            tracks.append((DP_THREAD_OFFSET + i, f"stage {i} data-parallel"))
        if (i, sync) in after:
            tracks.append((SYNC_THREAD_OFFSET + i, f"stage {i} embedding sync"))
        for tid, name in tracks:
            events += _track(tid, name, order)
            order += 1
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


def _event_lines(sim: SimulationResult) -> list[str]:
    """The 'X' events, one JSON object per line. Times in microseconds to the nanosecond; a
    duration is the difference of the rounded end and start, so that an operation that starts
    where the one before it ends does not overlap it by a rounding (which Perfetto would nest)."""
    import numpy as np

    labels = {}
    out = []
    add = out.append
    dp, sync, gather = (KIND_NAMES.index(k) for k in SHOWN)
    offsets = {dp: DP_THREAD_OFFSET, gather: DP_THREAD_OFFSET, sync: SYNC_THREAD_OFFSET}
    ops = sim.ops
    start_ns = np.rint(ops["start_s"] * 1e9)
    starts_us = (start_ns / 1e3).tolist()
    durations_us = ((np.rint(ops["end_s"] * 1e9) - start_ns) / 1e3).tolist()
    for (stage, kind, mb, chunk, _, _), ts, dur in zip(sim.records, starts_us, durations_us, strict=True):
        key = (kind, mb, chunk)
        label = labels.get(key)
        if label is None:
            name = KIND_NAMES[kind]
            shown = SHOWN.get(name) or _label(name, mb, chunk, sim.v)
            text, cat = json.dumps(shown), json.dumps(CATEGORIES[name])
            head = f'{{"ph": "X", "name": {text}, "cat": {cat}, "pid": 0, "tid": '
            tail = f', "args": {{"micro_batch": {mb}, "chunk": {chunk}}}}}'
            offset = SEND_THREAD_OFFSET if name.startswith("send") else offsets.get(kind, 0)
            label = labels[key] = (head, tail, offset)
        add(f'{label[0]}{label[2] + stage}, "ts": {ts:.3f}, "dur": {dur:.3f}{label[1]}')
    return out


def _operation_lines(sim: SimulationResult, after_first: bool) -> Any:
    """The 'X' events of `chrome_trace` as the text `write_chrome_trace` appends."""
    out = _event_lines(sim)
    return [(",\n" if after_first else "") + ",\n".join(out)] if out else []
