"""Data parallelism's communication in a training step: each pipeline stage's gradient reduction
and ZeRO parameter gathers (priced by `engines.data_parallel`), with the compute each may hide
behind (`engines.dp_comm`), and the exposed part of the stage that sets the step. Tied word
embeddings add the first and last stages' all-reduce of their copy's gradient, after the later of
their reductions; every stage then waits for the slowest (the gradient norm's all-reduce).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from shardwise.arrays import as_array, as_bool, as_float, choose, ifelse, maximum, minimum, one_value, where
from shardwise.engines.costs import FIELDS, StageCost
from shardwise.engines.data_parallel import StagePrices, collective_prices, stage_collective_prices, zero_collectives
from shardwise.engines.dp_comm import DpComm, contention_share, exposed_by_runs, zero_stage_fields, zero_stage_runs
from shardwise.engines.dp_windows import backward_window_s, forward_window_s, spare_wait_s
from shardwise.engines.tp_overlap import collective_sms
from shardwise.physics import memory as mem
from shardwise.physics import xla_scan
from shardwise.physics.collectives import Fabric
from shardwise.physics.host_passes import drained_passes
from shardwise.physics.microbatch import fsdp2_kept_gathered, plan_deferred_sync
from shardwise.specs import Model, Plan, Scenario
from shardwise.specs._checks import Number
from shardwise.specs.memo import kept


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
    layers: Number | None = None,
    comm_m: Number | None = None,
    reduce_m: Number | None = None,
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
    known; `units`: FSDP2's exposed units of the stage (`fsdp2_units`); `layers`: the stage's layers,
    which ZeRO-3 gathers and reduces one at a time (default the model's over the stages). `comm_m`,
    `reduce_m`: the micro-batches whose collectives, whose gradient reductions run
    (`comm_micro_batches`, `reduce_micro_batches`; default m each).
    """
    plan = scn.plan
    z = as_array(plan.zero_stage)
    if prices is None:
        names = zero_collectives(z)
        prices = collective_prices(scn, fabric, place, n_params, names, experts, n_weights, units, layers)
    drained = drained_passes(plan)  # each pass ends in a device sync: its windows are its own (`dp_windows`)
    gpu = scn.cluster.gpu
    contention, wait = contention_share(gpu.sm_count, collective_sms(gpu)), spare_wait_s(cost, m, drained)
    rm = m if reduce_m is None else reduce_m  # the reductions' own count (`reduce_micro_batches`)
    m = m if comm_m is None else comm_m  # the collectives' own count (`comm_micro_batches`)
    if one_value(z):  # one ZeRO stage: only its own collectives are priced
        k = int(z)
        gather, whole = plan.overlap_param_gather, plan.zero1_grad_all_reduce
        fields = _zero_stage_fields(k, prices, cost, m, gather, whole, rm, drained)
        return DpComm(*fields, shared_window=k == 3, per_chunk=k <= 1, contention=contention, host_wait_s=wait)
    gather, whole = plan.overlap_param_gather, plan.zero1_grad_all_reduce
    every = zip(*(_zero_stage_fields(k, prices, cost, m, gather, whole, rm, drained) for k in range(4)), strict=True)
    chosen = [choose(z, list(v)) for v in every]  # z in 0..3 (the plan's rule): each field its stage's
    return DpComm(*chosen, shared_window=z == 3, per_chunk=z <= 1, contention=contention, host_wait_s=wait)


def _zero_stage_fields(
    k: int,
    prices: Mapping[str, Number],
    cost: StageCost,
    m: Number,
    overlap_param_gather: Number,
    grad_all_reduce: Number = False,
    reduce_m: Number | None = None,
    drained: Number = False,
) -> tuple[Number, ...]:
    """DpComm's fields for ZeRO stage k (see `dp_comm`); `drained`: where passes drain (`dp_windows`)."""
    # ZeRO-3's reductions hide behind the whole backward pass (its expert all-to-alls and offload
    # copies included), so that the forward passes' gathers keep exactly the forward pass
    # (`DpComm.zero3_phases`: the gathers' window, m total, less this one)
    backward = backward_window_s(cost, k == 3)
    if k == 0:
        return zero_stage_fields(0, prices, backward, 0.0, 0.0, m, overlap_param_gather)
    forward = forward_window_s(cost, drained)
    total = cost.total_s if k == 3 else 0.0
    return zero_stage_fields(k, prices, backward, forward, total, m, overlap_param_gather, grad_all_reduce, reduce_m)


