"""The stack's words in a training answer's header (`render.describe_scenario`): the execution flags
that are on, the attention kernel where it is not the fused default, and what HFU counts."""

from __future__ import annotations

from typing import Any

import numpy as np

# the attention kernels a plan names (`Plan.attention_kernel`) other than "fused" (Transformer Engine /
# cuDNN, the default), in words (`physics.attention_kernels`)
KERNEL_WORDS = {
    "flash2": "the flash-attn package's FlashAttention-2",
    "sdpa-flash2": "PyTorch SDPA's FlashAttention-2",
    "te-flash2": "Transformer Engine's FlashAttention-2 backend",
    "sdpa-mem-efficient": "PyTorch SDPA's memory-efficient kernel",
    "flash3": "FlashAttention-3",
    "flash4": "FlashAttention-4",
}
# how a run of a stack whose preset leaves fused attention off turns it on: Megatron-DeepSpeed's
# --use-flash-attn-v1/-v2/-triton are opt-in (megatron/arguments.py, all store_true), -v2 the one
# --flash-attention prices (flash2); Megatron-LM 2021/2022 ran before FlashAttention existed
UNFUSED_HINT = {
    "megatron-deepspeed": "--flash-attention for a run with --use-flash-attn-v2",
    "megatron-lm-2022": "the stack predates FlashAttention",
    "megatron-lm-2021": "the stack predates FlashAttention",
}


def _on(value: Any) -> bool:
    return bool(np.all(np.asarray(value)))


def stack_flags(p: Any) -> str:
    """The execution flags that are on, short."""
    names = {
        "async_tp_grad": "async TP grads",
        "tp_comm_overlap": "TP comm overlap",
        "overlap_grad_reduce": "overlapped grad reduce",
        "overlap_param_gather": "overlapped param gather",
        "grad_accumulation_fusion": "fused grad accumulation",
        "overlap_p2p": "overlapped p2p",
        "pipeline_sync": "p2p sync",
        "scatter_gather": "scatter/gather",
        "grad_reduce_bf16": "bf16 grad reduce",
        "zero1_grad_all_reduce": "ZeRO-1 grads all-reduced after backward",
        "scan_unpipelined": "XLA scan collectives unpipelined",
        "functional_a2a": "functional expert all-to-alls (saved by per-op AC)",
        "expandable_segments": "expandable segments",
        "partition_activations": "partitioned checkpoints",
        "hf_gpt2_ops": "transformers 4.12 eager GPT-2 ops",
        "cublas_before_11": "cuBLAS < 11 (unaligned GEMMs on CUDA cores)",
    }
    on = [label for k, label in names.items() if _on(getattr(p, k))]
    if bool(np.all(np.asarray(p.tp_comm_overlap))) and not bool(np.all(np.asarray(p.sequence_parallel))):
        on.remove("TP comm overlap")  # userbuffers need sequence parallelism
    if "bf16 grad reduce" in on and str(p.precision) == "fp16":  # the 16-bit parameter dtype: fp16 here
        on[on.index("bf16 grad reduce")] = "fp16 grad reduce"
    if "ZeRO-1 grads all-reduced after backward" in on and not bool(np.all(np.asarray(p.zero_stage) == 1)):
        on.remove("ZeRO-1 grads all-reduced after backward")  # a ZeRO-1 path only
    return ", ".join(on) or "no overlaps"


def attention_words(p: Any, gpu: Any) -> str:
    """', attention unfused: the s x s scores written (HINT)' where the plan's attention is not fused
    (review 47 #6: Megatron-DeepSpeed's default, most of its gap to Megatron-Core), ', attention:
    KERNEL' where a fused kernel other than the default one runs; "" for the default."""
    if not _on(p.flash_attention):
        from shardwise import presets
        from shardwise.errors import SpecError
        from shardwise.presets.stack_defaults import builtin_of

        try:
            stack, fused = (
                builtin_of(str(p.framework)),
                presets.framework(str(p.framework)).get("flash_attention", True),
            )
        except SpecError:  # a framework file no longer there: its own name
            stack, fused = str(p.framework), False
        if not bool(getattr(gpu, "flash_attention", True)):
            hint = "no fused kernel before sm80"
        elif fused:  # the stack's default is fused: --no-flash-attention asked for this
            hint = "as --no-flash-attention asks"
        else:
            hint = UNFUSED_HINT.get(stack, "--flash-attention for a fused kernel")
        return f", attention unfused: the s x s scores written ({hint})"
    kernel = str(p.attention_kernel)
    return f", attention: {KERNEL_WORDS[kernel]} ({kernel})" if kernel in KERNEL_WORDS else ""


def hfu_words(est: Any) -> str:
    """What HFU counts beyond the model's FLOPs (`TrainingEstimate.executed_flops_per_step`): the work
    recomputation repeats, and under an unfused kernel the whole s x s attention square (its causally
    masked half too); "nothing recomputed" where it counts neither (HFU equals MFU there)."""
    model = float(est.model_flops_per_step)
    repeated = float(est.hardware_flops_per_step) - model + float(est.attention_recompute_flops_per_step)
    counted = ["recomputation"] if repeated > 1e-9 * model else []
    if not _on(est.scenario.plan.flash_attention):
        counted.append("the whole s x s attention square of the unfused kernel")
    return f"counts {' and '.join(counted)}" if counted else "nothing recomputed"
