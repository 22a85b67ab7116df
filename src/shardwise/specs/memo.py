"""Values computed for one configuration at a time, kept for the next call that asks again.

The value types are frozen and compare by value, so a scalar configuration (a `Scenario` whose
fields are plain numbers) is its own key: the explorer moving one control, the planner
re-timing its best plans and a script pricing one layout after another ask for the same
configurations, or the same parts of them (the per-micro-batch stage costs read neither dp nor
the schedule), again and again. A `Memo` keeps the last `size` answers (the oldest dropped
first); a key that does not hash (a field holding an array) is never kept. The values are the
ones the computation returned, so a hit gives the same numbers to the bit
(tests/test_scalar_path.py). `ENABLED = False` (or `disabled()`) turns every memo off, as a cold
benchmark or a test that compares against a fresh computation needs; the model's module-level
constants are taken as fixed for the life of the process (a program that changes one calls
`clear_all()`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from types import MappingProxyType
from typing import Any, TypeVar

import numpy as np

from shardwise.specs.grouped import grouped_call

T = TypeVar("T")

ENABLED = True
_MISSING = object()
_ALL: list[Memo] = []


class Memo:
    """A bounded map from a configuration's key to what was computed for it."""

    def __init__(self, name: str, size: int = 1024) -> None:
        self.name = name
        self.size = size
        self._values: dict[Hashable, Any] = {}
        _ALL.append(self)

    def get_or_compute(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """The kept value for `key`, else `compute()` (kept when `key` hashes)."""
        if not ENABLED:
            return compute()
        try:
            value = self._values.get(key, _MISSING)
        except TypeError:  # an array among the fields: not a single configuration
            return compute()
        if value is _MISSING:
            value = compute()
            if len(self._values) >= self.size:
                del self._values[next(iter(self._values))]
            self._values[key] = value
        return value

    def clear(self) -> None:
        self._values.clear()


def clear_all() -> None:
    """Forget every kept value."""
    for memo in _ALL:
        memo.clear()


@contextmanager
def disabled() -> Iterator[None]:
    """Every memo off (and emptied) inside the block: each call computes afresh."""
    global ENABLED
    before = ENABLED
    ENABLED = False
    clear_all()
    try:
        yield
    finally:
        ENABLED = before


def kept(fn: Callable[..., T]) -> Callable[..., T]:
    """`fn`, a pure function of its arguments (and of its module's constants), with each answer
    kept per arguments when they hash (single numbers, specs, strings; an array argument is
    computed every time). An array in the answer is made read-only and a dict is handed out as a
    read-only view, so a caller cannot change a kept value in place; a 0-d array is kept as its
    numpy scalar (the same value)."""
    store = Memo(fn.__qualname__)
    values = store._values

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        if not ENABLED:
            return fn(*args, **kwargs)
        key = (args, tuple(kwargs.items())) if kwargs else args
        try:
            value = values.get(key, _MISSING)
        except TypeError:  # an array among the arguments: one value (0-d) keys by its type and value
            key = _scalar_key(args, kwargs)
            try:
                value = values.get(key, _MISSING)
            except TypeError:  # an array of many values: once per distinct combination of them
                return grouped_call(fn, args, kwargs)
        if value is _MISSING:
            value = unwrapped(fn(*args, **kwargs))
            if isinstance(value, dict):
                value = MappingProxyType(value)  # type: ignore[assignment]
            _read_only(value)
            if len(values) >= store.size:
                del values[next(iter(values))]
            values[key] = value
        return value  # type: ignore[no-any-return]

    return wrapper


def _scalar_key(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """The arguments with each 0-d array as (a marker, its dtype, its value); an array of many
    values is left as it is (the key then does not hash)."""

    def one(arg: Any) -> Any:
        if isinstance(arg, np.ndarray) and arg.ndim == 0:
            return (_ZERO_D, arg.dtype.str, arg.item())
        return arg

    return (*(one(a) for a in args), *((k, one(v)) for k, v in kwargs.items()))


_ZERO_D = object()


def unwrapped(value: Any) -> Any:
    """A 0-d array as its numpy scalar (the same value; arithmetic on it is several times
    cheaper), also among a tuple's items or a dict's values; anything else as it is."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value[()]
    if type(value) is tuple:
        return tuple(unwrapped(v) for v in value)
    if type(value) is dict:
        return {k: unwrapped(v) for k, v in value.items()}
    return value


def _read_only(value: object) -> None:
    if isinstance(value, np.ndarray):
        value.flags.writeable = False
    elif isinstance(value, tuple):
        for item in value:
            _read_only(item)
    elif hasattr(type(value), "__dataclass_fields__"):
        for item in value.__dict__.values():
            _read_only(item)


C = TypeVar("C", bound=type)


def hash_once(cls: C) -> C:
    """A frozen dataclass whose hash is computed once per instance (applied above
    `@dataclass(frozen=True)`): a model or a cluster is part of every key above, and hashing
    its fields each time took microseconds (a Scenario about 9 us). An instance holding arrays
    does not hash, as before (nothing is kept). The hash is not pickled: string hashes differ
    between processes. A `__post_init__` must not hash its own instance before it has set its
    last field (the hash kept would be of the fields then)."""
    fields_hash = cls.__hash__

    def __hash__(self: Any) -> int:
        try:
            return self.__dict__[_HASH]  # type: ignore[no-any-return]
        except KeyError:
            value = fields_hash(self)
            object.__setattr__(self, _HASH, value)
            return value  # type: ignore[no-any-return]

    def __getstate__(self: Any) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != _HASH}

    cls.__hash__ = __hash__  # type: ignore[assignment]
    cls.__getstate__ = __getstate__  # type: ignore[attr-defined]
    return cls


_HASH = "_hash_once"
