"""A preset file may not state one key twice: PyYAML keeps the last silently, so two branches that
each add a field (as review 47's mends both added fsdp's `model_parallel`) would hide one source."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

PRESETS = Path(__file__).resolve().parents[1] / "src" / "shardwise" / "presets"


class _StrictLoader(yaml.SafeLoader):
    pass


def _mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    keys = [k.value for k, _ in node.value]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise ValueError(f"line {node.start_mark.line + 1}: {', '.join(map(str, twice))} stated twice")
    return yaml.SafeLoader.construct_mapping(loader, node, deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


@pytest.mark.parametrize("path", sorted(PRESETS.glob("*.yaml")), ids=lambda p: p.name)
def test_no_key_stated_twice(path: Path) -> None:
    yaml.load(path.read_text(), Loader=_StrictLoader)


def test_the_check_catches_a_repeated_key() -> None:
    with pytest.raises(ValueError, match="model_parallel stated twice"):
        yaml.load("fsdp:\n  model_parallel: [tp]\n  zero_stage: 3\n  model_parallel: [tp]\n", Loader=_StrictLoader)
