"""Typed fields of a Hugging Face config.json (`hf_config.read`): each refuses a value of the wrong
type in one line naming the file and the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shardwise.errors import SpecError


def text(p: Path, cfg: dict[str, Any], key: str) -> str:
    """A string field (absent or null: empty); a list or a number is refused, not turned into text."""
    value = cfg.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise SpecError(f'{p}: {key}: {value!r} is not allowed; it must be a string (e.g. "silu")')
    return value


def flag(p: Path, cfg: dict[str, Any], keys: tuple[str, ...], default: bool) -> bool:
    """A true/false field, the first of `keys` present (absent or null: `default`)."""
    for key in keys:
        value = cfg.get(key)
        if value is None:
            continue
        if not isinstance(value, bool):
            raise SpecError(f"{p}: {key}: {value!r} is not allowed; it must be true or false")
        return value
    return default


def limit(p: Path, cfg: dict[str, Any], key: str) -> float:
    """A clamp limit from config.json: absent or null is 0 (none); anything else a number >= 0."""
    value = cfg.get(key)
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise SpecError(f"{p}: {key}: {value!r} is not allowed; it must be a number >= 0 (or null: none)")
    return float(value)


def probability(p: Path, cfg: dict[str, Any], key: str) -> float:
    """A dropout probability from config.json: absent or null is 0; anything else a number in [0, 1]."""
    value = cfg.get(key)
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise SpecError(f"{p}: {key}: {value!r} is not allowed; it must be a probability between 0 and 1")
    return float(value)
