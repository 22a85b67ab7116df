"""Array-aware validation helpers shared by the value types.

Every numeric field of a spec may be a Python number or a numpy array (for grids); these
helpers check all elements and raise :class:`SpecError` naming the field, the first bad
value and what is allowed.
"""

from __future__ import annotations

import math
from enum import IntEnum
from typing import TypeVar

import numpy as np
from numpy.typing import ArrayLike

from shardwise.errors import SpecError

Number = float | int | np.ndarray
E = TypeVar("E", bound=IntEnum)


def _first_bad(arr: np.ndarray, bad: np.ndarray) -> object:
    value = np.broadcast_to(arr, bad.shape)[bad].flat[0]
    return value.item() if hasattr(value, "item") else value


# Whole numbers above this are not exact as floats (2**53) and overflow int64 products.
MAX_WHOLE = 2**53


def _plain(value: object, low: float, high: float, low_open: bool = False) -> bool:
    """A Python int or float (not a bool) within [low, high] (or (low, high]), finite, and an int
    no larger than MAX_WHOLE: what the checks below accept without building an array (one plan
    at a time is the common case: the CLI, the explorer, a calibration step)."""
    kind = type(value)
    if kind is int:
        return (low < value if low_open else low <= value) and value <= high and value <= MAX_WHOLE  # type: ignore[operator]
    if kind is float:
        return (low < value if low_open else low <= value) and value <= high and math.isfinite(value)  # type: ignore[operator]
    return False


def _numeric(field: str, value: ArrayLike) -> np.ndarray:
    """A real number or array of them (not a bool, a string, a complex number or an int too large
    for 64 bits)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_WHOLE:
        raise SpecError(f"{field}: {value} is not allowed; it must be at most {MAX_WHOLE:,}")
    if isinstance(value, (list, tuple)):
        raise SpecError(f"{field}: {_short(value)} is not allowed; give a number or a numpy array")
    try:
        arr = np.asarray(value)
    except (OverflowError, ValueError, TypeError):
        raise SpecError(f"{field}: {value!r} is not a number") from None
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.complexfloating):
        raise SpecError(f"{field}: {_short(value)} is not a number")
    if arr.size == 0:
        raise SpecError(f"{field}: an empty array is not allowed; give at least one value")
    return arr


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def text(field: str, value: object) -> str:
    """A name or a note: a string (a number or None is refused, not turned into one)."""
    if not isinstance(value, str):
        raise SpecError(f"{field}: {_short(value)} is not allowed; it must be a string")
    return value


def one_of(field: str, value: object, choices: tuple[str, ...]) -> str:
    """One of `choices` (a word, not an array)."""
    if not isinstance(value, str) or value not in choices:
        raise SpecError(f"{field}: {value!r} is not allowed; choose one of {', '.join(choices)}")
    return value  # type: ignore[return-value]


def boolean(field: str, value: object) -> bool | np.ndarray:
    """True or False (or an array of them): a string such as 'off' or a number is refused, not
    read as its truth value."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, np.ndarray) and value.dtype == bool:
        return value
    raise SpecError(f"{field}: {_short(value)} is not allowed; it must be true or false")


def unit_fraction(field: str, value: ArrayLike) -> Number:
    """In (0, 1]: a fraction of a peak that cannot be exceeded (a GEMM's share of the tensor cores)."""
    if _plain(value, 0.0, 1.0, low_open=True):
        return value  # type: ignore[return-value]
    arr = _numeric(field, value)
    bad = ~(np.isfinite(arr) & (arr > 0) & (arr <= 1))
    if np.any(bad):
        raise SpecError(f"{field}: {_first_bad(arr, bad)} is not allowed; it must be in (0, 1]")
    return value  # type: ignore[return-value]


def positive(field: str, value: ArrayLike) -> Number:
    """Finite and > 0 everywhere; returns the value unchanged (scalar stays scalar)."""
    if _plain(value, 0.0, math.inf, low_open=True):
        return value  # type: ignore[return-value]
    arr = _numeric(field, value)
    bad = ~(np.isfinite(arr) & (arr > 0))
    if np.any(bad):
        raise SpecError(f"{field}: {_first_bad(arr, bad)} is not allowed; it must be a number > 0")
    return value  # type: ignore[return-value]


