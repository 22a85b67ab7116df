"""The join the planner builds its candidates with (`analyses.plan_space`): plans made one dimension
at a time from a table of layouts, each step a boolean matrix of rows x options whose true
entries, in row-major order, become the next rows (`PlanJoin`), and per-pp option lists as
arrays (`per_pp_options`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def per_pp_options(table: dict[int, list[tuple[int, ...]]], fields: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A per-pp list of options (tuples of `fields` ints) as the pp values in order, a (pp,
    options, fields) table of values and a (pp, options) mask of the options that exist."""
    keys = np.array(sorted(table), dtype=np.int64)
    width = max((len(v) for v in table.values()), default=0)
    values = np.zeros((keys.size, width, fields), dtype=np.int64)
    ok = np.zeros((keys.size, width), dtype=bool)
    for i, k in enumerate(keys.tolist()):
        for j, option in enumerate(table[k]):
            values[i, j] = option
            ok[i, j] = True
    return keys, values, ok


def shifted_twins(linear: np.ndarray, rows: np.ndarray, shift: int) -> np.ndarray:
    """For `rows` of a step's new rows, whose keys `linear` (row x width + option, ascending in
    `np.nonzero`'s order) are given for all of them, the index of the new row whose option is
    `shift` further: the same plan with one option changed; -1 where that plan is not one of them."""
    want = linear[rows] + shift
    at = np.minimum(np.searchsorted(linear, want), max(linear.size - 1, 0))
    return np.where((linear.size > 0) & (linear[at] == want), at, -1)


class PlanJoin:
    """Plans built one dimension at a time from a table of layouts: each step keeps every row
    once per option where a (rows x options) mask holds, rows in order and each row's options in
    order (`np.nonzero`'s row-major order). A step stores only which row each new row came from
    and the options it chose; `columns()` walks back through the steps once at the end, so a step
    costs a few gathers however many columns there are."""

    def __init__(self, layouts: dict[str, np.ndarray]) -> None:
        self.layouts = layouts
        self.layout = np.arange(next(iter(layouts.values())).size)  # each row's layout
        self.steps: list[tuple[np.ndarray, dict[str, np.ndarray]]] = []
        self.carried: dict[str, np.ndarray] = {}  # chosen options later steps read
        self._cache: dict[str, np.ndarray] = {}

    @property
    def size(self) -> int:
        return int(self.layout.size)

    def __getitem__(self, name: str) -> np.ndarray:
        """A column of the current rows: a carried option or a layout's field."""
        if name in self.carried:
            return self.carried[name]
        if name not in self._cache:
            self._cache[name] = self.layouts[name][self.layout]
        return self._cache[name]

    def add(
        self, ok: np.ndarray, carry: tuple[str, ...] = (), **options: np.ndarray | Callable[..., np.ndarray]
    ) -> None:
        """Each row once per option where `ok` holds; an option column is (options,) or a
        function of (rows, options) index arrays."""
        r, o = np.nonzero(ok)
        chosen = {name: (v[o] if isinstance(v, np.ndarray) else v(r, o)) for name, v in options.items()}
        self._step(r, chosen)
        self.carried.update({k: chosen[k] for k in carry})

    def keep(self, ok: np.ndarray) -> None:
        """The rows where `ok` holds."""
        self._step(np.flatnonzero(ok), {})

    def _step(self, rows: np.ndarray, chosen: dict[str, np.ndarray]) -> None:
        self.steps.append((rows, chosen))
        self.layout = self.layout[rows]
        self.carried = {k: v[rows] for k, v in self.carried.items()}
        self._cache = {}

    def columns(self, names: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
        """The current rows' columns (`names` of the layouts' fields, default all)."""
        out: dict[str, np.ndarray] = {}
        at = None  # the rows of the step being read, per current row (None: the last step's own)
        for rows, chosen in reversed(self.steps):
            for name, values in chosen.items():
                out[name] = values if at is None else values[at]
            at = rows if at is None else rows[at]
        wanted = self.layouts if names is None else {k: v for k, v in self.layouts.items() if k in names}
        out.update({k: v[self.layout] for k, v in wanted.items()})
        return out
