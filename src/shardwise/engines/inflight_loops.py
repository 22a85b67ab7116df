"""The iteration loop of the in-flight batching simulation (`engines.inflight`): `run_ranks`, one
loop over R ranks stepped together, pass by pass. R = 1 is one replica (`engines.inflight_sim`);
R > 1 the data-parallel attention ranks of a mixture-of-experts replica in lockstep
(`engines.inflight_lockstep`), each with its own requests, slots and KV cache, a pass as long as
its slowest rank.

Each rank keeps its requests in three structures, so that a pass costs a few Python operations and
one per request that arrives, starts, ends or takes a prompt chunk, not one per request running:
a queue (arrived, not admitted), the prompts being prefilled in admission order (first come, first
served: a pass takes chunks from the front while the budget lasts), and a heap of the sequences
decoding keyed by the rank's decode pass at which each ends (each decodes one token a pass, so
that pass is fixed when its first token comes). A run of passes with no prompt tokens on any rank,
no arrival that a rank could admit and no finish is jumped over at once.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from heapq import heappop, heappush
from typing import NamedTuple

import numpy as np


class Run(NamedTuple):
    """What the loop gives: per request (seconds: admitted, first token, done, arrival), the
    (time, tokens generated) after each step, and the sums over the run (all ranks')."""

    admitted: np.ndarray
    first: np.ndarray
    done: np.ndarray
    arrival: np.ndarray
    clock: list[float]
    produced: list[float]
    t: float
    busy: float
    running_area: float
    decode_area: float
    prompt_area: float
    iterations: int
    # passes by (decoding sequences, prompt tokens), all ranks' summed: what the run's passes
    # were, for the parts of an iteration and the prompt tokens per pass (`engines.inflight.estimate_from`)
    visits: dict[tuple[int, int], int] | None = None


def run_ranks(
    pass_s: Callable[[list[int], list[int]], float],
    ranks: int,
    inputs: int | np.ndarray,
    outputs: int | np.ndarray,
    slots: int,
    closed: bool,
    arrival_s: np.ndarray,
    issued: int,
    budget: int,
    blocks: np.ndarray | None,
    free_blocks: int,
    chunk_tokens: int | None = None,
    decodes_share_budget: bool = True,
    after_first_s: Callable[[float, float], float] | None = None,
    least_loaded: bool = False,
    prefill_first: bool = False,
    time_order: bool = False,
) -> Run:
    """The passes of `ranks` ranks over requests of any lengths (`inputs`, `outputs`: one each, or
    one for every request; at least 1). A pass where rank r decodes ds[r] sequences and prefills
    qs[r] prompt tokens takes `pass_s(ds, qs)` seconds (a function of them alone: each is asked
    once). Each rank admits its requests first come, first served while it runs fewer than
    `slots` and its own `free_blocks` of the KV cache hold the next one's `blocks` (None: no
    blocks); a pass prefills, after its decodes take theirs where `decodes_share_budget`, at most
    `budget` prompt tokens a rank, at most `chunk_tokens` (None: the budget) of one prompt.
    `after_first_s(d, q)`: the seconds of a pass that come after its prompts' first tokens (None:
    none). `prefill_first`: a rank with a prompt admitted prefills before it decodes again
    (SGLang, `engines.inflight_lockstep`).

    Requests go to the rank with the fewest waiting and running (`least_loaded`, ties rotating)
    or round robin. `time_order`: requests are dispatched in the order they arrive; else in the
    order issued, a request not yet arrived holding back those issued after it (a closed loop's
    successor waits behind a user whose staggered start is still to come: one replica's rule).
    `arrival_s` is copied (a closed loop issues each finished request's successor at once). The
    areas and tokens are the group's, all ranks'."""
    n = len(arrival_s)
    cap = budget if chunk_tokens is None else chunk_tokens
    if budget < 1 or cap < 1:
        raise ValueError(f"a pass needs a budget and a chunk of at least one token, not {budget} and {cap}")
    # Python ints: a pass is a few operations
    prompt_left = [int(inputs)] * n if np.ndim(inputs) == 0 else np.asarray(inputs).tolist()
    out = [int(outputs)] * n if np.ndim(outputs) == 0 else np.asarray(outputs).tolist()
    arrival = np.asarray(arrival_s, dtype=float).tolist()
    blk = None if blocks is None else np.asarray(blocks).tolist()
    nan = float("nan")
    admitted, first, done = [nan] * n, [nan] * n, [nan] * n
    every = range(ranks)
    queue: list[deque[int]] = [deque() for _ in every]  # arrived, not admitted
    pending: list[list[int]] = [[] for _ in every]  # admitted, prompt not done, in admission order
    # decoding: how many, and who ends at which of the rank's decode passes (a heap of those passes)
    decoding = [0] * ranks
    ends: list[list[int]] = [[] for _ in every]
    ending: list[dict[int, list[int]]] = [{} for _ in every]
    free = [free_blocks] * ranks
    decoded = [0] * ranks  # decode passes of each rank
    # issued, not dispatched, in two runs each in time order: the first issued (order[a:], in
    # the order of their arrival or as issued) and a closed loop's successors (b up to `issued`,
    # issued at their predecessors' ends); the next to dispatch is the earlier of the two fronts
    # in time order, else the first run's until it is through
    order = sorted(range(issued), key=arrival.__getitem__) if time_order else list(range(issued))
    a, b, m = 0, issued, issued
    start = robin = finished = passes = 0
    t = tokens = 0.0
    clock, produced = [0.0], [0.0]
    busy = running_area = decode_area = prompt_area = 0.0
    costs: dict[tuple[int, ...], float] = {}
    visits: dict[tuple[int, int], int] = {}
    ds, qs = [0] * ranks, [0] * ranks  # this pass's decodes and prompt tokens of each rank
    NONE: list[int] = []  # no prompt done (never written to)
    firsts: list[list[int]] = [NONE] * ranks  # the prompts this pass completes, each rank's
    while finished < n:
        nxt = -1  # the next to dispatch once it arrives (-1: none issued)
        while True:  # dispatch what has arrived: to the least loaded rank, or round robin
            if a < m and (b >= issued or not time_order or arrival[order[a]] <= arrival[b]):
                i = order[a]
                if arrival[i] > t:
                    nxt = i
                    break
                a += 1
            elif b < issued:
                i = b
                if arrival[i] > t:
                    nxt = i
                    break
                b += 1
            else:
                break
            r = 0
            if ranks > 1:
                if least_loaded:
                    loads = [len(queue[j]) + len(pending[j]) + decoding[j] for j in every]
                    loads = loads[start:] + loads[:start]
                    r, start = (start + loads.index(min(loads))) % ranks, (start + 1) % ranks
                else:
                    r, robin = robin % ranks, robin + 1
            queue[r].append(i)
        held = prompts = 0
        for r in every:
            waiting, mine, d = queue[r], pending[r], decoding[r]
            while waiting and len(mine) + d < slots:  # admit while a slot and the cache hold the next
                i = waiting[0]
                if blk is not None:
                    if blk[i] > free[r]:
                        break
                    free[r] -= blk[i]
                admitted[i] = t
                mine.append(waiting.popleft())
            held += len(mine) + d
            q, now_first = 0, NONE
            if mine:  # chunks of at most `cap` from the front while the budget lasts
                room, taken, now_first = budget - d if decodes_share_budget else budget, 0, []
                for i in mine:
                    if room <= 0:
                        break
                    left = prompt_left[i]
                    k = cap if left > cap else left
                    k = room if k > room else k
                    q, room, taken = q + k, room - k, taken + 1
                    prompt_left[i] = left - k
                    if k == left:
                        now_first.append(i)
                f = len(now_first)
                if f and mine[f - 1] == now_first[-1]:  # the first ones (one length for every request)
                    del mine[:f]
                elif f:
                    pending[r] = [i for i in mine[:taken] if prompt_left[i]] + mine[taken:]
                if prefill_first and q:
                    d = 0  # a prefill pass, first whenever a prompt waits: the rank's decodes wait
                prompts += q
            ds[r], qs[r], firsts[r] = d, q, now_first
        if not held:
            if nxt < 0:  # unreachable from serve (Replica refuses a request the KV cache cannot hold): a guard
                raise RuntimeError("in-flight loop: no request running and none to admit")
            t = arrival[nxt]
            continue
        if ranks == 1:  # a pass's cost depends on (ds, qs) alone: asked once each
            key = (ds[0], qs[0])
            dt = costs.get(key)
            if dt is None:
                dt = costs[key] = pass_s(ds, qs)
        else:  # several ranks' counts seldom repeat: no memo (it would grow with the passes)
            dt = pass_s(ds, qs)
        steps = 1
        if not prompts:  # decode only: jump to the next finish or to an arrival a rank could admit
            steps, opening = 0, False  # to the fewest decode passes a rank has before its next finish
            for r in every:
                if ds[r] and (not steps or ends[r][0] - decoded[r] < steps):
                    steps = ends[r][0] - decoded[r]
                # a rank that could take an arrival: one rank, no queue and a slot free; several, a
                # slot free beside its queue (vLLM's balancer sends an arrival on arrival, by the loads
                # then, even to a rank whose queue the KV cache holds back)
                if (ranks > 1 or not queue[r]) and len(queue[r]) + len(pending[r]) + decoding[r] < slots:
                    opening = True
            # one rank: the next arrival is the next admitted, so it must fit; several: a later
            # one may go to another rank
            fits = nxt >= 0 and (ranks > 1 or blk is None or blk[nxt] <= free[0]) and math.isfinite(arrival[nxt])
            if fits and opening:
                steps = min(steps or 1, max(1, math.ceil((arrival[nxt] - t) / dt)))
            steps = max(steps, 1)
        span = steps * dt
        seen = (ds[0], qs[0]) if ranks == 1 else (sum(ds), sum(qs))
        visits[seen] = visits.get(seen, 0) + steps
        t += span
        passes += steps
        busy += span
        running_area += span * held
        made = 0
        for r in every:
            d, q, heap = ds[r], qs[r], ends[r]
            if d:
                decoded[r] += steps
                made += steps * d
                decode_area += span * d
            if q:
                prompt_area += dt * q
                if firsts[r]:
                    at = t if after_first_s is None else t - after_first_s(d, q)
                    now, by_end = decoded[r], ending[r]
                    for i in firsts[r]:
                        first[i] = at
                        end = now + out[i] - 1
                        same = by_end.get(end)
                        if same is None:
                            by_end[end] = [i]
                            heappush(heap, end)
                        else:
                            same.append(i)
                    made += len(firsts[r])
                    decoding[r] += len(firsts[r])
            if heap and heap[0] <= decoded[r]:  # finishes
                ended, now = 0, decoded[r]
                while heap and heap[0] <= now:
                    over = ending[r].pop(heappop(heap))
                    ended += len(over)
                    for i in over:
                        done[i] = t
                    if blk is not None:
                        free[r] += sum([blk[i] for i in over])
                decoding[r] -= ended
                finished += ended
                if closed:
                    fresh = min(ended, n - issued)
                    arrival[issued : issued + fresh] = [t] * fresh
                    issued += fresh
        tokens += made
        clock.append(t)
        produced.append(tokens)
    return Run(
        np.array(admitted), np.array(first), np.array(done), np.array(arrival), clock, produced,
        t, busy, running_area, decode_area, prompt_area, passes, visits,
    )  # fmt: skip
