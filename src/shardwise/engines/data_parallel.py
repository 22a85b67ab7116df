"""Data parallelism's communication in a training step: the gradient reduction (all-reduce, or
reduce-scatter under ZeRO >= 1) and the parameter all-gathers of ZeRO, each with the compute it
may hide behind, on each pipeline stage; the exposed part of the stage that sets the step. Tied
word embeddings add the first and last stages' all-reduce of their copy's gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardwise.arrays import as_array, as_bool, as_float, choose, ifelse, maximum, minimum, one_value
from shardwise.engines.costs import StageCost
from shardwise.engines.tp_overlap import NCCL_OVERLAP_SMS
from shardwise.physics import memory as mem
from shardwise.physics.collectives import Fabric, Group
from shardwise.physics.topology import ranks_per_node
from shardwise.specs import Model, Scenario
from shardwise.specs._checks import Number
from shardwise.specs.memo import kept

# Megatron-Core's data-parallel gradient buckets: max(40M, 1M x dp) parameters
# (megatron/core/distributed/distributed_data_parallel.py). The reduction of the last bucket (the
# first layers' gradients, ready only when the backward pass ends) cannot hide behind it, and
# the first bucket's parameter all-gather is needed before the first layer can run.
DP_BUCKET_PARAMS = 40e6
DP_BUCKET_PARAMS_PER_RANK = 1e6


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
    # ZeRO-0/1: one reduction (and gather) per step, per model chunk (see `exposed_s`)
    per_chunk: Number = False
    # the share of the GPU's SMs NCCL's kernels hold while a hidden collective runs: the compute
    # beside it slows by that share of the collective's time (`tp_overlap.overlapped_exposed_s`)
    contention: Number = 0.0

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
            self.per_chunk,
            self.contention,
        )

    def exposed_s(
        self, overlap_grad: Number, drain_s: Number = 0.0, chunks: Number = 1, rounds: Number = 1
    ) -> tuple[Number, Number]:
        """(exposed gradient part, exposed gather part): each is what its window does not
        cover, and at least its unhideable bucket. ZeRO-3 (`shared_window`): the reductions
        hide behind the backward passes the gathers also use; both share the compute, so what
        exceeds it (or the unhideable buckets) is exposed. A scalar ZeRO stage or overlap flag
        prices only its own branch (the same numbers as selecting among all of them).

        The interleaved schedule (`chunks` = v model chunks per GPU, `rounds` = p micro-batches
        per chunk in the last round of backward passes): Megatron-Core reduces each chunk's
        gradients as soon as that chunk's last backward pass ends (one DDP wrapper, one set of
        buckets per chunk; megatron/core/pipeline_parallel/schedules.py enables each chunk's
        grad sync before its last backward), and the last round runs chunk v-1's p backward
        passes first, chunk 0's last. So chunk v-1's reduction has (v-1) p chunk-backward
        passes to hide behind, and only chunk 0's -- 1/v of the bytes -- is left with one
        chunk-backward (and the drain); the parameter all-gather mirrors it over the first
        round of forward passes. With v = 1 both reduce to the single window."""
        overlap = as_bool(overlap_grad)
        z3 = as_bool(self.shared_window)
        if one_value(z3) and bool(z3):
            return self._shared_s(overlap, drain_s), 0.0
        grad, gather = self._grad_s(overlap, drain_s, chunks, rounds), self._gather_s(chunks, rounds)
        if one_value(z3):
            return grad, gather
        return np.where(z3, self._shared_s(overlap, drain_s), grad), np.where(z3, 0.0, gather)

    def _hidden_beside(
        self, total_s: Number, window_s: Number, bucket_s: Number, drain_s: Number, chunks: Number, rounds: Number
    ) -> Number:
        """What of a collective of `total_s` stays exposed beside its compute `window_s` (+ the
        drain): per chunk where it is (see `exposed_s`), at least its unhideable bucket and the
        compute NCCL's SMs take while the rest hides; with no window, all of it."""
        v = ifelse(as_bool(self.per_chunk), as_float(chunks), 1.0)
        one = window_s / v  # one chunk's pass of the micro-batch
        first = one + drain_s
        whole = one * (1.0 + (v - 1.0) * as_float(rounds)) + drain_s
        floor = ifelse(whole > 0, maximum(bucket_s, total_s * self.contention), total_s)
        return minimum(maximum(maximum(total_s - whole, total_s / v - first), floor), total_s)

    def _grad_s(self, overlap: np.ndarray, drain_s: Number, chunks: Number = 1, rounds: Number = 1) -> Number:
        if one_value(overlap) and not bool(overlap):  # no window: the whole reduction
            return self.grad_s
        window = ifelse(overlap, self.grad_window_s, 0.0)
        drain = ifelse(overlap, drain_s, 0.0)
        return self._hidden_beside(self.grad_s, window, self.grad_bucket_s, drain, chunks, rounds)

    def _gather_s(self, chunks: Number = 1, rounds: Number = 1) -> Number:
        window = self.gather_window_s
        if one_value(window) and not window:  # no window: the whole gather
            return self.gather_s
        return self._hidden_beside(self.gather_s, window, self.gather_bucket_s, 0.0, chunks, rounds)

    def _shared_s(self, overlap: np.ndarray, drain_s: Number) -> Number:
        both = self.grad_s + self.gather_s
        shared_window = self.gather_window_s + ifelse(overlap, drain_s, 0.0)
        buckets = ifelse(overlap, self.grad_bucket_s, self.grad_s) + self.gather_bucket_s
        return minimum(both, maximum(both - shared_window, maximum(buckets, both * self.contention)))