def comm_micro_batches(plan: Plan, m: Number) -> Number:
    """How many micro-batches' worth of ZeRO-2/3 collectives a step runs: m, but 1 under FSDP2 with
    pipeline parallelism, whose stage keeps the weights gathered and the gradients unreduced until
    the last backward (`engines.fsdp2_copies`, `physics.memory_stacks.PP_FSDP_SOURCE`): its gathers
    are priced as one micro-batch's (two passes, an upper bound: the backward does not gather
    again) and its reduction once."""
    if one_value(plan.per_param_sharding) and not bool(plan.per_param_sharding):
        return m  # (one plan of plain numbers without it: no numpy call)
    return ifelse(fsdp2_kept_gathered(plan.per_param_sharding, plan.pp), 1.0, m)


def reduce_micro_batches(plan: Plan, m: Number) -> Number:
    """How many micro-batches' ZeRO-2/3 gradient reductions a step runs: m, but 1 where FSDP2's
    gradient sync is off until the last micro-batch (`physics.microbatch.plan_deferred_sync`: under
    pipeline parallelism, or at pp = 1 where the stack's loop defers it, NeMo AutoModel's): with
    `reduce_grads` off, torch's FSDPParamGroup.post_backward (torch/distributed/fsdp/_fully_shard/
    _fsdp_param_group.py) reshards and keeps the gradient accumulated (`to_accumulated_grad_if_needed`)
    and returns before `foreach_reduce`, so the reduce-scatter runs in the last backward alone. At pp =
    1 the weights are still resharded after each forward and backward (`reshard_after_backward`), so
    the gathers stay per micro-batch (`comm_micro_batches`)."""
    if one_value(plan.per_param_sharding) and not bool(plan.per_param_sharding):
        return m  # (one plan of plain numbers without it: no numpy call)
    return ifelse(plan_deferred_sync(plan), 1.0, m)


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
    mc, mr = comm_micro_batches(plan, m), reduce_micro_batches(plan, m)
    heads = chunk_head_shares(scn, params if weights is None else weights)
    drained = drained_passes(plan)  # each pass ends in a device sync: its windows are its own (`dp_windows`)
    per_stage = zip((0.0, 1.0, p - 1), params, expert_params, stages, prices, heads, strict=True)
    for index, n_params, n_expert, cost, (dense, routed), head in per_stage:
        # stage i ends its last backward i chunks early; interleaved, Megatron-Core launches each
        # chunk's reduction i chunk-passes late, aligned across the pipeline ranks (schedules.py:
        # "launch asynchronous communication at the same time across the pipeline-parallel
        # group"), which spends that drain
        backward = backward_window_s(cost)
        drain = ifelse(v > 1, 0.0, index * backward / v)
        rounds = ifelse(v > 1, p, 1.0)
        serial = dense.get("replica_all_reduce", 0.0)  # XLA's replicas' all-reduce, never hidden
        if runs is not None:
            forward = forward_window_s(cost, drained)
            total = cost.total_s if any(k == 3 for k, _, _ in runs) else 0.0
            values = (
                backward,
                forward,
                total,
                mc,
                plan.overlap_param_gather,
                plan.grad_reduce_overlapped,
                drain,
                v,
                rounds,
                plan.zero1_grad_all_reduce,
                backward_window_s(cost, True),  # ZeRO-3's reductions' window (`_zero_stage_fields`)
                spare_wait_s(cost, m, drained),
                head,
                plan.aligned_chunk_sync,
                mr,
            )
            contention = contention_share(scn.cluster.gpu.sm_count, collective_sms(scn.cluster.gpu))
            joined = exposed_by_runs(runs, dense, values, contention)
            if joined is not None:
                exposed.append(_with_edges(joined[0], joined[1], edges[len(exposed)]) + serial)
                totals.append(joined[1] + serial)
                continue
        comm = dp_comm(scn, fabric, place, n_params - n_expert, cost, m, prices=dense, comm_m=mc, reduce_m=mr)
        if routed is not None:
            routed_comm = dp_comm(scn, fabric, place, n_expert, cost, m, True, prices=routed, comm_m=mc, reduce_m=mr)
            comm = comm.plus(routed_comm)
        grad, gather = comm.exposed_s(plan.grad_reduce_overlapped, drain, v, rounds, head, plan.aligned_chunk_sync)
        exposed.append(_with_edges(grad + gather, comm.total_s, edges[len(exposed)]) + serial)
        totals.append(comm.total_s + serial)
    # the tied embeddings' all-reduce, one collective of the first and last stage from the later of
    # their reductions' ends; then the gradient norm's all-reduce over every stage (clipping): the
    # optimizer starts when the slowest stage is ready (`simulator.finish_step`)
    mid = ifelse(p > 2, exposed[1], 0.0)
    ends = maximum(exposed[0], exposed[2]) + tied_embedding_sync_s(scn, fabric, place)
    dp_exposed = maximum(ends, mid)
    # the hidden share of the stage whose exposed part sets the step
    pick = ifelse(ends >= mid, ifelse(exposed[0] >= exposed[2], 0, 2), 1)
    hidden = choose(pick, [totals[i] - exposed[i] for i in range(3)])
    return dp_exposed, hidden


