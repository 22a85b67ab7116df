"""Data-parallel attention ranks in lockstep: the dp attention ranks of a mixture-of-experts replica
(`engines.dp_attention`), each with its own requests, simulated together, pass by pass, as vLLM and
SGLang run them.

Every MoE layer's gather is a collective over all the ranks, so the ranks agree on every forward
pass and a pass lasts as long as its slowest rank; a rank with nothing to run runs a dummy batch
(SGLang's idle batch, `prepare_mlp_sync_batch_raw` in managers/scheduler_dp_attn_mixin.py,
0.5.6.post2; vLLM 0.34's `DPEngineCoreProc`, v1/engine/core.py, `execute_dummy_batch`). A pass's
seconds split into the slowest rank's own part (its attention, its projections: what it runs on
its own batch) and the group's part (the routed experts, the gather, SGLang's dense MLPs over the
group), which every rank pays on the tokens the gather carries:

- **SGLang** (`--moe-a2a-backend none`): a rank prefills or decodes, never both (prefill apart),
  prefill first whenever it has a prompt admitted (`Scheduler.get_next_batch_to_run`). A
  pass with no prompt tokens on any rank pads every rank to the longest (`DpPaddingMode.MAX_LEN`)
  and replays its CUDA graph: the fullest rank's decode, priced in phase. A pass with prompt tokens
  on any rank (`is_extend_in_batch`, the max over the ranks) takes the summed-length all-reduces on
  every rank (`SUM_LEN`: the gather carries the sum of the ranks' tokens) and runs every rank
  without CUDA graphs (`can_cuda_graph`, the min over the ranks): the prefilling ranks' prompt
  chunks and the decoding ranks' decodes side by side, the slowest rank's own part plus the group's
  part on the summed tokens, eager (`pytorch-eager`: the Python launch gaps). Requests arrive round
  robin (`load_balance_method` "round_robin", managers/data_parallel_controller.py).
- **vLLM** (allgather_reducescatter): a rank mixes its decodes and prompt chunks. The ranks
  all-reduce their token counts before each pass (`coordinate_batch_across_dp`, v1/worker/dp_utils.py)
  and take the min of their CUDA-graph modes: where every rank's batch fits the largest captured
  graph (`max_cudagraph_capture_size`, min(2 max_num_seqs, 512) on Hopper, config/vllm.py) every
  rank is padded to the largest rank's tokens and replays its graph (the gather carries R times
  that); where one rank's batch is wider (a prompt chunk), no rank pads and none runs a graph: the
  gather carries the sum, every rank eager. Requests go to the rank with the fewest waiting and
  running (`DPLBAsyncMPClient.get_core_engine_for_request`, v1/engine/core_client.py), ties
  rotating.

The group's part at a mean of x tokens a rank is `engines.iteration.iteration_times` of one decode
with `group_tokens` x; a rank's own part its pass priced in phase less the group's part at its own
tokens (exact where the costs add, one pipeline stage: data-parallel attention refuses pp > 1).
Not priced: the output layer's gather of SGLang under the group (each rank's own logits tokens),
vLLM's router on a rank's own tokens (on the mean). The eager gaps of a vLLM pass without graphs are
a rank's eager decode less its graphed one at its decodes, at one decode where it runs only prompt
chunks (the gaps follow the kernels launched, not the tokens). TensorRT-LLM's attention DP stays in phase (not read).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, replace
from heapq import heapify, heappop, heappush

import numpy as np

from shardwise.engines.dp_attention import dp_attention
from shardwise.engines.inflight_loops import Run
from shardwise.engines.iteration import IterationTable, _axis, iteration_times
from shardwise.engines.serving import serving_scenario
from shardwise.specs import Scenario
from shardwise.specs.serving import ServingWorkload

# How each engine steps its ranks (module docstring); the others stay in phase.
LOCKSTEP = {"sglang": "sglang", "vllm": "vllm"}
# vLLM's largest captured CUDA graph on Hopper: min(2 max_num_seqs, 512) tokens (config/vllm.py,
# 0.34; 1024 on Blackwell, not told apart here)
VLLM_CAPTURE_TOKENS = 512
EAGER = "pytorch-eager"  # the runtime of a pass without CUDA graphs (engines.serving.RUNTIMES)


@dataclass(frozen=True)
class Curve:
    """Seconds against one count, interpolated linearly (extrapolated from the last cell)."""

    x: tuple[float, ...]
    y: tuple[float, ...]

    def __call__(self, v: float) -> float:
        x, y = self.x, self.y
        i = min(max(bisect_left(x, v) - 1, 0), len(x) - 2)
        return y[i] + (y[i + 1] - y[i]) * (v - x[i]) / (x[i + 1] - x[i])


def curve(x: np.ndarray, seconds: np.ndarray) -> Curve:
    return Curve(tuple(np.asarray(x, dtype=float).tolist()), tuple(np.asarray(seconds, dtype=float).tolist()))


@dataclass(frozen=True)
class Lockstep:
    """The costs of one pass of `ranks` ranks in lockstep (module docstring). `table` the in-phase
    iteration table; `group` the group's part at a rank's mean tokens; SGLang: `prefill`, `decode`
    a rank's eager prompt and decode passes on the summed-length path; vLLM: `decode` the eager
    gaps a rank's pass adds (eager less graphed), `capture_tokens` its largest graph."""

    ranks: int
    mode: str
    table: IterationTable
    group: Curve
    decode: Curve
    prefill: Curve | None = None
    capture_tokens: int = VLLM_CAPTURE_TOKENS

    @property
    def apart(self) -> bool:
        """A rank prefills or decodes in a pass, never both (SGLang)."""
        return self.mode == "sglang"

    def step_s(self, ds: list[int], qs: list[int]) -> float:
        """Seconds of one pass where rank r decodes ds[r] sequences and prefills qs[r] prompt tokens."""
        group, own = self.group, -math.inf
        if self.mode == "sglang":
            if not any(qs):  # MAX_LEN, CUDA graphs: the fullest rank's decode
                return self.table(max(ds), 0.0)
            total = 0
            for d, q in zip(ds, qs, strict=True):
                if q > 0:
                    own, total = max(own, self.prefill(q) - group(q)), total + q  # type: ignore[misc]
                elif d > 0:
                    own, total = max(own, self.decode(d) - group(d)), total + d
            return own + group(total / self.ranks)
        widest = max(d + q for d, q in zip(ds, qs, strict=True))
        graphed = widest <= self.capture_tokens
        # without graphs every rank runs eager, a prompt-only rank too: its launch gaps are a pass's
        # kernels, not its tokens (the gaps of a one-sequence decode where it decodes none)
        for d, q in zip(ds, qs, strict=True):
            if d + q > 0:
                own = max(own, self.table(d, q) - group(d + q) + (0.0 if graphed else self.decode(max(d, 1))))
        return own + group(widest if graphed else (sum(ds) + sum(qs)) / self.ranks)


