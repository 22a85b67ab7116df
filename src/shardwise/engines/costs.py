"""Per micro-batch building blocks shared by the engines: what one layer, the embedding, the
output layer and a pipeline send cost on one GPU, split into compute and exposed TP
communication (forward and backward), with the TP communication hidden behind compute.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardwise.physics import memory as mem
from shardwise.physics.collectives import Fabric, Group
from shardwise.physics.compute import BACKWARD_GEMM_RATIO, gemm_s, layer_times, memory_s
from shardwise.physics.flops import LayerForward, cross_entropy_bytes, layer_forward, logits_forward
from shardwise.specs import Recompute, Scenario
from shardwise.specs._checks import Number

# Vocab-parallel cross-entropy all-reduces three fp32 values per token (max, sum of exps,
# target logit) across the TP group (Megatron-LM `_VocabParallelCrossEntropy`).
CROSS_ENTROPY_ALL_REDUCES = 3


@dataclass(frozen=True)
class StageCost:
    """Per micro-batch on one stage: compute and exposed TP communication, forward and backward,
    and the TP communication hidden behind compute (reported, not added)."""

    compute_f: Number
    compute_b: Number
    tp_f: Number
    tp_b: Number
    tp_hidden: Number = 0.0
    weight_s: Number = 0.0  # the weight-gradient GEMMs inside compute_b (what ZB-H1 defers)

    @property
    def total(self) -> Number:
        return self.compute_f + self.compute_b + self.tp_f + self.tp_b


FIELDS = ("compute_f", "compute_b", "tp_f", "tp_b", "tp_hidden", "weight_s")


class TpComm:
    """The TP group's collectives on one micro-batch's activation (b s_q h e bytes), priced once
    and shared by the layers, the embedding, the output layer and the pipeline sends."""

    __slots__ = ("all_gather", "all_reduce", "group", "message_bytes", "reduce_scatter")

    def __init__(self, group: Group, message_bytes: Number) -> None:
        self.group, self.message_bytes = group, message_bytes
        self.all_reduce = group.all_reduce(message_bytes)
        self.reduce_scatter = group.reduce_scatter(message_bytes)
        self.all_gather = self.reduce_scatter  # same bytes, same ring


def tp_comm(scn: Scenario, fabric: Fabric, tp_per_node: Number, q_len: Number | None = None) -> TpComm:
    model, plan = scn.model, scn.plan
    tokens = plan.micro_batch * (model.seq_len if q_len is None else q_len)
    return TpComm(fabric.group(plan.tp, tp_per_node), plan.bytes_per_element * tokens * model.hidden)


def layer_cost(
    scn: Scenario,
    comm: TpComm,
    q_len: Number | None = None,
    kv_len: Number | None = None,
    weight_bytes: Number | None = None,
    kv_bytes: Number | None = None,
) -> tuple[StageCost, LayerForward]:
    """One transformer layer, one micro-batch of `q_len` new tokens per sequence attending to
    `kv_len` tokens (training: both the sequence length), on one GPU."""
    model, plan, gpu = scn.model, scn.plan, scn.cluster.gpu
    t, sp = plan.tp, np.asarray(plan.sequence_parallel, dtype=bool)
    fwd = layer_forward(model, plan.micro_batch, t, sp, plan.bytes_per_element, q_len, kv_len, weight_bytes, kv_bytes)
    lt = layer_times(fwd, gpu, plan.precision, plan.flash_attention)
    # Megatron TP (Shoeybi et al. 2019 Sec. 3): two all-reduces forward, two backward;
    # with sequence parallelism an all-gather + reduce-scatter pair instead of each all-reduce
    # (Korthikanti et al. 2022 Sec. 4.2.2): the same bytes on the wire.
    gather, scatter, reduce = comm.all_gather, comm.reduce_scatter, comm.all_reduce
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
    cost = StageCost(
        compute_f=lt.forward_s,
        compute_b=lt.backward_s + redo,
        tp_f=tp_fwd,
        tp_b=tp_bwd + np.where(rc == Recompute.FULL, tp_fwd, 0.0),
        tp_hidden=tp_bwd_total - tp_bwd,
        weight_s=lt.gemm_s,  # dW of the four GEMMs: each as long as its forward GEMM
    )
    return cost, fwd


def embedding_cost(scn: Scenario, comm: TpComm, q_len: Number | None = None) -> StageCost:
    """Vocab-parallel embedding lookup (+ learned positions) and its TP reduction."""
    model, plan, gpu = scn.model, scn.plan, scn.cluster.gpu
    e = plan.bytes_per_element
    tokens = plan.micro_batch * (model.seq_len if q_len is None else q_len)
    act = e * tokens * model.hidden
    lookup = memory_s(2 * act + (3 * act if model.learned_positions else 0.0), gpu, kernels=2)
    grad_table = mem.grad_bytes_per_param(plan.precision) * model.vocab * model.hidden / plan.tp
    sp = np.asarray(plan.sequence_parallel, dtype=bool)
    reduce = np.where(sp, comm.reduce_scatter, comm.all_reduce)
    # With SP the backward of the forward reduce-scatter is an all-gather of the gradient.
    regather = np.where(sp, comm.all_gather, 0.0)
    return StageCost(lookup, memory_s(2 * act + grad_table, gpu, kernels=2), reduce, regather)


def head_cost(
    scn: Scenario, comm: TpComm, q_len: Number | None = None, loss: bool = True, weight_bytes: Number | None = None
) -> StageCost:
    """Final norm, output projection (column-parallel over the vocabulary) and, when training,
    the loss; `q_len` tokens per sequence get logits (inference: the last one only)."""
    model, plan, gpu = scn.model, scn.plan, scn.cluster.gpu
    e, b, t = plan.bytes_per_element, plan.micro_batch, plan.tp
    sp = np.asarray(plan.sequence_parallel, dtype=bool)
    s_q = model.seq_len if q_len is None else q_len
    tokens = b * s_q
    norm = memory_s(2 * e * tokens * model.hidden * np.where(sp, 1.0 / t, 1.0), gpu)
    logits = gemm_s(logits_forward(model, b, t, e, s_q, weight_bytes), gpu, plan.precision)
    if not loss:
        return StageCost(norm + logits, 0.0, np.where(sp, comm.all_gather, 0.0), 0.0)
    loss_s = memory_s(cross_entropy_bytes(model, b, t, e), gpu, kernels=4)
    ce_comm = CROSS_ENTROPY_ALL_REDUCES * comm.group.all_reduce(4.0 * tokens)
    gather = np.where(sp, comm.all_gather, 0.0)
    grad_in = np.where(sp, comm.reduce_scatter, comm.all_reduce)
    return StageCost(
        compute_f=norm + logits + loss_s,
        compute_b=2 * norm + BACKWARD_GEMM_RATIO * logits,
        tp_f=gather + ce_comm,
        tp_b=grad_in,
        weight_s=logits,
    )


def p2p_per_transfer(scn: Scenario, fabric: Fabric, place: dict[str, Number], comm: TpComm) -> Number:
    """One pipeline send of a micro-batch's activations (or gradients) between stages, over the
    slowest boundary (across nodes when the PP group spans nodes); 0 without pipelining."""
    crosses = place["pp"] < scn.plan.pp
    return np.where(np.asarray(scn.plan.pp) > 1, p2p_time_s(scn, fabric, comm, crosses), 0.0)


def p2p_time_s(scn: Scenario, fabric: Fabric, comm: TpComm, crosses_node: Number) -> Number:
    """One pipeline send over a boundary that does or does not cross nodes.

    With scatter/gather (Narayanan et al. 2021 Sec. 4.1) each TP rank sends 1/t of the tensor
    and the receivers all-gather it over the node's links; with sequence parallelism the tensor
    is already split by t.
    """
    plan = scn.plan
    t = np.asarray(plan.tp, dtype=float)
    sp = np.asarray(plan.sequence_parallel, dtype=bool)
    split = sp | np.asarray(plan.scatter_gather, dtype=bool)
    msg = comm.message_bytes
    send = fabric.p2p(np.where(split, msg / t, msg), crosses_node)
    return send + np.where(split & ~sp, comm.all_gather, 0.0)


def select(mask: Number, a: StageCost, b: StageCost) -> StageCost:
    return StageCost(*(np.where(mask, getattr(a, f), getattr(b, f)) for f in FIELDS))


def stages(
    layers_per_stage: Number, pp: Number, layer: StageCost, emb: StageCost, head: StageCost
) -> tuple[StageCost, StageCost, StageCost]:
    """(first, middle, last) stage costs: l/p layers each, the embedding on the first stage and
    the output layer on the last (a single stage has both)."""
    one = (np.asarray(pp) == 1).astype(float)
    middle = StageCost(*(layers_per_stage * getattr(layer, f) for f in FIELDS))
    first = StageCost(*(getattr(middle, f) + getattr(emb, f) + one * getattr(head, f) for f in FIELDS))
    last = StageCost(*(getattr(middle, f) + getattr(head, f) + one * getattr(emb, f) for f in FIELDS))
    return first, middle, last
