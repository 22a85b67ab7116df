"""Checks and canonical forms of the Plan's list-valued and grouped fields (LoRA targets,
recompute modules, CUDA graph scopes, the hybrid-sharding group, an explicit stage split): each
raises a one-line SpecError naming the field, the value and what is allowed."""

from __future__ import annotations

import numpy as np

from shardwise.recompute_policies import CUDA_GRAPH_SCOPES, RECOMPUTE_MODULES
from shardwise.specs import _checks as chk
from shardwise.specs._checks import Number, SpecError

LORA_TARGETS = ("qkv", "proj", "fc1", "fc2")  # physics.lora: the linear layers an adapter can sit beside
ALL_LORA_TARGETS = ",".join(LORA_TARGETS)


def lora_targets(value: object) -> str:
    """`Plan.lora_targets` checked and in canonical order ("qkv,proj,fc1,fc2"): a comma-separated,
    non-empty subset of LORA_TARGETS without repeats."""
    if value == ALL_LORA_TARGETS:  # the default, already canonical
        return ALL_LORA_TARGETS
    parts = [p.strip() for p in value.split(",")] if isinstance(value, str) else None
    if not parts or any(p not in LORA_TARGETS for p in parts) or len(set(parts)) != len(parts):
        raise SpecError(
            f"plan: lora_targets {value!r} is not allowed; give a comma-separated subset of {', '.join(LORA_TARGETS)} "
            "(e.g. qkv or qkv,proj,fc1,fc2), each once"
        )
    return ",".join(t for t in LORA_TARGETS if t in parts)


def _name_list(
    field: str, value: object, allowed: tuple[str, ...], kind: str, example: str, note: str = ""
) -> tuple[str, ...]:
    """A comma-separated string or a sequence of names, each in `allowed` and given once (`kind`:
    what a name is, for the messages; `note`: added where the one not allowed is "moe")."""
    names = value.split(",") if isinstance(value, str) else value
    if not isinstance(names, list | tuple) or not all(isinstance(n, str) for n in names):
        raise SpecError(f"plan: {field} {chk._short(value)} is not allowed; give {kind} names, e.g. {example}")
    out = tuple(n.strip() for n in names if n.strip())
    for name in out:
        if name not in allowed:
            extra = note if name == "moe" else ""
            raise SpecError(f"plan: {field} {name!r} is not allowed; choose from {', '.join(allowed)}{extra}")
    if len(set(out)) < len(out):
        raise SpecError(f"plan: {field} {','.join(out)} names a {kind} twice; give each once")
    return out


def recompute_modules_of(value: object) -> tuple[str, ...]:
    """`Plan.recompute_modules` as a tuple of Megatron-Core module names (a comma-separated string
    or a sequence of names; each once)."""
    if value is None or value == "":
        return ()
    return _name_list("recompute_modules", value, RECOMPUTE_MODULES, "module", "moe_act,layernorm")


def cuda_graph_scope_of(value: object) -> tuple[str, ...]:
    """`Plan.cuda_graph_scope` as a tuple of Megatron-Core scope names, with Megatron-Core's rules
    (transformer_config.py: full_iteration alone, moe_preprocess with moe_router)."""
    if value is None or value == "" or value == "none":
        return ()
    note = " (whole MoE layers are graphed only when tokens are dropped and padded)"
    out = _name_list("cuda_graph_scope", value, CUDA_GRAPH_SCOPES, "scope", "attn,moe_router", note)
    if "full_iteration" in out and len(out) > 1:
        raise SpecError("plan: cuda_graph_scope full_iteration captures the whole step; give it alone")
    if "moe_preprocess" in out and "moe_router" not in out:
        raise SpecError("plan: cuda_graph_scope moe_preprocess needs moe_router too (Megatron-Core's rule)")
    return out


def shard_group_of(value: object, dp: Number, cp: Number, zero: Number) -> Number:
    """The checked `shard_group`: a whole number >= 0 that divides dp x cp, > 0 only with ZeRO >= 1."""
    if type(value) is int and value == 0:  # the default: no hybrid sharding
        return 0
    group = chk.non_negative_int("plan: shard_group", value)
    g, ranks, z = np.broadcast_arrays(np.asarray(group), np.asarray(dp) * np.asarray(cp), np.asarray(zero))
    hybrid = g > 0
    bad = hybrid & (np.mod(ranks, np.maximum(g, 1)) != 0)
    if np.any(bad):
        raise SpecError(
            f"plan: --shard-group {g[bad].flat[0].item()} is not allowed; it must divide dp x cp = "
            f"{ranks[bad].flat[0].item()} (0: shard over all of them)"
        )
    bad = hybrid & (z < 1)
    if np.any(bad):
        raise SpecError(
            f"plan: --shard-group {g[bad].flat[0].item()} needs ZeRO >= 1 (without ZeRO nothing is sharded); "
            "give --zero 1-3 or --shard-group 0"
        )
    return group


def stage_list_of(value: object, pp: Number) -> tuple[int, ...]:
    """An explicit per-stage layer list: whole numbers >= 1, one per stage, for one plan."""
    if isinstance(value, str):
        parts = [x for x in value.replace(" ", "").split(",") if x]
    elif isinstance(value, (list, tuple)) or (isinstance(value, np.ndarray) and value.ndim == 1):
        parts = list(value)
    else:
        raise SpecError(f"plan: stage_layers {value!r} is not allowed; give a list of layer counts, one per stage")
    out = []
    for x in parts:
        try:
            n = int(x)
            ok = float(x) == n and n >= 1
        except (TypeError, ValueError, OverflowError):
            ok = False
        if not ok:
            raise SpecError(f"plan: stage_layers entry {x!r} is not allowed; each stage needs a whole number >= 1")
        out.append(n)
    if np.asarray(pp).size != 1:
        raise SpecError("plan: stage_layers (an explicit split) needs a single pp, not an array of plans")
    if len(out) != int(np.asarray(pp)):
        raise SpecError(f"plan: stage_layers has {len(out)} entries but pp={int(np.asarray(pp))}; give one per stage")
    return tuple(out)
