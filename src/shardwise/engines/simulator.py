"""Discrete-event simulation of one pipeline-parallel training step, operation by operation.

Each stage runs its schedule's list of operations (`engines.schedules`) in order; an operation
starts when the stage is free and its input has arrived: a forward needs the activations of the
previous virtual stage, a backward the gradient of the next one. When a forward (or backward)
ends, its output is sent on the link to the next (previous) stage: a transfer takes the link's
time (latency plus bytes over bandwidth), links carry one transfer at a time in the order they
were produced, and the sender does not wait (compute and transfers overlap). After its last
backward operation a stage reduces its gradients over data parallelism (started with the last
backward operation when the reduction is bucketed and overlapped, after it otherwise), the first
and last stage then all-reduce their tied embeddings' gradient between them (one collective: it
starts on both when the later of them has reduced), the gradient norm is all-reduced over every
stage (clipping: each stage's optimizer starts when the slowest stage is ready), and each stage
runs the optimizer. Because every stage follows a fixed order and every start time is a maximum
of earlier end times plus durations, the makespan never decreases when a duration grows.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from shardwise.engines.schedules import SPLIT_BACKWARD, B, F, StageOps, W

# after the pipeline: "dp", the gradient reduction (all-reduce or reduce-scatter) before the
# optimizer; "embedding-sync", the tied embeddings' gradient all-reduce of the first and last
# stage after it (Megatron-LM's `finalize_model_grads`: `finish_grad_sync`, then
# `_allreduce_embedding_grads`), with dp = 1 the only collective there; "dp-gather", the parameter
# all-gather after the optimizer (the distributed optimizer, ZeRO-1/2, where exposed)
KIND_NAMES = ("F", "B", "W", "send-F", "send-B", "dp", "optimizer", "embedding-sync", "dp-gather")
SEND_F, SEND_B, DP, OPT, SYNC, GATHER = 3, 4, 5, 6, 7, 8
AFTER_PIPELINE = frozenset((DP, OPT, SYNC, GATHER))  # each stage's operations after its last backward


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
    embedding_sync_s: np.ndarray | None = None  # of dp_s, its end: the tied embeddings' all-reduce
    # the gradient norm all-reduced over every stage before the optimizer (clipping, `finish_step`):
    # Megatron-Core/NeMo/Megatron-Bridge (clip_grad 1.0 by default), torchtitan (clip_grad_norm_ with
    # its pp mesh), nanotron (clip_grad over its mp_pg), DeepSpeed (the global norm over its mpu)
    norm_barrier: bool = True


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

    def after_pipeline(self) -> set[tuple[int, int]]:
        """(stage, kind) of the operations after each stage's last backward (`finish_step`): the
        records' last ones, read from the end."""
        found = set()
        for rec in reversed(self.records):
            if rec[1] not in AFTER_PIPELINE:
                break
            found.add((rec[0], rec[1]))
        return found

    @property
    def stage_idle_fraction(self) -> np.ndarray:
        """Idle share of each stage between the step's start and the end of the pipeline (its
        last pass): (p - 1) / (m + p - 1) for equal stages under 1F1B. Not the estimate's
        `bubble_fraction` (the busiest stage's idle time over the whole step)."""
        return 1.0 - self.busy_s / self.pipeline_end_s

    @property
    def mean_stage_idle_fraction(self) -> float:
        return float(np.mean(self.stage_idle_fraction))


OP_DTYPE = np.dtype(
    [("stage", "i4"), ("kind", "i1"), ("micro_batch", "i4"), ("chunk", "i2"), ("start_s", "f8"), ("end_s", "f8")]
)


def chunk_durations(
    schedule: StageOps, times: StageTimes, v: int, m: int | None = None
) -> tuple[int, int, tuple[list[float], list[float], list[float], list[float], list[float]]]:
    """(stages, micro-batches, per-stage seconds as plain floats: forward, backward and weight
    gradient of one chunk, sends forward and backward). `m`: the schedule's micro-batches, when
    known (else counted)."""
    if m is None:
        m = 1 + max(op.micro_batch for ops in schedule for op in ops)
    per_chunk = tuple([float(x) / v for x in t] for t in (times.forward_s, times.backward_s, times.weight_s))
    sends = tuple([float(x) for x in t] for t in (times.send_forward_s, times.send_backward_s))
    return len(schedule), m, (*per_chunk, *sends)  # type: ignore[return-value]


