"""The one way shardwise writes a file: to a temporary file beside it, renamed into place when
complete, so a reader never sees half a file and an interrupted run leaves none.

The result gets the mode an ordinary `open(path, "w")` would give (0666 minus the umask), or the
mode of the file it replaces. Only regular files are written: a device node, a FIFO, a socket or a
directory in the path's place is refused (as root, `--csv /dev/null` would otherwise replace the
system's /dev/null with a regular file). A symlink is followed only to a regular file (or a name not
yet there) in the link's own directory or below it: its target is replaced and the link kept; a
link that points elsewhere is refused, so that a planted link cannot redirect a write. A path that
cannot be written is one `SpecError` line naming it, raised before any work when `check_writable`
is called first. A file the running command read as an input (`files.watching_inputs`) is never
written over.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from shardwise.errors import SpecError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_writable(path: str | Path) -> Path:
    """Fail now, in one line, if `path` cannot be written (missing or read-only directory; a
    directory, device, FIFO or socket in its place; a symlink that leads elsewhere)."""
    try:
        return _check_writable(Path(path))
    except SpecError:
        raise
    except (OSError, ValueError) as exc:  # a name the OS refuses: too long, NUL bytes
        reason = exc.strerror if isinstance(exc, OSError) else str(exc)
        shown = str(path) if len(str(path)) <= 80 else f"{str(path)[:77]}..."
        raise SpecError(f"{shown}: cannot write there ({reason})") from None


def _kind(mode: int) -> str | None:
    """What a non-regular file is, in words (None for a regular file)."""
    kinds = [
        (stat.S_ISDIR, "is a directory; give a file name"),
        (stat.S_ISCHR, "is a character device; only regular files are written"),
        (stat.S_ISBLK, "is a block device; only regular files are written"),
        (stat.S_ISFIFO, "is a FIFO (named pipe); only regular files are written"),
        (stat.S_ISSOCK, "is a socket; only regular files are written"),
    ]
    if stat.S_ISREG(mode):
        return None
    return next((what for test, what in kinds if test(mode)), "is not a regular file; only regular files are written")


def _check_link(p: Path) -> None:
    """A symlink is written through only to a regular file (or a new name) at or below its own directory."""
    target = p.resolve()
    home = p.parent.resolve()
    if target != home and home not in target.parents:
        raise SpecError(f"{p}: is a symbolic link to {target}, outside {home}; give the target's own path")
    if target.exists() and (what := _kind(target.stat().st_mode)):
        raise SpecError(f"{p}: is a symbolic link to {target}, which {what}")


def _check_writable(p: Path) -> Path:
    from shardwise.files import input_read_from

    parent = p.parent if str(p.parent) else Path(".")
    if what := input_read_from(p):
        raise SpecError(f"{p}: that is an input (the {what} this command read); writing there would destroy it")
    if p.is_symlink():
        _check_link(p)
    elif p.exists() and (what := _kind(p.stat().st_mode)):
        raise SpecError(f"{p}: {what}")
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
        _check_writable(p)  # again: nothing took the name's place (a FIFO, a link) while we wrote
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError as exc:
        reason = "no space left on the device" if exc.errno == errno.ENOSPC else exc.strerror
        raise SpecError(f"{p}: cannot write ({reason})") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
