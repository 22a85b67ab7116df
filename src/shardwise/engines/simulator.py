"""Discrete-event simulation of one pipeline-parallel training step, operation by operation.

Each stage runs its schedule's list of operations (`engines.schedules`) in order; an operation
starts when the stage is free and its input has arrived: a forward needs the activations of the
previous virtual stage, a backward the gradient of the next one. When a forward (or backward)
ends, its output is sent on the link to the next (previous) stage: a transfer takes the link's
time (latency plus bytes over bandwidth), links carry one transfer at a time in the order they
were produced, and the sender does not wait (compute and transfers overlap). After its last
backward operation a stage reduces its gradients over data parallelism (started with the last
backward operation when the reduction is bucketed and overlapped, after it otherwise) and then
runs the optimizer. Because every stage follows a fixed order and every start time is a maximum
of earlier end times plus durations, the makespan never decreases when a duration grows.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from shardwise.engines.events import EventLoop
from shardwise.engines.schedules import B, F, StageOps, W

KIND_NAMES = ("F", "B", "W", "send-F", "send-B", "dp", "optimizer")
SEND_F, SEND_B, DP, OPT = 3, 4, 5, 6


@dataclass(frozen=True)
class StageTimes:
    """Seconds per operation of one micro-batch on one model chunk, per stage (arrays of p).

    `backward_s` is the whole backward pass, or only its input-gradient part when the schedule
    splits it (then `weight_s` is the weight-gradient part). `send_forward_s[i]` is a transfer
    from stage i to stage i + 1 (mod p), `send_backward_s[i]` one from stage i to stage i - 1."""

    forward_s: np.ndarray
    backward_s: np.ndarray
    weight_s: np.ndarray
    send_forward_s: np.ndarray
    send_backward_s: np.ndarray
    dp_s: np.ndarray  # gradient reduction after the last backward
    optimizer_s: np.ndarray
    overlap_dp: bool = True
    dp_tail_s: np.ndarray | None = None  # of dp_s, what must still run after the last backward ends
    gather_s: np.ndarray | None = None  # exposed parameter all-gather after the optimizer
    blocking_s: np.ndarray | None = None  # of forward_s + backward_s, the blocking sends (for the breakdown)


@dataclass(frozen=True, eq=False)
class SimulationResult:
    """Every operation with its start and end, and the figures derived from them.

    `ops` columns: stage, kind (index into KIND_NAMES), micro-batch, chunk, start_s, end_s
    (sends are listed under their sending stage)."""

    p: int
    m: int
    v: int
    schedule: str
    records: list[tuple[int, int, int, int, float, float]]
    makespan_s: float
    pipeline_end_s: float  # last forward/backward/weight operation
    busy_s: np.ndarray  # compute per stage
    peak_in_flight: np.ndarray  # micro-batches (chunk units / v) holding activations, per stage

    @cached_property
    def ops(self) -> np.ndarray:
        """The records as a structured array (built on first use)."""
        return np.array(self.records, dtype=OP_DTYPE)

    @property
    def bubble_fraction_per_stage(self) -> np.ndarray:
        """Idle share of each stage between the step's start and the end of the pipeline."""
        return 1.0 - self.busy_s / self.pipeline_end_s

    @property
    def bubble_fraction(self) -> float:
        return float(np.mean(self.bubble_fraction_per_stage))


OP_DTYPE = np.dtype(
    [("stage", "i4"), ("kind", "i1"), ("micro_batch", "i4"), ("chunk", "i2"), ("start_s", "f8"), ("end_s", "f8")]
)


