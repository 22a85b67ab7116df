"""The one way shardwise writes a file: to a temporary file beside it, renamed into place when
complete, so a reader never sees half a file and an interrupted run leaves none.

The result gets the mode an ordinary `open(path, "w")` would give (0666 minus the umask), or the
mode of the file it replaces; a symlink is followed (its target is replaced, the link kept). A
path that cannot be written is one `SpecError` line naming it, raised before any work when
`check_writable` is called first.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from shardwise.errors import SpecError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_writable(path: str | Path) -> Path:
    """Fail now, in one line, if `path` cannot be written (missing or read-only directory, a
    directory in its place)."""
    try:
        return _check_writable(Path(path))
    except (OSError, ValueError) as exc:  # a name the OS refuses: too long, NUL bytes
        reason = exc.strerror if isinstance(exc, OSError) else str(exc)
        shown = str(path) if len(str(path)) <= 80 else f"{str(path)[:77]}..."
        raise SpecError(f"{shown}: cannot write there ({reason})") from None


def _check_writable(p: Path) -> Path:
    parent = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise SpecError(f"{p}: is a directory; give a file name")
    if not parent.exists():
        raise SpecError(f"{p}: directory {parent} does not exist")
    if not parent.is_dir():
        raise SpecError(f"{p}: {parent} is not a directory")
    if not os.access(parent, os.W_OK):
        raise SpecError(f"{p}: directory {parent} is not writable")
    if p.exists() and not os.access(p, os.W_OK):
        raise SpecError(f"{p}: the file exists and is not writable")
    return p


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[str]:
    """Yield a temporary path to write; on success it replaces `path` (see the module docstring)."""
    p = check_writable(path)
    target = p.resolve() if p.is_symlink() else p
    mode = (target.stat().st_mode & 0o7777) if target.exists() else (0o666 & ~_umask())
    try:
        fd, tmp = tempfile.mkstemp(suffix=p.suffix, dir=target.parent)
    except OSError as exc:
        raise SpecError(f"{p}: cannot write ({exc.strerror})") from None
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError as exc:
        reason = "no space left on the device" if exc.errno == errno.ENOSPC else exc.strerror
        raise SpecError(f"{p}: cannot write ({reason})") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
