"""Array helpers for the engines' hot paths."""

from __future__ import annotations

import numpy as np

from shardwise.specs._checks import Number


def where(condition: Number, a: Number, b: Number) -> Number:
    """`np.where(condition, a, b)`, but a condition that is one value (a plan's scalar field, as in
    a sweep's grid) returns `a` or `b` as it is instead of a full-size copy of it. The values
    are the same; the result may keep a smaller (broadcastable) shape."""
    if np.ndim(condition) == 0:
        return a if bool(condition) else b
    return np.where(condition, a, b)


def plus(a: Number, b: Number) -> Number:
    """`a + b`, without a pass over `a` when `b` is a scalar zero (an overhead left at its default)."""
    if np.ndim(b) == 0 and float(b) == 0.0:
        return a
    return a + b
