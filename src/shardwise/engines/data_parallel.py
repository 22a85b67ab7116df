"""Data parallelism's communication in a training step: the gradient reduction (all-reduce, or
reduce-scatter under ZeRO >= 1) and the parameter all-gathers of ZeRO, each with the compute it
may hide behind, on each pipeline stage; the exposed part of the stage that sets the step. Tied
word embeddings add the first and last stages' all-reduce of their copy's gradient.
"""

from __future__ import annotations

from collections.abc import Mapping

from shardwise.arrays import as_array, as_bool, as_float, choose, ifelse, maximum, minimum, one_value
from shardwise.engines.costs import StageCost
from shardwise.engines.dp_comm import DpComm, contention_share, exposed_by_runs, zero_stage_fields, zero_stage_runs
from shardwise.physics import fsdp2, xla_scan
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


# `Plan.spmd_grad_reduce` (XLA: MaxText, Paxml): bytes per parameter of the gradient reduction. The
# weight gradient is the output of a bf16 dot (MaxText layers/linears.py casts the fp32 kernel to
# dtype=bfloat16 before lax.dot_general, efb6d9e4; Praxis the same at fprop_dtype) and XLA's SPMD
# partitioner reduces a partitioned dot's partial sums there, before the convert to the fp32
# parameter; MaxText's own sharding guide counts the data-parallel all-reduce as 2 bytes per
# parameter (docs/guides/optimization/sharding.md, "All reduce size of params (bf16)"). Under hybrid
# sharding the replicas' all-reduce of each rank's shard stays exposed: XLA's default GPU
# latency-hiding scheduler estimates every async collective at kHighLatency = 5000 and a cuBLAS or
# cuDNN call at kMediumCost = 1000, so it overlaps a collective with about 5 GEMMs, one collective
# in flight at a time (xla/service/latency_hiding_scheduler.h ApproximateLatencyEstimator,
# gpu_latency_hiding_scheduler.cc GpuLatencyEstimator::NodeCost, SchedulerConfig overlap limits 1),
# a few ms beside a cross-node all-reduce of a combined gradient chunk (64 MiB to 1 GiB in
# MaxText's A3 scripts, 512 MiB in dgxc Paxml's) that takes tens to hundreds of ms. Once per step.
SPMD_GRAD_BYTES = 2.0

# The collectives a ZeRO stage uses (`dp_comm`), by name: see `collective_prices`.
ZERO_COLLECTIVES = (
    ("all_reduce", "bucket_all_reduce", "bucket_all_gather"),
    ("reduce_scatter", "bucket_reduce_scatter", "all_gather", "bucket_all_gather", "all_reduce"),
    ("reduce_scatter", "bucket_reduce_scatter", "all_gather", "bucket_all_gather"),
    ("reduce_scatter", "unit_reduce_scatter", "weights_all_gather", "bucket_weights_all_gather"),
)
# What the prices of those collectives read of a plan: the groups (the layout), the parameters
# each stage holds and trains (the split, the experts' layout, LoRA) and their bytes (the
# precision). Plans that differ only in other fields (the batch, recomputation, the schedule, the
# ZeRO stage, the overlaps) share them: `training.estimate_each_training_step` prices them once
# per group of such plans (`engines.distinct.evaluate_grouped`; a test compares with every plan's).
COLLECTIVE_READS = frozenset(
    ("tp", "dp", "pp", "cp", "ep", "etp", "first_stage_layers", "last_stage_layers", "stage_layers", "precision")
) | {"lora_rank", "lora_targets", "shard_group", "grad_reduce_bf16", "spmd_grad_reduce", "per_param_sharding"}


def zero_collectives(zero_stage: Number) -> tuple[str, ...]:
    """The names of the collectives `dp_comm` uses (`ZERO_COLLECTIVES`): one ZeRO stage's, or
    every stage's for an array of them (`dp_comm` selects among all four)."""
    z = as_array(zero_stage)
    present = [int(z)] if one_value(z) else range(4)
    return (*dict.fromkeys(name for k in present for name in ZERO_COLLECTIVES[k]), "replica_all_reduce")


