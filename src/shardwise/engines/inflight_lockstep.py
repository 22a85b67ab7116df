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
from dataclasses import dataclass, replace

import numpy as np

from shardwise.engines.dp_attention import dp_attention
from shardwise.engines.inflight_loops import Run, run_ranks
from shardwise.engines.iteration import IterationTable, _axis, iteration_times
from shardwise.engines.serving import RUNTIMES
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

    @property
    def least_loaded(self) -> bool:
        """Requests go to the rank with the fewest waiting and running (vLLM), else round robin (SGLang)."""
        return self.mode == "vllm"

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


def with_runtime(scn: Scenario, runtime: str) -> Scenario:
    """`scn` as `engines.serving.serving_scenario` made it, under another runtime: the kernel gap and
    the collectives' base latency `RUNTIMES` gives it; all else (the engine's all-reduce kernel, its
    norm fusion, the PCIe group link) as converted once. Calling `serving_scenario` on the converted
    scenario again read the P2P flag `on_pcie_topology` had set (--p2p off lost: the fusion and
    vLLM's own all-reduce back) and narrowed the PCIe link a second time."""
    gap, base = RUNTIMES[runtime]
    c = scn.cluster
    inter = c.inter_node_link
    return replace(scn, cluster=c.with_(
        gpu=c.gpu.with_(kernel_launch_s=gap),
        intra_node_link=c.intra_node_link.with_(base_latency_s=base),
        inter_node_link=None if inter is None else inter.with_(base_latency_s=base),
    ))  # fmt: skip


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
    eager = with_runtime(scn, EAGER)
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
) -> Run:
    """The passes of `step.ranks` ranks in lockstep (module docstring): the replica's loop
    (`engines.inflight_loops.run_ranks`) over every rank, each admitting, prefilling and decoding
    its own requests by one replica's rules (`slots`, `blocks` of its own `free_blocks`, a `budget`
    of tokens a pass, chunks of at most `chunk_tokens`), a pass priced by `Lockstep.step_s`.
    Requests are dispatched as they arrive (a closed loop's successors arrive before the first
    users' staggered starts end); SGLang's ranks take them round robin and prefill first whenever
    a prompt is admitted (`get_next_batch_to_run` takes a prefill batch whenever it can form one,
    managers/scheduler.py), vLLM's go to the least loaded. A pass ends at its prompts' first
    tokens. The areas and tokens are the group's (all ranks)."""
    return run_ranks(
        step.step_s, step.ranks, inputs, outputs, slots, closed, arrival_s, issued, budget, blocks, free_blocks,
        chunk_tokens, decodes_share_budget, least_loaded=step.least_loaded, prefill_first=step.apart, time_order=True,
    )  # fmt: skip
