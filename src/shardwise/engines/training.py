"""Closed-form time of one training step under TP x PP x DP (the analytic engine).

Per micro-batch, each pipeline stage j spends c_j = f_j + b_j (+ 2 v t_p2p when the sends
block): forward and backward of its layers (with recomputation and exposed TP collectives), and
one send of activations forward and one of gradients backward per model chunk. Megatron-LM's
1F1B blocks on them and synchronises the device after each (`PIPELINE_SYNC_S`); its interleaved
schedule overlaps them with compute by default (`Plan.overlap_p2p`). The first stage also runs
the embedding, the last the output layer and loss; stages may hold different numbers of layers
(`specs.stages`). For m micro-batches and v model chunks per GPU the pipeline takes

    T_pipe = m max_j c_j + (sum_j c_j - max_j c_j) / v

which for p equal stages is (m + (p - 1)/v) c: the GPipe / 1F1B bubble (p - 1)/m of
Narayanan et al. 2021 Sec. 2.2, divided by v for the interleaved schedule (their Sec. 2.2.2).
Per-micro-batch costs (the weight gradients accumulated into fp32 main_grad, the sends and their
syncs) are inside c_j, so they also grow the bubble. The data-parallel gradient reduction
follows, hidden behind the last backward pass when bucketed and overlapped (and behind the
pipeline drain for later stages) except for its last bucket, then the optimizer, then the
distributed optimizer's parameter all-gather (exposed unless overlapped with the next step's
first forward pass).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce

import numpy as np

from shardwise.engines.costs import (
    StageCost,
    context_parallel,
    cp_step_s,
    embedding_cost,
    head_cost,
    layer_cost,
    select,
    slowest_stage_send_s,
    stages,
    tp_comm,
)
from shardwise.engines.distinct import evaluate_distinct
from shardwise.engines.moe import moe_layers, stage_expert_params, stage_params
from shardwise.engines.pipeline import pipeline_makespan_s
from shardwise.engines.result import StepBreakdown, TrainingEstimate
from shardwise.engines.training_memory import memory_breakdown
from shardwise.errors import SpecError
from shardwise.physics import memory as mem
from shardwise.physics.collectives import Fabric
from shardwise.physics.compute import cast_bytes_per_element, memory_s
from shardwise.physics.flops import layer_forward, logits_forward
from shardwise.physics.moe import experts_forward
from shardwise.physics.topology import placement
from shardwise.precisions import FP4_PRECISIONS
from shardwise.specs import Model, Recompute, Scenario, Schedule
from shardwise.specs._checks import Number
from shardwise.specs.hardware import is_fp8
from shardwise.specs.rules import moe_training_rules, raise_first
from shardwise.specs.stages import plan_split

# Megatron-LM's fp16/bf16 optimizer (megatron/core/optimizer/optimizer.py,
# `Float16OptimizerWithFloat16Params`), bytes per parameter: copy 16-bit grads to fp32 (2 + 4),
# unscale and inf-check (4), gradient norm (4), fused Adam (read p, m, v, g: 16; write p, m, v: 12),
# copy fp32 weights back to 16-bit (4 + 2). 48 bytes per parameter at HBM speed.
OPTIMIZER_TRAFFIC_BYTES_PER_PARAM = 48.0
# Kernel launches charged to that optimizer step: a project estimate (its passes run as a few
# multi-tensor kernels, Apex/Transformer Engine `multi_tensor_apply`), not a count.
OPTIMIZER_KERNELS = 4
# After every blocking batched send/receive Megatron-LM calls torch.cuda.synchronize()
# (megatron/core/pipeline_parallel/p2p_communication.py, "to protect against race condition when
# using batch_isend_irecv"): the GPU's queue runs dry and waits for the host to launch the next
# kernel, about one PyTorch collective call's host latency (the 20 us the link presets use).
PIPELINE_SYNC_S = 20e-6
# Megatron-Core's data-parallel gradient buckets: max(40M, 1M x dp) parameters
# (megatron/core/distributed/distributed_data_parallel.py). The reduction of the last bucket (the
# first layers' gradients, ready only when the backward pass ends) cannot hide behind it, and
# the first bucket's parameter all-gather is needed before the first layer can run.
DP_BUCKET_PARAMS = 40e6
DP_BUCKET_PARAMS_PER_RANK = 1e6


def stage_sends_per_micro_batch_s(scn: Scenario, send_s: Number) -> Number:
    """What pipeline sends add to one stage's micro-batch: 2 v transfers (activations forward,
    gradients backward, per model chunk) and, when blocking, a device sync after each."""
    plan = scn.plan
    v = np.asarray(plan.vpp, dtype=float)
    blocking = ~np.asarray(plan.overlap_p2p, dtype=bool)
    sync = np.where(np.asarray(plan.pipeline_sync, dtype=bool), PIPELINE_SYNC_S, 0.0)
    return np.where(np.asarray(plan.pp) > 1, 2 * v * (send_s + np.where(blocking, sync, 0.0)), 0.0)


def estimate_training_step(scn: Scenario) -> TrainingEstimate:
    """Closed-form estimate of one optimizer step (see the module docstring); array-valued
    scenarios whose configurations repeat are priced once per distinct one
    (`engines.distinct`)."""
    return evaluate_distinct(estimate_each_training_step, scn)


def estimate_each_training_step(scn: Scenario) -> TrainingEstimate:
    """`estimate_training_step` computed for every element (the reference the distinct path is
    checked against)."""
    model, cluster, plan = scn.model, scn.cluster, scn.plan
    if plan.precision in FP4_PRECISIONS:
        raise SpecError("precision: fp4 is modelled for serving only (FP4 weights); train in bf16, fp8 or mxfp8")
    raise_first(
        moe_training_rules(
            model.experts,
            plan.tp,
            plan.sequence_parallel,
            plan.ep,
            plan.pp,
            np.asarray(plan.schedule) == Schedule.INTERLEAVED,
            np.asarray(plan.recompute) == Recompute.FULL,
            plan.moe_overlap,
        )
    )
    fabric = Fabric.of(cluster)
    place = placement(plan, cluster.gpus_per_node, experts=model.is_moe)
    p, v, m = (np.asarray(x, dtype=float) for x in (plan.pp, plan.vpp, plan.num_micro_batches))
    split = plan_split(model.layers, plan)

    local = context_parallel(scn)  # one CP rank's tokens (the scenario itself without CP)
    comm = tp_comm(local, fabric, place["tp"])
    cp_step = cp_step_s(scn, fabric, place)
    layer, _ = layer_cost(local, comm, kv_len=model.seq_len, cp=plan.cp, cp_step=cp_step)
    emb = embedding_cost(local, comm)
    head = head_cost(local, comm)
    moe = moe_layers(local, comm, fabric, place, split, model.seq_len, plan.cp, cp_step, training=True)
    first, middle, last, middle_sum = stages(split, layer, emb, head, moe)

    # Pipeline sends: blocking ones (Megatron's 1F1B) sit on the stage's critical path; overlapped
    # ones (interleaved with --overlap-p2p-communication) run beside compute and only matter
    # when they are longer than it.
    p2p = stage_sends_per_micro_batch_s(scn, slowest_stage_send_s(local, fabric, place, comm))
    overlap = np.asarray(plan.overlap_p2p, dtype=bool)

    def with_sends(total: Number) -> Number:
        return np.where(overlap, np.maximum(total, p2p), total + p2p)

    # the stack's fixed cost per micro-batch (0 unless calibrated) is on every stage's own time
    mb_over = np.asarray(cluster.micro_batch_overhead_s, dtype=float)
    c_first, c_mid, c_last = (with_sends(s.total_s) + mb_over for s in (first, middle, last))
    n_mid = np.maximum(p - 2, 0.0)
    c_mid_sum = np.where(overlap, np.maximum(middle_sum.total_s, n_mid * p2p), middle_sum.total_s + n_mid * p2p)
    c_mid_sum = c_mid_sum + n_mid * mb_over
    pipe_s = pipeline_makespan_s(c_first, c_mid, c_last, p, m, v, c_mid_sum)
    # ZB-H1 (Qi et al. 2023): deferred weight-gradient passes fill the cool-down, so the bubble
    # is (p - 1)(c - 2 T_W) instead of (p - 1) c per micro-batch time c.
    w_stage = np.where(p > 2, middle.weight_grad_s, first.weight_grad_s)
    zb = np.asarray(plan.schedule) == Schedule.ZB_H1
    pipe_s = np.where(
        zb, np.maximum(pipe_s - (p - 1) * 2 * w_stage, m * np.maximum(np.maximum(c_first, c_mid), c_last)), pipe_s
    )
    c_max = np.maximum(np.maximum(c_first, np.where(p > 2, c_mid, 0.0)), c_last)
    slowest = select(c_first >= np.maximum(c_mid, c_last), first, select(c_last >= c_mid, last, middle))
    exposed_p2p = np.where(overlap, np.maximum(0.0, c_max - mb_over - slowest.total_s), p2p)

    params, expert_params = stage_params(model, plan, split), stage_expert_params(model, plan, split)
    dp_s, dp_hidden = _data_parallel_exposed_s(scn, fabric, place, params, (first, middle, last), m, v, expert_params)
    optimizer_s = reduce(np.maximum, (optimizer_time_s(scn, n, x) for n, x in zip(params, expert_params, strict=True)))

    breakdown = StepBreakdown(
        compute_s=m * (slowest.compute_forward_s + slowest.compute_backward_s),
        tp_comm_s=m * (slowest.tp_forward_s + slowest.tp_backward_s),
        ep_comm_s=m * (slowest.ep_forward_s + slowest.ep_backward_s),
        pp_p2p_s=m * exposed_p2p,
        pp_bubble_s=np.maximum(pipe_s - m * c_max, 0.0),  # never below 0 by rounding
        dp_comm_s=dp_s,
        optimizer_s=optimizer_s,
        overhead_s=m * mb_over + cluster.step_overhead_s,
    )
    step = pipe_s + dp_s + optimizer_s + cluster.step_overhead_s
    model_flops, hw_flops = flops_per_step(scn)
    return TrainingEstimate(
        scenario=scn,
        step_time_s=step,
        breakdown=breakdown,
        memory=memory_breakdown(local, params, m, split, expert_params, moe[1] if moe is not None else None),
        model_flops_per_step=model_flops,
        hardware_flops_per_step=hw_flops,
        bubble_fraction=breakdown.pp_bubble_s / step,
        hidden_comm_s={"tp_comm": m * slowest.tp_hidden_s, "dp_comm": dp_hidden},
        masked_attention_flops_per_step=masked_attention_flops_per_step(scn),
    )


@dataclass(frozen=True)
class DpComm:
    """One stage's data-parallel communication per step (seconds) and what it may hide behind.

    `grad_s`: gradient all-reduce (ZeRO-0) or reduce-scatter (ZeRO >= 1; ZeRO-2/3 one per
    micro-batch), `grad_window_s` the backward compute it overlaps when bucketed, `grad_bucket_s`
    the last bucket's share (never hidden); `gather_s`: the parameter all-gather (ZeRO-1/2 after
    the optimizer; ZeRO-3 before every forward and backward), `gather_window_s` what it may hide
    behind (ZeRO-1/2 with overlap_param_gather: the next step's first forward; ZeRO-3: all
    compute), `gather_bucket_s` the first bucket's share (needed at once).
    """

    grad_s: Number
    grad_window_s: Number
    grad_bucket_s: Number
    gather_s: Number
    gather_window_s: Number
    gather_bucket_s: Number
    shared_window: Number = False  # ZeRO-3: gathers and reductions overlap the same compute

    @property
    def total_s(self) -> Number:
        return self.grad_s + self.gather_s

    def plus(self, other: DpComm) -> DpComm:
        """Two groups' communication over the same windows, one after the other (the dense
        parameters' and the routed experts'): their times and unhideable buckets add."""
        return DpComm(
            self.grad_s + other.grad_s,
            self.grad_window_s,
            self.grad_bucket_s + other.grad_bucket_s,
            self.gather_s + other.gather_s,
            self.gather_window_s,
            self.gather_bucket_s + other.gather_bucket_s,
            self.shared_window,
        )

    def exposed_s(self, overlap_grad: Number, drain_s: Number = 0.0) -> tuple[Number, Number]:
        """(exposed gradient part, exposed gather part): each is what its window does not
        cover, and at least its unhideable bucket. ZeRO-3 (`shared_window`): the reductions
        hide behind the backward passes the gathers also use; both share the compute, so what
        exceeds it (or the unhideable buckets) is exposed. A scalar ZeRO stage or overlap flag
        prices only its own branch (the same numbers as selecting among all of them)."""
        overlap = np.asarray(overlap_grad, dtype=bool)
        z3 = np.asarray(self.shared_window, dtype=bool)
        if z3.ndim == 0 and bool(z3):
            return self._shared_s(overlap, drain_s), 0.0
        grad, gather = self._grad_s(overlap, drain_s), self._gather_s()
        if z3.ndim == 0:
            return grad, gather
        return np.where(z3, self._shared_s(overlap, drain_s), grad), np.where(z3, 0.0, gather)

    def _grad_s(self, overlap: np.ndarray, drain_s: Number) -> Number:
        if overlap.ndim == 0 and not bool(overlap):  # no window: the whole reduction
            return self.grad_s
        window = np.where(overlap, self.grad_window_s + drain_s, 0.0)
        grad = np.maximum(self.grad_s - window, np.where(window > 0, self.grad_bucket_s, self.grad_s))
        return np.minimum(grad, self.grad_s)

    def _gather_s(self) -> Number:
        window = self.gather_window_s
        if np.ndim(window) == 0 and not window:  # no window: the whole gather
            return self.gather_s
        gather = np.maximum(self.gather_s - window, np.where(window > 0, self.gather_bucket_s, self.gather_s))
        return np.minimum(gather, self.gather_s)

    def _shared_s(self, overlap: np.ndarray, drain_s: Number) -> Number:
        both = self.grad_s + self.gather_s
        shared_window = self.gather_window_s + np.where(overlap, drain_s, 0.0)
        buckets = np.where(overlap, self.grad_bucket_s, self.grad_s) + self.gather_bucket_s
        return np.minimum(both, np.maximum(both - shared_window, buckets))


def dp_comm(
    scn: Scenario,
    fabric: Fabric,
    place: dict[str, Number],
    n_params: Number,
    cost: StageCost,
    m: Number,
    experts: bool = False,
) -> DpComm:
    """The data-parallel communication of one stage holding `n_params` parameters per GPU (with
    `experts`: routed-expert parameters, reduced over the expert-data-parallel ranks).

    ZeRO-0: all-reduce of the gradients; ZeRO-1: reduce-scatter of the gradients + all-gather of
    the updated 16-bit weights (the same bytes, Rajbhandari et al. 2020 Sec. 7; Megatron's
    distributed optimizer); ZeRO-2: a reduce-scatter per micro-batch (gradients stay sharded);
    ZeRO-3: also two weight all-gathers per micro-batch, prefetched behind the forward and
    backward passes (no gather after the optimizer).
    """
    plan = scn.plan
    z = np.asarray(plan.zero_stage)
    if experts:
        dp = np.asarray(plan.expert_dp, dtype=float)
        group = fabric.group(dp, place["edp"])
    else:
        dp = np.asarray(plan.dp, dtype=float) * np.asarray(plan.cp)  # CP ranks hold the same weights
        group = fabric.group(dp, place["dpcp"])
    g_bytes, w_bytes = mem.grad_bytes_per_param(plan.precision), mem.weight_bytes_per_param(plan.precision)
    bucket = np.minimum(n_params, np.maximum(DP_BUCKET_PARAMS, DP_BUCKET_PARAMS_PER_RANK * dp))
    backward = cost.compute_backward_s + cost.tp_backward_s
    forward = cost.compute_forward_s + cost.tp_forward_s
    overlap_gather = np.asarray(plan.overlap_param_gather, dtype=bool)
    priced: dict[str, Number] = {}

    def price(name: str) -> Number:
        """One collective, priced when a ZeRO stage present first uses it."""
        if name not in priced:
            op, n = {
                "all_reduce": (group.all_reduce, n_params * g_bytes),
                "reduce_scatter": (group.reduce_scatter, n_params * g_bytes),
                "all_gather": (group.all_gather, n_params * w_bytes),
                "bucket_all_reduce": (group.all_reduce, bucket * g_bytes),
                "bucket_reduce_scatter": (group.reduce_scatter, bucket * g_bytes),
                "bucket_all_gather": (group.all_gather, bucket * w_bytes),
            }[name]
            priced[name] = op(n)
        return priced[name]

    def stage(k: int) -> tuple[Number, ...]:
        """DpComm's fields for ZeRO stage k."""
        after_optimizer = np.where(overlap_gather, forward, 0.0)  # ZeRO-1/2's gather behind the next forward
        if k == 0:
            return price("all_reduce"), backward, price("bucket_all_reduce"), 0.0, 0.0, price("bucket_all_gather")
        per_step = k == 1  # ZeRO-1 reduces once per step, ZeRO-2/3 once per micro-batch
        grad = price("reduce_scatter") if per_step else m * price("reduce_scatter")
        window = backward if per_step else m * backward
        if k < 3:
            return (
                grad,
                window,
                price("bucket_reduce_scatter"),
                price("all_gather"),
                after_optimizer,
                price("bucket_all_gather"),
            )
        # ZeRO-3: two gathers per micro-batch, prefetched behind all the compute but the first of
        # each forward and backward pass
        gathers = 2 * m * price("all_gather"), m * cost.total_s, 2 * m * price("bucket_all_gather")
        return grad, window, price("bucket_reduce_scatter"), *gathers

    if z.ndim == 0:  # one ZeRO stage: only its own collectives are priced
        return DpComm(*stage(int(z)), shared_window=int(z) == 3)
    fields = zip(*(stage(k) for k in range(4)), strict=True)
    chosen = [np.select([z == 0, z == 1, z == 2], list(v[:3]), v[3]) for v in fields]
    return DpComm(*chosen, shared_window=z == 3)


