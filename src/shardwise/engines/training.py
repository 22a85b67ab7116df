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
Non-interleaved 1F1B and GPipe take their exact makespans over every stage's forward and backward
passes instead (`engines.pipeline_uneven`: the closed form is exact for 1F1B only with equal stages,
for GPipe where one stage is the slowest in both passes).
Per-micro-batch costs (the weight gradients accumulated into fp32 main_grad, the sends and their
syncs) are inside c_j, so they also grow the bubble. The data-parallel gradient reduction
follows, hidden behind the last backward pass when bucketed and overlapped (and behind the
pipeline drain for later stages) except for its last bucket, then the optimizer, then the
distributed optimizer's parameter all-gather (exposed unless overlapped with the next step's
first forward pass).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shardwise.arrays import any_true, as_array, as_float, maximum, plus, where
from shardwise.engines.context_parallel import context_parallel, cp_step_s, micro_batch_view
from shardwise.engines.costs import layer_cost
from shardwise.engines.deferred import Later, deferred, rebound
from shardwise.engines.distinct import evaluate_distinct
from shardwise.engines.dp_step import data_parallel_exposed_s, paced_stages
from shardwise.engines.moe import model_moe_split
from shardwise.engines.pipeline import pipeline_makespan_s
from shardwise.engines.pipeline_uneven import with_exact_makespans
from shardwise.engines.result import StepBreakdown, TrainingEstimate
from shardwise.engines.stage_assembly import select
from shardwise.engines.tp_overlap import tp_comm
from shardwise.engines.training_flops import (
    flops_per_step,
    fused_attention_recompute_flops,
    masked_attention_flops_per_step,
)
from shardwise.engines.training_layout import (
    LAYOUTS,
    layout_key,
    layout_terms_of,
    stage_params_of,
    trainable_of,
)
from shardwise.engines.training_memory import memory_breakdown, runtime_reserve_bytes
from shardwise.engines.training_states import model_state_floor_bytes
from shardwise.engines.training_step_memory import step_memory
from shardwise.errors import SpecError
from shardwise.physics.collectives import Fabric
from shardwise.physics.memory import MemoryBreakdown
from shardwise.physics.topology import placement
from shardwise.precisions import FP4_PRECISIONS
from shardwise.specs import Model, Plan, Recompute, Scenario, Schedule
from shardwise.specs._checks import Number
from shardwise.specs.memo import Memo
from shardwise.specs.rules import (
    flushes_rule,
    kv_training_rule,
    moe_training_rules,
    offload_rule,
    packed_rule,
    raise_first,
)

# One configuration at a time (`specs.memo`): its estimate (its per-micro-batch stage costs:
# `training_stages.STAGES`, its layout terms: `training_layout.LAYOUTS`).
_ESTIMATES = Memo("training estimates")
_TRAINING_CHECKED = Memo("training rules")


def estimate_training_step(scn: Scenario) -> TrainingEstimate:
    """Closed-form estimate of one optimizer step (see the module docstring); array-valued
    scenarios whose configurations repeat are priced once per distinct one
    (`engines.distinct`), and one configuration asked for again is the estimate kept for it
    (`specs.memo`: the same numbers; its `scenario` is the one given)."""
    if not isinstance(scn, Scenario):
        raise SpecError(f"estimate_training_step takes a Scenario(model, cluster, plan), not a {type(scn).__name__}")
    est = _ESTIMATES.get_or_compute(scn, lambda: evaluate_distinct(estimate_each_training_step, scn))
    return est if est.scenario is scn else rebound(est, scenario=scn)


