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


def _flash34(values: dict[str, Any], framework: str, gpu: Any) -> tuple[str, str, str]:
    """(kernel, the stack's name, how it was asked for) where FlashAttention-3/4 is asked for, by the flag or
    the framework file, on a GPU that runs fused kernels; empty strings otherwise."""
    from shardwise import presets
    from shardwise.physics.attention_flash34 import FLASH34_KERNELS

    asked = values.get("attention_kernel")
    if values.get("flash_attention") is False or not bool(getattr(gpu, "flash_attention", True)):
        return "", "", ""
    stack = presets.framework(framework)
    kernel = asked or stack.get("attention_kernel", "fused")
    if kernel not in FLASH34_KERNELS:
        return "", "", ""
    flag = f"--attention-kernel {kernel}" if asked else f"framework {framework!r}: attention_kernel {kernel}"
    return kernel, str(stack.get("framework", framework)), flag


def check_arch(values: dict[str, Any], framework: str, gpu: Any) -> None:
    """FlashAttention-3/4 where its code does not run for training (`physics.attention_flash34.refusal`:
    FA3 on Blackwell or through Hugging Face below sm90, FA4's forward-only sm80 path, AMD) is refused in
    one line: the kernel asked for, else the framework file's, whose own field is named (sweep, crossover
    and sensitivity have no --attention-kernel); not with --no-flash-attention, nor before sm80, where
    `changes` says what runs instead."""
    from shardwise.physics.attention_flash34 import alternatives, refusal

    kernel, stack, flag = _flash34(values, framework, gpu)
    why = refusal(gpu, kernel, stack) if kernel else ""
    if why:
        kernels = alternatives(gpu)
        use = (
            f"use --attention-kernel {' or '.join(kernels)}"
            if flag.startswith("--")
            else f"set attention_kernel: {' or '.join(kernels)} in the framework file"
        )
        raise SpecError(f"{flag}: {why}; {use}")


def flash2_swap(values: dict[str, Any], framework: str, gpu: Any, notes: list[str] | None) -> dict[str, Any]:
    """{"attention_kernel": "flash2"} with a note where FlashAttention-3/4's package runs FlashAttention-2's
    code on `gpu` (`physics.attention_flash34.as_flash2`: FA4 on sm120, FA3 called directly on sm80-89)."""
    from shardwise.physics.attention_flash34 import as_flash2

    kernel, stack, flag = _flash34(values, framework, gpu)
    cp = values.get("cp")
    cp = 1 if cp is None else cp
    try:  # one value, or a sweep's several
        cps = [float(c) for c in cp]
    except TypeError:
        cps = [float(cp)]
    if kernel and notes is not None and max(cps) > 1:
        notes.append(
            f"{flag} with cp > 1: neither flash-attn package has a context-parallel ring of its own; Transformer "
            "Engine's ring is priced (its P2P exchange, each step's attention at this kernel's speed)"
        )
    why = as_flash2(gpu, kernel, stack) if kernel else ""
    if not why:
        return {}
    if notes is not None:
        notes.append(f"{flag} on {gpu.name}: {why} (as --attention-kernel flash2)")
    return {"attention_kernel": "flash2"}


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
        return flash2_swap(values, framework, gpu, notes)
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
