"""Evaluate each distinct configuration once: the cost model is elementwise, so a million plans
drawn from a few values per field (a planner's candidates, random layouts of one model, a
calibration's stacked runs) need only their distinct combinations priced, then gathered back.

`evaluate_distinct(fn, scn)` finds the array-valued fields of the scenario (model, hardware and
plan), codes each one's values as dense integers (a whole-number field through a table over its
range, a field given as a small array, such as a sweep axis, by its distinct values), combines
the codes into one key per configuration and, when the distinct keys are at most a quarter of
the configurations, runs `fn` on one scenario per distinct key and expands every array of the
result back to the full shape. Otherwise (a grid of broadcast axes, whose points all differ, or
continuous values) it runs `fn` on the scenario as given. The results are the same numbers either way
(tests/test_distinct.py compares both paths on random inputs): the model never mixes elements.

`evaluate_grouped(fn, scn, exclude)` does the same for a part of the model that does not read
some fields: a planner's plans differ in dp, the schedule or the ZeRO stage while the cost of a
layer depends on neither, so the layer costs are priced once per group of plans that agree on
every other field and gathered back (`GROUPING` False turns it off, for the tests that compare).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")

# Below this many configurations the bookkeeping costs more than it saves.
MIN_CONFIGURATIONS = 4096
# Deduplicate only when the distinct configurations are at most this share of them.
MAX_DISTINCT_SHARE = 0.25
# Keys up to this many times the configurations are marked in a table (linear time); larger
# key spaces are sorted.
TABLE_KEYS_PER_CONFIGURATION = 8
# A whole-number field whose smallest value is at most this is coded through a table indexed by
# the values themselves (no pass to subtract the smallest).
SMALL_OFFSET = 64
# evaluate_grouped prices groups (False: every configuration, the reference the tests compare with)
GROUPING = True


def _leaves(obj: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], np.ndarray]]:
    """(path, array) of every array-valued field of a tree of dataclasses (size > 1)."""
    out = []
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            out += _leaves(value, (*path, f.name))
        elif isinstance(value, np.ndarray) and value.size > 1:
            out.append(((*path, f.name), value))
    return out


def _rebuild(obj: Any, values: dict[tuple[str, ...], np.ndarray], path: tuple[str, ...] = ()) -> Any:
    """`obj` with the fields at `values`' paths replaced (nested dataclasses rebuilt)."""
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        here = (*path, f.name)
        if here in values:
            changes[f.name] = values[here]
        else:
            value = getattr(obj, f.name)
            nested = dataclasses.is_dataclass(value) and not isinstance(value, type)
            if nested and any(p[: len(here)] == here for p in values):
                changes[f.name] = _rebuild(value, values, here)
    return dataclasses.replace(obj, **changes) if changes else obj


class _Codes:
    """One field coded as dense integers 0..size-1 over the full shape, and the values back
    (size 0: a field of continuous values, not coded)."""

    def __init__(self, array: np.ndarray, shape: tuple[int, ...], n: int) -> None:
        self.full = array.size == n  # one value per configuration (not a broadcast axis)
        self.values: np.ndarray | None = None
        self.size = 0
        if not self.full:  # a broadcast axis: code its distinct values
            self.values, inverse = np.unique(array, return_inverse=True)
            self._codes = np.broadcast_to(inverse.reshape(array.shape), shape).reshape(-1)
        elif array.dtype.kind in "iub":  # whole numbers: a table over their range
            flat = array.reshape(-1)
            if flat.dtype.kind == "b":
                flat = flat.view(np.uint8)
            low, high = int(flat.min()), int(flat.max())
            # a table indexed by the values themselves when they start near 0 (tp, pp, a
            # micro-batch: no pass to shift them), else by value - low
            base = 0 if 0 <= low <= SMALL_OFFSET else low
            span = high - base + 1
            if span <= TABLE_KEYS_PER_CONFIGURATION * n:
                index = flat - base if base else flat
                seen = np.zeros(span, dtype=bool)
                seen[index] = True
                present = np.flatnonzero(seen)
                self.values = (present + base).astype(array.dtype)
                if len(present) == span:  # every value of the range (a recompute or ZeRO column)
                    self._codes = index
                else:  # the codes through a lookup table (int32: half the bytes of the gather)
                    lookup = np.cumsum(seen, dtype=np.int64) - 1
                    self._codes = lookup.astype(np.int32 if n < 2**31 else np.int64).take(index)
            else:
                self.values, self._codes = np.unique(flat, return_inverse=True)
                self.values = self.values.astype(array.dtype)
        if self.values is not None:
            self.size = len(self.values)

    def codes(self) -> np.ndarray:
        """The codes, of some integer type (`_combine` widens them)."""
        return self._codes

    def decode(self, codes: np.ndarray) -> np.ndarray:
        assert self.values is not None
        return self.values[codes]


