"""`--vary NAME=LO..HI:N` gives N evenly spaced points, rounded for a whole-number variable, and
log-spaced ones for a rate or latency (which span decades); `:xF` is the geometric form. batch,
seq_len, hidden and gpus were log-spaced, so `batch=64..256:4` gave 64, 102, 161, 256, batches
that invalidated half a sweep's plans (review 45 #4)."""

from __future__ import annotations

import numpy as np
import pytest

from shardwise.analyses.vary import parse_vary


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("batch=64..256:4", [64, 128, 192, 256]),
        ("seq_len=1024..8192:8", [1024 * k for k in range(1, 9)]),
        ("gpus=8..64:8", [8, 16, 24, 32, 40, 48, 56, 64]),
        ("hidden=1024..4096:4", [1024, 2048, 3072, 4096]),
        ("layers=8..32:4", [8, 16, 24, 32]),
    ],
)
def test_n_points_of_a_whole_number_variable_are_evenly_spaced(text, expected):
    assert parse_vary(text)[1].tolist() == expected


def test_every_second_batch_as_sweep_md_says():
    assert np.all(np.diff(parse_vary("batch=64..512:225")[1]) == 2)


def test_rates_are_log_spaced_and_the_factor_form_is_geometric():
    _, rates = parse_vary("bandwidth=1GB/s..1000GB/s:4")
    assert np.allclose(rates, [1e9, 1e10, 1e11, 1e12])
    _, latency = parse_vary("latency=1us..100us:3")
    assert np.allclose(latency, [1e-6, 1e-5, 1e-4])
    assert parse_vary("batch=64..512:x2")[1].tolist() == [64, 128, 256, 512]
