"""Tables of equal-length columns written as CSV or Parquet (by the extension), atomically: whole
(`write_columns`) or block by block (`columns_writer`, a streamed sweep)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

CSV_CHUNK_ROWS = 65_536  # rows formatted at a time: bounded memory whatever the table's length
# A number that is not there (NaN: an invalid plan's time, no winner's margin) is an empty field in
# every CSV the commands write (crossover's own writer too); an infinity is a value (a sweep's margin
# where one plan alone is valid) and is written `inf`
MISSING = ""


def write_columns(columns: dict[str, Any], path: str | Path, progress: Callable[[int, int], Any] | None = None) -> None:
    """Write columns (equal-length numpy arrays) as CSV, or Parquet by the extension, atomically:
    a temporary file in the same directory, renamed when complete. CSV is written CSV_CHUNK_ROWS
    rows at a time; `progress(rows done, rows)` is called after each chunk."""
    with columns_writer(path) as write:
        write(columns, progress)


def csv_text(columns: dict[str, Any]) -> str:
    """The CSV `write_columns` writes for `columns`, as text (no file)."""
    import io

    buffer = io.StringIO(newline="")
    _CsvBlocks(buffer).write(columns)
    return buffer.getvalue()


@contextlib.contextmanager
def columns_writer(path: str | Path) -> Iterator[Callable[..., None]]:
    """A table written block by block (a streamed sweep), CSV or Parquet by the extension,
    atomically: each `write(columns)` appends the rows of equal-length columns (the same names
    every time); the file appears, complete, when the block ends without an error."""
    from shardwise.atomic import atomic_path

    p = Path(path)
    with atomic_path(p) as tmp:
        if p.suffix.lower() == ".parquet":
            blocks = _ParquetBlocks(tmp)
            try:
                yield blocks.write
            finally:
                blocks.close()
        else:
            with open(tmp, "w", encoding="utf-8", newline="") as fh:
                yield _CsvBlocks(fh).write


class _CsvBlocks:
    """Rows appended to one CSV file: the header with the first block, then CSV_CHUNK_ROWS rows
    formatted at a time."""

    def __init__(self, fh: Any) -> None:
        self.fh, self.header = fh, False

    def write(self, columns: dict[str, Any], progress: Callable[[int, int], Any] | None = None) -> None:
        if not self.header:
            self.fh.write(",".join(quoted([str(name) for name in columns])) + "\n")
            self.header = True
        arrays = [np.asarray(v) for v in columns.values()]
        rows = len(arrays[0]) if arrays else 0
        for start in range(0, rows, CSV_CHUNK_ROWS):
            cells = [_cells(a[start : start + CSV_CHUNK_ROWS]) for a in arrays]
            self.fh.write("\n".join(map(",".join, zip(*cells, strict=True))))
            self.fh.write("\n")
            if progress is not None:
                progress(min(start + CSV_CHUNK_ROWS, rows), rows)


class _ParquetBlocks:
    """Row groups appended to one Parquet file. Text columns (a link, a winner, a schedule) repeat
    a few values: they are dictionary-encoded, and only they (a dictionary of distinct floats is
    wasted work)."""

    def __init__(self, path: str | Path) -> None:
        self.path, self.writer = path, None

    def write(self, columns: dict[str, Any], progress: Callable[[int, int], Any] | None = None) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        # an object column of true/false/None (a sweep's fits_in_memory[PLAN], empty where the plan is
        # invalid) is a nullable boolean; any other object column is text
        flags = [k for k, v in columns.items() if v.dtype == object and _nullable_flags(v)]
        text = [k for k, v in columns.items() if v.dtype == object and k not in flags]
        arrays = {
            k: pa.array(v, type=pa.string()).dictionary_encode() if k in text else pa.array(v) if k in flags else v
            for k, v in columns.items()
        }
        table = pa.table(arrays)
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.path, table.schema, use_dictionary=text or False)
        self.writer.write_table(table)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _nullable_flags(values: np.ndarray) -> bool:
    """An object column of booleans and None (Arrow infers a boolean type for it)."""
    import pyarrow as pa

    try:
        return bool(pa.types.is_boolean(pa.array(values).type))
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return False


def _cells(values: np.ndarray) -> list[str]:
    """One column's cells, as `cell` writes each value. A column that repeats a few values (a
    sweep's axes) formats each distinct value once."""
    if values.dtype == bool:
        return np.where(values, "true", "false").tolist()
    numeric = np.issubdtype(values.dtype, np.integer) or np.issubdtype(values.dtype, np.floating)
    if numeric and len(values) > 64:
        distinct, inverse = np.unique(values, return_inverse=True)  # NaNs stay apart: formatted alike
        if len(distinct) * 4 <= len(values):
            texts = np.array(_format(distinct), dtype=object)
            return texts[inverse].tolist()
    return _format(values)


def _format(values: np.ndarray) -> list[str]:
    if np.issubdtype(values.dtype, np.integer):
        return [str(v) for v in values.tolist()]
    if np.issubdtype(values.dtype, np.floating):
        texts = [repr(x) for x in values.astype(float).tolist()]  # shortest text that reads back the same
        for i in np.flatnonzero(np.isnan(values)).tolist():
            texts[i] = MISSING
        return texts
    return quoted([cell(v) for v in values.tolist()])


def cell(value: Any) -> str:
    """One CSV cell, the same rule in every CSV the commands write (plan, sweep, crossover, serve):
    booleans `true`/`false` (as JSON), integers whole (bytes are whole numbers), floats at full
    precision (`repr`: the shortest text that reads back as the same float, so a CSV's keys join a
    JSON's exactly; review 40 #6: `%.6g` wrote 1.92992e+11 bytes), a missing value (None, NaN) an
    empty field (`MISSING`), an infinity `inf`, anything else its text (not quoted: `quoted`)."""
    if value is None:
        return MISSING
    if isinstance(value, bool | np.bool_):
        return "true" if value else "false"
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, float | np.floating):
        return MISSING if value != value else repr(float(value))
    return str(value)


CSV_SPECIAL = (",", '"', "\n", "\r")


def quoted(texts: list[str]) -> list[str]:
    """Cells (or column names) quoted where RFC 4180 needs it: a comma, a quote or a line break
    inside, in double quotes with its quotes doubled. A plan's label holds commas (`tp=2,pp=4`: a
    sweep's `time_s[tp=2,pp=4]` column and its winner), which were written bare and split a row
    into more cells than its header (found by tests/test_invariants_output.py)."""
    special = {t for t in set(texts) if any(c in t for c in CSV_SPECIAL)}
    if not special:
        return texts
    return ['"' + t.replace('"', '""') + '"' if t in special else t for t in texts]
