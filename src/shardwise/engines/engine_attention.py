"""The attention kernel a serving engine runs on its GPU, as `engines.serving.serving_scenario`
prices it. Where the GPU runs the fused kernels (`Gpu.flash_attention`: Ampere and later, AMD) every
engine's prefill and decode attention is one fused kernel that never writes the scores (FlashAttention
-2/3, FlashInfer, TensorRT-LLM's FMHA and XQA, vLLM's and SGLang's paged kernels, llama.cpp's own), at
the speed of the kernel the engine picks there (`ENGINE_KERNELS`, below), but for
FasterTransformer, whose GPT context attention runs unfused on every GPU as it is built and run by
default (below). Before Ampere (V100, SM 7.0) none of FlashAttention-2, FlashInfer or cuDNN's fused
attention runs, and each engine runs what its code runs there:

- vLLM 0.34 (V1): its CUDA platform tries FLASH_ATTN, FLASHINFER, TRITON_ATTN, FLEX_ATTENTION in turn
  (vllm/platforms/cuda.py `_get_backend_priorities`); FlashAttention's backend needs SM 8.0
  (`supports_compute_capability`: capability >= 8.0) and FlashInfer's SM 7.5, so a V100 gets
  TRITON_ATTN, whose `unified_attention` Triton kernel takes prompts and decodes alike, paged, fused
  (no scores written; vllm/v1/attention/backends/triton_attn.py). vLLM V0 ran xFormers'
  memory-efficient CUTLASS kernels for prompts there (its XFORMERS backend) and its own
  paged-attention CUDA kernel for decodes: fused too.
- SGLang does not run on a V100 (its model runner: "SGLang only supports sm75 and above.";
  `engines.engine_formats.check_engine_gpu` refuses it, review 42).
- Plain PyTorch (Hugging Face `generate`, attn_implementation "sdpa"): SDPA's memory-efficient backend,
  xFormers' CUTLASS kernels, from SM 5.0 (sdp_utils.cpp `check_mem_efficient_hardware_support`), as
  `requests.attention` prices training there.
- FasterTransformer 5.x: its GPT context attention is unfused, a strided batched GEMM for Q K^T, a
  masked-softmax kernel and a second batched GEMM, the s x s scores written and read
  (src/fastertransformer/layers/attention_layers/GptContextAttentionLayer.cc, `forward`:
  `stridedBatchedGemm`, `invokeMaskedSoftMax`, `stridedBatchedGemm`), on every GPU (issue #37
  item 5): releases up to 5.1 (release/v5.1_tag, August 2022) have no fused path for it; 5.2 and
  5.3 (December 2022, January 2023) took TensorRT's fused causal kernels (fp16, SM 7.0-8.9, no SM 9.0
  cubins) by default; from NVIDIA/FasterTransformer@7921074 (February 2023, "set fmha ... as
  optional") to the archived head (df4a753) `getAttentionType` takes them only where the environment
  says FMHA_ENABLE=ON (src/fastertransformer/layers/attention_layers/BaseAttentionLayer.h;
  docs/gpt_guide.md "Inference Options": default "disabled"), a run-time variable, not a CMake
  option. The FasterTransformer rows here (kipply's GPT-13B on A100, 2022-03-30) predate 5.2: unfused.
  Its decoder's masked multi-head attention (`masked_multihead_attention`) is one kernel that reads
  each key and value once: a serving engine's one-token step is priced fused whatever its prompts run
  (`engines.costs.layer_cost`).
- llama.cpp: its own FlashAttention kernels run on Volta (ggml-cuda fattn.cu picks its WMMA kernel
  there): the fused price, unchanged.
- TensorRT-LLM 1.x does not run on Volta at all (`engines.engine_formats.check_engine_gpu`).

Price of the fused fallbacks (vLLM's Triton kernel, SDPA's memory-efficient kernel):
the memory-efficient kernel's fraction of FlashAttention-2's speed
(`physics.attention_kernels.MEM_EFFICIENT_FORWARD_FRACTION`, 0.48, from A100 figures: no V100 figure
for any of these kernels was found), through the plan's `attention_kernel` "sdpa-mem-efficient".
Decode attention is bound by reading the KV cache, which the kernel's compute speed barely moves;
prompts' attention is where the fallback costs.

From Ampere on, each engine's attention kernel by GPU architecture (`ENGINE_KERNELS`, issue #37 item 5),
priced at that kernel's own speed and ramp (`physics.attention_flash34` for FlashAttention-3/4,
`physics.attention_kernels` for FlashAttention-2 and the fused kernels), prompts and decodes alike
(decodes stay bound by the KV cache's bytes, which no kernel changes):
- vLLM (V1): its CUDA platform ranks FLASH_ATTN first except on SM 10.x, where FLASHINFER leads
  (vllm/platforms/cuda.py `_get_backend_priorities`, vllm-project/vllm@1c0d9ec); its FLASH_ATTN backend
  runs vllm-flash-attn's FlashAttention-3 on SM 9.0 and FlashAttention-2 elsewhere
  (`get_flash_attn_version` in vllm/v1/attention/backends/fa_utils.py, earlier vllm/attention/utils/
  fa_utils.py: 3 where the capability's major is 9 and FA3 is built, else 2):
  Hopper "flash3", Ampere / Ada / SM 12.0 "flash2"; on B200-class Blackwell FlashInfer's prefill and
  decode run TensorRT-LLM's generated kernels (trtllm-gen, `use_trtllm_attention` in
  vllm/utils/flashinfer.py): "fused", TensorRT-LLM's own price. Its fp8 KV cache on Ampere runs
  FlashInfer (docs/serving.md), whose sm80 prefill is FlashAttention-2's design: "flash2" too.
- SGLang: `_handle_attention_backend_compatibility` in python/sglang/srt/server_args.py (read at
  sgl-project/sglang@469c63e, after 0.5.6.post2; the rule's comment block dates from 0.5.x): models
  without latent attention get "fa3" on Hopper (CUDA >= 12.3, no speculative top-k > 1): "flash3";
  "trtllm_mha" on SM 10.0 / 10.3: "fused"; FlashInfer elsewhere (Ampere, Ada, SM 12.0; its sm80
  prefill is FlashAttention-2's design): "flash2".
- TensorRT-LLM (its own FMHA / XQA), llama.cpp (its own kernels), plain PyTorch: "fused", unchanged.
- AMD GPUs (vLLM's ROCm and AITER backends, SGLang's "aiter"): "fused", unchanged.
`ServingWorkload.attention_kernel` (`serve --attention-kernel`) replaces the engine's kernel for vLLM and
SGLang (their --attention-backend), refused in one line where the GPU cannot run it.
"""

