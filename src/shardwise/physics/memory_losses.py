"""The loss kernels a plan can name beside its stack's own loss (`Plan.loss_kernel`): the bytes a
logit each keeps at the loss's peak and saved for the backward pass; split out of
`physics.memory_stacks`, which applies them (`stack_memory`) and re-exports these names.

A named kernel is the one the run's loss uses, so its bytes replace the stack's own whatever that
keeps: "te" 2 (below every stack's), "eager-bf16" 8 at the peak and 2 saved, also on a stack whose
own loss is fused and keeps fewer (Megatron-LM's 6: a run that names an eager loss does not run
the fused one), "eager-bf16-freed" 6 (the same loss, its logits freed before the backward pass),
"compiled" 6 (the fp32 loss compiled alone, the model eager). Emitters whose tool cannot run the
named kernel refuse it (`emit`).
"""

from __future__ import annotations

# Transformer Engine's parallel_cross_entropy (transformer_engine/pytorch/cross_entropy.py and
# triton/cross_entropy.py, CrossEntropyFunction; Megatron-Core's cross_entropy_loss_fusion with
# cross_entropy_fusion_impl="te"): the Triton kernels read the 16-bit logits in fp32 registers, keep
# 3 fp32 values per token (max, sum, the target's logit: 12 B against V logits, left out) and write
# the gradient in place into the logits' own buffer in the backward pass: 2 bytes a logit, the
# logits themselves.
TE_CROSS_ENTROPY_LOGIT_BYTES = 2.0
# Eager cross-entropy on 16-bit logits, no fp32 cast (torch.nn.CrossEntropyLoss / F.cross_entropy on the
# logits a bf16 model returns: Modalities' CLMCrossEntropyLoss, src/modalities/loss_functions.py at
# 8a9b6617, under its BF_16 FSDP MixedPrecision, running_env/env_utils.py; NeMo Automodel's
# MaskedCrossEntropy with `fp32_upcast: false`, nemo_automodel/components/loss/masked_ce.py, as its
# benchmark configs set it): the bf16 logits, which the caller holds through the backward pass (2),
# log_softmax's bf16 output, saved (2), and in the backward pass the gradients of that output and of
# its input (2 + 2): 8 at the backward's start where the fp32 cast makes it 12; saved: the output, 2.
EAGER_BF16_LOGIT_BYTES = 8.0
EAGER_BF16_SAVED_LOGIT_BYTES = 2.0
# The same eager loss where the caller drops the logits before the backward pass: a PyTorch Lightning
# `training_step` that returns the loss alone (hpcaitech/ColossalAI-Pytorch-lightning benchmark/gpt/
# model.py GPTLitModule.training_step @6a82b801: `logits = self.model(...)`, `loss = self.criterion(logits,
# input_ids)`, `return loss`; Lightning runs the backward on the returned loss after the step returns, so
# the local `logits` is gone), with the shift of GPTLMLoss (same file: `logits[..., :-1, :].contiguous()`,
# a copy). Forward peak: the logits (2), the shifted copy (2) and log_softmax's output (2); log_softmax
# saves its output, not its input, so the copy is freed when the loss returns. Backward peak: the saved
# output (2), NLL's gradient of it (2) and LogSoftmaxBackward's gradient of its input (2); the slice's
# backward then writes a zero-filled full-size gradient (2) beside that one (4). 6 bytes a logit at the
# peak against 8 where the caller holds the logits; saved: the output, 2.
EAGER_BF16_FREED_LOGIT_BYTES = 6.0

# PyTorch's fp32 cross-entropy (`F.cross_entropy(logits.float())`) compiled with torch.compile on its own,
# the model left eager: torchtitan's compile.components "loss" (torchtitan/components/loss.py
# build_cross_entropy_loss at 82a9530f6, `torch.compile(loss_fn)` when "loss" is in the components; the
# DeepSeek-V3 16B config of that commit compiles the loss alone). Inductor fuses the cast, log-softmax and
# NLL and their backward, so the fp32 copies do not sit beside the logits: the 16-bit logits and one fp32
# buffer, 6 at the peak, as the torchtitan-compile stack's compiled loss (`STACKS`); saved: the stack's.
COMPILED_LOSS_LOGIT_BYTES = 6.0

# kernel -> (bytes a logit at the loss's peak, bytes a logit saved for the backward pass; None:
# the stack's own saved bytes, as the "te" option has always been priced)
LOSS_KERNEL_LOGIT_BYTES: dict[str, tuple[float, float | None]] = {
    "te": (TE_CROSS_ENTROPY_LOGIT_BYTES, None),
    "eager-bf16": (EAGER_BF16_LOGIT_BYTES, EAGER_BF16_SAVED_LOGIT_BYTES),
    "eager-bf16-freed": (EAGER_BF16_FREED_LOGIT_BYTES, EAGER_BF16_SAVED_LOGIT_BYTES),
    "compiled": (COMPILED_LOSS_LOGIT_BYTES, None),
}

# InternEvo's training metric (internlm/model/metrics.py AccPerplex.update at tag v0.2.1dev20231121,
# commit eba2b85, as at 7776693 of 2023-11-21; review 52: not at 34fc28d, cited here before),
# which train.py's SchedulerMetricHook runs on every training micro-batch's output before the loss
# (`post_helper_func`; its `skip` stops the timers alone): the last stage's logits, cast to fp32 by
# NaiveAMPModel (`output_to_fp32`, 4), `logits.detach().clone()` (4), the out-of-place
# `shift_logits.sub(logits_max)` (4) and `torch.exp(shift_logits)` before its sum (4): 16 bytes a
# logit at its peak, beside the activations the micro-batch has saved. The loss after it
# (flash-attn's CrossEntropyLoss with inplace_backward on those fp32 logits, then the cast's 16-bit
# gradient) keeps 6. Later InternEvo keeps 8: commit 220953d (2023-12-29, "remove redundant cuda memory
# in metric calculations", first in v0.2.1dev20240102) drops the clone and runs `torch.exp_` in place
# (4 + 4); the internevo preset prices the published table's version (its source), 16.
INTERNEVO_METRIC_LOGIT_BYTES = 16.0
