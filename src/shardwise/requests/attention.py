"""The attention a stack runs on its GPU: before Ampere (`Gpu.flash_attention` false: V100, sm70) none
of the fused kernels the stacks ask for runs -- FlashAttention-2 and 3, PyTorch SDPA's flash backend,
cuDNN's fused attention -- so each stack falls back to what its code runs there, priced with a note;
asking for a fused kernel there (--flash-attention, --attention-kernel) is refused in one line, as
bf16 is on such a GPU (`requests.precision`).

What each stack runs before sm80:
- PyTorch SDPA (the "sdpa-flash2" stacks: FSDP, FSDP2, torchtitan, Hugging Face Transformers, NeMo
  Automodel, Modalities) dispatches to its memory-efficient backend, xFormers' CUTLASS kernels, which
  run from sm50 (pytorch/pytorch aten/src/ATen/native/transformers/cuda/sdp_utils.cpp:
  check_flash_attention_hardware_support sm80+, check_mem_efficient_hardware_support sm50+):
  "sdpa-mem-efficient", fused, no s x s scores written.
- DeepSpeed on a Hugging Face model: Transformers' default attn_implementation is "sdpa" (its
  flash_attention_2 raises "FlashAttention only supports Ampere GPUs or newer", flash-attn's
  csrc/flash_attn/flash_api.cpp): the same SDPA fallback (`SDPA_FALLBACK_STACKS`).
- Megatron-Core and NeMo (Transformer Engine): get_attention_backend disables FlashAttention and
  FusedAttention below sm80 ("as it requires compute capability sm80+", transformer_engine/pytorch/
  attention/dot_product_attention/utils.py) and runs UnfusedDotProductAttention: the scores written
  and a softmax kernel, as --no-flash-attention prices.
- Every other stack: its non-flash path, unfused likewise (Megatron-DeepSpeed's CoreAttention with
  FusedScaleMaskSoftmax, its --use-flash-attn flags being opt-in and off by default; flash-attn's own
  trainers and nanotron import flash-attn and would not start: priced unfused, not refused).
"""

from __future__ import annotations

from typing import Any

from shardwise.errors import SpecError

# the stacks (framework presets) whose model runs PyTorch SDPA though their preset names flash-attn's
# kernel: DeepSpeed on Hugging Face models (Transformers' default attn_implementation "sdpa")
SDPA_FALLBACK_STACKS = ("deepspeed",)
MEM_EFFICIENT = "sdpa-mem-efficient"
WHY = "FlashAttention-2/3, SDPA's flash backend and cuDNN's fused attention need compute capability 8.0+"


def fallback_kernel(framework: str, kernel: str) -> str | None:
    """What `framework` (its preset's attention `kernel`) runs where no fused kernel does: SDPA's
    memory-efficient backend, or None for the unfused path (the scores written)."""
    return MEM_EFFICIENT if kernel == "sdpa-flash2" or framework in SDPA_FALLBACK_STACKS else None


def check_arch(values: dict[str, Any], framework: str, gpu: Any) -> None:
    """FlashAttention-3 off Hopper and FlashAttention-4 off Hopper and data-centre Blackwell are refused
    in one line, as their builds refuse them (`physics.attention_flash34.refusal`): the kernel asked
    for, else the framework preset's; not with --no-flash-attention, nor before sm80, where `changes`
    says what runs instead."""
    from shardwise import presets
    from shardwise.physics.attention_flash34 import FLASH34_KERNELS, refusal

    asked = values.get("attention_kernel")
    if values.get("flash_attention") is False or not bool(getattr(gpu, "flash_attention", True)):
        return
    if asked is not None and asked not in FLASH34_KERNELS:
        return
    kernel = asked or presets.framework(framework).get("attention_kernel", "fused")
    why = refusal(gpu, kernel) if kernel in FLASH34_KERNELS else ""
    if why:
        flag = f"--attention-kernel {kernel}" if asked else f"framework {framework!r}: attention_kernel {kernel}"
        raise SpecError(f"{flag}: {why}; use --attention-kernel flash2 or fused")


def changes(values: dict[str, Any], gpu: Any, notes: list[str] | None) -> dict[str, Any]:
    """The request fields to change so that the attention priced is what runs on `gpu`: none where
    the GPU runs the fused kernels, the stack asks for none, or SDPA's memory-efficient kernel was
    named; else the stack's fallback (`fallback_kernel`), said in a note. A fused kernel asked for on
    such a GPU is refused."""
    from shardwise import presets

    framework = values.get("framework") or "megatron-core"
    asked_flash, asked_kernel = values.get("flash_attention"), values.get("attention_kernel")
    check_arch(values, framework, gpu)
    if bool(getattr(gpu, "flash_attention", True)):
        return {}
    stack = presets.framework(framework)
    if asked_kernel == MEM_EFFICIENT or asked_flash is False:
        return {}
    if asked_flash is None and not stack.get("flash_attention", True):  # the stack's default is unfused
        return {}
    kernel = asked_kernel or stack.get("attention_kernel", "fused")
    fallback = fallback_kernel(str(stack.get("framework", framework)), kernel)
    if asked_flash or asked_kernel is not None:
        flag = f"--attention-kernel {asked_kernel}" if asked_kernel is not None else "--flash-attention"
        use = "--no-flash-attention" + (f" or --attention-kernel {MEM_EFFICIENT}" if fallback else "")
        raise SpecError(f"{flag}: gpu {gpu.name!r} cannot run it ({WHY}); use {use}")
    if notes is not None:
        runs = (
            "PyTorch SDPA's memory-efficient kernel, which SDPA runs there (as --attention-kernel sdpa-mem-efficient)"
            if fallback
            else "unfused, the scores written (as --no-flash-attention), the stack's path there"
        )
        notes.append(f"{gpu.name} runs no fused attention ({WHY}): {framework}'s attention priced {runs}")
    return {"attention_kernel": MEM_EFFICIENT} if fallback else {"flash_attention": False}