from __future__ import annotations

from typing import Any

from shardwise.engines.engine_formats import check_engine_gpu
from shardwise.errors import SpecError

# each engine's attention kernel by the GPU's architecture (`Gpu.gemm_kernels`; "generic": Ampere, Ada,
# SM 12.0) on NVIDIA GPUs that run fused attention (module docstring); other engines and AMD: "fused"
ENGINE_KERNELS: dict[str, dict[str, str]] = {
    "vllm": {"sm90": "flash3", "sm100": "fused", "generic": "flash2"},
    "sglang": {"sm90": "flash3", "sm100": "fused", "generic": "flash2"},
}
# where each engine's choice was read (module docstring), for `presets show ENGINE`
KERNEL_SOURCES = {
    "vllm": "vllm/platforms/cuda.py _get_backend_priorities (vllm-project/vllm@1c0d9ec); "
    "vllm/v1/attention/backends/fa_utils.py get_flash_attn_version",
    "sglang": "python/sglang/srt/server_args.py _handle_attention_backend_compatibility (sgl-project/sglang@469c63e)",
}
ARCH_LABELS = {"sm90": "Hopper (sm90)", "sm100": "B200-class Blackwell (sm100)", "generic": "Ampere, Ada, SM 12.0"}
# the kernels `serve --attention-kernel` takes, and the engines it applies to (their --attention-backend)
SERVING_KERNELS = ("fused", "flash2", "flash3", "flash4")
KERNEL_ENGINES = ("vllm", "sglang")