def chunk_head_shares(scn: Scenario, held: tuple[Number, Number, Number]) -> tuple[Number, Number, Number]:
    """The share of the (first, fullest middle, last) stage's parameters in its model chunk 0,
    whose reduction and gather wait whole under the interleaved schedule (`DpComm.exposed_s`):
    1/v of the layers, with the first stage's word embedding (/ tp) and learned position table
    in its chunk 0 and the last stage's output matrix (or tied copy) in its chunk v-1 (Megatron-
    Core builds the embedding in the first virtual stage, `pre_process`, the output layer in the
    last, `post_process`: megatron/core/models/gpt/gpt_model.py). Under LoRA the embeddings are
    frozen: 1/v. `held`: each stage's parameters per GPU (`physics.params.stage_params_per_gpu`)."""
    model, plan = scn.model, scn.plan
    v = as_float(plan.vpp)
    word = model.vocab * model.hidden / as_float(plan.tp)
    pos = model.seq_len * model.hidden if model.learned_positions else 0
    frozen = as_array(plan.lora_rank) > 0
    first_extra, last_extra = ifelse(frozen, 0.0, word + pos), ifelse(frozen, 0.0, word)

    def share(n: Number, extra: Number, first: bool) -> Number:
        n = maximum(as_float(n), 1.0)
        layers = maximum(n - extra, 0.0) / v
        return minimum((layers + extra) / n if first else layers / n, 1.0)

    return share(held[0], first_extra, True), 1.0 / v, share(held[2], last_extra, False)


def chunked_left_s(
    left_s: float,
    bucket_s: float,
    grad_s: float,
    one_backward_s: float,
    v: int,
    p: int,
    i: int,
    head: float,
    aligned: bool,
) -> tuple[float, float]:
    """The simulator's (exposed reduction, unhideable part) of pipeline stage i's per-chunk
    reductions under the interleaved schedule (`DpComm.exposed_s`, the closed form's rule): all
    but chunk 0's hide behind the last round's (v-1) p earlier chunk-backward passes, and the
    reduction starts i chunk-passes late, aligned across the pipeline ranks. `aligned`
    (`Plan.aligned_chunk_sync`, Megatron-Core's DDP): chunk 0's share `head` waits whole, so it is
    also the unhideable part; otherwise chunk 0's 1/v, which the simulator hides behind its last
    backward operation, and the last bucket stays the unhideable part. `left_s`: the reduction
    less what earlier micro-batches hide; `one_backward_s`: one micro-batch's backward on all v
    chunks. Nothing to reduce (dp = 1: `grad_s` 0) starts nothing late: no reduction, no wait."""
    share = head if aligned else 1.0 / v
    late = i * one_backward_s / v if grad_s > 0 else 0.0
    left = max(left_s - (v - 1) * p * one_backward_s / v, grad_s * share) + late
    return left, max(bucket_s, grad_s * head) if aligned else bucket_s


