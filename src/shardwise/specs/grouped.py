"""A kept function (`specs.memo.kept`) called with arrays of many configurations, computed once
per distinct combination of the arrays it is given and gathered back (issue 38).

The parts of the cost model kept per their arguments read a few plan fields each (a layer's
activations: the micro-batch, tp, sequence parallelism and recomputation; the groups' placement:
tp, dp, pp and cp), so a million random plans, or a third of a million distinct ones, hold a few
dozen combinations of them: each part is priced over those and gathered back, instead of over
every configuration. The arrays are coded as `specs.distinct` codes a plan (a distinct plan's
fields come with their codes, `distinct.known_codes`; other whole-number arrays are coded here;
whole numbers held as floats through their integer values), the codes combined into one key per
configuration and grouped by a table. The same numbers: the functions are elementwise, and each
group is priced at one of its own configurations (`tests/test_distinct.py` compares with every
configuration priced). `GROUPED_CALLS = False` turns it off; so does `memo.disabled()`.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from shardwise.specs.distinct import (
    MAX_DISTINCT_SHARE,
    MIN_CONFIGURATIONS,
    TABLE_KEYS_PER_CONFIGURATION,
    _Codes,
    _combine,
    _leaves,
    _rebuild,
    group_rows,
    known_codes,
)

GROUPED_CALLS = True
# The groups of the last few sets of arrays (the same plan fields are read by several parts).
_GROUPS: dict[frozenset[int], tuple[list[weakref.ref[np.ndarray]], np.ndarray, np.ndarray]] = {}
_GROUPS_KEPT = 16


def grouped_call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """`fn(*args, **kwargs)`, computed once per distinct combination of its array arguments (and
    of the arrays a spec among them holds: a context-parallel rank's model) when they are flat
    arrays of whole numbers of one length (at least MIN_CONFIGURATIONS) whose combinations are
    at most MAX_DISTINCT_SHARE of it; otherwise as given."""
    if not GROUPED_CALLS:
        return fn(*args, **kwargs)
    arrays: list[np.ndarray] = []
    specs: dict[int, list[tuple[tuple[str, ...], np.ndarray]]] = {}  # an argument's arrays by path
    for a in (*args, *kwargs.values()):
        if type(a) is np.ndarray:
            if a.size > 1:
                arrays.append(a)
        elif type(a) in (tuple, list):
            if _holds_array(a):
                return fn(*args, **kwargs)  # arrays inside a tuple (a stage's parameters): not grouped
        elif hasattr(type(a), "__dataclass_fields__") and (leaves := _leaves(a)):
            specs[id(a)] = leaves
            arrays += [x for _, x in leaves]
    n = arrays[0].size if arrays else 0
    if n < MIN_CONFIGURATIONS or any(a.ndim != 1 or a.size != n for a in arrays):
        return fn(*args, **kwargs)
    groups = _groups(arrays, n)
    if groups is None:
        return fn(*args, **kwargs)
    rows, inverse = groups

    def one(a: Any) -> Any:
        if type(a) is np.ndarray:
            return a.take(rows) if a.size > 1 else a
        leaves = specs.get(id(a))
        return a if leaves is None else _rebuild(a, {path: x.take(rows) for path, x in leaves}, checked=True)

    value = fn(*(one(a) for a in args), **{k: one(v) for k, v in kwargs.items()})
    return _gathered(value, inverse, rows.size)


def _holds_array(value: Any) -> bool:
    if type(value) in (tuple, list):
        return any(_holds_array(v) for v in value)
    return isinstance(value, np.ndarray) and value.size > 1


def groups_of(arrays: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray] | None:
    """(one row of each distinct combination of the values of `arrays`, each row's group) for
    flat arrays of whole numbers of one length (at least MIN_CONFIGURATIONS) whose combinations
    are at most MAX_DISTINCT_SHARE of it, else None."""
    n = arrays[0].size if arrays else 0
    if n < MIN_CONFIGURATIONS or any(type(a) is not np.ndarray or a.shape != (n,) for a in arrays):
        return None
    return _groups(arrays, n)


def _groups(arrays: list[np.ndarray], n: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(one row of each distinct combination of `arrays`' values, each row's group), or None
    when they do not group (continuous values, too many combinations). Kept for the last few
    sets of arrays, by identity."""
    ident = frozenset(map(id, arrays))
    kept = _GROUPS.get(ident)
    if kept is not None:
        refs, rows, inverse = kept
        if all(ref() is not None for ref in refs):  # the same arrays, alive (ids not reused)
            return rows, inverse
    coded = []
    bound = 1
    for a in {id(a): a for a in arrays}.values():
        codes = _codes(a, n)
        if codes is None:
            return None
        coded.append(codes)
        bound *= codes[1]
        if bound > TABLE_KEYS_PER_CONFIGURATION * n:  # a sort would cost more than it saves
            return None
    rows, inverse = group_rows(_combine(coded, n), bound)
    if rows.size > MAX_DISTINCT_SHARE * n:
        return None
    if len(_GROUPS) >= _GROUPS_KEPT:
        _GROUPS.pop(next(iter(_GROUPS), None), None)  # the oldest (a thread may have dropped it)

    def forget(_: object) -> None:  # an array freed: its groups go with it
        _GROUPS.pop(ident, None)

    _GROUPS[ident] = ([weakref.ref(a, forget) for a in arrays], rows, inverse)
    return rows, inverse


def _codes(a: np.ndarray, n: int) -> tuple[np.ndarray, int] | None:
    """(codes 0..size-1, size) of a flat array of whole numbers (floats holding whole numbers
    through their integer values, unless one is -0.0), else None."""
    known = known_codes(a)
    if known is not None:
        return known
    if a.dtype.kind not in "iub":
        return None
    c = _Codes(a, a.shape, n)
    return (c.codes(), c.size) if c.size else None


def _gathered(value: Any, inverse: np.ndarray, u: int) -> Any:
    """Every array of `value` over the `u` groups gathered back to one value per configuration."""
    if type(value) is np.ndarray:
        return value.take(inverse) if value.ndim == 1 and value.shape[0] == u else value
    if type(value) in (tuple, list):
        return type(value)(_gathered(v, inverse, u) for v in value)
    if type(value) is dict:
        return {k: _gathered(v, inverse, u) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # a stage split
        changes = {f.name: _gathered(getattr(value, f.name), inverse, u) for f in dataclasses.fields(value) if f.init}
        return dataclasses.replace(value, **changes)
    return value