def _data_parallel_exposed_s(
    scn: Scenario,
    fabric: Fabric,
    place: dict[str, Number],
    params: tuple[Number, Number, Number],
    stages: tuple[StageCost, StageCost, StageCost],
    m: Number,
    v: Number,
    expert_params: tuple[Number, Number, Number] = (0.0, 0.0, 0.0),
) -> tuple[Number, Number]:
    """(exposed, hidden) seconds of gradient reduction and ZeRO parameter gathers: the stage whose
    exposed part is largest sets the step. With overlap the reduction runs in buckets during the
    last micro-batch's backward pass; stage i of p also has i backward chunks of pipeline drain to
    hide behind; the last bucket is always exposed. The parameter all-gather after the optimizer
    is exposed unless overlap_param_gather (then all but its first bucket hides behind the next
    step's first forward). Routed-expert parameters (`expert_params`, part of `params`) are
    reduced over their own expert-data-parallel group, after the others.
    """
    plan = scn.plan
    p = np.asarray(plan.pp, dtype=float)
    exposed, totals = [], []
    for index, n_params, n_expert, cost in zip((0.0, 1.0, p - 1), params, expert_params, stages, strict=True):
        comm = dp_comm(scn, fabric, place, n_params - n_expert, cost, m)
        if scn.model.is_moe:
            comm = comm.plus(dp_comm(scn, fabric, place, n_expert, cost, m, experts=True))
        # stage i ends its last backward i chunks early
        drain = index * (cost.compute_backward_s + cost.tp_backward_s) / v
        grad, gather = comm.exposed_s(plan.overlap_grad_reduce, drain)
        exposed.append(grad + gather)
        totals.append(comm.total_s)
    mid = np.where(p > 2, exposed[1], 0.0)
    dp_exposed = np.maximum(np.maximum(exposed[0], mid), exposed[2])
    # the hidden share of the stage whose exposed part sets the step
    pick = np.where(exposed[0] >= np.maximum(mid, exposed[2]), 0, np.where(exposed[2] >= mid, 2, 1))
    hidden = np.choose(pick, [totals[i] - exposed[i] for i in range(3)])
    return dp_exposed + tied_embedding_sync_s(scn, fabric, place), hidden


