"""Reading a public run's row: the framework preset its stack column names and the `key=value`
pairs of its parse notes (data/PUBLIC_RUNS.md), shared by the rules that price the row
(`public_stacks`, `public_precision`)."""

from __future__ import annotations

# framework column -> framework preset (presets/frameworks.yaml)
PRESETS = {
    "megatron-core": "megatron-core",
    "megatron-deepspeed": "megatron-deepspeed",
    # NeMo Megatron 22.x runs Megatron-LM's 2022 layers (no FlashAttention, selective recomputation,
    # sequence parallelism); its ZeRO stage comes from the row (`zero=`). NeMo 1.11 + Apex's code was
    # read against Megatron-LM 2022's: the same kernels and bytes per micro-batch, so no preset of its
    # own (data/PUBLIC_RUNS_OTHER_STACKS.md, the NeMo Megatron 22.08 section)
    "nemo-megatron": "megatron-lm-2022",
    "fsdp": "fsdp",
    "fsdp2": "fsdp2",
    "torchtitan": "torchtitan",
    "deepspeed": "deepspeed",
    "internevo": "internevo",
    "colossalai": "colossalai",
    "paxml": "paxml",
    "maxtext": "maxtext",
    "flash-attn-trainer": "flash-attn-trainer",
    "hf-transformers": "hf-transformers",
    "nemo-automodel": "nemo-automodel",
}


def notes(row: dict[str, str]) -> dict[str, str]:
    """The `key=value` pairs of a row's parse notes."""
    out = {}
    for part in row.get("parse_notes", "").split(";"):
        key, sep, value = part.partition("=")
        key = key.strip()
        if sep and key.replace("_", "").isalnum():
            out[key] = value.strip()
    return out