def collective_prices(
    scn: Scenario,
    fabric: Fabric,
    place: dict[str, Number],
    n_params: Number,
    names: tuple[str, ...],
    experts: bool = False,
    n_weights: Number | None = None,
    units: tuple[Number, Number] | None = None,
) -> dict[str, Number]:
    """The seconds of the collectives `names` of one stage's data-parallel communication (its
    gradients' reduction, its weights' gathers, their first or last bucket), for `n_params`
    parameters per GPU (with `experts`: routed-expert ones, over the expert-data-parallel ranks)
    and `n_weights` held (default `n_params`; more than the trained ones under LoRA). `units`:
    FSDP2's exposed (gather per pass, reduce-scatter) parameters of the stage
    (`physics.fsdp2.edge_units`), the buckets where the plan shards per parameter. Reads only
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
    spmd = as_bool(plan.spmd_grad_reduce)
    g_bytes = ifelse(spmd, SPMD_GRAD_BYTES, mem.grad_bytes_per_param(plan.precision, plan.grad_reduce_bf16))
    w_bytes = mem.weight_bytes_per_param(plan.precision)
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
        "unit_reduce_scatter": (group.reduce_scatter, "unit", g_bytes),  # ZeRO-3's last reduction
    }
    counts: dict[str, Number] = {"params": n_params, "weights": n_weights}
    priced = {}
    for name in names:
        if name == "replica_all_reduce":  # XLA's, exposed (`SPMD_GRAD_BYTES`); the others' is in their reduce-scatter
            shard = 0.0 if hybrid is None else replica.all_reduce(n_params * g_bytes / dp)
            priced[name] = 0.0 if hybrid is None else ifelse(spmd, shard, 0.0)
            continue
        op, what, per_param = collectives[name]
        if what not in counts:  # a bucket: Megatron-Core's bucket of the parameters, or all of them
            n = n_weights if what == "weights_bucket" else n_params
            bucket = maximum(DP_BUCKET_PARAMS, DP_BUCKET_PARAMS_PER_RANK * dp)
            if units is not None and not experts and what != "bucket":  # ZeRO-3 under FSDP2: its units
                unit = units[0] if what == "weights_bucket" else units[1]
                bucket = ifelse(as_bool(plan.per_param_sharding), unit, bucket)
            counts[what] = minimum(n, bucket)
        priced[name] = op(counts[what] * per_param)
        if hybrid is not None and name.endswith("reduce_scatter"):  # then the replicas' all-reduce of the shard
            priced[name] = priced[name] + ifelse(spmd, 0.0, replica.all_reduce(counts[what] * per_param / dp))
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
    units: tuple[Number, Number] | None = None,
) -> DpComm:
    """The data-parallel communication of one stage holding `n_params` parameters per GPU (with
    `experts`: routed-expert parameters, reduced over the expert-data-parallel ranks). `n_weights`
    (default `n_params`): the weights ZeRO-3 gathers, more than the trained ones under LoRA.

    ZeRO-0: all-reduce of the gradients; ZeRO-1: reduce-scatter of the gradients + all-gather of
    the updated 16-bit weights (the same bytes, Rajbhandari et al. 2020 Sec. 7; Megatron's
    distributed optimizer; with `zero1_grad_all_reduce`, nanotron's, an all-reduce of every
    gradient after the backward passes instead of the reduce-scatter); ZeRO-2: a reduce-scatter
    per micro-batch (gradients stay sharded); ZeRO-3: also two weight all-gathers per
    micro-batch, prefetched behind the forward and backward passes (no gather after the
    optimizer). `prices`: those of `collective_prices` for the ZeRO stages present, when already
    known; `units`: FSDP2's exposed units of the stage (`fsdp2_units`).
    """
    plan = scn.plan
    z = as_array(plan.zero_stage)
    if prices is None:
        prices = collective_prices(scn, fabric, place, n_params, zero_collectives(z), experts, n_weights, units)
    contention = contention_share(scn.cluster.gpu.sm_count)
    if one_value(z):  # one ZeRO stage: only its own collectives are priced
        k = int(z)
        fields = _zero_stage_fields(k, prices, cost, m, plan.overlap_param_gather, plan.zero1_grad_all_reduce)
        return DpComm(*fields, shared_window=k == 3, per_chunk=k <= 1, contention=contention)
    gather, whole = plan.overlap_param_gather, plan.zero1_grad_all_reduce
    every = zip(*(_zero_stage_fields(k, prices, cost, m, gather, whole) for k in range(4)), strict=True)
    chosen = [choose(z, list(v)) for v in every]  # z in 0..3 (the plan's rule): each field its stage's
    return DpComm(*chosen, shared_window=z == 3, per_chunk=z <= 1, contention=contention)


def _zero_stage_fields(
    k: int,
    prices: Mapping[str, Number],
    cost: StageCost,
    m: Number,
    overlap_param_gather: Number,
    grad_all_reduce: Number = False,
) -> tuple[Number, ...]:
    """DpComm's fields for ZeRO stage k (see `dp_comm`)."""
    backward = cost.compute_backward_s + cost.tp_backward_s
    if k == 0:
        return zero_stage_fields(0, prices, backward, 0.0, 0.0, m, overlap_param_gather)
    forward = cost.compute_forward_s + cost.tp_forward_s
    total = cost.total_s if k == 3 else 0.0
    return zero_stage_fields(k, prices, backward, forward, total, m, overlap_param_gather, grad_all_reduce)


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
    runs = zero_stage_runs(plan.zero_stage) if not scn.model.is_moe else None
    edges = scan_edges_s(scn, prices, params, expert_params, weights, m)
    per_stage = zip((0.0, 1.0, p - 1), params, expert_params, stages, prices, strict=True)
    for index, n_params, n_expert, cost, (dense, routed) in per_stage:
        # stage i ends its last backward i chunks early; interleaved, Megatron-Core launches each
        # chunk's reduction i chunk-passes late, aligned across the pipeline ranks (schedules.py:
        # "launch asynchronous communication at the same time across the pipeline-parallel
        # group"), which spends that drain
        backward = cost.compute_backward_s + cost.tp_backward_s
        drain = ifelse(v > 1, 0.0, index * backward / v)
        rounds = ifelse(v > 1, p, 1.0)
        serial = dense.get("replica_all_reduce", 0.0)  # XLA's replicas' all-reduce, never hidden
        if runs is not None:
            forward = cost.compute_forward_s + cost.tp_forward_s
            total = cost.total_s if any(k == 3 for k, _, _ in runs) else 0.0
            values = (
                backward,
                forward,
                total,
                m,
                plan.overlap_param_gather,
                plan.overlap_grad_reduce,
                drain,
                v,
                rounds,
                plan.zero1_grad_all_reduce,
            )
            contention = contention_share(scn.cluster.gpu.sm_count)
            joined = exposed_by_runs(runs, dense, values, contention)
            if joined is not None:
                exposed.append(_with_edges(joined[0], joined[1], edges[len(exposed)]) + serial)
                totals.append(joined[1] + serial)
                continue
        comm = dp_comm(scn, fabric, place, n_params - n_expert, cost, m, prices=dense)
        if routed is not None:
            comm = comm.plus(dp_comm(scn, fabric, place, n_expert, cost, m, experts=True, prices=routed))
        grad, gather = comm.exposed_s(plan.overlap_grad_reduce, drain, v, rounds)
        exposed.append(_with_edges(grad + gather, comm.total_s, edges[len(exposed)]) + serial)
        totals.append(comm.total_s + serial)
    mid = ifelse(p > 2, exposed[1], 0.0)
    dp_exposed = maximum(maximum(exposed[0], mid), exposed[2])
    # the hidden share of the stage whose exposed part sets the step
    pick = ifelse(exposed[0] >= maximum(mid, exposed[2]), 0, ifelse(exposed[2] >= mid, 2, 1))
    hidden = choose(pick, [totals[i] - exposed[i] for i in range(3)])
    return dp_exposed + tied_embedding_sync_s(scn, fabric, place), hidden


