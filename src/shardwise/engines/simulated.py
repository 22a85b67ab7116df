"""A training step by discrete-event simulation: the cost model's per-stage durations fed to the
pipeline simulator (`engines.simulator`) instead of the closed form.

Per stage i (first, middle or last; the first also runs the embedding, the last the output
layer and loss): forward and backward of one micro-batch with their exposed TP collectives, the
weight-gradient part of the backward for ZB-H1, a send to each neighbour that crosses nodes where
stage i and its neighbour sit on different servers (rank order tp-dp-pp), the data-parallel
reduction the closed form prices (the part that can hide behind earlier micro-batches already
taken off), and the optimizer. Scalar scenarios only: a simulation runs one plan.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from shardwise.engines.context_parallel import cp_step_s, micro_batch_view
from shardwise.engines.costs import FIELDS, StageCost, add_costs, layer_cost
from shardwise.engines.data_parallel import collective_prices, fsdp2_units
from shardwise.engines.dp_comm import unhideable_s
from shardwise.engines.dp_step import (
    chunk_head_shares,
    chunked_left_s,
    comm_micro_batches,
    dp_comm,
    pace_stretch,
    paced_cost,
    reduce_micro_batches,
    stage_scan_edges_s,
    tied_embedding_sync_s,
)
from shardwise.engines.dp_windows import backward_window_s
from shardwise.engines.fsdp2_copies import sharding_copies
from shardwise.engines.moe import moe_layer_cost, stage_expert_params, stage_params
from shardwise.engines.mtp import with_mtp
from shardwise.engines.recompute_whole import recomputed_layer_extra
from shardwise.engines.result import StepBreakdown, TrainingEstimate
from shardwise.engines.schedules import SCHEDULES, SPLIT_BACKWARD
from shardwise.engines.simulator import SimulationResult, StageTimes, simulate, simulate_times
from shardwise.engines.stage_ends import embedding_cost, head_cost
from shardwise.engines.stage_sends import stage_send_time_s
from shardwise.engines.tp_overlap import tp_comm
from shardwise.engines.training_layout import optimizer_time_s
from shardwise.engines.training_stages import PIPELINE_SYNC_S, offload_times, stage_key
from shardwise.errors import SpecError
from shardwise.physics.collectives import Fabric
from shardwise.physics.lora import trainable_params
from shardwise.physics.params import layer_params_split, moe_layer_params_per_gpu
from shardwise.physics.topology import placement
from shardwise.specs import Scenario, memo
from shardwise.specs.memo import Memo
from shardwise.specs.stages import chunk_recomputed_layers, moe_layers_below, plan_split, stage_layer_list


@dataclass(frozen=True)
class SimulatedStep:
    estimate: TrainingEstimate  # step time and breakdown from the simulation
    simulation: SimulationResult
    stage_times: StageTimes


def _scalar(name: str, value: object) -> int | float:
    arr = np.asarray(value)
    if arr.size != 1:
        raise SpecError(f"the simulator runs one plan at a time; {name} is an array of {arr.size}")
    return arr.item()


def stage_times(scn: Scenario) -> StageTimes:
    """Seconds per micro-batch of every stage (whole stage; the simulator divides by v)."""
    model, cluster, plan = scn.model, scn.cluster, scn.plan
    p = int(_scalar("pp", plan.pp))
    m = int(_scalar("micro-batches", plan.num_micro_batches))
    fabric = Fabric.of(cluster)
    place = placement(plan, cluster.gpus_per_node, experts=model.is_moe)
    if model.is_moe:  # as in the closed form, an MoE model's stage costs are priced for every plan
        local = micro_batch_view(scn)
        comm = tp_comm(local, fabric, place["tp"])
        cp_step = cp_step_s(scn, fabric, place)
        layer, emb, head, sends, extra = _layer_parts(scn, local, fabric, comm, cp_step)
    else:  # kept under what the closed form's stage costs read (`training_stages.stage_key`): plans that differ
        # in dp, the schedule, vpp, ZeRO or the global batch share them (the planner re-times several)
        whole = bool(np.any(np.asarray(scn.plan.recompute_layers) > 0))  # the parts' extra is None without
        parts = _PARTS.get_or_compute((*stage_key(scn), whole), lambda: _dense_parts(scn, fabric, place))
        layer, emb, head, sends, extra = parts
    split = plan_split(model.layers, plan)
    counts = stage_layer_list(split, p)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    n_moe = [0] * p
    moe, moe_params = layer, (0.0, 0.0)
    if model.is_moe:  # each stage's MoE layers (the ones after the dense ones, every moe_every-th)
        below = [moe_layers_below(x, model.dense_layers, model.moe_every) for x in (*starts, int(model.layers))]
        if model.is_hybrid:  # the E layers' share of each stage's mean layers (`engines.moe.model_moe_split`)
            below = [x * model.moe_layers / int(model.layers) for x in (*starts, int(model.layers))]
        whole_layers = int if not model.is_hybrid else float
        n_moe = [whole_layers(below[i + 1] - below[i]) for i in range(p)]
        moe = moe_layer_cost(local, comm, fabric, place, model.seq_len, plan.cp, cp_step, training=True)
        moe_params = moe_layer_params_per_gpu(model, plan.tp, plan.ep, plan.expert_tp)
        head = with_mtp(head, local, comm, moe)  # multi-token prediction on the last stage
    kinds = [
        _stage_cost(n - k, layer, emb if i == 0 else None, head if i == p - 1 else None, k, moe)
        for i, (n, k) in enumerate(zip(counts, n_moe, strict=True))
    ]
    copies = sharding_copies(scn)  # FSDP2's copies: every layer (an MoE layer's its own), the two ends
    if copies is not None:
        c_layer, c_emb, c_head, c_moe = copies
        kinds = [
            add_costs(
                kind, _stage_cost(n - k, c_layer, c_emb if i == 0 else None, c_head if i == p - 1 else None, k, c_moe)
            )
            for i, (kind, n, k) in enumerate(zip(kinds, counts, n_moe, strict=True))
        ]
    if extra is not None:  # layers recomputed whole
        whole = [float(chunk_recomputed_layers(n, plan.vpp, plan.recompute_layers)) for n in counts]
        kinds = [add_costs(kind, _stage_cost(w, extra, None, None)) for kind, w in zip(kinds, whole, strict=True)]  # type: ignore[arg-type]
    if plan.offload_activation_layers:  # activation copies to host memory (`training_stages.offload_times`)
        view = micro_batch_view(scn)
        priced = [
            offload_times(view, n, layer, k, moe if model.is_moe else None) for n, k in zip(counts, n_moe, strict=True)
        ]
        kinds = [replace(x, offload_forward_s=f, offload_backward_s=b) for x, (f, b) in zip(kinds, priced, strict=True)]
    matrices, replicated = layer_params_split(model)
    per_layer = matrices / plan.tp + replicated
    params, ends = stage_params(model, plan, split), stage_expert_params(model, plan, split)
    middles = range(1, p - 1)
    held = [params[0]] + [per_layer * (counts[i] - n_moe[i]) + n_moe[i] * sum(moe_params) for i in middles]
    held += [params[2]] if p > 1 else []
    stage_experts = [ends[0]] + [n_moe[i] * moe_params[1] for i in middles] + ([ends[2]] if p > 1 else [])
    e = plan.bytes_per_element
    trained = [
        trainable_params(model, plan.tp, plan.lora_rank, e, n, x, plan.lora_targets)
        for n, x in zip(counts, held, strict=True)
    ]
    split_bwd = plan.schedule.label in SPLIT_BACKWARD
    forward = np.array([float(np.asarray(c.forward_s)) for c in kinds])
    backward = np.array([float(np.asarray(c.backward_s)) for c in kinds])
    weight = np.array([float(np.asarray(c.weight_grad_s)) for c in kinds]) if split_bwd else np.zeros(p)
    # which boundaries cross servers: stage i holds ranks i*tp*dp ... (i+1)*tp*dp - 1
    span = int(_scalar("tp", plan.tp)) * int(_scalar("dp", plan.dp)) * int(_scalar("cp", plan.cp))
    node = np.arange(p) * span // int(_scalar("gpus_per_node", cluster.gpus_per_node))
    crosses_f = node != np.roll(node, -1)
    crosses_b = node != np.roll(node, 1)
    send_f = np.array([sends[int(c)] for c in crosses_f])
    send_b = np.array([sends[int(c)] for c in crosses_b])
    overlap = bool(_scalar("overlap_grad_reduce", plan.grad_reduce_overlapped))
    blocking = p > 1 and not bool(_scalar("overlap_p2p", plan.overlap_p2p))
    blocked = np.zeros(p)  # per micro-batch, the stage's own time spent in blocking sends and syncs
    if blocking:
        # Megatron's 1F1B: every forward and backward chunk ends with a blocking batched
        # send/receive and a device sync, on the stage's own time (as in the closed form);
        # DeepSpeed's engine sends and receives one after the other (`physics.microbatch`)
        serial = bool(_scalar("p2p_serial", plan.p2p_serial))
        per_op = send_f + send_b if serial else np.maximum(send_f, send_b)
        sync = PIPELINE_SYNC_S if bool(_scalar("pipeline_sync", plan.pipeline_sync)) else 0.0
        forward = forward + plan.vpp * (per_op + sync)
        backward = backward + plan.vpp * (per_op + sync)
        blocked = 2 * plan.vpp * (per_op + sync)
        send_f, send_b = np.zeros(p), np.zeros(p)
    # the stack's host work around its sends and receives (nanotron's handshakes), half on each
    # pass: a middle stage's count, half of it on the first and last stage (as the closed form)
    handshakes = float(_scalar("p2p_host_ops", plan.p2p_host_ops)) * float(_scalar("host_kernel_s", plan.host_kernel_s))
    if p > 1 and handshakes > 0:
        share = np.where((np.arange(p) == 0) | (np.arange(p) == p - 1), 0.5, 1.0) * plan.vpp * handshakes
        forward, backward = forward + share / 2, backward + share / 2
        blocked = blocked + share
    # the stack's fixed cost per micro-batch (0 unless calibrated), half on each pass
    mb_over = float(np.asarray(cluster.micro_batch_overhead_s))
    forward, backward = forward + mb_over / 2, backward + mb_over / 2
    tied = float(np.asarray(tied_embedding_sync_s(scn, fabric, place)))
    dp, tail, gather, opt, syncs = [], [], [], [], []
    priced: dict[Any, Any] = {}  # the middle stages hold the same layers: their reductions priced once
    heads = chunk_head_shares(scn, (held[0], held[0], held[-1]))  # chunk 0's share (`DpComm.exposed_s`)
    aligned = bool(_scalar("aligned_chunk_sync", plan.aligned_chunk_sync))

    # the pace of the pipeline's steady state: ZeRO-2/3's reductions run through what a stage's
    # own passes leave of it (`dp_step.paced_cost`, as the closed form)
    overlapped = bool(_scalar("overlap_p2p", plan.overlap_p2p))  # sends beside compute (`training_layout`)
    pace = np.maximum(forward + backward, send_f + send_b) if overlapped else forward + backward + send_f + send_b
    own = np.array([float(np.asarray(c.total_s)) for c in kinds])
    stretches = pace_stretch(pace.max(), own) if p > 1 else np.ones(p)

    def stage_comm(cost: StageCost, n_params: Any, n_expert: Any, n_weights: Any, first: bool, layers: int) -> Any:
        units = fsdp2_units(scn, first)
        dense = n_weights - n_expert
        # FSDP2 under pipelining: one micro-batch's collectives; deferred sync: one reduction a step
        counts = {"comm_m": comm_micro_batches(plan, m), "reduce_m": reduce_micro_batches(plan, m)}
        c = dp_comm(
            scn, fabric, place, n_params - n_expert, cost, m, n_weights=dense, units=units, layers=layers, **counts
        )
        if model.is_moe:
            c = c.plus(dp_comm(scn, fabric, place, n_expert, cost, m, experts=True, layers=layers, **counts))
        return c

    paced = [paced_cost(c, stretches[i], plan.zero_stage) for i, c in enumerate(kinds)]
    each = enumerate(zip(paced, trained, stage_experts, held, counts, strict=True))
    for i, (cost, n_params, n_expert, n_weights, layers) in each:
        try:  # a stage equal to an earlier one in everything its reductions read (memos on: `specs.memo`)
            key = (cost, n_params, n_expert, n_weights, type(n_params), type(n_expert), type(n_weights), i == 0, layers)
            c = priced.get(key) if memo.ENABLED else None
            if c is None:
                c = priced[key] = stage_comm(cost, n_params, n_expert, n_weights, i == 0, layers)
        except TypeError:  # a field that does not hash
            c = stage_comm(cost, n_params, n_expert, n_weights, i == 0, layers)
        one_backward = float(np.asarray(backward_window_s(cost)))
        # ZeRO-3: the backward passes' gathers share the reductions' window (the backward compute),
        # the forward passes' hide behind their own compute (`DpComm.zero3_phases`); otherwise the
        # reduction hides behind the backward passes and the gather comes after the optimizer
        z3 = bool(np.asarray(c.shared_window))
        forward_excess, backward_comm, _ = (float(np.asarray(x)) for x in c.zero3_phases()) if z3 else (0.0,) * 3
        total = backward_comm if z3 else float(np.asarray(c.grad_s))
        window = float(np.asarray(c.grad_window_s))
        bucket = float(np.asarray(c.grad_bucket_s)) + (float(np.asarray(c.gather_bucket_s)) if z3 else 0.0)
        # the simulator hides the reduction behind the last backward operation only; what the
        # closed form hides behind earlier micro-batches (ZeRO-2/3) is taken off here
        earlier = max(0.0, window - one_backward)
        hides = overlap or z3
        left = max(0.0, total - earlier)
        v, head = int(plan.vpp), float(np.asarray(heads[0 if i == 0 else 2 if i == p - 1 else 1]))
        if hides and not z3 and v > 1 and bool(np.asarray(c.per_chunk)):  # per-chunk reductions
            grad_s = float(np.asarray(c.grad_s))
            left, bucket = chunked_left_s(left, bucket, grad_s, one_backward, v, p, i, head, aligned)
        dp.append((left if hides else total) + forward_excess)
        # unhideable: the last bucket, and the compute NCCL's SMs take while the rest hides
        # (ZeRO-3: NCCL's SMs are held through the forward passes' gathers too, as `DpComm._shared_s`
        # counts them; what the forward passes leave exposed is never hidden by the last backward)
        both = float(np.asarray(c.total_s)) if z3 else total
        floor = max(float(unhideable_s(bucket, both, float(np.asarray(c.contention)))), forward_excess)
        if hides:  # the floor stays exposed even where the windows hide all the rest (`_shared_s`, `_hidden_beside`)
            tail.append(min(both, floor))
            dp[-1] = max(dp[-1], tail[-1])
        else:
            tail.append(dp[-1])
        # with ZeRO-3 the scanned layers' edge collectives (`dp_step.scan_edges_s`), at most all the
        # communication; then XLA's replicas' all-reduce (`Plan.spmd_grad_reduce`) and the tied
        # embeddings' sync, never hidden (as the closed form, `dp_step._with_edges`)
        scan = z3 and bool(_scalar("scan_unpipelined", plan.scan_unpipelined))
        names = ("replica_all_reduce", *(("weights_all_gather", "reduce_scatter") if scan else ()))
        units, dense = fsdp2_units(scn, i == 0), n_weights - n_expert
        serial = collective_prices(
            scn, fabric, place, n_params - n_expert, names, n_weights=dense, units=units, layers=layers
        )
        edges = float(np.asarray(stage_scan_edges_s(scn, serial, layers, n_params - n_expert, dense, m) if scan else 0))
        tail[-1] = min(tail[-1] + edges, max(both, tail[-1]))
        dp[-1] = max(min(dp[-1] + edges, max(both + one_backward, dp[-1])), tail[-1])  # exposed <= both
        syncs.append(tied if i in (0, p - 1) and p > 1 else 0.0)  # after the reductions (`simulator.KIND_NAMES`)
        after = float(np.asarray(serial["replica_all_reduce"])) + syncs[-1]
        dp[-1], tail[-1] = dp[-1] + after, tail[-1] + after
        rounds = p if int(plan.vpp) > 1 else 1
        gather.append(0.0 if z3 else float(np.asarray(c.exposed_s(overlap, 0.0, v, rounds, head, aligned)[1])))
        opt.append(float(np.asarray(optimizer_time_s(scn, n_params, n_expert, n_weights))))
    return StageTimes(
        forward,
        backward - weight,
        weight,
        send_f,
        send_b,
        np.array(dp),
        np.array(opt),
        overlap or int(_scalar("zero_stage", plan.zero_stage)) == 3,
        np.array(tail),
        np.array(gather),
        blocked,
        np.array(syncs),
    )


# One dense configuration's layer, embedding, output layer, sends (within a node, across) and
# whole-layer recomputation, kept under what they read (`training_stages.stage_key`, the closed form's
# per-micro-batch stage costs: the same calls on the same arguments).
_PARTS = Memo("simulated stage parts")


def _dense_parts(
    scn: Scenario, fabric: Fabric, place: dict[str, Any]
) -> tuple[StageCost, StageCost, StageCost, tuple[float, float], StageCost | None]:
    local = micro_batch_view(scn)
    comm = tp_comm(local, fabric, place["tp"])
    return _layer_parts(scn, local, fabric, comm, cp_step_s(scn, fabric, place))


def _layer_parts(
    scn: Scenario, local: Scenario, fabric: Fabric, comm: Any, cp_step: Any
) -> tuple[StageCost, StageCost, StageCost, tuple[float, float], StageCost | None]:
    """A micro-batch's costs of one layer, the embedding and the output layer, one pipeline send
    within a node and across nodes, and the extra of a layer recomputed whole (None: none is)."""
    model, plan = scn.model, scn.plan
    layer, _ = layer_cost(local, comm, kv_len=model.seq_len, cp=plan.cp, cp_step=cp_step)
    emb, head = embedding_cost(local, comm), head_cost(local, comm)
    if not model.is_moe:  # an MoE model's modules hold an MoE layer: added with it (`stage_times`)
        head = with_mtp(head, local, comm, layer)
    sends = tuple(float(np.asarray(stage_send_time_s(local, fabric, comm, c))) for c in (False, True))
    extra = recomputed_layer_extra(local, comm, model.seq_len, cp_step)
    return layer, emb, head, sends, extra  # type: ignore[return-value]


def _stage_cost(
    n_layers: int,
    layer: StageCost,
    emb: StageCost | None,
    head: StageCost | None,
    n_moe: int = 0,
    moe: StageCost | None = None,
) -> StageCost:
    """A stage of `n_layers` dense and `n_moe` mixture-of-experts layers (and the embedding or
    the output layer)."""
    parts = [StageCost(*(n_layers * getattr(layer, f) for f in FIELDS))]
    if n_moe and moe is not None:
        parts.append(StageCost(*(n_moe * getattr(moe, f) for f in FIELDS)))
    parts += [x for x in (emb, head) if x is not None]
    return StageCost(*(sum(getattr(x, f) for x in parts) for f in FIELDS))


# The simulator's limit: p x m x v at most this (about 10 s and 1.5 GB for the 4M operations).
MAX_SLOTS = 2_000_000
# the estimate's FLOPs counts, the closed form's (`engines.training_flops`)
FLOPS_FIELDS = ("model_flops_per_step", "hardware_flops_per_step", "masked_attention_flops_per_step",
                "attention_recompute_flops_per_step")  # fmt: skip


def simulate_training_step(scn: Scenario, records: bool = True) -> SimulatedStep:
    """Simulate the plan's schedule operation by operation and report it like the closed form.
    Without `records` the simulation lists no operations (`simulator.simulate_times`: the same
    numbers, faster; what the planner needs)."""
    plan = scn.plan
    names = ("tp", "pp", "dp", "vpp", "global_batch", "micro_batch", "schedule", "recompute", "recompute_layers",
             "zero_stage")  # fmt: skip
    for name in names:
        _scalar(name, getattr(plan, name))
    p, m, v = int(plan.pp), int(plan.num_micro_batches), int(plan.vpp)
    if np.any(np.asarray(plan.pipeline_flushes) > 1):
        raise SpecError(
            "plan: pipeline_flushes > 1 is priced by the closed form only (`predict`); the simulation runs one "
            "schedule per step"
        )
    if p * m * v > MAX_SLOTS:
        raise SpecError(
            f"the simulation would run {2 * p * m * v:,} operations (pp={p} x {m} micro-batches x vpp={v} x 2); "
            f"at most {2 * MAX_SLOTS:,}: use a smaller global batch or a larger micro-batch, or `predict` "
            "(the closed form, any size)"
        )
    times = stage_times(scn)
    name = plan.schedule.label
    if records:
        sim = simulate(SCHEDULES[name](p, m, v), times, v, name in SPLIT_BACKWARD, name)
    else:
        sim = simulate_times(name, p, m, v, times)
    busiest = int(np.argmax(sim.busy_s))
    # how the busiest stage's busy time splits into compute and exposed TP communication
    closed = _closed_form_parts(scn)
    sends = m * float(times.blocking_s[busiest]) if times.blocking_s is not None else 0.0
    over_mb = m * float(np.asarray(scn.cluster.micro_batch_overhead_s))
    over_step = float(np.asarray(scn.cluster.step_overhead_s))
    busy = float(sim.busy_s[busiest]) - sends - over_mb
    tp_share, ep_share, offload_share = closed["tp_share"], closed["ep_share"], closed["offload_share"]
    last_tail = sim.makespan_s - sim.pipeline_end_s
    optimizer = float(times.optimizer_s[int(np.argmax(times.dp_s + times.optimizer_s))])
    breakdown = StepBreakdown(
        compute_s=busy * (1 - tp_share - ep_share - offload_share),
        tp_comm_s=busy * tp_share,
        ep_comm_s=busy * ep_share,
        offload_s=busy * offload_share,
        pp_p2p_s=sends,  # blocking sends (and syncs); overlapped ones only show as bubble when late
        # the busiest stage's idle time; rounding leaves -1e-16 where it is never idle
        pp_bubble_s=max(0.0, sim.pipeline_end_s - busy - sends - over_mb),
        dp_comm_s=max(0.0, last_tail - optimizer),
        optimizer_s=min(optimizer, last_tail),
        overhead_s=over_mb + over_step,
    )
    estimate = TrainingEstimate(
        **closed["flops"],  # the closed form's FLOPs of the same scenario
        scenario=scn,
        step_time_s=sim.makespan_s + over_step,
        breakdown=breakdown,
        memory=closed["memory"],  # the closed form's (the same stages)
        bubble_fraction=breakdown.pp_bubble_s / (sim.makespan_s + over_step),
        hidden_comm_s={"tp_comm": closed["tp_hidden_s"], "dp_comm": 0.0},
    )
    return SimulatedStep(estimate, sim, times)


def _closed_form_parts(scn: Scenario) -> dict[str, Any]:
    """The shares of a stage's busy time that are exposed TP communication and expert all-to-alls,
    the hidden TP communication and the memory (from the closed form)."""
    from shardwise.engines.training import estimate_training_step

    est = estimate_training_step(scn)
    b = est.breakdown
    busy = float(b.compute_s + b.tp_comm_s + b.ep_comm_s + b.offload_s)
    return {
        "tp_share": float(b.tp_comm_s) / busy if busy > 0 else 0.0,
        "ep_share": float(b.ep_comm_s) / busy if busy > 0 else 0.0,
        "offload_share": float(b.offload_s) / busy if busy > 0 else 0.0,
        "tp_hidden_s": float(est.hidden_comm_s["tp_comm"]),
        "memory": est.memory,
        # the same functions of the same scenario (`training.estimate_each_training_step`'s diagnostics)
        "flops": {name: getattr(est, name) for name in FLOPS_FIELDS},
    }
