"""The lockstep loop as it stood before the in-flight loops were unified (engines/inflight_lockstep.py
at 0ec1ff30, its own loop over R ranks): the tests' independent reference for `run_ranks` with
several ranks, as `inflight_reference.py` is for one. Kept verbatim but for its imports."""

from __future__ import annotations

import math
from collections import deque
from heapq import heapify, heappop, heappush

import numpy as np

from shardwise.engines.inflight_lockstep import Lockstep
from shardwise.engines.inflight_loops import Run


def run_lockstep(
    step: Lockstep,
    inputs: np.ndarray,
    outputs: np.ndarray,
    slots: int,
    closed: bool,
    arrival_s: np.ndarray,
    issued: int,
    budget: int,
    blocks: np.ndarray | None,
    free_blocks: int,
    chunk_tokens: int | None = None,
    decodes_share_budget: bool = True,
) -> Run:
    """The passes of `step.ranks` ranks in lockstep (module docstring) over requests of any
    lengths: each rank admits, prefills and decodes its own requests by the rules of one replica
    (`engines.inflight_loops.run_arrays`: `slots` sequences, `blocks` of its own `free_blocks`, a
    `budget` of tokens a pass, chunks of at most `chunk_tokens`); where prompts are prefilled apart
    (SGLang) a rank with a prompt admitted prefills before it decodes again (`get_next_batch_to_run`
    takes a prefill batch whenever it can form one, managers/scheduler.py). Runs of
    passes with no prompt tokens anywhere, no arrival and no finish are jumped over. The areas and
    tokens are the group's (all ranks)."""
    n, ranks = len(inputs), step.ranks
    inp, out = np.asarray(inputs).tolist(), np.asarray(outputs).tolist()  # Python ints: a pass is a few
    arrival = np.asarray(arrival_s, dtype=float).tolist()
    cap = budget if chunk_tokens is None else chunk_tokens
    nan = float("nan")
    admitted, first, done = [nan] * n, [nan] * n, [nan] * n
    prompt_left = list(inp)
    queue: list[deque[int]] = [deque() for _ in range(ranks)]
    pending: list[list[int]] = [[] for _ in range(ranks)]  # admitted, prompt not done, in admission order
    dec: list[list[tuple[int, int]]] = [[] for _ in range(ranks)]  # decoding: a heap of (end, request)
    free = [free_blocks] * ranks
    decoded = [0] * ranks  # decode passes of each rank
    # issued requests not yet arrived, by arrival (a closed loop's successors arrive before the
    # first users' staggered starts end: taken in time order, not in the order issued)
    future = [(a, i) for i, a in enumerate(arrival[:issued])]
    heapify(future)
    start = robin = finished = passes = 0
    t = tokens = 0.0
    clock, produced = [0.0], [0.0]
    busy = running_area = decode_area = prompt_area = 0.0
    while finished < n:
        while future and future[0][0] <= t:  # to a rank: round robin, or the least loaded
            i = heappop(future)[1]
            if step.mode == "sglang":
                r, robin = robin % ranks, robin + 1
            else:
                loads = [len(queue[j]) + len(pending[j]) + len(dec[j]) for j in range(ranks)]
                loads = loads[start:] + loads[:start]
                r, start = (start + loads.index(min(loads))) % ranks, (start + 1) % ranks
            queue[r].append(i)
        for r in range(ranks):  # admit, first come first served, while a slot and the cache hold the next
            waiting = queue[r]
            while waiting and len(pending[r]) + len(dec[r]) < slots:
                i = waiting[0]
                if blocks is not None:
                    if blocks[i] > free[r]:
                        break
                    free[r] -= int(blocks[i])
                admitted[i] = t
                pending[r].append(waiting.popleft())
        held = sum(len(x) for x in pending) + sum(len(x) for x in dec)
        if not held:
            t = future[0][0]
            continue
        ds, qs = [0] * ranks, [0] * ranks
        takes: list[list[tuple[int, int]]] = [[] for _ in range(ranks)]
        for r in range(ranks):
            d, q, mine = len(dec[r]), 0, pending[r]
            if mine:
                room, take = max(budget - (d if decodes_share_budget else 0), 0), takes[r]
                for i in mine:
                    if room <= 0:
                        break
                    k = min(prompt_left[i], cap, room)
                    take.append((i, k))
                    q, room = q + k, room - k
                if d == 0 and q == 0:  # a budget below one chunk still progresses
                    q = min(prompt_left[mine[0]], budget)
                    take.append((mine[0], q))
                if step.apart and q > 0:
                    d = 0  # a prefill pass, first whenever a prompt waits: the rank's decodes wait
            ds[r], qs[r] = d, q
        dt = step.step_s(ds, qs)
        steps = 1
        if not any(qs) and not any(pending):  # decode only, no prompt waiting: jump to the next finish or arrival
            steps = min(dec[r][0][0] - decoded[r] for r in range(ranks) if ds[r])
            room_anywhere = any(len(queue[r]) + len(pending[r]) + len(dec[r]) < slots for r in range(ranks))
            if future and room_anywhere:
                steps = min(steps, max(1, math.ceil((future[0][0] - t) / dt)))
            steps = max(steps, 1)
        t += steps * dt
        passes += steps
        busy += steps * dt
        running_area += steps * dt * held
        made = 0
        for r in range(ranks):
            if ds[r]:
                decoded[r] += steps
                made += steps * ds[r]
                decode_area += steps * dt * ds[r]
            if takes[r] and qs[r]:
                for i, k in takes[r]:
                    prompt_left[i] -= k
                    prompt_area += dt * k
                    if prompt_left[i] == 0:
                        first[i] = t
                        heappush(dec[r], (decoded[r] + out[i] - 1, i))
                        made += 1
                pending[r] = [i for i in pending[r] if prompt_left[i] > 0]
        tokens += made
        clock.append(t)
        produced.append(tokens)
        for r in range(ranks):
            heap, over = dec[r], []
            while heap and heap[0][0] <= decoded[r]:
                over.append(heappop(heap)[1])
            if not over:
                continue
            for i in over:
                done[i] = t
                if blocks is not None:
                    free[r] += int(blocks[i])
            finished += len(over)
            if closed:
                fresh = min(len(over), n - issued)
                for i in range(issued, issued + fresh):
                    arrival[i] = t
                    heappush(future, (t, i))
                issued += fresh
    return Run(
        np.array(admitted), np.array(first), np.array(done), np.array(arrival), clock, produced,
        t, busy, running_area, decode_area, prompt_area, passes,
    )  # fmt: skip
