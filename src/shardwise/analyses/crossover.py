"""Where one plan overtakes another as one variable moves (the brief's experiment).

For each link and each pair of plans, the difference of their times is followed along the grid;
wherever its sign changes the crossing is then found exactly with the cost model itself: for an
integer variable (batch, layers, GPUs, ...) the first integer at which the other plan wins, by
evaluating every integer in the bracket; for a continuous one (bandwidth, latency) by bisection
(in log space when the axis is logarithmic) to a relative precision of 1e-6.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import numpy as np

from shardwise.analyses.experiment import VARIABLES, Experiment, LinkSpec, PlanSpec, times_s

BISECTION_STEPS = 60


@dataclass(frozen=True)
class Series:
    plan: str
    link: str
    time_s: np.ndarray  # NaN where the plan is invalid
    fits: np.ndarray  # False where the plan does not fit in GPU memory


@dataclass(frozen=True)
class Crossing:
    """Plan `before` wins below `at`, plan `after` from `at` on (both on link `link`)."""

    link: str
    before: str
    after: str
    at: float  # integer variables: the first value where `after` wins; else the solved point
    low: float  # the grid bracket the crossing was found in
    high: float
    exact: bool  # an integer switch point or a bisection root (not a linear interpolation)


@dataclass(frozen=True)
class CrossoverResult:
    experiment: Experiment
    variable: str
    values: np.ndarray
    series: tuple[Series, ...]
    crossings: tuple[Crossing, ...]

    def series_for(self, link: str) -> list[Series]:
        return [s for s in self.series if s.link == link]

    def winners(self, link: str) -> list[str]:
        """The fastest plan at each grid value on `link` ('' where no plan is valid)."""
        rows = self.series_for(link)
        t = np.vstack([s.time_s for s in rows])
        out = []
        for j in range(t.shape[1]):
            col = t[:, j]
            out.append("" if np.all(np.isnan(col)) else rows[int(np.nanargmin(col))].plan)
        return out

    def crossings_for(self, link: str) -> list[Crossing]:
        return [c for c in self.crossings if c.link == link]


def run_crossover(exp: Experiment, variable: str, values: np.ndarray) -> CrossoverResult:
    """Time every plan on every link over `values` of `variable`, and find every crossing."""
    values = np.asarray(values, dtype=float)
    series = []
    for link in exp.links:
        for plan in exp.plans:
            t, fits = times_s(exp, plan, link.link, variable, values)
            series.append(Series(plan.label, link.label, t, fits))
    crossings = []
    for link in exp.links:
        by_plan = {s.plan: s for s in series if s.link == link.label}
        for a, b in combinations(exp.plans, 2):
            crossings += _crossings(exp, link, a, b, variable, values, by_plan[a.label].time_s, by_plan[b.label].time_s)
    return CrossoverResult(exp, variable, values, tuple(series), tuple(crossings))


def _crossings(
    exp: Experiment,
    link: LinkSpec,
    a: PlanSpec,
    b: PlanSpec,
    variable: str,
    x: np.ndarray,
    ta: np.ndarray,
    tb: np.ndarray,
) -> list[Crossing]:
    ok = ~(np.isnan(ta) | np.isnan(tb))
    xs, diff = x[ok], (ta - tb)[ok]  # < 0: a is faster
    out = []
    for i in range(len(xs) - 1):
        d0, d1 = diff[i], diff[i + 1]
        if d0 == 0 or np.sign(d0) == np.sign(d1):
            continue
        before, after = (a, b) if d0 < 0 else (b, a)
        at, exact = _refine(exp, link, a, b, variable, xs[i], xs[i + 1], d0, d1)
        out.append(Crossing(link.label, before.label, after.label, at, float(xs[i]), float(xs[i + 1]), exact))
    return out


def _refine(
    exp: Experiment,
    link: LinkSpec,
    a: PlanSpec,
    b: PlanSpec,
    variable: str,
    lo: float,
    hi: float,
    d_lo: float,
    d_hi: float,
) -> tuple[float, bool]:
    """The exact switch point inside [lo, hi] (see the module docstring)."""

    def diff(v: np.ndarray) -> np.ndarray:
        return times_s(exp, a, link.link, variable, v)[0] - times_s(exp, b, link.link, variable, v)[0]

    spec = VARIABLES[variable]
    if spec.integer:
        ints = np.arange(lo, hi + 1)
        d = diff(ints)
        sign0 = np.sign(d_lo)
        flips = np.flatnonzero(~np.isnan(d) & (np.sign(d) != sign0) & (ints > lo))
        return (float(ints[flips[0]]), True) if len(flips) else (float(hi), False)
    log = spec.log and lo > 0
    left, right = (np.log(lo), np.log(hi)) if log else (lo, hi)
    for _ in range(BISECTION_STEPS):
        mid = 0.5 * (left + right)
        d = float(diff(np.array([np.exp(mid) if log else mid]))[0])
        if np.isnan(d):
            frac = d_lo / (d_lo - d_hi)  # fall back to linear interpolation
            return float(lo + frac * (hi - lo)), False
        if np.sign(d) == np.sign(d_lo):
            left = mid
        else:
            right = mid
        if abs(right - left) <= 1e-6 * max(1.0, abs(right)):
            break
    root = 0.5 * (left + right)
    return float(np.exp(root) if log else root), True


def describe_crossing(c: Crossing, variable: str) -> str:
    """'tp=8 is faster below batch 11, pp=8 from 11 on (NVLink)'."""
    from shardwise.analyses.experiment import DISPLAY_SCALE, DISPLAY_UNIT, SHORT_NAME

    value = c.at * DISPLAY_SCALE.get(variable, 1.0)
    name, unit = SHORT_NAME[variable], DISPLAY_UNIT.get(variable, "")
    if VARIABLES[variable].integer and c.exact:
        return f"{c.link}: {c.before} is faster below {name} {value:g}, {c.after} from {value:g}{unit} on"
    return f"{c.link}: {c.before} is faster below {name} {value:.4g}{unit}, {c.after} above"
