"""Closed-form time of one training step under TP x PP x DP (the analytic engine).

Per micro-batch, each pipeline stage j spends c_j = f_j + b_j + 2 v t_p2p: forward and
backward of its l/p layers (with recomputation and exposed TP collectives), and one send of
activations forward and one of gradients backward per model chunk (Megatron-LM's blocking
send/receive). The first stage also runs the embedding, the last the output layer and loss.
For m micro-batches and v model chunks per GPU the pipeline takes

    T_pipe = m max_j c_j + (sum_j c_j - max_j c_j) / v

which for p equal stages is (m + (p - 1)/v) c: the GPipe / 1F1B bubble (p - 1)/m of
Narayanan et al. 2021 Sec. 2.2, divided by v for the interleaved schedule (their Sec. 2.2.2).
The data-parallel gradient reduction follows, hidden behind the last backward pass when
bucketed and overlapped (and behind the pipeline drain for later stages), then the optimizer.
"""

from __future__ import annotations

import numpy as np

from shardwise.engines.costs import (
    StageCost,
    embedding_cost,
    head_cost,
    layer_cost,
    p2p_per_transfer,
    select,
    stages,
    tp_comm,
)
from shardwise.engines.result import StepBreakdown, TrainingEstimate
from shardwise.physics import memory as mem
from shardwise.physics.collectives import Fabric
from shardwise.physics.compute import memory_s
from shardwise.physics.flops import layer_forward, logits_forward
from shardwise.physics.params import stage_params_per_gpu
from shardwise.physics.topology import group_placement
from shardwise.specs import Recompute, Scenario, Schedule
from shardwise.specs._checks import Number

# Megatron-LM's fp16/bf16 optimizer, bytes per parameter: copy 16-bit grads to fp32 (2 + 4),
# unscale and inf-check (4), gradient norm (4), fused Adam (read p, m, v, g: 16; write p, m, v: 12),
# copy fp32 weights back to 16-bit (4 + 2). 48 bytes per parameter at HBM speed.
OPTIMIZER_TRAFFIC_BYTES_PER_PARAM = 48.0


def pipeline_makespan_s(
    c_first: Number, c_middle: Number, c_last: Number, pp: Number, micro_batches: Number, vpp: Number = 1
) -> Number:
    """T = m max_j c_j + (sum_j c_j - max_j c_j) / v for stages first, (p - 2) x middle, last.

    c_j is one micro-batch's forward + backward (+ sends) on stage j. Equal stages give
    (m + (p - 1)/v) c: the bubble (p - 1)/m of GPipe and 1F1B (Narayanan et al. 2021 Sec. 2.2),
    divided by v with v model chunks per GPU (Sec. 2.2.2). With p = 1 the single stage is c_first.
    """
    p = np.asarray(pp, dtype=float)
    c_max = np.maximum(np.maximum(c_first, np.where(p > 2, c_middle, 0.0)), c_last)
    c_sum = np.where(p == 1, c_first, c_first + (p - 2) * c_middle + c_last)
    return micro_batches * c_max + (np.where(p == 1, c_first, c_sum) - c_max) / vpp


def estimate_training_step(scn: Scenario) -> TrainingEstimate:
    """Closed-form estimate of one optimizer step (see the module docstring)."""
    model, cluster, plan = scn.model, scn.cluster, scn.plan
    fabric = Fabric(cluster.intra_node_link, cluster.inter_node_link)
    place = group_placement(plan.tp, plan.dp, plan.pp, cluster.gpus_per_node)
    p, v, m = (np.asarray(x, dtype=float) for x in (plan.pp, plan.vpp, plan.num_micro_batches))

    comm = tp_comm(scn, fabric, place["tp"])
    layer, _ = layer_cost(scn, comm)
    emb = embedding_cost(scn, comm)
    head = head_cost(scn, comm)
    per_stage = model.layers / p

    first, middle, last = stages(per_stage, p, layer, emb, head)

    p2p = p2p_per_transfer(scn, fabric, place, comm) * 2 * v
    c_first, c_mid, c_last = (s.total + p2p for s in (first, middle, last))
    pipe_s = pipeline_makespan_s(c_first, c_mid, c_last, p, m, v)
    # ZB-H1 (Qi et al. 2023): deferred weight-gradient passes fill the cool-down, so the bubble
    # is (p - 1)(c - 2 T_W) instead of (p - 1) c per micro-batch time c.
    w_stage = np.where(p > 2, middle.weight_s, first.weight_s)
    zb = np.asarray(plan.schedule) == Schedule.ZB_H1
    pipe_s = np.where(
        zb, np.maximum(pipe_s - (p - 1) * 2 * w_stage, m * np.maximum(np.maximum(c_first, c_mid), c_last)), pipe_s
    )
    c_max = np.maximum(np.maximum(c_first, np.where(p > 2, c_mid, 0.0)), c_last)
    slowest = select(c_first >= np.maximum(c_mid, c_last), first, select(c_last >= c_mid, last, middle))

    params_first, params_mid, params_last = stage_params_per_gpu(model, plan.tp, plan.pp)
    dp_s, dp_hidden = _data_parallel_exposed_s(
        scn, fabric, place, (params_first, params_mid, params_last), (first, middle, last), m, v
    )
    optimizer_s = optimizer_time_s(scn, np.maximum(np.maximum(params_first, params_mid), params_last))

    breakdown = StepBreakdown(
        compute_s=m * (slowest.compute_f + slowest.compute_b),
        tp_comm_s=m * (slowest.tp_f + slowest.tp_b),
        pp_p2p_s=m * p2p,
        pp_bubble_s=pipe_s - m * c_max,
        dp_comm_s=dp_s,
        optimizer_s=optimizer_s,
    )
    step = pipe_s + dp_s + optimizer_s
    model_flops, hw_flops = _flops_per_step(scn)
    return TrainingEstimate(
        scenario=scn,
        step_time_s=step,
        breakdown=breakdown,
        memory=_memory(scn, (params_first, params_last), m),
        model_flops_per_step=model_flops,
        hardware_flops_per_step=hw_flops,
        bubble_fraction=breakdown.pp_bubble_s / step,
        hidden_comm_s={"tp_comm": m * slowest.tp_hidden, "dp_comm": dp_hidden},
    )


