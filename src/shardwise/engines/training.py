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

from dataclasses import dataclass

import numpy as np

from shardwise.engines.result import StepBreakdown, TrainingEstimate
from shardwise.physics import memory as mem
from shardwise.physics.collectives import Fabric
from shardwise.physics.compute import BACKWARD_GEMM_RATIO, gemm_s, layer_times, memory_s
from shardwise.physics.flops import cross_entropy_bytes, layer_forward, logits_forward
from shardwise.physics.params import stage_params_per_gpu
from shardwise.physics.topology import group_placement
from shardwise.specs import Recompute, Scenario
from shardwise.specs._checks import Number

# Megatron-LM's fp16/bf16 optimizer, bytes per parameter: copy 16-bit grads to fp32 (2 + 4),
# unscale and inf-check (4), gradient norm (4), fused Adam (read p, m, v, g: 16; write p, m, v: 12),
# copy fp32 weights back to 16-bit (4 + 2). 48 bytes per parameter at HBM speed.
OPTIMIZER_TRAFFIC_BYTES_PER_PARAM = 48.0
# Vocab-parallel cross-entropy all-reduces three fp32 values per token (max, sum of exps,
# target logit) across the TP group (Megatron-LM `_VocabParallelCrossEntropy`).
CROSS_ENTROPY_ALL_REDUCES = 3


@dataclass(frozen=True)
class _StageCost:
    """Per micro-batch on one stage: compute and exposed TP communication, forward and backward,
    and the TP communication hidden behind compute (reported, not added)."""

    compute_f: Number
    compute_b: Number
    tp_f: Number
    tp_b: Number
    tp_hidden: Number = 0.0

    @property
    def total(self) -> Number:
        return self.compute_f + self.compute_b + self.tp_f + self.tp_b


_FIELDS = ("compute_f", "compute_b", "tp_f", "tp_b", "tp_hidden")


def _layer_cost(scn: Scenario, fabric: Fabric, tp_per_node: Number) -> tuple[_StageCost, object]:
    """One transformer layer, one micro-batch, one GPU."""
    model, plan, gpu = scn.model, scn.plan, scn.cluster.gpu
    t, sp = plan.tp, np.asarray(plan.sequence_parallel, dtype=bool)
    fwd = layer_forward(model, plan.micro_batch, t, sp, plan.bytes_per_element)
    lt = layer_times(fwd, gpu, plan.precision, plan.flash_attention)
    msg = fwd.tp_message_bytes
    # Megatron TP (Shoeybi et al. 2019 Sec. 3): two all-reduces forward, two backward;
    # with sequence parallelism an all-gather + reduce-scatter pair instead of each all-reduce
    # (Korthikanti et al. 2022 Sec. 4.2.2): the same bytes on the wire.
    gather = fabric.all_gather(msg, t, tp_per_node)
    scatter = fabric.reduce_scatter(msg, t, tp_per_node)
    reduce = fabric.all_reduce(msg, t, tp_per_node)
    tp_fwd = np.where(sp, 2 * (gather + scatter), 2 * reduce)
    # Backward without SP: the input-gradient all-reduce of each column-parallel layer (QKV, MLP
    # up) overlaps that layer's weight-gradient GEMM (Megatron's async TP all-reduce).
    # Backward with SP (Korthikanti et al. 2022 Sec. 4.2.2; Megatron-LM
    # LinearWithGradAccumulationAndAsyncCommunication): the gradient of each forward
    # reduce-scatter is an all-gather on the critical path (2 per layer); each column-parallel
    # layer re-gathers its sharded input for the weight gradient, hidden behind its input-gradient
    # GEMM, and reduce-scatters its input gradient, hidden behind its weight-gradient GEMM.
    # Table 4 of that paper shows the net effect: backward 11.8 ms with SP vs 11.9 ms without,
    # although SP removes 1/t of the norm and dropout work.
    overlap = np.asarray(plan.tp_comm_overlap, dtype=bool)
    window = np.where(overlap, lt.column_gemm_s, 0.0)  # one dX or one dW pass of QKV + MLP up

    def exposed(comm: Number) -> Number:
        return np.maximum(0.0, comm - window)

    tp_bwd = np.where(sp, 2 * gather + exposed(2 * gather) + exposed(2 * scatter), exposed(2 * reduce))
    tp_bwd_total = np.where(sp, 4 * gather + 2 * scatter, 2 * reduce)
    rc = np.asarray(plan.recompute)
    redo = np.select([rc == Recompute.FULL, rc == Recompute.SELECTIVE], [lt.forward_s, lt.attention_core_s], 0.0)
    cost = _StageCost(
        compute_f=lt.forward_s,
        compute_b=lt.backward_s + redo,
        tp_f=tp_fwd,
        tp_b=tp_bwd + np.where(rc == Recompute.FULL, tp_fwd, 0.0),
        tp_hidden=tp_bwd_total - tp_bwd,
    )
    return cost, fwd


