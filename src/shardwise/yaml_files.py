"""YAML read strictly, the one way a spec file (a user's GPU, link, system or model, a calibration)
is parsed: UTF-8 text of at most 1 MiB, no duplicate keys, no aliases, string keys, every problem a
one-line `SpecError` naming the file and the line; the presets shipped with shardwise by libyaml's
C parser (`parse_trusted_yaml`). PyYAML is imported on first use.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shardwise import files
from shardwise.specs import SpecError

MAX_YAML_BYTES = 1 << 20  # a preset or system file is a few hundred bytes; 1 MiB is plenty


def load_yaml(path: str | Path) -> Any:
    """Read a YAML file strictly: UTF-8 text of at most 1 MiB, no duplicate keys, no aliases (a
    few bytes of aliases can expand to gigabytes), string keys. Any problem is a one-line
    SpecError naming the file (and the line)."""
    p = Path(path)
    raw = files.read_small(p, MAX_YAML_BYTES, "YAML spec")
    if b"\0" in raw:
        raise SpecError(f"{p}: is not a text file (YAML specs are UTF-8 text)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{p}: byte {exc.start} is not UTF-8 (save the file as UTF-8)") from None
    return parse_yaml(text, str(p))


def parse_yaml(text: str, where: str = "<yaml>") -> Any:
    """Parse YAML text with the strict rules of `load_yaml`."""
    import yaml  # lazy: keeps `import shardwise` and `--help` fast

    class Strict(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                line = event.start_mark.line + 1
                alias = f"*{event.anchor}"
                raise SpecError(f"{where}: line {line}: YAML aliases ({alias}) are not allowed; write the value")
            return super().compose_node(parent, index)

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[object] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                if not isinstance(key, str):
                    raise SpecError(f"{where}: line {line}: key {key!r} is not a name")
                if key in seen:
                    raise SpecError(f"{where}: line {line}: duplicate key {key!r}")
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    try:
        return yaml.load(text, Loader=Strict)  # a SafeLoader subclass
    except RecursionError:
        raise SpecError(f"{where}: nested too deeply for a YAML spec") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" line {mark.line + 1}" if mark else ""
        raise SpecError(f"{where}:{at} is not valid YAML") from None


def parse_trusted_yaml(text: str, where: str = "<yaml>") -> Any:
    """YAML shipped with shardwise (its presets): libyaml's C parser where PyYAML has it, ten
    times faster than `parse_yaml`'s line-tracking one; tests/test_presets.py checks that both
    read every preset file alike, so the strict rules still hold for them."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", None)
    if loader is None:
        return parse_yaml(text, where)
    return yaml.load(text, Loader=loader)