# The collectives a ZeRO stage uses (`dp_comm`), by name: see `collective_prices`.
ZERO_COLLECTIVES = (
    ("all_reduce", "bucket_all_reduce", "bucket_all_gather"),
    ("reduce_scatter", "bucket_reduce_scatter", "all_gather", "bucket_all_gather"),
    ("reduce_scatter", "bucket_reduce_scatter", "all_gather", "bucket_all_gather"),
    ("reduce_scatter", "bucket_reduce_scatter", "weights_all_gather", "bucket_weights_all_gather"),
)
# What the prices of those collectives read of a plan: the groups (the layout), the parameters
# each stage holds and trains (the split, the experts' layout, LoRA) and their bytes (the
# precision). Plans that differ only in other fields (the batch, recomputation, the schedule, the
# ZeRO stage, the overlaps) share them: `training.estimate_each_training_step` prices them once
# per group of such plans (`engines.distinct.evaluate_grouped`; a test compares with every plan's).
COLLECTIVE_READS = frozenset(
    ("tp", "dp", "pp", "cp", "ep", "etp", "first_stage_layers", "last_stage_layers", "stage_layers", "precision")
) | {"lora_rank", "lora_targets", "shard_group"}


def zero_collectives(zero_stage: Number) -> tuple[str, ...]:
    """The names of the collectives `dp_comm` uses (`ZERO_COLLECTIVES`): one ZeRO stage's, or
    every stage's for an array of them (`dp_comm` selects among all four)."""
    z = as_array(zero_stage)
    present = [int(z)] if one_value(z) else range(4)
    return tuple(dict.fromkeys(name for k in present for name in ZERO_COLLECTIVES[k]))