def tied_embedding_sync_s(scn: Scenario, fabric: Fabric, place: dict[str, Number]) -> Number:
    """Tied word embeddings: the first and the last stage all-reduce their copy's gradient after
    the backward pass (Megatron-LM), over the link between them."""
    model, plan = scn.model, scn.plan
    p = np.asarray(plan.pp, dtype=float)
    if not model.tied_embeddings:
        return 0.0
    grads = mem.grad_bytes_per_param(plan.precision) * model.vocab * model.hidden / plan.tp
    sync = fabric.group(2, np.where(place["pp"] < p, 1, 2)).all_reduce(grads)
    return np.where(p > 1, sync, 0.0)


def optimizer_time_s(scn: Scenario, n_params: Number, n_expert: Number = 0.0) -> Number:
    """The Adam update of `n_params` parameters (divided by dp x cp under ZeRO >= 1; the
    `n_expert` routed-expert ones among them by expert_dp) at HBM speed; in FP8 training also the
    once-per-step cast of every local weight to FP8 in both layouts
    (`physics.compute.cast_bytes_per_element`), which the first micro-batch caches for the rest."""
    plan = scn.plan
    sharded = np.asarray(plan.zero_stage) >= 1
    shards = np.asarray(plan.dp) * np.asarray(plan.cp)  # the distributed optimizer shards over dp x cp
    expert_shards = np.where(sharded, plan.expert_dp, 1) if scn.model.is_moe else 1
    local = (n_params - n_expert) / np.where(sharded, shards, 1) + n_expert / expert_shards
    gpu = scn.cluster.gpu
    update = memory_s(local * OPTIMIZER_TRAFFIC_BYTES_PER_PARAM, gpu, kernels=OPTIMIZER_KERNELS)
    if not is_fp8(plan.precision):
        return update
    return update + memory_s(cast_bytes_per_element(plan.precision) * n_params, gpu)