# what each engine runs where no fused FlashAttention-class kernel does (module docstring): plan fields
NO_FLASH: dict[str, dict[str, Any]] = {
    "vllm": {"attention_kernel": "sdpa-mem-efficient"},
    "sglang": {},  # refused before (`check_engine_gpu`)
    "pytorch": {"attention_kernel": "sdpa-mem-efficient"},
    "fastertransformer": {"flash_attention": False},
    "llama.cpp": {},
    "tensorrt-llm": {},  # refused before (`check_engine_gpu`)
}
# what each runs there, said in a note (`serving_attention_note`)
NO_FLASH_TEXT = {
    "vllm": "its Triton backend (TRITON_ATTN), priced as a fused kernel at SDPA's memory-efficient speed",
    "pytorch": "PyTorch SDPA's memory-efficient kernel",
    "fastertransformer": "unfused (batched GEMMs and a softmax kernel, the scores written)",
}  # llama.cpp: its own FlashAttention kernels run there (WMMA on Volta), priced as elsewhere: no note
# the engines whose prompts' attention is unfused on every GPU, fused kernels or not (module docstring)
UNFUSED_EVERYWHERE = frozenset({"fastertransformer"})


def engine_kernel(engine: str, gpu: Any) -> str:
    """The attention kernel `engine` runs on `gpu` where it runs fused attention (`ENGINE_KERNELS`)."""
    if getattr(gpu, "vendor", "nvidia") != "nvidia":
        return "fused"
    return ENGINE_KERNELS.get(engine, {}).get(str(getattr(gpu, "gemm_kernels", "generic")), "fused")


def kernels_by_arch(engine: str) -> dict[str, str]:
    """The engine's attention kernel per architecture in words, with its source (`presets show ENGINE`)."""
    if engine in UNFUSED_EVERYWHERE:
        return {"every GPU": "unfused context attention (FMHA_ENABLE unset), fused decodes"}
    if engine not in ENGINE_KERNELS:
        return {"every GPU": "its own fused kernels (priced fused)"}
    out = {ARCH_LABELS[arch]: kernel for arch, kernel in ENGINE_KERNELS[engine].items()}
    return {**out, "AMD": "fused", "read in": KERNEL_SOURCES[engine]}


def check_serving_kernel(engine: str, gpu: Any, kernel: str | None, emit: str | None = None) -> None:
    """`kernel` asked for (None: the engine's) in one clear line where the engine or the GPU cannot run it,
    or where an --emit server would run another (its launch line names no attention backend)."""
    if kernel is None:
        return
    flag = f"--attention-kernel {kernel}"
    if kernel not in SERVING_KERNELS:
        raise SpecError(f"serving: attention_kernel {kernel!r} is not allowed; choose {', '.join(SERVING_KERNELS)}")
    if engine not in KERNEL_ENGINES:
        raise SpecError(f"{flag}: {engine} runs its own attention kernels; the flag picks vLLM's or SGLang's backend")
    if not bool(getattr(gpu, "flash_attention", True)):
        raise SpecError(f"{flag}: gpu {gpu.name!r} runs no FlashAttention (it needs SM 8.0); drop --attention-kernel")
    from shardwise.physics.attention_flash34 import FLASH34_KERNELS, refusal

    if kernel in FLASH34_KERNELS and not _as_flash2(gpu, kernel) and (why := refusal(gpu, kernel)):
        raise SpecError(f"{flag}: {why}; use --attention-kernel flash2 or fused")
    if emit is not None and kernel != (own := engine_kernel(engine, gpu)):
        raise SpecError(f"{flag}: the --emit {emit} server runs {engine}'s own ({own} here); drop one of them")


