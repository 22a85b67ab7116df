"""What a preset file the user wrote must state that a built-in preset is trusted to: the files it
names (a system's GPU or link YAML) read from the file's own folder, and every quantity with its unit.

A number with no unit was taken in SI (`bandwidth: 1e3` as 1 kB/s, with only a note), where the
same value on the command line is refused (`--intra-link 1000`: "has no unit"); a file is held to
the command line's rule, in one line naming the file, the key, the value and the value with a unit.
A bare 0 needs none. Python callers of `loaders.*_from_dict` keep giving SI numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shardwise import files, loaders, units
from shardwise.errors import SpecError

# the fields of a system file that may name another file (a GPU's or a link's YAML)
NESTED_FILE_FIELDS = {"systems": ("gpu", "intra_node_link", "inter_node_link")}
# each unit parser's unit, as the example in the message writes it
EXAMPLE_UNITS = {
    units.parse_flops_per_s: " TFLOPS",
    units.parse_bytes: "GB",
    units.parse_rate_bytes_per_s: "GB/s",
    units.parse_seconds: "us",
    units.parse_watts: "W",
}


def _unit_fields(fields: dict[str, tuple[str, Any]]) -> dict[str, str]:
    """key -> example unit, for the fields of `fields` parsed with a unit."""
    return {key: EXAMPLE_UNITS[parse] for key, (_, parse) in fields.items() if parse in EXAMPLE_UNITS}


def checked_file_fields(kind: str, data: dict[str, Any], path: str) -> dict[str, Any]:
    """The fields of preset file `path` (a `kind`: gpus, links, systems, frameworks), its nested
    file names joined to its folder; a quantity without a unit is refused."""
    data = _near(kind, data, path)
    _refuse_bare(kind, data, path)
    return data


def _near(kind: str, data: dict[str, Any], path: str) -> dict[str, Any]:
    """`data` with each relative file name its fields give joined to the folder of the file `path`
    (`sub/s.yaml` naming `intra_node_link: l.yaml` reads sub/l.yaml, whatever the current
    directory), as calibrate reads a runs CSV's framework files. A file is told from a preset name
    or a rate as `presets` tells it: a .yaml/.yml name, or a file there."""
    folder, out = Path(path).parent, dict(data)
    for field in NESTED_FILE_FIELDS.get(kind, ()):
        value = data.get(field)
        if not isinstance(value, str) or not value.strip() or Path(value).is_absolute():
            continue
        near = folder / value
        if value.lower().endswith((".yaml", ".yml")) or files.is_file(near):
            out[field] = str(near)
    return out


def _bare(value: Any) -> bool:
    """A number with no unit, other than 0 (a YAML number, or a string of one: `1e3`)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return value != 0
    return units.is_bare_number(value) and float(value) != 0


def _refuse_bare(kind: str, data: dict[str, Any], where: str) -> None:
    if kind == "gpus":
        _check(data, _unit_fields(loaders._GPU_FIELDS), where)
        table = data.get("gemm_table")
        for i, row in enumerate(table if isinstance(table, list) else []):
            if isinstance(row, dict):
                _check(row, {"rate": " TFLOPS"}, f"{where}: gemm_table[{i}]")
    elif kind == "links":
        _check(data, _unit_fields(loaders._LINK_FIELDS), where)
    elif kind == "frameworks":
        _check(data, {"host_kernel": "us"}, where)
    elif kind == "systems":
        from shardwise.presets.pcie_fields import PCIE_RATES

        for field in NESTED_FILE_FIELDS["systems"]:
            if isinstance(data.get(field), dict):  # the fields inline
                _refuse_bare("gpus" if field == "gpu" else "links", data[field], f"{where}: {field}")
            elif _bare(data.get(field)) and field != "gpu":
                raise SpecError(
                    f"{where}: {field}: {data[field]} has no unit; give a link preset's name, a link YAML "
                    f"file or the link's fields ({field}: {{bandwidth: {data[field]}GB/s}})"
                )
        if isinstance(data.get("pcie"), dict):
            _check(data["pcie"], dict.fromkeys(PCIE_RATES, "GB/s"), f"{where}: pcie")


def _check(data: dict[str, Any], unit_fields: dict[str, str], where: str) -> None:
    for key, unit in unit_fields.items():
        if _bare(data.get(key)):
            _say(where, key, data[key], unit)


def _say(where: str, key: str, value: Any, unit: str) -> None:
    raise SpecError(
        f"{where}: {key}: {value} has no unit; write it with one, e.g. {key}: {value}{unit} "
        "(as the command line takes it)"
    )
