"""The embedding and the output layer of one micro-batch on one GPU, as `StageCost`s: the
vocab-parallel lookup with its TP reduction, and the final norm, output projection and loss with
the vocab-parallel cross-entropy's all-reduces (the first and last pipeline stages' own work)."""

from __future__ import annotations

import numpy as np

from shardwise.arrays import any_true, as_array
from shardwise.engines.costs import StageCost
from shardwise.engines.tp_overlap import (
    TpComm,
)
from shardwise.physics.compute import (
    BACKWARD_MEMORY_RATIO,
    attention_precision,
    memory_s,
)
from shardwise.physics.flops import (
    CROSS_ENTROPY_FP32_BYTES_PER_LOGIT,
    cross_entropy_bytes,
    logits_forward,
)
from shardwise.physics.linears import GemmTimes, linear_times
from shardwise.physics.microbatch import plan_accumulate_bytes
from shardwise.physics.stack import (
    EAGER_CROSS_ENTROPY_BYTES_PER_LOGIT,
)
from shardwise.specs import Scenario
from shardwise.specs._checks import Number

# Vocab-parallel cross-entropy all-reduces three fp32 values per token (max, sum of exps,
# target logit) across the TP group (Megatron-LM `_VocabParallelCrossEntropy`); the logits are
# cast to fp32 first (`VocabParallelCrossEntropy.calculate_logits_max`), so each value is 4 bytes
# (megatron/core/tensor_parallel/cross_entropy.py).
CROSS_ENTROPY_ALL_REDUCES = 3
CROSS_ENTROPY_VALUE_BYTES = 4.0
# Kernel launches charged to the loss: a project estimate of the kernels of that vocab-parallel
# cross-entropy (max, exp and sum, target logit, loss and its gradient; same file), not a count.
CROSS_ENTROPY_KERNELS = 4
# Kernel launches charged to the embedding's forward and, again, to its backward: a project
# estimate for Megatron-Core's `LanguageModelEmbedding` (word lookup, position add, layout copy,
# dropout; megatron/core/models/common/embeddings/language_model_embedding.py), not a count.
EMBEDDING_KERNELS = 2
# Serving under TP: the output layer is split over the vocabulary and every engine gathers the
# logits before sampling, in the output layer's 16 bits (TensorRT-LLM's PyTorch backend:
# `LMHead(..., tensor_parallel_mode=COLUMN, gather_output=True)` in the dtype of the checkpoint,
# tensorrt_llm/_torch/models/modeling_utils.py `DecoderModelForCausalLM`; vLLM `LogitsProcessor.
# _gather_logits`, a gather to rank 0 or an all-gather; SGLang's `LogitsProcessor`, an all-gather):
# b x vocab x 2 bytes a step, which does not shrink with the TP size (#37).
LOGITS_GATHER_BYTES = 2.0


def embedding_cost(scn: Scenario, comm: TpComm, q_len: Number | None = None) -> StageCost:
    """Vocab-parallel embedding lookup (+ learned positions) and its TP reduction; backward, the
    dense gradient table and the stack's add of it."""
    model, plan, gpu = scn.model, scn.plan, scn.cluster.gpu
    e = plan.bytes_per_element
    tokens = plan.micro_batch * (model.seq_len if q_len is None else q_len)
    act = e * tokens * model.hidden
    # lookup: read the rows, write the output (2 act); a learned position add reads two, writes one
    lookup = memory_s(2 * act + (3 * act if model.learned_positions else 0.0), gpu, kernels=EMBEDDING_KERNELS)
    # The lookup's gradient is a dense table (PyTorch's embedding_dense_backward: `at::zeros` of
    # vocab/t x h in 16 bits, then a scatter of the tokens' rows), which the stack then adds to
    # its accumulator outside any GEMM: e + the stack's unfused accumulation bytes per weight
    # (`physics.microbatch`: Megatron's main_grad.add_ 10, DeepSpeed bf16 18, fp16 6); into a
    # bf16 gradient buffer (`Plan.grad_reduce_bf16`) the add reads 2 + 2 and writes 2.
    grad_table = (e + plan_accumulate_bytes(plan)) * model.vocab
    grad_table = grad_table * model.hidden / plan.tp
    grad_table = np.where(np.asarray(plan.lora_rank) > 0, 0.0, grad_table)  # LoRA: frozen
    sp = np.asarray(plan.sequence_parallel, dtype=bool)
    reduce = np.where(sp, comm.reduce_scatter, comm.all_reduce)
    # With SP the backward of the forward reduce-scatter is an all-gather of the gradient.
    regather = np.where(sp, comm.all_gather, 0.0)
    return StageCost(lookup, memory_s(2 * act + grad_table, gpu, kernels=EMBEDDING_KERNELS), reduce, regather)


def head_forward_s(scn: Scenario, q_len: Number | None = None, weight_bytes: Number | None = None) -> Number:
    """The final norm and the output projection's forward, without a loss (inference): what
    `head_cost(..., loss=False)` computes, `q_len` tokens per sequence getting logits."""
    norm, out = _norm_and_logits(scn, q_len, weight_bytes, backward=False)
    return norm + out.forward_s


