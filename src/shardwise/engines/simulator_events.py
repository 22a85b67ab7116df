"""The event-driven form of `engines.simulator.simulate`: a heap of timed events (`engines.events`)
instead of following each stage's list. Kept as the reference the stage-driven simulator is
tested against (tests/test_simulator.py: the same operations at the same times on random
schedules and durations); slower by about 3x.
"""

from __future__ import annotations

from shardwise.engines.events import EventLoop
from shardwise.engines.schedules import B, F, StageOps, W
from shardwise.engines.simulator import SEND_B, SEND_F, SimulationResult, StageTimes, chunk_durations, finish_step


def simulate_events(
    schedule: StageOps, times: StageTimes, v: int = 1, split_backward: bool = False, name: str = ""
) -> SimulationResult:
    """Run the schedule (see the module docstring); durations per chunk are stage times / v."""
    p, m, (fwd, bwd, wgt, send_f, send_b) = chunk_durations(schedule, times, v)
    n_virtual = p * v
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
    return finish_step(p, m, v, name, rec, times, busy_s, peak, last_grad_start, last_grad_end)
