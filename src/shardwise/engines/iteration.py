"""One iteration of an in-flight (continuously batching) server: the running requests each decode
one token while new prompts are prefilled in chunks, all in one forward pass (Orca, Yu et al.
2022; chunked prefill, Agrawal et al. 2024 "Sarathi-Serve"; vLLM and TensorRT-LLM do this by
default).

An iteration with d decoding sequences and q prompt tokens runs, per layer on one GPU:
- the four linear layers, the element-wise kernels and the TP all-reduces on T = d + q tokens
  together (the weights are read once for all of them);
- the decode attention of d sequences of one new token over their KV cache (`context` tokens
  each, read from HBM: memory bound);
- the prompts' attention: a prompt of `prompt_len` tokens costs its causal attention once, spread
  over its chunks, so q prompt tokens cost q / prompt_len of it.
The embedding runs on T tokens; the output layer on the d decoding tokens and the prompts that
finish (q / prompt_len of them). With pipeline parallelism the engine keeps m <= p
micro-batches in flight (vLLM's virtual engines, TensorRT-LLM's micro-batches), each of 1/m of the
tokens: the iteration takes max(one micro-batch through every stage, m x the slowest stage), as
in a static decode step (`engines.serving`), or longer where the engine's host time per
micro-batch shows (`engines.pipeline.pipelined_round_s`: the Python engines under pp). A sequence
is never split over micro-batches, so m is also at most d plus the number of prompts the prompt
tokens make up.

Costs come from the same kernels as everything else (`physics.flops`, `physics.compute`,
`engines.costs`); `iteration_table` evaluates them on a grid in one vectorized call so that the
simulator (`engines.inflight`) interpolates instead of re-running the model per iteration. Only
the forward's GEMMs are priced; the linear layers, the decode attention and the output layer once
per distinct token count (`once_per_value`); with whole prompts under pp the even split's
micro-batch and the heaviest one in one call (`_stacked`): the same numbers as element by element.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from shardwise.engines.costs import StageCost
from shardwise.engines.dp_dense import with_dense_parts
from shardwise.engines.engine_kernels import fused_kernels
from shardwise.engines.engine_presets import EnginePreset, engine, max_batched_tokens
from shardwise.engines.forward import ForwardStages, context_gather_s
from shardwise.engines.iteration_heavy import heaviest_pass_s, heaviest_prompt_tokens
from shardwise.engines.iteration_heavy import stacked as _stacked
from shardwise.engines.iteration_heavy import take as _take
from shardwise.engines.llamacpp import layer_split_iteration
from shardwise.engines.llamacpp_tensor import tensor_split_stages
from shardwise.engines.moe import experts_cost, model_moe_split
from shardwise.engines.pipeline import (
    overlapped_host_floor_s,
    pipeline_host_s,
    pipeline_makespan_s,
    pipelined_round_s,
    prefill_apart_round_s,
)
from shardwise.engines.stage_assembly import stages
from shardwise.engines.stage_ends import embedding_cost, head_forward_s, head_inference_tp_s
from shardwise.engines.stage_sends import slowest_stage_send_s
from shardwise.engines.tp_overlap import tp_comm
from shardwise.physics.collectives import Fabric
from shardwise.physics.compute import LayerTimes, layer_times
from shardwise.physics.flops import layer_forward
from shardwise.physics.topology import placement
from shardwise.specs import Scenario
from shardwise.specs._checks import Number
from shardwise.specs.serving import STORAGE_BYTES, ServingWorkload
from shardwise.specs.stages import plan_split


def stage_costs(
    scn: Scenario,
    wl: ServingWorkload,
    decode: np.ndarray,
    prompt_tokens: np.ndarray,
    context: float,
    group_tokens: Number | None = None,
    extend: Number | None = None,
) -> ForwardStages:
    """Per-stage cost of one micro-batch of `decode` sequences and `prompt_tokens` prompt tokens
    (arrays, broadcast). Under data-parallel attention every rank is taken to hold that batch
    unless `group_tokens` says how many tokens a rank holds on average over the group: what the
    routed experts and SGLang's group-split dense parts gather (G x that), the ranks out of phase
    (`engines.inflight_lockstep`); `extend`: a batch on the prompt path (SGLang's all-reduces),
    default where it holds prompt tokens."""
    model, cluster, plan = scn.model, scn.cluster, scn.plan
    gpu, e = cluster.gpu, plan.bytes_per_element
    w, kvb = STORAGE_BYTES[wl.weight_precision], STORAGE_BYTES[wl.kv_precision]
    d = np.asarray(decode, dtype=float)
    q = np.asarray(prompt_tokens, dtype=float)
    c = np.asarray(plan.cp, dtype=float)
    # context parallelism (`engines.forward.serving_context_parallel`): prompt tokens split over
    # the cp ranks, decoding tokens on every one, each rank holding 1/cp of every cache
    tokens = np.maximum(d + q / c, 1.0)
    one = replace(scn, plan=plan.with_(micro_batch=1, global_batch=plan.dp))
    fabric = Fabric.of(cluster)
    place = placement(plan, cluster.gpus_per_node, experts=model.is_moe)
    comm = tp_comm(one, fabric, place["tp"], tokens)
    n = wl.input_len
    group = tokens if group_tokens is None else np.maximum(np.asarray(group_tokens, dtype=float), 1.0)
    ext = q > 0 if extend is None else np.asarray(extend, dtype=bool)

    def engine_own(ffn: Number | None, tokens: Number) -> dict[str, Number]:  # a dense layer's (`engine_kernels`)
        dense = ffn is None  # the all-reduces take the norms in below the engine's size (tokens x h x e bytes each)
        k = fused_kernels(plan.serving_layer_kernels, plan.norm_fusion_max_bytes, plan.tp, tokens * model.hidden * e)
        return {"engine_kernels": k if dense else 0, "fused_residual_norms": plan.fused_residual_norms if dense else 0}

    def times(batch: Number, q_len: Number, kv_len: Number, ffn: Number | None = None) -> LayerTimes:
        own = engine_own(ffn, np.asarray(batch) * np.asarray(q_len))
        decode = bool(np.all(np.asarray(q_len) == 1))  # one-token steps: every engine's decode kernel is fused
        return layer_times(
            layer_forward(model, batch, plan.tp, False, e, q_len, kv_len, w, kvb, ffn=ffn, **own),
            gpu,
            plan.precision,
            True if decode else plan.flash_attention,
            # the engine's attention kernel on this GPU (`engines.engine_attention`: vLLM's Triton kernel
            # on a V100 at the memory-efficient kernel's speed), as the static path prices it
            attention_kernel=plan.attention_kernel,
            cp_comm=plan.cp_comm,
            backward=False,  # inference: the forward GEMMs alone
            training=False,  # the engine's own kernels (`physics.casts.norm_writes_fp8`)
        )

    def linear_s(lt: LayerTimes) -> Number:  # the layers that run on all T tokens together
        return lt.gemm_s + lt.elementwise_s + lt.cast_f_s

    # per distinct value where the scenario holds single numbers (it hashes: no array among its fields)
    per_value = once_per_value if _plain(scn) else _at_once

    decode_attention = per_value(lambda x: times(np.maximum(x, 1.0), 1, context / c).attention_s, d)
    attention = np.where(d > 0, decode_attention, 0.0) + q / n * times(1, n, n).attention_s / c
    reduce = np.where(np.asarray(plan.tp) > 1, comm.all_reduce, 0.0)
    gather = context_gather_s(scn, fabric, place, d, q, kvb) if np.any(c > 1) else 0.0
    linear = per_value(lambda x: linear_s(times(1, x, x)), tokens)
    layer = StageCost(linear + attention, 0.0, 2 * reduce + gather, 0.0)  # attn, MLP
    emb = embedding_cost(one, comm, tokens)
    # the output layer on the decoding tokens and the prompts that finish: few distinct counts
    logits = np.ceil(d + q / n)
    head = StageCost(
        per_value(lambda x: head_forward_s(one, x), logits), 0.0, head_inference_tp_s(one, comm, logits), 0.0
    )
    split = plan_split(model.layers, plan)
    moe = None
    if model.is_moe:  # the MLP is the shared experts (if any) and the routed experts on the T tokens
        shared = model.shared_experts * model.expert_ffn_hidden
        routed = experts_cost(one, fabric, place, group, w, extend=ext)  # SGLang's gather reads `extend`
        compute = per_value(lambda x: linear_s(times(1, x, x, shared)), tokens) + attention + routed.compute_forward_s
        # the shared MLP's reduce carries the experts'
        tp = (1.0 + bool(shared)) * reduce + routed.tp_forward_s + gather
        moe = (StageCost(compute, 0.0, tp, 0.0, ep_forward_s=routed.ep_forward_s), model_moe_split(model, split))
    # SGLang's dense MLPs, shared experts and lm_head over tp x dp under data-parallel attention
    shared_tp = (reduce if model.shared_experts else 0.0) if moe is not None else 0.0
    parts = with_dense_parts(one, fabric, place, tokens, ext, logits, w, (layer, emb, head, moe), shared_tp, group)
    return ForwardStages.of(stages(split, *parts), slowest_stage_send_s(one, fabric, place, comm))


def once_per_value(fn: Callable[[np.ndarray], Number], x: Number) -> Number:
    """`fn(x)` for an element-wise `fn` of `x` alone (its other inputs single numbers), evaluated
    once per distinct value of `x` and gathered back: the same numbers. On the iteration table's
    grid of d x q, the linear layers run on T = d + q tokens (d + q / cp), of which the grid holds
    a third (one GPU per stage) to a tenth (pp = 8) as many values, and the decode attention on d
    (one value per row)."""
    x = np.asarray(x)
    if x.size < 2:
        return fn(x)
    values, where = np.unique(x, return_inverse=True)
    return np.broadcast_to(np.asarray(fn(values)), values.shape)[where.reshape(x.shape)]


def _at_once(fn: Callable[[np.ndarray], Number], x: Number) -> Number:
    return fn(np.asarray(x))


def _plain(scn: Scenario) -> bool:
    try:
        hash(scn)
    except TypeError:
        return False
    return True


@dataclass(frozen=True)
class IterationTimes:
    """Seconds of one iteration and its parts on the slowest stage's critical path (arrays):
    `pp_p2p_s` the pipeline's sends (and llama.cpp's per-stage cost), `pp_wait_s` what the round
    waits beyond the stages' GPU work under pp: the host steps of its micro-batches
    (`engines.pipeline.pipelined_round_s`), the pass of its heaviest micro-batch, whole prompts in
    it (`EnginePreset.whole_prompts`), and, where prefills run apart (SGLang), the decodes stalled
    behind them. The four parts add up to `total_s`."""

    total_s: np.ndarray
    compute_s: np.ndarray
    tp_comm_s: np.ndarray
    pp_p2p_s: np.ndarray
    pp_wait_s: np.ndarray


def iteration_times(
    scn: Scenario,
    wl: ServingWorkload,
    decode: np.ndarray,
    prompt_tokens: np.ndarray,
    context: float,
    budget_tokens: float | None = None,
    group_tokens: Number | None = None,
    extend: Number | None = None,
) -> IterationTimes:
    """One iteration of a replica (`scn` as `engines.serving.serving_scenario` makes it) with
    `decode` sequences decoding and `prompt_tokens` prompt tokens prefilled (see the module
    docstring); 0 when both are 0. `budget_tokens` is one micro-batch's chunked-prefill budget
    (default: the engine's on this GPU); it shapes the round only where the engine prefills
    apart from decoding under pp (`EnginePreset.prefill_apart`). `group_tokens`, `extend`: one pass
    of ranks out of phase (`stage_costs`; one stage, no prompt tokens where prefills run apart)."""
    p = np.asarray(scn.plan.pp, dtype=float)
    d = np.asarray(decode, dtype=float)
    q = np.asarray(prompt_tokens, dtype=float)
    preset = engine(wl.engine)
    if preset.ubatch_tokens:  # llama.cpp: one batch a step, cut into n_ubatch micro-batches
        # on one GPU and under `-sm tensor` too: each micro-batch sizes its own kernels (MMQ's token
        # tile, `physics.mmq_ids`) from its own tokens, as `analyses.serving_pcie.pair_chunk` does
        m_u = np.maximum(np.ceil((d + q) / preset.ubatch_tokens), 1.0)
        fs = _with_sends(stage_costs(scn, wl, d / m_u, q / m_u, context), preset, p > 1)
        if preset.tensor_split == "llama.cpp" and np.any(np.asarray(scn.plan.tp) > 1):  # `-sm tensor`
            tokens = np.maximum(d / m_u + q / m_u, 1.0)  # the step's logits spread over its micro-batches
            fs = tensor_split_stages(fs, scn, tokens, np.ceil(d + q / wl.input_len) / m_u)
        parts = layer_split_iteration(fs, p, m_u, preset.scheduler)
        return IterationTimes(*(np.where((d + q) <= 0, 0.0, x) for x in parts))
    # micro-batches in flight: one per sequence at most (prompts counted whole)
    prompts = np.ceil(q / wl.input_len)
    m = np.minimum(p, np.maximum(d + prompts, 1.0))
    piped = p > 1
    heaviest = preset.whole_prompts and np.any(piped & (prompts > 0))
    if heaviest and budget_tokens is None:
        gpu = scn.cluster.gpu
        budget_tokens = max_batched_tokens(wl.engine, float(np.max(gpu.memory_bytes)), gpu.name)
    per_decode, per_prompt = np.ceil(d / m), np.ceil(q / m)
    if heaviest:  # the even split's micro-batch and the heaviest one, priced in one call
        heavy_q = heaviest_prompt_tokens(wl, q, prompts, m, float(budget_tokens))
        decodes, prompt_tokens = _stacked((per_decode, per_decode), (per_prompt, heavy_q))
        even_and_heavy = stage_costs(scn, wl, decodes, prompt_tokens, context)
        fs, fs_heavy = (_with_sends(_take(even_and_heavy, i, decodes.ndim), preset, piped) for i in (0, 1))
    else:
        fs = _with_sends(stage_costs(scn, wl, per_decode, per_prompt, context, group_tokens, extend), preset, piped)
    c = fs.per_stage
    through = pipeline_makespan_s(c[0], c[1], c[2], p, 1, 1, fs.middle_sum_s(p))
    c_max, compute, tp = fs.slowest(p)
    host = np.where(piped, pipeline_host_s(preset, np.ceil(d / m) + np.ceil(prompts / m)), 0.0)
    gpu_bound = np.maximum(through, m * c_max)
    total = np.maximum(gpu_bound, pipelined_round_s(c_max, c[2], through, m, host, preset.sync_last_stage))
    # one stage: the host prepares the next step while the GPU runs this one, so a step lasts at
    # least its host work (`engines.pipeline.overlapped_host_floor_s`)
    total = np.where(piped, total, overlapped_host_floor_s(total, preset, d + prompts))
    if heaviest:
        heavy = heaviest_pass_s(fs_heavy, p, preset, per_decode, np.ceil(heavy_q / wl.input_len))
        total = np.where(piped & (prompts > 0), np.maximum(total, heavy), total)
    share = gpu_bound / c_max  # the GPU's part in units of the slowest stage's micro-batch
    # what the round waits beyond the GPU's work (host steps, the heaviest micro-batch) apart
    parts = (total, share * compute, share * tp, share * fs.send_s, total - gpu_bound)
    if preset.prefill_apart and np.any(q > 0):
        if budget_tokens is None:
            gpu = scn.cluster.gpu
            budget_tokens = max_batched_tokens(wl.engine, float(np.max(gpu.memory_bytes)), gpu.name)
        apart = _prefill_apart(scn, wl, d, q, context, float(budget_tokens), preset)
        parts = tuple(np.where(q > 0, a, b) for a, b in zip(apart, parts, strict=True))
    idle = (d + q) <= 0
    zero = np.zeros_like(parts[0])
    return IterationTimes(*(np.where(idle, zero, x) for x in parts))


def _with_sends(fs: ForwardStages, preset: EnginePreset, piped: Number) -> ForwardStages:
    """The activations each boundary carries (vLLM, SGLang: hidden states and residual), and
    llama.cpp's per-stage cost, with the send (`engines.engine_presets`)."""
    send = fs.send_s * preset.pp_send_tensors + np.where(piped, preset.stage_overhead_s, 0.0)
    return replace(fs, send_s=send)


def _prefill_apart(
    scn: Scenario,
    wl: ServingWorkload,
    d: np.ndarray,
    q: np.ndarray,
    context: float,
    budget: float,
    preset: EnginePreset,
) -> tuple[Number, Number, Number, Number, Number]:
    """(total, compute, TP, sends, wait) of an iteration whose batches either prefill or
    decode, never both (SGLang: `engines.engine_presets`, "Prefill apart"): the d decoding
    sequences in m_d = min(p, d) decode micro-batches, the q prompt tokens in k = min(p,
    max(ceil(q / budget), prompts)) prefill micro-batches of at most one budget each, extra slots
    of the loop in which those decodes stall (`engines.pipeline.prefill_apart_round_s`). With one
    stage that is a prefill step of the q tokens (at most one budget) and a decode step of the d
    sequences, one after the other: c(0, q) + c(d, 0) instead of c(d, q)."""
    p = np.asarray(scn.plan.pp, dtype=float)
    piped = p > 1
    m_d = np.minimum(p, d)
    # each micro-batch admits the prompts that found room in the cache its own finished requests
    # freed (event_loop_pp processes a micro-batch's results just before scheduling it again) and
    # those that arrived since the micro-batch before it was scheduled (one waiting queue for
    # all micro-batches): the round's prompts spread over up to p prefill micro-batches, one per
    # prompt, each within one budget (fewer where several arrive between two micro-batches: not
    # priced)
    k = np.clip(np.maximum(np.ceil(q / budget), np.ceil(q / wl.input_len)), 1.0, p)
    per_decode, per_prefill = np.ceil(d / np.maximum(m_d, 1.0)), np.ceil(q / k)
    kinds = []
    for fs, requests in (
        (stage_costs(scn, wl, per_decode, np.zeros_like(q), context), per_decode),
        (stage_costs(scn, wl, np.zeros_like(d), per_prefill, context), np.ceil(per_prefill / wl.input_len)),
    ):
        fs = _with_sends(fs, preset, piped)
        c = fs.per_stage
        through = pipeline_makespan_s(c[0], c[1], c[2], p, 1, 1, fs.middle_sum_s(p))
        c_max, compute, tp = fs.slowest(p)
        host = np.where(piped, pipeline_host_s(preset, requests), 0.0)
        period = np.maximum(np.maximum(c_max, host), np.where(preset.sync_last_stage, c[2] + host, 0.0))
        kinds.append((period, through + host, compute, tp, fs.send_s))
    (dec_period, dec_pass, dec_compute, dec_tp, dec_send), (pre_period, pre_pass, pre_compute, pre_tp, pre_send) = kinds
    work = m_d * dec_period + k * pre_period
    rounds = np.maximum(1.0, (m_d + k) / p)
    total = prefill_apart_round_s(work, pre_pass, np.where(m_d > 0, dec_pass, 0.0), k, rounds)
    compute, tp = m_d * dec_compute + k * pre_compute, m_d * dec_tp + k * pre_tp
    sends = np.minimum(m_d * dec_send + k * pre_send, total - compute - tp)
    return total, compute, tp, sends, total - compute - tp - sends


@dataclass(frozen=True)
class IterationTable:
    """Iteration seconds on a grid of (decoding sequences, prompt tokens), interpolated bilinearly
    (the cost is close to piecewise linear in both)."""

    decode: np.ndarray
    prompt_tokens: np.ndarray
    seconds: np.ndarray  # [len(decode), len(prompt_tokens)]

    def __post_init__(self) -> None:
        # the grid as Python lists: the simulator asks once per iteration (tens of thousands of
        # times), and numpy's searchsorted and clip cost microseconds on one value
        lists = (self.decode.tolist(), self.prompt_tokens.tolist(), self.seconds.tolist())
        object.__setattr__(self, "_lists", lists)

    def __call__(self, decode: float, prompt_tokens: float) -> float:
        if decode <= 0 and prompt_tokens <= 0:
            return 0.0
        x, y, z = self._lists  # type: ignore[attr-defined]
        # np.searchsorted's left side is bisect_left; the index clipped to the cells of the grid
        i = min(max(bisect_left(x, decode) - 1, 0), len(x) - 2)
        j = min(max(bisect_left(y, prompt_tokens) - 1, 0), len(y) - 2)
        fx = (decode - x[i]) / (x[i + 1] - x[i])
        fy = (prompt_tokens - y[j]) / (y[j + 1] - y[j])
        top = z[i][j] * (1 - fy) + z[i][j + 1] * fy
        bottom = z[i + 1][j] * (1 - fy) + z[i + 1][j + 1] * fy
        return float(top * (1 - fx) + bottom * fx)


def _axis(top: int, exact: np.ndarray | None = None) -> np.ndarray:
    """0, every integer up to 16, then about 12 points per doubling up to `top` (at least 1),
    every power of two and the `exact` points (GEMM waves make the cost step between points)."""
    top = max(int(top), 1)
    dense = np.arange(0, min(top, 16) + 1)
    if top <= 16:
        return dense.astype(float)
    geo = np.unique(np.round(np.geomspace(16, top, int(12 * np.log2(top / 16)) + 2)))
    powers = 2.0 ** np.arange(4, int(np.log2(top)) + 1)
    extra = np.asarray([] if exact is None else exact, dtype=float)
    points = np.concatenate([dense, geo, powers, extra[(extra > 0) & (extra <= top)], [top]])
    return np.unique(points).astype(float)


def iteration_table(
    scn: Scenario,
    wl: ServingWorkload,
    max_decode: int,
    max_prompt_tokens: int,
    context: float,
    budget_tokens: float | None = None,
) -> IterationTable:
    # whole prompts land on the grid (one request alone prefills exactly its prompt)
    prompts = wl.input_len * np.arange(1, 65)
    d, q = _axis(max_decode), _axis(max_prompt_tokens, prompts)
    t = iteration_times(scn, wl, d[:, None], q[None, :], context, budget_tokens).total_s
    return IterationTable(d, q, np.asarray(t, dtype=float))
