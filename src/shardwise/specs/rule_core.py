"""A layout rule over arrays (`Rule`: the rule in words, where it holds, the one-line error at
the first point where it breaks), how the value types raise with rules (`raise_first`) and the
sweeps mask with them (`holds`), and the commonest rule, one field a multiple of another
(`divides`). The rules themselves: `specs.rules`, `specs.expert_rules`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

import numpy as np

from shardwise.arrays import single
from shardwise.specs._checks import Number, SpecError


class Rule(NamedTuple):
    rule: str  # the rule in words (what a sweep's or a plan search's "invalid because" says)
    ok: np.ndarray  # where it holds
    error: Callable[[], str]  # the one-line error at the first point where it breaks


def raise_first(rules: Iterable[Rule]) -> None:
    """Raise SpecError for the first rule that breaks anywhere."""
    for r in rules:
        ok = r.ok
        if not (bool(ok) if isinstance(ok, (bool, np.bool_)) else np.all(ok)):
            raise SpecError(r.error())


def holds(rules: Iterable[Rule]) -> np.ndarray | bool:
    """Where every rule holds."""
    out: np.ndarray | bool = True
    for r in rules:
        out = out & r.ok
    return out


def at_first(bad: np.ndarray, *arrays: Number) -> list[object]:
    """The values of `arrays` at the first point where `bad` holds."""
    shape = bad.shape
    i = int(np.flatnonzero(bad)[0]) if bad.ndim else 0
    return [np.broadcast_to(np.asarray(a), shape).flat[i].item() if shape else np.asarray(a).item() for a in arrays]


def divides(rule: str, field: str, value: Number, by_field: str, by: Number, why: str = "") -> Rule:
    """`value` is a multiple of `by`."""
    if single(value, by) and by != 0:  # one plan: Python's remainder (the same truth as np.mod's)
        a, b = value, by
        ok = np.bool_(a % b == 0)
    else:
        a, b = np.broadcast_arrays(np.asarray(value), np.asarray(by))
        ok = np.mod(a, b) == 0

    def error() -> str:
        x, y = at_first(~ok, a, b)
        suffix = f" ({why})" if why else ""
        return f"{field}: {x} is not divisible by {by_field}={y}{suffix}"

    return Rule(rule, ok, error)
