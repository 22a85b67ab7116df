"""The GPUs a serving engine runs on, and the weight and KV-cache formats it runs on each: a GPU an
engine does not run on, or a format it cannot run there, is refused in one line naming the field,
the value and what that engine runs on that GPU (review 35: llama.cpp was priced in FP8,
TensorRT-LLM in Q4_K, NVFP4 weights on A100 under TensorRT-LLM and FP8 weights on V100 under vLLM,
all without a word). Checked where a request is built (`requests.serve.ServeRequest.setting`: the
command line, the Python API, the explorer) and, for the GPU, by `engines.serving.serving_scenario`
too; the engines price the formats they are given (`analyses.serving_pcie` prices ExLlamaV2's EXL2
weights as int4 with the plain-PyTorch preset's kernel counts).

A GPU's architecture is read from its preset (`architecture`): AMD's (`Gpu.vendor`) CDNA3 where it
has FP8 (MI300X, MI325X), else CDNA2 (MI250X); NVIDIA's Blackwell where it has FP4 tensor cores,
Hopper where it has FP8 ones and Hopper's GEMM kernels (`Gpu.gemm_kernels` sm90), Ada where it has
FP8 ones otherwise, Ampere where it has BF16 ones, else Volta (V100, SM 7.0). 16 bits always run
(bf16 where the GPU has BF16, fp16 everywhere).

GPUs:
- TensorRT-LLM 1.x: Ampere and later. Its supported hardware lists Blackwell, Hopper, Ada and
  Ampere (nvidia.github.io/TensorRT-LLM/supported-hardware.html; 0.18.2's support matrix the same
  three precisions rows without Volta), and the TensorRT it builds on dropped Volta in 10.5
  ("NVIDIA Volta support (GPUs with compute capability 7.0) has been removed starting with
  TensorRT 10.5", TensorRT 10.5.0 release notes; TensorRT-LLM 0.18 ships TensorRT 10.9). CUDA only:
  no AMD GPU.
- FasterTransformer 5.x: NVIDIA GPUs (CUDA only), Volta included (its kernels take sm70).
- vLLM, llama.cpp, plain PyTorch: NVIDIA and AMD (ROCm builds).
- SGLang: Turing (SM 7.5) and later, and AMD: its model runner refuses older GPUs ("SGLang only
  supports sm75 and above.", python/sglang/srt/model_executor/model_runner.py) and sgl-kernel
  ships no SM 7.0 kernels (sgl-project/sglang#24302), so no V100 (review 42).

Weights:
- TensorRT-LLM: FP8 on Ada and later, INT8 and INT4 on Ampere and later (its support matrix,
  nvidia.github.io/TensorRT-LLM/0.18.2/reference/support-matrix.html, "Precision": Ampere FP16,
  BF16, INT8, INT4; Ada and Hopper FP8 too); NVFP4 on Blackwell only (Model Optimizer's support
  matrix: FP4 weights and activations, "Blackwell and later"; TensorRT-LLM has no weight-only NVFP4
  path); MXFP4 (gpt-oss's experts) on Hopper and Blackwell, the GPUs its GPT-OSS deployment guides
  name (its MXFP4 MoE kernels: W4A16 on Hopper, W4A8 with FP8 or W4A4 on Blackwell; none for Ada).
  No GGUF block formats. Doubtful, kept (#37 item 5): the 1.x quantization page's hardware matrix
  (docs/source/features/quantization.md@09d4c79b, the PyTorch backend's recipes) marks W4A16
  AWQ/GPTQ on Hopper, Ada and Ampere but not Blackwell, MXFP4 on Blackwell alone, and lists no INT8
  weight recipe; its GPT-OSS guides run MXFP4 on Hopper, and the INT8/INT4 weight-only GEMMs of its
  TensorRT backend were not checked on Blackwell.
- vLLM (0.34) and SGLang on NVIDIA: FP8 weights with FP8 GEMMs on Ada and later, and weight-only FP8
  (W8A16, the Marlin kernel) on Ampere: vLLM `Fp8Config.get_min_capability` 80 and `use_marlin`
  where the GPU lacks FP8 (vllm/model_executor/layers/quantization/fp8.py; its docs' quantization
  hardware table: "Marlin (GPTQ/AWQ/FP8)" Ampere on, "FP8 (W8A8)" Ada on), SGLang's
  `Fp8LinearMethod` turns Marlin on by itself where the GPU has no FP8
  (`can_auto_enable_marlin_fp8`, python/sglang/srt/layers/quantization/fp8.py); none on V100. INT8
  and INT4 through GPTQ, which runs on Volta (vLLM's table); NVFP4 on non-Blackwell GPUs weight-only
  through FP4 Marlin (`is_fp4_marlin_supported`: SM 7.5 and up in vLLM's and SGLang's
  marlin_utils_fp4.py, 8.0 in older vLLM), MXFP4 from SM 8.0 (vLLM `Mxfp4Config.get_min_capability`
  80): neither on V100.
- vLLM on AMD (ROCm): its platform's `supported_quantization` (vllm/platforms/rocm.py: awq, gptq,
  fp8, compressed-tensors, fbgemm_fp8, gguf, quark, mxfp4, petit_nvfp4, ...): GPTQ/AWQ INT8 and
  INT4 on CDNA2 and CDNA3; FP8 (e4m3fnuz) only where the GPU has FP8 (CDNA3: MI300X, MI325X; Marlin
  is CUDA-only, so no weight-only FP8 on MI250X); NVFP4 through Petit's kernels and MXFP4 on CDNA3.
- SGLang on AMD: FP8 on CDNA3 (its MI300X DeepSeek-V3 path) and NVFP4 through Petit
  (`petit_nvfp4`); MXFP4 is registered on HIP only where `mxfp_supported` (gfx950, MI355X, no
  preset here: python/sglang/srt/layers/quantization/__init__.py); GPTQ/AWQ on ROCm is not
  established for it here: refused.
- llama.cpp: its GGUF types (q8_0, q4_0, q4_k, mxfp4) on any GPU its CUDA or HIP backend runs; no
  FP8, INT8/INT4 (GPTQ/AWQ) or NVFP4 weights.
- FasterTransformer 5.x and plain PyTorch: 16 bits only (their presets list no quantised format).

KV cache (`--kv-precision`; the KV cache is read every decode step, so its format is the engine's
attention kernel's, not the GEMMs'):
- TensorRT-LLM: FP8 on Ampere and later: its 1.x quantization page's "Hardware Support Matrix"
  marks "FP8 KV Cache" on Blackwell, Hopper, Ada and Ampere alike, where its FP8 GEMMs start at Ada
  (docs/source/features/quantization.md@09d4c79b; the 0.18.2 support matrix's Ampere precision row,
  which lacked FP8, is about the GEMMs); on Ampere its attention kernels widen the FP8 cache to 16
  bits in software (no FP8 conversion instruction before SM 8.9), priced as vLLM's below (#37 item
  5: it was refused on Ampere). INT8 on Ampere and later (its INT8 KV cache, kv_cache_quant_algo
  INT8), NVFP4 on Blackwell (kv_cache_quant_algo NVFP4, Blackwell's FP4 attention kernels).
- vLLM 0.34 (`--kv-cache-dtype fp8`): on NVIDIA from Ampere, on AMD on CDNA3 (e4m3fnuz, its ROCm
  attention backends). Its CUDA platform takes the first backend in FLASH_ATTN, FLASHINFER,
  TRITON_ATTN, FLEX_ATTENTION (Blackwell: FLASHINFER first) whose `validate_configuration` accepts
  the cache's dtype (vllm/platforms/cuda.py@002db495 `_get_backend_priorities`,
  `get_valid_backends`):
  FlashAttention reads an FP8 cache only as FA3, Hopper (`supports_kv_cache_dtype`:
  `flash_attn_supports_fp8()`), and FlashInfer reads fp8, fp8_e4m3 and fp8_e5m2 caches from SM 7.5
  (vllm/v1/attention/backends/flashinfer.py `supported_kv_cache_dtypes`, `supports_compute_capability`
  7.5-12.1; vLLM's table generated from them, docs/design/attention_backends.md@00139433 and
  docs.vllm.ai/en/v0.32.0/design/attention_backends: FLASHINFER "Native", KV dtypes
  fp8/fp8_e4m3/fp8_e5m2, "7.x-9.x"; FLASH_ATTN FA2 none), so an A100 with an FP8 cache runs
  FlashInfer (flashinfer-python is a requirement of vLLM's CUDA build, requirements/cuda.txt@009d5248)
  where it runs FA2 with a 16-bit one.
  FlashInfer's kernels load the cache's bytes and widen them to 16 bits in registers before the
  products, the query and the products staying 16-bit: in software below SM 9.0 (bit shifts and
  one half2 multiply per two values, `fast_dequant_f8f16x4`; the `cvt` instruction from SM 9.0 only,
  include/flashinfer/vec_dtypes.cuh@034fc189). So it is priced as on every GPU: one byte per cached
  element read (`physics.flops` `kv_bytes`), the attention's arithmetic at 16-bit speed; those ALU
  instructions are not priced (no public A100 figure of FlashInfer's FP8 against its 16-bit decode
  was found): a decode step's attention on Ampere may save less than half its cache reads' time.
  FlashInfer takes head sizes 64, 128 and 256 and ordinary attention (`get_supported_head_sizes`;
  its MLA backend runs from SM 10.0): another head size, or a latent-attention (MLA) model, gets
  TRITON_ATTN or TRITON_MLA, whose e4m3 conversion Triton refuses below SM 8.9 ("fp8e4nv data type
  is not supported on CUDA arch < 89", triton/language/semantic.py; vLLM's own kernel tests skip FP8
  caches below capability 89 as a "Triton limitation"), so there the FP8 cache stays refused on
  Ampere (`FLASHINFER_HEAD_SIZES`, read where the model is known).
- SGLang (`--kv-cache-dtype fp8_e4m3` / `fp8_e5m2`): the same GPUs. Its default attention backend
  off Hopper and Blackwell is FlashInfer ("FlashInfer (Default for Non-Hopper Machines, e.g., A100,
  A40)", docs/advanced_features/attention_backend.md@000984ed; server_args.py
  `_get_default_attn_backend`),
  whose FP8 cache its support matrix lists (docs.sglang.io advanced_features/attention_backend, MHA
  backends: FlashInfer "FP8 KV Cache" yes, Triton no): the FlashInfer kernels above, with the same
  head sizes on Ampere; FA3 on Hopper, TRT-LLM's on Blackwell; CDNA3 on AMD.
- llama.cpp (`--cache-type-k/-v`): q8_0 and q4_0 among its cache types (f32, f16, bf16, q8_0, q4_0,
  q4_1, iq4_nl, q5_0, q5_1: common/arg.cpp `kv_cache_types`), any GPU; not q4_k, FP8, INT4 or FP4.
- FasterTransformer 5.x, plain PyTorch: 16 bits.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shardwise.engines.engine_presets import ENGINES
from shardwise.errors import SpecError

ARCH_NAMES = {
    "volta": "Volta (SM 7.0)",
    "ampere": "Ampere (SM 8.0/8.6)",
    "ada": "Ada (SM 8.9)",
    "hopper": "Hopper (SM 9.0)",
    "blackwell": "Blackwell (SM 10.x/12.x)",
    "cdna2": "CDNA2 (MI250X)",
    "cdna3": "CDNA3 (MI300X, MI325X)",
}
NVIDIA = ("volta", "ampere", "ada", "hopper", "blackwell")
AMPERE_ON = ("ampere", "ada", "hopper", "blackwell")
ADA_ON = ("ada", "hopper", "blackwell")
HOPPER_ON = ("hopper", "blackwell")
BLACKWELL = ("blackwell",)
CDNA = ("cdna2", "cdna3")
CDNA3 = ("cdna3",)
ANY = NVIDIA + CDNA
AMPERE_CDNA3 = AMPERE_ON + CDNA3

# the GPUs each engine runs on at all (module docstring)
RUNS_ON: dict[str, tuple[str, ...]] = {
    "tensorrt-llm": AMPERE_ON,
    "vllm": ANY,
    "sglang": AMPERE_ON + CDNA,  # SM 7.5 and up (no Turing preset) and ROCm
    "llama.cpp": ANY,
    "fastertransformer": NVIDIA,
    "pytorch": ANY,
}
# the GPUs each engine runs each quantised weight format on (module docstring)
WEIGHTS: dict[str, dict[str, tuple[str, ...]]] = {
    "tensorrt-llm": {"fp8": ADA_ON, "int8": AMPERE_ON, "int4": AMPERE_ON, "nvfp4": BLACKWELL, "mxfp4": HOPPER_ON},
    "vllm": {"fp8": AMPERE_CDNA3, "int8": ANY, "int4": ANY, "nvfp4": AMPERE_CDNA3, "mxfp4": AMPERE_CDNA3},
    "sglang": {"fp8": AMPERE_CDNA3, "int8": NVIDIA, "int4": NVIDIA, "nvfp4": AMPERE_CDNA3, "mxfp4": AMPERE_ON},
    "llama.cpp": {"q8_0": ANY, "q4_0": ANY, "q4_k": ANY, "mxfp4": ANY},
    "fastertransformer": {},
    "pytorch": {},
}
# ... and each KV-cache format (module docstring)
KV_CACHE: dict[str, dict[str, tuple[str, ...]]] = {
    "tensorrt-llm": {"fp8": AMPERE_ON, "int8": AMPERE_ON, "nvfp4": BLACKWELL},
    "vllm": {"fp8": AMPERE_CDNA3},  # FlashInfer's FP8 cache on Ampere (module docstring)
    "sglang": {"fp8": AMPERE_CDNA3},
    "llama.cpp": {"q8_0": ANY, "q4_0": ANY},
    "fastertransformer": {},
    "pytorch": {},
}  # fmt: skip
# FlashInfer's head sizes: the only FP8-cache kernels vLLM and SGLang run on Ampere (module docstring)
FLASHINFER_HEAD_SIZES = (64, 128, 256)
# models with attention sinks (a learned logit per head): vLLM's FlashInfer backend raises for them off
# Blackwell ("FlashInfer backend currently does not support attention sinks, please use trtllm on
# blackwell or flash attention on earlier GPUs", vllm/v1/attention/backends/flashinfer.py @00a817ad)
ATTENTION_SINK_ARCHITECTURES = ("gpt_oss",)
FLASHINFER_FP8_KV_ONLY = {"vllm": ("ampere",), "sglang": ("ampere",)}
assert set(RUNS_ON) == set(WEIGHTS) == set(KV_CACHE) == set(ENGINES)
assert all(set(WEIGHTS[e]) == set(ENGINES[e].weight_formats) - {"bf16", "fp16"} for e in ENGINES)


def architecture(gpu: Any) -> str:
    """The GPU's architecture as its preset tells it (module docstring): a key of `ARCH_NAMES`."""
    fp8 = bool(np.all(np.asarray(gpu.peak_flops_per_s_fp8) > 0))
    if getattr(gpu, "vendor", "nvidia") == "amd":
        return "cdna3" if fp8 else "cdna2"
    if bool(np.all(np.asarray(gpu.peak_flops_per_s_fp4) > 0)):
        return "blackwell"
    if fp8:
        return "hopper" if gpu.gemm_kernels == "sm90" else "ada"
    return "ampere" if gpu.sixteen_bit == "bf16" else "volta"


