"""Preset-file fields given as `presets show NAME --json` prints them: a quantity under its SI name,
the unit in the key, as a number (`memory_bytes: 85899345920`), read as the file field it is
(`memory: 85899345920 B`), so that the JSON of a preset, edited, is a preset file again (review 42)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shardwise import units
from shardwise.errors import SpecError

# each parser's unit as a file writes it after a number in SI (`from_si_keys`)
_SI_UNIT = {
    units.parse_flops_per_s: "FLOP/s",
    units.parse_bytes: "B",
    units.parse_rate_bytes_per_s: "B/s",
    units.parse_seconds: "s",
    units.parse_watts: "W",
}


def from_si_keys(data: Mapping[str, Any], fields: Mapping[str, Any]) -> dict[str, Any]:
    """A file's fields with a quantity given as `presets show NAME --json` prints it (its SI name,
    the unit in the key, a number: `memory_bytes: 85899345920`) taken as the file field it is
    (`memory: 85899345920 B`), so that the JSON of a preset, edited, is a preset file again; a
    field given both ways is refused. Other keys as they are."""
    by_si = {target: (key, parse) for key, (target, parse) in fields.items() if target != key and parse in _SI_UNIT}
    out = dict(data)
    for si, (key, parse) in by_si.items():
        if si not in data:
            continue
        value = out.pop(si)
        if key in data:
            raise SpecError(f"{key} and {si}: the same quantity given twice; keep one")
        if isinstance(value, bool) or not isinstance(value, int | float):
            unit = _SI_UNIT[parse]
            raise SpecError(f"{si}: {value!r} is not allowed; give a number in {unit} (or {key} with its unit)")
        out[key] = f"{value!r} {_SI_UNIT[parse]}"
    return out


def si_named(kind: str, name: str, data: Mapping[str, Any], fields: Mapping[str, Any]) -> Mapping[str, Any]:
    """`from_si_keys`, its refusals named by the kind and name."""
    if not isinstance(data, Mapping):
        return data
    try:
        return from_si_keys(data, fields)
    except SpecError as exc:
        raise SpecError(f"{kind} {name!r}: {exc}") from None