def evaluate_distinct(fn: Callable[[Any], T], scn: Any) -> T:
    """`fn(scn)`, computed once per distinct configuration when that saves work (module
    docstring). `fn` must be elementwise in the scenario's array fields."""
    leaves = _leaves(scn)
    if not leaves:
        return fn(scn)
    shape = np.broadcast_shapes(*(a.shape for _, a in leaves))
    n = int(np.prod(shape))
    if n < MIN_CONFIGURATIONS:
        return fn(scn)
    if not any(a.size == n for _, a in leaves):  # a grid of broadcast axes: every point differs
        return fn(scn)
    if any(a.size == n and a.dtype.kind not in "iub" for _, a in leaves):  # continuous values
        return fn(scn)
    fields = [(path, _Codes(a, shape, n)) for path, a in leaves]
    bound = 1
    for _, c in fields:
        bound *= c.size
    if bound >= 2**62:
        return fn(scn)
    key = _combine([(c.codes(), c.size) for _, c in fields], n)
    rows, inverse = group_rows(key, bound)
    distinct = key[rows]  # ascending
    if len(distinct) > MAX_DISTINCT_SHARE * n:
        return fn(scn)
    values: dict[tuple[str, ...], np.ndarray] = {}
    stride = 1
    for path, c in fields:
        values[path] = c.decode((distinct // stride) % c.size)
        stride *= c.size
    result = fn(_rebuild(scn, values))
    return _expand(result, inverse, shape, len(distinct), scn)


def _expand(value: Any, inverse: np.ndarray, shape: tuple[int, ...], u: int, scn: Any) -> Any:
    """Every array of `value` over the distinct configurations gathered back to `shape`; the
    scenario the result describes is the one given. A dataclass (the estimate, its breakdown and
    memory) gathers each field when it is first read (`_lazy`): a caller that reads the step time
    alone never writes out the other arrays."""
    if isinstance(value, np.ndarray):
        if value.ndim == 1 and value.shape[0] == u:
            return value[inverse].reshape(shape)
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _lazy(value, (inverse, shape, u, scn))
    if isinstance(value, dict):
        return {k: _expand(v, inverse, shape, u, scn) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_expand(v, inverse, shape, u, scn) for v in value)
    return value


_LAZY: dict[type, type] = {}


def _lazy(value: Any, expand: tuple[np.ndarray, tuple[int, ...], int, Any]) -> Any:
    """`value` as an instance of a subclass of its class that expands each field on first read
    (and keeps it); everything else (properties, methods, equality, `dataclasses.replace`)
    behaves as the class's own."""
    cls = type(value)
    lazy = _LAZY.get(cls)
    if lazy is None:
        names = frozenset(f.name for f in dataclasses.fields(value))
        # a class that declares its properties elementwise (each value a function of the same
        # element's fields) has them computed over the distinct configurations and gathered once:
        # a memory total is one gather instead of five gathers and four additions
        if getattr(cls, "ELEMENTWISE_PROPERTIES", False):
            names |= {k for k in dir(cls) if isinstance(getattr(cls, k, None), property)}

        def __getattribute__(self: Any, name: str) -> Any:
            if name in names:
                fields = object.__getattribute__(self, "__dict__")
                if name not in fields:
                    if "_distinct_source" not in fields:  # built by dataclasses.replace: all fields set
                        return object.__getattribute__(self, name)
                    source = fields["_distinct_source"]
                    inverse, shape, u, scn = fields["_distinct_expand"]
                    raw = getattr(source, name)
                    fields[name] = scn if name == "scenario" else _expand(raw, inverse, shape, u, scn)
                return fields[name]
            return object.__getattribute__(self, name)

        lazy = type(cls.__name__, (cls,), {"__getattribute__": __getattribute__, "__doc__": cls.__doc__})
        _LAZY[cls] = lazy
    out = object.__new__(lazy)
    object.__setattr__(out, "_distinct_source", value)
    object.__setattr__(out, "_distinct_expand", expand)
    return out


def evaluate_grouped(fn: Callable[[Any], T], scn: Any, exclude: frozenset[tuple[str, ...]]) -> T:
    """`fn(scn)` computed once per group of configurations that agree on every array-valued field
    but those in `exclude` (paths such as ("plan", "dp")), and gathered back: the same numbers
    when `fn` is elementwise and reads none of the excluded fields. Each group is priced at one
    of its own configurations (a real one, nothing invented). Applies to flat scenarios (every
    array field one value per configuration, as a planner or a random draw gives them) of at
    least MIN_CONFIGURATIONS whose groups are at most MAX_DISTINCT_SHARE of them; anything else
    is priced as given."""
    leaves = _leaves(scn)
    if not GROUPING or not leaves:
        return fn(scn)
    n = leaves[0][1].size
    if n < MIN_CONFIGURATIONS or any(a.ndim != 1 or a.size != n for _, a in leaves):
        return fn(scn)
    coded = []
    stride = 1
    for path, a in leaves:
        if path in exclude:
            continue
        c = _Codes(a, a.shape, n)
        if c.size == 0:  # continuous values: code them by sorting
            values, codes = np.unique(a, return_inverse=True)
            size = len(values)
        else:
            codes, size = c.codes(), c.size
        if stride * size >= 2**62:
            return fn(scn)
        coded.append((codes, size))
        stride *= size
    rows, inverse = group_rows(_combine(coded, n), stride)
    if len(rows) > MAX_DISTINCT_SHARE * n:
        return fn(scn)
    result = fn(_rebuild(scn, {path: a[rows] for path, a in leaves}))
    return _gather(result, inverse, len(rows))


def _combine(coded: list[tuple[np.ndarray, int]], n: int) -> np.ndarray:
    """One integer key per configuration from each field's (codes, number of codes): the sum of
    codes x the product of the sizes before it, evaluated from the last field down (Horner's
    scheme: two in-place passes per field, no temporaries)."""
    if not coded:
        return np.zeros(n, dtype=np.int64)
    key = np.array(coded[-1][0], dtype=np.int64)  # a copy: the codes may be a field's own array
    for codes, size in coded[-2::-1]:
        key *= size
        key += codes
    return key


def group_rows(key: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(one row of each distinct key, in key order; each row's group) for integer keys in
    [0, size): a table when `size` is at most TABLE_KEYS_PER_CONFIGURATION keys per row, else
    a sort."""
    n = key.size
    if size > TABLE_KEYS_PER_CONFIGURATION * n:
        _, rows, inverse = np.unique(key, return_index=True, return_inverse=True)
        return rows, inverse
    seen = np.zeros(size, dtype=bool)
    seen[key] = True
    distinct = np.flatnonzero(seen)
    inverse = (np.cumsum(seen) - 1).take(key)  # take: a faster gather than indexing
    where = np.empty(size, dtype=np.int64)
    where[key] = np.arange(n)
    return where[distinct], inverse


def _gather(value: Any, inverse: np.ndarray, u: int) -> Any:
    """Every array of `value` over `u` groups gathered back to one value per configuration."""
    if isinstance(value, np.ndarray):
        return value[inverse] if value.ndim == 1 and value.shape[0] == u else value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: _gather(getattr(value, f.name), inverse, u) for f in dataclasses.fields(value)}
        return dataclasses.replace(value, **fields)
    if isinstance(value, tuple):
        items = [_gather(v, inverse, u) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, dict):
        return {k: _gather(v, inverse, u) for k, v in value.items()}
    return value
