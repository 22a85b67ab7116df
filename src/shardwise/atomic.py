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
written over. Ctrl-C, SIGTERM and SIGHUP during a write unwind and remove the temporary file
(`_unwinding`, `_signals_held`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
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


# the signals that stop a run and are caught so that it unwinds (Ctrl-C, `kill`, a scheduler's time
# limit, a closed terminal): held while the temporary file is created and while it is removed, so
# that neither step is cut in half (review 47 #10)
STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Defer STOP_SIGNALS to the end of the block (delivered then), where the OS can."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds: the temporary is removed (143 for SIGTERM, 129 for SIGHUP)


@contextlib.contextmanager
def _unwinding() -> Iterator[None]:
    """While a file is written, SIGTERM and SIGHUP unwind (SystemExit, status 128 + the signal) where
    nothing else handles them: Python's default would end the process at once and leave the
    temporary file behind. A handler the program set (the command line's) is left as it is."""
    import threading

    caught = ("SIGTERM", "SIGHUP")
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {}
    for name in caught:
        sig = getattr(signal, name, None)
        if sig is not None and signal.getsignal(sig) is signal.SIG_DFL:
            before[sig] = signal.signal(sig, _stop)
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[str]:
    """Yield a temporary path to write; on success it replaces `path` (see the module docstring).
    The temporary is named after the file (`g.partial-k2j3x9.csv` for `g.csv`), so that one left by
    a kill no program can catch (SIGKILL, a power cut) says whose it is."""
    p = check_writable(path)
    target = p.resolve() if p.is_symlink() else p
    mode = (target.stat().st_mode & 0o7777) if target.exists() else (0o666 & ~_umask())
    tmp = ""
    with _unwinding():
        try:
            with _signals_held():  # a signal between creating the temporary and noting its name would leave it
                try:
                    fd, tmp = tempfile.mkstemp(prefix=f"{p.stem}.partial-", suffix=p.suffix, dir=target.parent)
                except OSError as exc:
                    raise SpecError(f"{p}: cannot write ({exc.strerror})") from None
                os.close(fd)
            yield tmp
            _check_writable(p)  # again: nothing took the name's place (a FIFO, a link) while we wrote
            os.chmod(tmp, mode)
            os.replace(tmp, target)
        except OSError as exc:
            reason = "no space left on the device" if exc.errno == errno.ENOSPC else exc.strerror
            raise SpecError(f"{p}: cannot write ({reason})") from None
        finally:
            with _signals_held():  # a second signal while unwinding does not stop the removal half-way
                if tmp and os.path.exists(tmp):
                    os.unlink(tmp)
