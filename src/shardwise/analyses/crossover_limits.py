"""A change of the fastest plan that is a memory limit, not a crossing of times.

Where the plan that was faster still takes less time past the switch but no longer fits in GPU
memory, the fastest feasible plan changes without the two times meeting (review 36: the decode
crossover's "(2) tp=8 from 162 on" drawn as a crossing where pp=8 stops fitting, and tp=8 itself
fits only at 162). `memory_limit` says so, and how far the plan left fits; the command's text
(`cli.crossover`) and the figure (`plots.crossover`) print the same `describe`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from shardwise.analyses.crossover import Crossing, CrossoverResult

PROBE_POINTS = 4096  # the most values past the switch priced to find where the plan left stops fitting


@dataclass(frozen=True)
class MemoryLimit:
    """Plan `stops` no longer fits from `at` on (though faster there); plan `left` fits up to
    `left_fits_to` (NaN: to the end of the range), and `none_from` is the first value where no
    plan on the link fits (NaN: some plan fits to the end). Values in the variable's SI unit."""

    link: str
    stops: str
    left: str
    at: float
    left_fits_to: float
    none_from: float

    def describe(self, name: str, scale: float = 1.0, unit: str = "") -> str:
        """'pp=8 takes less time there but does not fit in GPU memory from batch 162 on, so it is
        not counted as faster (--ignore-memory); tp=8 fits up to batch 162, no plan from 163 on'."""
        text = (
            f"{self.stops} takes less time there but does not fit in GPU memory from {name} "
            f"{self.at * scale:g} on, so it is not counted as faster (--ignore-memory)"
        )
        if self.left_fits_to == self.left_fits_to:
            text += f"; {self.left} fits up to {name} {self.left_fits_to * scale:g}{unit}"
            if self.none_from == self.none_from:
                text += f", no plan from {self.none_from * scale:g}{unit} on"
        return text


def memory_limit(result: CrossoverResult, c: Crossing) -> MemoryLimit | None:
    """The memory limit behind the change of fastest plan `c`, or None where it is a crossing of
    times (or memory is ignored): the plan faster before `c.at` still takes no more time there
    but does not fit in GPU memory."""
    from shardwise.analyses.evaluate import times_s
    from shardwise.analyses.experiment import VARIABLES

    if result.ignore_memory or not c.winner_change:
        return None
    exp = result.experiment
    link = next(lk.link for lk in exp.links if lk.label == c.link)
    plans = {p.label: p for p in exp.plans}
    at = np.array([c.at])
    (before, fits), (after, _) = (times_s(exp, plans[n], link, result.variable, at) for n in (c.before, c.after))
    if bool(fits[0]) or not before[0] <= after[0]:
        return None
    hi = float(np.max(result.values))
    if VARIABLES[result.variable].integer and hi - c.at + 1 <= PROBE_POINTS:
        probe = np.arange(c.at, hi + 1)
    elif VARIABLES[result.variable].log and c.at > 0:
        probe = np.unique(np.geomspace(c.at, hi, 200))
    else:
        probe = np.unique(np.linspace(c.at, hi, 200))
    fits_all = {}
    for label, plan in plans.items():
        t, ok = times_s(exp, plan, link, result.variable, probe)
        fits_all[label] = ok & ~np.isnan(t)
    gone = np.flatnonzero(~fits_all[c.after])
    left_to = none_from = float("nan")
    if gone.size and gone[0] > 0:
        left_to = float(probe[gone[0] - 1])
        if not any(f[gone[0]] for f in fits_all.values()):
            none_from = float(probe[gone[0]])
    return MemoryLimit(c.link, c.before, c.after, float(c.at), left_to, none_from)