def collective_prices(
    scn: Scenario,
    fabric: Fabric,
    place: dict[str, Number],
    n_params: Number,
    names: tuple[str, ...],
    experts: bool = False,
    n_weights: Number | None = None,
) -> dict[str, Number]:
    """The seconds of the collectives `names` of one stage's data-parallel communication (its
    gradients' reduction, its weights' gathers, their first or last bucket), for `n_params`
    parameters per GPU (with `experts`: routed-expert ones, over the expert-data-parallel ranks)
    and `n_weights` held (default `n_params`; more than the trained ones under LoRA). Reads only
    COLLECTIVE_READS of the plan."""
    plan = scn.plan
    hybrid = None
    if experts:
        dp = as_float(plan.expert_dp)
        group = fabric.group(dp, place["edp"])
    else:
        dp = as_float(plan.dp) * as_array(plan.cp)  # CP ranks hold the same weights
        hybrid = hybrid_groups(scn, fabric, dp)
        if hybrid is None:
            group = fabric.group(dp, place["dpcp"])
        else:
            dp, group, replica = hybrid
    g_bytes, w_bytes = mem.grad_bytes_per_param(plan.precision), mem.weight_bytes_per_param(plan.precision)
    n_weights = n_params if n_weights is None else n_weights
    collectives = {  # name: (collective, what of the parameters it moves, bytes per parameter)
        "all_reduce": (group.all_reduce, "params", g_bytes),
        "reduce_scatter": (group.reduce_scatter, "params", g_bytes),
        "all_gather": (group.all_gather, "params", w_bytes),
        "bucket_all_reduce": (group.all_reduce, "bucket", g_bytes),
        "bucket_reduce_scatter": (group.reduce_scatter, "bucket", g_bytes),
        "bucket_all_gather": (group.all_gather, "bucket", w_bytes),
        "weights_all_gather": (group.all_gather, "weights", w_bytes),
        "bucket_weights_all_gather": (group.all_gather, "weights_bucket", w_bytes),
    }
    counts: dict[str, Number] = {"params": n_params, "weights": n_weights}
    priced = {}
    for name in names:
        op, what, per_param = collectives[name]
        if what not in counts:  # a bucket: Megatron-Core's bucket of the parameters, or all of them
            n = n_weights if what == "weights_bucket" else n_params
            counts[what] = minimum(n, maximum(DP_BUCKET_PARAMS, DP_BUCKET_PARAMS_PER_RANK * dp))
        priced[name] = op(counts[what] * per_param)
        if hybrid is not None and name.endswith("reduce_scatter"):  # then the replicas' all-reduce of the shard
            priced[name] = priced[name] + replica.all_reduce(counts[what] * per_param / dp)
    return priced


def hybrid_groups(scn: Scenario, fabric: Fabric, ranks: Number) -> tuple[Number, Group, Group] | None:
    """Hybrid sharding (`Plan.shard_group`): (shard group size, its Group, the replicas' Group),
    or None where no plan has it (the ZeRO group is all `ranks` = dp x cp).

    The shard group is `shard_group` consecutive dp x cp ranks (`tp` apart in the order
    tp-cp-dp-pp: inside a node when tp x shard_group fits in it, as FSDP's HYBRID_SHARD and
    torchtitan's (dp_replicate, dp_shard) mesh put it), the replica group the dp x cp /
    shard_group ranks that hold the same shard, tp x shard_group apart. Each reduction is a
    reduce-scatter over the shard group followed by an all-reduce of the 1/shard_group of the
    gradients each rank keeps over its replica group (torch.distributed.fsdp HYBRID_SHARD's
    post-backward hook; FSDP2's HSDP the same, `_fsdp_collectives.foreach_reduce`); the
    parameter all-gathers stay inside the shard group."""
    plan = scn.plan
    group_size = as_array(plan.shard_group)
    if one_value(group_size) and float(group_size) == 0.0:
        return None
    shards = ifelse(group_size > 0, group_size, ranks)
    replicas = ranks / shards
    tp, per_node = as_array(plan.tp), scn.cluster.gpus_per_node
    shard = fabric.group(shards, ranks_per_node(shards, tp, per_node))
    return shards, shard, fabric.group(replicas, ranks_per_node(replicas, tp * shards, per_node))


