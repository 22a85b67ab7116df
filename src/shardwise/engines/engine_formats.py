"""The weight formats a serving engine runs, and on which GPUs: a format an engine cannot run is
refused in one line naming the field, the value and what that engine runs on that GPU (review 35:
llama.cpp was priced in FP8, TensorRT-LLM in Q4_K, NVFP4 weights on A100 under TensorRT-LLM and
FP8 weights on V100 under vLLM, all without a word). Checked where a request is built
(`requests.serve.ServeRequest.setting`: the command line, the Python API, the explorer); the
engines price what they are given (`analyses.serving_pcie` prices ExLlamaV2's EXL2 weights as int4
with the plain-PyTorch preset's kernel counts).

The formats are each preset's `EnginePreset.weight_formats` (16 bits always: bf16 where the GPU has
BF16, fp16 everywhere). What a format needs of the GPU is read from its preset, the four levels
the presets tell apart: FP4 tensor cores (Blackwell), FP8 ones (Ada, Hopper, Blackwell; MI300),
BF16 ones (Ampere on; MI250X) and none (V100, SM 7.0):

- TensorRT-LLM: FP8 on Ada and later, INT8 and INT4 on Ampere and later (its support matrix,
  nvidia.github.io/TensorRT-LLM/0.18.2/reference/support-matrix.html, "Precision": Ampere FP16,
  BF16, INT8, INT4; Ada and Hopper FP8 too; Volta not listed); NVFP4 on Blackwell only (Model
  Optimizer's support matrix: FP4 weights and activations, "Blackwell and later"; TensorRT-LLM has
  no weight-only NVFP4 path); MXFP4 (gpt-oss's experts) with FP8 tensor cores: its GPT-OSS guides
  name Hopper and Blackwell (the level here admits Ada too). No GGUF block formats.
- vLLM (0.34) and SGLang: FP8 weights with FP8 GEMMs on Ada and later, and weight-only FP8 (W8A16,
  the Marlin kernel) on Ampere: vLLM `Fp8Config.get_min_capability` 80 and `use_marlin` where the
  GPU lacks FP8 (vllm/model_executor/layers/quantization/fp8.py; its docs' quantization hardware
  table: "Marlin (GPTQ/AWQ/FP8)" Ampere on, "FP8 (W8A8)" Ada on), SGLang's `Fp8LinearMethod` turns
  Marlin on by itself where the GPU has no FP8 (`can_auto_enable_marlin_fp8`,
  python/sglang/srt/layers/quantization/fp8.py); none on V100. INT8 and INT4 through GPTQ, which
  runs on Volta (vLLM's table); NVFP4 on non-Blackwell GPUs weight-only through FP4 Marlin
  (`is_fp4_marlin_supported`: SM 7.5 and up in vLLM's and SGLang's marlin_utils_fp4.py, 8.0 in
  older vLLM), MXFP4 from SM 8.0 (vLLM `Mxfp4Config.get_min_capability` 80): neither on V100.
- llama.cpp: its GGUF types (q8_0, q4_0, q4_k, mxfp4) on any GPU its CUDA backend runs; no FP8,
  INT8/INT4 (GPTQ/AWQ) or NVFP4 weights.
- FasterTransformer 5.x and plain PyTorch: 16 bits only (their presets list no quantised format).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shardwise.engines.engine_presets import ENGINES
from shardwise.errors import SpecError

# what a quantised format needs of the GPU under each engine (module docstring): "fp4" FP4 tensor
# cores, "fp8" FP8 ones, "bf16" BF16 ones (Ampere on), "" any GPU
_GPTQ_MARLIN = {"fp8": "bf16", "int8": "", "int4": "", "nvfp4": "bf16", "mxfp4": "bf16"}
NEEDS: dict[str, dict[str, str]] = {
    "tensorrt-llm": {"fp8": "fp8", "int8": "bf16", "int4": "bf16", "nvfp4": "fp4", "mxfp4": "fp8"},
    "vllm": _GPTQ_MARLIN,
    "sglang": _GPTQ_MARLIN,
    "llama.cpp": {"q8_0": "", "q4_0": "", "q4_k": "", "mxfp4": ""},
    "fastertransformer": {},
    "pytorch": {},
}
assert all(set(NEEDS[e]) == set(ENGINES[e].weight_formats) - {"bf16", "fp16"} for e in ENGINES)
_NEED_TEXT = {"fp4": "FP4 tensor cores (Blackwell)", "fp8": "FP8 tensor cores", "bf16": "an Ampere or later GPU"}


def _has(gpu: Any, need: str) -> bool:
    if need == "fp4":
        return bool(np.all(np.asarray(gpu.peak_flops_per_s_fp4) > 0))
    if need == "fp8":
        return bool(np.all(np.asarray(gpu.peak_flops_per_s_fp8) > 0))
    if need == "bf16":
        return gpu.sixteen_bit == "bf16"
    return True


def weight_formats_on(engine: str, gpu: Any) -> list[str]:
    """The weight formats `engine` runs on `gpu`, 16 bits first."""
    half = ["bf16", "fp16"] if gpu.sixteen_bit == "bf16" else ["fp16"]
    return half + [f for f, need in NEEDS[engine].items() if _has(gpu, need)]


def check_weight_format(engine: str, gpu: Any, precision: str, field: str) -> None:
    """A SpecError (one line: `field`, the value, what `engine` runs on `gpu`) where `engine` cannot
    run weights in `precision` on `gpu`; 16 bits are `resolved`'s and `Gpu.no_bf16`'s to refuse."""
    if precision in ("bf16", "fp16") or precision in weight_formats_on(engine, gpu):
        return
    need = NEEDS[engine].get(precision)
    why = f"needs {_NEED_TEXT[need]}, which {gpu.name} lacks" if need else "not a format it runs"
    raise SpecError(
        f"{field} {precision}: {engine} cannot run {precision} weights on {gpu.name} ({why}); "
        f"choose {', '.join(weight_formats_on(engine, gpu))}"
    )
