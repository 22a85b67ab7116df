"""Evaluate each distinct configuration once: the cost model is elementwise, so a million plans
drawn from a few values per field (a planner's candidates, random layouts of one model, a
calibration's stacked runs) need only their distinct combinations priced, then gathered back.

`evaluate_distinct(fn, scn)` finds the array-valued fields of the scenario (model, hardware and
plan), codes each one's values as dense integers (a whole-number field through a table over its
range, a field given as a small array, such as a sweep axis, by its distinct values), combines
the codes into one key per configuration and, when the distinct keys are at most half of
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
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

import numpy as np

from shardwise.specs.distinct import (  # the coding: specs.distinct (a Scenario validates with it)
    MAX_DISTINCT_SHARE,
    MIN_CONFIGURATIONS,  # noqa: F401  (re-exported: evaluate_distinct's threshold, read by the tests)
    _Codes,
    _combine,
    _leaves,
    _rebuild,
    find_distinct,
    group_rows,
    known_codes,
    remember_codes,
)

T = TypeVar("T")

# evaluate_grouped prices groups (False: every configuration, the reference the tests compare with)
GROUPING = True
# evaluate_grouped groups from this many configurations on (`specs.distinct.MIN_CONFIGURATIONS`,
# 4,096, is where coding every field of a scenario pays): the groups are coded once per scenario
# and shared by the stage costs, the layout terms and the memory. The explorer's planner, 3,116
# plans (GPT-3 175B on 8 DGX A100, batch 64), priced in 15 ms grouped against 26 ms each; its 295
# that fit in 12 ms either way (grouped at 256).
GROUP_MIN_CONFIGURATIONS = 1024


def evaluate_distinct(fn: Callable[[Any], T], scn: Any) -> T:
    """`fn(scn)`, computed once per distinct configuration when that saves work (module
    docstring). `fn` must be elementwise in the scenario's array fields."""
    found = find_distinct(scn)
    if found is None:
        return fn(scn)
    return _expand(fn(found.spec), found.inverse, found.shape, found.count, scn)


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
    if isinstance(value, MappingProxyType):  # a kept answer's read-only view (collective prices)
        return Gathered(value, inverse, shape, u)
    if isinstance(value, dict):
        return {k: _expand(v, inverse, shape, u, scn) for k, v in value.items()}
    if isinstance(value, tuple):
        items = [_expand(v, inverse, shape, u, scn) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    return value


class Gathered(Mapping[str, Any]):
    """A read-only mapping over the distinct configurations (or groups) whose values are gathered
    back when first read; `rows(key, lo, hi)` gathers one slice of rows alone (the data-parallel
    exposure's runs of one ZeRO stage read only their stage's collectives)."""

    def __init__(self, source: Mapping[str, Any], inverse: np.ndarray, shape: tuple[int, ...], u: int) -> None:
        self._source, self._inverse, self._shape, self._u = source, inverse, shape, u
        self._done: dict[str, Any] = {}

    def __getitem__(self, key: str) -> Any:
        if key not in self._done:
            self._done[key] = _expand(self._source[key], self._inverse, self._shape, self._u, None)
        return self._done[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._source)

    def __len__(self) -> int:
        return len(self._source)

    def rows(self, key: str, lo: int, hi: int) -> Any:
        """`self[key][lo:hi]` of a flat result (a single number as it is)."""
        value = self._source[key]
        if key in self._done or not isinstance(value, np.ndarray) or len(self._shape) != 1:
            whole = self[key]
            return whole[lo:hi] if isinstance(whole, np.ndarray) and whole.ndim > 0 else whole
        if value.ndim == 1 and value.shape[0] == self._u:
            return value.take(self._inverse[lo:hi])
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


def evaluate_grouped(
    fn: Callable[[Any], T], scn: Any, exclude: frozenset[tuple[str, ...]], also: np.ndarray | None = None
) -> T:
    """`fn(scn)` computed once per group of configurations that agree on every array-valued field
    but those in `exclude` (paths such as ("plan", "dp")), and on `also` (whole numbers, one per
    configuration: what `fn` reads of the excluded fields, such as the micro-batches a pipeline
    holds), and gathered back: the same numbers when `fn` is elementwise and reads the excluded
    fields only through `also`. Each group is priced at one of its own configurations (a real
    one, nothing invented). Applies to flat scenarios (every array field one value per
    configuration, as a planner or a random draw gives them) of at least GROUP_MIN_CONFIGURATIONS
    whose groups are at most MAX_DISTINCT_SHARE of them; anything else is priced as given."""
    if not GROUPING or not _leaves(scn):  # one configuration: nothing to group
        return fn(scn)
    groups = groups_of(scn, exclude)
    if groups is None:
        return fn(scn)
    rows, inverse = groups
    seeded = None
    if also is not None:
        (rows, inverse), seeded = _also_grouped(rows.size, inverse, also), rows.size
        if rows.size > MAX_DISTINCT_SHARE * inverse.size:
            return fn(scn)
    values = {}
    for path, a in _leaves(scn):
        values[path] = part = a.take(rows)
        known = known_codes(a)  # each group's fields keep their codes (`specs.grouped` groups by them)
        if known is not None:
            remember_codes(part, known[0].take(rows), known[1])
    one = _rebuild(scn, values, checked=True)  # rows of a checked scenario
    if seeded is not None:  # the groups' own groups without `also`: those of `groups`
        base = groups[1].take(rows)
        first = np.empty(seeded, dtype=np.int64)
        first[base] = np.arange(rows.size)
        one.__dict__.setdefault("_groups", {})[exclude] = (first, base)
    return _gather(fn(one), inverse, rows.size)


def flat_count(scn: Any) -> int | None:
    """The configurations of a flat scenario (every array field one value per configuration, at
    least two of them); None for any other."""
    leaves = _leaves(scn)
    if not leaves:
        return None
    n = leaves[0][1].size
    return None if any(a.ndim != 1 or a.size != n for _, a in leaves) else int(n)


def rows_of(scn: Any, rows: np.ndarray, changes: Mapping[tuple[str, ...], np.ndarray] | None = None) -> Any | None:
    """The configurations `rows` of a flat scenario (every array field one value per
    configuration, at least two) without checking them again (each passed the scenario's checks),
    with the fields at `changes`' paths (such as ("plan", "recompute_layers")) set to the values
    given, one per row, which the caller vouches for. None where the scenario is not flat."""
    if flat_count(scn) is None:
        return None
    values = {}
    for path, a in _leaves(scn):
        values[path] = part = a.take(rows)
        known = known_codes(a)  # the rows keep their codes (`specs.grouped` groups by them)
        if known is not None:
            remember_codes(part, known[0].take(rows), known[1])
    values.update(changes or {})
    return _rebuild(scn, values, checked=True)


def groups_of(scn: Any, exclude: frozenset[tuple[str, ...]]) -> tuple[np.ndarray, np.ndarray] | None:
    """(one row of each group of configurations that agree on every array field but `exclude`,
    each configuration's group) for `evaluate_grouped`, or None where it prices as given. Kept
    on the scenario (outside its fields, as `specs.distinct.find_distinct` keeps its answer):
    the layout terms and the memory group by the same fields."""
    kept = scn.__dict__.setdefault("_groups", {})
    if exclude not in kept:
        kept[exclude] = _groups_of(scn, exclude)
    return kept[exclude]  # type: ignore[no-any-return]


def _groups_of(scn: Any, exclude: frozenset[tuple[str, ...]]) -> tuple[np.ndarray, np.ndarray] | None:
    leaves = _leaves(scn)
    n = leaves[0][1].size
    if n < GROUP_MIN_CONFIGURATIONS or any(a.ndim != 1 or a.size != n for _, a in leaves):
        return None
    coded = []
    stride = 1
    for path, a in leaves:
        if path in exclude:
            continue
        codes, size = _codes_of(a, n)
        if stride * size >= 2**62:
            return None
        coded.append((codes, size))
        stride *= size
    rows, inverse = group_rows(_combine(coded, n), stride)
    return None if len(rows) > MAX_DISTINCT_SHARE * n else (rows, inverse)


def _codes_of(a: np.ndarray, n: int) -> tuple[np.ndarray, int]:
    known = known_codes(a)  # a distinct plan's field: coded already
    if known is not None:
        return known
    if (c := _Codes(a, a.shape, n)).size == 0:  # continuous values: code them by sorting
        values, codes = np.unique(a, return_inverse=True)
        return codes, len(values)
    return c.codes(), c.size


def _also_grouped(count: int, inverse: np.ndarray, also: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(one row of each group of configurations that agree on their group and on `also`, each
    configuration's group) for `count` groups given by `inverse`."""
    codes, size = _codes_of(np.broadcast_to(also, inverse.shape), inverse.size)
    key = inverse * size
    key += codes
    return group_rows(key, count * size)


def _gather(value: Any, inverse: np.ndarray, u: int) -> Any:
    """Every array of `value` over `u` groups gathered back to one value per configuration."""
    if isinstance(value, np.ndarray):
        return value[inverse] if value.ndim == 1 and value.shape[0] == u else value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if getattr(type(value), "ELEMENTWISE_PROPERTIES", False):
            # each field gathered when first read, a property (a stage's total seconds) computed
            # over the groups and gathered once (`_lazy`): one gather instead of six and five sums
            return _lazy(value, (inverse, (inverse.size,), u, None))
        fields = {f.name: _gather(getattr(value, f.name), inverse, u) for f in dataclasses.fields(value)}
        return dataclasses.replace(value, **fields)
    if isinstance(value, tuple):
        items = [_gather(v, inverse, u) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, MappingProxyType):  # a kept answer's read-only view: gathered when read
        return Gathered(value, inverse, (inverse.size,), u)
    if isinstance(value, dict):
        return {k: _gather(v, inverse, u) for k, v in value.items()}
    return value
