"""The code base stays ruff-clean (the style standard of the project)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(
    shutil.which("ruff") is None and not (Path(sys.executable).parent / "ruff").exists(),
    reason="ruff is not installed (pip install -e '.[test]')",
)
def test_ruff_is_clean():
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    paths = [str(ROOT / p) for p in ("src", "tests", "examples", "tools", "benchmarks")]
    proc = subprocess.run([ruff, "check", *paths], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