def _embedding_cost(scn: Scenario, fabric: Fabric, tp_per_node: Number, msg: Number) -> _StageCost:
    """Vocab-parallel embedding lookup (+ learned positions) and its TP reduction."""
    model, plan, gpu = scn.model, scn.plan, scn.cluster.gpu
    e, tokens = plan.bytes_per_element, plan.micro_batch * model.seq_len
    act = e * tokens * model.hidden
    lookup = memory_s(2 * act + (3 * act if model.learned_positions else 0.0), gpu, kernels=2)
    grad_table = mem.grad_bytes_per_param(plan.precision) * model.vocab * model.hidden / plan.tp
    sp = np.asarray(plan.sequence_parallel, dtype=bool)
    reduce = np.where(
        sp, fabric.reduce_scatter(msg, plan.tp, tp_per_node), fabric.all_reduce(msg, plan.tp, tp_per_node)
    )
    # With SP the backward of the forward reduce-scatter is an all-gather of the gradient.
    regather = np.where(sp, fabric.all_gather(msg, plan.tp, tp_per_node), 0.0)
    return _StageCost(lookup, memory_s(2 * act + grad_table, gpu, kernels=2), reduce, regather)


def _head_cost(scn: Scenario, fabric: Fabric, tp_per_node: Number, msg: Number) -> _StageCost:
    """Final norm, output projection (column-parallel over the vocabulary) and the loss."""
    model, plan, gpu = scn.model, scn.plan, scn.cluster.gpu
    e, b, t = plan.bytes_per_element, plan.micro_batch, plan.tp
    sp = np.asarray(plan.sequence_parallel, dtype=bool)
    tokens = b * model.seq_len
    norm = memory_s(2 * e * tokens * model.hidden * np.where(sp, 1.0 / t, 1.0), gpu)
    logits = gemm_s(logits_forward(model, b, t, e), gpu, plan.precision)
    loss = memory_s(cross_entropy_bytes(model, b, t, e), gpu, kernels=4)
    ce_comm = CROSS_ENTROPY_ALL_REDUCES * fabric.all_reduce(4.0 * tokens, t, tp_per_node)
    gather = np.where(sp, fabric.all_gather(msg, t, tp_per_node), 0.0)
    grad_in = np.where(sp, fabric.reduce_scatter(msg, t, tp_per_node), fabric.all_reduce(msg, t, tp_per_node))
    return _StageCost(
        compute_f=norm + logits + loss,
        compute_b=2 * norm + BACKWARD_GEMM_RATIO * logits,
        tp_f=gather + ce_comm,
        tp_b=grad_in,
    )


def _p2p_per_transfer(scn: Scenario, fabric: Fabric, place: dict[str, Number], msg: Number) -> Number:
    """One pipeline send of a micro-batch's activations (or gradients) between stages.

    With scatter/gather (Narayanan et al. 2021 Sec. 4.1) each TP rank sends 1/t of the tensor
    and the receivers all-gather it over the node's links; with sequence parallelism the tensor
    is already split by t. A boundary crosses nodes when the PP group spans nodes.
    """
    plan = scn.plan
    t = np.asarray(plan.tp, dtype=float)
    sp = np.asarray(plan.sequence_parallel, dtype=bool)
    split = sp | np.asarray(plan.scatter_gather, dtype=bool)
    crosses = place["pp"] < plan.pp
    send = fabric.p2p(np.where(split, msg / t, msg), crosses)
    regather = np.where(split & ~sp, fabric.all_gather(msg, t, place["tp"]), 0.0)
    return np.where(np.asarray(plan.pp) > 1, send + regather, 0.0)


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
    gpu = cluster.gpu
    fabric = Fabric(cluster.intra_node_link, cluster.inter_node_link)
    place = group_placement(plan.tp, plan.dp, plan.pp, cluster.gpus_per_node)
    p, v, m, dp = (np.asarray(x, dtype=float) for x in (plan.pp, plan.vpp, plan.num_micro_batches, plan.dp))

    layer, fwd = _layer_cost(scn, fabric, place["tp"])
    msg = fwd.tp_message_bytes  # type: ignore[attr-defined]
    emb = _embedding_cost(scn, fabric, place["tp"], msg)
    head = _head_cost(scn, fabric, place["tp"], msg)
    per_stage = model.layers / p

    def stage(first: bool, last: bool) -> _StageCost:
        parts = [(per_stage, layer)] + ([(1.0, emb)] if first else []) + ([(1.0, head)] if last else [])
        return _StageCost(*(sum(k * getattr(c, f) for k, c in parts) for f in _FIELDS))

    single = stage(True, True)
    one = p == 1
    first = _select(one, single, stage(True, False))
    middle = stage(False, False)
    last = _select(one, single, stage(False, True))

    p2p = _p2p_per_transfer(scn, fabric, place, msg) * 2 * v
    c_first, c_mid, c_last = (s.total + p2p for s in (first, middle, last))
    pipe_s = pipeline_makespan_s(c_first, c_mid, c_last, p, m, v)
    c_max = np.maximum(np.maximum(c_first, np.where(p > 2, c_mid, 0.0)), c_last)
    slowest = _select(c_first >= np.maximum(c_mid, c_last), first, _select(c_last >= c_mid, last, middle))

    params_first, params_mid, params_last = stage_params_per_gpu(model, plan.tp, plan.pp)
    dp_s, dp_hidden = _data_parallel_exposed_s(
        scn, fabric, place, (params_first, params_mid, params_last), (first, middle, last), m, v
    )
    z = np.asarray(plan.zero_stage)
    opt_params = np.maximum(np.maximum(params_first, params_mid), params_last) / np.where(z >= 1, dp, 1)
    optimizer_s = memory_s(opt_params * OPTIMIZER_TRAFFIC_BYTES_PER_PARAM, gpu, kernels=4)

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