StagePrices = tuple[tuple[dict[str, Number], dict[str, Number] | None], ...]


def _with_edges(exposed_s: Number, total_s: Number, edges_s: Number) -> Number:
    """A stage's exposed data-parallel seconds with the scanned layers' edge collectives
    (`scan_edges_s`), which wait beside nothing, added; at most all of its communication."""
    if isinstance(edges_s, float) and edges_s == 0.0:
        return exposed_s
    return minimum(exposed_s + edges_s, total_s)


def scan_edges_s(
    scn: Scenario,
    prices: StagePrices,
    params: tuple[Number, Number, Number],
    expert_params: tuple[Number, Number, Number],
    weights: tuple[Number, Number, Number] | None,
    m: Number,
) -> tuple[Number, Number, Number]:
    """Per stage (first, fullest middle, last), the seconds ZeRO-3's gathers and reductions wait
    at the edges of XLA's scanned layers without the collective pipeliner (`Plan.scan_unpipelined`,
    `physics.xla_scan`): 0.0 where no plan has it."""
    plan = scn.plan
    flag = as_bool(plan.scan_unpipelined)
    z3 = as_array(plan.zero_stage) == 3
    if (one_value(flag) and not bool(flag)) or (one_value(z3) and not bool(z3)):
        return (0.0, 0.0, 0.0)
    split = scn.split
    edge = xla_scan.edge_params(scn.model) / as_float(plan.tp)
    held = params if weights is None else weights
    out = []
    each = zip((split.first, split.middle_max, split.last), params, expert_params, held, prices, strict=True)
    for layers, n_params, n_expert, n_held, (dense, _) in each:
        seconds = xla_scan.edge_exposed_s(
            dense["weights_all_gather"],
            dense["reduce_scatter"],
            edge,
            as_float(layers),
            maximum(n_held - n_expert, 1.0),
            maximum(n_params - n_expert, 1.0),
            m,
        )
        out.append(ifelse(flag & z3, seconds, 0.0))
    return out[0], out[1], out[2]


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
    for index, (n_params, n_expert, n_held) in enumerate(zip(params, expert_params, held, strict=True)):
        units = fsdp2_units(scn, first_stage=index == 0)
        dense = collective_prices(
            scn, fabric, place, n_params - n_expert, names, n_weights=n_held - n_expert, units=units
        )
        routed = collective_prices(scn, fabric, place, n_expert, names, experts=True) if scn.model.is_moe else None
        out.append((dense, routed))
    return tuple(out)


