"""Memory per GPU: weights, gradients, optimizer state, activations.

Model state (Rajbhandari et al. 2020, ZeRO, Sec. 3.1; mixed-precision Adam): 16-bit weights,
gradients in the reduction dtype (Megatron-LM accumulates and reduces BF16 gradients in fp32,
FP16 ones in fp16), and 12 bytes of fp32 master weight, momentum and variance per parameter.
ZeRO stage 1 partitions the optimizer state over data-parallel ranks, stage 2 also the
gradients, stage 3 also the weights.

Activations (Korthikanti et al. 2022, Sec. 4 and Table 2), bytes per layer per micro-batch,
with e = 2 and 1-byte dropout masks, s sequence, b micro-batch, h hidden, a heads, t = tp:

    no parallelism               s b h (34 + 5 a s / h)
    tensor parallel              s b h (10 + 24/t + 5 a s / (h t))
    tensor + sequence parallel   s b h (34 + 5 a s / h) / t
    selective recomputation      drops the 5 a s / h term (the attention scores)
    full recomputation           2 s b h (the layer input; / t with sequence parallelism)

`layer_activation_bytes` builds these from the tensor inventory (GQA, gated MLPs, no dropout
and FlashAttention change the counts) and `tests/test_memory.py` checks the table.
The first pipeline stage holds the most micro-batches (Korthikanti Sec. 4.2.3): m for GPipe,
min(p, m) for 1F1B, and p v + p - 1 model chunks of l/(p v) layers for the interleaved schedule.

Beyond the model state and those activations a training process holds (each term below with its
source; `STACKS` says where software stacks differ, keyed by `Plan.framework`):
- the loss's logits at their peak (`logits_bytes`: bytes per logit element per stack),
- one layer's gradients during its backward pass (`backward_transient_bytes`),
- communication buffers: NCCL's per communicator (`physics.memory_runtime`), torch DDP's bucket copies,
  DeepSpeed's reduction buckets, ZeRO-3's gathered units and reduce-scatter inputs,
- the CUDA context and library workspaces (`physics.memory_runtime`),
- what PyTorch's caching allocator reserves but cannot hand out (`StackMemory.fragmentation`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from shardwise.arrays import as_array, as_bool, ifelse
from shardwise.physics import remat
from shardwise.physics.flops import DROPOUT_MASK_BYTES
from shardwise.specs import Model, Recompute, Schedule
from shardwise.specs._checks import Number
from shardwise.specs.memo import kept
from shardwise.units import GIB

# Adam: fp32 master weight, momentum, variance (Rajbhandari et al. 2020, ZeRO, Sec. 3.1: K = 12).
OPTIMIZER_BYTES_PER_PARAM = 12.0
MASTER_WEIGHT_BYTES = 4.0  # of those 12, the fp32 master weight
# FlashAttention keeps one fp32 log-sum-exp per query and head for its backward pass
# (Dao 2023, FlashAttention-2, Sec. 3.1.1 and Algorithm 1: the statistic L).
FLASH_STATS_BYTES = 4.0
# Transformer Engine under FP8 keeps the FP8 cast of each linear layer's input for its weight
# gradient instead of the 16-bit input (transformer_engine/pytorch/module/linear.py and
# layernorm_linear.py: the quantized `inputmat` / `ln_out` saved for backward; MXFP8 adds a 1-byte
# scale per 32 elements, left out): 1 byte an element.
TE_FP8_INPUT_BYTES = 1.0
# Serving's runtime reserve (engines/serving.py, engines/inflight.py): CUDA context, cuBLAS
# workspaces, NCCL buffers and allocator slack, typically 1-3 GB. A project estimate with no
# published source. Training itemises the same things per plan (`runtime_reserved_bytes`).
RUNTIME_RESERVED_BYTES = 2.0 * GIB


def weight_bytes_per_param(precision: str) -> float:
    """16-bit weights (fp8 training keeps 16-bit weights and casts per GEMM)."""
    return 2.0


def grad_bytes_per_param(precision: str, reduce_bf16: Number = False) -> Number:
    """fp32 gradient buffers for BF16 and FP8 (Megatron-LM forces fp32 accumulation for BF16),
    fp16 gradients for FP16 (Megatron-LM 2021 default). `reduce_bf16` (`Plan.grad_reduce_bf16`):
    the buffer and its data-parallel reduction in the 16-bit parameter dtype instead (Megatron-LM
    `--grad-reduce-in-bf16`, megatron/training/arguments.py; Megatron-Core's grad_reduce_in_fp32
    False, whose buffers take the parameter's dtype, core/distributed/param_and_grad_buffer.py
    group_params_for_buffers): 2."""
    if precision == "fp16":
        return 2.0
    return ifelse(as_bool(reduce_bf16), 2.0, 4.0)


@kept
def layer_activation_bytes(
    model: Model,
    batch: Number,
    tp: Number,
    sequence_parallel: Number,
    recompute: Number,
    flash_attention: Number,
    bytes_per_element: float,
    ffn: Number | None = None,
    selective_policy: str = "attention",
    stack_extra: float = 0.0,
    recompute_modules: tuple[str, ...] = (),
    fp8_input_bytes: float = 0.0,
) -> Number:
    """Activations one layer keeps for its backward pass, per micro-batch, on one GPU (`ffn`: the
    width of its dense MLP, as in `physics.flops.layer_forward`). `selective_policy` "op":
    selective recomputation keeps what torchtitan's op-level policy saves (`op_sac_layer_bytes`).
    `stack_extra`: elements per token a stack's own layer code keeps beyond this inventory, split
    over TP (`StackMemory.extra_saved_elements`); not kept under full recomputation.
    `recompute_modules` (Megatron-Core's selective modules, `Plan.recompute_modules`, with the
    "attention" policy): "mlp" checkpoints a dense layer's MLP on its input
    (megatron/core/transformer/transformer_layer.py `_forward_mlp`: tensor_parallel.checkpoint /
    te_checkpoint of self.mlp on the pre-MLP residual), so the MLP's own saved tensors go: the
    normalised input its first linear keeps, the up-projection (gate x f) and activation (f)
    outputs, `mlp_checkpointed_bytes`; "core_attn" keeps q, k, v as the flash kernel does (nothing
    more to drop); "layernorm" recomputes a standalone norm's output, which Transformer Engine's
    layer spec does not have (the norms are fused into the following linears, input_layernorm and
    pre_mlp_layernorm are IdentityOp): nothing dropped here. `fp8_input_bytes` (0: none): the
    bytes of the FP8 copy a linear keeps of its input (`TE_FP8_INPUT_BYTES`, Transformer Engine's FP8
    training): the QKV and MLP inputs (the norm outputs) and the last MLP linear's input (the
    activation's output) are kept at that size, and the output projection keeps an FP8 copy of the
    attention output beside the 16-bit one the attention kernel keeps for its own backward pass."""
    s, h, a, kv, d = model.seq_len, model.hidden, model.heads, model.kv_heads, model.head_dim
    f = model.ffn_hidden if ffn is None else ffn
    e, t, b = bytes_per_element, tp, batch
    sbh = s * b * h
    mask = DROPOUT_MASK_BYTES if model.dropout else 0.0
    gate = 2 if model.gated_mlp else 1
    # Replicated across TP ranks unless sequence-parallel: two norm inputs, the QKV and MLP
    # inputs (norm outputs), two hidden-dropout masks.
    c = fp8_input_bytes if fp8_input_bytes else e  # a linear's saved input
    replicated = (2 * e + 2 * c + 2 * mask) * sbh
    # Split across TP ranks: Q, K, V, attention output, MLP up output, activation output (and the
    # output projection's FP8 copy of the attention output, `fp8_input_bytes`).
    sbq = s * b * model.q_dim  # queries and the attention output (sbh unless head_dim is set apart)
    kept_16 = e * (sbq + 2 * s * b * kv * d + sbq + gate * s * b * f + s * b * stack_extra)
    split = (kept_16 + c * s * b * f + fp8_input_bytes * sbq) / t
    # The attention scores: softmax output, dropout mask and output (Korthikanti's 5 a s^2 b).
    scores_std = (e + ((mask + e) if model.dropout else 0.0)) * a * s * s * b / t
    scores_flash = FLASH_STATS_BYTES * a * s * b / t
    scores = np.where(np.asarray(flash_attention, dtype=bool), scores_flash, scores_std)
    sp = np.asarray(sequence_parallel, dtype=bool)
    rep = np.where(sp, replicated / t, replicated)
    rc = np.asarray(recompute)
    full = np.where(sp, e * sbh / t, e * sbh)
    flash = np.asarray(flash_attention, dtype=bool)
    scores_kept = np.where(rc == Recompute.SELECTIVE, np.where(flash, scores_flash, 0.0), scores)
    kept = rep + split + scores_kept
    if "mlp" in recompute_modules and selective_policy == "attention":
        mlp = mlp_checkpointed_bytes(
            model, batch, tp, sequence_parallel, bytes_per_element, f, stack_extra, fp8_input_bytes
        )
        kept = np.where(rc == Recompute.SELECTIVE, kept - mlp, kept)
    if selective_policy == "op":
        op = op_sac_layer_bytes(model, batch, tp, sequence_parallel, bytes_per_element, f)
        kept = np.where(rc == Recompute.SELECTIVE, op + np.where(flash, scores_flash, scores_std), kept)
    if selective_policy in remat.RECOMPUTED:  # a JAX remat policy: the layer input and what it keeps
        jax = remat.kept_bytes(
            selective_policy,
            s,
            b,
            h,
            model.q_dim,
            kv * d,
            f,
            model.gated_mlp,
            t,
            sequence_parallel,
            e,
            FLASH_STATS_BYTES,
            a,
        )
        kept = np.where(rc == Recompute.SELECTIVE, jax, kept)
    return np.where(rc == Recompute.FULL, full, kept)


def mlp_checkpointed_bytes(
    model: Model,
    batch: Number,
    tp: Number,
    sequence_parallel: Number,
    bytes_per_element: float,
    ffn: Number,
    stack_extra: float = 0.0,
    fp8_input_bytes: float = 0.0,
) -> Number:
    """What checkpointing a dense MLP on its input frees of `layer_activation_bytes`' inventory:
    the normalised input the first linear keeps (replicated across TP unless sequence-parallel),
    the up-projection's gate x f and the activation's f outputs, split over TP (and a stack's
    extra elements, `stack_extra`, which are the eager GLU's). The checkpoint's input is the
    residual the norm reads, kept already. Under `fp8_input_bytes` the two linears' inputs (the
    normalised input, the activation's output) are kept at that size."""
    s, b, h, e = model.seq_len, batch, model.hidden, bytes_per_element
    c = fp8_input_bytes if fp8_input_bytes else e
    gate = 2 if model.gated_mlp else 1
    sp = np.asarray(sequence_parallel, dtype=bool)
    norm_out = np.where(sp, s * b * h / tp, s * b * h)
    return c * norm_out + s * b * (e * (gate * ffn + stack_extra) + c * ffn) / tp


def op_sac_layer_bytes(
    model: Model, batch: Number, tp: Number, sequence_parallel: Number, bytes_per_element: float, ffn: Number
) -> Number:
    """What torchtitan's op-level selective checkpointing keeps of one layer, beyond the attention
    statistics (torchtitan distributed/activation_checkpoint.py, `_op_sac_save_list`: every matmul
    output except every second one, attention's output, reduce-scatter outputs; element-wise work
    is recomputed): the layer's input (the checkpoint's), the 1st, 3rd, ... of the outputs of
    Q, K, V, attention-out, MLP up (and gate) and down, in that order (the row-parallel ones whole
    on each TP rank, before their reduce-scatter), the attention output, and with sequence
    parallelism the two reduce-scatter outputs."""
    s, b, h, kvd, e, t = model.seq_len, batch, model.hidden, model.kv_heads * model.head_dim, bytes_per_element, tp
    q = model.q_dim
    up = [ffn / t, ffn / t] if model.gated_mlp else [ffn / t]
    outputs = [q / t, kvd / t, kvd / t, h, *up, h]
    sp = np.asarray(sequence_parallel, dtype=bool)
    layer_input = np.where(sp, h / t, h)
    reduce_scatter = np.where(sp, 2 * h / t, 0.0)
    return e * s * b * (layer_input + sum(outputs[0::2]) + q / t + reduce_scatter)


def routed_expert_activation_bytes(
    model: Model, tokens: Number, etp: Number, imbalance: Number, bytes_per_element: float, recompute: Number
) -> Number:
    """What a mixture-of-experts layer's routed experts keep for the backward pass on the busiest
    rank, for `tokens` routed tokens (c = tokens x k x imbalance copies): the permuted tokens sent
    and received (gathered over etp), the expert MLP's up-projection and activation outputs, the
    expert outputs to un-permute, and the fp32 router probabilities. Nothing under full
    recomputation (the layer's input is counted with the layer)."""
    e, h, f = bytes_per_element, model.hidden, model.expert_ffn_hidden
    gate = 2 if model.gated_mlp else 1
    copies = tokens * model.experts_per_token * imbalance
    kept = e * copies * (h * (2 + etp) + (gate + 1) * f) + 4.0 * tokens * model.experts  # fp32 probabilities
    return np.where(np.asarray(recompute) == Recompute.FULL, 0.0, kept)


@kept
def layers_in_flight(
    stage_layers: Number, pp: Number, vpp: Number, micro_batches: Number, schedule: Number, stage_index: Number
) -> Number:
    """Layer-micro-batches of activations that stage `stage_index` (holding `stage_layers`
    layers) keeps at its peak."""
    p, v, m, i = pp, vpp, micro_batches, stage_index
    per_stage = stage_layers
    gpipe = m * per_stage
    one_f_one_b = np.minimum(p - i, m) * per_stage
    # Megatron-LM interleaved warm-up: 2 (p - i - 1) + (v - 1) p chunk forwards, plus one.
    chunks = np.minimum(2 * (p - i - 1) + (v - 1) * p + 1, m * v)
    interleaved = chunks * stage_layers / v
    sched = np.asarray(schedule)
    # ZB-H1 keeps 1F1B's peak on the first stage (Qi et al. 2023 Sec. 3.1); the later stages hold
    # up to p micro-batches' inputs while their deferred weight gradients wait, still <= stage 0.
    zb_h1 = np.minimum(p, m) * per_stage
    return np.select(
        [sched == Schedule.GPIPE, sched == Schedule.INTERLEAVED, sched == Schedule.ZB_H1],
        [gpipe, interleaved, zb_h1],
        one_f_one_b,
    )


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes on one GPU (the fullest pipeline stage)."""

    # every property is a function of the same element's fields (`engines.distinct._lazy`)
    ELEMENTWISE_PROPERTIES: ClassVar[bool] = True

    weights_bytes: Number
    gradients_bytes: Number
    optimizer_bytes: Number
    activations_bytes: Number  # saved activations, the loss's logits, a layer's backward gradients
    reserved_bytes: Number  # CUDA context, library workspaces, NCCL's buffers
    buffers_bytes: Number = 0.0  # gradient copies and buckets, ZeRO-3's gathered units
    allocator_bytes: Number = 0.0  # what the caching allocator reserves but cannot hand out

    @property
    def total_bytes(self) -> Number:
        return (
            self.weights_bytes
            + self.gradients_bytes
            + self.optimizer_bytes
            + self.activations_bytes
            + self.buffers_bytes
            + self.allocator_bytes
            + self.reserved_bytes
        )

    def as_dict(self) -> dict[str, Number]:
        return {
            "weights": self.weights_bytes,
            "gradients": self.gradients_bytes,
            "optimizer": self.optimizer_bytes,
            "activations": self.activations_bytes,
            "buffers": self.buffers_bytes,
            "allocator": self.allocator_bytes,
            "reserved": self.reserved_bytes,
            "total": self.total_bytes,
        }


def zero_shards(dp: Number, zero_stage: Number) -> tuple[Number, Number, Number]:
    """Over how many ranks ZeRO shards the (weights, gradients, optimizer state): dp from stage
    3, 2 and 1 on, else 1 (Rajbhandari et al. 2020). Under hybrid sharding `dp` is the shard
    group (`Plan.zero_ranks`: FSDP HYBRID_SHARD keeps the whole state once per shard group)."""
    z = as_array(zero_stage)
    return ifelse(z >= 3, dp, 1), ifelse(z >= 2, dp, 1), ifelse(z >= 1, dp, 1)


def model_state_bytes(
    params: Number, dp: Number, zero_stage: Number, precision: str, reduce_bf16: Number = False
) -> tuple[Number, Number, Number]:
    """(weights, gradients, optimizer) bytes for `params` parameters under a ZeRO stage."""
    return sharded_state_bytes(params, zero_shards(dp, zero_stage), precision, reduce_bf16)


def sharded_state_bytes(
    params: Number, shards: tuple[Number, Number, Number], precision: str, reduce_bf16: Number = False
) -> tuple[Number, Number, Number]:
    """`model_state_bytes` with the ZeRO `shards` (`zero_shards`) already known (`reduce_bf16`:
    `grad_bytes_per_param`'s)."""
    w, g, o = shards
    weights = params * weight_bytes_per_param(precision) / w
    grads = params * grad_bytes_per_param(precision, reduce_bf16) / g
    optim = params * OPTIMIZER_BYTES_PER_PARAM / o
    return weights, grads, optim


# ---- What a training process holds beyond the model state and the saved activations ----------

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
# DeepSpeed ZeRO 1-2's reduction buckets: reduce_bucket_size 5e8 elements (zero/config.py
# default) of the 16-bit dtype, two of them with overlap_comm (stage_1_and_2.py setup_buckets).
DEEPSPEED_REDUCE_BUCKET_BYTES = 2 * 5e8 * 2.0
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
    `extra_groups`: NCCL communicators the stack creates beyond the plan's tp, cp, dp and pp ones
    (`physics.memory_runtime.stack_group_bytes`: "world", "tp_pp").
    `packed_qkv_mha`: without grouped-query attention nanotron splits the QKV output by views of one
    permuted copy (`qkv_states.view(...).permute(2, 1, 0, 3, 4).contiguous()`), so the query view
    FlashAttention saves keeps the whole packed buffer alive beside the concatenated key-value copy
    the rotary kernel works on: 2 more kv-widths per token (CausalSelfAttention.forward, training case).
    `step_grad_bytes_per_param`: what the optimizer step adds without ZeRO, when the activations
    are gone: DeepSpeed's FP16_Optimizer (runtime/fp16/fused_optimizer.py, step) makes an fp32 copy
    of every gradient and flattens them into one more (4 + 4).
    `ddp_bucket_bytes_per_param`: torch DDP's bucket copies of the gradients
    (gradient_as_bucket_view=False, the default), with dp > 1 and ZeRO below 3.
    `zero_bucket_bytes`: fixed reduction buckets with dp > 1 and ZeRO >= 1 (DeepSpeed).
    `zero3_reduce_bytes_per_param`: ZeRO-3's unsharded gradients of one unit waiting for their
    reduce-scatter: 16-bit (2), plus an fp32 copy (4) where the reduction runs in fp32.
    `fragmentation`: the caching allocator's share (`ALLOCATOR_FRAGMENTATION`; XLA assigns its
    buffers ahead of time: 0)."""

    logits_bytes_per_element: float
    sharded_fp32_params: bool = False
    grad_copy_bytes_per_param: float = 0.0
    step_grad_bytes_per_param: float = 0.0
    ddp_bucket_bytes_per_param: float = 0.0
    zero_bucket_bytes: float = 0.0
    zero3_reduce_bytes_per_param: float = 2.0
    zero1_gather_bytes_per_param: float = 0.0
    eager_glu: bool = False
    packed_qkv_mha: bool = False
    extra_groups: tuple[str, ...] = ()
    fragmentation: float = ALLOCATOR_FRAGMENTATION
    source: str = ""

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
        extra_groups=("world", "tp_pp"),
        source="nanotron fp32 logits (cast_to_fp32) and sharded_cross_entropy's out-of-place max subtraction; "
        "FP32GradientAccumulator after backward; torch DDP (trainer.py) with its default bucket copies; "
        "ZeroDistributedOptimizer's flattened all-gather; GLUActivation; packed QKV without GQA",
    ),
    "internevo": StackMemory(6.0, source="flash-attn's fused cross-entropy (in-place backward), counted as Megatron's"),
    "fsdp": _FSDP,
    "fsdp2": _FSDP,
    "torchtitan": StackMemory(
        12.0,
        sharded_fp32_params=True,
        eager_glu=True,
        zero3_reduce_bytes_per_param=6.0,
        source="torchtitan loss.py; FSDP2 with fp32 shards, reducing in fp32 (mixed_precision_reduce)",
    ),
    "torchtitan-compile": StackMemory(
        6.0,
        sharded_fp32_params=True,
        zero3_reduce_bytes_per_param=6.0,
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
        source="fp32 logits in the loss; FSDP2 with fp32 shards, reducing in fp32 (nemo_automodel/components/"
        "distributed/config.py FSDP2Config.mp_policy: reduce_dtype float32)",
    ),
    "maxtext": StackMemory(
        6.0, sharded_fp32_params=True, fragmentation=0.0, source="XLA: fused loss, buffers assigned at compile time"
    ),
    "paxml": StackMemory(
        6.0, sharded_fp32_params=True, fragmentation=0.0, source="XLA: fused loss, buffers assigned at compile time"
    ),
}


def stack_memory(framework: str) -> StackMemory:
    """The stack's memory entry; a framework without one (a user's own label) is priced as
    Megatron-Core, the default framework."""
    return STACKS.get(framework, _MEGATRON)


def logits_bytes(model: Model, batch: Number, tp: Number, stack: StackMemory) -> Number:
    """The loss's logits at their peak on the last stage: s b V / t elements at the stack's bytes."""
    return stack.logits_bytes_per_element * model.seq_len * batch * model.vocab / tp


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