def serving_attention(engine: str, gpu: Any, kernel: str | None = None) -> dict[str, Any]:
    """The plan fields that price `engine`'s attention on `gpu` (module docstring): its own kernel
    (`engine_kernel`) or `kernel` where given (`check_serving_kernel`); `engine` must run on `gpu`
    (a SpecError otherwise, `engines.engine_formats.check_engine_gpu`)."""
    check_engine_gpu(engine, gpu, "serving: engine")
    check_serving_kernel(engine, gpu, kernel)
    if engine in UNFUSED_EVERYWHERE:  # FasterTransformer's context attention (module docstring)
        return dict(NO_FLASH[engine])
    if bool(getattr(gpu, "flash_attention", True)):
        fields: dict[str, Any] = {"flash_attention": True}
        chosen = "flash2" if kernel and _as_flash2(gpu, kernel) else (kernel or engine_kernel(engine, gpu))
        if chosen != "fused":  # gathered keys and values, no PyTorch ring bookkeeping (below)
            fields.update(attention_kernel=chosen, cp_comm="all_gather")
        return fields
    # vLLM's prefill context parallelism all-gathers the keys and values (`engines.forward`), so no
    # PyTorch ring bookkeeping goes with the memory-efficient kernel (`physics.compute.layer_times`)
    fields = {"flash_attention": True, **NO_FLASH[engine]}
    return {**fields, "cp_comm": "all_gather"} if "attention_kernel" in fields else fields


def _as_flash2(gpu: Any, kernel: str) -> str:
    """Why an asked FlashAttention-3/4 runs FlashAttention-2's design on `gpu` in serving, which runs the
    forward only (`physics.attention_flash34.as_flash2`; vLLM's get_flash_attn_version takes FA2 off
    Hopper): priced as flash2, with a note. Empty: it does not."""
    from shardwise.physics.attention_flash34 import FLASH34_KERNELS, as_flash2

    return as_flash2(gpu, kernel, forward_only=True) if kernel in FLASH34_KERNELS else ""


# vLLM's FlashAttention backend off Hopper: vllm/attention/utils/fa_utils.py `get_flash_attn_version`
# defaults to FA3 only where the compute capability's major is 9, and a VLLM_FLASH_ATTN_VERSION=3 asked
# elsewhere falls back to FA2 (its vllm_flash_attn build reports FA3 unsupported there)
VLLM_FA2_FALLBACK = (
    "vLLM's FlashAttention backend runs FA2 there (fa_utils.get_flash_attn_version takes FA3 only on "
    "compute capability 9.x and falls back to FA2 when VLLM_FLASH_ATTN_VERSION=3 is asked elsewhere)"
)


def serving_attention_note(engine: str, gpu: Any, kernel: str | None = None) -> str | None:
    """A note where the engine's attention on `gpu` is not the fused kernel other GPUs run, or where an
    asked FlashAttention-3/4 runs FlashAttention-2's design (`_as_flash2`), else None."""
    if kernel and (why := _as_flash2(gpu, kernel)):
        if engine == "vllm" and kernel == "flash3":  # vLLM's own reason, not the training stacks' (review 50 #12)
            why = VLLM_FA2_FALLBACK
        return f"--attention-kernel {kernel} on {gpu.name}: {why}; priced as flash2"
    if engine in UNFUSED_EVERYWHERE and bool(getattr(gpu, "flash_attention", True)):
        return (
            f"{engine}'s context attention is {NO_FLASH_TEXT[engine]}, as its GPT layers run it unless "
            "FMHA_ENABLE=ON is set (5.2 and 5.3 fused it by default)"
        )
    if bool(getattr(gpu, "flash_attention", True)) or engine not in NO_FLASH_TEXT:
        return None
    return f"{gpu.name} runs no FlashAttention (it needs SM 8.0): {engine}'s attention is {NO_FLASH_TEXT[engine]}"