def _data_parallel_exposed_s(
    scn: Scenario,
    fabric: Fabric,
    place: dict[str, Number],
    params: tuple[Number, Number, Number],
    stages: tuple[StageCost, StageCost, StageCost],
    m: Number,
    v: Number,
) -> tuple[Number, Number]:
    """(exposed, hidden) seconds of gradient reduction and ZeRO parameter gathers.

    ZeRO 0: all-reduce of the gradients; ZeRO 1/2: reduce-scatter of gradients + all-gather of
    updated 16-bit weights (the same bytes, Rajbhandari et al. 2020 Sec. 7); ZeRO 3 also
    gathers the weights before each forward and backward of every micro-batch, prefetched behind
    compute. With overlap the reduction runs in buckets during the last micro-batch's backward
    pass; stage i of p also has i backward chunks of pipeline drain to hide behind.
    """
    plan = scn.plan
    overlap = np.asarray(plan.overlap_grad_reduce, dtype=bool)
    p = np.asarray(plan.pp, dtype=float)
    exposed, totals = [], []
    for index, n_params, cost in zip((0.0, 1.0, p - 1), params, stages, strict=True):
        comm, hide = dp_comm_and_window_s(scn, fabric, place, n_params, cost, m)
        drain = index * (cost.compute_b + cost.tp_b) / v  # stage i ends its last backward i chunks early
        exposed.append(np.maximum(0.0, comm - np.where(overlap, hide, 0.0) - drain))
        totals.append(comm)
    mid = np.where(p > 2, exposed[1], 0.0)
    dp_exposed = np.maximum(np.maximum(exposed[0], mid), exposed[2])
    # the hidden share of the stage whose exposed part sets the step
    pick = np.where(exposed[0] >= np.maximum(mid, exposed[2]), 0, np.where(exposed[2] >= mid, 2, 1))
    hidden = np.choose(pick, [totals[i] - exposed[i] for i in range(3)])
    return dp_exposed + tied_embedding_sync_s(scn, fabric, place), hidden


def dp_comm_and_window_s(
    scn: Scenario, fabric: Fabric, place: dict[str, Number], n_params: Number, cost: StageCost, m: Number
) -> tuple[Number, Number]:
    """(seconds of data-parallel communication of one stage per step, compute it may hide behind).

    ZeRO-0: all-reduce of the gradients, behind the last backward pass; ZeRO-1: reduce-scatter of
    the gradients + all-gather of the updated 16-bit weights (the same bytes, Rajbhandari et al.
    2020 Sec. 7); ZeRO-2: a reduce-scatter per micro-batch (gradients stay sharded), behind every
    backward pass; ZeRO-3: also two weight all-gathers per micro-batch, prefetched behind the
    forward and backward passes (no gather after the optimizer). Each window is used once.
    """
    plan = scn.plan
    z = np.asarray(plan.zero_stage)
    group = fabric.group(plan.dp, place["dp"])
    grads = n_params * mem.grad_bytes_per_param(plan.precision)
    weights = n_params * mem.weight_bytes_per_param(plan.precision)
    all_reduce, scatter, gather = group.all_reduce(grads), group.reduce_scatter(grads), group.all_gather(weights)
    comm = np.select(
        [z == 0, z == 1, z == 2], [all_reduce, scatter + gather, m * scatter + gather], m * (scatter + 2 * gather)
    )
    backward = cost.compute_b + cost.tp_b
    hide = np.select([z <= 1, z == 2], [backward, m * backward], m * cost.total)
    return comm, hide


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


