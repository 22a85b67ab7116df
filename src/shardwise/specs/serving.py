"""A serving workload: what requests arrive (prompt and output lengths, concurrency) and how the
weights and KV cache are stored and the kernels launched."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from shardwise.serving_names import RUNTIME_NAMES
from shardwise.specs import _checks as chk
from shardwise.specs._checks import Number, SpecError
from shardwise.specs.hardware import CUSTOM_ALL_REDUCE_KERNELS

# Bytes per element of stored weights and KV cache, scales included.
# NVFP4: 4 bits and an FP8 scale per 16 values; MXFP4 (OCP Microscaling): 4 bits and an E8M0 scale
# per 32. int4: AWQ / GPTQ weights, 4 bits with an fp16 scale and a 4-bit zero point per group of
# 128 (AutoAWQ's default q_group_size 128 with zero_point; GPTQ's usual group_size 128). llama.cpp's
# GGUF blocks (ggml/src/ggml-common.h): q8_0 32 int8 values and an fp16 scale (34 bytes per 32),
# q4_0 32 4-bit values and an fp16 scale (18 bytes per 32), q4_k super-blocks of 256 4-bit values
# with 6-bit scales and mins and two fp16 (144 bytes per 256).
INT4_GROUP = 128
STORAGE_BYTES = {
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5 + (2.0 + 0.5) / INT4_GROUP,
    "nvfp4": 0.5 + 1.0 / 16.0,
    "mxfp4": 0.5 + 1.0 / 32.0,
    "q8_0": 34.0 / 32.0,
    "q4_0": 18.0 / 32.0,
    "q4_k": 144.0 / 256.0,
}
# Serving engines with presets (engines/engine_presets.py ENGINES).
ENGINE_NAMES = ("tensorrt-llm", "vllm", "sglang", "llama.cpp", "fastertransformer", "pytorch")
# Each engine's own all-reduce on small messages (physics/custom_allreduce.py; the engine presets'
# `all_reduce`, engines/engine_presets.py): what `serve` and `ServingWorkload` use unless told
# otherwise; the other engines reduce with NCCL only ("none").
ENGINE_ALL_REDUCE = {"tensorrt-llm": "trtllm", "vllm": "vllm", "sglang": "sglang"}
# Serving runtimes (the engines price each: engines/serving.py RUNTIMES): `serving_names.RUNTIME_NAMES`,
# imported above (the command line reads it there without numpy).


@dataclass(frozen=True)
class ServingWorkload:
    """Requests: `batch` concurrent sequences in all (spread over dp replicas)."""

    input_len: Number
    output_len: Number
    batch: Number = 1
    weight_precision: str = "bf16"
    kv_precision: str = "bf16"
    runtime: str = "graphs"  # see RUNTIMES
    # the all-reduce on small messages (physics.custom_allreduce.KERNELS): "none" (NCCL only), "vllm",
    # "trtllm" (TensorRT-LLM), "sglang"; None (the default): the engine's own, `ENGINE_ALL_REDUCE`,
    # as `shardwise serve` prices it (review 32: the API's default was NCCL, serve's TensorRT-LLM's)
    custom_all_reduce: str | None = None
    # whose KV-cache memory rule and pipeline-stage cost apply (engines/engine_presets.py)
    engine: str = "tensorrt-llm"
    # vLLM's or SGLang's attention kernel: "fused", "flash2", "flash3" or "flash4"; None (the default):
    # the engine's own on the GPU (engines/engine_attention.py ENGINE_KERNELS), as its backend selector picks
    attention_kernel: str | None = None

    def __post_init__(self) -> None:
        for name in ("input_len", "output_len", "batch"):
            object.__setattr__(self, name, chk.positive_int(f"serving: {name}", getattr(self, name)))
        if not isinstance(self.engine, str) or self.engine not in ENGINE_NAMES:
            raise SpecError(f"serving: engine {self.engine!r} is not allowed; choose {', '.join(ENGINE_NAMES)}")
        if self.custom_all_reduce is None:
            object.__setattr__(self, "custom_all_reduce", ENGINE_ALL_REDUCE.get(self.engine, "none"))
        kernels = CUSTOM_ALL_REDUCE_KERNELS
        if not isinstance(self.custom_all_reduce, str) or self.custom_all_reduce not in kernels:
            raise SpecError(
                f"serving: custom_all_reduce {self.custom_all_reduce!r} is not allowed; choose {', '.join(kernels)}"
            )
        kernels = ("fused", "flash2", "flash3", "flash4")  # engines/engine_attention.py SERVING_KERNELS
        if self.attention_kernel is not None and self.attention_kernel not in kernels:
            raise SpecError(
                f"serving: attention_kernel {self.attention_kernel!r} is not allowed; choose {', '.join(kernels)}"
            )
        if not isinstance(self.runtime, str) or self.runtime not in RUNTIME_NAMES:
            raise SpecError(f"serving: runtime {self.runtime!r} is not allowed; choose {', '.join(RUNTIME_NAMES)}")
        for name in ("weight_precision", "kv_precision"):
            if not isinstance(getattr(self, name), str) or getattr(self, name) not in STORAGE_BYTES:
                raise SpecError(
                    f"serving: {name} {getattr(self, name)!r} is not allowed; choose {', '.join(STORAGE_BYTES)}"
                )
        if any(type(getattr(self, n)) is np.ndarray for n in ("input_len", "output_len", "batch")):
            from shardwise.specs.distinct import _leaves, broadcast_shape

            broadcast_shape("serving", _leaves(self))  # one SpecError naming two that do not broadcast


def check_serving_inputs(scn: Any, wl: Any) -> None:
    """`estimate_serving`'s arguments: a Scenario and a ServingWorkload whose arrays broadcast
    together (a SpecError naming the first two that do not)."""
    from shardwise.specs.distinct import _leaves, broadcast_shape
    from shardwise.specs.scenario import Scenario

    if not isinstance(scn, Scenario) or not isinstance(wl, ServingWorkload):
        wrong = type(scn).__name__ if not isinstance(scn, Scenario) else type(wl).__name__
        raise SpecError(f"estimate_serving takes a Scenario(model, cluster, plan) and a ServingWorkload, not a {wrong}")
    gpu = scn.cluster.gpu
    for name in ("weight_precision", "kv_precision"):  # bf16, the default, as `Gpu.peak_flops_per_s` refuses it
        if getattr(wl, name) == "bf16" and gpu.sixteen_bit != "bf16":
            raise gpu.no_bf16(f"serving: {name} bf16", f"{name}='fp16'")
    leaves = _leaves(scn) + _leaves(wl, ("workload",))
    if leaves:
        broadcast_shape("serving", leaves)