def non_negative(field: str, value: ArrayLike) -> Number:
    if _plain(value, 0.0, math.inf):
        return value  # type: ignore[return-value]
    arr = _numeric(field, value)
    bad = ~(np.isfinite(arr) & (arr >= 0))
    if np.any(bad):
        raise SpecError(f"{field}: {_first_bad(arr, bad)} is not allowed; it must be a number >= 0")
    return value  # type: ignore[return-value]


def within(field: str, value: ArrayLike, low: float, high: float, unit: str) -> Number:
    """Finite and in [low, high]: a physical quantity inside the range the model is meant for
    (beyond it the arithmetic overflows or the answer means nothing)."""
    if _plain(value, low, high):
        return value  # type: ignore[return-value]
    arr = _numeric(field, value)
    bad = ~(np.isfinite(arr) & (arr >= low) & (arr <= high))
    if np.any(bad):
        raise SpecError(
            f"{field}: {_first_bad(arr, bad)} is not allowed; it must be between {low:g} and {high:g} {unit}"
        )
    return value  # type: ignore[return-value]


def fraction(field: str, value: ArrayLike) -> Number:
    """In (0, 1.5]: efficiencies are fractions of a peak (NVLS-style > 1 allowed up to 1.5)."""
    if _plain(value, 0.0, 1.5, low_open=True):
        return value  # type: ignore[return-value]
    arr = _numeric(field, value)
    bad = ~(np.isfinite(arr) & (arr > 0) & (arr <= 1.5))
    if np.any(bad):
        raise SpecError(f"{field}: {_first_bad(arr, bad)} is not allowed; it must be in (0, 1.5]")
    return value  # type: ignore[return-value]


def _whole_within(arr: np.ndarray, low: int) -> bool:
    """An integer array within [low, MAX_WHOLE] (two reductions: the planner validates 1e5-1e6
    plans at once); anything else takes the element-wise check."""
    return arr.dtype.kind in "iu" and arr.ndim > 0 and int(arr.min()) >= low and int(arr.max()) <= MAX_WHOLE


def whole_range(value: object, low: int) -> str:
    """What a whole number out of [low, MAX_WHOLE] must be, said as the user needs it: 'x >= 1'
    for a value too small (or not a number), the 2**53 bound only for a value above it."""
    try:
        above = float(value) > MAX_WHOLE  # type: ignore[arg-type]
    except (TypeError, ValueError):
        above = False
    return f"at most {MAX_WHOLE:,}" if above else f">= {low}"


def positive_int(field: str, value: ArrayLike) -> Number:
    """Whole numbers >= 1; floats that are whole (4.0) are accepted and kept as given."""
    if type(value) is int and 1 <= value <= MAX_WHOLE:
        return value
    arr = _numeric(field, value)
    if _whole_within(arr, 1):
        return value  # type: ignore[return-value]
    bad = ~(np.isfinite(arr) & (arr >= 1) & (arr <= MAX_WHOLE) & (np.mod(arr, 1) == 0))
    if np.any(bad):
        first = _first_bad(arr, bad)
        raise SpecError(f"{field}: {first} is not allowed; it must be a whole number {whole_range(first, 1)}")
    if isinstance(value, float):
        return int(value)
    return value  # type: ignore[return-value]


def non_negative_int(field: str, value: ArrayLike) -> Number:
    """Whole numbers >= 0 (0 often means "automatic")."""
    if type(value) is int and 0 <= value <= MAX_WHOLE:
        return value
    arr = _numeric(field, value)
    if _whole_within(arr, 0):
        return value  # type: ignore[return-value]
    bad = ~(np.isfinite(arr) & (arr >= 0) & (arr <= MAX_WHOLE) & (np.mod(arr, 1) == 0))
    if np.any(bad):
        first = _first_bad(arr, bad)
        raise SpecError(f"{field}: {first} is not allowed; it must be a whole number {whole_range(first, 0)}")
    if isinstance(value, float):
        return int(value)
    return value  # type: ignore[return-value]


