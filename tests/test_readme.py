"""The README's examples are real: console blocks match fresh runs, Python blocks execute."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_console_blocks_are_up_to_date():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "readme.py"), "--check"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr


def test_python_blocks_run():
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    assert blocks
    for code in blocks:
        exec(compile(code, "README.md", "exec"), {})


def test_the_two_commands_are_there():
    assert "pip install -e . && shardwise" in README
    ci = (ROOT / ".ci" / "run").read_text()
    assert "python -m pytest -q" in README and "python -m pytest -q" in ci