def estimate_each_training_step(scn: Scenario) -> TrainingEstimate:
    """`estimate_training_step` computed for every element (the reference the distinct path is
    checked against)."""
    model, cluster, plan = scn.model, scn.cluster, scn.plan
    if plan.precision in FP4_PRECISIONS:
        raise SpecError("precision: fp4 is modelled for serving only (FP4 weights); train in bf16, fp8 or mxfp8")
    fields = (model.experts, plan.tp, plan.sequence_parallel, plan.ep, plan.pp, plan.schedule, plan.recompute)
    key = (*fields, plan.moe_overlap, plan.lora_rank, plan.recompute_layers, plan.moe_dispatcher)
    key = (*key, model.seq_len, plan.cp, plan.packed_document_len, plan.pipeline_flushes)
    key = (*key, model.layers, plan.offload_activation_layers, model.kv_heads)
    # the micro-batches matter to the rules only under several pipeline flushes (`flushes_rule`):
    # one schedule a step (the default) keeps the check of a layout for every global batch
    one_flush = type(plan.pipeline_flushes) is int and plan.pipeline_flushes == 1
    key = (*key, None if one_flush else plan.num_micro_batches)
    _TRAINING_CHECKED.get_or_compute(key, lambda: _training_rules(plan, model))
    # what does not read the batch, kept per layout (`_layout_terms`): a plan asked for at another
    # global batch prices only the pipeline's makespan, the data-parallel exposure and the memory
    layout = layout_key(scn)
    lay = LAYOUTS.get_or_compute(layout, lambda: layout_terms_of(scn))
    p, v, m = lay.p, lay.v, as_float(plan.num_micro_batches)
    first, middle, last = lay.first, lay.middle, lay.last
    c_first, c_mid, c_last, optimizer_s = lay.c_first, lay.c_mid, lay.c_last, lay.optimizer_s
    flushes = as_float(plan.pipeline_flushes)
    pipe_s = pipeline_makespan_s(c_first, c_mid, c_last, p, m, lay.v_whole, lay.c_mid_sum, flushes)
    # non-interleaved 1F1B and GPipe: the exact makespan over every stage's own passes
    # (`pipeline_uneven`); the closed form stays for interleaving (v > 1) and ZB-H1 (below)
    sched = as_array(plan.schedule)
    gpipe = sched == Schedule.GPIPE
    exact = ((sched == Schedule.ONE_F_ONE_B) | gpipe) & (as_array(v) == 1) & (as_array(p) > 1)
    if any_true(exact):
        pipe_s = with_exact_makespans(exact, gpipe, pipe_s, lay, m, flushes)
    # ZB-H1 (Qi et al. 2023): deferred weight-gradient passes fill the cool-down, so the bubble
    # is (p - 1)(c - 2 T_W) instead of (p - 1) c per micro-batch time c.
    if lay.w_stage is not None:
        fill = maximum(pipe_s - flushes * (p - 1) * 2 * lay.w_stage, m * maximum(maximum(c_first, c_mid), c_last))
        pipe_s = where(lay.zb, fill, pipe_s)
    if lay.dp is not None:
        dp_s, dp_hidden = lay.dp
    else:
        dp_s, dp_hidden = data_parallel_exposed_s(
            scn,
            lay.fabric,
            lay.place,
            lay.trained,
            paced_stages((first, middle, last), (c_first, c_mid, c_last), p, plan.zero_stage),
            m,
            v,
            lay.expert_params,
            lay.params,
            lay.prices,
        )
    step = plus(pipe_s + dp_s + optimizer_s, cluster.step_overhead_s)

    def diagnostics() -> dict[str, Any]:
        """Where the time goes, the FLOPs and the hidden communication: computed when first read
        (`engines.deferred`), so a sweep that reads the step time and the memory skips them."""
        extra, p2p, overlap, mb_over = lay.extra, lay.p2p, lay.overlap, lay.mb_over
        c_max = maximum(maximum(c_first, where(p > 2, c_mid, 0.0)), c_last)
        slowest = select(c_first >= maximum(c_mid, c_last), first, select(c_last >= c_mid, last, middle))
        hand_end, hand_mid = lay.hand_end, lay.hand_mid
        hand_s = where(c_first >= maximum(c_mid, c_last), hand_end, where(c_last >= c_mid, hand_end, hand_mid))
        exposed_p2p = where(overlap, maximum(0.0, c_max - mb_over - slowest.total_s - hand_s), p2p) + hand_s
        breakdown = StepBreakdown(
            compute_s=m * (slowest.compute_forward_s + slowest.compute_backward_s),
            tp_comm_s=m * (slowest.tp_forward_s + slowest.tp_backward_s),
            ep_comm_s=m * (slowest.ep_forward_s + slowest.ep_backward_s),
            offload_s=m * (slowest.offload_forward_s + slowest.offload_backward_s),
            pp_p2p_s=m * exposed_p2p,
            pp_bubble_s=maximum(pipe_s - m * c_max, 0.0),  # never below 0 by rounding
            dp_comm_s=dp_s,
            optimizer_s=optimizer_s,
            overhead_s=m * mb_over + cluster.step_overhead_s,
        )
        model_flops, hw_flops = flops_per_step(scn)
        parts = {}
        if extra is not None:  # the slowest stage's share of its compute that is FSDP2's copies
            c_copy = select(
                c_first >= np.maximum(c_mid, c_last), extra.first, select(c_last >= c_mid, extra.last, extra.middle)
            )
            parts["fsdp2_copies"] = m * (c_copy.compute_forward_s + c_copy.compute_backward_s)
        return {
            "breakdown": breakdown,
            "model_flops_per_step": model_flops,
            "hardware_flops_per_step": hw_flops,
            "bubble_fraction": breakdown.pp_bubble_s / step,
            "hidden_comm_s": {"tp_comm": m * slowest.tp_hidden_s, "dp_comm": dp_hidden},
            "masked_attention_flops_per_step": masked_attention_flops_per_step(scn),
            "compute_parts_s": parts,
        }

    # the memory reads no time: computed on its first read (a calibration's fit never reads it)
    memory = Later(lambda: step_memory(scn, lay, m, layout))
    # HFU's rerun attention forward, computed on its own first read (a sweep's diagnostics never read it)
    redo = Later(lambda: fused_attention_recompute_flops(scn))
    return deferred(
        TrainingEstimate,
        diagnostics,
        scenario=scn,
        step_time_s=step,
        memory=memory,
        attention_recompute_flops_per_step=redo,
    )


