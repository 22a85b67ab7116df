"""One output convention for the commands that write a file: `-o/--output FILE`, the format from
the extension, `-` for stdout; the spellings of earlier releases kept as hidden aliases."""

from __future__ import annotations

from typing import Any

from shardwise.cli.options import alias_option

STDOUT = "-"


def output_option(allowed: tuple[str, ...], what: str, old: tuple[str, ...] = (), stdout: str = "") -> Any:
    """`-o/--output FILE` (dest `output_path`): `what` is written, as `allowed` extensions say;
    `stdout`: what `-` prints (empty: `-` is not offered)."""
    dash = f"; - prints {stdout}" if stdout else ""
    return alias_option(
        "--output",
        "-o",
        "output_path",
        old=old,
        metavar="FILE",
        help=f"Write {what} ({', '.join(allowed)}, by the extension{dash}).",
    )


def check(path: str | None, allowed: tuple[str, ...], stdout: bool = True, json_flag: bool = False) -> None:
    """Fail before any work if `path` cannot be written (`-`: stdout, where allowed); `json_flag`:
    --json was given, which prints too, so `-o -` beside it is refused (as plan and crossover do)."""
    from shardwise.cli.options import check_output_path
    from shardwise.errors import SpecError

    if path is None:
        return
    if path == STDOUT:
        if not stdout:
            raise SpecError(f"-o -: this command writes a file; give a name ending in {' or '.join(allowed)}")
        if json_flag:
            raise SpecError("give --json or -o -, not both (both print)")
        return
    check_output_path(path, allowed, "-o")


def write_text(path: str, text: str) -> None:
    """`text` to `path` atomically (the whole file or none), or to stdout for `-`."""
    import click

    if path == STDOUT:
        click.echo(text, nl=False)
        return
    from shardwise.atomic import atomic_path

    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