def simulate(
    schedule: StageOps,
    times: StageTimes,
    v: int = 1,
    split_backward: bool = False,
    name: str = "",
    records: bool = True,
) -> SimulationResult:
    """Run the schedule (see the module docstring); durations per chunk are stage times / v.

    Stage-driven: each stage follows its list as far as its inputs are known (an operation starts
    at max(the stage is free, its input arrives)); a stage that waits for an input is resumed
    when the stage producing it gets there. Every operation is visited once, with no event heap:
    the same times as the event-driven `engines.simulator_events.simulate_events`. Without
    `records` the operations are not listed (`records` is empty): the step's times alone, the
    same numbers to the bit, in about half the time (`_times_only`)."""
    if not records:
        return _times_only(schedule, times, v, split_backward, name)
    p, m, (fwd, bwd, wgt, send_f, send_b) = chunk_durations(schedule, times, v)
    n_virtual = p * v
    unknown = -1.0
    arrive_f = [[unknown] * m for _ in range(n_virtual)]  # when the activation of (virtual stage, mb) arrives
    arrive_b = [[unknown] * m for _ in range(n_virtual)]
    next_op = [0] * p
    free = [0.0] * p  # when each stage is free
    busy_s = [0.0] * p
    link_f = [0.0] * p  # when each link is free
    link_b = [0.0] * p
    in_flight = [0] * p
    peak = [0] * p
    last_grad_start = [0.0] * p
    last_grad_end = [0.0] * p
    rec: list[tuple[int, int, int, int, float, float]] = []
    add = rec.append
    last = n_virtual - 1
    todo = list(range(p - 1, -1, -1))  # stages that may be able to go on
    push = todo.append
    while todo:
        i = todo.pop()
        ops = schedule[i]
        n_ops = len(ops)
        k = next_op[i]
        if k == n_ops:
            continue
        # this stage's state in locals while it runs (written back when it waits or ends)
        t, busy, held, most = free[i], busy_s[i], in_flight[i], peak[i]
        lf, lb, sf, sb = link_f[i], link_b[i], send_f[i], send_b[i]
        g_start, g_end = last_grad_start[i], last_grad_end[i]
        f_dur, b_dur, w_dur = fwd[i], bwd[i], wgt[i]
        nxt, prv = (i + 1) % p, (i - 1) % p
        while k < n_ops:
            kind, mb, c = ops[k]
            s = c * p + i
            if kind == F:
                ready = arrive_f[s][mb] if s else 0.0
                if ready < 0.0:
                    break
                start = t if t > ready else ready
                t = start + f_dur
                busy += f_dur
                held += 1
                if held > most:
                    most = held
                add((i, F, mb, c, start, t))
                if s < last:
                    begin = t if t > lf else lf
                    lf = begin + sf
                    add((i, SEND_F, mb, c, begin, lf))
                    arrive_f[s + 1][mb] = lf
                    push(nxt)
            elif kind == B:
                ready = arrive_b[s][mb] if s < last else 0.0
                if ready < 0.0:
                    break
                start = t if t > ready else ready
                t = start + b_dur
                busy += b_dur
                if not split_backward:
                    held -= 1
                g_start, g_end = start, t
                add((i, B, mb, c, start, t))
                if s:
                    begin = t if t > lb else lb
                    lb = begin + sb
                    add((i, SEND_B, mb, c, begin, lb))
                    arrive_b[s - 1][mb] = lb
                    push(prv)
            else:
                start = t
                t = start + w_dur
                busy += w_dur
                if split_backward:
                    held -= 1
                g_start, g_end = start, t
                add((i, W, mb, c, start, t))
            k += 1
        next_op[i], free[i], busy_s[i], in_flight[i], peak[i] = k, t, busy, held, most
        link_f[i], link_b[i], last_grad_start[i], last_grad_end[i] = lf, lb, g_start, g_end
    stuck = [i for i in range(p) if next_op[i] != len(schedule[i])]
    if stuck:
        raise RuntimeError(f"schedule {name!r} deadlocked at stage {stuck[0]} (operation {next_op[stuck[0]]})")
    return finish_step(p, m, v, name, rec, times, busy_s, peak, last_grad_start, last_grad_end)


def simulate_times(name: str, p: int, m: int, v: int, times: StageTimes) -> SimulationResult:
    """`simulate(SCHEDULES[name](p, m, v), times, v, ..., records=False)`: the step's times without
    the list of operations (what the planner reads), over the schedule compiled to integers
    (`engines.simulator_times`; kept per shape)."""
    from shardwise.engines.simulator_times import compiled

    return _compiled_times(compiled(name, p, m, v), times, name in SPLIT_BACKWARD, name)


