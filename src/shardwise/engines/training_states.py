"""The model state on one GPU of each pipeline stage: weights, gradients and optimizer state,
sharded as ZeRO and the expert layout shard them, at the stack's bytes (`physics.memory`), and the
floor a planner drops plans by before pricing their activations; split out of
`engines.training_memory`, which re-exports these names.
"""

from __future__ import annotations

import numpy as np

from shardwise.arrays import any_true, as_array, as_bool, ifelse, one_value
from shardwise.physics import memory as mem
from shardwise.physics.memory_runtime import RUNTIME_FLOOR_BYTES
from shardwise.specs import Plan
from shardwise.specs._checks import Number
from shardwise.specs.memo import kept


def stage_states(
    plan: Plan,
    params: tuple[Number, Number, Number],
    expert_params: tuple[Number, Number, Number],
    trained: tuple[Number, Number, Number] | None = None,
) -> list[tuple[Number, Number, Number]]:
    """(weights, gradients, optimizer) bytes on one GPU of the first, fullest middle and last
    stage: the dense parameters sharded by ZeRO over dp x cp (or its `shard_group`), the routed experts' over expert_dp.
    Only the `trained` ones (LoRA's adapters; default all) have gradients and optimizer state.
    Kept per what it reads (`specs.memo.kept`): plans that differ in the batch, recomputation or
    schedule share them."""
    held = (
        plan.zero_ranks,
        plan.zero_stage,
        plan.expert_dp,
        plan.memory_stack_key,
        plan.precision,
        plan.grad_reduce_bf16,
        plan.optimizer_state,
    )
    trained_ = None if trained is None else _scalars(trained)
    # which plans train LoRA's adapters (element-wise: an array may mix them with full training)
    adapters = as_array(plan.lora_rank) > 0
    lora_on = bool(adapters) if np.ndim(adapters) == 0 else adapters
    states = _stage_states(*held, _scalars(params), _scalars(expert_params), trained_, lora_on)
    on_gpu = 1.0 - as_array(plan.offload_optimizer)  # the rest in host memory (`physics.offload`)
    return [(w, g, o * on_gpu) for w, g, o in states] if any_true(on_gpu < 1) else list(states)


def _scalars(values: tuple[Number, ...]) -> tuple[Number, ...]:
    """`values` with each 0-d array as its numpy scalar (the same value; a key that hashes)."""
    return tuple(x[()] if type(x) is np.ndarray and x.ndim == 0 else x for x in values)