def simulate(
    schedule: StageOps, times: StageTimes, v: int = 1, split_backward: bool = False, name: str = ""
) -> SimulationResult:
    """Run the schedule (see the module docstring); durations per chunk are stage times / v."""
    p = len(schedule)
    n_virtual = p * v
    m = 1 + max(op.micro_batch for ops in schedule for op in ops)
    fwd = [float(x) / v for x in times.forward_s]
    bwd = [float(x) / v for x in times.backward_s]
    wgt = [float(x) / v for x in times.weight_s]
    send_f = [float(x) for x in times.send_forward_s]
    send_b = [float(x) for x in times.send_backward_s]
    loop = EventLoop()
    got_f = [bytearray(m) for _ in range(n_virtual)]  # activation of (virtual stage, mb) arrived
    got_b = [bytearray(m) for _ in range(n_virtual)]
    next_op = [0] * p
    busy = [False] * p
    busy_s = [0.0] * p
    link_f = [0.0] * p  # time each link is free
    link_b = [0.0] * p
    in_flight = [0] * p
    peak = [0] * p
    last_grad_start = [0.0] * p
    last_grad_end = [0.0] * p
    rec: list[tuple[int, int, int, int, float, float]] = []
    add = rec.append
    at = loop.at
    frees_at = W if split_backward else B
    last = n_virtual - 1

    def try_start(i: int) -> None:
        if busy[i] or next_op[i] == len(schedule[i]):
            return
        kind, mb, c = schedule[i][next_op[i]]
        s = c * p + i
        if kind == F:
            if s and not got_f[s][mb]:
                return
            dur = fwd[i]
            in_flight[i] += 1
            if in_flight[i] > peak[i]:
                peak[i] = in_flight[i]
        elif kind == B:
            if s < last and not got_b[s][mb]:
                return
            dur = bwd[i]
        else:
            dur = wgt[i]
        now = loop.now
        next_op[i] += 1
        busy[i] = True
        busy_s[i] += dur
        if kind != F:
            last_grad_start[i] = now
        at(now + dur, finish, i, kind, mb, s, now)

    def finish(i: int, kind: int, mb: int, s: int, start: float) -> None:
        now = loop.now
        add((i, kind, mb, s // p, start, now))
        busy[i] = False
        if kind == frees_at:
            in_flight[i] -= 1
        if kind != F:
            last_grad_end[i] = now
        if kind == F and s < last:
            free = link_f[i]
            begin = now if now > free else free
            link_f[i] = end = begin + send_f[i]
            add((i, SEND_F, mb, s // p, begin, end))
            at(end, arrive, got_f, s + 1, mb, (s + 1) % p)
        elif kind == B and s:
            free = link_b[i]
            begin = now if now > free else free
            link_b[i] = end = begin + send_b[i]
            add((i, SEND_B, mb, s // p, begin, end))
            at(end, arrive, got_b, s - 1, mb, (s - 1) % p)
        try_start(i)

    def arrive(table: list[bytearray], s: int, mb: int, j: int) -> None:
        table[s][mb] = 1
        try_start(j)

    for i in range(p):
        loop.at(0.0, try_start, i)
    loop.run()
    stuck = [i for i in range(p) if next_op[i] != len(schedule[i])]
    if stuck:
        raise RuntimeError(f"schedule {name!r} deadlocked at stage {stuck[0]} (operation {next_op[stuck[0]]})")
    pipeline_end = max(last_grad_end)
    makespan = 0.0
    for i in range(p):
        start = last_grad_start[i] if times.overlap_dp else last_grad_end[i]
        dp_s = float(times.dp_s[i])
        tail = float(times.dp_tail_s[i]) if times.dp_tail_s is not None else 0.0
        dp_end = max(start + dp_s, last_grad_end[i] + tail)
        if dp_s > 0:
            rec.append((i, DP, -1, -1, dp_end - dp_s, dp_end))
        end = dp_end + float(times.optimizer_s[i])
        rec.append((i, OPT, -1, -1, dp_end, end))
        gather = float(times.gather_s[i]) if times.gather_s is not None else 0.0
        if gather > 0:
            rec.append((i, DP, -1, -1, end, end + gather))
            end += gather
        makespan = max(makespan, end)
    return SimulationResult(
        p, m, v, name, rec, makespan, pipeline_end, np.array(busy_s), np.array(peak, dtype=float) / v
    )
