"""Keep the console examples of README.md and docs/**/*.md honest.

In every such file, run each `$ shardwise ...` (or `$ python examples/...`) line of each ```console block and
put its real output under it; and replace the text between `<!-- $ COMMAND -->` and `<!-- end -->` with
COMMAND's output (for tables printed as Markdown). Each distinct command runs once, several at a time.

    python tools/readme.py                      # rewrite README.md and docs/**/*.md in place
    python tools/readme.py --check              # exit 1 if any block is out of date (the tests do the same)
    python tools/readme.py docs/serving.md      # only these files (also with --check)

Prose between `<!-- numbers from the output -->` and `<!-- end numbers -->` quotes the blocks: each
of its numbers with a unit must be printed by a block of its page (both modes say which is not).
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# A ```console block, or a generated region `<!-- $ COMMAND -->` ... `<!-- end -->`.
BLOCK = re.compile(r"```console\n(?P<body>.*?)```|<!-- \$ (?P<command>.*?) -->\n.*?<!-- end -->", re.S)
ENV = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb"}
# Prose that quotes the blocks' output, between `<!-- numbers from the output -->` and
# `<!-- end numbers -->` (each on its own line, indented in a list): every number with a unit in it
# must be one that a block of the same page prints, rounded as printed, so it cannot drift.
QUOTING = re.compile(r"^[ ]*<!-- numbers from the output -->\n(?P<prose>.*?)^[ ]*<!-- end numbers -->", re.S | re.M)
_VALUE = r"\d[\d,]*(?:\.\d+)?"
_UNIT = r"(?:\s?(?:ms|µs|us|s|GB/s|GB|MB|TB/s|TFLOP/s)|%|x)"
# a number and its unit, or a range of two sharing one ("12-31%", "4 against 3.34 s", "1.39-1.76 s")
QUANTITY = re.compile(
    rf"(?<![\w.,/+-])(?P<a>{_VALUE})(?:(?:-|–| to | against )(?P<b>{_VALUE}))?(?P<unit>{_UNIT})(?![\w/])"
)


def quantities(text: str) -> list[tuple[int, str]]:
    """(offset, "VALUE UNIT") of every number with a unit in `text`, each end of a range apart."""
    found = []
    for m in QUANTITY.finditer(text):
        unit = m["unit"].strip().replace("µs", "us")
        space = "" if unit in ("%", "x") else " "
        found += [(m.start(k), f"{m[k]}{space}{unit}") for k in ("a", "b") if m[k] is not None]
    return found


def unquoted_numbers(text: str, path: str = "") -> list[str]:
    """One line per number in a quoting region of `text` that no block of `text` prints."""
    printed = {q for m in BLOCK.finditer(text) for _, q in quantities(m[0])}
    bad = []
    for region in QUOTING.finditer(text):
        for offset, q in quantities(region["prose"]):
            if q not in printed:
                line = text.count("\n", 0, region.start("prose") + offset) + 1
                bad.append(f"{path}:{line}: the prose quotes {q}, which no console block of the page prints")
    return bad


def markdown_files() -> list[Path]:
    """The files whose blocks are generated: README.md and every Markdown page under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def argv_for(command: str) -> list[str] | None:
    """`shardwise ...` runs the CLI, `python examples/...` an example script (with this Python); else None."""
    args = shlex.split(command)
    if args and args[0] == "shardwise":
        return [sys.executable, "-m", "shardwise", *args[1:]]
    if len(args) > 1 and args[0] == "python" and args[1].startswith("examples/"):
        return [sys.executable, *args[1:]]
    return None


def run(command: str) -> str:
    argv = argv_for(command)
    if argv is None:
        raise SystemExit(f"console blocks may only run shardwise or python examples/...: {command}")
    proc = subprocess.run(argv, capture_output=True, text=True, env=ENV, cwd=ROOT, check=False)
    return _checked(command, proc.returncode, proc.stdout + proc.stderr)


def _checked(command: str, returncode: int, out: str) -> str:
    """A command's output (stdout, then stderr) as a block shows it; a crash or a failure stops here."""
    if "Traceback (most recent call last)" in out:  # the CLI never prints one: a crash, not docs
        raise SystemExit(f"{command} crashed; fix it before regenerating the docs:\n{out}")
    if returncode != 0:  # its error line would be written down as the block's output
        raise SystemExit(
            f"{command} exited with status {returncode}; a console block shows a command that works:\n{out}"
        )
    return "\n".join(line.rstrip() for line in out.rstrip("\n").splitlines())


def console_commands(body: str) -> list[str]:
    return [line[2:] for line in body.splitlines() if line.startswith("$ ")]


def commands_in(text: str, where: str = "") -> list[str]:
    """Every command the blocks of `text` run, in order; a command that may not be run stops here."""
    found = []
    for m in BLOCK.finditer(text):
        found += console_commands(m["body"]) if m["body"] is not None else [m["command"]]
    for command in found:
        if argv_for(command) is None:
            line = f"{where}: " if where else ""
            raise SystemExit(f"{line}console blocks may only run shardwise or python examples/...: {command}")
    return found


