"""The single-number branches of `shardwise.arrays` give numpy's value to the bit: the operand
numpy picks (NaN propagated, the second one on a tie, so a zero's sign too), and arrays pass
through to numpy unchanged."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from shardwise import arrays

VALUES = [0.0, -0.0, 1.0, -1.0, 2.5, np.nan, np.inf, -np.inf, 3, 0, True, False]
KINDS = [lambda x: x, np.float64, lambda x: np.asarray(x, dtype=float)]


def bits(value: object) -> bytes:
    return np.asarray(value, dtype=float).tobytes()


@pytest.mark.parametrize("name", ["maximum", "minimum"])
def test_maximum_and_minimum_pick_numpys_operand(name):
    ours, theirs = getattr(arrays, name), getattr(np, name)
    for (a, b), ka, kb in itertools.product(itertools.product(VALUES, VALUES), KINDS, KINDS):
        x, y = ka(a), kb(b)
        got = ours(x, y)
        assert np.ndim(got) == 0 and bits(got) == bits(theirs(x, y)), (name, x, y, got)


def test_ifelse_select_and_choose_are_numpys_for_single_numbers():
    for c, a, b in itertools.product([True, False, np.True_, np.False_], VALUES, VALUES):
        assert bits(arrays.ifelse(c, a, b)) == bits(np.where(c, a, b))
        assert bits(arrays.select([c, not c], [a, b], 7.0)) == bits(np.select([c, not c], [a, b], 7.0))
        assert bits(arrays.select([False, False], [a, b], -0.0)) == bits(np.select([False, False], [a, b], -0.0))
    for i in range(3):
        choices = [1.5, -0.0, np.float64(2.0)]
        assert bits(arrays.choose(i, choices)) == bits(np.choose(i, choices))


def test_sqrt_is_numpys_for_single_numbers():
    rng = np.random.default_rng(0)
    for x in [*rng.random(1000) * 10.0 ** rng.integers(-30, 30, 1000), 0.0, -0.0, np.inf, 4.0, 2.0]:
        assert bits(arrays.sqrt(float(x))) == bits(np.sqrt(float(x)))
    with np.errstate(invalid="ignore"):  # a negative number: numpy's NaN, not math's error
        assert np.isnan(arrays.sqrt(-1.0))


def test_arrays_go_to_numpy_unchanged():
    a, b = np.array([1.0, np.nan, -0.0]), np.array([0.5, 2.0, 0.0])
    assert np.array_equal(arrays.maximum(a, b), np.maximum(a, b), equal_nan=True)
    assert np.array_equal(arrays.minimum(a, 0.7), np.minimum(a, 0.7), equal_nan=True)
    cond = np.array([True, False, True])
    assert np.array_equal(arrays.ifelse(cond, a, 3.0), np.where(cond, a, 3.0), equal_nan=True)
    assert arrays.ifelse(True, a, 3.0).shape == (3,)  # an array operand: numpy's broadcast result
    pick = np.array([0, 1, 0])
    assert np.array_equal(arrays.choose(pick, [a, b]), np.choose(pick, [a, b]), equal_nan=True)
    assert isinstance(arrays.as_float(np.array([1, 2])), np.ndarray)
    assert type(arrays.as_float(3)) is np.float64 and type(arrays.as_bool(1)) is np.bool_
    assert arrays.any_true(np.array([False, True])) and not arrays.any_true(np.False_)
