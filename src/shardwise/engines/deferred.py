"""Results whose secondary fields are computed on first read.

An estimate's headline numbers (a step time, a memory total) are what a sweep or a planner reads
for millions of configurations; its diagnostics (where the time goes, the bubble's share, the
communication hidden behind compute, the FLOP counts) are read for the few it shows. `deferred`
builds an instance of a frozen dataclass from its headline fields and a function that returns
the rest: the function runs once, when any of those fields is first read, and the instance
behaves as the class's own from then on (the same values as when every field is computed at once;
tests/test_deferred.py and the distinct-path tests compare them). `dataclasses.replace` and `dataclasses.fields` work as
usual; reading a field computes it. A field given as `Later(fn)` is computed apart, by `fn()` on
its own first read: a training estimate's memory, which a sweep reads and a calibration's fit,
pricing the same runs at hundreds of parameter values, does not.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_SUBCLASSES: dict[tuple[type, frozenset[str]], type] = {}
_BY_CALL: dict[tuple[object, ...], type] = {}
_UNSET = object()


class Later:
    """A field of `deferred` computed by `compute()` on its own first read, apart from the others;
    the value is kept here, so the copies `rebound` makes share it."""

    __slots__ = ("_compute", "_value")

    def __init__(self, compute: Callable[[], Any]) -> None:
        self._compute = compute
        self._value: Any = _UNSET

    def value(self) -> Any:
        if self._value is _UNSET:  # kept only once it succeeds: an error can be read again
            self._value = self._compute()
        return self._value


class _Computed:
    """A field computed on first read (a non-data descriptor: once the value is in the
    instance's `__dict__`, Python reads it from there)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.alone = f"_compute {name}"  # where a field given as `Later` keeps its computation

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        fields = obj.__dict__
        if self.name not in fields:  # kept until it succeeds: an error can be read again
            if self.alone in fields:
                fields[self.name] = fields[self.alone].value()
                del fields[self.alone]
            else:
                fields.update(fields["_compute"]())
                del fields["_compute"]
        return fields[self.name]


def deferred(cls: type[T], compute: Callable[[], dict[str, Any]], **eager: Any) -> T:
    """An instance of `cls` (a dataclass) with the fields in `eager` set and the others taken from
    `compute()`, called once on the first read of any of them; a field given as `Later(fn)` is
    `fn()`, called on its own first read (module docstring)."""
    names = tuple(eager)
    alone = {name: v for name, v in eager.items() if type(v) is Later}
    key = (cls, *names, *alone)  # the same fields given at the same call: the same subclass
    sub = _BY_CALL.get(key)
    if sub is None:
        every = frozenset(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]
        later = every - frozenset(eager) | frozenset(alone)
        sub = _BY_CALL[key] = _subclass(cls, later)
    out = object.__new__(sub)
    out.__dict__.update(eager, _compute=compute)
    for name, value in alone.items():
        del out.__dict__[name]
        out.__dict__[f"_compute {name}"] = value
    return out  # type: ignore[no-any-return]


def _subclass(cls: type, later: frozenset[str]) -> type:
    """`cls` with the fields `later` computed on first read, one per (class, fields)."""
    sub = _SUBCLASSES.get((cls, later))
    if sub is None:
        attrs: dict[str, Any] = {name: _Computed(name) for name in later}
        sub = type(cls.__name__, (cls,), {**attrs, "__doc__": cls.__doc__, "__qualname__": cls.__qualname__})
        _SUBCLASSES[(cls, later)] = sub
    return sub


def rebound(value: T, **fields: Any) -> T:
    """A copy of `value` (a dataclass instance, deferred or not) with `fields` set, its other
    fields (and a computation not yet run) shared: no field is computed or validated again."""
    out = object.__new__(type(value))
    out.__dict__.update(value.__dict__, **fields)
    return out
