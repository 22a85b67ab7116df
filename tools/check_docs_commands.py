"""Run every command that README.md and docs/**/*.md show, and say which still work as shown.

Where the commands are:
- ```console blocks: each `$ COMMAND` line; the lines under it, up to the next `$ `, are its output
  (compared exactly, as tools/readme.py writes them), and `<!-- $ COMMAND -->` ... `<!-- end -->`
  regions (compared exactly);
- ```bash, ```sh, ```shell and unlabelled fenced blocks: each line (`\\` continuations joined,
  `# comments` dropped) that runs shardwise, python, pip, ruff, cp or torchrun (an unlabelled block
  only if every line does). The next fenced block, unless it runs shardwise or python itself, right
  under it (blank lines between) or, after an `--emit` command, below some prose (no heading), is
  the output shown for the block's last command: an excerpt, whose lines must appear in the output
  in order and together; a line `...` stands for lines left out, one ending in ` ...` for the rest;
- with --kind inline, inline `shardwise ...` code in the prose (exit status only).

Each block's commands run in order in one fresh scratch directory holding copies of examples/ and
tools/ (what a command writes lands there), with COLUMNS=100, NO_COLOR and TERM=dumb as
tools/readme.py runs them. A command passes when it exits 0 and its shown output (if any) matches.
Commands that need PyTorch, a GPU, the network, a browser, a file the page does not give, or that
are placeholders, timing benchmarks or development chores are skipped, each with the reason.

    python tools/check_docs_commands.py                 # every file; exit 1 on a failure
    python tools/check_docs_commands.py docs/emit       # only these files or folders
    python tools/check_docs_commands.py --kind bash     # only commands of ```bash / plain blocks
    python tools/check_docs_commands.py --list          # what would run or be skipped, run nothing
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb"}  # as tools/readme.py
FENCE = re.compile(r"^(?P<fence>```|~~~)(?P<lang>[^\n]*)\n(?P<body>.*?)^(?P=fence)[ \t]*$", re.S | re.M)
REGION = re.compile(r"<!-- \$ (?P<command>.*?) -->\n(?P<body>.*?)<!-- end -->", re.S)
INLINE = re.compile(r"(?<!`)`(shardwise [^`]+)`(?!`)")
SHELL_LANGS = {"bash", "sh", "shell", ""}
COMMAND_WORDS = {"shardwise", "python", "python3", "pip", "ruff", "torchrun", "cp"}
# Arguments that name a file the command writes (so a later command of its block may read it).
OUTPUT_FLAGS = {"-o", "--out", "--output", "--plot", "--trace", "--out-dir"}
INPUT_SUFFIXES = (".csv", ".yaml", ".yml", ".json", ".log", ".parquet", ".txt")
PLACEHOLDERS = re.compile(r"(^|\s)(\.\.\.|NAME|FILE|PATH|RUNS\.csv|N|KEY=VALUE)(\s|$)|\{[^}]*,[^}]*\}|\$[A-Z_]|\*")


@dataclass(frozen=True)
class DocCommand:
    """One command a page shows: where, how it is shown, what output is shown under it."""

    path: str
    line: int
    kind: str  # console | generated | bash | inline
    command: str
    group: int  # the commands of one block run in order, in one directory
    shown: str | None = None  # the output shown (console, generated: exact; bash: an excerpt)
    skip: str | None = None  # why it is not run

    def where(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True)
class Run:
    """What one command printed, how it ended and how long it took."""

    exit_code: int
    output: str
    seconds: float


@dataclass(frozen=True)
class Result:
    command: DocCommand
    status: str  # ok | failed | stale | skipped
    exit_code: int | None = None
    output: str = ""
    seconds: float = 0.0
    detail: str = ""


def relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def markdown_files(args: Sequence[Path] = ()) -> list[Path]:
    """README.md and docs/**/*.md, or the files and folders given."""
    paths = [arg if arg.is_absolute() else Path.cwd() / arg for arg in args] or [ROOT / "README.md", ROOT / "docs"]
    return [file for path in paths for file in (sorted(path.rglob("*.md")) if path.is_dir() else [path])]


def logical_lines(body: str) -> list[tuple[int, str]]:
    """(offset of its first line, text) per shell line: `\\` continuations joined, `# comments` dropped."""
    out: list[tuple[int, str]] = []
    pending: list[str] = []
    for i, raw in enumerate(body.splitlines()):
        pending.append(raw.strip().removesuffix("\\").strip())
        if raw.rstrip().endswith("\\"):
            continue
        text = " ".join(p for p in pending if p)
        text = text[: _comment_at(text)].rstrip()
        if text:
            out.append((i + 1 - len(pending), text))
        pending = []
    return out


def _comment_at(text: str) -> int:
    """Where a `#` comment starts in a shell line (outside quotes, after a blank), else its length."""
    quote = None
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1].isspace()):
            return i
    return len(text)


def first_word(line: str) -> str:
    return line.split()[0] if line.split() else ""


# Why a command is not run here: the first pattern that matches a part (between `&&`) of it.
SKIPS = [
    (r"^(pip |python3? -m venv|\. |source )", "installs packages or sets up a virtualenv (network)"),
    (r"^(torchrun |shardwise measure\b)", "needs PyTorch and measures the machine it runs on (timings differ per run)"),
    (r"^shardwise explore\b", "starts a web server for a browser"),
    (r"^python3? benchmarks/", "a timing benchmark (minutes; the numbers differ per machine)"),
    (r"^python3? tools/(gpu_microbench|ring_bench)\.py", "needs PyTorch, and a GPU for its numbers"),
    (
        r"^python3? tools/(readme|check_docs_commands)\.py",
        "regenerates or checks the docs themselves (tests/test_readme.py)",
    ),
    (r"^python3? tools/fit_efficiency\.py", "refits and rewrites the GPUs' efficiency scales (the maintainers run it)"),
    (r"^python3? -m pytest\b", "the test suite itself"),
    (r"^(ruff|cp) ", "a development chore on the repository (tests/test_style.py runs ruff)"),
    (r"^(?!shardwise\b|python3? (examples|tools)/)", "not shardwise, nor a script of the repository"),
    (PLACEHOLDERS.pattern, "a placeholder, not a full command"),
]


def skip_reason(command: str) -> str | None:
    """Why a command is not run here, or None to run it."""
    parts = [part.strip() for part in command.split("&&")]
    return next((why for part in parts for pattern, why in SKIPS if re.search(pattern, part)), None)


def _files(command: str) -> tuple[list[str], list[str]]:
    """(read, written): data-file arguments, written where they follow an output flag."""
    try:
        words = shlex.split(command)
    except ValueError:
        return [], []
    files = [(w, i > 0 and words[i - 1] in OUTPUT_FLAGS) for i, w in enumerate(words)]
    read = [w for w, out in files if not out and w.endswith(INPUT_SUFFIXES) and "=" not in w]
    return read, [w for w, out in files if out]


def with_missing_inputs(commands: list[DocCommand]) -> list[DocCommand]:
    """Skip a command that reads a file neither the repository nor an earlier command of its block gives."""
    written: set[str] = set()
    out = []
    for c in commands:
        if c.skip is None:
            missing = [f for f in _files(c.command)[0] if f not in written and not (ROOT / f).exists()]
            if missing:
                c = replace(c, skip=f"needs {', '.join(missing)}, which the page does not give")
        written |= set(_files(c.command)[1])
        out.append(c)
    return out


def commands_in(text: str, path: str = "", inline: bool = False) -> list[DocCommand]:
    """Every command `text` shows, in the order of the file."""
    found: list[DocCommand] = []
    group = 0
    previous: tuple[int, list[DocCommand]] | None = None  # (end offset, commands) of the last shell block
    for m in FENCE.finditer(text):
        lang, body = m["lang"].strip().lower(), m["body"]
        line = text.count("\n", 0, m.start()) + 2  # the block's first line
        group += 1
        last, previous = previous, None
        if lang == "console":
            found += _console(body, path, line, group)
        elif lang in SHELL_LANGS and last and _shows_output(last[1][-1], text[last[0] : m.start()], body):
            found[found.index(last[1][-1])] = replace(last[1][-1], shown=body.rstrip("\n"))
        elif lang in SHELL_LANGS:
            lines = logical_lines(body)
            if lang == "" and not all(first_word(t) in COMMAND_WORDS for _, t in lines):
                continue  # an unlabelled block runs commands only if every line is one (else it is text)
            block = [DocCommand(path, line + off, "bash", t, group, skip=skip_reason(t)) for off, t in lines]
            block = with_missing_inputs([c for c in block if first_word(c.command) in COMMAND_WORDS])
            found += block
            previous = (m.end(), block) if block else None
    for m in REGION.finditer(text):
        group += 1
        line, command = text.count("\n", 0, m.start()) + 1, m["command"]
        found.append(DocCommand(path, line, "generated", command, group, m["body"].strip(), skip_reason(command)))
    if inline:
        prose = FENCE.sub(lambda f: "\n" * f[0].count("\n"), text)
        for m in INLINE.finditer(prose):
            group += 1
            command = " ".join(m[1].split())
            line = prose.count("\n", 0, m.start()) + 1
            (c,) = with_missing_inputs([DocCommand(path, line, "inline", command, group, skip=skip_reason(command))])
            found.append(c if c.skip else replace(c, skip=_prose_mention(command)))
    return sorted(found, key=lambda c: c.line)


def _prose_mention(command: str) -> str | None:
    """Inline code in prose often names a command or one of its flags, not a command to copy: run
    only `validate` and `presets` ones and those that name a --model."""
    words = command.split()
    if len(words) > 2 and (words[1] in ("validate", "presets") or "--model" in words):
        return None
    return "a command or its flag named in prose (no --model), not a full command"


def _shows_output(command: DocCommand, between: str, body: str) -> bool:
    """Is the fenced block `body` after `command`'s block (`between` between them) its output? Not if it
    runs shardwise itself; else yes right under it (blank lines between), and below some prose (no
    heading) under an `--emit` command."""
    if first_word(body) in ("shardwise", "python", "python3"):
        return False
    if not between.strip():
        return True
    return "--emit" in command.command.split() and not re.search(r"^#", between, re.M)


def _console(body: str, path: str, line: int, group: int) -> list[DocCommand]:
    out: list[DocCommand] = []
    lines = body.splitlines()
    starts = [i for i, t in enumerate(lines) if t.startswith("$ ")]
    for n, i in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        command = lines[i][2:]
        shown = "\n".join(lines[i + 1 : end]).rstrip("\n")
        out.append(DocCommand(path, line + i, "console", command, group, shown, skip_reason(command)))
    return out


def argv_for(command: str) -> list[str]:
    words = shlex.split(command)
    if words[0] == "shardwise":
        return [sys.executable, "-m", "shardwise", *words[1:]]
    return [sys.executable, *words[1:]]  # python / python3 SCRIPT ...


def excerpt_matches(shown: str, output: str) -> bool:
    """Do the shown lines appear in `output` in order, each run of lines between `...` lines together?
    A shown line ending in ` ...` matches an output line that starts with what comes before it."""
    out = [line.rstrip() for line in output.splitlines()]
    segments: list[list[str]] = [[]]
    for line in shown.splitlines():
        if line.strip() == "...":
            segments.append([])
        elif line.strip():
            segments[-1].append(line.rstrip())
    at = 0
    for segment in (s for s in segments if s):
        for start in range(at, len(out) - len(segment) + 1):
            if all(_line_matches(want, got) for want, got in zip(segment, out[start:], strict=False)):
                at = start + len(segment)
                break
        else:
            return False
    return True


def _line_matches(want: str, got: str) -> bool:
    if want.endswith(" ..."):
        return got.startswith(want[:-4].rstrip())
    return want == got


def _scratch() -> Path:
    work = Path(tempfile.mkdtemp(prefix="shardwise-docs-"))
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("examples", "tools"):
        shutil.copytree(ROOT / name, work / name, ignore=ignore)
    (work / "docs" / "figures").mkdir(parents=True)
    return work


def run_sequence(commands: tuple[str, ...], timeout_s: float = 600) -> list[Run]:
    """Run commands in order in one fresh scratch directory (examples/ and tools/ copied into it)."""
    work = _scratch()
    runs = []
    try:
        for command in commands:
            start = time.perf_counter()
            try:
                proc = subprocess.run(
                    argv_for(command), capture_output=True, text=True, env=ENV, cwd=work, timeout=timeout_s
                )
                code, text = proc.returncode, proc.stdout + proc.stderr
            except subprocess.TimeoutExpired:
                code, text = -1, f"timed out after {timeout_s:.0f} s"
            output = "\n".join(line.rstrip() for line in text.rstrip("\n").splitlines())
            runs.append(Run(code, output, time.perf_counter() - start))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return runs


def verdict(c: DocCommand, run: Run | None) -> Result:
    """Skipped; failed (non-zero exit); stale (the shown output differs); or ok."""
    if run is None:
        return Result(c, "skipped", detail=c.skip or "")
    code, output, seconds = run.exit_code, run.output, run.seconds
    if code != 0:
        last = output.splitlines()[-1] if output else ""
        return Result(c, "failed", code, output, seconds, f"exit {code}: {last}")
    exact = c.kind in ("console", "generated")
    if c.shown is None or (output.strip() == c.shown.strip() if exact else excerpt_matches(c.shown, output)):
        return Result(c, "ok", code, output, seconds)
    return Result(c, "stale", code, output, seconds, "the output shown differs from a fresh run")


def run_all(commands: Iterable[DocCommand], jobs: int = 2) -> list[Result]:
    """Every command's result, in the order given. The commands of a block run in order in one directory;
    a block whose commands were already run (the same ones, anywhere) is not run again."""
    groups: dict[tuple[str, int], list[DocCommand]] = {}
    for c in commands:
        groups.setdefault((c.path, c.group), []).append(c)
    sequences = {tuple(c.command for c in g if not c.skip): g for g in groups.values()}
    sequences.pop((), None)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        runs = dict(zip(sequences, pool.map(run_sequence, sequences), strict=True))
    results: list[Result] = []
    seen: set[tuple[str, ...]] = set()
    for g in groups.values():
        sequence = tuple(c.command for c in g if not c.skip)
        ran = iter(runs.get(sequence, []))
        block = [verdict(c, None if c.skip else next(ran)) for c in g]
        if sequence in seen:  # run once, for the first block that shows it: its time counted there
            block = [replace(r, seconds=0.0) for r in block]
        seen.add(sequence)
        results += block
    return results


def report(results: list[Result], verbose: bool = False) -> str:
    """A line per command (and why it was skipped, how it failed), then the counts."""
    lines = []
    for r in results:
        took = "" if r.status == "skipped" else f"{r.seconds:.1f}s"
        lines.append(f"{r.status:8} {r.command.where():32} {r.command.kind:9} {took:>6}  $ {r.command.command}")
        lines += [f"{'':51}{'why: ' * (r.status == 'skipped')}{r.detail}"] if r.detail else []
        if r.status == "stale" or (verbose and r.status == "failed"):
            lines += [f"{'':51}| {line}" for line in r.output.splitlines()[-40:]]  # the end: where launches are
    n = {s: sum(r.status == s for r in results) for s in ("ok", "stale", "failed", "skipped")}
    lines.append(
        f"\n{len(results)} commands found: {len(results) - n['skipped']} run ({n['ok']} ok, {n['stale']} with stale "
        f"output, {n['failed']} failed), {n['skipped']} skipped; {sum(r.seconds for r in results):.0f} s of commands"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, help="Markdown files or folders [default: README.md, docs/]")
    kinds = ["console", "generated", "bash", "inline"]
    parser.add_argument("--kind", choices=kinds, action="append", help="only these [default: all but inline]")
    parser.add_argument("--list", action="store_true", help="list the commands and why any is skipped; run nothing")
    parser.add_argument("-j", "--jobs", type=int, default=2, help="blocks run at once [default: 2]")
    parser.add_argument("-v", "--verbose", action="store_true", help="show a failed command's output")
    args = parser.parse_args(argv)
    kinds = args.kind or kinds[:3]
    files = {relative(path): path.read_text(encoding="utf-8") for path in markdown_files(args.files)}
    commands = [
        c for path, text in files.items() for c in commands_in(text, path, "inline" in kinds) if c.kind in kinds
    ]
    if args.list:
        for c in commands:
            print(f"{c.where():32} {c.kind:9} {'skip: ' + c.skip if c.skip else 'run':40.40} $ {c.command}")
        return 0
    results = run_all(commands, args.jobs)
    print(report(results, args.verbose))
    return 1 if any(r.status in ("failed", "stale") for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
