"""The click machinery the shared flags are made of: options with hidden old spellings
(`alias_option`), a callback that refuses an empty name, decorators stacked into one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

F = Callable[..., Any]


class Aliased(click.Option):
    """An option whose old spellings (`hidden_aliases`) still work but are left out of --help:
    one name per meaning across the commands, the old ones kept for a release."""

    def __init__(self, *args: Any, hidden_aliases: tuple[str, ...] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hidden_aliases = hidden_aliases

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        shown, self.opts = self.opts, [o for o in self.opts if o not in self.hidden_aliases]
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts = shown


def alias_option(*decls: str, old: tuple[str, ...] = (), **kwargs: Any) -> F:
    """click.option with old spellings accepted but hidden (see `Aliased`)."""
    return click.option(*decls[:1], *old, *decls[1:], cls=Aliased, hidden_aliases=old, **kwargs)


def non_empty(hint: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A click callback that refuses an empty name (`--gpu ''` must not quietly mean "none given")."""

    def check(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        from shardwise.errors import SpecError

        for v in value if isinstance(value, tuple) else (value,):
            if isinstance(v, str) and not v.strip():
                flag = param.opts[0] if param.opts else param.name
                raise SpecError(f"{flag}: an empty name is not allowed; {hint}")
        return value

    return check


class FiniteRange(click.FloatRange):
    """click's FloatRange, refusing NaN too (which compares False with both bounds and so got through)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        import math

        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not allowed; give a finite number {self._describe_range()}", param, ctx)
        return super().convert(value, param, ctx)


def an_input(hint: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """`non_empty` for a flag naming an input: `-` is refused too (standard input is not read,
    `files.refuse_stdin`), where it was looked up as a preset's name or a file of that name."""
    empty = non_empty(hint)

    def check(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        from shardwise.files import refuse_stdin

        for v in value if isinstance(value, tuple) else (value,):
            refuse_stdin(v, param.opts[0] if param.opts else str(param.name))
        return empty(ctx, param, value)

    return check


def model_name(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """--model's callback: an empty name refused; a directory holding a config.json (a Hugging Face
    snapshot) read as that file."""
    from shardwise.presets import model_path

    value = an_input(NAME_OR_FILE)(ctx, param, value)
    return model_path(value) if isinstance(value, str) else value


NAME_OR_FILE = "give a preset name or a YAML file"
LINK_NAME = "give a preset name, a YAML file or a rate like 600GB/s"


def stack_options(*decorators: F) -> F:
    """One decorator applying `decorators` in order, the first outermost (as if written one above another)."""

    def apply(func: F) -> F:
        for d in reversed(decorators):
            func = d(func)
        return func

    return apply


class PerSecond(click.ParamType):
    """A rate given as a plain number of `unit` per second ("5", not "5req/s"): a refusal that says
    the unit rather than click's "is not a valid float" (review 50 #12)."""

    name = "float"

    def __init__(self, unit: str) -> None:
        self.unit = unit

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, float):
            return value
        try:
            return float(value)
        except (TypeError, ValueError):
            self.fail(
                f"{value!r} is not a number; the unit is {self.unit} per second: give a number such as 5", param, ctx
            )
