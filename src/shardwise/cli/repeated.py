"""Refuse an option given twice where click would keep the last value without a word.

click lets a single-valued option be repeated and keeps the last (`crossover --vary batch=1..8
--vary layers=8..32` swept the layers alone; `predict --tp 2 ... --tp 4` priced tp=4), and a
boolean pair given both ways (`--custom-all-reduce --no-custom-all-reduce`) likewise. Options
meant to repeat (`multiple=True`: `--plan`, `--intra-link`, `--vary` of sweep) and plain flags
(`--json --json` asks for one thing twice) pass.
"""

from __future__ import annotations

import click

# a hint after the error where a repeated option has a command made for several values
HINTS = {("crossover", "vary"): "; to vary several at once: `shardwise sweep --vary ... --vary ...`"}


def refuse_repeated(command: click.Command, args: list[str]) -> None:
    """A click.UsageError naming the first single-valued option of `command` that `args` repeat."""
    if isinstance(command, click.Group):  # its subcommand parses the rest
        return
    by_flag: dict[str, tuple[click.Option, bool]] = {}
    for p in command.params:
        if isinstance(p, click.Option) and not p.multiple and not p.count:
            by_flag.update({o: (p, True) for o in p.opts})
            by_flag.update({o: (p, False) for o in p.secondary_opts})
    seen: dict[str, tuple[str, str | None, bool]] = {}  # param name -> (flag, value, on/off spelling)
    i = 0
    while i < len(args):
        token = args[i]
        i += 1
        if token == "--":
            return
        flag, eq, inline = token.partition("=")
        if flag not in by_flag or not flag.startswith("-"):
            continue
        opt, positive = by_flag[flag]
        value: str | None = None
        if not opt.is_flag:
            value = inline if eq else (args[i] if i < len(args) else None)
            i += 0 if eq else opt.nargs
        name = str(opt.name)
        if name in seen:
            first, before, was_positive = seen[name]
            if not opt.is_flag:
                hint = HINTS.get((str(command.name), name), "")
                if flag == first:
                    raise click.UsageError(f"{first} is given twice ({before!r}, then {value!r}); give it once{hint}")
                raise click.UsageError(f"{first} {before!r} and {flag} {value!r} set one option; give one of them")
            if positive != was_positive:
                raise click.UsageError(f"{first} and {flag} contradict each other; give one")
        else:
            seen[name] = (flag, value, positive)
