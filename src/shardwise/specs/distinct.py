"""The distinct configurations of an array-valued spec: each array field coded as small integers,
one key per configuration, one row of each distinct key (the coding `engines.distinct` prices
with, kept here so that a `Scenario` validates only its distinct configurations and hands them on).

`find_distinct(obj)` codes a tree of frozen dataclasses (a scenario: model, hardware and plan)
once and keeps the answer on the object: the scenario's validation and the estimate that follows
share one coding (issue 38: a million random plans were coded and their stages split several
times over before any was priced).
"""

from __future__ import annotations

import dataclasses
import math
import operator
import weakref
from typing import Any, NamedTuple

import numpy as np

from shardwise.specs._checks import SpecError

# Below this many configurations the bookkeeping costs more than it saves.
MIN_CONFIGURATIONS = 4096
# Deduplicate only when the distinct configurations are at most this share of them: pricing one
# training configuration costs about 1,000 reference element-operations, coding and gathering
# them back a few dozen, so half of them distinct still gains (a quarter until issue 38: random
# plans with a third of them distinct were priced element by element, 3.6 times slower).
MAX_DISTINCT_SHARE = 0.5
# Above this many configurations, a sample of this many rows decides whether to code them all.
SAMPLE_ROWS = 4096
# Keys up to this many times the configurations are marked in a table (linear time); larger
# key spaces are sorted.
TABLE_KEYS_PER_CONFIGURATION = 8
# A whole-number field whose smallest value is at most this is coded through a table indexed by
# the values themselves (no pass to subtract the smallest).
SMALL_OFFSET = 64


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}
_FIELD_GETTERS: dict[type, operator.attrgetter[Any]] = {}
_PLAIN = frozenset((int, float, str, bool, type(None), tuple, np.bool_, np.float64, np.int64))


def _leaves(obj: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], np.ndarray]]:
    """(path, array) of every array-valued field of a tree of dataclasses (size > 1). Each
    object's own list is found once and kept on it (the value types are frozen; a scenario's
    model and cluster are shared by every plan priced on them)."""
    own = obj.__dict__.get("_leaves")
    if own is None:
        own = obj.__dict__["_leaves"] = _own_leaves(obj)
    if not path:
        return own  # type: ignore[no-any-return]
    return [((*path, *p), a) for p, a in own]


def _own_leaves(obj: Any) -> list[tuple[tuple[str, ...], np.ndarray]]:
    cls = type(obj)
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(obj))
        if names:
            _FIELD_GETTERS[cls] = operator.attrgetter(*names)
    if not names:
        return []
    values = _FIELD_GETTERS[cls](obj)  # every field's value, in one call (a plan has about 60)
    if len(names) == 1:
        values = (values,)
    others = set(map(type, values)) - _PLAIN
    if all(issubclass(kind, (int, float, str)) for kind in others):  # plain values (an enum too): no leaves
        return []
    out = []
    for name, value in zip(names, values, strict=True):
        if type(value) in _PLAIN:
            continue
        if isinstance(value, np.ndarray):
            if value.size > 1:
                out.append(((name,), value))
        elif hasattr(type(value), "__dataclass_fields__"):  # a nested dataclass (an instance, not a class)
            out += _leaves(value, (name,))
    return out


def _rebuild(
    obj: Any, values: dict[tuple[str, ...], np.ndarray], path: tuple[str, ...] = (), checked: bool = False
) -> Any:
    """`obj` with the fields at `values`' paths replaced (nested dataclasses rebuilt).

    `checked`: `values` are rows of `obj`'s own arrays (the configurations of some of its rows),
    so every one of them passed `obj`'s checks when it was built (each rule reads one
    configuration): the objects are made without running them again, their fields set as
    `obj`'s own were (a planner's or a draw's groups: a representative row per group)."""
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        here = (*path, f.name)
        if here in values:
            changes[f.name] = values[here]
        else:
            value = getattr(obj, f.name)
            nested = dataclasses.is_dataclass(value) and not isinstance(value, type)
            if nested and any(p[: len(here)] == here for p in values):
                changes[f.name] = _rebuild(value, values, here, checked)
    if not changes:
        return obj
    if not checked:
        return dataclasses.replace(obj, **changes)
    out = object.__new__(type(obj))
    out.__dict__.update({f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}, **changes)
    return out


# Read-only arrays whose codes are known (a distinct spec's fields, decoded from them): id ->
# (a weak reference to the array, its codes, the number of codes). `specs.grouped` groups a kept
# function's arguments by them without coding the arrays again.
_KNOWN_CODES: dict[int, tuple[weakref.ref[np.ndarray], np.ndarray, int]] = {}


def remember_codes(array: np.ndarray, codes: np.ndarray, size: int) -> np.ndarray:
    """`array`, made read-only, with its `codes` (0..size-1, one per element) kept for
    `known_codes`."""
    array.flags.writeable = False
    key = id(array)
    # forgotten with the array (the callback runs as it is freed, before its id can be reused)
    _KNOWN_CODES[key] = (weakref.ref(array, lambda _: _KNOWN_CODES.pop(key, None)), codes, size)
    return array