def divisible(field: str, value: ArrayLike, by_field: str, by: ArrayLike, why: str = "") -> None:
    """`value` must be a multiple of `by`, element by element."""
    a, b = np.broadcast_arrays(np.asarray(value), np.asarray(by))
    bad = np.mod(a, b) != 0
    if np.any(bad):
        i = np.flatnonzero(bad)[0]
        suffix = f" ({why})" if why else ""
        raise SpecError(f"{field}: {a.flat[i].item()} is not divisible by {by_field}={b.flat[i].item()}{suffix}")


def equal(field: str, value: ArrayLike, other_field: str, other: ArrayLike, why: str = "") -> None:
    a, b = np.broadcast_arrays(np.asarray(value), np.asarray(other))
    bad = a != b
    if np.any(bad):
        i = np.flatnonzero(bad)[0]
        suffix = f" ({why})" if why else ""
        raise SpecError(f"{field}: {a.flat[i].item()} must equal {other_field}={b.flat[i].item()}{suffix}")


_ENUM_NAMES: dict[type, dict[str, IntEnum]] = {}
# (enum, int code) -> member, filled with _ENUM_NAMES
_ENUM_CODES: dict[tuple[type, int], IntEnum] = {}


def enum_codes(field: str, value: object, enum: type[E]) -> E | np.ndarray:
    """A name ('1f1b'), an enum member, an int code or an array of either -> member or int array."""
    if isinstance(value, enum):
        return value  # type: ignore[return-value]
    if type(value) is int:  # a plain code: its member, as `enum(value)` below gives it
        member = _ENUM_CODES.get((enum, value))
        if member is not None:
            return member  # type: ignore[return-value]
    names = _ENUM_NAMES.get(enum)
    if names is None:  # each enum's names, once
        names = {m.name.lower().replace("_", "-"): m for m in enum}
        names.update({getattr(m, "label", m.name.lower()): m for m in enum})
        _ENUM_CODES.update({(enum, int(m)): m for m in enum})
        _ENUM_NAMES[enum] = names

    def one(v: object) -> E:
        if isinstance(v, enum):
            return v
        if isinstance(v, str):
            key = v.strip().lower().replace("_", "-")
            if key in names:
                return names[key]  # type: ignore[return-value]
        elif isinstance(v, (int, np.integer)) and not isinstance(v, bool):
            try:
                return enum(int(v))
            except ValueError:
                pass
        allowed = ", ".join(sorted({getattr(m, "label", m.name.lower()) for m in enum}))
        raise SpecError(f"{field}: {v!r} is not allowed; choose one of {allowed}")

    if isinstance(value, np.ndarray):
        if value.size == 0:
            raise SpecError(f"{field}: an empty array is not allowed; give at least one value")
        if np.issubdtype(value.dtype, np.integer):  # codes already: check them all at once
            codes = np.array(sorted(int(m) for m in enum))
            if codes[-1] - codes[0] == len(codes) - 1 and codes[0] <= value.min() and value.max() <= codes[-1]:
                return value.astype(np.int64, copy=False)  # within a range of codes: two reductions
            bad = ~np.isin(value, codes)
            if np.any(bad):
                one(int(value[bad].flat[0]))  # raises with the allowed names
            return value.astype(np.int64, copy=False)
        # names or members: map each distinct value once (a million plans hold a handful)
        try:
            distinct, inverse = np.unique(value.ravel(), return_inverse=True)
        except TypeError:  # values that do not sort (mixed kinds): one at a time
            return np.asarray([int(one(v)) for v in value.ravel().tolist()], dtype=np.int64).reshape(value.shape)
        codes = np.asarray([int(one(v)) for v in distinct.tolist()], dtype=np.int64)
        return codes[inverse].reshape(value.shape)
    return one(value)


def anywhere(condition: object) -> bool:
    """`np.any(condition)`, without numpy's dispatch for one value (a plan's scalar check)."""
    if isinstance(condition, (bool, np.bool_)):
        return bool(condition)
    return bool(np.any(condition))


def as_array(value: Number) -> np.ndarray:
    return np.asarray(value, dtype=float)