def dp_comm(
    scn: Scenario,
    fabric: Fabric,
    place: dict[str, Number],
    n_params: Number,
    cost: StageCost,
    m: Number,
    experts: bool = False,
    n_weights: Number | None = None,
    prices: dict[str, Number] | None = None,
) -> DpComm:
    """The data-parallel communication of one stage holding `n_params` parameters per GPU (with
    `experts`: routed-expert parameters, reduced over the expert-data-parallel ranks). `n_weights`
    (default `n_params`): the weights ZeRO-3 gathers, more than the trained ones under LoRA.

    ZeRO-0: all-reduce of the gradients; ZeRO-1: reduce-scatter of the gradients + all-gather of
    the updated 16-bit weights (the same bytes, Rajbhandari et al. 2020 Sec. 7; Megatron's
    distributed optimizer); ZeRO-2: a reduce-scatter per micro-batch (gradients stay sharded);
    ZeRO-3: also two weight all-gathers per micro-batch, prefetched behind the forward and
    backward passes (no gather after the optimizer). `prices`: those of `collective_prices`
    for the ZeRO stages present, when already known.
    """
    plan = scn.plan
    z = as_array(plan.zero_stage)
    if prices is None:
        prices = collective_prices(scn, fabric, place, n_params, zero_collectives(z), experts, n_weights)
    price = prices.__getitem__
    backward = cost.compute_backward_s + cost.tp_backward_s
    forward = cost.compute_forward_s + cost.tp_forward_s
    overlap_gather = as_bool(plan.overlap_param_gather)

    def stage(k: int) -> tuple[Number, ...]:
        """DpComm's fields for ZeRO stage k."""
        after_optimizer = ifelse(overlap_gather, forward, 0.0)  # ZeRO-1/2's gather behind the next forward
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
        gathers = 2 * m * price("weights_all_gather"), m * cost.total_s, 2 * m * price("bucket_weights_all_gather")
        return grad, window, price("bucket_reduce_scatter"), *gathers

    contention = _contention(scn.cluster.gpu.sm_count)
    if one_value(z):  # one ZeRO stage: only its own collectives are priced
        return DpComm(*stage(int(z)), shared_window=int(z) == 3, per_chunk=int(z) <= 1, contention=contention)
    fields = zip(*(stage(k) for k in range(4)), strict=True)
    chosen = [np.select([z == 0, z == 1, z == 2], list(v[:3]), v[3]) for v in fields]
    return DpComm(*chosen, shared_window=z == 3, per_chunk=z <= 1, contention=contention)


@kept
def _contention(sm_count: Number) -> Number:
    """The share of the GPU's SMs NCCL's kernels hold while a hidden collective runs."""
    sms = as_float(sm_count)
    return ifelse(sms > 0, NCCL_OVERLAP_SMS / maximum(sms, 1.0), 0.0)


