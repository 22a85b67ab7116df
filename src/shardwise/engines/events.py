"""A tiny, generic discrete-event loop (in the spirit of SimPy's core): a heap of
(time, priority, sequence, callback, args). Ties break by priority, then by the order events
were scheduled, so every run of the same model gives the same result. It knows nothing about
pipelines; `engines.simulator` builds on it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from itertools import count
from typing import Any


class EventLoop:
    """Schedule callbacks at future times and run them in time order."""

    __slots__ = ("_counter", "_heap", "events_run", "now")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, Callable[..., Any], tuple[Any, ...]]] = []
        self._counter = count()
        self.now = 0.0
        self.events_run = 0

    def at(self, time: float, callback: Callable[..., Any], *args: Any, priority: int = 0) -> None:
        """Run `callback(*args)` at `time` (not before now)."""
        if time < self.now:
            raise ValueError(f"event at {time} is in the past (now {self.now})")
        heapq.heappush(self._heap, (time, priority, next(self._counter), callback, args))

    def run(self, until: float = float("inf")) -> float:
        """Run events in order until none is left (or `until`); returns the time reached."""
        heap, pop = self._heap, heapq.heappop
        while heap and heap[0][0] <= until:
            time, _, _, callback, args = pop(heap)
            self.now = time
            self.events_run += 1
            callback(*args)
        return self.now

    def __len__(self) -> int:
        return len(self._heap)