def _names(archs: tuple[str, ...]) -> str:
    return ", ".join(ARCH_NAMES[a].split(" (")[0] for a in archs)


def check_engine_gpu(engine: str, gpu: Any, field: str = "--framework") -> None:
    """A SpecError (one line) where `engine` does not run on `gpu` at all (module docstring)."""
    arch = architecture(gpu)
    if arch in RUNS_ON[engine]:
        return
    version = ENGINES[engine].version
    raise SpecError(
        f"{field} {engine}: {engine} {version} does not run on {gpu.name} ({ARCH_NAMES[arch]}); it runs on "
        f"{_names(RUNS_ON[engine])} GPUs; choose --framework {', '.join(e for e in RUNS_ON if arch in RUNS_ON[e])}"
    )


def _half(gpu: Any) -> list[str]:
    return ["bf16", "fp16"] if gpu.sixteen_bit == "bf16" else ["fp16"]


def weight_formats_on(engine: str, gpu: Any) -> list[str]:
    """The weight formats `engine` runs on `gpu`, 16 bits first."""
    arch = architecture(gpu)
    return _half(gpu) + [f for f, archs in WEIGHTS[engine].items() if arch in archs]


def kv_formats_on(engine: str, gpu: Any, model: Any = None) -> list[str]:
    """The KV-cache formats `engine` keeps on `gpu`, 16 bits first; with `model`, without an FP8 cache
    where only FlashInfer would read it and `model` is not one FlashInfer runs (module docstring)."""
    arch = architecture(gpu)
    kept = _half(gpu) + [f for f, archs in KV_CACHE[engine].items() if arch in archs]
    if model is not None and arch in FLASHINFER_FP8_KV_ONLY.get(engine, ()) and not _flashinfer_runs(model):
        kept = [f for f in kept if f != "fp8"]
    return kept