def data_parallel_exposed_s(
    scn: Scenario,
    fabric: Fabric,
    place: dict[str, Number],
    params: tuple[Number, Number, Number],
    stages: tuple[StageCost, StageCost, StageCost],
    m: Number,
    v: Number,
    expert_params: tuple[Number, Number, Number] = (0.0, 0.0, 0.0),
    weights: tuple[Number, Number, Number] | None = None,
    prices: StagePrices | None = None,
) -> tuple[Number, Number]:
    """(exposed, hidden) seconds of gradient reduction and ZeRO parameter gathers: the stage whose
    exposed part is largest sets the step. With overlap the reduction runs in buckets during the
    last micro-batch's backward pass; stage i of p also has i backward chunks of pipeline drain to
    hide behind; the last bucket is always exposed. The parameter all-gather after the optimizer
    is exposed unless overlap_param_gather (then all but its first bucket hides behind the next
    step's first forward). Routed-expert parameters (`expert_params`, part of `params`) are
    reduced over their own expert-data-parallel group, after the others. `weights` (default
    `params`): what each stage holds, when only some of it is trained (LoRA); ZeRO-3 gathers it.
    `prices`: `stage_collective_prices` of these, when already known.
    """
    plan = scn.plan
    p = as_float(plan.pp)
    exposed, totals = [], []
    if prices is None:
        prices = stage_collective_prices(scn, fabric, place, params, expert_params, weights)
    per_stage = zip((0.0, 1.0, p - 1), params, expert_params, stages, prices, strict=True)
    for index, n_params, n_expert, cost, (dense, routed) in per_stage:
        comm = dp_comm(scn, fabric, place, n_params - n_expert, cost, m, prices=dense)
        if routed is not None:
            comm = comm.plus(dp_comm(scn, fabric, place, n_expert, cost, m, experts=True, prices=routed))
        # stage i ends its last backward i chunks early; interleaved, Megatron-Core launches each
        # chunk's reduction i chunk-passes late, aligned across the pipeline ranks (schedules.py:
        # "launch asynchronous communication at the same time across the pipeline-parallel
        # group"), which spends that drain
        drain = ifelse(v > 1, 0.0, index * (cost.compute_backward_s + cost.tp_backward_s) / v)
        grad, gather = comm.exposed_s(plan.overlap_grad_reduce, drain, v, ifelse(v > 1, p, 1.0))
        exposed.append(grad + gather)
        totals.append(comm.total_s)
    mid = ifelse(p > 2, exposed[1], 0.0)
    dp_exposed = maximum(maximum(exposed[0], mid), exposed[2])
    # the hidden share of the stage whose exposed part sets the step
    pick = ifelse(exposed[0] >= maximum(mid, exposed[2]), 0, ifelse(exposed[2] >= mid, 2, 1))
    hidden = choose(pick, [totals[i] - exposed[i] for i in range(3)])
    return dp_exposed + tied_embedding_sync_s(scn, fabric, place), hidden


StagePrices = tuple[tuple[dict[str, Number], dict[str, Number] | None], ...]


def stage_collective_prices(
    scn: Scenario,
    fabric: Fabric,
    place: dict[str, Number],
    params: tuple[Number, Number, Number],
    expert_params: tuple[Number, Number, Number] = (0.0, 0.0, 0.0),
    weights: tuple[Number, Number, Number] | None = None,
    names: tuple[str, ...] | None = None,
) -> StagePrices:
    """`collective_prices` of the first, fullest middle and last stage (the arguments of
    `data_parallel_exposed_s`) for the ZeRO stages present: (dense parameters', routed experts'
    or None) per stage; `names` (default those of the plan's ZeRO stages, `zero_collectives`)
    which. Reads only COLLECTIVE_READS of the plan (and its ZeRO stages without `names`)."""
    names = zero_collectives(scn.plan.zero_stage) if names is None else names
    held = params if weights is None else weights
    out = []
    for n_params, n_expert, n_held in zip(params, expert_params, held, strict=True):
        dense = collective_prices(scn, fabric, place, n_params - n_expert, names, n_weights=n_held - n_expert)
        routed = collective_prices(scn, fabric, place, n_expert, names, experts=True) if scn.model.is_moe else None
        out.append((dense, routed))
    return tuple(out)


def tied_embedding_sync_s(scn: Scenario, fabric: Fabric, place: dict[str, Number]) -> Number:
    """Tied word embeddings: the first and the last stage all-reduce their copy's gradient after
    the backward pass (Megatron-LM), over the link between them; frozen under LoRA, nothing."""
    model, plan = scn.model, scn.plan
    if not model.tied_embeddings:
        return 0.0
    return _tied_sync_s(model, fabric, plan.precision, plan.tp, plan.pp, plan.lora_rank, place["pp"])


@kept
def _tied_sync_s(
    model: Model, fabric: Fabric, precision: str, tp: Number, pp: Number, lora_rank: Number, pp_per_node: Number
) -> Number:
    """`tied_embedding_sync_s` of what it reads (kept per it, `specs.memo.kept`; a fabric by identity)."""
    p = as_float(pp)
    grads = mem.grad_bytes_per_param(precision) * model.vocab * model.hidden / tp
    sync = fabric.group(2, ifelse(pp_per_node < p, 1, 2)).all_reduce(grads)
    return ifelse((p > 1) & (as_array(lora_rank) == 0), sync, 0.0)
