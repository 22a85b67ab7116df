"""Quantity strings to SI numbers (units.py): decimal prefixes are powers of 1000, binary ones of
1024, bits are an eighth of a byte, and anything else is one UnitError line with an example."""

import pytest

from shardwise import units
from shardwise.errors import SpecError, UnitError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("600GB/s", 6e11),
        ("600 GB/s", 6e11),
        ("400Gb/s", 50e9),
        ("100Gbit/s", 12.5e9),
        ("600gb/s", 75e9),  # a lower-case b is bits, whatever the prefix's case
        ("25 GBps", 25e9),
        ("12.5 GB/sec", 12.5e9),
        ("1.5TB/s", 1.5e12),
        ("1GiB/s", 2**30),
        (12e9, 12e9),
    ],
)
def test_rates_are_bytes_per_second_and_bits_are_divided_by_eight(text, expected):
    assert units.parse_rate_bytes_per_s(text) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("80GB", 80e9), ("80 GB", 80e9), ("80GiB", 80 * 2**30), ("512MiB", 2**29), ("2kB", 2000.0), ("3 bytes", 3.0)],
)
def test_sizes_decimal_and_binary(text, expected):
    assert units.parse_bytes(text) == expected
    assert units.parse_bytes(1024) == 1024.0  # a bare number is bytes


def test_flops_and_times():
    assert units.parse_flops_per_s("312 TFLOPS") == pytest.approx(312e12)
    assert units.parse_flops_per_s("989.4TFLOP/s") == pytest.approx(989.4e12)
    assert units.parse_flops_per_s("1.5 PFLOPS") == pytest.approx(1.5e15)
    assert units.parse_flops_per_s("2e3 GFLOP/s") == pytest.approx(2e12)
    assert units.parse_seconds("2us") == pytest.approx(2e-6)
    assert units.parse_seconds("10µs") == pytest.approx(1e-5)
    assert units.parse_seconds("10\u03bcs") == pytest.approx(1e-5)  # the Greek mu, not the micro sign
    assert units.parse_seconds("0.5 ms") == pytest.approx(5e-4)
    assert units.parse_seconds("3ns") == pytest.approx(3e-9)


@pytest.mark.parametrize(
    ("parse", "text", "expected"),
    [
        (units.parse_rate_bytes_per_s, "2.039TB/s", 2.039e12),  # 2.039 * 1e12 is 2039000000000.0002
        (units.parse_rate_bytes_per_s, "3.35TB/s", 3.35e12),
        (units.parse_rate_bytes_per_s, "0.7Gb/s", 0.0875e9),
        (units.parse_seconds, "5us", 5e-6),  # 5 * 1e-6 is 4.9999999999999996e-06
        (units.parse_seconds, "0.3ms", 3e-4),
        (units.parse_flops_per_s, "989.4TFLOPS", 989.4e12),
        (units.parse_bytes, "1.1GB", 1.1e9),
    ],
)
def test_a_quantity_is_the_number_as_written_rounded_once(parse, text, expected):
    """What --json prints reads as the preset says (review: the A100's 2.039TB/s came out as
    2039000000000.0002): the text's decimal number is scaled exactly, then rounded to a float."""
    assert parse(text) == expected


@pytest.mark.parametrize("bad", ["fast", "600GB", "600 parsecs", True])
def test_unreadable_rate_is_one_line_naming_the_value_and_examples(bad):
    with pytest.raises(UnitError) as excinfo:
        units.parse_rate_bytes_per_s(bad)
    assert str(excinfo.value) == (
        f"{bad!r} is not a bandwidth; use e.g. '600GB/s', '400Gb/s' (bits) or bytes per second"
    )
    assert isinstance(excinfo.value, SpecError)  # the CLI prints SpecErrors as one line, exit status 2


@pytest.mark.parametrize(
    ("parse", "bad", "message"),
    [
        (units.parse_bytes, "80gb", "'80gb' is not a size; use e.g. '80GB', '141GiB'"),  # bits or bytes? refused
        (units.parse_bytes, True, "True is not a size"),  # a YAML `yes` is not 1 byte
        (units.parse_flops_per_s, "312 TB/s", "'312 TB/s' is not a compute rate; use e.g. '312 TFLOPS'"),
        (units.parse_seconds, "5 minutes", "'5 minutes' is not a time; use e.g. '2us', '0.5ms'"),
    ],
)
def test_each_parser_refuses_other_quantities(parse, bad, message):
    with pytest.raises(UnitError, match=message):
        parse(bad)


def test_formatting():
    assert units.format_bytes(80e9) == "80.0 GB"
    assert units.format_bytes(1.5e12) == "1.5 TB"
    assert units.format_bytes(512) == "512 B"
    assert units.format_seconds(0.0123) == "12.3 ms"
    assert units.format_seconds(2.5e-6) == "2.5 µs"
    assert units.format_seconds(5e-9) == "5 ns"
    assert units.format_seconds(0.0) == "0 s"
    assert units.format_seconds(2043.7) == "2,044 s" and units.format_seconds(999.0) == "999 s"
