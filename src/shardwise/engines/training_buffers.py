"""What a training step holds on one GPU beside its model state and saved activations, per stage
and per plan: ZeRO-3's gathered units and the gradients waiting for their reduce-scatter, the
stage's unsharded weights and gradients where a stack's FSDP2 keeps them through the pipeline's
micro-batches, and the stack's gradient copies and buckets (`physics.memory.StackMemory`); split
out of `engines.training_memory`, which re-exports these names.
"""

from __future__ import annotations

from shardwise.arrays import as_array, as_bool, ifelse, maximum
from shardwise.physics import memory as mem
from shardwise.physics import zero3_deepspeed as z3d
from shardwise.physics.microbatch import plan_deferred_sync
from shardwise.physics.params import layer_params_split, moe_layer_params_per_gpu
from shardwise.specs import Model, Plan
from shardwise.specs._checks import Number
from shardwise.specs.memo import kept
from shardwise.specs.zero3 import Zero3Buckets


def zero3_buffers(model: Model, plan: Plan, stack: mem.StackMemory, moe: bool) -> tuple[Number, Number]:
    """(gathered weights, gradients waiting for their reduce-scatter) of ZeRO-3, 0 below it (FSDP2's
    gradients at ZeRO-2 too). It
    gathers each unit's weights before use and the next one's ahead of time (PyTorch FSDP's and
    DeepSpeed's prefetch of one unit): the largest unit (a layer, or the word embedding or output
    matrix, which FSDP wraps on their own) and a layer, whole as tp and ep shard them; and holds
    the largest unit's unsharded gradients at the stack's bytes until they are reduced. With
    `Plan.zero3_buckets` (DeepSpeed's stage 3, a dense model): what its buckets hold instead
    (`deepspeed_zero3_buffers`)."""
    if deepspeed_traced(model, plan, moe):
        return deepspeed_zero3_buffers(model, plan)
    # FSDP2 at ZeRO-2 (reshard_after_forward False) still reduce-scatters unit by unit in each backward
    # it syncs: the same gradient buffers as at ZeRO-3 (`_zero3_buffers`), its weights kept gathered
    fsdp2 = as_bool(plan.per_param_sharding)
    return _zero3_buffers(model, plan.tp, plan.ep, plan.expert_tp, plan.zero_stage, plan.precision, stack, moe, fsdp2)


def deepspeed_traced(model: Model, plan: Plan, moe: bool) -> bool:
    """Whether ZeRO-3's buffers are DeepSpeed's module-by-module trace (`Plan.zero3_buckets` on a
    dense model, `z3d.applies`) rather than FSDP's units (a mixture of experts, a hybrid, MLA)."""
    return plan.zero3_buckets is not None and not moe and z3d.applies(model)


def deepspeed_zero3_buffers(model: Model, plan: Plan) -> tuple[Number, Number]:
    """(gathered weights, gradient buckets) of DeepSpeed's ZeRO-3 (`physics.zero3_deepspeed`),
    0 below stage 3: the most parameters gathered at once (the module running, those prefetched up
    to `stage3_max_live_parameters`, those kept for reuse across the forward-backward turn) and the
    persistent ones, at the 16-bit weight's bytes; the contiguous reduction buffer of
    `reduce_bucket_size` elements and the flat copy of the largest bucket reduce_scatter_coalesced
    makes, at the communication dtype's bytes (`physics.memory.grad_bytes_per_param`: DeepSpeed's
    communication_data_type), with one module's 16-bit gradients before they are copied in."""
    return _deepspeed_zero3_buffers(
        model, plan.tp, plan.pp, plan.zero_stage, plan.precision, plan.grad_reduce_bf16, plan.zero3_buckets
    )


