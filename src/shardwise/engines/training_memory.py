"""Memory on one GPU during a training step: weights, gradients and optimizer state (sharded as
ZeRO and the expert layout shard them) and the activations each stage keeps in flight
(Korthikanti et al. 2022 for a layer's activations; `physics.memory` for the per-layer and
in-flight counts), on the fullest pipeline stage.
"""

from __future__ import annotations

import numpy as np

from shardwise.physics import memory as mem
from shardwise.physics.moe import routed_tokens
from shardwise.physics.params import layer_params_split, moe_layer_params_per_gpu
from shardwise.specs import Plan, Recompute, Scenario
from shardwise.specs._checks import Number
from shardwise.specs.stages import StageSplit, plan_split

ZERO3_PREFETCH_LAYERS = 2  # the layer in use and the one gathered ahead (see memory_breakdown)


def memory_breakdown(
    scn: Scenario,
    params: tuple[Number, Number, Number],
    m: Number,
    split: StageSplit | None = None,
    expert_params: tuple[Number, Number, Number] = (0.0, 0.0, 0.0),
    moe_layers: StageSplit | None = None,
    trained: tuple[Number, Number, Number] | None = None,
) -> mem.MemoryBreakdown:
    """The fullest of the first stage (most activations in flight, embedding), the second stage
    (the fullest middle one, when the split is uneven) and the last (output layer). A mixture of
    experts gives the routed-expert parameters of each stage (`expert_params`, sharded over
    expert_dp) and its MoE layers per stage (`moe_layers`), whose activations differ. `trained`:
    the parameters with gradients and optimizer state (LoRA's adapters; default all of them)."""
    model, plan = scn.model, scn.plan
    e = plan.bytes_per_element
    per_layer = mem.layer_activation_bytes(
        model, plan.micro_batch, plan.tp, plan.sequence_parallel, plan.recompute, plan.flash_attention, e
    )
    moe_extra = 0.0  # what an MoE layer keeps beyond a dense one
    if moe_layers is not None:
        shared = model.shared_experts * model.expert_ffn_hidden
        attention = mem.layer_activation_bytes(
            model, plan.micro_batch, plan.tp, plan.sequence_parallel, plan.recompute, plan.flash_attention, e, shared
        )
        tokens = routed_tokens(model, plan.micro_batch, model.seq_len, plan.tp, plan.sequence_parallel)
        routed = mem.routed_expert_activation_bytes(
            model, tokens, plan.expert_tp, plan.expert_imbalance, e, plan.recompute
        )
        moe_extra = attention + routed - per_layer
    # During the backward pass recomputation rebuilds one layer's activations at a time: all of
    # them with full recomputation, the attention scores with selective (nothing with flash).
    unsaved = mem.layer_activation_bytes(
        model, plan.micro_batch, plan.tp, plan.sequence_parallel, Recompute.NONE, plan.flash_attention, e
    )
    rc = np.asarray(plan.recompute)
    working = np.select([rc == Recompute.FULL, rc == Recompute.SELECTIVE], [unsaved, unsaved - per_layer], 0.0)
    p = np.asarray(plan.pp, dtype=float)
    t, b, s = plan.tp, plan.micro_batch, model.seq_len
    split = plan_split(model.layers, plan) if split is None else split
    in_first = mem.layers_in_flight(split.first, p, plan.vpp, m, plan.schedule, 0)
    in_mid = mem.layers_in_flight(split.middle_max, p, plan.vpp, m, plan.schedule, 1)
    in_last = mem.layers_in_flight(split.last, p, plan.vpp, m, plan.schedule, p - 1)
    # the combined 1F1B of `moe_overlap` starts the next forward before the backward it pairs
    # with: one more model chunk of activations in flight (Megatron-Core adds one warm-up chunk)
    if moe_layers is not None:
        ahead = np.asarray(plan.moe_overlap, dtype=bool) & (np.asarray(m) > 1)
        v = np.asarray(plan.vpp, dtype=float)
        in_first, in_mid, in_last = (
            n + np.where(ahead, layers / v, 0.0)
            for n, layers in ((in_first, split.first), (in_mid, split.middle_max), (in_last, split.last))
        )
    mb_first = in_first / split.first  # micro-batches in flight on the first stage
    sp_split = np.where(np.asarray(plan.sequence_parallel, dtype=bool), t, 1)
    emb_mask = (mem.DROPOUT_MASK_BYTES if model.dropout else 0.0) * s * b * model.hidden * mb_first / sp_split
    # Output layer (Korthikanti Sec. 4.3): final-norm input and output-projection input (e s b h / t
    # each with SP), fp32 logits (4 s b V / t), for the micro-batch at the loss.
    head = 2 * e * s * b * model.hidden / sp_split + mem.LOGITS_BYTES_PER_ELEMENT * s * b * model.vocab / t
    zero = StageSplit(split.pp, 0.0, 0.0, 0.0, 0.0, 0.0)
    n_moe = moe_layers if moe_layers is not None else zero

    def kept(in_flight: Number, layers: Number, moe: Number) -> Number:
        """Layer-micro-batches in flight at the stage's mix of dense and MoE layers."""
        return in_flight * (per_layer + moe / np.maximum(layers, 1.0) * moe_extra)

    acts = (
        kept(in_first, split.first, n_moe.first) + working + emb_mask + np.where(p == 1, head, 0.0),
        np.where(p > 2, kept(in_mid, split.middle_max, n_moe.middle_max) + working, 0.0),
        kept(in_last, split.last, n_moe.last) + working + head,
    )
    states = stage_states(plan, params, expert_params, trained)
    totals = [sum(st) + act for st, act in zip(states, acts, strict=True)]
    totals[1] = np.where(p > 2, totals[1], -np.inf)
    pick = np.where(totals[0] >= np.maximum(totals[1], totals[2]), 0, np.where(totals[2] >= totals[1], 2, 1))
    w, g, o = (np.choose(pick, [st[i] for st in states]) for i in range(3))
    # ZeRO-3 gathers each layer's weights before using it and the next one's ahead of time: two
    # layers whole (as sharded by tp and ep) on top of the shard (PyTorch FSDP's and DeepSpeed's
    # prefetch of one layer)
    matrices, replicated = layer_params_split(model)
    layer = matrices / plan.tp + replicated
    if moe_layers is not None:
        layer = np.maximum(layer, sum(moe_layer_params_per_gpu(model, plan.tp, plan.ep, plan.expert_tp)))
    w = w + np.where(
        np.asarray(plan.zero_stage) == 3,
        ZERO3_PREFETCH_LAYERS * mem.weight_bytes_per_param(plan.precision) * layer,
        0.0,
    )
    return mem.MemoryBreakdown(
        weights_bytes=w,
        gradients_bytes=g,
        optimizer_bytes=o,
        activations_bytes=np.choose(pick, list(acts)),
        reserved_bytes=mem.RUNTIME_RESERVED_BYTES + 0.0 * w,
    )


