"""What a Hugging Face config's rotary-embedding scaling means for the kernels that run it."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from shardwise.errors import SpecError


def rope_fields(p: Path, cfg: dict[str, Any]) -> dict[str, Any]:
    """`Model.yarn_rope`, `Model.rope_theta` and, where the windowed layers' differs,
    `Model.rope_local_theta` from a config.json."""
    full, local = rope_theta(p, cfg), rope_local_theta(p, cfg)
    out = {"yarn_rope": yarn_scales_rope(cfg), "rope_theta": full}
    return {**out, "rope_local_theta": local} if local and local != full else out


def rope_local_theta(p: Path, cfg: dict[str, Any]) -> float:
    """The windowed layers' rotary base where a config states one apart: `rope_local_base_freq`
    (transformers 4's Gemma3TextConfig), or `rope_parameters.sliding_attention.rope_theta`
    (transformers 5's per-layer-type form); 0 where it states none."""
    params = cfg.get("rope_parameters")
    key, value = "rope_local_base_freq", cfg.get("rope_local_base_freq")
    if value is None and isinstance(params, dict) and isinstance(params.get("sliding_attention"), dict):
        key, value = "rope_parameters.sliding_attention.rope_theta", params["sliding_attention"].get("rope_theta")
    return 0.0 if value is None else _base(p, key, value)


def _base(p: Path, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise SpecError(f"{p}: {key}: {value!r} is not allowed; it must be a number > 0 (the rotary base)")
    return float(value)


def rope_theta(p: Path, cfg: dict[str, Any]) -> float:
    """The rotary base: `rope_theta` (transformers 4), or `rope_parameters.rope_theta` (transformers 5's
    configs), or where rope_parameters holds one per layer type (Gemma 3) the full-attention layers'
    (`rope_parameters.full_attention.rope_theta`; the windowed layers': `rope_local_theta`); 0
    (unknown) where none holds one."""
    params = cfg.get("rope_parameters")
    key, value = "rope_theta", cfg.get("rope_theta")
    if value is None and isinstance(params, dict):
        key, value = "rope_parameters.rope_theta", params.get("rope_theta")
        if value is None and isinstance(params.get("full_attention"), dict):
            key, value = "rope_parameters.full_attention.rope_theta", params["full_attention"].get("rope_theta")
    return 0.0 if value is None else _base(p, key, value)


def yarn_scales_rope(cfg: dict[str, Any]) -> bool:
    """A YaRN rotary embedding that scales cos and sin (`Model.yarn_rope`): Megatron-Core's fused
    kernel cannot take the scale and falls back to the unfused path where it is not 1 (rope_utils.py;
    YaRN's m = 0.1 ln(factor) + 1, DeepSeek's ratio get_mscale(f, mscale) / get_mscale(f,
    mscale_all_dim), 1 for DeepSeek-V3 and Kimi K2). Latent attention (kv_lora_rank) rotates its own
    small slice and is priced apart: never."""
    rope = cfg["rope_scaling"] if isinstance(cfg.get("rope_scaling"), dict) else {}
    if (rope.get("rope_type") or rope.get("type")) != "yarn" or cfg.get("kv_lora_rank"):
        return False
    try:
        factor = float(rope.get("factor", 1.0))
        mscale, mscale_all = float(rope.get("mscale", 1.0)), float(rope.get("mscale_all_dim", 0.0))
    except (TypeError, ValueError):
        return True  # malformed: as a YaRN model (the unfused path), the safe side of the cost

    def m(scale: float) -> float:
        return 0.1 * scale * math.log(factor) + 1.0 if factor > 1.0 else 1.0

    ratio = m(mscale) / m(mscale_all) if mscale_all else m(mscale)
    return abs(ratio - 1.0) > 1e-9
