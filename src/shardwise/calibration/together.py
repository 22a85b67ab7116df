"""Fits run side by side, their evaluations priced together.

A fit's cost is its evaluations of the cost model (`cases.Evaluator.step_s`), and one evaluation
costs about the same for two parameter sets as for fifty: the model's Python overhead, not its
arithmetic, dominates at a calibration's sizes. `calibration.explain` tries several fits of the
same runs at each round of its searches (each candidate parameter, each one to drop), which need
not wait for one another, and `fit.fit` its own solves that do not (from each start, with each
widened prior). `side_by_side` runs them in threads; each evaluation a fit asks for
waits until every fit still running has asked for one, and all are priced in one call of the
shared evaluator (every parameter given explicitly, its neutral value where a fit leaves it out,
which `parameters.apply` takes as the same). A fit's evaluations are pure functions of its own
points, so each fit follows the same path and returns the same numbers as run alone (the model
is elementwise: tests/test_calibration_suggest.py compares them). Only the thread that prices a
batch runs the cost model; the others wait or run the solver's own arithmetic.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from shardwise.calibration.parameters import NEUTRAL

T = TypeVar("T")


class _Batched:
    """An evaluator for `running` fits: `step_s` returns once every fit still running has asked."""

    def __init__(self, ev: Any, running: int) -> None:
        self.ev = ev
        self.running = running
        self.cond = threading.Condition()
        self.pending: dict[int, dict[str, Any]] = {}
        self.answers: dict[int, np.ndarray] = {}
        self.failed: BaseException | None = None

    def step_s(self, sets: dict[str, Any]) -> np.ndarray:
        me = threading.get_ident()
        with self.cond:
            self.pending[me] = sets
            if len(self.pending) >= self.running:
                self._price()
            while me not in self.answers and self.failed is None:
                self.cond.wait()
            if me not in self.answers:
                raise RuntimeError("another fit's evaluation failed") from self.failed
            return self.answers.pop(me)

    def leave(self) -> None:
        """A fit is done (or failed): the others no longer wait for it."""
        with self.cond:
            self.running -= 1
            if self.pending and len(self.pending) >= self.running:
                self._price()

    def _price(self) -> None:
        """Every pending request in one call (under the lock)."""
        asked, self.pending = self.pending, {}
        sizes = {me: max((np.size(v) for v in sets.values()), default=1) for me, sets in asked.items()}

        def column(sets: dict[str, Any], name: str, size: int) -> np.ndarray:
            return np.broadcast_to(np.asarray(sets.get(name, NEUTRAL[name]), dtype=float), (size,))

        merged = {n: np.concatenate([column(sets, n, sizes[me]) for me, sets in asked.items()]) for n in NEUTRAL}
        try:
            out = self.ev.step_s(merged)
        except BaseException as exc:  # every waiting fit fails with it (side_by_side raises it)
            self.failed = exc
            self.cond.notify_all()
            return
        row = 0
        for me in asked:
            self.answers[me] = out[row : row + sizes[me]]
            row += sizes[me]
        self.cond.notify_all()


def side_by_side(ev: Any, jobs: list[Callable[[Any], T]]) -> list[T]:
    """Each job called with an evaluator that prices the runs of `ev`, all in threads side by side
    (module docstring); their results in order, or the first job's error."""
    if len(jobs) < 2:
        return [job(ev) for job in jobs]
    batch = _Batched(ev, len(jobs))
    results: list[Any] = [None] * len(jobs)
    errors: list[BaseException | None] = [None] * len(jobs)

    def run(i: int) -> None:
        try:
            results[i] = jobs[i](batch)
        except BaseException as exc:  # raised in the caller's thread below
            errors[i] = exc
        finally:
            batch.leave()

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if batch.failed is not None:
        raise batch.failed
    for exc in errors:
        if exc is not None:
            raise exc
    return results
