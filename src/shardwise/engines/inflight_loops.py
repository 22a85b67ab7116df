"""The iteration loop of the in-flight batching simulation (`engines.inflight`), in two versions
that give the same numbers: over arrays of every request (any request mix, the KV cache in blocks)
and, when every request has the same lengths, over queues of the requests in flight.

With the same lengths for every request the running ones are two queues in admission order:
prompts being prefilled (first come, first served, so only the first can be part done, or the
first few when one prompt's chunk is capped below the budget: pipeline micro-batches) and
sequences decoding (each decodes one token per iteration, so they finish in the order their
prompts did, and the first holds the fewest tokens left). An iteration then costs a few Python
operations and one per request that starts, ends or takes a prompt chunk, instead of a dozen numpy
steps over every running request; the time and the areas are summed in the same order, so the
numbers are the same to the bit (`tests/test_inflight.py` compares both loops).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import NamedTuple

import numpy as np


class Run(NamedTuple):
    """What the loop gives: per request (seconds: admitted, first token, done, arrival), the
    (time, tokens generated) after each step, and the sums over the run."""

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
        admitted, first, done, arrival, clock, produced, t, busy, running_area, decode_area, prompt_area, iterations
    )


def run_fixed(
    cost_s: Callable[[float, float], float],
    input_len: int,
    output_len: int,
    slots: int,
    closed: bool,
    arrival_s: np.ndarray,
    issued: int,
    max_batched_tokens: int,
    chunk_tokens: int | None = None,
    decodes_share_budget: bool = True,
    after_first_s: Callable[[float, float], float] | None = None,
) -> Run:
    """`run_arrays` for requests of one prompt length and one output length (at least 1 each, a
    budget of at least one token, a chunk cap of at least one), over two queues (module
    docstring). `cost_s` is a function of (d, q) alone: each pair is asked once (a closed loop of
    one user repeats two pairs).

    With a chunk cap below the prompt several prompts can be part done, but only the first ones:
    an iteration takes a prefix of the queue, so a prompt has had no more tokens than any before
    it (as many or more left), and a prompt that does not finish took the whole cap or the last of
    the room, so none after it finishes either: the prompts done in an iteration are the queue's
    first ones."""
    n = len(arrival_s)
    arrival = arrival_s.tolist()
    nan = float("nan")
    admitted, first, done = [nan] * n, [nan] * n, [nan] * n
    cap = input_len if chunk_tokens is None else min(chunk_tokens, input_len)
    prefilling: list[int] = []  # admitted, in admission order: prefilling[head:] have their prompt not done
    head = 0
    prompt_left = [input_len] * n  # prompt tokens left, per request
    decoding: deque[tuple[int, int]] = deque()  # (request, `decoded` when it is done), in admission order
    decoded = 0  # decode steps so far: a request decoding has `its end - decoded` tokens left
    nxt = finished = iterations = 0
    t = tokens = 0.0
    clock, produced = [0.0], [0.0]
    busy = running_area = decode_area = prompt_area = 0.0
    costs: dict[tuple[int, int], float] = {}
    while finished < n:
        running = len(prefilling) - head + len(decoding)
        if nxt < issued and arrival[nxt] <= t and running < slots:  # admit, first come first served
            end = min(issued, nxt + slots - running)
            k = nxt
            while k < end and arrival[k] <= t:  # the first not yet arrived stops the queue
                admitted[k] = t
                prefilling.append(k)
                k += 1
            running += k - nxt
            nxt = k
        if not running:
            t = float(arrival[nxt])
            continue
        d = len(decoding)
        room = max(max_batched_tokens - (d if decodes_share_budget else 0), 0)
        q = 0
        done_from = head
        i, waiting = head, len(prefilling)
        while i < waiting and room > 0:  # chunks of at most `cap` while the budget lasts
            r = prefilling[i]
            left = prompt_left[r]
            take = left if left <= cap else cap
            if take > room:
                take = room
            q += take
            room -= take
            prompt_left[r] = left - take
            if take == left:
                head += 1  # the first ones (docstring)
            i += 1
        prompts_done = prefilling[done_from:head]
        dt = costs.get((d, q))
        if dt is None:  # an iteration's cost depends on (d, q) alone: asked once per pair
            dt = costs[d, q] = cost_s(d, q)
        steps = 1
        if q == 0:  # decode only: jump to the next finish or admission
            steps = decoding[0][1] - decoded if d else 1
            if nxt < issued and running < slots and math.isfinite(arrival[nxt]):
                steps = min(steps, max(1, math.ceil((arrival[nxt] - t) / dt)))
            steps = max(steps, 1)
        t += steps * dt
        iterations += steps
        busy += steps * dt
        running_area += steps * dt * running
        decode_area += steps * dt * d
        prompt_area += dt * q
        decoded += steps
        made = steps * d
        at = t if after_first_s is None or not prompts_done else t - after_first_s(d, q)
        for r in prompts_done:
            first[r] = at
            decoding.append((r, decoded + output_len - 1))
        made += len(prompts_done)
        tokens += made
        clock.append(t)
        produced.append(tokens)
        ended = 0
        while decoding and decoding[0][1] <= decoded:
            done[decoding.popleft()[0]] = t
            ended += 1
        if ended:
            finished += ended
            if closed:
                fresh = min(ended, n - issued)
                arrival[issued : issued + fresh] = [t] * fresh
                issued += fresh
    return Run(
        np.array(admitted), np.array(first), np.array(done), np.array(arrival), clock, produced,
        t, busy, running_area, decode_area, prompt_area, iterations,
    )  # fmt: skip
