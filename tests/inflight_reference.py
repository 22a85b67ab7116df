"""The in-flight loop over numpy arrays of every request, as `engines.inflight_loops` had it for
request mixes before one loop ran every case (`run_ranks`): kept here as an independent reference
for the tests, which compare the loop with it field by field. One replica (one rank), requests
admitted in the order issued, a dozen numpy steps over the running requests each iteration.
`simulate_reference` is `engines.inflight_sim.simulate` over this loop.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any
from unittest import mock

import numpy as np

from shardwise.engines import inflight_sim
from shardwise.engines.inflight_loops import Run


def simulate_reference(*args: Any, **kwargs: Any) -> inflight_sim.Simulated:
    """`simulate` with the loop over arrays in place of `run_ranks` (one replica only)."""
    with mock.patch.object(inflight_sim, "run_ranks", _one_replica):
        return inflight_sim.simulate(*args, **kwargs)


def _one_replica(
    pass_s: Callable[[list[int], list[int]], float], ranks: int, inputs: np.ndarray, outputs: np.ndarray,
    slots: int, closed: bool, arrival: np.ndarray, issued: int, budget: int, blocks: np.ndarray | None, free: int,
    chunk_tokens: int | None = None, decodes_share_budget: bool = True,
    after_first_s: Callable[[float, float], float] | None = None, **rules: Any,
) -> Run:  # fmt: skip
    assert ranks == 1 and not rules, "the reference runs one replica"
    n = len(arrival)
    inputs, outputs = np.broadcast_to(inputs, n).astype(np.int64), np.broadcast_to(outputs, n).astype(np.int64)
    return run_arrays(
        lambda d, q: pass_s([d], [q]), inputs, outputs, slots, closed, arrival.copy(), issued, budget, blocks, free,
        chunk_tokens, decodes_share_budget, after_first_s,
    )  # fmt: skip


def run_arrays(
    cost_s: Callable[[float, float], float],
    inputs: np.ndarray,
    outputs: np.ndarray,
    slots: int,
    closed: bool,
    arrival: np.ndarray,
    issued: int,
    max_batched_tokens: int,
    blocks: np.ndarray | None,
    free: int,
    chunk_tokens: int | None = None,
    decodes_share_budget: bool = True,
    after_first_s: Callable[[float, float], float] | None = None,
) -> Run:
    """The iterations over arrays of every request (any lengths, the KV cache in blocks when
    `blocks` is given): numpy steps over the running requests in each iteration. `arrival` is
    written to (a closed loop issues each finished request's successor). `chunk_tokens` caps one
    prompt's chunk in an iteration (None: the whole budget). `after_first_s(d, q)`: the seconds of
    an iteration with prompt tokens that come after the prompts' first tokens (None: none, the
    first tokens at its end)."""
    n = len(inputs)
    prompt_left = inputs.copy()
    decode_left = outputs - 1
    admitted, first, done = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    running = np.zeros(0, dtype=np.int64)  # admitted, not finished, in admission order
    nxt = finished = iterations = 0
    t = tokens = 0.0
    clock, produced = [0.0], [0.0]  # (time, tokens generated) after each step
    busy = running_area = decode_area = prompt_area = 0.0
    visits: dict[tuple[int, int], int] = {}  # iterations by (decodes, prompt tokens), first seen first
    while finished < n:
        if nxt < issued and arrival[nxt] <= t and len(running) < slots:  # admit, first come first served
            end = min(issued, nxt + slots - len(running))
            come = arrival[nxt:end] <= t  # the first not yet arrived stops the queue (not sorted: closed loops)
            k = len(come) if come.all() else int(come.argmin())
            if blocks is not None:  # ... while the KV cache holds the next one
                k = int(np.searchsorted(np.cumsum(blocks[nxt : nxt + k]), free, side="right"))
                free -= int(blocks[nxt : nxt + k].sum())
            admitted[nxt : nxt + k] = t
            running = np.concatenate([running, np.arange(nxt, nxt + k)])
            nxt += k
        if not len(running):
            t = float(arrival[nxt])
            continue
        ids = running
        left = prompt_left[ids]
        decoding = ids[left == 0]
        d = len(decoding)
        waiting = ids[left > 0]
        need = prompt_left[waiting] if chunk_tokens is None else np.minimum(prompt_left[waiting], chunk_tokens)
        room = max(max_batched_tokens - (d if decodes_share_budget else 0), 0)
        take = np.minimum(np.maximum(room - (np.cumsum(need) - need), 0), need)  # np.clip, without its overhead
        q = int(take.sum())
        if d == 0 and q == 0:  # a budget smaller than one prompt chunk still makes progress
            take[0], q = min(need[0], max_batched_tokens), min(int(need[0]), max_batched_tokens)
        dt = cost_s(d, q)
        steps = 1
        if q == 0:  # decode only: jump to the next finish or admission
            steps = int(decode_left[decoding].min()) if d else 1
            admissible = nxt < issued and len(running) < slots and (blocks is None or blocks[nxt] <= free)
            if admissible and np.isfinite(arrival[nxt]):
                steps = min(steps, max(1, math.ceil((arrival[nxt] - t) / dt)))
            steps = max(steps, 1)
        t += steps * dt
        iterations += steps
        visits[(d, q)] = visits.get((d, q), 0) + steps
        busy += steps * dt
        running_area += steps * dt * len(running)
        decode_area += steps * dt * d
        prompt_area += dt * q
        decode_left[decoding] -= steps
        made = steps * d
        if q:
            prompt_left[waiting] -= take
            now_first = waiting[(take > 0) & (prompt_left[waiting] == 0)]
            first[now_first] = t if after_first_s is None else t - after_first_s(d, q)
            made += len(now_first)
        tokens += made
        clock.append(t)
        produced.append(tokens)
        over = (prompt_left[ids] == 0) & (decode_left[ids] <= 0) & ~np.isnan(first[ids])
        if over.any():
            ended = ids[over]
            done[ended] = t
            running = ids[~over]
            finished += len(ended)
            if blocks is not None:
                free += int(blocks[ended].sum())
            if closed:
                fresh = min(len(ended), n - issued)
                arrival[issued : issued + fresh] = t
                issued += fresh
    return Run(
        admitted,
        first,
        done,
        arrival,
        clock,
        produced,
        t,
        busy,
        running_area,
        decode_area,
        prompt_area,
        iterations,
        visits,
    )
