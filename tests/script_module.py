"""Load one of the repository's scripts (tools/*.py, examples/*.py) as a module, for its tests.

The module is registered in sys.modules under its name before it runs: dataclasses look their
module up while a class is built."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(relative: str, name: str | None = None) -> ModuleType:
    """The script at `relative` (from the repository root) run as module `name` (default
    shardwise_script_<stem>)."""
    path = ROOT / relative
    name = name or f"shardwise_script_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