def _select(mask: Number, a: _StageCost, b: _StageCost) -> _StageCost:
    return _StageCost(*(np.where(mask, getattr(a, f), getattr(b, f)) for f in _FIELDS))


def _data_parallel_exposed_s(
    scn: Scenario,
    fabric: Fabric,
    place: dict[str, Number],
    params: tuple[Number, Number, Number],
    stages: tuple[_StageCost, _StageCost, _StageCost],
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
    plan, model = scn.plan, scn.model
    dp, z = plan.dp, np.asarray(plan.zero_stage)
    g_bytes = mem.grad_bytes_per_param(plan.precision)
    w_bytes = mem.weight_bytes_per_param(plan.precision)
    overlap = np.asarray(plan.overlap_grad_reduce, dtype=bool)
    p = np.asarray(plan.pp, dtype=float)
    exposed, totals = [], []
    for index, n_params, cost in zip((0.0, 1.0, p - 1), params, stages, strict=True):
        all_reduce = fabric.all_reduce(n_params * g_bytes, dp, place["dp"])
        scatter = fabric.reduce_scatter(n_params * g_bytes, dp, place["dp"])
        gather = fabric.all_gather(n_params * w_bytes, dp, place["dp"])
        backward = cost.compute_b + cost.tp_b
        # What each stage must move, and the compute it may hide behind (each window used once):
        # ZeRO-0: all-reduce during the last backward; ZeRO-1: reduce-scatter + all-gather of the
        # updated weights; ZeRO-2: a reduce-scatter per micro-batch (gradients are kept sharded)
        # behind every backward; ZeRO-3: also two weight all-gathers per micro-batch, prefetched
        # behind the forward and backward passes (no gather after the optimizer).
        comm = np.select(
            [z == 0, z == 1, z == 2], [all_reduce, scatter + gather, m * scatter + gather], m * (scatter + 2 * gather)
        )
        hide = np.select([z <= 1, z == 2], [backward, m * backward], m * cost.total)
        drain = index * backward / v  # stage i finishes its last backward i chunks before stage 0
        exposed.append(np.maximum(0.0, comm - np.where(overlap, hide, 0.0) - drain))
        totals.append(comm)
    mid = np.where(p > 2, exposed[1], 0.0)
    dp_exposed = np.maximum(np.maximum(exposed[0], mid), exposed[2])
    # the hidden share of the stage whose exposed part sets the step
    pick = np.where(exposed[0] >= np.maximum(mid, exposed[2]), 0, np.where(exposed[2] >= mid, 2, 1))
    hidden = np.choose(pick, [totals[i] - exposed[i] for i in range(3)])
    if model.tied_embeddings:
        # Tied word embeddings: first and last stage all-reduce their copy's gradient (Megatron-LM).
        sync = fabric.all_reduce(g_bytes * model.vocab * model.hidden / plan.tp, 2, np.where(place["pp"] < p, 1, 2))
        dp_exposed = dp_exposed + np.where(p > 1, sync, 0.0)
    return dp_exposed, hidden


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
    cost, _ = _layer_cost(scn, fabric, place["tp"])
    return cost.compute_f + cost.tp_f, cost.compute_b + cost.tp_b
