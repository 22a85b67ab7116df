"""Reading the small input files a user names (YAML specs, config.json, run tables): only regular
files (a FIFO or a device would block or never end), at most a stated size, every OS problem one
SpecError line naming the file.

While a command runs (`watching_inputs`, which the CLI opens around every command), each file read
here is noted, and `atomic.check_writable` refuses to write over one of them: an `-o` that names
the model's config.json, or the link file a system YAML names, must never replace it."""

from __future__ import annotations

import codecs
import contextlib
import contextvars
import os
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from shardwise.errors import SpecError

# resolved path -> what was read from it (a "YAML spec", a "config.json"); None: nothing watched
_INPUTS: contextvars.ContextVar[dict[Path, str] | None] = contextvars.ContextVar("shardwise_inputs", default=None)


@contextlib.contextmanager
def watching_inputs() -> Iterator[None]:
    """Note every input file read inside the block, so that no output may replace one."""
    token = _INPUTS.set({})
    try:
        yield
    finally:
        _INPUTS.reset(token)


def resolved(name: str | Path) -> Path | None:
    """The absolute path `name` leads to (links followed); None for a name the OS refuses."""
    try:
        return Path(name).resolve()
    except (OSError, ValueError, RuntimeError):
        return None


def note_input(path: str | Path, what: str) -> None:
    """Remember `path` as an input of the running command (nothing when none is watched)."""
    seen = _INPUTS.get()
    if seen is not None and (p := resolved(path)) is not None:
        seen.setdefault(p, what)


def input_read_from(path: str | Path) -> str | None:
    """What the running command read from `path` (a "YAML spec"), or None if it read nothing there."""
    seen = _INPUTS.get()
    if not seen or (p := resolved(path)) is None:
        return None
    return seen.get(p)


def is_file(name: str | Path) -> bool:
    """`Path.is_file` that answers False instead of raising for names the OS refuses (too long,
    NUL bytes)."""
    try:
        return Path(name).is_file()
    except (OSError, ValueError):
        return False


def is_dir(name: str | Path) -> bool:
    """`Path.is_dir`, False for names the OS refuses (as `is_file`)."""
    try:
        return Path(name).is_dir()
    except (OSError, ValueError):
        return False


# `-` names standard input to many tools; shardwise reads every input from a file by name (on `-o`
# alone `-` means standard output: cli.output.STDOUT), so an input named `-` is refused in one line
STDIN_REFUSED = "standard input is not read; give a file's name (a file named '-': ./-)"


def refuse_stdin(name: object, flag: str) -> None:
    """Refuse `-` as the input file of `flag` (see STDIN_REFUSED), as the user typed it: `./-` is a file."""
    if isinstance(name, str) and name.strip() == "-":
        raise SpecError(f"{flag} -: {STDIN_REFUSED}")


def read_small(path: str | Path, max_bytes: int, what: str) -> bytes:
    """The bytes of the regular file `path`, refusing anything larger than `max_bytes`."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except (OSError, ValueError) as exc:
        if isinstance(exc, FileNotFoundError) and str(p) == "-":  # a Python caller's `-`
            raise SpecError(f"-: {STDIN_REFUSED}") from None
        reason = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise SpecError(f"{p}: cannot read ({reason})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SpecError(f"{p}: is not a regular file (a {what} must be a file)")
        if info.st_size > max_bytes:
            raise SpecError(f"{p}: {info.st_size:,} bytes is too large for a {what} (at most {max_bytes:,})")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise SpecError(f"{p}: cannot read ({exc.strerror})") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise SpecError(f"{p}: more than {max_bytes:,} bytes is too large for a {what}")
    note_input(p, what)
    return data


def check_header(
    names: Sequence[str], known: Sequence[str], where: str, see: str, hints: Mapping[str, str] | None = None
) -> None:
    """Refuse a table's header that names a column twice or a column not in `known`, naming the
    closest known ones where they are close enough to be a typo (`hints`: a fix of its own for a
    name; `see`: where the columns are listed)."""
    import difflib

    for n, name in enumerate(names):
        if name in names[:n]:
            raise SpecError(f"{where}: column {name!r} appears twice")
        if name in known:
            continue
        # the closest names only, and only those close enough to be a typo (a one-letter `a` is
        # not a misspelt `ga`)
        close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.7)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        if "," not in name and any(sep in name for sep in ";\t"):
            hint = "; columns are separated by one of comma, semicolon or tab throughout"
        hint = (hints or {}).get(name, hint)
        raise SpecError(f"{where}: unknown column {name!r}{hint} ({see})")


# byte-order marks -> the codec reading the text after them; UTF-32's first: FF FE 00 00 begins both LE marks
_MARKS = (
    (codecs.BOM_UTF32_LE, "UTF-32"),
    (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF8, "UTF-8-sig"),
    (codecs.BOM_UTF16_LE, "UTF-16"),
    (codecs.BOM_UTF16_BE, "UTF-16"),
)
# a table's column separators: the comma; the semicolon of Excel's CSV where the decimal mark is a
# comma (European locales: Excel writes the locale's list separator); the tab of Excel's "Unicode Text"
DELIMITERS = (",", ";", "\t")


def decode_table(raw: bytes, where: str) -> str:
    """The text of a table file as spreadsheets save it: UTF-8 (Excel's "CSV UTF-8" starts with a
    byte-order mark), or UTF-16 or UTF-32 after its mark (Excel's "Unicode Text": UTF-16 LE with
    one). NUL bytes without a mark are UTF-16 without it, or not text; other bytes that are not
    UTF-8 another code page (Excel's plain "CSV" on Windows): one line each, saying what to save."""
    codec = next((c for mark, c in _MARKS if raw.startswith(mark)), None)
    if codec is None and b"\0" in raw:
        raise SpecError(
            f"{where}: NUL bytes and no byte-order mark: UTF-16 without its mark, or not text; "
            "save it as CSV UTF-8, or as UTF-16 with its mark (Excel's Unicode Text)"
        )
    name = (codec or "UTF-8").removesuffix("-sig")
    try:
        return raw.decode((codec or "utf-8").lower())
    except UnicodeDecodeError as exc:
        said = f"its byte-order mark says {name}" if codec else "save the file as UTF-8"
        raise SpecError(f"{where}: byte {exc.start} is not {name} ({said})") from None


def sniff_delimiter(text: str, is_column: Callable[[str], bool]) -> str:
    """The separator (DELIMITERS) that splits the header of table `text` into names `is_column`
    knows (each stripped and lower-cased) only; a comma where none does (the header's check then
    names what is wrong)."""
    import csv
    import io

    for delimiter in DELIMITERS:
        header = next(csv.reader(io.StringIO(text), delimiter=delimiter), [])
        if header and all(is_column(h.strip().lower()) for h in header):
            return delimiter
    return ","