def known_codes(array: np.ndarray) -> tuple[np.ndarray, int] | None:
    """The (codes, number of codes) kept for `array` by `remember_codes`, else None."""
    entry = _KNOWN_CODES.get(id(array))
    if entry is None or entry[0]() is not array:
        return None
    return entry[1], entry[2]


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
            if high - low <= 1:  # one or two values, both present (a flag, cp or vpp of 1 or 2): no table
                self.values = np.arange(low, high + 1).astype(array.dtype)
                self._codes = flat - low if low else flat
            elif span <= TABLE_KEYS_PER_CONFIGURATION * n:
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
    a sort. The row of a key is any of those holding it (all hold the same configuration): the
    first, found by sorting each key with its row in its low bits (an unstable sort of plain
    integers, 14 times faster than np.unique's stable argsort for a million keys)."""
    n = key.size
    if size > TABLE_KEYS_PER_CONFIGURATION * n:
        bits = max(int(n - 1).bit_length(), 1)
        if int(size - 1).bit_length() + bits <= 63:
            # each key with its row in its low bits, sorted as plain integers (numpy's SIMD sort:
            # 7 ms for a million against 27 ms for argsort); ties go to the first row
            packed = key << bits
            packed |= np.arange(n, dtype=np.int64)
            packed.sort()
            order = packed & ((1 << bits) - 1)
            ordered = packed >> bits
        else:
            order = np.argsort(key)
            ordered = key[order]
        starts = np.empty(n, dtype=bool)  # where a new key begins in key order
        starts[0] = True
        np.not_equal(ordered[1:], ordered[:-1], out=starts[1:])
        # (a running count in int32 takes half the time of int64's; `compress`, a third of a mask's)
        group = np.cumsum(starts, dtype=np.int32 if n < 2**31 else np.int64)
        group -= 1
        inverse = np.empty(n, dtype=np.int64)
        inverse[order] = group
        return np.compress(starts, order), inverse
    seen = np.zeros(size, dtype=bool)
    seen[key] = True
    distinct = np.flatnonzero(seen)
    inverse = (np.cumsum(seen) - 1).take(key)  # take: a faster gather than indexing
    where = np.empty(size, dtype=np.int64)
    where[key] = np.arange(n)
    return where[distinct], inverse


def _sample_repeats(arrays: list[np.ndarray], shape: tuple[int, ...], n: int) -> bool:
    """Whether SAMPLE_ROWS rows spread evenly over the configurations repeat as often as they
    would if the distinct configurations were at most MAX_DISTINCT_SHARE of n: u distinct ones
    drawn evenly leave s - u (1 - exp(-s / u)) repeats in a sample of s (16 at n = 1e6); as many
    or more says coding every row is likely worth it, fewer that it would likely be wasted
    (a planner's candidates, all different; random plans over a space larger than n). The rows
    are compared by a 64-bit mix of their values (a collision could only add a repeat): this
    decides which path prices, never a number."""
    rows = np.linspace(0, n - 1, SAMPLE_ROWS).astype(np.int64)
    index = np.unravel_index(rows, shape)
    key = np.zeros(SAMPLE_ROWS, dtype=np.uint64)
    for i, a in enumerate(arrays):
        column = np.broadcast_to(a, shape)[index].astype(np.uint64)
        key = key * np.uint64(_MIX) + column + np.uint64(i)  # wraps modulo 2**64
    key.sort()
    repeats = int(np.count_nonzero(key[1:] == key[:-1]))
    u = MAX_DISTINCT_SHARE * n
    expected = SAMPLE_ROWS - u * -math.expm1(-SAMPLE_ROWS / u)
    return repeats >= expected


def _narrowest(size: int) -> type[np.integer[Any]]:
    """The narrowest unsigned integer type holding codes 0..size-1 (a distinct plan's codes are
    kept with it: an eighth of the memory of int64 for most fields)."""
    for kind in (np.uint8, np.uint16, np.uint32):
        if size <= np.iinfo(kind).max + 1:
            return kind
    return np.int64


_MIX = 0x9E3779B97F4A7C15  # an odd 64-bit constant (the golden ratio's): spreads small values


class Distinct(NamedTuple):
    """`obj` reduced to one configuration per distinct key: `spec` holds them (built, so
    validated, like any spec), `inverse` gives each configuration's row among them, `shape` the
    full shape and `count` the number of distinct ones."""

    spec: Any
    inverse: np.ndarray
    shape: tuple[int, ...]
    count: int


_NOT_YET = object()
# The fields the cost model branches on most, most significant last: the distinct rows come in
# key order, so each of these runs in long blocks (`pp > 2`, the ZeRO stage, the schedule), and
# np.where and np.select over them take a third to a sixth of their time over values in no order
# (the branch predictor). Any order gives the same numbers.
_BRANCHED = ("recompute", "sequence_parallel", "overlap_grad_reduce", "vpp", "schedule", "pp", "zero_stage")


def _significance(leaf: tuple[tuple[str, ...], np.ndarray]) -> int:
    name = leaf[0][-1]
    return _BRANCHED.index(name) + 1 if name in _BRANCHED else 0


def broadcast_shape(kind: str, leaves: list[tuple[tuple[str, ...], np.ndarray]]) -> tuple[int, ...]:
    """The shape array fields (`_leaves`) broadcast to; a SpecError naming two that do not
    broadcast (numpy's rules: equal sizes, or 1, along each trailing axis), after `kind`."""
    try:
        return np.broadcast_shapes(*(a.shape for _, a in leaves))
    except ValueError:
        pass
    shape: tuple[int, ...] = ()
    for i, (path, array) in enumerate(leaves):
        try:
            shape = np.broadcast_shapes(shape, array.shape)
        except ValueError:
            first = next(p for p, a in leaves[:i] if not _broadcasts(a.shape, array.shape))
            first_array = dict(leaves)[first]
            named = [".".join(first), ".".join(path)]
            if len(first) == 1 and len(path) == 1:  # a plan's (a model's, ...) own fields
                named = [first[0], path[0]]
            raise SpecError(
                f"{kind}: {named[0]} (shape {first_array.shape}) and {named[1]} (shape {array.shape}) do not "
                "broadcast together; give arrays of one shape, or of shapes numpy broadcasts (1 along the "
                "axes where they differ)"
            ) from None
    return shape


def _broadcasts(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    try:
        np.broadcast_shapes(a, b)
    except ValueError:
        return False
    return True


def find_distinct(obj: Any) -> Distinct | None:
    """`obj`'s distinct configurations when pricing them alone saves work (at least
    MIN_CONFIGURATIONS flat whole-number configurations, at most MAX_DISTINCT_SHARE of them
    distinct), else None. Computed once per object and kept on it (`obj.__dict__`, outside its
    fields: equality, `repr` and `dataclasses.replace` ignore it). Building the reduced spec
    validates it: a SpecError from it propagates."""
    kept = obj.__dict__.get("_distinct", _NOT_YET)
    if kept is not _NOT_YET:
        return kept  # type: ignore[no-any-return]
    found = _find_distinct(obj)
    obj.__dict__["_distinct"] = found
    return found


def _find_distinct(obj: Any) -> Distinct | None:
    leaves = _leaves(obj)
    if not leaves:
        return None
    heads = {path[0] for path, _ in leaves}
    if len(heads) == 1 and len(leaves[0][0]) > 1:  # every array in one part (a scenario's plan)
        (head,) = heads
        part = getattr(obj, head)
        coded = part.__dict__.get("_distinct", _NOT_YET)
        if coded is not _NOT_YET:  # that part was coded when it was built: its codes serve
            if coded is None:
                return None
            return Distinct(dataclasses.replace(obj, **{head: coded.spec}), coded.inverse, coded.shape, coded.count)
    shape = broadcast_shape(type(obj).__name__.lower(), leaves)
    n = int(np.prod(shape))
    if n < MIN_CONFIGURATIONS:
        return None
    if not any(a.size == n for _, a in leaves):  # a grid of broadcast axes: every point differs
        return None
    if any(a.size == n and a.dtype.kind not in "iub" for _, a in leaves):  # continuous values
        return None
    if n > SAMPLE_ROWS and not _sample_repeats([a for _, a in leaves], shape, n):
        return None  # a planner's candidates, all different: not worth coding every row
    fields = [(path, _Codes(a, shape, n)) for path, a in sorted(leaves, key=_significance)]
    bound = 1
    for _, c in fields:
        bound *= c.size
    if bound >= 2**62:
        return None
    # Where the keys are sorted anyway, each field takes whole bits of the key (its codes
    # rounded up to a power of two): read back by a shift and a mask instead of an integer
    # division and a remainder (ten times slower per element)
    bits = [max(int(c.size - 1).bit_length(), 0) for _, c in fields]
    by_bits = bound > TABLE_KEYS_PER_CONFIGURATION * n and sum(bits) + int(n - 1).bit_length() <= 63
    sizes = [1 << b for b in bits] if by_bits else [c.size for _, c in fields]
    key = _combine([(c.codes(), size) for (_, c), size in zip(fields, sizes, strict=True)], n)
    rows, inverse = group_rows(key, int(np.prod(sizes, dtype=object)))
    if len(rows) > MAX_DISTINCT_SHARE * n:
        return None
    distinct = key[rows]  # ascending
    values: dict[tuple[str, ...], np.ndarray] = {}
    stride, shift = 1, 0
    for (path, c), b in zip(fields, bits, strict=True):
        codes = (distinct >> shift) & ((1 << b) - 1) if by_bits else (distinct // stride) % c.size
        values[path] = remember_codes(c.decode(codes), codes.astype(_narrowest(c.size)), c.size)
        stride, shift = stride * c.size, shift + b
    return Distinct(_rebuild(obj, values), inverse, shape, len(rows))
