"""Reading `--vary NAME=VALUES` into SI values (ranges, lists, geometric steps)."""

from __future__ import annotations

import numpy as np

from shardwise.analyses.experiment import VARIABLES
from shardwise.arrays import sorted_distinct
from shardwise.errors import SpecError
from shardwise.specs._checks import MAX_WHOLE

DEFAULT_POINTS = 41
MAX_VALUES = 100_000  # per varied variable
HEAD_WIDTH = 128  # ranges of `hidden` step in whole 128-wide heads (`_whole_heads`)
NEEDS_UNIT = {"bandwidth": "900GB/s", "latency": "2us", "peak_flops": "312TFLOPS", "hbm_bandwidth": "2TB/s"}


def parse_vary(text: str) -> tuple[str, np.ndarray]:
    """'batch=1..32' (every integer), 'batch=64..256:4' (N evenly spaced, rounded: 64, 128, 192, 256),
    'bandwidth=1GB/s..900GB/s' (41 log-spaced points, ':N' for N: a rate, latency or peak spans decades),
    'layers=8,16,32' (a list), 'hidden=512..16384:x2' (doubling; a range of widths is rounded
    to multiples of 128, `_whole_heads`). Returns SI values."""
    name, sep, spec = text.replace(" ", "").partition("=")
    if name.replace("-", "_") in ("micro_batch", "micro_batches", "mb"):  # m follows the batch
        raise SpecError(
            f"--vary {text!r}: the micro-batches are not varied on their own: a plan runs m = batch / "
            "micro-batch of them per step, so vary the batch (--vary batch=1..32) at a fixed --micro-batch"
        )
    if not sep or name not in VARIABLES:
        raise SpecError(f"--vary {text!r}: expected NAME=VALUES with NAME one of {', '.join(VARIABLES)}")
    try:
        values = _vary_values(name, spec)
    except SpecError as exc:
        raise SpecError(f"--vary {text!r}: {exc}") from None
    except (ValueError, OverflowError):
        raise SpecError(
            f"--vary {text!r}: cannot read the values; e.g. batch=1..32, layers=8,16,32, "
            "bandwidth=1GB/s..900GB/s:20, hidden=512..16384:x2"
        ) from None
    return name, values


def _vary_values(name: str, spec: str) -> np.ndarray:
    var = VARIABLES[name]

    def value(token: str) -> float:
        if name in NEEDS_UNIT and _is_number(token):
            raise SpecError(f"{token} has no unit; write it like {NEEDS_UNIT[name]}")
        return var.parse(token)

    if ".." in spec:
        lo_text, _, rest = spec.partition("..")
        hi_text, _, count = rest.partition(":")
        lo, hi = value(lo_text), value(hi_text)
        if not (0 < lo < hi and np.isfinite(hi)):
            raise SpecError("need 0 < low < high, both finite")
        if count.startswith("x"):
            factor = float(count[1:])
            if not (np.isfinite(factor) and factor > 1):
                raise SpecError(f"the factor after ':x' must be a finite number > 1, got {count[1:]}")
            n = int(np.floor(np.log(hi / lo) / np.log(factor) + 1e-9)) + 1
            values = lo * factor ** np.arange(min(n, MAX_VALUES + 1))
        elif var.integer and not count:
            if hi - lo + 1 > MAX_VALUES:
                raise SpecError(
                    f"{int(hi - lo + 1):,} values is too many (at most {MAX_VALUES:,}); add ':N' for N points"
                )
            values = np.arange(lo, hi + 1)
        else:
            n = int(count) if count else DEFAULT_POINTS
            if not 2 <= n <= MAX_VALUES:
                raise SpecError(f"the number of points after ':' must be 2..{MAX_VALUES:,}, got {count}")
            # N points evenly spaced, rounded for a whole-number variable (batch=64..256:4 is 64, 128, 192,
            # 256; review 45 #4); evenly on a log scale for the rates, which span decades (1GB/s..900GB/s)
            values = np.geomspace(lo, hi, n) if var.log and not var.integer else np.linspace(lo, hi, n)
        if name == "hidden":
            values = _whole_heads(values, lo, hi)
            if np.unique(values).size < 2:  # the range collapsed to one width: nothing is swept
                raise SpecError(
                    f"a range of widths steps in whole {HEAD_WIDTH}-wide heads, and {lo:g}..{hi:g} holds only "
                    f"{float(values[0]):g}; widen it (e.g. {HEAD_WIDTH}..{8 * HEAD_WIDTH}) or list the widths "
                    f"(hidden={lo:g},{hi:g})"
                )
    else:
        values = np.array([value(v) for v in spec.split(",") if v])
    if values.size == 0 or np.any(values <= 0) or not np.all(np.isfinite(values)):
        raise SpecError("values must be finite and > 0")
    if values.size > MAX_VALUES:
        raise SpecError(f"{values.size:,} values is too many (at most {MAX_VALUES:,})")
    if var.integer and np.any(values > MAX_WHOLE):  # whole numbers beyond 2**53 are not exact
        raise SpecError(f"{values.max():g} is not allowed; {name} must be at most {MAX_WHOLE:,}")
    if var.integer:  # ranges are rounded to whole numbers (lists were checked when read)
        values = sorted_distinct(np.round(values))
    return np.asarray(values, dtype=float)


def _whole_heads(values: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """A range of widths rounded to multiples of HEAD_WIDTH inside [lo, hi]: a width is a number
    of heads times the head dimension, and one no TP degree divides (hidden 1185 of 1024..16384:20)
    is a model no plan runs (`evaluate.heads_for_hidden`); a list is taken as given. A range
    holding no such multiple stays as it is."""
    first, last = np.ceil(lo / HEAD_WIDTH) * HEAD_WIDTH, np.floor(hi / HEAD_WIDTH) * HEAD_WIDTH
    if first > last:
        return values
    return np.clip(np.round(values / HEAD_WIDTH) * HEAD_WIDTH, first, last)


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True