@kept
def _stage_states(
    zero_ranks: Number,
    zero_stage: Number,
    expert_dp: Number,
    stack: str,
    precision: str,
    grad_bf16: Number,
    optimizer_state: str,
    params: tuple[Number, Number, Number],
    expert_params: tuple[Number, Number, Number],
    trained: tuple[Number, Number, Number] | None,
    lora_on: Number,
) -> tuple[tuple[Number, Number, Number], ...]:
    """`stage_states` of the plan fields it reads; `lora_on`: which plans train LoRA's adapters
    (`trained`, per stage, is then theirs and, for the other plans, all their parameters);
    `grad_bf16`: `Plan.grad_reduce_bf16`; `optimizer_state`: `Plan.optimizer_state`; `stack`: the
    memory entry's name (`Plan.memory_stack_key`)."""
    shards = mem.zero_shards(zero_ranks, zero_stage)  # dp x cp, or the hybrid shard group
    no_experts = all(one_value(x) and float(x) == 0.0 for x in expert_params)
    routed_shards = None if no_experts else mem.zero_shards(expert_dp, zero_stage)
    fp32_shards = mem.stack_memory(stack).sharded_fp32_params & (as_array(zero_stage) == 3)
    lora = trained is not None and any_true(lora_on)
    # FSDP: the fp32 shard is the weight, no 16-bit one (full training only: LoRA's frozen
    # weights stay 16-bit; for a full-training plan `trained` is all of its parameters)
    fp32_weights = fp32_shards & ~as_array(lora_on) if lora else fp32_shards
    state_bytes = mem.optimizer_bytes_per_param(optimizer_state, precision)
    states = []
    for i, (n, n_expert) in enumerate(zip(params, expert_params, strict=True)):
        dense = mem.sharded_state_bytes(n - n_expert, shards, precision, grad_bf16, optimizer_state)
        if lora:  # the frozen weights, the adapters' state
            adapters = trained[i]  # type: ignore[index]
            _, grads, optim = mem.sharded_state_bytes(adapters, shards, precision, grad_bf16, optimizer_state)
            dense = (dense[0], grads, optim)
        if routed_shards is not None:
            routed = mem.sharded_state_bytes(n_expert, routed_shards, precision, grad_bf16, optimizer_state)
            dense = tuple(a + b for a, b in zip(dense, routed, strict=True))  # type: ignore[assignment]
        if any_true(fp32_weights) and optimizer_state == "bf16":
            # pure bf16: the shard is the bf16 parameter, its own master, with bf16 moments (NeMo
            # Automodel's MoE models, cast to bf16 by `initialize_weights`, under torch.optim.Adam),
            # and the reduced gradient cast back to the shard's bf16 (as below)
            w, g, o = dense
            dense = (w, ifelse(fp32_weights, g * 2.0 / mem.grad_bytes_per_param(precision, grad_bf16), g), o)
        elif any_true(fp32_weights):
            w, g, o = dense
            # the fp32 shard is the parameter itself: its optimizer keeps fp32 moments beside it
            # whatever `optimizer_state` says (the remainders and bf16 states need bf16 weights)
            o = ifelse(fp32_weights, o * mem.OPTIMIZER_BYTES_PER_PARAM / state_bytes, o)
            master = o * mem.MASTER_WEIGHT_BYTES / mem.OPTIMIZER_BYTES_PER_PARAM
            # the reduced gradient is cast back to the fp32 shard's dtype whatever dtype it was
            # reduced in (FSDP2 foreach_reduce `_to_dtype_if_needed(reduce_output, orig_dtype)`;
            # FSDP1 `_cast_grad_to_param_dtype`): the shard's gradient is 4 bytes under grad_bf16 too
            g = ifelse(fp32_weights & as_bool(grad_bf16), g * mem.grad_bytes_per_param(precision) / 2.0, g)
            dense = (ifelse(fp32_weights, master, w), g, ifelse(fp32_weights, o - master, o))
        states.append(_stack_grads(dense, stack, precision, grad_bf16))
    return tuple(states)


def _stack_grads(
    state: tuple[Number, Number, Number], stack: str, precision: str, grad_bf16: Number
) -> tuple[Number, Number, Number]:
    """`state` with its gradients at the stack's own bytes per parameter where it keeps them in
    one dtype whatever the plan says (`StackMemory.grad_bytes`: InternEvo's 16-bit gradients)."""
    own = mem.stack_memory(stack).grad_bytes
    if own is None:
        return state
    w, g, o = state
    return w, g * own / mem.grad_bytes_per_param(precision, grad_bf16), o


def model_state_floor_bytes(
    plan: Plan,
    params: tuple[Number, Number, Number],
    expert_params: tuple[Number, Number, Number],
    trained: tuple[Number, Number, Number] | None = None,
    reserved: Number = RUNTIME_FLOOR_BYTES,
) -> Number:
    """The most model state any stage holds plus the runtime's reserve (`reserved`: the CUDA
    context and workspaces every process holds, or the whole `reserved` row where known): never
    above `memory_breakdown`'s total (its stage adds activations, buffers and the allocator's
    share, none negative, to the same reserve, summed in the same order), so a plan whose floor
    exceeds the GPU does not fit, whatever its activations. A planner drops such plans before
    pricing their activations."""
    first, middle, last = (sum(st) for st in stage_states(plan, params, expert_params, trained))
    middle = np.where(np.asarray(plan.pp) > 2, middle, -np.inf)
    return np.maximum(np.maximum(first, middle), last) + reserved
