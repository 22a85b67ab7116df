"""Keep README.md's console examples honest: run every `$ shardwise ...` line of each ```console
block and put its real output under it; and replace the text between `<!-- $ COMMAND -->` and
`<!-- end -->` with COMMAND's output (for tables printed as Markdown).

    python tools/readme.py          # rewrite README.md in place
    python tools/readme.py --check  # exit 1 if any block is out of date (used by the tests)
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"```console\n(.*?)```", re.S)
GENERATED = re.compile(r"<!-- \$ (.*?) -->\n.*?<!-- end -->", re.S)
ENV = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb"}


def run(command: str) -> str:
    """`shardwise ...` runs the CLI, `python examples/...` an example script (with this Python)."""
    args = shlex.split(command)
    if args[0] == "shardwise":
        argv = [sys.executable, "-m", "shardwise", *args[1:]]
    elif args[0] == "python" and args[1].startswith("examples/"):
        argv = [sys.executable, *args[1:]]
    else:
        raise SystemExit(f"README console blocks may only run shardwise or python examples/...: {command}")
    proc = subprocess.run(argv, capture_output=True, text=True, env=ENV, cwd=ROOT, check=False)
    out = proc.stdout + proc.stderr
    return "\n".join(line.rstrip() for line in out.rstrip("\n").splitlines())


def render(block: str) -> str:
    commands = [line[2:] for line in block.splitlines() if line.startswith("$ ")]
    parts = []
    for command in commands:
        parts.append(f"$ {command}\n{run(command)}\n")
    return "".join(parts)


def update(text: str) -> str:
    text = BLOCK.sub(lambda m: f"```console\n{render(m.group(1))}```", text)
    return GENERATED.sub(lambda m: f"<!-- $ {m.group(1)} -->\n{run(m.group(1)).strip()}\n<!-- end -->", text)


def main() -> int:
    path = ROOT / "README.md"
    text = path.read_text(encoding="utf-8")
    new = update(text)
    if "--check" in sys.argv:
        if new != text:
            print("README.md console blocks are out of date: run python tools/readme.py", file=sys.stderr)
            return 1
        return 0
    path.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
