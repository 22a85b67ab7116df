"""Preset-file fields given as `presets show NAME --json` prints them: a quantity under its SI name,
the unit in the key, as a number (`memory_bytes: 85899345920`), read as the file field it is
(`memory: 85899345920 B`), so that the JSON of a preset, edited, is a preset file again (review 42)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shardwise.errors import SpecError

# A preset's quantities under their SI names, the unit in the key (review 40 #10): what `presets
# --json` writes each file field as (`cli.presets_cmd.si_fields`) and what a preset file may give
# instead of the field with its unit (`from_si_keys`): one table both read. (file field -> (SI key,
# the `shardwise.units` parser of the field's text))
SI_NAMES = {
    "peak_16bit": ("peak_flops_per_s_16bit", "parse_flops_per_s"),
    "peak_fp8": ("peak_flops_per_s_fp8", "parse_flops_per_s"),
    "peak_fp4": ("peak_flops_per_s_fp4", "parse_flops_per_s"),
    "peak_int8": ("peak_ops_per_s_int8", "parse_flops_per_s"),
    "memory": ("memory_bytes", "parse_bytes"),
    "memory_bandwidth": ("memory_bandwidth_bytes_per_s", "parse_rate_bytes_per_s"),
    "l2": ("l2_bytes", "parse_bytes"),
    "l2_bandwidth": ("l2_bandwidth_bytes_per_s", "parse_rate_bytes_per_s"),
    "host_link": ("host_link_bytes_per_s", "parse_rate_bytes_per_s"),
    "tdp": ("tdp_watts", "parse_watts"),
    "bandwidth": ("bandwidth_bytes_per_s", "parse_rate_bytes_per_s"),
    "ll_bandwidth": ("ll_bandwidth_bytes_per_s", "parse_rate_bytes_per_s"),
    "latency": ("latency_s", "parse_seconds"),
    "host_kernel": ("host_kernel_s", "parse_seconds"),
    "host_memory_bandwidth": ("host_memory_bandwidth_bytes_per_s", "parse_rate_bytes_per_s"),
    "socket_link_bandwidth": ("socket_link_bandwidth_bytes_per_s", "parse_rate_bytes_per_s"),
    "uplink_bandwidth": ("uplink_bandwidth_bytes_per_s", "parse_rate_bytes_per_s"),
}
# each parser's unit as a file writes it after a number in SI (`from_si_keys`)
_SI_UNIT = {
    "parse_flops_per_s": "FLOP/s",
    "parse_bytes": "B",
    "parse_rate_bytes_per_s": "B/s",
    "parse_seconds": "s",
    "parse_watts": "W",
}


def from_si_keys(data: Mapping[str, Any], fields: Mapping[str, Any]) -> dict[str, Any]:
    """A file's fields with a quantity given as `presets show NAME --json` prints it (its SI name,
    the unit in the key, a number: `memory_bytes: 85899345920`) taken as the file field it is
    (`memory: 85899345920 B`), so that the JSON of a preset, edited, is a preset file again; a
    field given both ways is refused. Other keys as they are. `fields`: the kind's file fields."""
    out = dict(data)
    for key in fields:
        if key not in SI_NAMES or SI_NAMES[key][0] not in data:
            continue
        si, parse = SI_NAMES[key]
        value = out.pop(si)
        if key in data:
            raise SpecError(f"{key} and {si}: the same quantity given twice; keep one")
        unit = _SI_UNIT[parse]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SpecError(f"{si}: {value!r} is not allowed; give a number in {unit} (or {key} with its unit)")
        out[key] = f"{value!r} {unit}"
    return out


def si_named(kind: str, name: str, data: Mapping[str, Any], fields: Mapping[str, Any]) -> Mapping[str, Any]:
    """`from_si_keys`, its refusals named by the kind and name."""
    if not isinstance(data, Mapping):
        return data
    try:
        return from_si_keys(data, fields)
    except SpecError as exc:
        raise SpecError(f"{kind} {name!r}: {exc}") from None