def optimizer_time_s(scn: Scenario, n_params: Number) -> Number:
    """The Adam update of `n_params` parameters (divided by dp under ZeRO >= 1) at HBM speed."""
    plan = scn.plan
    local = n_params / np.where(np.asarray(plan.zero_stage) >= 1, plan.dp, 1)
    return memory_s(local * OPTIMIZER_TRAFFIC_BYTES_PER_PARAM, scn.cluster.gpu, kernels=4)


def _flops_per_step(scn: Scenario) -> tuple[Number, Number]:
    """Model FLOPs (3 passes) and hardware FLOPs (+ recomputation) of one step, all GPUs."""
    model, plan = scn.model, scn.plan
    one = layer_forward(model, 1, 1, False, plan.bytes_per_element)
    layer_fwd = one.model_flops
    logits = logits_forward(model, 1, 1, plan.bytes_per_element).flops
    per_seq = 3 * (model.layers * layer_fwd + logits)
    rc = np.asarray(plan.recompute)
    redo = np.select(
        [rc == Recompute.FULL, rc == Recompute.SELECTIVE],
        [model.layers * layer_fwd, model.layers * (one.scores.flops + one.context.flops)],
        0.0,
    )
    redo = np.where((rc == Recompute.SELECTIVE) & np.asarray(plan.flash_attention, dtype=bool), 0.0, redo)
    return plan.global_batch * per_seq, plan.global_batch * (per_seq + redo)


def _memory(scn: Scenario, params: tuple[Number, Number], m: Number) -> mem.MemoryBreakdown:
    """The fuller of the first stage (most activations, embedding) and the last (output layer)."""
    model, plan = scn.model, scn.plan
    e = plan.bytes_per_element
    per_layer = mem.layer_activation_bytes(
        model, plan.micro_batch, plan.tp, plan.sequence_parallel, plan.recompute, plan.flash_attention, e
    )
    # During the backward pass recomputation rebuilds one layer's activations at a time: all of
    # them with full recomputation, the attention scores with selective (nothing with flash).
    unsaved = mem.layer_activation_bytes(
        model, plan.micro_batch, plan.tp, plan.sequence_parallel, Recompute.NONE, plan.flash_attention, e
    )
    rc = np.asarray(plan.recompute)
    working = np.select([rc == Recompute.FULL, rc == Recompute.SELECTIVE], [unsaved, unsaved - per_layer], 0.0)
    p = np.asarray(plan.pp, dtype=float)
    t, b, s = plan.tp, plan.micro_batch, model.seq_len
    in_first = mem.layers_in_flight(model.layers, p, plan.vpp, m, plan.schedule, 0)
    in_last = mem.layers_in_flight(model.layers, p, plan.vpp, m, plan.schedule, p - 1)
    mb_first = in_first / (model.layers / p)  # micro-batches in flight on the first stage
    sp_split = np.where(np.asarray(plan.sequence_parallel, dtype=bool), t, 1)
    emb_mask = (mem.DROPOUT_MASK_BYTES if model.dropout else 0.0) * s * b * model.hidden * mb_first / sp_split
    # Output layer (Korthikanti Sec. 4.3): final-norm input and output-projection input (e s b h / t
    # each with SP), fp32 logits (4 s b V / t), for the micro-batch at the loss.
    head = 2 * e * s * b * model.hidden / sp_split + 4.0 * s * b * model.vocab / t
    act_first = in_first * per_layer + working + emb_mask + np.where(p == 1, head, 0.0)
    act_last = in_last * per_layer + working + head
    states = [mem.model_state_bytes(n, plan.dp, plan.zero_stage, plan.precision) for n in params]
    total_first = sum(states[0]) + act_first
    total_last = sum(states[1]) + act_last
    use_first = total_first >= total_last
    w, g, o = (np.where(use_first, a, b_) for a, b_ in zip(states[0], states[1], strict=True))
    return mem.MemoryBreakdown(
        weights_bytes=w,
        gradients_bytes=g,
        optimizer_bytes=o,
        activations_bytes=np.where(use_first, act_first, act_last),
        reserved_bytes=mem.RUNTIME_RESERVED_BYTES + 0.0 * w,
    )


def layer_times_s(scn: Scenario) -> tuple[Number, Number]:
    """(forward, backward) seconds of one transformer layer for one micro-batch on one GPU,
    exposed TP communication and recomputation included (what Korthikanti et al. 2022 Table 4
    reports)."""
    cluster, plan = scn.cluster, scn.plan
    fabric = Fabric(cluster.intra_node_link, cluster.inter_node_link)
    place = group_placement(plan.tp, plan.dp, plan.pp, cluster.gpus_per_node)
    cost, _ = layer_cost(scn, tp_comm(scn, fabric, place["tp"]))
    return cost.compute_f + cost.tp_f, cost.compute_b + cost.tp_b