def lockstep_costs(
    scn: Scenario, wl: ServingWorkload, table: IterationTable, top: int, round_tokens: int, context: float, budget: int
) -> Lockstep | None:
    """The lockstep costs of a replica (`scn` as `engines.serving.serving_scenario` made it, `table`
    its in-phase iteration table up to `top` decodes and `round_tokens` prompt tokens), or None
    where its ranks are not stepped together here (no data-parallel attention, another engine)."""
    mode, plan = LOCKSTEP.get(wl.engine), scn.plan
    if mode is None or not scn.model.is_moe or not bool(np.all(dp_attention(plan))) or int(np.max(plan.dp)) < 2:
        return None
    if int(np.max(plan.pp)) > 1:  # refused under data-parallel attention; kept in phase
        return None
    eager = serving_scenario(scn, replace(wl, runtime=EAGER))
    d = _axis(top)
    x = _axis(max(top, round_tokens))
    one = np.ones_like(x)

    def times(s: Scenario, dec: np.ndarray, q: np.ndarray, **kw: object) -> np.ndarray:
        return np.asarray(iteration_times(s, wl, dec, q, context, budget, **kw).total_s, dtype=float)  # type: ignore[arg-type]

    if mode == "sglang":
        q = _axis(round_tokens, wl.input_len * np.arange(1, 65))
        return Lockstep(
            int(np.max(plan.dp)), mode, table,
            group=curve(x, times(eager, one, 0 * x, group_tokens=x, extend=True)),
            decode=curve(d, times(eager, d, 0 * d, extend=True)),
            prefill=curve(q, times(eager, 0 * q, q)),
        )  # fmt: skip
    return Lockstep(
        int(np.max(plan.dp)), mode, table,
        group=curve(x, times(scn, one, 0 * x, group_tokens=x)),
        decode=curve(d, times(eager, d, 0 * d) - times(scn, d, 0 * d)),
    )  # fmt: skip


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
