"""The attention kernel a serving engine runs on its GPU, as `engines.serving.serving_scenario`
prices it. Where the GPU runs the fused kernels (`Gpu.flash_attention`: Ampere and later, AMD) every
engine's prefill and decode attention is one fused kernel that never writes the scores (FlashAttention
-2/3, FlashInfer, TensorRT-LLM's FMHA and XQA, vLLM's and SGLang's paged kernels, llama.cpp's own), at
the fused kernel's efficiency (`physics.attention_kernels.FLASH_RELATIVE_EFFICIENCY`), but for
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
"""

from __future__ import annotations

from typing import Any

from shardwise.engines.engine_formats import check_engine_gpu

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


def serving_attention(engine: str, gpu: Any) -> dict[str, Any]:
    """The plan fields that price `engine`'s attention on `gpu` (module docstring); `engine` must run
    on `gpu` (a SpecError otherwise, `engines.engine_formats.check_engine_gpu`)."""
    check_engine_gpu(engine, gpu, "serving: engine")
    if engine in UNFUSED_EVERYWHERE:  # FasterTransformer's context attention (module docstring)
        return dict(NO_FLASH[engine])
    if bool(getattr(gpu, "flash_attention", True)):
        return {"flash_attention": True}
    # vLLM's prefill context parallelism all-gathers the keys and values (`engines.forward`), so no
    # PyTorch ring bookkeeping goes with the memory-efficient kernel (`physics.compute.layer_times`)
    fields = {"flash_attention": True, **NO_FLASH[engine]}
    return {**fields, "cp_comm": "all_gather"} if "attention_kernel" in fields else fields


def serving_attention_note(engine: str, gpu: Any) -> str | None:
    """A note where the engine's attention on `gpu` is not the fused kernel other GPUs run, else None."""
    if engine in UNFUSED_EVERYWHERE and bool(getattr(gpu, "flash_attention", True)):
        return (
            f"{engine}'s context attention is {NO_FLASH_TEXT[engine]}, as its GPT layers run it unless "
            "FMHA_ENABLE=ON is set (5.2 and 5.3 fused it by default)"
        )
    if bool(getattr(gpu, "flash_attention", True)) or engine not in NO_FLASH_TEXT:
        return None
    return f"{gpu.name} runs no FlashAttention (it needs SM 8.0): {engine}'s attention is {NO_FLASH_TEXT[engine]}"