def _flashinfer_runs(model: Any) -> bool:
    return (
        not getattr(model, "kv_lora_rank", 0)
        and getattr(model, "architecture", "") not in ATTENTION_SINK_ARCHITECTURES
        and int(model.head_dim) in FLASHINFER_HEAD_SIZES
    )


def _refuse(what: str, rules: dict[str, tuple[str, ...]], engine: str, gpu: Any, precision: str, field: str) -> str:
    """'`field` `precision`: `engine` cannot `what` on `gpu` (why)'."""
    archs = rules.get(precision)
    if archs:
        why = f"it runs it on {_names(archs)} GPUs; {gpu.name} is {ARCH_NAMES[architecture(gpu)]}"
    else:
        why = "not a format it runs"
    return f"{field} {precision}: {engine} cannot {what} on {gpu.name} ({why})"


def check_weight_format(engine: str, gpu: Any, precision: str, field: str) -> None:
    """A SpecError (one line: `field`, the value, what `engine` runs on `gpu`) where `engine` cannot
    run weights in `precision` on `gpu`; 16 bits are `resolved`'s and `Gpu.no_bf16`'s to refuse."""
    if precision in ("bf16", "fp16") or precision in weight_formats_on(engine, gpu):
        return
    text = _refuse(f"run {precision} weights", WEIGHTS[engine], engine, gpu, precision, field)
    raise SpecError(f"{text}; choose {', '.join(weight_formats_on(engine, gpu))}")


