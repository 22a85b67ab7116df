"""The explorer's computations, in a few warm worker processes, each under a time limit.

A request takes a free worker (waiting at most twice the time limit for one), sends it the
command and waits at most the time limit for the answer; past it, the worker is killed, a fresh
one takes its place and the page says the computation was cut short. The server never redirects
its own stdout nor holds a lock while a command runs, so a slow computation delays no other (up
to as many at once as there are workers). `Pool.run(args) -> Outcome` is `runner.run`'s
interface: what a worker executes can change without the callbacks noticing.

Workers die with the server: they are daemon processes (ended when it exits), each one also asks
Linux to kill it when its parent goes (prctl PR_SET_PDEATHSIG; with the "forkserver" start method
the parent is the fork server, which exits when the server's end of its pipe closes), and a
thread in each watches the parent's process id (every platform)."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import shutil
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from shardwise.explore import runner
from shardwise.explore.runner import Outcome

DEFAULT_TIME_LIMIT_S = 20.0
START_TIMEOUT_S = 120.0  # a fresh worker's imports and first command (not counted against a request)
MIN_MEMORY_LIMIT_BYTES = 2 << 30  # a worker's address space is never capped below this
PARENT_POLL_S = 0.5
QUEUE_WAIT_LIMITS = 2  # a request waits at most this many time limits for a free worker
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
WARM_UP = ["crossover", "--plan", "tp=8", "--plan", "pp=8", "--vary", "batch=1..4"]  # imports numpy, presets


def default_workers() -> int:
    """min(4, CPU cores): a few computations at once, never more than the cores."""
    return max(1, min(4, os.cpu_count() or 1))


def default_memory_limit_bytes(workers: int) -> int | None:
    """A worker's share of the machine's memory: all of them at their limit leave one share to
    the rest (None where the size is unknown)."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None
    return max(MIN_MEMORY_LIMIT_BYTES, physical // (workers + 1))


class Stopped(Exception):
    """The command ran past the time limit."""


class Died(Exception):
    """The worker ended without answering (killed for memory, or a crash)."""


class Pool:
    """`workers` warm processes running commands (`run`), each for at most `time_limit_s` and
    within `memory_limit_bytes` of address space (a command past it says it ran out of memory)."""

    def __init__(
        self,
        workers: int | None = None,
        time_limit_s: float = DEFAULT_TIME_LIMIT_S,
        memory_limit_bytes: int | None = None,
    ) -> None:
        count = default_workers() if workers is None else workers
        if count < 1 or not time_limit_s > 0:
            raise ValueError(f"a pool needs at least one worker and a time limit > 0 s (got {count}, {time_limit_s})")
        methods = multiprocessing.get_all_start_methods()
        self._context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
        self.time_limit_s = float(time_limit_s)
        self.memory_limit_bytes = memory_limit_bytes or default_memory_limit_bytes(count)
        self._folder = Path(tempfile.mkdtemp(prefix="shardwise-explore-workers-"))
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._every: set[_Worker] = set()
        self._books = threading.Lock()  # guards `_every` (bookkeeping only: never held while a command runs)
        self._closed = False
        for _ in range(count):
            self._idle.put(self._start())

    def run(self, args: list[str]) -> Outcome:
        """`runner.run(args)` in a free worker: the command's outcome, or the line saying it was
        stopped at the time limit (the worker is then replaced) or that every worker was busy."""
        limit = self.time_limit_s
        try:  # a worker taken by a computation that runs to the limit is free again (replaced) within it
            worker = self._idle.get(timeout=QUEUE_WAIT_LIMITS * limit)
        except queue.Empty:
            waited = QUEUE_WAIT_LIMITS * limit
            return Outcome(tuple(args), error=f"the explorer is busy: no worker was free for {waited:g} s; try again")
        try:
            return worker.call(list(args), limit)
        except Stopped:
            worker = self._replace(worker)
            return Outcome(
                tuple(args),
                error=f"stopped after {limit:g} s (the explorer's time limit, shardwise explore --time-limit): "
                "narrow the search, or run the command below in a terminal",
            )
        except Died as exc:
            worker = self._replace(worker)
            return Outcome(tuple(args), error=f"the computation ended without an answer ({exc}): narrow the search")
        finally:
            self._idle.put(worker)

    def busy(self) -> int:
        """How many workers are running a command now."""
        with self._books:
            return len(self._every) - self._idle.qsize()

    def pids(self) -> list[int]:
        """The workers' process ids (idle or busy)."""
        with self._books:
            return sorted(w.process.pid for w in self._every if w.process.pid is not None)

    def close(self) -> None:
        """Stop every worker and remove their folders."""
        self._closed = True
        with self._books:
            every, self._every = list(self._every), set()
        for worker in every:
            worker.stop()
        shutil.rmtree(self._folder, ignore_errors=True)

    def _start(self) -> _Worker:
        worker = _Worker(self._context, self._folder, self.memory_limit_bytes)
        with self._books:
            self._every.add(worker)
        return worker

    def _replace(self, worker: _Worker) -> _Worker:
        with self._books:
            self._every.discard(worker)
        worker.stop()
        return worker if self._closed else self._start()


class _Worker:
    """One process running commands, one at a time (`_serve`), in its own temporary folder."""

    def __init__(self, context: Any, folder: Path, memory_limit_bytes: int | None) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="worker-", dir=folder))
        self.conn, child = context.Pipe()
        self.process = context.Process(
            target=_serve,
            args=(child, str(self.folder), memory_limit_bytes),
            daemon=True,
            name="shardwise-explore-worker",
        )
        self.process.start()
        child.close()
        self.ready = False
        self._stopping = threading.Lock()  # the pool's close and a request's replacement may race
        self._stopped = False

    def call(self, args: list[str], limit_s: float) -> Outcome:
        try:
            if not self.ready:  # its start-up is not the request's time
                if not self.conn.poll(START_TIMEOUT_S):
                    raise Died(f"the worker did not start in {START_TIMEOUT_S:g} s")
                self.conn.recv()
                self.ready = True
            self.conn.send(args)
            if not self.conn.poll(limit_s):
                raise Stopped
            outcome = self.conn.recv()
        except (EOFError, OSError) as exc:
            code = self.process.exitcode
            raise Died(f"exit status {code}" if code is not None else type(exc).__name__) from None
        if not isinstance(outcome, Outcome):
            raise Died(f"the worker answered {type(outcome).__name__}")
        return outcome

    def stop(self) -> None:
        """Kill the process and close its pipe, once: a second caller (the pool closing while a
        request replaces the worker it lost) returns at once instead of closing a descriptor twice."""
        with self._stopping:
            if self._stopped:
                return
            self._stopped = True
            if self.process.is_alive():
                self.process.kill()
            self.process.join(timeout=10)
            self.conn.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def _serve(conn: Connection, folder: str, memory_limit_bytes: int | None) -> None:
    """A worker's life: warm up, then run each command it is sent and send back its outcome."""
    _die_with_parent()
    _limit(memory_limit_bytes)
    tempfile.tempdir = folder  # each command's scratch folder: removed with the worker if it is killed
    with contextlib.suppress(Exception):  # warming up saves time; the first request will say what is wrong
        runner.run(WARM_UP)
    conn.send("ready")
    while True:
        try:
            args = conn.recv()
        except (EOFError, OSError):
            return
        try:
            outcome = runner.run(list(args))
        except MemoryError:
            outcome = Outcome(tuple(args), error="out of memory: narrow the search")
        except Exception as exc:  # a bug must not end the worker: say it
            outcome = Outcome(tuple(args), error=f"internal error ({type(exc).__name__}: {exc}); please report it")
        conn.send(outcome)


def _limit(memory_limit_bytes: int | None) -> None:
    """Cap this process's address space (a command past it raises MemoryError) and the size of
    any file it writes (a table is at most runner.MAX_OUTPUT_BYTES: a larger one fails, EFBIG)."""
    try:
        import resource
        import signal
    except ImportError:  # not a Unix: the time limit alone
        return
    caps = [(resource.RLIMIT_FSIZE, 2 * runner.MAX_OUTPUT_BYTES)]
    if memory_limit_bytes:
        caps.append((resource.RLIMIT_AS, memory_limit_bytes))
    for which, cap in caps:
        _, hard = resource.getrlimit(which)
        cap = cap if hard == resource.RLIM_INFINITY else min(cap, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(which, (cap, hard))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the cap fails instead of killing


def _die_with_parent() -> None:
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(0)

    threading.Thread(target=watch, daemon=True, name="watch-parent").start()
