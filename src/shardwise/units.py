"""Units: the only place where strings such as "600GB/s" or "312 TFLOPS" become SI numbers.

Everything inside shardwise is in SI base units (seconds, bytes, FLOPs, bytes per second,
FLOPs per second) with the unit in the name. Decimal prefixes are powers of 1000
(1 GB = 1e9 bytes, as GPU and network vendors quote bandwidth); binary prefixes (GiB, MiB)
are powers of 1024. Bits are converted to bytes (1 Gb/s = 0.125 GB/s).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Any

from shardwise.errors import SpecError, UnitError

KILO, MEGA, GIGA, TERA, PETA = 1e3, 1e6, 1e9, 1e12, 1e15
KIB, MIB, GIB, TIB = 2**10, 2**20, 2**30, 2**40
BITS_PER_BYTE = 8

_DECIMAL = {"": 1.0, "k": KILO, "m": MEGA, "g": GIGA, "t": TERA, "p": PETA}
_BINARY = {"ki": KIB, "mi": MIB, "gi": GIB, "ti": TIB}
# Micro: "us", the micro sign "µ" (U+00B5) or the Greek letter mu "μ" (U+03BC), which look alike.
_TIME = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "\u00b5s": 1e-6, "\u03bcs": 1e-6, "ns": 1e-9}

_NUMBER = r"(?P<num>[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)"
_PREFIX = r"(?P<prefix>[kKmMgGtTpP]i?)?"
_BYTES_RE = re.compile(_NUMBER + r"\s*" + _PREFIX + r"(?P<unit>B|bytes?)?$")
_RATE_RE = re.compile(_NUMBER + r"\s*" + _PREFIX + r"(?P<unit>B|b|bit|bytes?)\s*(?:/|p)\s*s(?:ec)?$")
_FLOPS_RE = re.compile(_NUMBER + r"\s*(?P<prefix>k|m|g|t|p)?\s*flop(?:s|/s)?$", re.I)
_TIME_RE = re.compile(_NUMBER + r"\s*(?P<unit>s|ms|us|\u00b5s|\u03bcs|ns)$", re.I)
_POWER_RE = re.compile(_NUMBER + r"\s*(?P<prefix>k)?W$")


def _prefix_factor(prefix: str | None) -> float:
    if not prefix:
        return 1.0
    p = prefix.lower()
    return float(_BINARY[p]) if p in _BINARY else _DECIMAL[p]


def _scaled(num: str, factor: float, divisor: int = 1) -> float:
    """`num` (the text as written) times `factor` / `divisor`, rounded once: '2.039' TB/s is
    2039000000000.0, where 2.039 * 1e12 is 2039000000000.0002 (which --json then printed)."""
    return float(Decimal(num) * Decimal(repr(factor)) / divisor)


def _number(value: str | float | int) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def is_bare_number(text: str) -> bool:
    """'600' or '1e9': a number without a unit (what a command-line quantity must not be)."""
    return isinstance(text, str) and _number(text) is not None


_RATE_TYPO_RE = re.compile(_NUMBER + r"\s*" + _PREFIX + r"(?P<unit>B|b)(?:ps|s|/sec)?$")


def rate_typo(text: str) -> str | None:
    """A rate written without its '/s' ('600GBs', '100Gbs'): what to write instead, else None
    (review 37: `--intra-link 600GBs` was looked up as a link name, 'closest: eth-100g')."""
    m = _RATE_TYPO_RE.match(str(text).strip().replace(" ", "")) if isinstance(text, str) else None
    if m is None:
        return None
    rate = f"{m['num']}{m['prefix'] or ''}{m['unit']}/s"
    what = "bits" if m["unit"] == "b" else "bytes"
    return f"{text!r} is not a rate: did you mean {rate} ({what} per second)?"


def parse_bytes(value: str | float | int) -> float:
    """'80GB' -> 8e10, '80GiB' -> 85899345920, 2048 -> 2048.0 (a bare number is bytes)."""
    plain = _number(value)
    if plain is not None:
        return plain
    m = _BYTES_RE.match(str(value).strip())
    if not m:
        raise UnitError(f"{value!r} is not a size; use e.g. '80GB', '141GiB' or a number of bytes")
    return _scaled(m["num"], _prefix_factor(m["prefix"]))


def parse_rate_bytes_per_s(value: str | float | int) -> float:
    """'600GB/s' -> 6e11 B/s, '400Gb/s' (bits) -> 5e10 B/s, '25 GBps' -> 2.5e10; a bare number is B/s."""
    plain = _number(value)
    if plain is not None:
        return plain
    text = str(value).strip().replace(" ", "")
    m = _RATE_RE.match(text)
    if not m:
        raise UnitError(f"{value!r} is not a bandwidth; use e.g. '600GB/s', '400Gb/s' (bits) or bytes per second")
    per_bit = m["unit"] in ("b", "bit")
    return _scaled(m["num"], _prefix_factor(m["prefix"]), BITS_PER_BYTE if per_bit else 1)


def _prefixed(value: str | float | int, pattern: re.Pattern[str], what: str) -> float:
    """A bare number as it is, else `pattern`'s number times its SI prefix (`what`: the error's tail)."""
    plain = _number(value)
    if plain is not None:
        return plain
    m = pattern.match(str(value).strip().replace(" ", ""))
    if not m:
        raise UnitError(f"{value!r} is not {what}")
    return _scaled(m["num"], _prefix_factor(m["prefix"]))


def parse_flops_per_s(value: str | float | int) -> float:
    """'312 TFLOPS' -> 3.12e14, '989.4TFLOP/s' -> 9.894e14; a bare number is FLOP/s."""
    return _prefixed(value, _FLOPS_RE, "a compute rate; use e.g. '312 TFLOPS' or FLOP/s as a number")


def parse_watts(value: str | float | int) -> float:
    """'1000W' -> 1000.0, '1.4kW' -> 1400.0; a bare number is watts."""
    return _prefixed(value, _POWER_RE, "a power; use e.g. '1000W', '1.4kW' or watts as a number")


def parse_seconds(value: str | float | int) -> float:
    """'1us' -> 1e-6, '0.5 ms' -> 5e-4; a bare number is seconds."""
    plain = _number(value)
    if plain is not None:
        return plain
    m = _TIME_RE.match(str(value).strip().replace(" ", ""))
    factor = _TIME.get(m["unit"].lower()) if m else None
    if factor is None:  # never a KeyError: an unknown unit is a one-line error
        raise UnitError(f"{value!r} is not a time; use e.g. '2us', '0.5ms' or seconds as a number")
    return _scaled(m["num"], factor)


def format_bytes(n_bytes: float) -> str:
    """Decimal units, as GPU datasheets quote memory: 8e10 -> '80.0 GB'; '-' where there is none."""
    if not math.isfinite(n_bytes):
        return "-"
    for unit, size in (("TB", TERA), ("GB", GIGA), ("MB", MEGA), ("kB", KILO)):
        if abs(n_bytes) >= size:
            return f"{n_bytes / size:.1f} {unit}"
    return f"{n_bytes:.0f} B"


def format_rate(bytes_per_s: float) -> str:
    """A bandwidth in decimal units, three digits: 5.68e10 -> '56.8 GB/s', 3.05e12 -> '3.05 TB/s'."""
    if not math.isfinite(bytes_per_s):
        return "-"
    for unit, size in (("TB/s", TERA), ("GB/s", GIGA), ("MB/s", MEGA)):
        if abs(bytes_per_s) >= size:
            return f"{bytes_per_s / size:.3g} {unit}"
    return f"{bytes_per_s / KILO:.3g} kB/s"


def format_flops(flops_per_s: float) -> str:
    """A FLOP rate in TFLOP/s, as datasheets quote it: 5.43e11 -> '0.543 TFLOP/s', 1.491e15 ->
    '1,491 TFLOP/s' (whole TFLOP/s with separators from 1,000 up, not '1.49e+03')."""
    tf = flops_per_s / 1e12
    if not math.isfinite(tf):
        return "-"
    return f"{tf:,.0f} TFLOP/s" if abs(tf) >= 1e3 else f"{tf:.3g} TFLOP/s"


def whole_bytes(value: Any) -> Any:
    """A GPU's memory for JSON, in whole bytes: a preset in GiB parses to a fraction of a byte
    (79.11 GiB -> 84943715696.64), which no GPU has; rounded at output only, so no prediction moves.
    An array (a swept GPU) gives a list; null where there is none."""
    import numpy as np

    arr = np.asarray(value, dtype=float)
    whole = [round(float(v)) if math.isfinite(v) else None for v in arr.ravel()]
    return whole[0] if arr.ndim == 0 else np.array(whole, dtype=object).reshape(arr.shape).tolist()


# a memory breakdown's keys that its parts do not add up to: the total, and the blocks the caching
# allocator keeps cached and would release before running out (`MemoryBreakdown.cached_bytes`)
BESIDE_TOTAL = ("total", "cached")


def whole_bytes_parts(parts: dict[str, Any]) -> dict[str, Any]:
    """A memory breakdown for JSON ({"weights": ..., "total": ...}) in whole bytes, as `whole_bytes`
    gives a GPU's (the allocator's 10% share made 4297903308.8 bytes). The total is the rounded total
    and the parts still add up to it: each rounded down, the bytes left over going to the largest
    fractions (Hamilton's method). An array breakdown (a grid) is rounded value by value. `BESIDE_TOTAL`
    keys (the cached blocks, not in the total) are rounded alone."""
    rounded = {k: whole_bytes(v) for k, v in parts.items()}
    total = rounded.get("total")
    values = [v for k, v in parts.items() if k not in BESIDE_TOTAL]
    if not isinstance(total, int) or not all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
        return rounded
    floors = {k: math.floor(float(v)) for k, v in parts.items() if k not in BESIDE_TOTAL}
    left = total - sum(floors.values())
    if not 0 <= left <= len(floors):  # parts that do not add up to their total: leave them as they are
        return rounded
    by_fraction = sorted(floors, key=lambda k: float(parts[k]) - floors[k], reverse=True)
    return {k: rounded[k] if k in BESIDE_TOTAL else floors[k] + (k in by_fraction[:left]) for k in parts}


def format_gib(memory_bytes: float) -> str:
    """A GPU's memory as CUDA reports it, in GiB as PyTorch prints it: 84943715696.64 -> '79.11 GiB'."""
    if not math.isfinite(memory_bytes):
        return "-"
    return f"{memory_bytes / 2**30:.2f} GiB"


def format_capacity(memory_bytes: float) -> str:
    """A GPU's memory as CUDA reports it (`Gpu.memory_bytes`, total_memory), in GiB as PyTorch prints
    it, with the decimal figure beside: 84943715696.64 -> '79.11 GiB (84.9 GB, CUDA's total)'."""
    if not math.isfinite(memory_bytes):
        return "-"
    return f"{format_gib(memory_bytes)} ({format_bytes(memory_bytes)}, CUDA's total)"


def format_seconds(t_s: float, digits: int = 3) -> str:
    """Readable time: 0.0123 -> '12.3 ms' (`digits` significant); '-' where there is none (NaN, inf)."""
    if not math.isfinite(t_s):
        return "-"
    a = abs(float(f"{t_s:.{digits}g}"))  # as rounded: 999.6 s is '1,000 s', not '1e+03 s'
    if a >= 1e3:  # whole seconds with separators, not '2.04e+03 s'; decimals only past 3 digits
        return f"{_significant(t_s, digits)} s"
    if a >= 1.0 or a == 0.0:
        return f"{t_s:.{digits}g} s"
    if a >= 1e-3:
        return f"{t_s * 1e3:.{digits}g} ms"
    if a >= 1e-6:
        return f"{t_s * 1e6:.{digits}g} µs"
    return f"{t_s * 1e9:.{digits}g} ns"


def format_seconds_beside(t_s: float, limit_s: float) -> str:
    """`t_s` with as many digits (3 to 6) as tell it apart from `limit_s`: a TPOT of 50.02 ms that
    misses a 50 ms target reads '50.02 ms', not the '50 ms' it rounds to."""
    for digits in range(3, 7):
        if format_seconds(t_s, digits) != format_seconds(limit_s, digits):
            break
    return format_seconds(t_s, digits)


def _significant(x: float, digits: int = 3) -> str:
    """`digits` significant digits, as `format_seconds` writes a number: from 1,000 on whole with
    separators ('1,370', not '1.37e+03'), decimals only below `digits` whole digits."""
    a = abs(float(f"{x:.{digits}g}"))  # 999.6 rounds to 1,000 (not '1e+03')
    if a >= 1e3:
        return f"{x:,.{max(0, digits - len(str(int(a))))}f}"
    return f"{x:.{digits}g}"


def format_seconds_range(low_s: float, high_s: float) -> str:
    """An interval in one unit (the high end's), each end as `format_seconds` writes it: (0.95, 1.12)
    -> '0.95-1.12 s', (926, 1370) -> '926-1,370 s' (review 43 #10: it was '926-1.37e+03 s'); '-'
    without one."""
    if not (math.isfinite(low_s) and math.isfinite(high_s)):
        return "-"
    a = abs(high_s)
    scale, unit = next(((s, u) for s, u in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")) if a >= s), (1e-9, "ns"))
    return f"{_significant(low_s / scale)}-{_significant(high_s / scale)} {unit}"


def share_or_bytes(flag: str, text: str, capacity_bytes: float) -> float:
    """A flag's amount of a capacity: bytes ('8GB') or a share of it ('10%'); 0 alone may be bare
    ('10' is 10%? 10 GB? not 10 bytes: refused). One SpecError line naming the flag otherwise."""
    t = str(text).strip()
    try:
        if t.endswith("%"):
            frac = float(t[:-1]) / 100
            if not 0 <= frac < 1:
                raise ValueError
            return frac * capacity_bytes
        if is_bare_number(t) and float(t) != 0:  # '10' or '1e3': 10% or 10 GB, not bytes
            raise ValueError
        value = parse_bytes(t)
    except (ValueError, SpecError):
        raise SpecError(f"{flag}: {text!r} is not allowed; give bytes (8GB), a percentage (10%) or 0") from None
    if not 0 <= value < capacity_bytes:
        raise SpecError(f"{flag}: {text!r} must be between 0 and the GPU's {capacity_bytes / 1e9:.0f} GB")
    return value