def fsdp2_units(scn: Scenario, first_stage: bool) -> tuple[Number, Number] | None:
    """FSDP2's exposed units of a stage (`physics.fsdp2.edge_units`), or None where no plan
    shards per parameter or the model's units hold routed experts."""
    per_param = as_bool(scn.plan.per_param_sharding)
    if not fsdp2.units_apply(scn.model) or (one_value(per_param) and not bool(per_param)):
        return None
    return fsdp2.edge_units(scn.model, scn.plan.tp, first_stage)


def tied_embedding_sync_s(scn: Scenario, fabric: Fabric, place: dict[str, Number]) -> Number:
    """Tied word embeddings: the first and the last stage all-reduce their copy's gradient after
    the backward pass (Megatron-LM), over the link between them; frozen under LoRA, nothing."""
    model, plan = scn.model, scn.plan
    if not model.tied_embeddings:
        return 0.0
    return _tied_sync_s(
        model, fabric, plan.precision, plan.grad_reduce_bf16, plan.tp, plan.pp, plan.lora_rank, place["pp"]
    )


@kept
def _tied_sync_s(
    model: Model,
    fabric: Fabric,
    precision: str,
    grad_bf16: Number,
    tp: Number,
    pp: Number,
    lora_rank: Number,
    pp_per_node: Number,
) -> Number:
    """`tied_embedding_sync_s` of what it reads (kept per it, `specs.memo.kept`; a fabric by identity)."""
    p = as_float(pp)
    grads = mem.grad_bytes_per_param(precision, grad_bf16) * model.vocab * model.hidden / tp
    sync = fabric.group(2, ifelse(pp_per_node < p, 1, 2)).all_reduce(grads)
    return ifelse((p > 1) & (as_array(lora_rank) == 0), sync, 0.0)
