"""Flags of one training plan that the plan gives nothing to do: refused in one line (`predict`)."""

from __future__ import annotations

from typing import Any

from shardwise.errors import SpecError
from shardwise.presets.stack_defaults import framework_recompute
from shardwise.requests import fields as F


def refuse_idle_flags(t: Any, model: Any = None) -> None:
    """One line for a flag of one plan that the plan gives nothing to do (it was priced as if
    absent): how CP ranks talk without CP, LoRA's targets without LoRA, what selective
    recomputation keeps without it, and with the `model` built, a mixture-of-experts flag on a
    dense model. `predict` asks it (`plan` searches cp and recomputation: not there)."""
    if model is not None:
        refuse_expert_flags(t, model)
    if t.cp_comm != F.default("cp_comm") and t.cp == 1:
        raise SpecError(f"--cp-comm {t.cp_comm}: with --cp 1 no context-parallel ranks exchange anything; add --cp")
    if t.lora_targets != F.default("lora_targets") and t.lora_rank == 0:
        raise SpecError("--lora-targets names the layers of LoRA's adapters; add --lora-rank R")
    recompute = t.recompute or framework_recompute(t.framework)  # None: the framework's default
    if t.selective_policy is not None and recompute != "selective":
        raise SpecError(
            f"--selective-policy says what --recompute selective recomputes; it is not used with --recompute "
            f"{recompute}" + ("" if t.recompute else f" ({t.framework}'s default)")
        )
    if t.partition_activations and recompute != "full":  # DeepSpeed splits what full recomputation keeps
        raise SpecError(f"--partition-activations needs --recompute full (not {recompute}): add it or drop the flag")


def refuse_expert_flags(t: Any, model: Any) -> None:
    """One line for a mixture-of-experts flag on a dense model (it was priced as if absent)."""
    if getattr(model, "is_moe", False):
        return
    given = [
        flag
        for flag, name in (
            ("--etp", "etp"),
            ("--expert-imbalance", "expert_imbalance"),
            ("--moe-dispatcher", "moe_dispatcher"),
            ("--moe-capacity-factor", "moe_capacity_factor"),
            ("--moe-pad-to-capacity", "moe_pad_to_capacity"),
        )
        if getattr(t, name) != F.default(name)
    ]
    if given:
        them = "them" if len(given) > 1 else "it"
        raise SpecError(f"{', '.join(given)}: {model.name} is dense (no experts); drop {them}")