def head_inference_tp_s(scn: Scenario, comm: TpComm, logits_tokens: Number = 0.0) -> Number:
    """The output layer's TP communication without a loss: the all-gather of a sequence-parallel
    input, and the all-gather of the vocabulary-split logits of `logits_tokens` tokens that the
    serving engines sample from (`LOGITS_GATHER_BYTES` each per vocabulary entry); a group of one
    rank costs nothing."""
    sp = np.where(np.asarray(scn.plan.sequence_parallel, dtype=bool), comm.all_gather, 0.0)
    logits = LOGITS_GATHER_BYTES * np.asarray(logits_tokens, dtype=float) * scn.model.vocab
    return sp + np.where(logits > 0, comm.group.reduce_scatter(logits), 0.0)  # an all-gather: the same ring


def _norm_and_logits(
    scn: Scenario, q_len: Number | None, weight_bytes: Number | None, backward: bool
) -> tuple[Number, GemmTimes]:
    """The final norm's seconds and the output projection's GEMMs (the forward alone where
    `backward` is False)."""
    model, plan, gpu = scn.model, scn.plan, scn.cluster.gpu
    e, b, t = plan.bytes_per_element, plan.micro_batch, plan.tp
    sp = np.asarray(plan.sequence_parallel, dtype=bool)
    s_q = model.seq_len if q_len is None else q_len
    tokens = b * s_q
    norm = memory_s(2 * e * tokens * model.hidden * np.where(sp, 1.0 / t, 1.0), gpu)
    # The output layer stays in 16 bits in FP8 training (Megatron's output layer is not a
    # Transformer Engine module).
    out = linear_times(
        logits_forward(model, b, t, e, s_q, weight_bytes),
        gpu,
        attention_precision(plan.precision),
        plan.grad_accumulation_fusion,
        plan_accumulate_bytes(plan),
        backward=backward,
        cublas_before_11=plan.cublas_before_11,  # GPT-2's 50,257-wide head (`physics.gemm_align`)
    )
    return norm, out


def head_cost(
    scn: Scenario, comm: TpComm, q_len: Number | None = None, loss: bool = True, weight_bytes: Number | None = None
) -> StageCost:
    """Final norm, output projection (column-parallel over the vocabulary) and, when training,
    the loss; `q_len` tokens per sequence get logits (inference: the last one only)."""
    if not loss:
        tokens = scn.plan.micro_batch * (scn.model.seq_len if q_len is None else q_len)
        return StageCost(head_forward_s(scn, q_len, weight_bytes), 0.0, head_inference_tp_s(scn, comm, tokens), 0.0)
    model, plan = scn.model, scn.plan
    e, b, t = plan.bytes_per_element, plan.micro_batch, plan.tp
    sp = np.asarray(plan.sequence_parallel, dtype=bool)
    tokens = b * (model.seq_len if q_len is None else q_len)
    norm, out = _norm_and_logits(scn, q_len, weight_bytes, backward=True)
    logits = out.forward_s
    weight_grad = np.where(np.asarray(plan.lora_rank) > 0, 0.0, out.weight_grad_s)  # LoRA: frozen
    loss_bytes = cross_entropy_bytes(model, b, t, e)
    # eager: the fp32 log-softmax and its backward as separate kernels (`physics.stack`)
    eager_share = EAGER_CROSS_ENTROPY_BYTES_PER_LOGIT / (e + CROSS_ENTROPY_FP32_BYTES_PER_LOGIT)
    loss_bytes = loss_bytes * np.where(np.asarray(plan.eager_kernels, dtype=bool), eager_share, 1.0)
    # a stack's own count of the loss's bytes per logit (nanotron's, `physics.stack`), where it states one
    if any_true(as_array(plan.loss_bytes_per_logit) > 0):
        own = loss_bytes / (e + CROSS_ENTROPY_FP32_BYTES_PER_LOGIT) * plan.loss_bytes_per_logit
        loss_bytes = np.where(np.asarray(plan.loss_bytes_per_logit) > 0, own, loss_bytes)
    loss_s = memory_s(loss_bytes, scn.cluster.gpu, kernels=CROSS_ENTROPY_KERNELS)
    ce_comm = CROSS_ENTROPY_ALL_REDUCES * comm.group.all_reduce(CROSS_ENTROPY_VALUE_BYTES * tokens)
    gather = np.where(sp, comm.all_gather, 0.0)
    grad_in = np.where(sp, comm.reduce_scatter, comm.all_reduce)
    return StageCost(
        compute_forward_s=norm + logits + loss_s,
        compute_backward_s=BACKWARD_MEMORY_RATIO * norm + out.input_grad_s + weight_grad,
        tp_forward_s=gather + ce_comm,
        tp_backward_s=grad_in,
        weight_grad_s=weight_grad,
    )
