"""The step's times without the list of operations (what the planner reads): the simulation of
`engines.simulator` over a schedule compiled to integers, the same arithmetic in the same order.

A compiled schedule holds, per stage, one integer per operation: the place of its input in one
flat list of arrivals, `x = (c p + i) m + mb` for a forward of micro-batch mb on chunk c of stage i
(virtual stage c p + i), `N + x` for a backward (N = p v m) and -1 for a weight-gradient pass.
The inputs of the first virtual stage's forwards and the last one's backwards are there from the
start (arrival 0). A forward's output arrives at `x + m`, a backward's at `N + x - m`. The loop then
does per operation what `simulate` does (a start is max(the stage is free, the input arrives),
the link to the neighbour carries one transfer at a time), with no tuple to unpack and no branch
for the first and last stages; the busy time (a running sum in the order the operations run) and
the activations in flight (a running count) are sums over the same order, taken over the compiled
operations at once with numpy (`np.cumsum` adds in order, as the loop did).

The built-in schedules compile by slices (`_compile_1f1b`, `_compile_gpipe`, `_compile_zb_h1`);
any other list of operations through `compile_ops` (one pass over it). `tests/test_simulator.py`
checks both against `simulate` byte for byte, and the builders against `compile_ops` on the
schedules' own lists.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from shardwise.engines.schedules import SCHEDULES, B, F, StageOps, W

KEPT_SCHEDULES = 16  # compiled schedules kept, most recent first (a planner's move re-times ~16 shapes)
KEPT_MAX_OPERATIONS = 200_000  # a larger schedule (about 7 MB as Python lists) is compiled each time


@dataclass(frozen=True, eq=False)
class Compiled:
    """A schedule as integers (module docstring): `codes[i]` stage i's operations, `kinds` the
    kind of each (p x operations, F/B/W; None where the stages' lists differ in length)."""

    p: int
    m: int
    v: int
    codes: list[list[int]]
    kinds: np.ndarray | None
    ends_with_gradients: bool = True  # every stage's last operation a backward or weight pass (or none)


_KEPT: OrderedDict[tuple[str, int, int, int], Compiled] = OrderedDict()


def compiled(name: str, p: int, m: int, v: int) -> Compiled:
    """`SCHEDULES[name](p, m, v)` compiled (kept: the planner re-times one shape in several plans)."""
    key = (name, p, m, v)
    found = _KEPT.get(key)
    if found is not None:
        with contextlib.suppress(KeyError):  # another thread may have dropped it meanwhile
            _KEPT.move_to_end(key)
        return found
    if name in ("1f1b", "interleaved"):
        out = _compile_1f1b(p, m, v if name == "interleaved" else 1, interleave=name == "interleaved")
    elif name == "gpipe":
        out = _compile_gpipe(p, m)
    elif name == "zb-h1":
        out = _compile_zb_h1(p, m)
    else:
        out = compile_ops(SCHEDULES[name](p, m, v), m, v)
    if sum(len(ops) for ops in out.codes) <= KEPT_MAX_OPERATIONS:
        _KEPT[key] = out
        while len(_KEPT) > KEPT_SCHEDULES:
            with contextlib.suppress(KeyError):  # (emptied by another thread meanwhile)
                _KEPT.popitem(last=False)
    return out


def compile_ops(schedule: StageOps, m: int, v: int) -> Compiled:
    """Any list of operations per stage, compiled (module docstring)."""
    p = len(schedule)
    n = p * v * m
    codes = [
        [(c * p + i) * m + mb if kind == F else n + (c * p + i) * m + mb if kind == B else -1 for kind, mb, c in ops]
        for i, ops in enumerate(schedule)
    ]
    lengths = {len(ops) for ops in schedule}
    kinds = np.array([[op[0] for op in ops] for ops in schedule], dtype=np.int8) if len(lengths) == 1 else None
    return Compiled(p, m, v, codes, kinds, all(not ops or ops[-1][0] != F for ops in schedule))


def _one_f_one_b_rows(fwd: np.ndarray, bwd: np.ndarray, warmups: list[int]) -> np.ndarray:
    """Per stage, `warmups[i]` forwards, then one forward and one backward in turn, then the last
    backwards (`schedules._one_f_one_b` over arrays; `fwd` and `bwd` are p x T)."""
    p, total = fwd.shape
    out = np.empty((p, 2 * total), dtype=fwd.dtype)
    for i, w in enumerate(warmups):
        steady = total - w
        row = out[i]
        row[:w] = fwd[i, :w]
        row[w : w + 2 * steady : 2] = fwd[i, w:]
        row[w + 1 : w + 2 * steady : 2] = bwd[i, :steady]
        row[w + 2 * steady :] = bwd[i, steady:]
    return out


def _compile_1f1b(p: int, m: int, v: int, interleave: bool) -> Compiled:
    """1F1B (v = 1) and interleaved 1F1B compiled with numpy: the same order as
    `schedules.one_f_one_b` and `schedules.interleaved` (their docstrings)."""
    if interleave and m % p:
        raise ValueError(f"the interleaved schedule needs m={m} to be a multiple of p={p}")
    total, group, n = m * v, p * v, p * v * m
    k = np.arange(total, dtype=np.int64)
    mb = (k // group) * p + k % p
    chunk = (k % group) // p
    stage = np.arange(p, dtype=np.int64)[:, None] * m
    fwd = chunk[None, :] * (p * m) + mb[None, :] + stage
    bwd = n + (v - 1 - chunk)[None, :] * (p * m) + mb[None, :] + stage
    if interleave:
        warmups = [min(total, 2 * (p - i - 1) + (v - 1) * p) for i in range(p)]
    else:
        warmups = [min(p - i - 1, m) for i in range(p)]
    codes = _one_f_one_b_rows(fwd, bwd, warmups)
    kinds = np.where(codes >= n, B, F).astype(np.int8)
    return Compiled(p, m, v, codes.tolist(), kinds)


def _compile_gpipe(p: int, m: int) -> Compiled:
    """GPipe compiled: every forward, then every backward, in micro-batch order."""
    n = p * m
    base = np.arange(p, dtype=np.int64)[:, None] * m + np.arange(m, dtype=np.int64)[None, :]
    codes = np.concatenate([base, n + base], axis=1)
    kinds = np.concatenate([np.full((p, m), F, np.int8), np.full((p, m), B, np.int8)], axis=1)
    return Compiled(p, m, 1, codes.tolist(), kinds)


def _compile_zb_h1(p: int, m: int) -> Compiled:
    """ZB-H1 compiled by slices, in `schedules.zb_h1`'s order: stage i runs w = min(p - i - 1, m)
    forwards, then c = min(i, m - w) (F, B) pairs, then (F, B, W) triples until the forwards are
    done, then (B, W) pairs until the backwards are, then the c deferred W's."""
    n = p * m
    codes = []
    for i in range(p):
        fwd = list(range(i * m, i * m + m))
        bwd = list(range(n + i * m, n + i * m + m))
        w = min(p - i - 1, m)
        c = min(i, m - w)
        triples = m - w - c
        pairs = [-1] * (2 * c)
        pairs[0::2], pairs[1::2] = fwd[w : w + c], bwd[:c]
        full = [-1] * (3 * triples)
        full[0::3], full[1::3] = fwd[w + c :], bwd[c : c + triples]
        drain = [-1] * (2 * w)
        drain[0::2] = bwd[c + triples :]
        codes.append(fwd[:w] + pairs + full + drain + [-1] * c)
    array = np.array(codes, dtype=np.int64)
    kinds = np.where(array >= n, B, np.where(array >= 0, F, W)).astype(np.int8)
    return Compiled(p, m, 1, codes, kinds)


def pipeline_times(
    sched: Compiled,
    durations: tuple[list[float], list[float], list[float], list[float], list[float]],
    split_backward: bool,
    name: str,
) -> tuple[list[float], list[int], list[float], list[float]]:
    """Each stage's busy time, peak in flight (chunk units), and the start and end of its last
    backward or weight-gradient operation: `simulate`'s, from the same arithmetic in the same
    order (module docstring). The end of the last backward or weight pass is the stage's end, so
    `sched.ends_with_gradients` must hold (it does for every built-in schedule)."""
    p, m, v = sched.p, sched.m, sched.v
    fwd, bwd, wgt, send_f, send_b = durations
    schedule = sched.codes
    n = p * v * m
    last_m = (p * v - 1) * m  # a forward from below this place sends its output on
    n_m = n + m  # a backward from this place on sends its gradient back
    arrive = [-1.0] * (2 * n)  # forwards' inputs [0, n), backwards' [n, 2n); -1: not yet
    arrive[:m] = [0.0] * m  # the first virtual stage's inputs
    arrive[n + last_m :] = [0.0] * m  # the last virtual stage's gradients (its own loss)
    waits = [-2] * p  # the place each stage last waited for
    # per stage: what does not change (its operations, sends and durations, neighbours), and its
    # state when it last stopped (next operation, free at, links free at, last gradient's start)
    fixed = [
        (schedule[i], len(schedule[i]), send_f[i], send_b[i], fwd[i], bwd[i], wgt[i], (i + 1) % p, (i - 1) % p)
        for i in range(p)
    ]
    state = [(0, 0.0, 0.0, 0.0, 0.0)] * p
    todo = list(range(p - 1, -1, -1))
    push = todo.append
    pop = todo.pop
    while todo:
        i = pop()
        ops, n_ops, sf, sb, f_dur, b_dur, w_dur, nxt, prv = fixed[i]
        first, t, lf, lb, g_start = state[i]
        for k in range(first, n_ops):  # k: where the stage stops (n_ops when it gets through)
            x = ops[k]
            if x >= n:  # a backward
                ready = arrive[x]
                if ready < 0.0:
                    waits[i] = x
                    break
                g_start = t if t > ready else ready
                t = g_start + b_dur
                if x >= n_m:
                    lb = (t if t > lb else lb) + sb
                    x -= m
                    arrive[x] = lb
                    if waits[prv] == x:
                        push(prv)
            elif x >= 0:  # a forward
                ready = arrive[x]
                if ready < 0.0:
                    waits[i] = x
                    break
                t = (t if t > ready else ready) + f_dur
                if x < last_m:
                    lf = (t if t > lf else lf) + sf
                    x += m
                    arrive[x] = lf
                    if waits[nxt] == x:
                        push(nxt)
            else:  # a weight-gradient pass
                g_start = t
                t = t + w_dur
        else:
            k = n_ops
        state[i] = (k, t, lf, lb, g_start)
    next_op = [s[0] for s in state]
    stuck = [i for i in range(p) if next_op[i] != len(schedule[i])]
    if stuck:
        raise RuntimeError(f"schedule {name!r} deadlocked at stage {stuck[0]} (operation {next_op[stuck[0]]})")
    busy, peak = _busy_and_peak(sched, fwd, bwd, wgt, split_backward)
    return busy, peak, [s[4] for s in state], [s[1] for s in state]


def _busy_and_peak(
    sched: Compiled, fwd: list[float], bwd: list[float], wgt: list[float], split_backward: bool
) -> tuple[list[float], list[int]]:
    """Per stage: its durations summed in the order its operations run (`np.cumsum` adds in order,
    0 + d first, as the loop's `busy += d`), and the most activations held at once (+1 per
    forward, -1 per backward, or per weight-gradient pass when the backward is split)."""
    kinds = sched.kinds
    if kinds is None:
        rows = [_busy_and_peak_row(ops, i, fwd, bwd, wgt, split_backward, sched) for i, ops in enumerate(sched.codes)]
        return [r[0] for r in rows], [r[1] for r in rows]
    table = np.array([fwd, bwd, wgt], dtype=float).T  # p x (F, B, W)
    busy = np.cumsum(np.take_along_axis(table, kinds.astype(np.intp), axis=1), axis=1)[:, -1]
    step = np.array([1, 0, -1] if split_backward else [1, -1, 0], dtype=np.int64)
    held = np.cumsum(step[kinds], axis=1)
    peak = np.maximum(held.max(axis=1), 0)
    return busy.tolist(), peak.tolist()


def _busy_and_peak_row(
    ops: list[int], i: int, fwd: list[float], bwd: list[float], wgt: list[float], split_backward: bool, sched: Compiled
) -> tuple[float, int]:
    """One stage's busy time and peak in flight, in a loop (stages with lists of different lengths)."""
    n = sched.p * sched.v * sched.m
    busy, held, most = 0.0, 0, 0
    for x in ops:
        if x >= n:
            busy += bwd[i]
            held -= 0 if split_backward else 1
        elif x >= 0:
            busy += fwd[i]
            held += 1
            most = max(most, held)
        else:
            busy += wgt[i]
            held -= 1 if split_backward else 0
    return busy, most