def run_in_process(command: str) -> str:
    """What `run(command)` returns, a `shardwise ...` command run by the CLI's `main` in this process
    (with ENV's COLUMNS, NO_COLOR and TERM, in ROOT, its stdout then its stderr as `run` joins them):
    no interpreter start and no imports per command, and the caches one command fills (the
    presets, the public runs' scenarios) serve the next. `python examples/...` still runs in a
    subprocess: the examples start their own and print through the file descriptors."""
    import contextlib
    import io
    import traceback

    args = shlex.split(command)
    if not args or args[0] != "shardwise":
        return run(command)
    from shardwise.cli import main

    out, err = io.StringIO(), io.StringIO()
    keys = ("COLUMNS", "NO_COLOR", "TERM")
    saved_env, saved_cwd = {k: os.environ.get(k) for k in keys}, os.getcwd()
    code = 0
    try:
        os.environ.update({k: ENV[k] for k in keys})
        os.chdir(ROOT)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(args[1:])
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                if not isinstance(exc.code, int | None):
                    print(exc.code, file=sys.stderr)
            except Exception:
                code = 1
                traceback.print_exc()
    finally:
        os.chdir(saved_cwd)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return _checked(command, code, out.getvalue() + err.getvalue())


def run_all(commands: Iterable[str], jobs: int | None = None, in_process: bool = False) -> dict[str, str]:
    """Each distinct command's output, the commands run `jobs` at a time (default: the CPUs); with
    `in_process`, the `shardwise` commands one after another in this process (`run_in_process`),
    the example scripts in subprocesses beside them."""
    unique = list(dict.fromkeys(commands))
    jobs = jobs or min(8, max(2, os.cpu_count() or 2))
    if not in_process:  # the validations (a minute or more each) first, so that none runs alone at the end
        first = sorted(unique, key=lambda c: not c.startswith("shardwise validate"))
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            done = dict(zip(first, pool.map(run, first), strict=True))
        return {c: done[c] for c in unique}
    apart = [c for c in unique if argv_for(c) is not None and not c.startswith("shardwise")]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        started = {c: pool.submit(run, c) for c in apart}
        here = {c: run_in_process(c) for c in unique if c not in started}
        return {c: started[c].result() if c in started else here[c] for c in unique}


def rendered(m: re.Match[str], outputs: dict[str, str]) -> str:
    """What the block matched by `m` should read, given each command's output."""
    if m["body"] is not None:
        parts = [f"$ {command}\n{outputs[command]}\n" for command in console_commands(m["body"])]
        return "```console\n" + "".join(parts) + "```"
    command = m["command"]
    return f"<!-- $ {command} -->\n{outputs[command].strip()}\n<!-- end -->"


def update(text: str, outputs: dict[str, str] | None = None) -> str:
    """`text` with every block regenerated (commands are run here unless their outputs are given)."""
    if outputs is None:
        outputs = run_all(commands_in(text))
    return BLOCK.sub(lambda m: rendered(m, outputs), text)


@dataclass(frozen=True)
class Stale:
    """A block whose text differs from what its commands print now."""

    path: str
    line: int
    kind: str
    commands: tuple[str, ...]
    old: str
    new: str

    def title(self) -> str:
        shown = "; ".join(f"$ {c}" for c in self.commands) or "(no command)"
        return f"{self.path}:{self.line}: {self.kind} is out of date: {shown}"

    def diff(self, context: int = 2, limit: int = 60) -> str:
        lines = list(
            difflib.unified_diff(
                self.old.splitlines(), self.new.splitlines(), "in the file", "a fresh run", n=context, lineterm=""
            )
        )
        if len(lines) > limit:
            lines = [*lines[:limit], f"... ({len(lines) - limit} more diff lines)"]
        return "\n".join(lines)


def stale_blocks(text: str, outputs: dict[str, str], path: str = "") -> list[Stale]:
    """Every block of `text` that a fresh run would change, in the order of the file."""
    stale = []
    for m in BLOCK.finditer(text):
        new = rendered(m, outputs)
        if new != m[0]:
            console = m["body"] is not None
            stale.append(
                Stale(
                    path=path,
                    line=text.count("\n", 0, m.start()) + 1,
                    kind="console block" if console else "generated region",
                    commands=tuple(console_commands(m["body"])) if console else (m["command"],),
                    old=m[0],
                    new=new,
                )
            )
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, help="Markdown files [default: README.md, docs/**/*.md]")
    parser.add_argument("--check", action="store_true", help="exit 1 if any block is out of date; change nothing")
    parser.add_argument("-j", "--jobs", type=int, default=None, help="commands run at once [default: the CPUs]")
    args = parser.parse_args(argv)

    paths = [p if p.is_absolute() else Path.cwd() / p for p in args.files] or markdown_files()
    texts = {path: path.read_text(encoding="utf-8") for path in paths}
    commands = [c for path, text in texts.items() for c in commands_in(text, relative(path))]
    outputs = run_all(commands, args.jobs)

    # the prose against the blocks as a fresh run prints them: numbers to change by hand
    drifted = [line for path, text in texts.items() for line in unquoted_numbers(update(text, outputs), relative(path))]
    for line in drifted:
        print(line, file=sys.stderr)
    if args.check:
        stale = [s for path, text in texts.items() for s in stale_blocks(text, outputs, relative(path))]
        for block in stale:
            print(block.title(), file=sys.stderr)
        if stale:
            print(f"\nthe first stale block:\n{stale[0].diff()}", file=sys.stderr)
            print(f"\n{len(stale)} block(s) out of date: run python tools/readme.py", file=sys.stderr)
        if drifted:
            print(f"{len(drifted)} number(s) in the prose to update by hand", file=sys.stderr)
        return 1 if stale or drifted else 0

    for path, text in texts.items():
        new = update(text, outputs)
        if new != text:
            path.write_text(new, encoding="utf-8")
            print(f"updated {relative(path)}")
    if drifted:
        print(f"{len(drifted)} number(s) in the prose to update by hand (above)", file=sys.stderr)
    return 1 if drifted else 0


if __name__ == "__main__":
    raise SystemExit(main())
