"""Reading the small input files a user names (YAML specs, config.json, run tables): only regular
files (a FIFO or a device would block or never end), at most a stated size, every OS problem one
SpecError line naming the file."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from shardwise.errors import SpecError


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


def read_small(path: str | Path, max_bytes: int, what: str) -> bytes:
    """The bytes of the regular file `path`, refusing anything larger than `max_bytes`."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except (OSError, ValueError) as exc:
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
    return data