def masked_attention_flops_per_step(scn: Scenario) -> Number:
    """The causally masked part of the attention square in the model FLOPs (3 passes, all GPUs):
    what a causal model does not need (`TrainingEstimate.masked_attention_flops_per_step`)."""
    model, plan = scn.model, scn.plan
    one = layer_forward(model, 1, 1, False, plan.bytes_per_element, cp=plan.cp)
    masked = (1.0 - one.causal_fraction) * (one.scores.flops + one.context.flops)
    return plan.global_batch * 3 * model.layers * masked


def layers_model_flops(model: Model, bytes_per_element: float) -> Number:
    """Forward FLOPs of every layer for one sequence (Megatron's convention): a mixture-of-experts
    layer counts its attention, shared experts, router and experts_per_token routed experts."""
    dense = layer_forward(model, 1, 1, False, bytes_per_element).model_flops
    if not model.is_moe:
        return model.layers * dense
    shared = model.shared_experts * model.expert_ffn_hidden
    attention = layer_forward(model, 1, 1, False, bytes_per_element, ffn=shared).model_flops
    routed = experts_forward(model, model.seq_len, 1, 1, bytes_per_element).model_flops
    n_moe = model.moe_layers
    return (model.layers - n_moe) * dense + n_moe * (attention + routed)


