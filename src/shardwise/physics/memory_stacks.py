"""What a training process holds beyond the model state and the saved activations, and where software
stacks differ (`STACKS`, keyed by `Plan.framework`); split out of `physics.memory`, which re-exports these:
- the loss's logits at their peak (`logits_bytes`: bytes per logit element per stack),
- one layer's gradients during its backward pass (`backward_transient_bytes`),
- communication buffers: torch DDP's bucket copies, DeepSpeed's reduction buckets, ZeRO-3's
  gathered units and reduce-scatter inputs (`StackMemory`; NCCL's own in `physics.memory_runtime`),
- what PyTorch's caching allocator reserves but cannot hand out (`StackMemory.fragmentation`;
  `allocator_fraction`: next to nothing with `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from shardwise.arrays import as_bool, ifelse
from shardwise.physics.memory_cached import INTERNEVO_STEP_BYTES_PER_PARAM, StepCache
from shardwise.physics.memory_cached import UNFUSED_ADAMW_TEMP_BYTES_PER_PARAM as UNFUSED_ADAMW_TEMP_BYTES_PER_PARAM
from shardwise.physics.memory_losses import EAGER_BF16_LOGIT_BYTES as EAGER_BF16_LOGIT_BYTES
from shardwise.physics.memory_losses import EAGER_BF16_SAVED_LOGIT_BYTES as EAGER_BF16_SAVED_LOGIT_BYTES
from shardwise.physics.memory_losses import INTERNEVO_METRIC_LOGIT_BYTES, LOSS_KERNEL_LOGIT_BYTES
from shardwise.physics.memory_losses import TE_CROSS_ENTROPY_LOGIT_BYTES as TE_CROSS_ENTROPY_LOGIT_BYTES
from shardwise.physics.memory_runtime import NVLS_HEAD_BYTES_NCCL_2_18
from shardwise.specs import Model
from shardwise.specs._checks import Number

# PyTorch's caching allocator: memory it reserves but cannot hand out (split blocks of segments
# that stay in use), as a fraction of the memory allocated and freed during the step (activations,
# logits, gathered parameters). Max reserved - max allocated over the step's transient part (max
# allocated - allocated between steps) in Megatron-LM's memory reports: 7.7% in a Megatron-LM log
# of LAION's open-sci-ref 1.7B run (tp1 dp252 mbs4 s4096 on Leonardo's A100: 53386 - 50277 of
# 50277 - 9909 MiB), 24% in a Megatron-DeepSpeed log (46764 - 41299 of 41299 - 18245 MiB); in
# H100 out-of-memory reports "reserved but unallocated" is 0.4-5% of everything allocated
# (pytorch/pytorch#152135: 3.87 of 74.77 GiB). 10% taken; block rounding itself (512 B, 2 MiB
# segments) is negligible beside it.
ALLOCATOR_FRAGMENTATION = 0.10
# The same with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (`Plan.expandable_segments`): the
# allocator maps physical pages into one virtual segment per stream that grows as needed (PyTorch
# docs, notes/cuda.rst "Optimizing memory usage with PYTORCH_CUDA_ALLOC_CONF"; c10/cuda/
# CUDACachingAllocator.cpp, ExpandableSegment), so before it reports out of memory,
# release_cached_blocks unmaps the pages under free blocks, including the split ones inside a
# segment still in use, and maps them again where the new block goes. What stays out of reach is
# the partly used page at a free block's ends (2 MiB pages: MiBs against the GiBs above): 0.
EXPANDABLE_SEGMENTS_FRAGMENTATION = 0.0
# DeepSpeed ZeRO 1-2's reduction buckets: reduce_bucket_size 5e8 elements (zero/config.py
# default) of the 16-bit dtype, two of them with overlap_comm (stage_1_and_2.py setup_buckets).
DEEPSPEED_REDUCE_BUCKET_BYTES = 2 * 5e8 * 2.0
# FSDP2 under torch.distributed.pipelining: the stage's parameters stay gathered and its gradients
# accumulate unsharded until the last micro-batch's backward. torchtitan
# (torchtitan/distributed/fsdp.py get_fsdp_reshard_after_forward_policy, "default": `return not
# pp_enabled`) and NeMo Automodel (nemo_automodel/components/distributed/parallelizer.py
# apply_fsdp2_sharding_recursively: "With PP: keep weights gathered across microbatches") turn
# reshard_after_forward off with pp > 1, and the pipeline stage runs every backward with
# `set_requires_gradient_sync(False)` (torch/distributed/pipelining/stage.py
# backward_maybe_with_nosync: earlier versions for all but the last micro-batch, the newest for all
# of them, with `set_reshard_after_backward(False)`), so FSDP2 keeps the unsharded gradient, upcast to the
# reduction dtype (`FSDPParam.to_accumulated_grad_if_needed`), until the reduce-scatter after the
# last backward. NVIDIA-NeMo/Automodel commit d612d338c (2026-06-20) measured "~16GB/rank" of
# gathered weights for a Llama 3.3 70B stage on 80 GB H100 (pp 8, dp 4).
PP_FSDP_SOURCE = "torchtitan fsdp.py, Automodel parallelizer.py, torch pipelining stage.py"
# nanotron's sequence-parallel all-gather buffers, (synchronous, async) hidden-widths: the source
# where they are priced (engines/training_buffers.py tp_gather_buffer_bytes)
NANOTRON_SP_GATHER_BUFFERS = (1.0, 2.0)
# ZeRO-3 / FSDP keeps two units gathered: the one in use and the one prefetched (PyTorch FSDP's
# forward/backward prefetch, DeepSpeed's stage3 prefetch).
ZERO3_GATHERED_UNITS = 2


@dataclass(frozen=True)
class StackMemory:
    """Where a software stack's memory differs (per `Plan.framework`; `STACKS`).

    `logits_bytes_per_element`: bytes per logit (s b V / tp of them) at the loss's peak.
    Megatron-LM's vocab-parallel cross-entropy (core/tensor_parallel/cross_entropy.py) keeps the
    bf16 logits (2) and one fp32 copy that it turns into the softmax in place and saves, and
    computes the gradient in place (4): 6. Eager PyTorch `F.cross_entropy(logits.float())`
    (torchtitan components/loss.py, Hugging Face models): bf16 logits (2), fp32 copy (4),
    log_softmax output saved (4), and in the backward pass the gradients of that output and of its
    input (4 + 4) beside the saved output: 12 at the backward's start (torchtune's chunked
    cross-entropy saves 8.1 GiB at b 2, s 4096, V 128256 on Llama-3.2-3B: 8 B a logit). Fused or
    compiled losses (torch.compile, XLA): as Megatron's.
    `sharded_fp32_params`: under ZeRO-3 the sharded parameters are the fp32 master weights and the
    16-bit ones exist only gathered, unit by unit (PyTorch FSDP's and FSDP2's mixed precision:
    param_dtype is the compute copy; XLA's FSDP): 4 + 4 + 8 bytes per parameter over the shards
    instead of ZeRO's 2 + 4 + 12 (DeepSpeed keeps a 16-bit shard beside the fp32 one).
    `grad_copy_bytes_per_param`: 16-bit gradients of every local parameter held at the end of a
    backward pass before they are added into fp32 buffers (nanotron's FP32GradientAccumulator runs
    after loss.backward()); they replace the activations of the micro-batch whose backward pass
    just ended (the other micro-batches a pipeline stage holds stay), so they count where they
    exceed those.
    `zero1_gather_bytes_per_param`: what the ZeRO-1 parameter all-gather after the optimizer step
    adds with dp > 1, when the activations are gone: nanotron's `all_gather_coalesced`
    (src/nanotron/distributed.py) flattens the gathered 16-bit parameters into one buffer per rank,
    a full-size copy (2) before copying them back (plus the local shard's flat input, 2 / dp).
    `eager_glu`: a gated MLP whose SiLU and multiply run as separate ops (nanotron's GLUActivation,
    src/nanotron/models/llama.py: `self.act(gate_states) * up_states`; Hugging Face LlamaMLP and
    torchtitan's FeedForward alike) keeps one more f-wide tensor per token than a fused SwiGLU
    (Megatron-Core's bias_swiglu saves only its 2 f input): SiLU saves the gate (the merged 2 f
    output stays alive through the views), the multiply saves the SiLU output (f) and the down
    projection the product (f), 4 f against `layer_activation_bytes`' 3 f.
    `sp_gather_buffers`: (synchronous, async) persistent all-gather buffers under sequence parallelism
    in hidden-widths per token (`engines.training_buffers.tp_gather_buffer_bytes`; nanotron's: (1, 2)).
    `extra_groups`: NCCL communicators the stack creates beyond the plan's tp, cp, dp and pp ones
    (`physics.memory_runtime.stack_group_bytes`: "default", "world", "node", "tp_pp", "p2p", "tied_ends").
    `nvls_head_bytes`: one NVLink SHARP head's buffers in the NCCL the stack's runs used, where it
    is not the current one (`physics.memory_runtime.NVLS_HEAD_BYTES_NCCL_2_18`; None: 32 MiB).
    `nccl_tree_at_init`: the stack's NCCL (before 2.22) connects every communicator's tree beside its
    ring when it is created (`physics.memory_runtime.communicator_bytes`).
    `packed_qkv_mha`: without grouped-query attention nanotron splits the QKV output by views of one
    permuted copy (`qkv_states.view(...).permute(2, 1, 0, 3, 4).contiguous()`), so the query view
    FlashAttention saves keeps the whole packed buffer alive beside the concatenated key-value copy
    the rotary kernel works on: 2 more kv-widths per token (CausalSelfAttention.forward, training case).
    `step_grad_bytes_per_param`: what the optimizer step adds without ZeRO, when the activations
    are gone: DeepSpeed's FP16_Optimizer (runtime/fp16/fused_optimizer.py, step) makes an fp32 copy
    of every gradient and flattens them into one more (4 + 4).
    `optimizer_step_bytes_per_param`: what the optimizer step adds per parameter of the rank's
    optimizer shard (divided by the ZeRO ranks from stage 1 on), when the activations are gone, at
    its fullest moment: InternEvo's fp32 gradient beside the unfused AdamW's temporaries (4 + 8,
    `INTERNEVO_STEP_BYTES_PER_PARAM`).
    `step_frees_grads`: below ZeRO-3 the step's fullest moment comes after the stack has freed the
    16-bit gradients the model state counts (InternEvo's HybridZeroOptimizer: `_sync_grad` moves
    every `.grad` into its averaged-gradient list and sets it to None, `_step` flattens that list
    and drops it, then casts the flat copy to fp32 and drops the 16-bit one before AdamW runs), so
    the step adds `optimizer_step_bytes_per_param` less those gradients.
    `grad_bytes`: the gradients' bytes per parameter where the stack keeps them in its own dtype
    whatever the plan's reduction (None: `grad_bytes_per_param`'s): InternEvo keeps each
    parameter's 16-bit `.grad` as its averaged gradient across micro-batches and makes an fp32
    copy only in the step (`_averaged_gradients`, `add_(param.grad)`): 2.
    `ddp_bucket_bytes_per_param`: torch DDP's bucket copies of the gradients
    (gradient_as_bucket_view=False, the default), with dp > 1 and ZeRO below 3.
    `zero_bucket_bytes`: fixed reduction buckets with dp > 1 and ZeRO >= 1 (DeepSpeed).
    `zero3_reduce_bytes_per_param`: ZeRO-3's unsharded gradients of one unit waiting for their
    reduce-scatter: 16-bit (2), plus an fp32 copy (4) where the reduction runs in fp32.
    `pp_unsharded_grad_bytes`: under pipeline parallelism with ZeRO-2/3 the stack's FSDP2 keeps the
    stage's parameters unsharded (16-bit) from their first forward to the step and accumulates
    unsharded gradients across the micro-batches, at these bytes a parameter (the reduction dtype:
    fp32, 4), reduce-scattering them only after the last backward (0: not so; `PP_FSDP_SOURCE`).
    `fragmentation`: the caching allocator's share (`ALLOCATOR_FRAGMENTATION`; XLA assigns its
    buffers ahead of time: 0).
    `full_recompute_kept_hidden`: hidden-widths per token a layer keeps under full recomputation:
    1, its input, where the checkpoint wraps the whole layer (Megatron-Core, torchtitan, FSDP's
    checkpoint_wrapper on a block, Hugging Face's gradient checkpointing); 4 where the stack wraps the
    attention and the MLP apart and runs the norms and residual adds outside them: NeMo Automodel's
    `activation_checkpointing` (nemo_automodel/components/distributed/parallelizer.py, from 507bfb7514
    to 2013a4dd6e and, under `enable_compile`, after: `checkpoint_wrapper` on each layer's `self_attn` and
    `mlp`), which keeps the layer's input and the residual between the two (each saved by the RMSNorm
    that reads it) and the two norm outputs (each checkpoint's input).
    `moe_full_recompute_kept_hidden`: the same for a mixture of experts where the stack wraps its
    blocks otherwise (None: as a dense model's): NeMo Automodel's own MoE models
    (nemo_automodel/components/moe/parallelizer.py `apply_ac`, 89e3a9fdd6 to 822effa167:
    `ptd_checkpoint_wrapper(block)` round each whole decoder block) keep the block's input: 1.
    `saved_logits_bytes_per_element`: bytes per logit the loss keeps for its backward pass once its
    forward has returned, what each micro-batch in flight on the last stage holds beyond the one at
    the loss's peak (`held_outputs_bytes`): the fp32 softmax Megatron-LM's and nanotron's
    vocab-parallel cross-entropies save (`ctx.save_for_backward(exp_logits, ...)`), the fp32
    log-softmax eager `F.cross_entropy` saves: 4.
    `step_cache`: below ZeRO-3 the step allocates flat tensors of the whole shard beside every block
    cached before it (`physics.memory_cached`, InternEvo's HybridZeroOptimizer): what a measured
    reserved or device peak adds (`MemoryBreakdown.cached_bytes`); None: nothing."""

    logits_bytes_per_element: float
    sharded_fp32_params: bool = False
    grad_copy_bytes_per_param: float = 0.0
    step_grad_bytes_per_param: float = 0.0
    optimizer_step_bytes_per_param: float = 0.0
    step_frees_grads: bool = False
    grad_bytes: float | None = None
    ddp_bucket_bytes_per_param: float = 0.0
    zero_bucket_bytes: float = 0.0
    zero3_reduce_bytes_per_param: float = 2.0
    pp_unsharded_grad_bytes: float = 0.0
    zero1_gather_bytes_per_param: float = 0.0
    eager_glu: bool = False
    packed_qkv_mha: bool = False
    sp_gather_buffers: tuple[float, float] = (0.0, 0.0)
    extra_groups: tuple[str, ...] = ()
    nvls_head_bytes: float | None = None
    nccl_tree_at_init: bool = False
    fragmentation: float = ALLOCATOR_FRAGMENTATION
    saved_logits_bytes_per_element: float = 4.0
    full_recompute_kept_hidden: float = 1.0
    moe_full_recompute_kept_hidden: float | None = None
    step_cache: StepCache | None = None
    source: str = ""

    def kept_hidden(self, model: Model) -> float:
        """`full_recompute_kept_hidden` for `model`: `moe_full_recompute_kept_hidden` where the
        stack checkpoints a mixture of experts' blocks otherwise than a dense model's layers."""
        moe = self.moe_full_recompute_kept_hidden
        return moe if (moe is not None and model.is_moe) else self.full_recompute_kept_hidden

    def extra_saved_elements(self, model: Model, ffn: Number | None = None) -> Number:
        """Elements per token one layer keeps beyond `layer_activation_bytes`' inventory, before
        the TP split (`eager_glu`, `packed_qkv_mha`); `ffn`: the dense MLP's width."""
        f = model.ffn_hidden if ffn is None else ffn
        glu = f if (self.eager_glu and model.gated_mlp) else 0.0
        mha = 2.0 * model.kv_heads * model.head_dim if (self.packed_qkv_mha and model.kv_heads == model.heads) else 0.0
        return glu + mha


_MEGATRON = StackMemory(6.0, source="Megatron-LM cross_entropy.py; DDP buckets are views of the main_grad buffer")
_EAGER = StackMemory(12.0, eager_glu=True, source="eager PyTorch F.cross_entropy on fp32 logits; eager SwiGLU")
_FSDP = StackMemory(
    12.0, sharded_fp32_params=True, eager_glu=True, source="eager PyTorch loss and SwiGLU; FSDP keeps fp32 shards"
)
STACKS: dict[str, StackMemory] = {
    "megatron-core": _MEGATRON,
    "megatron-lm-2022": _MEGATRON,
    "megatron-lm-2021": _MEGATRON,
    "megatron-deepspeed": StackMemory(
        6.0,
        step_grad_bytes_per_param=8.0,
        zero_bucket_bytes=DEEPSPEED_REDUCE_BUCKET_BYTES,
        source="Megatron's loss; DeepSpeed's FP16_Optimizer step and ZeRO-1 reduce buckets",
    ),
    "nanotron": StackMemory(
        # LlamaModel.forward_with_hidden_states returns the logits cast to fp32 by its cast_to_fp32
        # block (4; the bf16 logits are freed when it returns: ToCopyBackward saves nothing), and
        # _ShardedCrossEntropy subtracts the max out of place (`sharded_logits = sharded_logits -
        # logits_max`, 4; Megatron-LM does it in place) before the exp and the division run in
        # place on that copy, which it saves: 8 at the peak, the cast's 4 and the copy's 4
        # (huggingface/nanotron src/nanotron/models/llama.py and
        # src/nanotron/parallel/tensor_parallel/functional.py, v0.4-v0.5 and main).
        8.0,
        grad_copy_bytes_per_param=2.0,
        ddp_bucket_bytes_per_param=2.0,
        zero1_gather_bytes_per_param=2.0,
        eager_glu=True,
        packed_qkv_mha=True,
        sp_gather_buffers=NANOTRON_SP_GATHER_BUFFERS,
        # the default group and world_pg over every rank, the benchmark branch's local_pg over a
        # server's ranks, mp_pg, the pipeline neighbour's send/recv pair and the tied embedding's
        # first-last group (src/nanotron/parallel/context.py, parallel/tied_parameters.py,
        # trainer.py measure_bandwidth on nouamane/bench2; `stack_group_bytes`)
        extra_groups=("default", "world", "node", "tp_pp", "p2p", "tied_ends"),
        # nanotron's own launch script and benchmark config (run_multinode.sh and
        # examples/config_tiny_llama_bench.yaml, 2024-12: `conda activate 2-1-cu121`) run PyTorch 2.1
        # for CUDA 12.1, whose wheels bundle NCCL 2.18.1: NVLS buffers of 192 MiB a head, and the
        # tree connected beside the ring when a communicator is created
        nvls_head_bytes=NVLS_HEAD_BYTES_NCCL_2_18,
        nccl_tree_at_init=True,
        source="nanotron fp32 logits (cast_to_fp32) and sharded_cross_entropy's out-of-place max subtraction; "
        "FP32GradientAccumulator after backward; torch DDP (trainer.py) with its default bucket copies at "
        "ZeRO-0, none at ZeRO-1 (no DDP under fp32 accumulation with ZeRO: Plan.zero1_grad_all_reduce); "
        "ZeroDistributedOptimizer's flattened all-gather; GLUActivation; packed QKV without GQA; "
        "MemoryBuffer's sequence-parallel all-gather buffers",
    ),
    "internevo": StackMemory(
        # the fp32 logits at the training metric's peak (16, `INTERNEVO_METRIC_LOGIT_BYTES`; the
        # flash-attn fused cross-entropy after it keeps 6; 8 from v0.2.1dev20240102 on). The
        # HybridZeroOptimizer (tag v0.2.1dev20231121, commit eba2b85, the published memory table's version;
        # the same at 34fc28d): the 16-bit `.grad` autograd accumulates
        # in place over the micro-batches, moved into the averaged gradients only in the step
        # (`_sync_grad`, called by `step`): 2; the step at its fullest, the fp32 gradient and AdamW's
        # temporaries over the rank's whole shard, which the optimizer holds as one flat tensor (12,
        # `INTERNEVO_STEP_BYTES_PER_PARAM`), after the 16-bit gradients are freed (`step_frees_grads`;
        # the FSDP path keeps them through the step); what the caching allocator keeps beside those
        # flat tensors, the reduction hooks' two 1 GiB buckets among it (`step_cache`).
        INTERNEVO_METRIC_LOGIT_BYTES,
        grad_bytes=2.0,
        optimizer_step_bytes_per_param=INTERNEVO_STEP_BYTES_PER_PARAM,
        step_frees_grads=True,
        step_cache=StepCache(),
        source="the training metric's fp32 logit copies; HybridZeroOptimizer's 16-bit averaged gradients; the "
        "step's fp32 gradient and unfused AdamW's temporaries over the flat shard, beside the cached blocks",
    ),
    "fsdp": _FSDP,
    # under a pipeline (or a deferred sync) FSDP2's unsharded gradients wait at the reduce dtype's bytes: fp32 in
    # OLMo-core, the preset's stack that pipelines (olmo_core/distributed/parallel/data_parallel.py reduce_dtype)
    "fsdp2": replace(_FSDP, pp_unsharded_grad_bytes=4.0, source=_FSDP.source + "; fp32 gradients kept in a pipeline"),
    "torchtitan": StackMemory(
        12.0,
        sharded_fp32_params=True,
        eager_glu=True,
        zero3_reduce_bytes_per_param=6.0,
        pp_unsharded_grad_bytes=4.0,
        source="torchtitan loss.py; FSDP2 with fp32 shards, reducing in fp32 (mixed_precision_reduce)",
    ),
    "torchtitan-compile": StackMemory(
        6.0,
        sharded_fp32_params=True,
        zero3_reduce_bytes_per_param=6.0,
        pp_unsharded_grad_bytes=4.0,
        source="compiled loss; FSDP2 with fp32 shards, reducing in fp32 (mixed_precision_reduce)",
    ),
    "deepspeed": StackMemory(
        12.0,
        step_grad_bytes_per_param=8.0,
        zero_bucket_bytes=DEEPSPEED_REDUCE_BUCKET_BYTES,
        eager_glu=True,
        source="Hugging Face loss and SwiGLU; DeepSpeed's FP16_Optimizer step and reduce buckets",
    ),
    "colossalai": _EAGER,
    "composer": _FSDP,
    "modalities": _FSDP,  # FSDP1, as fsdp
    "hf-transformers": StackMemory(
        12.0,
        sharded_fp32_params=True,
        eager_glu=True,
        source="Hugging Face models' loss on fp32 logits and eager SwiGLU (LlamaMLP); FSDP / ZeRO-3 fp32 shards",
    ),
    "nemo-automodel": StackMemory(
        12.0,
        sharded_fp32_params=True,
        eager_glu=True,
        zero3_reduce_bytes_per_param=6.0,
        pp_unsharded_grad_bytes=4.0,
        full_recompute_kept_hidden=4.0,
        moe_full_recompute_kept_hidden=1.0,
        source="fp32 logits in the loss; FSDP2 with fp32 shards, reducing in fp32 (nemo_automodel/components/"
        "distributed/config.py FSDP2Config.mp_policy: reduce_dtype float32); attention and MLP checkpointed apart, "
        "a mixture of experts' whole blocks",
    ),
    "maxtext": StackMemory(
        6.0, sharded_fp32_params=True, fragmentation=0.0, source="XLA: fused loss, buffers assigned at compile time"
    ),
    "paxml": StackMemory(
        6.0, sharded_fp32_params=True, fragmentation=0.0, source="XLA: fused loss, buffers assigned at compile time"
    ),
}
# nanotron in its dataclass's layout modes (presets: nanotron-defaults): the same code, the same memory
STACKS["nanotron-defaults"] = STACKS["nanotron"]
# flash-attn's training scripts (Dao-AILab/flash-attention training/, 4a6eaa9f, the README's speed
# table): the loss is training/src/losses/cross_entropy_apex.py CrossEntropyLossApex with
# `inplace_backward: True` (configs/experiment/{pile,owt}/base.yaml `loss_fn`), Apex's xentropy kernel:
# the forward reads the 16-bit logits and saves them with one fp32 max-log-sum-exp per token (no fp32
# copy of the logits), and the backward writes the gradient into the saved logits' own buffer: 2 bytes
# a logit at the peak and saved, as Transformer Engine's (`TE_CROSS_ENTROPY_LOGIT_BYTES`). The rest
# as Megatron-Core's, as any stack without an entry is priced.
STACKS["flash-attn-trainer"] = replace(
    _MEGATRON,
    logits_bytes_per_element=TE_CROSS_ENTROPY_LOGIT_BYTES,
    saved_logits_bytes_per_element=TE_CROSS_ENTROPY_LOGIT_BYTES,
    source="flash-attn training's Apex xentropy loss with inplace_backward (2 B a logit); otherwise Megatron's",
)


def stack_memory(framework: str, loss_kernel: str = "stack") -> StackMemory:
    """The stack's memory entry; a framework without one (a user's own label) is priced as
    Megatron-Core, the default framework. A named `loss_kernel` (`Plan.loss_kernel`, "te", "eager-bf16",
    "eager-bf16-freed" or "compiled"; `physics.memory_losses.LOSS_KERNEL_LOGIT_BYTES`) is the kernel the
    run's loss uses: its bytes a logit replace the stack's, more or fewer."""
    stack = STACKS.get(framework, _MEGATRON)
    if loss_kernel not in LOSS_KERNEL_LOGIT_BYTES:
        return stack
    peak, saved = LOSS_KERNEL_LOGIT_BYTES[loss_kernel]
    saved = stack.saved_logits_bytes_per_element if saved is None else saved
    return replace(stack, logits_bytes_per_element=peak, saved_logits_bytes_per_element=saved)


def allocator_fraction(stack: StackMemory, expandable_segments: Number) -> Number:
    """The share of the step's transient memory the caching allocator reserves but cannot hand
    out: the stack's (`StackMemory.fragmentation`), or `EXPANDABLE_SEGMENTS_FRAGMENTATION` where the
    run sets expandable segments (`Plan.expandable_segments`) and the stack uses PyTorch's allocator."""
    expandable = min(stack.fragmentation, EXPANDABLE_SEGMENTS_FRAGMENTATION)
    return ifelse(as_bool(expandable_segments), expandable, stack.fragmentation)


def logits_bytes(model: Model, batch: Number, tp: Number, stack: StackMemory) -> Number:
    """The loss's logits at their peak on the last stage: s b V / t elements at the stack's bytes."""
    return stack.logits_bytes_per_element * model.seq_len * batch * model.vocab / tp


def held_outputs_bytes(
    model: Model, batch: Number, tp: Number, saved_head: Number, stack: StackMemory, micro_batches: Number
) -> Number:
    """What the last stage holds for the output layer of `micro_batches` micro-batches whose
    backward pass has not begun, beyond the one whose loss peak `logits_bytes` counts: each keeps
    its loss's saved logits (`StackMemory.saved_logits_bytes_per_element`, s b V / t of them) and
    the final norm's and output projection's inputs (`saved_head`). GPipe's order holds all m of a
    step (nanotron's AllForwardAllBackward engine at any pp, pipeline/engine.py: the loss of every
    micro-batch registered for the backward pass that follows all forwards); 1F1B's last stage runs
    each backward right after its forward: 1, nothing beyond."""
    held = np.maximum(np.asarray(micro_batches, dtype=float) - 1.0, 0.0)
    saved = stack.saved_logits_bytes_per_element * model.seq_len * batch * model.vocab / tp
    return held * (saved + saved_head)


def backward_transient_bytes(
    model: Model, batch: Number, tp: Number, sequence_parallel: Number, bytes_per_element: float
) -> Number:
    """The largest set of gradients one layer's backward pass holds beside the saved activations:
    those of its MLP's up-projection (gate x f) and activation (f) outputs, split over TP, and the
    gradients flowing into and out of the layer (2 s b h, split with sequence parallelism)."""
    s, b, h, f, e = model.seq_len, batch, model.hidden, model.ffn_hidden, bytes_per_element
    gate = 2 if model.gated_mlp else 1
    sp = ifelse(as_bool(sequence_parallel), tp, 1)
    return e * s * b * ((gate + 1) * f / tp + 2 * h / sp)