# a stage's per-micro-batch seconds that ZeRO-2/3's gathers and reductions hide behind: all but
# the TP collectives already hidden and the weight-gradient share inside the backward
PACED_FIELDS = tuple(f for f in FIELDS if f not in ("tp_hidden_s", "weight_grad_s"))


def paced_cost(cost: StageCost, stretch: Number, zero_stage: Number) -> StageCost:
    """One stage's cost with its passes stretched as the data-parallel collectives that run
    through them see them (`paced_stages`): by `stretch` (the pace over the stage's own time)
    under ZeRO-2/3, whose per-micro-batch gathers and reductions, where they outlast the stage's
    own passes, lengthen its time per micro-batch inside the slack it waits through for its
    neighbours (in the steady state and the cool-down alike), not the pace; not at all under
    ZeRO-0/1, whose one reduction starts in the last backward pass, which runs through the
    cool-down without a break (what the stages below still run after it is the drain,
    `data_parallel_exposed_s`), and whose gather hides behind the next step's first forward (so
    does ZeRO-2's: its forward passes are stretched only under ZeRO-3, which gathers in each)."""
    z = as_array(zero_stage)
    backward, forward = where(z >= 2, stretch, 1.0), where(z == 3, stretch, 1.0)
    return replace(cost, **{f: getattr(cost, f) * (forward if "forward" in f else backward) for f in PACED_FIELDS})


def pace_stretch(pace_s: Number, own_s: Number) -> Number:
    """How much longer than a stage's own passes (`own_s`, without sends) the pipeline's pace
    (`pace_s`) holds it per micro-batch: at least 1 (`paced_stages`, the simulator's stages)."""
    return where(own_s > 0, maximum(pace_s / where(own_s > 0, own_s, 1.0), 1.0), 1.0)


def paced_stages(
    stages: tuple[StageCost, StageCost, StageCost],
    times_s: tuple[Number, Number, Number],
    p: Number,
    zero_stage: Number = 3,
) -> tuple[StageCost, StageCost, StageCost]:
    """The (first, middle, last) stages' costs as their data-parallel communication sees them
    under a pipeline's pace: in its steady state every stage passes one micro-batch per `c_max`,
    the largest of the stages' times per micro-batch (`times_s`: with their sends and fixed
    costs, as the makespan reads them), and spends what its own compute and collectives leave of
    it waiting for its neighbours' sends, time the reductions of ZeRO-2/3 run through
    (`paced_cost`: stretched by c_max / its own time without sends). With one stage (pp = 1) the
    costs are kept. Without it a faster GPU, speeding a stage that does not set the step or the
    compute of one whose sends do, shortened the windows that stage hides its data-parallel
    communication behind: the step rose (tests/test_invariants.py)."""
    if one_value(p) and float(p) == 1.0:
        return stages
    if one_value(zero_stage) and int(zero_stage) < 2:
        return stages
    pp = as_float(p)
    c_max = maximum(maximum(times_s[0], where(pp > 2, times_s[1], 0.0)), times_s[2])
    out = []
    for cost in stages:
        out.append(paced_cost(cost, where(pp > 1, pace_stretch(c_max, cost.total_s), 1.0), zero_stage))
    return out[0], out[1], out[2]


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
    held = params if weights is None else weights
    out = []
    each = zip((split.first, split.middle_max, split.last), params, expert_params, held, prices, strict=True)
    for layers, n_params, n_expert, n_held, (dense, _) in each:
        out.append(
            ifelse(flag & z3, stage_scan_edges_s(scn, dense, layers, n_params - n_expert, n_held - n_expert, m), 0.0)
        )
    return out[0], out[1], out[2]


def stage_scan_edges_s(
    scn: Scenario, dense: Mapping[str, Number], layers: Number, n_params: Number, n_held: Number, m: Number
) -> Number:
    """One stage's seconds of `scan_edges_s` (whatever its plan's flags) from its dense
    parameters' collective prices (`dense`: "weights_all_gather" and "reduce_scatter"), its
    layers and its dense trained and held parameters."""
    edge = xla_scan.edge_params(scn.model) / as_float(scn.plan.tp)
    return xla_scan.edge_exposed_s(
        dense["weights_all_gather"],
        dense["reduce_scatter"],
        edge,
        as_float(layers),
        maximum(n_held, 1.0),
        maximum(n_params, 1.0),
        m,
    )


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
