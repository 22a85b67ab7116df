"""Array helpers for hot paths, shared by every layer."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # not at run time: shardwise.specs imports this module
    from shardwise.specs._checks import Number


def where(condition: Number, a: Number, b: Number) -> Number:
    """`np.where(condition, a, b)`, but a condition that is one value (a plan's scalar field, as in
    a sweep's grid) returns `a` or `b` as it is instead of a full-size copy of it. The values
    are the same; the result may keep a smaller (broadcastable) shape."""
    if type(condition) in _SINGLE or np.ndim(condition) == 0:
        return a if bool(condition) else b
    return np.where(condition, a, b)


def plus(a: Number, b: Number) -> Number:
    """`a + b`, without a pass over `a` when `b` is a scalar zero (an overhead left at its default)."""
    if (type(b) in _SINGLE or np.ndim(b) == 0) and float(b) == 0.0:
        return a
    return a + b


def sorted_distinct(values: Any) -> np.ndarray:
    """The distinct values, ascending (`np.unique` of numbers without NaN, without its lazy
    import of numpy.ma, about 15 ms of a command's start with numpy 2.4)."""
    a = np.sort(np.asarray(values).ravel())
    if a.size < 2:
        return a
    return a[np.concatenate(([True], a[1:] != a[:-1]))]


# ---- One configuration at a time --------------------------------------------------------------
# A scalar configuration (a Plan of plain numbers) runs the same formulas as an array-valued one,
# but numpy's functions cost about a microsecond each on single numbers (np.select 8 us, np.choose
# 2.6 us, np.any 2 us) against tens of nanoseconds for Python's own operations. The helpers below
# are their numpy namesakes, with a branch for operands that are all single numbers (Python
# numbers, numpy scalars or 0-d arrays) that gives the same value to the bit: a float64
# operation is the same IEEE operation in numpy and in Python, and the comparisons below pick the
# operand numpy's loops pick (NaN propagated, the second operand on a tie, so the sign of a zero
# is numpy's too; `tests/test_scalar_path.py` compares every number of an estimate, byte for
# byte). A 0-d array comes back as its numpy scalar (the same value). Anything else goes to numpy
# unchanged, so an array-valued evaluation makes the same calls as before.
_SINGLE = frozenset((float, int, bool, np.float64, np.int64, np.bool_, np.float32, np.int32))
_NOT_ONE = object()


def _one(value: Any) -> Any:
    """`value` as a single number (a 0-d array as its numpy scalar), else `_NOT_ONE`."""
    kind = type(value)
    if kind in _SINGLE:
        return value
    if kind is np.ndarray and value.ndim == 0:
        return value[()]
    if isinstance(value, (int, float, np.generic)):  # an IntEnum member, another numpy scalar
        return value
    return _NOT_ONE


def single(*values: Any) -> bool:
    """All of `values` are single numbers (or 0-d arrays)."""
    return all(_one(v) is not _NOT_ONE for v in values)


def one_value(value: Any) -> bool:
    """`np.ndim(value) == 0`: a single number or a 0-d array."""
    return _one(value) is not _NOT_ONE or np.ndim(value) == 0


def as_array(value: Any) -> Any:
    """`np.asarray(value)`; a single number comes back as a number (its comparisons and
    arithmetic give the same values as a 0-d array's)."""
    if type(value) in _SINGLE:
        return value
    one = _one(value)
    return np.asarray(value) if one is _NOT_ONE else one


def as_float(value: Any) -> Any:
    """`np.asarray(value, dtype=float)`; a single number becomes a numpy float64 (the same value,
    and numpy's rules for a division by zero)."""
    if type(value) in _SINGLE:
        return np.float64(value)
    one = _one(value)
    return np.asarray(value, dtype=float) if one is _NOT_ONE else np.float64(one)


def as_bool(value: Any) -> Any:
    """`np.asarray(value, dtype=bool)`; a single value becomes a numpy bool (so `~` negates it)."""
    one = _one(value)
    return np.asarray(value, dtype=bool) if one is _NOT_ONE else np.bool_(one)


def ifelse(condition: Any, a: Any, b: Any) -> Any:
    """`np.where(condition, a, b)`; with three single numbers, `a` or `b` itself."""
    if type(condition) in _SINGLE and type(a) in _SINGLE and type(b) in _SINGLE:
        return a if condition else b
    c, x, y = _one(condition), _one(a), _one(b)
    if c is _NOT_ONE or x is _NOT_ONE or y is _NOT_ONE:
        return np.where(condition, a, b)
    return x if c else y


def maximum(a: Any, b: Any) -> Any:
    """`np.maximum(a, b)`; for two single numbers the one numpy returns (NaN wins, `b` on a tie)."""
    if type(a) in _SINGLE and type(b) in _SINGLE:
        return a if (a > b or a != a) else b
    x, y = _one(a), _one(b)
    if x is _NOT_ONE or y is _NOT_ONE:
        return np.maximum(a, b)
    return x if (x > y or x != x) else y


def minimum(a: Any, b: Any) -> Any:
    """`np.minimum(a, b)`; for two single numbers the one numpy returns (NaN wins, `b` on a tie)."""
    if type(a) in _SINGLE and type(b) in _SINGLE:
        return a if (a < b or a != a) else b
    x, y = _one(a), _one(b)
    if x is _NOT_ONE or y is _NOT_ONE:
        return np.minimum(a, b)
    return x if (x < y or x != x) else y


def select(conditions: list[Any], choices: list[Any], default: Any = 0) -> Any:
    """`np.select(conditions, choices, default)`; single numbers give the first true choice."""
    if type(default) in _SINGLE and all(type(x) in _SINGLE for x in (*conditions, *choices)):
        for condition, choice in zip(conditions, choices, strict=True):
            if condition:
                return choice
        return default
    ones = [_one(x) for x in (*conditions, *choices, default)]
    if any(x is _NOT_ONE for x in ones):
        return np.select(conditions, choices, default)
    n = len(conditions)
    for condition, choice in zip(ones[:n], ones[n : 2 * n], strict=True):
        if condition:
            return choice
    return ones[-1]


def choose(index: Any, choices: list[Any]) -> Any:
    """`np.choose(index, choices)`; a single index among single numbers picks one of them."""
    if type(index) in _SINGLE and all(type(x) in _SINGLE for x in choices):
        return choices[int(index)]
    ones = [_one(x) for x in (index, *choices)]
    if any(x is _NOT_ONE for x in ones):
        return _choose_many(index, choices)
    return ones[1 + int(ones[0])]


def _choose_many(index: Any, choices: list[Any]) -> Any:
    """`np.choose(index, choices)` over an array of whole numbers and float64 choices, as one
    `np.where` per distinct choice object: np.choose took about ten additions' time per element,
    np.where about one where the index runs in blocks (a distinct plan's rows, grouped by the
    fields that branch). Each element is its choice's value, as np.choose gives it."""
    index = np.asarray(index)
    floats = all(type(c) in (float, np.float64) or (type(c) is np.ndarray and c.dtype == np.float64) for c in choices)
    if index.dtype.kind not in "iu" or index.ndim == 0 or not floats:
        return np.choose(index, choices)
    groups: dict[int, tuple[Any, list[int]]] = {}
    for k, c in enumerate(choices):
        groups.setdefault(id(c), (c, []))[1].append(k)
    items = list(groups.values())
    if len(items) == 1:
        return np.choose(index, choices)
    out = items[-1][0]
    for value, ks in items[-2::-1]:
        out = np.where(_among(index, ks), value, out)
    return out


def _among(index: np.ndarray, ks: list[int]) -> np.ndarray:
    mask = index == ks[0]
    for k in ks[1:]:
        mask |= index == k
    return mask


def sqrt(value: Any) -> Any:
    """`np.sqrt(value)`; a single number >= 0 through `math.sqrt` (both are IEEE 754's correctly
    rounded square root: the same bits)."""
    if type(value) in _SINGLE and value >= 0:
        return math.sqrt(value)
    return np.sqrt(value)


def any_true(value: Any) -> bool:
    """`bool(np.any(value))`."""
    one = _one(value)
    return bool(np.any(value)) if one is _NOT_ONE else bool(one)
