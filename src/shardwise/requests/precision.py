"""The 16-bit format a request computes in, on its GPU: bf16 unless the GPU has no BF16 tensor cores
(`Gpu.bf16`: V100's take FP16 only, NVIDIA's V100 datasheet), where a precision left to the default
is fp16, with a note, and a bf16 asked for is refused in one line, as fp8 is on a GPU without FP8."""

from __future__ import annotations

from typing import Any


def resolved(given: str | None, gpu: Any, flag: str, notes: list[str] | None) -> str:
    """`given` (None: the default) on `gpu`: the default is the GPU's 16-bit format, said in a note
    where it is not bf16; bf16 given on a GPU without it is refused, naming `flag`."""
    if given is None:
        if gpu.sixteen_bit == "bf16":
            return "bf16"
        if notes is not None:
            notes.append(f"{gpu.name} has no BF16 tensor cores: fp16 (as {flag} fp16), not the default bf16")
        return "fp16"
    if given == "bf16" and gpu.sixteen_bit != "bf16":
        raise gpu.no_bf16(f"{flag} bf16", f"{flag} fp16")
    return given