def flops_per_step(scn: Scenario) -> tuple[Number, Number]:
    """Model FLOPs (3 passes) and hardware FLOPs (+ recomputation) of one step, all GPUs."""
    model, plan = scn.model, scn.plan
    one = layer_forward(model, 1, 1, False, plan.bytes_per_element)
    layers_fwd = layers_model_flops(model, plan.bytes_per_element)
    logits = logits_forward(model, 1, 1, plan.bytes_per_element).flops
    per_seq = 3 * (layers_fwd + logits)
    rc = np.asarray(plan.recompute)
    redo = np.select(
        [rc == Recompute.FULL, rc == Recompute.SELECTIVE],
        [layers_fwd, model.layers * (one.scores.flops + one.context.flops)],
        0.0,
    )
    redo = np.where((rc == Recompute.SELECTIVE) & np.asarray(plan.flash_attention, dtype=bool), 0.0, redo)
    return plan.global_batch * per_seq, plan.global_batch * (per_seq + redo)


def layer_times_s(scn: Scenario) -> tuple[Number, Number]:
    """(forward, backward) seconds of one transformer layer for one micro-batch on one GPU,
    exposed TP communication and recomputation included (what Korthikanti et al. 2022 Table 4
    reports)."""
    cluster, plan = scn.cluster, scn.plan
    fabric = Fabric.of(cluster)
    place = placement(plan, cluster.gpus_per_node)
    local = context_parallel(scn)
    cost, _ = layer_cost(
        local,
        tp_comm(local, fabric, place["tp"]),
        kv_len=scn.model.seq_len,
        cp=plan.cp,
        cp_step=cp_step_s(scn, fabric, place),
    )
    return cost.compute_forward_s + cost.tp_forward_s, cost.compute_backward_s + cost.tp_backward_s
