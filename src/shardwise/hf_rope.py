"""What a Hugging Face config's rotary-embedding scaling means for the kernels that run it."""

from __future__ import annotations

import math
from typing import Any


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
