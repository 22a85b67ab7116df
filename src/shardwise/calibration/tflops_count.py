"""Which FLOPs a measured model TFLOP/s counts (the `tflops_count` column of a runs CSV), and the
FLOPs per step that turn it into a step time.

One name, two counts: frameworks print "model TFLOP/s" by different formulas, up to 12% apart for
Llama-3-8B at 8k tokens, so a run's figure is converted with its own framework's count:

- `full-square` (the default; the public tables' figures): the whole s x s attention square, 3
  passes (Korthikanti et al. 2022 App. A; Narayanan et al. 2021 Eq. 3 less its recomputed
  forward). Megatron-LM `megatron/training/training.py` `num_floating_point_operations` counted
  this until NVIDIA/Megatron-LM@8873b55d (2025-03-06, first in core_v0.12.0), Megatron-DeepSpeed
  still does (`throughput_calculator`).
- `causal`: the square's causal half only, what Megatron-LM counts since 8873b55d (`+ (args.seq_length
  / args.hidden_size / 2)`, "Only half of the attention matrix is non-zero"; main@d98e8a64:
  `standard_self_attn_core_term ... / 2  # causal mask`), Megatron-Bridge
  (`src/megatron/bridge/training/utils/flop_utils.py`@0494433b, `attn_layer_flops`: `core_seq / 2`)
  and NeMo's flops formulas (`causal_self_attn = True`), and `shardwise predict`'s
  `model_tflops_per_gpu`. Here it is the full square less `masked_attention_flops_per_step`, which
  also leaves out what sliding windows and packed documents mask (Megatron-LM's count knows the
  packed documents, not the windows: give such a run's step time instead).
- `maxtext-6n-causal`: MaxText's 2024 count, 6 x every parameter (embeddings included) + the
  causal half of the square (`engines.training_flops.maxtext_flops_per_step`).
"""

from __future__ import annotations

from typing import Any

from shardwise.errors import SpecError

COUNTS = ("full-square", "causal", "maxtext-6n-causal")
DEFAULT = "full-square"
# the public-runs table's parse_notes key of a row whose source used MaxText's count
# (`analyses.public_runs.MAXTEXT_FORMULA`)
_MAXTEXT_NOTE = "tflops_formula=maxtext-6n-causal"


def count_of(row: dict[str, str], where: str) -> str:
    """The row's `tflops_count` (one of `COUNTS`), else the public table's tag, else the default."""
    text = (row.get("tflops_count") or "").strip().lower()
    if not text:
        notes = (row.get("parse_notes") or "").split("; ")
        return "maxtext-6n-causal" if _MAXTEXT_NOTE in notes else DEFAULT
    if text not in COUNTS:
        raise SpecError(
            f"{where}: tflops_count: {text!r} is not allowed; use one of {', '.join(COUNTS)} (which FLOPs the "
            "TFLOP/s figure counts: docs/calibration.md)"
        )
    return text


def flops_per_step_counted(scn: Any, count: str) -> float:
    """The FLOPs per step (all GPUs) that `count` gives the scenario's step."""
    from shardwise.engines.training_flops import (
        flops_per_step,
        masked_attention_flops_per_step,
        maxtext_flops_per_step,
    )

    if count == "maxtext-6n-causal":
        return float(maxtext_flops_per_step(scn.model, scn.plan.global_batch))
    full = float(flops_per_step(scn)[0])
    return full - float(masked_attention_flops_per_step(scn)) if count == "causal" else full