def _training_rules(plan: Plan, model: Model) -> bool:
    """The rules of training a mixture of experts (`specs.expert_rules.moe_training_rules`), of the KV
    heads split by tp (`specs.rules.kv_training_rule`) and of packed sequences
    (`specs.rules.packed_rule`); True when they hold (a SpecError names the first that breaks)."""
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
            plan.lora_rank,
            plan.recompute_layers,
            plan.moe_dispatcher,
            plan.memory_stack_key,  # the built-in a framework file starts from (its like:), whose rule it is
        )
    )
    raise_first(
        [
            kv_training_rule(plan.tp, model.kv_heads),
            packed_rule(model.seq_len, plan.packed_document_len, plan.cp),
            flushes_rule(plan.num_micro_batches, plan.pipeline_flushes, plan.pp),
            offload_rule(model.layers, plan.offload_activation_layers, plan.pp, plan.recompute, plan.recompute_layers),
        ]
    )
    return True


def training_memory(scn: Scenario, stage: str = "fullest") -> MemoryBreakdown:
    """The memory part of `estimate_training_step` alone (the same numbers, without pricing any
    time): what a planner needs to drop the plans that do not fit before it prices the rest.
    `stage`: "first" or "last" for that pipeline stage instead of the fullest (`memory_breakdown`)."""
    model, plan = scn.model, scn.plan
    raise_first([kv_training_rule(plan.tp, model.kv_heads)])  # the KV heads split by tp, not replicated
    split = scn.split
    m = np.asarray(plan.num_micro_batches, dtype=float)
    params, expert_params = stage_params_of(model, plan, split)
    moe = model_moe_split(model, split) if model.is_moe else None
    trained = trainable_of(model, plan, split, params)
    return memory_breakdown(context_parallel(scn), params, m, split, expert_params, moe, trained, stage=stage)


def training_memory_floor_bytes(scn: Scenario) -> Number:
    """A lower bound of `training_memory(scn).total_bytes` from the model state and the runtime's
    reserve alone (`engines.training_states.model_state_floor_bytes`,
    `engines.training_memory.runtime_reserve_bytes`), a few array operations per plan."""
    model, plan = scn.model, scn.plan
    split = scn.split
    params, expert_params = stage_params_of(model, plan, split)
    trained = trainable_of(model, plan, split, params)
    return model_state_floor_bytes(plan, params, expert_params, trained, runtime_reserve_bytes(scn))


def layer_times_s(scn: Scenario) -> tuple[Number, Number]:
    """(forward, backward) seconds of one transformer layer for one micro-batch on one GPU,
    exposed TP communication and recomputation included (what Korthikanti et al. 2022 Table 4
    reports)."""
    cluster, plan = scn.cluster, scn.plan
    fabric = Fabric.of(cluster)
    place = placement(plan, cluster.gpus_per_node)
    local = micro_batch_view(scn)
    cost, _ = layer_cost(
        local,
        tp_comm(local, fabric, place["tp"]),
        kv_len=scn.model.seq_len,
        cp=plan.cp,
        cp_step=cp_step_s(scn, fabric, place),
    )
    return cost.compute_forward_s + cost.tp_forward_s, cost.compute_backward_s + cost.tp_backward_s