def check_kv_format(engine: str, gpu: Any, precision: str, field: str, model: Any = None) -> None:
    """The same for the KV cache's format (module docstring); `model`, where known, for the head sizes
    FlashInfer's FP8 cache takes on Ampere."""
    if precision in ("bf16", "fp16") or precision in kv_formats_on(engine, gpu, model):
        return
    choose = ", ".join(kv_formats_on(engine, gpu, model))
    if precision in kv_formats_on(engine, gpu):  # the GPU keeps it, this model's attention does not
        kind = f"head size {model.head_dim}"
        if getattr(model, "kv_lora_rank", 0):
            kind = "latent attention (MLA)"
        elif getattr(model, "architecture", "") in ATTENTION_SINK_ARCHITECTURES:
            kind = "attention with sinks"
        sizes = ", ".join(map(str, FLASHINFER_HEAD_SIZES))
        raise SpecError(
            f"{field} {precision}: {engine} cannot keep its KV cache in {precision} for {model.name} on {gpu.name} "
            f"({ARCH_NAMES[architecture(gpu)]}: only FlashInfer reads an FP8 cache there, for head sizes {sizes} "
            "without attention sinks; "
            f"{kind} gets Triton's kernels, whose e4m3 needs SM 8.9); choose {choose}"
        )
    text = _refuse(f"keep its KV cache in {precision}", KV_CACHE[engine], engine, gpu, precision, field)
    raise SpecError(f"{text}; choose {choose}")
