"""Running one function on every rank of a process group: under `torchrun` (the environment names
the rank), or by spawning the ranks on this machine.

Spawned ranks report back through a queue; the launcher waits at most `timeout_s` for all of them.
A rank that raises, dies or hangs ends the whole run: the others are terminated (then killed), and
`MeasureError` says which rank and why, so no process is left behind and nothing partial is
returned as if complete. A rank also ends when its launcher dies, even by SIGKILL, which no handler
sees: on Linux the kernel sends it SIGKILL (prctl PR_SET_PDEATHSIG), elsewhere a thread watches the
parent's process id. Under torchrun the parent is torchrun's agent, whose own failure handling ends
the ranks when one fails; the same watch ends them when the agent itself is killed.
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shardwise.errors import SpecError
from shardwise.measure import require_torch


class MeasureError(SpecError):
    """A measurement run failed (a rank died, raised or hung); one line, exit status 2."""


@dataclass(frozen=True)
class Group:
    """This process's place in the run: rank, world size, the device and the backend."""

    rank: int
    world: int
    device: Any  # torch.device
    backend: str


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _device_and_backend(rank: int, want: str) -> tuple[Any, str]:
    import torch

    use_cuda = want == "cuda" or (want == "auto" and torch.cuda.is_available())
    if use_cuda:
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local)
        return torch.device("cuda", local), "nccl"
    return torch.device("cpu"), "gloo"


def _init(rank: int, world: int, init_method: str, device: str, timeout_s: float) -> Group:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    dev, backend = _device_and_backend(rank, device)
    if dev.type == "cpu":
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    dist.init_process_group(
        backend, init_method=init_method, rank=rank, world_size=world, timeout=timedelta(seconds=timeout_s)
    )
    # every rank's connections made before any rank runs (and may finish and tear down): Gloo's
    # full mesh is still connecting on a slower rank when a fast one returns, and that rank then
    # fails with "Connection closed by peer" instead of its own error or result
    dist.barrier()
    return Group(rank, world, dev, backend)


def die_with_parent(parent_pid: int) -> None:
    """End this process when `parent_pid` (its parent) dies, however it dies."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            _watch_parent(parent_pid)
    else:
        _watch_parent(parent_pid)
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(1)


def _watch_parent(parent_pid: int, every_s: float = 0.5) -> None:
    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(every_s)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _worker(
    rank: int,
    world: int,
    init_method: str,
    device: str,
    timeout_s: float,
    fn: Callable[..., Any],
    args: tuple,
    out: Any,
    parent_pid: int | None = None,
) -> None:
    if parent_pid is not None:
        die_with_parent(parent_pid)
    import torch.distributed as dist

    try:
        g = _init(rank, world, init_method, device, timeout_s)
        result = fn(g, *args)
        out.put((rank, "ok", _plain(result)))
    except BaseException as exc:  # report, then exit non-zero: the launcher ends the run
        last = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
        where = f" ({last[0].filename.rsplit('/', 1)[-1]}:{last[0].lineno})" if last else ""
        out.put((rank, "error", f"{type(exc).__name__}: {exc}{where}"))
        raise SystemExit(1) from None
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _plain(value: Any) -> Any:
    """Tensors as numpy arrays: a tensor sent through the queue would be shared by a file
    descriptor that dies with the rank."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if hasattr(value, "detach") and hasattr(value, "numpy"):
        return value.detach().cpu().numpy()
    return value


def check_device(device: str, ranks_here: int) -> None:
    """--device cuda needs a GPU for every rank on this machine: say so before starting any."""
    if device != "cuda":
        return
    import torch

    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if have < ranks_here:
        raise SpecError(
            f"--device cuda: {ranks_here} rank(s) on this machine need as many GPUs; it has {have} "
            "(use --device cpu, or fewer --ranks)"
        )


def world_size(ranks: int) -> int:
    """The run's world size: torchrun's when under it, else `ranks` (what --ranks asks)."""
    return int(os.environ["WORLD_SIZE"]) if under_torchrun() else ranks


def under_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ and "MASTER_ADDR" in os.environ


def run(
    fn: Callable[..., Any], world: int, args: tuple = (), timeout_s: float = 300.0, device: str = "auto"
) -> list[Any]:
    """fn(group, *args) on every rank; the results, by rank. Under torchrun every rank runs this
    and rank 0 gathers the results (the other ranks get an empty list: only rank 0 reports).
    `fn` must be a module-level function (spawned ranks import it)."""
    require_torch()  # one line saying what to install, not ModuleNotFoundError from below
    check_device(device, int(os.environ.get("LOCAL_WORLD_SIZE", world)) if under_torchrun() else world)
    if under_torchrun():
        die_with_parent(os.getppid())  # torchrun's agent
        rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        g = _init(rank, size, "env://", device, timeout_s)
        import torch.distributed as dist

        try:
            mine = _plain(fn(g, *args))
            gathered: list[Any] = [None] * size if rank == 0 else []
            dist.gather_object(mine, gathered if rank == 0 else None, dst=0)
            return gathered
        finally:
            dist.destroy_process_group()
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    init = f"tcp://127.0.0.1:{free_port()}"
    me = os.getpid()
    procs = [
        ctx.Process(target=_worker, args=(r, world, init, device, timeout_s, fn, args, out, me)) for r in range(world)
    ]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(results) < world:
            try:
                rank, status, value = out.get(timeout=0.2)
            except queue.Empty:
                _check_alive(procs, results, deadline, timeout_s)
                continue
            if status == "error":
                rank, value = _first_cause(out, rank, value)
                raise MeasureError(f"measure: rank {rank} failed: {value}")
            results[rank] = value
        for p in procs:
            p.join(timeout=max(1.0, deadline - time.monotonic()))
        return [results[r] for r in range(world)]
    finally:
        _end(procs)


# What a rank reports when a peer died under it: a consequence, not the cause
_CONSEQUENCES = ("connection closed", "connection reset", "econnreset", "broken pipe", "timed out", "timeout")


def _first_cause(out: Any, rank: int, value: str, wait_s: float = 1.0) -> tuple[int, str]:
    """The error to report: the first one that is not a lost connection to a failed peer (other
    ranks' reports are collected for up to `wait_s`)."""
    errors = [(rank, value)]
    end = time.monotonic() + wait_s
    while time.monotonic() < end:
        try:
            r, status, v = out.get(timeout=max(0.01, end - time.monotonic()))
        except queue.Empty:
            break
        if status == "error":
            errors.append((r, v))
    causes = [e for e in errors if not any(c in str(e[1]).lower() for c in _CONSEQUENCES)]
    return (causes or errors)[0]


def _check_alive(procs: list[Any], results: dict[int, Any], deadline: float, timeout_s: float) -> None:
    """Raise when a rank died before reporting, or the run is past its deadline."""
    dead = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0) and r not in results]
    if dead:
        raise MeasureError(f"measure: rank {dead[0]} exited with status {procs[dead[0]].exitcode} before reporting")
    if time.monotonic() > deadline:
        missing = sorted(set(range(len(procs))) - set(results))
        raise MeasureError(
            f"measure: rank(s) {', '.join(map(str, missing))} did not finish within {timeout_s:g} s "
            "(hung or too slow; raise --timeout or use smaller shapes)"
        )


def _end(procs: list[Any]) -> None:
    """Terminate, then kill, whatever is still running: no rank outlives the run."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
            p.join(timeout=5)