def _times_only(
    schedule: StageOps, times: StageTimes, v: int, split_backward: bool, name: str, m: int | None = None
) -> SimulationResult:
    """`simulate` without the list of operations: `schedule` compiled (`simulator_times.compile_ops`),
    or followed as `simulate` does, without records, where a stage ends with a forward."""
    from shardwise.engines.simulator_times import compile_ops

    if m is None:
        m = 1 + max(op.micro_batch for ops in schedule for op in ops)
    sched = compile_ops(schedule, m, v)
    if sched.ends_with_gradients:
        return _compiled_times(sched, times, split_backward, name)
    return _followed_times(schedule, times, v, split_backward, name, m)


def _compiled_times(sched: Any, times: StageTimes, split_backward: bool, name: str) -> SimulationResult:
    from shardwise.engines.simulator_times import pipeline_times

    p, m, v = sched.p, sched.m, sched.v
    per_chunk = tuple([float(x) / v for x in t] for t in (times.forward_s, times.backward_s, times.weight_s))
    sends = tuple([float(x) for x in t] for t in (times.send_forward_s, times.send_backward_s))
    busy_s, peak, g_start, g_end = pipeline_times(sched, (*per_chunk, *sends), split_backward, name)  # type: ignore[arg-type]
    result = finish_step(p, m, v, name, [], times, busy_s, peak, g_start, g_end)
    return dataclasses.replace(result, records=[])


def _followed_times(
    schedule: StageOps, times: StageTimes, v: int, split_backward: bool, name: str, m: int
) -> SimulationResult:
    """`simulate` without records for any schedule (a stage may end with a forward)."""
    sim = simulate(schedule, times, v, split_backward, name)
    return dataclasses.replace(sim, records=[])


def finish_step(
    p: int,
    m: int,
    v: int,
    name: str,
    rec: list[tuple[int, int, int, int, float, float]],
    times: StageTimes,
    busy_s: list[float],
    peak: list[int],
    last_grad_start: list[float],
    last_grad_end: list[float],
) -> SimulationResult:
    """After each stage's last backward, the step's collectives as Megatron-LM runs them
    (`finalize_model_grads`, then the optimizer): each stage's data-parallel reduction; the tied
    embeddings' all-reduce, one collective of the first and last stage, which starts on both at
    the later of their reductions' ends; with `times.norm_barrier` the gradient norm's all-reduce
    over every stage (`clip_grad`), so every stage's optimizer starts when the slowest stage is
    ready; then each stage's optimizer and parameter all-gather (module docstring)."""
    pipeline_end = max(last_grad_end)
    reduced, sync_s, dp_start = [], [], []  # per stage: its reduction's end, its sync's seconds, the reduction's start
    for i in range(p):
        start = last_grad_start[i] if times.overlap_dp else last_grad_end[i]
        dp_s = float(times.dp_s[i])
        tail = float(times.dp_tail_s[i]) if times.dp_tail_s is not None else 0.0
        dp_end = max(start + dp_s, last_grad_end[i] + tail)
        sync = float(times.embedding_sync_s[i]) if times.embedding_sync_s is not None and dp_s > 0 else 0.0
        sync = min(sync, dp_s)
        reduced.append(dp_end - sync)
        sync_s.append(sync)
        dp_start.append(dp_end - dp_s)
    # the embedding group's all-reduce: on both end stages from the later one's reduction's end
    group = [i for i in range(p) if sync_s[i] > 0]
    sync_start = max((reduced[i] for i in group), default=0.0)
    ready = [sync_start + sync_s[i] if sync_s[i] > 0 else reduced[i] for i in range(p)]
    # the gradient norm's all-reduce over the model-parallel group: every stage waits for the slowest
    barrier = max(ready) if times.norm_barrier else None
    makespan = 0.0
    for i in range(p):
        if reduced[i] > dp_start[i]:
            rec.append((i, DP, -1, -1, dp_start[i], reduced[i]))
        if sync_s[i] > 0:
            rec.append((i, SYNC, -1, -1, sync_start, ready[i]))
        begin = ready[i] if barrier is None else barrier
        end = begin + float(times.optimizer_s[i])
        rec.append((i, OPT, -1, -1, begin, end))
        gather = float(times.gather_s[i]) if times.gather_s is not None else 0.0
        if gather > 0:
            rec.append((i, GATHER, -1, -1, end, end + gather))
            end += gather
        makespan = max(makespan, end)
    return SimulationResult(
        p, m, v, name, rec, makespan, pipeline_end, np.array(busy_s), np.array(peak, dtype=float) / v
    )
