"""`shardwise serve --lengths/--burstiness`: the request mix a user names (a preset or a CSV file),
read and checked here, at the edge; `engines.request_mix` draws from it."""

from __future__ import annotations

import csv
import io
import math
from typing import Any

from shardwise.errors import SpecError

MIX_NAMES = ("fixed", "sharegpt")
# the names a table may have: the reader sniffs the separator (comma, semicolon, tab) and the encoding,
# so Excel's "Unicode Text" (.txt, UTF-16, tabs) and a .tsv read as a .csv does (review 42 F7)
TABLE_SUFFIXES = (".csv", ".tsv", ".txt")
MAX_CSV_BYTES = 64 * 1024 * 1024
# a count column makes the rows a histogram (each row's weight); any of these names
WEIGHT_COLUMNS = ("count", "weight", "requests")
COLUMNS_TEXT = "the columns: input_len, output_len, and count, weight or requests for a histogram"


def request_mix(lengths: str) -> Any:
    """The `RequestMix` that --lengths names (None: fixed, the --input-len/--output-len of every request)."""
    from shardwise.files import refuse_stdin

    refuse_stdin(lengths, "--lengths")
    name = lengths.strip()
    if name.lower() == "fixed":
        return None
    if name.lower() == "sharegpt":
        from shardwise.specs.request_mix import SHAREGPT

        return SHAREGPT
    if not name.lower().endswith(TABLE_SUFFIXES):
        raise SpecError(
            f"--lengths: {lengths!r} is not allowed; choose fixed, sharegpt or a table of input_len,output_len rows "
            f"({', '.join(TABLE_SUFFIXES)})"
        )
    return read_lengths_csv(name)


def read_lengths_csv(path: str) -> Any:
    """A table mix from a CSV file: a header with input_len and output_len (and optionally count,
    weight or requests: how many requests each row stands for), then one row per request or bin."""
    import numpy as np

    from shardwise.files import check_header, decode_table, read_small, sniff_delimiter
    from shardwise.specs.request_mix import RequestMix

    try:
        raw = read_small(path, MAX_CSV_BYTES, "lengths CSV")
    except SpecError as exc:
        raise SpecError(f"--lengths {exc}") from None
    # as Excel saves a table: UTF-16 "Unicode Text" too, and separated by semicolons or tabs
    text = decode_table(raw, f"--lengths {path}")
    known = ("input_len", "output_len", *WEIGHT_COLUMNS)
    reader = csv.reader(io.StringIO(text), delimiter=sniff_delimiter(text, known.__contains__))
    header = [h.strip().lower() for h in next(reader, [])]
    check_header(header, known, f"--lengths {path}", COLUMNS_TEXT)
    weights_given = [c for c in WEIGHT_COLUMNS if c in header]
    if len(weights_given) > 1:
        raise SpecError(f"--lengths {path}: give one of the columns {' or '.join(weights_given)}, not both")
    for column in ("input_len", "output_len"):
        if column not in header:
            raise SpecError(f"--lengths {path}: no {column} column (the header must name input_len and output_len)")
    weight_col = next((c for c in WEIGHT_COLUMNS if c in header), None)
    cols = [header.index("input_len"), header.index("output_len")]
    if weight_col is not None:
        cols.append(header.index(weight_col))
    rows: list[list[float]] = []
    for row in reader:
        number = reader.line_num  # the file's line, as an editor shows it (blank lines and quoted newlines counted)
        if not any(cell.strip() for cell in row):
            continue
        if len(row) > len(header):
            raise SpecError(f"--lengths {path} line {number}: {len(row)} values for {len(header)} columns")
        values = []
        for c in cols:
            cell = row[c].strip() if c < len(row) else ""
            values.append(_number(path, number, header[c], cell, whole=c != cols[-1] or weight_col is None))
        rows.append(values)
    if not rows:
        raise SpecError(f"--lengths {path}: no rows after the header")
    table = np.asarray(rows, dtype=float)
    weights = table[:, 2] if weight_col is not None else None
    if weights is not None and not weights.sum() > 0:
        raise SpecError(f"--lengths {path}: the {weight_col} column adds up to 0")
    return RequestMix(
        name=path,
        source=f"{len(rows):,} row{'s' if len(rows) > 1 else ''} of {path}"
        + (f" weighted by {weight_col}" if weight_col else ""),
        input_lens=table[:, 0].astype(np.int64),
        output_lens=table[:, 1].astype(np.int64),
        weights=weights,
    )


def _number(path: str, line: int, column: str, cell: str, whole: bool) -> float:
    """One cell: a whole number of at least 1 (lengths) or a number of at least 0 (a weight)."""
    try:
        value = float(cell)
    except ValueError:
        value = math.nan
    point = " (with a decimal point, not a comma)" if "," in cell else ""  # a European Excel's decimal comma
    if whole and not (math.isfinite(value) and value >= 1 and value == int(value) and value <= 2**31):
        raise SpecError(f"--lengths {path} line {line}: {column} {cell!r} is not allowed; give a whole number >= 1")
    if not whole and not (math.isfinite(value) and value >= 0):
        raise SpecError(f"--lengths {path} line {line}: {column} {cell!r} is not allowed; give a number >= 0{point}")
    return value


def check_mix_flags(
    mix: Any,
    burstiness: float,
    request_rate: float | None,
    batching: str,
    targets: bool,
    emit: str | None,
    lengths_given: bool,
) -> None:
    """One line for each combination a request mix or a burstiness does not take."""
    if not (math.isfinite(burstiness) and 0.01 <= burstiness <= 100):
        raise SpecError(f"--burstiness: {burstiness:g} is not allowed; give a number from 0.01 to 100 (1: Poisson)")
    if burstiness != 1.0 and request_rate is None:
        raise SpecError("--burstiness shapes the gaps between --request-rate arrivals; add --request-rate")
    if mix is None:
        return
    if lengths_given:
        raise SpecError(f"--input-len/--output-len set fixed lengths; drop them with --lengths {mix.name}")
    if batching == "static":
        raise SpecError(f"--lengths {mix.name} needs --batching inflight (a static batch has one length)")
    if targets:
        raise SpecError(f"--ttft-max/--tpot-max search fixed lengths; drop --lengths {mix.name}")
    if emit:
        raise SpecError(f"--emit {emit} sizes the server for fixed lengths; drop --lengths {mix.name}")