def stage_states(
    plan: Plan,
    params: tuple[Number, Number, Number],
    expert_params: tuple[Number, Number, Number],
    trained: tuple[Number, Number, Number] | None = None,
) -> list[tuple[Number, Number, Number]]:
    """(weights, gradients, optimizer) bytes on one GPU of the first, fullest middle and last
    stage: the dense parameters sharded by ZeRO over dp x cp, the routed experts' over expert_dp.
    Only the `trained` ones (LoRA's adapters; default all) have gradients and optimizer state."""
    shards = mem.zero_shards(np.asarray(plan.dp) * np.asarray(plan.cp), plan.zero_stage)
    no_experts = all(np.ndim(x) == 0 and float(x) == 0.0 for x in expert_params)
    routed_shards = None if no_experts else mem.zero_shards(plan.expert_dp, plan.zero_stage)
    states = []
    for i, (n, n_expert) in enumerate(zip(params, expert_params, strict=True)):
        dense = mem.sharded_state_bytes(n - n_expert, shards, plan.precision)
        if trained is not None and trained[i] is not n:  # LoRA: the frozen weights, the adapters' state
            _, grads, optim = mem.sharded_state_bytes(trained[i], shards, plan.precision)
            dense = (dense[0], grads, optim)
        if routed_shards is None:  # no routed experts (a dense model)
            states.append(dense)
            continue
        routed = mem.sharded_state_bytes(n_expert, routed_shards, plan.precision)
        states.append(tuple(a + b for a, b in zip(dense, routed, strict=True)))
    return states


def model_state_floor_bytes(
    plan: Plan,
    params: tuple[Number, Number, Number],
    expert_params: tuple[Number, Number, Number],
    trained: tuple[Number, Number, Number] | None = None,
) -> Number:
    """The most model state any stage holds plus the runtime's reserve: never above
    `memory_breakdown`'s total (its stage adds activations, which are never negative, and ZeRO-3's
    prefetch, summed in the same order), so a plan whose floor exceeds the GPU does not fit,
    whatever its activations. A planner drops such plans before pricing their activations."""
    first, middle, last = (sum(st) for st in stage_states(plan, params, expert_params, trained))
    middle = np.where(np.asarray(plan.pp) > 2, middle, -np.inf)
    return np.maximum(np.maximum(first, middle), last) + mem.RUNTIME_RESERVED_BYTES
