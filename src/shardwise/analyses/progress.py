"""A progress hook for analyses whose results are cached: `functools.cache` keys on the arguments,
so a callback cannot be one. The command line sets `reporting(advance)` around the first call
(`validate public`'s rich bar on stderr); the loops call `tick()`, which does nothing otherwise."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

_advance: Callable[[int], None] | None = None


@contextmanager
def reporting(advance: Callable[[int], None]) -> Iterator[None]:
    """Send the analyses' `tick()`s to `advance` inside the block."""
    global _advance
    before, _advance = _advance, advance
    try:
        yield
    finally:
        _advance = before


def tick(n: int = 1) -> None:
    """One step of the work done (a row priced): to the bar `reporting` set, if any."""
    if _advance is not None:
        _advance(n)
