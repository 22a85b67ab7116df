import pytest

from shardwise import units
from shardwise.errors import UnitError


@pytest.mark.parametrize(
    ("text", "expected"),
    [("600GB/s", 600e9), ("400Gb/s", 50e9), ("25 GBps", 25e9), ("1.5TB/s", 1.5e12), (12e9, 12e9)],
)
def test_rates_are_bytes_per_second_and_bits_are_divided_by_eight(text, expected):
    assert units.parse_rate_bytes_per_s(text) == pytest.approx(expected)


def test_sizes_decimal_and_binary():
    assert units.parse_bytes("80GB") == 80e9
    assert units.parse_bytes("80GiB") == 80 * 2**30
    assert units.parse_bytes(1024) == 1024.0


def test_flops_and_times():
    assert units.parse_flops_per_s("312 TFLOPS") == pytest.approx(312e12)
    assert units.parse_flops_per_s("989.4TFLOP/s") == pytest.approx(989.4e12)
    assert units.parse_seconds("2us") == pytest.approx(2e-6)
    assert units.parse_seconds("0.5 ms") == pytest.approx(5e-4)


@pytest.mark.parametrize("bad", ["fast", "600GB", "12 parsecs"])
def test_unreadable_rate_names_the_value_and_an_example(bad):
    with pytest.raises(UnitError, match="600GB/s"):
        units.parse_rate_bytes_per_s(bad)


def test_formatting():
    assert units.format_bytes(80e9) == "80.0 GB"
    assert units.format_seconds(0.0123) == "12.3 ms"
    assert units.format_seconds(2.5e-6) == "2.5 µs"