@kept
def _deepspeed_zero3_buffers(
    model: Model,
    tp: Number,
    pp: Number,
    zero_stage: Number,
    precision: str,
    grad_bf16: Number,
    buckets: Zero3Buckets,
) -> tuple[Number, Number]:
    """`deepspeed_zero3_buffers` of the plan fields it reads (kept per them, `specs.memo.kept`)."""
    layers = -(-model.layers // as_array(pp))
    t = z3d.traces(model, tp, layers, buckets)
    z3 = as_array(zero_stage) == 3
    gathered = mem.weight_bytes_per_param(precision) * (t.peak_gathered_params + t.persistent_params)
    comm = mem.grad_bytes_per_param(precision, grad_bf16)
    reducing = comm * (buckets.reduce_bucket_params + t.largest_flush_params) + 2.0 * t.largest_module_params
    return ifelse(z3, gathered, 0.0), ifelse(z3, reducing, 0.0)


@kept
def _zero3_buffers(
    model: Model,
    tp: Number,
    ep: Number,
    etp: Number,
    zero_stage: Number,
    precision: str,
    stack: mem.StackMemory,
    moe: bool,
    fsdp2: Number = False,
) -> tuple[Number, Number]:
    """`zero3_buffers` of the plan fields it reads (kept per them, `specs.memo.kept`). The reduce
    buffers at ZeRO-2 too under FSDP2 (`fsdp2`): pytorch/pytorch torch/distributed/_composable/fsdp/
    _fsdp_collectives.py (later fsdp/_fully_shard/_fsdp_collectives.py) `foreach_reduce` allocates each
    unit's reduce-scatter input at the reduce dtype (`reduce_scatter_input = torch.empty(...,
    dtype=reduce_dtype)`) and copies the unit's unsharded 16-bit gradients in, whatever
    reshard_after_forward says: the stack's `zero3_reduce_bytes_per_param`."""
    matrices, replicated = layer_params_split(model)
    layer = matrices / tp + replicated
    if moe:
        layer = maximum(layer, sum(moe_layer_params_per_gpu(model, tp, ep, etp)))
    unit = maximum(layer, model.vocab * model.hidden / tp)
    z3 = as_array(zero_stage) == 3
    gathered = ifelse(z3, mem.weight_bytes_per_param(precision) * (unit + layer), 0.0)
    reduces = z3 | ((as_array(zero_stage) == 2) & as_bool(fsdp2))
    return gathered, ifelse(reduces, stack.zero3_reduce_bytes_per_param * unit, 0.0)


def tp_gather_buffer_bytes(model: Model, plan: Plan, stack: mem.StackMemory) -> Number:
    """The persistent all-gather buffers a stack keeps under sequence parallelism with tp > 1, on
    every stage: `StackMemory.sp_gather_buffers` hidden-widths (synchronous, async TP) of one
    micro-batch's full sequence at the 16-bit bytes. nanotron (huggingface/nanotron
    src/nanotron/parallel/tensor_parallel/functional.py @67c5ebb6 on nouamane/bench2, the same on main
    2411b022): with tp_mode REDUCE_SCATTER every column linear (qkv, gate_up, lm_head: h-wide inputs)
    all-gathers its sequence-sharded input into `MemoryBuffer().get("allgather", ...)`, in the forward
    and, with tp_recompute_allgather (True by default, config/parallelism_config.py), again in the
    backward; with tp_linear_async_communication the row linears (o_proj, down_proj) all-gather their
    output gradient (h wide) into "allgather2" (_RowLinearAsyncCommunication.backward).
    `MemoryBuffer` (parallel/utils.py) is a Singleton dict of tensors, each grown to the largest
    request and never freed: (1, 2) hidden-widths, beside the saved activations, at every moment
    after the first micro-batch. 0 without sequence parallelism or at tp 1 (group.size() == 1)."""
    sync, async_ = stack.sp_gather_buffers
    if sync == 0.0 and async_ == 0.0:
        return 0.0
    on = as_bool(plan.sequence_parallel) & (as_array(plan.tp) > 1)
    widths = ifelse(as_bool(plan.async_tp_grad), async_, sync)
    tokens = model.seq_len * as_array(plan.micro_batch)
    return ifelse(on, plan.bytes_per_element * tokens * model.hidden * widths, 0.0)


def pp_unsharded_bytes(plan: Plan, stack: mem.StackMemory, params: Number, trained: Number) -> tuple[Number, Number]:
    """(weights, gradients) a stage of ZeRO-2/3 holds unsharded where the stack's FSDP2 keeps them so
    through the micro-batches (`StackMemory.pp_unsharded_grad_bytes`). Under pipeline parallelism:
    the `trained` parameters' gradients at the reduction dtype's bytes (torch.distributed.pipelining
    `backward_maybe_with_nosync` runs every backward with the FSDP module's gradient sync and
    reshard-after-backward off, and the stage's `_post_backward` turns them on and reduces after the
    last, whatever its reshard policy, so ZeRO-2's gradients wait unsharded too), and under ZeRO-3
    every parameter of the stage at the 16-bit weight's bytes (ZeRO-2 holds its weights whole
    already). At pp = 1 where the stack's loop defers the sync (`physics.microbatch.plan_deferred_sync`,
    NeMo AutoModel's) the gradients alone: with `reduce_grads` off torch's FSDPParamGroup.post_backward
    reshards the weights and keeps each parameter's whole gradient in the reduce dtype
    (`to_accumulated_grad_if_needed`: `unsharded_accumulated_grad`) until the last micro-batch's
    reduce-scatter (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py, _fsdp_param.py). (0, 0)
    otherwise, and with one data-parallel rank (no FSDP wrap). They take the place of ZeRO-3's
    gathered units and of the gradients waiting for their reduce-scatter (`zero3_buffers`),
    whichever is larger."""
    if stack.pp_unsharded_grad_bytes == 0.0:
        return 0.0, 0.0
    zero = as_array(plan.zero_stage)
    # FSDP wraps the stage only with more than one data-parallel rank (one alone holds it whole already)
    wrapped = as_array(plan.dp) * as_array(plan.cp) > 1
    piped = (as_array(plan.pp) > 1) & wrapped
    deferred = (piped | as_bool(plan_deferred_sync(plan))) & wrapped
    weights = ifelse((zero == 3) & piped, mem.weight_bytes_per_param(plan.precision) * params, 0.0)
    return weights, ifelse((zero >= 2) & deferred, stack.pp_unsharded_grad_bytes * trained, 0.0)


def buffer_terms(
    plan: Plan, stack: mem.StackMemory, model: Model | None = None, moe: bool = False
) -> tuple[Number, Number, Number]:
    """What `stage_buffers` reads of the plan alone, the same on every stage: (whether torch DDP
    keeps bucket copies, DeepSpeed's reduction buckets, the optimizer step's gradient copies per
    parameter). Kept per the fields it reads (`specs.memo.kept`). Under ZeRO >= 1 with
    `Plan.zero1_grad_all_reduce` no DDP wraps the model (nanotron's trainer.py init_model), so no
    bucket copies. `model`, `moe`: whether ZeRO-3's bucket is `deepspeed_zero3_buffers`' (`deepspeed_traced`;
    without a model, wherever the plan has DeepSpeed's buckets)."""
    # its bucket is `deepspeed_zero3_buffers`' under ZeRO-3; FSDP's units' fallback keeps the stack's
    deepspeed3 = plan.zero3_buckets is not None if model is None else deepspeed_traced(model, plan, moe)
    zero, ranks = plan.zero_stage, plan.zero_ranks
    overlap = plan.overlap_grad_reduce
    return _buffer_terms(plan.dp, plan.cp, zero, ranks, stack, plan.zero1_grad_all_reduce, deepspeed3, overlap)


@kept
def _buffer_terms(
    dp: Number,
    cp: Number,
    zero_stage: Number,
    zero_ranks: Number,
    stack: mem.StackMemory,
    no_ddp: Number = False,
    deepspeed3: bool = False,
    overlap: Number = True,
) -> tuple[Number, Number, Number]:
    ranks = as_array(dp) * as_array(cp)
    zero = as_array(zero_stage)
    ddp_on = (ranks > 1) & (zero < 3) & ~(as_bool(no_ddp) & (zero >= 1))
    top = 3 if deepspeed3 else 4  # ZeRO-3's buckets counted apart under DeepSpeed's (`zero3_buffers`)
    # DeepSpeed ZeRO 1-2's buffers (`physics.memory_stacks.DEEPSPEED_REDUCE_BUCKET_BYTES`, two): the second
    # only with overlap_comm (stage_1_and_2.py setup_buckets: "double buffers ... when overlap_comm is
    # enabled"), none on stage 1's whole-gradient path (DeepSpeed v0.4.4-v0.12: engine.py
    # _configure_zero_optimizer sets contiguous_gradients and overlap_comm False at stage 1, PR #1246,
    # until PR #4887 in v0.13.0; `Plan.zero1_grad_all_reduce`), where allreduce_bucket's flat copy is
    # made after the backward pass
    held = ifelse((zero == 1) & as_bool(no_ddp), 0.0, ifelse(as_bool(overlap), 1.0, 0.5))
    buckets = ifelse((ranks > 1) & (zero >= 1) & (zero < top), held * stack.zero_bucket_bytes, 0.0)
    shards = as_array(zero_ranks)
    # the step's copies of the optimizer shard's gradients, freed before the ZeRO-1 gather; less
    # the unsharded 16-bit gradients a stack frees before its step's fullest moment (`step_frees_grads`)
    step = ifelse(zero == 0, stack.step_grad_bytes_per_param, 0.0)
    step = step + stack.optimizer_step_bytes_per_param / ifelse(zero >= 1, shards, 1.0)
    if stack.step_frees_grads:
        step = step - ifelse(zero < 2, 2.0 if stack.grad_bytes is None else stack.grad_bytes, 0.0)
    gather = ifelse((shards > 1) & (zero == 1), stack.zero1_gather_bytes_per_param * (1.0 + 1.0 / shards), 0.0)
    return ddp_on, buckets, maximum(step, gather)


def stage_buffers(
    plan: Plan,
    stack: mem.StackMemory,
    trained: Number,
    activations: Number,
    micro_batches: Number = 1.0,
    terms: tuple[Number, Number, Number] | None = None,
) -> Number:
    """A stage's gradient copies and buckets beyond ZeRO's count (`physics.memory.StackMemory`):
    torch DDP's bucket copies and DeepSpeed's reduction buckets where gradients are reduced over
    dp x cp ranks, and the gradient copies a stack makes where they exceed the activations freed by
    then: at the end of a micro-batch's backward pass (its share of the `micro_batches` the stage
    holds) or in the optimizer step (all of them). `terms`: `buffer_terms(plan, stack)`, when
    already found."""
    ddp_on, buckets, in_step_per_param = buffer_terms(plan, stack) if terms is None else terms
    ddp = ifelse(ddp_on, stack.ddp_bucket_bytes_per_param * trained, 0.0)
    after_backward = stack.grad_copy_bytes_per_param * trained - activations / micro_batches
    in_step = in_step_per_param * trained - activations
    return ddp + buckets + maximum(maximum(after_backward, in_step), 0.0)
