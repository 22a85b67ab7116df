"""Memory on one GPU during a training step: weights, gradients and optimizer state (sharded as
ZeRO and the expert layout shard them) and the activations each stage keeps in flight
(Korthikanti et al. 2022 for a layer's activations; `physics.memory` for the per-layer and
in-flight counts), on the fullest pipeline stage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from shardwise.arrays import any_true, as_array, as_bool, as_float, choose, ifelse, maximum, minimum, select
from shardwise.engines.moe_op_sac import op_sac_routed_memory
from shardwise.engines.training_buffers import (  # the step's buffers, split out
    buffer_terms,
    pp_unsharded_bytes,
    stage_buffers,
    tp_gather_buffer_bytes,
    zero3_buffers,
)
from shardwise.engines.training_states import stage_states  # the stages' model state, split out
from shardwise.physics import fp8_recipes, offload
from shardwise.physics import memory as mem
from shardwise.physics.hf_gpt2 import gelu_new_saved_elements
from shardwise.physics.memory_runtime import (
    NVLS_HEAD_BYTES,
    pipeline_p2p_bytes,
    runtime_reserved_bytes,
    stack_group_bytes,
)
from shardwise.physics.moe import capacity_load, dropping_factor, routed_tokens
from shardwise.physics.remat_partition import kept_fraction
from shardwise.specs import Model, Plan, Recompute, Scenario, Schedule
from shardwise.specs._checks import Number
from shardwise.specs.hardware import is_fp8, is_nvfp4
from shardwise.specs.memo import kept
from shardwise.specs.stages import StageSplit, recomputed_split

# `memory_breakdown(stage=...)`: which of (first, middle, last) it returns instead of the fullest
STAGE_INDEX = {"first": 0, "last": 2}


@dataclass(frozen=True)
class MemoryTerms:
    """What `memory_breakdown` reads that no number of micro-batches changes: a layer's
    activation terms (`_layer_terms`), the stages' model state (`stage_states`), ZeRO-3's buffers,
    the stages' shared buffer terms and the runtime's reserve (NCCL's groups included). Over many
    plans priced per group of plans that differ only in the batch, each gathered when read."""

    ELEMENTWISE_PROPERTIES: ClassVar[bool] = True  # (no properties: fields gathered when read)

    layer: tuple[Number, ...]
    states: tuple[tuple[Number, Number, Number], ...]
    zero3: tuple[Number, Number]
    buffers: tuple[Number, Number, Number]
    reserved: Number


def memory_terms(
    scn: Scenario,
    params: tuple[Number, Number, Number],
    expert_params: tuple[Number, Number, Number] = (0.0, 0.0, 0.0),
    trained: tuple[Number, Number, Number] | None = None,
    moe: bool = False,
) -> MemoryTerms:
    """`MemoryTerms` of one CP rank's scenario (`scn`) holding `params` per stage (see
    `memory_breakdown`; `moe`: a mixture of experts' layers)."""
    model, plan = scn.model, scn.plan
    stack = mem.stack_memory(plan.memory_stack_key, plan.loss_kernel)
    layer = _layer_terms(
        model,
        plan.micro_batch,
        plan.tp,
        plan.sequence_parallel,
        plan.recompute,
        plan.flash_attention,
        plan.bytes_per_element,
        plan.selective_policy,
        stack,
        plan.recompute_modules,
        fp8_input_bytes(plan),
        kept_fraction(plan.tp, plan.partition_activations),
        plan.hf_gpt2_ops,
    )
    reserved = runtime_reserve_bytes(scn, stack)
    states = tuple(stage_states(plan, params, expert_params, trained))
    buffers = buffer_terms(plan, stack, model, moe)
    return MemoryTerms(layer, states, zero3_buffers(model, plan, stack, moe), buffers, reserved)


def runtime_reserve_bytes(scn: Scenario, stack: mem.StackMemory | None = None) -> Number:
    """The `reserved` row: the CUDA context, the libraries' workspaces and NCCL's buffers for the
    plan's communicators, the pipeline's send/recv connections (`pipeline_p2p_bytes`) and the
    stack's own communicators (`StackMemory.extra_groups`), at the NVLS head size of
    the stack's NCCL (`StackMemory.nvls_head_bytes`), its tree connected at init where that NCCL does
    (`StackMemory.nccl_tree_at_init`)."""
    plan, cluster = scn.plan, scn.cluster
    stack = mem.stack_memory(plan.memory_stack_key) if stack is None else stack
    nvls = cluster.nvls & (as_array(cluster.intra_node_link.nvls_efficiency) > 0)
    head = NVLS_HEAD_BYTES if stack.nvls_head_bytes is None else stack.nvls_head_bytes
    tree, tied = stack.nccl_tree_at_init, bool(scn.model.tied_embeddings)
    reserved = runtime_reserved_bytes(
        plan.tp, plan.cp, plan.dp, plan.pp, plan.ep, cluster.gpus_per_node, nvls, head, tree
    )
    # the pipeline's send/recv connections, made on the first transfer (in the pair's own
    # communicator where the stack makes one: "p2p" in its groups)
    nvlink = as_array(cluster.intra_node_link.ll_bandwidth_bytes_per_s) > 0
    p2p = pipeline_p2p_bytes(
        plan.tp, plan.cp, plan.dp, plan.pp, plan.vpp, cluster.gpus_per_node, nvlink, "p2p" in stack.extra_groups
    )
    return (
        reserved
        + p2p
        + stack_group_bytes(
            stack.extra_groups, plan.tp, plan.cp, plan.dp, plan.pp, cluster.gpus_per_node, nvls, head, tree, tied
        )
    )


def memory_breakdown(
    scn: Scenario,
    params: tuple[Number, Number, Number],
    m: Number,
    split: StageSplit | None = None,
    expert_params: tuple[Number, Number, Number] = (0.0, 0.0, 0.0),
    moe_layers: StageSplit | None = None,
    trained: tuple[Number, Number, Number] | None = None,
    terms: MemoryTerms | None = None,
    stage: str = "fullest",
) -> mem.MemoryBreakdown:
    """The fullest of the first stage (most activations in flight, embedding), the second stage
    (the fullest middle one, when the split is uneven) and the last (output layer). A mixture of
    experts gives the routed-expert parameters of each stage (`expert_params`, sharded over
    expert_dp) and its MoE layers per stage (`moe_layers`), whose activations differ. `trained`:
    the parameters with gradients and optimizer state (LoRA's adapters; default all of them).
    `terms`: `memory_terms` of these, when already found. `stage` "first" or "last": that stage's
    memory instead of the fullest (what a trainer that logs one rank's peak reports: Megatron-LM
    writes the last rank's)."""
    model, plan = scn.model, scn.plan
    e = plan.bytes_per_element
    policy = plan.selective_policy
    stack = mem.stack_memory(plan.memory_stack_key)
    if terms is None:
        terms = memory_terms(scn, params, expert_params, trained, moe_layers is not None)
    per_layer, unsaved, working, grads_flow, logits, saved_head, sp_split, mask_per_mb = terms.layer
    moe_extra = moe_working = 0.0  # what an MoE layer keeps beyond a dense one; its rebuilt working set
    t, b = plan.tp, plan.micro_batch
    if moe_layers is not None:
        shared = model.shared_experts * model.expert_ffn_hidden
        attention = mem.layer_activation_bytes(
            model,
            plan.micro_batch,
            plan.tp,
            plan.sequence_parallel,
            plan.recompute,
            plan.flash_attention,
            e,
            shared,
            policy,
            stack.extra_saved_elements(model, shared),
            # of the selective modules, the attention's: "mlp" checkpoints a dense layer's MLP, not
            # the shared experts (those are "shared_experts", the routed ones "moe_act" or "moe")
            tuple(m for m in plan.recompute_modules if m == "mla_up_proj"),
            fp8_input_bytes=fp8_input_bytes(plan),
            full_kept_hidden=stack.kept_hidden(model) * kept_fraction(plan.tp, plan.partition_activations),
        )
        tokens = routed_tokens(model, plan.micro_batch, model.seq_len, plan.tp, plan.sequence_parallel)
        dropping = dropping_factor(plan.moe_capacity_factor, plan.sequence_parallel, plan.tp)
        routed = mem.routed_expert_activation_bytes(
            model,
            tokens,
            plan.expert_tp,
            # token dropping, where the time drops them
            capacity_load(plan.expert_imbalance, dropping, plan.moe_pad_to_capacity),
            e,
            plan.recompute,
            plan.recompute_modules,
            fp8_input_bytes(plan),
            mem.moe_score_copy_bytes(plan.memory_stack_key, model.architecture),
        )
        if policy == "op":  # torchtitan's per-op SAC keeps the router's topk; the layer is rebuilt whole
            unsaved_attention = mem.layer_activation_bytes(
                model, b, t, plan.sequence_parallel, Recompute.NONE, plan.flash_attention, e, shared, "attention",
                stack.extra_saved_elements(model, shared), fp8_input_bytes=fp8_input_bytes(plan),
            )  # fmt: skip
            load = capacity_load(plan.expert_imbalance, dropping, plan.moe_pad_to_capacity)
            routed, moe_working = op_sac_routed_memory(model, plan, tokens, load, attention, routed, unsaved_attention)
        # An MoE layer norms the router's input apart (Megatron-Core's TE spec: pre_mlp_layernorm a
        # TENorm when there are experts, gpt_layer_specs.py): selective "layernorm" recomputation
        # drops that norm's output, the MLP input of the inventory (transformer_layer.py,
        # `recompute_pre_mlp_layernorm`; a dense layer's norms are fused into its linears).
        if "layernorm" in plan.recompute_modules:
            norm_out = e * model.seq_len * plan.micro_batch * model.hidden
            norm_out = ifelse(as_bool(plan.sequence_parallel), norm_out / as_float(plan.tp), norm_out)
            attention = attention - ifelse(as_array(plan.recompute) == Recompute.SELECTIVE, norm_out, 0.0)
        if "moe" in plan.recompute_modules and not model.is_hybrid:  # (a hybrid's mean layer: routed alone)
            freed = mem.moe_checkpointed_shared_bytes(
                model, plan.micro_batch, plan.tp, plan.sequence_parallel, e, shared,
                stack.extra_saved_elements(model, shared), fp8_input_bytes(plan),
            )  # fmt: skip
            attention = attention - ifelse(as_array(plan.recompute) == Recompute.SELECTIVE, freed, 0.0)
        moe_extra = attention + routed - per_layer
    p = as_float(plan.pp)
    working = maximum(working, moe_working)  # (`engines.moe_op_sac`; 0 but under the per-op policy)
    split = scn.split if split is None else split
    # Layers recomputed whole (`Plan.recompute_layers`, a dense model's) keep only their input. The
    # backward pass rebuilds one of them at a time, after the chunk's other layers (the ones after
    # them) have freed theirs for that micro-batch: a layer's whole activations less those.
    whole_extra, whole = 0.0, StageSplit(split.pp, 0.0, 0.0, 0.0, 0.0, 0.0)
    rebuilt = None
    if any_true(as_array(plan.recompute_layers) > 0):
        kept_whole = mem.layer_activation_bytes(
            model, b, t, plan.sequence_parallel, Recompute.FULL, plan.flash_attention, e, None, policy,
            full_kept_hidden=stack.kept_hidden(model) * kept_fraction(plan.tp, plan.partition_activations),
        )  # fmt: skip
        whole_extra = kept_whole - per_layer
        whole = recomputed_split(split, plan.vpp, plan.recompute_layers)
        on, v = np.asarray(plan.recompute_layers) > 0, np.asarray(plan.vpp, dtype=float)

        def rebuilt(layers: Number, n_whole: Number) -> Number:
            freed = np.maximum(np.asarray(layers, dtype=float) - n_whole, 0.0) / v * per_layer
            return np.where(on, np.maximum(working, unsaved - freed), working)

    in_first = mem.layers_in_flight(split.first, p, plan.vpp, m, plan.schedule, 0)
    in_mid = mem.layers_in_flight(split.middle_max, p, plan.vpp, m, plan.schedule, 1)
    in_last = mem.layers_in_flight(split.last, p, plan.vpp, m, plan.schedule, p - 1)
    # the combined 1F1B of `moe_overlap` starts the next forward before the backward it pairs
    # with: one more model chunk of activations in flight (Megatron-Core adds one warm-up chunk).
    # Without a pipeline there is no warm-up: each forward runs layer by layer beside the previous
    # micro-batch's backward, which frees a layer as the forward adds one (pipeline_parallel/
    # combined_1f1b.py `combined_1f1b_schedule_for_no_pipelining`; models/common/
    # model_chunk_schedule_plan.py: forward layer i with backward layer L - 1 - i, then
    # `release_state`): one more layer, not a chunk.
    if moe_layers is not None:
        ahead = as_bool(plan.moe_overlap) & (as_array(m) > 1)
        v = as_float(plan.vpp)
        in_first, in_mid, in_last = (
            n + ifelse(ahead, ifelse(p == 1, minimum(layers, 1.0), layers / v), 0.0)
            for n, layers in ((in_first, split.first), (in_mid, split.middle_max), (in_last, split.last))
        )
    mb_first = in_first / split.first  # micro-batches in flight on the first stage
    # the output layer's saved tensors of every micro-batch GPipe's order holds on the last stage
    outputs = mem.held_outputs_bytes(
        model, b, t, saved_head, stack, ifelse(as_array(plan.schedule) == Schedule.GPIPE, m, 1.0)
    )
    emb_mask = mask_per_mb * mb_first / sp_split
    zero = StageSplit(split.pp, 0.0, 0.0, 0.0, 0.0, 0.0)
    n_moe = moe_layers if moe_layers is not None else zero

    def kept(in_flight: Number, layers: Number, moe: Number, n_whole: Number) -> Number:
        """Layer-micro-batches in flight at the stage's mix of dense, MoE and whole-recomputed layers."""
        n, held = maximum(layers, 1.0), offload.held_fraction(layers, plan.offload_activation_layers)
        return in_flight * held * (per_layer + moe / n * moe_extra + n_whole / n * whole_extra)

    w_first, w_mid, w_last = (
        (working, working, working)
        if rebuilt is None
        else (
            rebuilt(split.first, whole.first),
            rebuilt(split.middle_max, whole.middle_max),
            rebuilt(split.last, whole.last),
        )
    )
    acts = (
        kept(in_first, split.first, n_moe.first, whole.first)
        + emb_mask
        + ifelse(p == 1, outputs + saved_head + maximum(logits, w_first + grads_flow), w_first + grads_flow),
        ifelse(p > 2, kept(in_mid, split.middle_max, n_moe.middle_max, whole.middle_max) + w_mid + grads_flow, 0.0),
        kept(in_last, split.last, n_moe.last, whole.last) + outputs + saved_head + maximum(logits, w_last + grads_flow),
    )
    states = terms.states
    gathered, reducing = terms.zero3
    # micro-batches in flight on each stage: the end of one's backward pass frees 1 / n of the stage's activations
    in_flight = [
        maximum(n / maximum(layers, 1.0), 1.0)
        for n, layers in ((in_first, split.first), (in_mid, split.middle_max), (in_last, split.last))
    ]
    shared = terms.buffers  # what the three stages' buffers share, found once
    held = [
        pp_unsharded_bytes(plan, stack, params[i], trained[i] if trained is not None else params[i]) for i in range(3)
    ]
    sp_gather = tp_gather_buffer_bytes(model, plan, stack)  # persistent, on every stage
    buffers = [
        stage_buffers(plan, stack, trained[i] if trained is not None else params[i], act, in_flight[i], shared)
        + sp_gather
        + maximum(gathered, held[i][0])
        + maximum(reducing, held[i][1])
        for i, act in enumerate(acts)
    ]
    frag = mem.allocator_fraction(stack, plan.expandable_segments)
    allocator = [frag * (act + gathered + reducing) for act in acts]
    totals = [sum(st) + act + buf + al for st, act, buf, al in zip(states, acts, buffers, allocator, strict=True)]
    totals[1] = ifelse(p > 2, totals[1], -np.inf)
    pick = ifelse(totals[0] >= maximum(totals[1], totals[2]), 0, ifelse(totals[2] >= totals[1], 2, 1))
    if stage != "fullest":
        if stage not in STAGE_INDEX:
            raise ValueError(f"stage {stage!r} is not allowed; choose fullest, {', '.join(STAGE_INDEX)}")
        pick = STAGE_INDEX[stage] + 0 * pick
    w, g, o = (choose(pick, [st[i] for st in states]) for i in range(3))
    cached = 0.0  # blocks the caching allocator keeps beside a flat-shard step (`physics.memory_cached`)
    if stack.step_cache is not None:
        zero = as_array(plan.zero_stage)
        shards, tr = ifelse(zero >= 1, as_array(plan.zero_ranks), 1.0), trained if trained is not None else params
        each = [
            mem.step_cached_bytes(stack.step_cache, sum(st), act, stack.optimizer_step_bytes_per_param, n, shards, tot)
            for st, act, n, tot in zip(states, acts, tr, totals, strict=True)
        ]
        cached = ifelse(zero < 3, choose(pick, each), 0.0)
    return mem.MemoryBreakdown(
        weights_bytes=w,
        gradients_bytes=g,
        optimizer_bytes=o,
        activations_bytes=choose(pick, list(acts)),
        reserved_bytes=terms.reserved + 0.0 * w,
        buffers_bytes=choose(pick, buffers),
        allocator_bytes=choose(pick, allocator),
        cached_bytes=cached + 0.0 * w,
    )


@kept
def _layer_terms(
    model: Model,
    b: Number,
    t: Number,
    sequence_parallel: Number,
    recompute: Number,
    flash_attention: Number,
    e: float,
    policy: str,
    stack: mem.StackMemory,
    modules: tuple[str, ...] = (),
    fp8_in: float = 0.0,
    kept_share: Number = 1.0,
    gelu_new: Number = False,
) -> tuple[Number, ...]:
    """What `memory_breakdown` reads of one layer and of the output layer, the same on every stage
    and for every dp, batch and ZeRO stage (kept per those arguments, `specs.memo.kept`): (a layer's
    saved activations, the same without recomputation, the working set a recomputed layer rebuilds,
    a layer's backward transients, the logits, the output layer's saved inputs, the sequence split,
    a layer's dropout mask per micro-batch before that split). `fp8_in`: `fp8_input_bytes`."""
    s = model.seq_len
    # transformers' GPT-2 (`Plan.hf_gpt2_ops`): gelu_new's saved chain (`physics.hf_gpt2`)
    extra = stack.extra_saved_elements(model) + gelu_new_saved_elements(model, None, gelu_new)
    per_layer = mem.layer_activation_bytes(
        model, b, t, sequence_parallel, recompute, flash_attention, e, None, policy, extra, modules, fp8_in,
        stack.kept_hidden(model) * kept_share,  # 1/t under DeepSpeed's partitioned checkpoints
    )  # fmt: skip
    # During the backward pass recomputation rebuilds one layer's activations at a time: all of
    # them with full recomputation, the attention scores with selective (nothing with flash).
    unsaved = mem.layer_activation_bytes(
        model, b, t, sequence_parallel, Recompute.NONE, flash_attention, e, None, "attention", extra, (), fp8_in
    )
    rc = recompute
    working = select([rc == Recompute.FULL, rc == Recompute.SELECTIVE], [unsaved, unsaved - per_layer], 0.0)
    sp_split = ifelse(as_bool(sequence_parallel), t, 1)
    mask_per_mb = (mem.DROPOUT_MASK_BYTES if model.dropout else 0.0) * s * b * model.hidden
    # Output layer (Korthikanti Sec. 4.3): final-norm input and output-projection input (e s b h / t
    # each with SP), and the loss's logits at the stack's bytes per logit. The loss's peak opens the
    # backward pass; a layer's backward gradients come once the logits are gone, so a stage with the
    # output layer holds the larger of the two.
    grads_flow = mem.backward_transient_bytes(model, b, t, sequence_parallel, e)
    # The working set of a layer recomputed in the backward pass comes after the loss too (full or
    # selective recomputation reruns a layer's forward when its backward starts, once the logits
    # are freed), so on that stage it shares the loss's peak instead of adding to it.
    logits = mem.logits_bytes(model, b, t, stack)
    saved_head = 2 * e * s * b * model.hidden / sp_split
    return per_layer, unsaved, working, grads_flow, logits, saved_head, sp_split, mask_per_mb


def fp8_input_bytes(plan: Plan) -> float:
    """Bytes of the FP8 copy each linear layer keeps of its input for its backward pass: Transformer
    Engine's FP8 training (`Plan.fp8_recipe` "te" at precision fp8 or mxfp8) keeps the cast it
    multiplied with (`physics.memory.TE_FP8_INPUT_BYTES`); 0 otherwise (the 16-bit input is kept: BF16,
    and torchao's recipes, whose float8 linear saves its high-precision input)."""
    if is_nvfp4(plan.precision):  # the column-wise NVFP4 copy wgrad reads (`physics.memory.TE_NVFP4_INPUT_BYTES`)
        return mem.TE_NVFP4_INPUT_BYTES
    return mem.TE_FP8_INPUT_BYTES if is_fp8(plan.precision) and fp8_recipes.is_te(plan.fp8_recipe) else 0.0


__all__ = [
    "MemoryTerms",
    "buffer_terms",
    "fp8_input_bytes",
    "memory_breakdown",
    "memory_terms",
    "pp_unsharded_bytes",
    "runtime_reserve_bytes",
    "stage_buffers",
    "tp_gather_buffer_bytes",
    "zero3_buffers",
]
