"""Run a shardwise command in-process and return its JSON, or the one-line error the CLI prints."""

from __future__ import annotations

import io
import json
import shlex
import threading
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from typing import Any

_LOCK = threading.Lock()  # stdout is redirected for the whole process: one command at a time


@dataclass(frozen=True)
class Outcome:
    """What a command gave: its parsed JSON, or the error line (as the CLI prints it, without "error: ")."""

    args: tuple[str, ...]
    data: Any = None
    error: str | None = None

    @property
    def command(self) -> str:
        """The command line that reproduces this view (without `--json`, which the page adds)."""
        shown = [a for a in self.args if a != "--json"]
        return "shardwise " + shlex.join(shown)


def _invoke(argv: list[str]) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `shardwise ARGV` run in this process."""
    from shardwise.cli import main

    out, err = io.StringIO(), io.StringIO()
    with _LOCK, redirect_stdout(out), redirect_stderr(err):
        try:
            main(argv)
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0) if not isinstance(exc.code, str) else 2
    return code, out.getvalue(), err.getvalue()


def _error(code: int, err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    return lines[-1][len("error: ") :] if lines else (err.strip() or f"exit status {code}")


def run(args: list[str]) -> Outcome:
    """`shardwise ARGS --json`, in this process: the CLI's own checks and messages."""
    code, out, err = _invoke([*args, "--json"] if "--json" not in args else list(args))
    if code:
        return Outcome(tuple(args), error=_error(code, err))
    try:
        return Outcome(tuple(args), data=json.loads(out))
    except json.JSONDecodeError:
        return Outcome(tuple(args), error="the command printed no JSON")


def text(args: list[str]) -> str:
    """What `shardwise ARGS` prints (for a table printed as CSV with `--csv -`); raises on an error."""
    code, out, err = _invoke(list(args))
    if code:
        raise ValueError(_error(code, err))
    return out
