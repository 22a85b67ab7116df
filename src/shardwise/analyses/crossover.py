"""Where one plan overtakes another as one variable moves (the brief's experiment).

Only feasible points count: the plan is valid there (divisibility rules) and fits in GPU
memory, unless the experiment says to ignore memory. Two kinds of crossing are reported:

- *winner changes*: where the fastest plan changes (what a user choosing a plan needs);
- *pair crossings*: where any two plans swap order (with two plans, the same thing).

A plan invalid at a point (the layout rules fail there, not memory) is skipped there: a pair
crosses only between two points where both are feasible, and the winner changes only between
points where every plan is valid, so a plan that is invalid at every odd batch does not make a
crossing at each. Both are exact. For an integer variable (batch, layers, GPUs, ...) every integer of the range is
evaluated (up to `MAX_DENSE` of them) and a crossing is the first integer at which the other
plan is faster, so none is missed between grid points. For a continuous one (bandwidth,
latency, ...) the grid is densified to at least `MIN_DENSE` points and each sign change is
solved by bisection (in log space on a log axis) to a relative 1e-6. Ties (equal times) carry
the previous order: a crossing is reported only when the order really flips.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations

import numpy as np

from shardwise.analyses.crossover_tie import ratio_sd, with_tie_range
from shardwise.analyses.evaluate import evaluate_parts, times_s
from shardwise.analyses.experiment import VARIABLES
from shardwise.calibration.spreads import Z80
from shardwise.specs.experiment import Experiment, LinkSpec, PlanSpec

BISECTION_STEPS = 60
MAX_DENSE = 100_000
MIN_DENSE = 400
KEEP_PARTS_POINTS = 4096  # dense grids up to this size keep their time breakdown (for the switch points)
TIE = "tie"


@dataclass(frozen=True)
class Series:
    plan: str
    link: str
    time_s: np.ndarray  # NaN where the plan is invalid
    fits: np.ndarray  # False where the plan does not fit in GPU memory
    log_sd: np.ndarray | None = None  # each point's 80% interval width (log); None: the experiment's


@dataclass(frozen=True)
class Crossing:
    """Plan `before` is faster below `at`, plan `after` from `at` on (both on link `link`)."""

    link: str
    before: str
    after: str
    at: float  # integer variables: the first value where `after` is faster; else the solved point
    low: float  # the dense-grid bracket it was found in
    high: float
    exact: bool
    winner_change: bool  # True: the fastest of all plans changes here
    time_s: float = float("nan")  # plan `after`'s time (the result's unit) at `at`, where both meet
    # where the 80% interval of the two plans' time ratio holds 1 around `at` (a tie at this confidence)
    range_low: float = float("nan")
    range_high: float = float("nan")


@dataclass(frozen=True)
class CrossoverResult:
    experiment: Experiment
    variable: str
    values: np.ndarray  # the grid shown in tables and JSON
    series: tuple[Series, ...]  # on `values`
    crossings: tuple[Crossing, ...]
    ignore_memory: bool = False
    # where each (link, plan)'s time goes on the dense grid it was searched on (small grids only)
    dense: np.ndarray | None = None
    dense_parts: dict[tuple[str, str], dict[str, np.ndarray]] = field(default_factory=dict)

    def band(self, s: Series) -> tuple[np.ndarray, np.ndarray]:
        """The series' 80% band (`log_sd`: see `point_log_sd`)."""
        sd = self.experiment.prediction_log_sd if s.log_sd is None else s.log_sd
        f = np.exp(Z80 * np.asarray(sd))
        return s.time_s / f, s.time_s * f

    def series_for(self, link: str) -> list[Series]:
        return [s for s in self.series if s.link == link]

    def feasible(self, s: Series) -> np.ndarray:
        ok = ~np.isnan(s.time_s)
        return ok if self.ignore_memory else ok & s.fits

    def winners(self, link: str) -> list[str]:
        """The fastest feasible plan at each grid value on `link` ('' if none; 'tie' if equal)."""
        rows = self.series_for(link)
        t = np.vstack([np.where(self.feasible(s), s.time_s, np.inf) for s in rows])
        return [_winner(col, [s.plan for s in rows]) for col in t.T]

    def winner_changes(self, link: str) -> list[Crossing]:
        return [c for c in self.crossings if c.link == link and c.winner_change]

    def pair_crossings(self, link: str) -> list[Crossing]:
        return [c for c in self.crossings if c.link == link and not c.winner_change]

    def crossings_for(self, link: str) -> list[Crossing]:
        return [c for c in self.crossings if c.link == link]


def _winner(col: np.ndarray, names: list[str]) -> str:
    finite = np.isfinite(col)
    if not finite.any():
        return ""
    best = np.min(col[finite])
    at_best = np.flatnonzero(np.isclose(col, best, rtol=1e-12, atol=0.0))
    return names[int(at_best[0])] if len(at_best) == 1 else TIE


def run_crossover(exp: Experiment, variable: str, values: np.ndarray, ignore_memory: bool = False) -> CrossoverResult:
    """Time every plan on every link over `values` of `variable`, and find every crossing."""
    values = np.asarray(values, dtype=float)
    dense = _dense_grid(variable, values)
    # every value is a point of the dense grid (an integer variable's grid holds every integer):
    # the series are read off it instead of priced a second time
    where = np.searchsorted(dense, values).clip(0, len(dense) - 1)
    on_grid = bool(np.all(dense[where] == values))
    priced, parts = {}, {}
    keep_parts = len(dense) <= KEEP_PARTS_POINTS
    for link in exp.links:
        for plan in exp.plans:
            t, fits, terms = evaluate_parts(exp, plan, link.link, {variable: dense}, parts=keep_parts)
            priced[(link.label, plan.label)] = (t, fits, point_log_sd(exp, plan, link, variable, dense, t))
            parts[(link.label, plan.label)] = terms
    series = []
    for link in exp.links:
        for plan in exp.plans:
            if on_grid:
                t, fits, sd = (None if x is None else x[where] for x in priced[(link.label, plan.label)])
            else:
                t, fits = times_s(exp, plan, link.link, variable, values)
                sd = point_log_sd(exp, plan, link, variable, values, t)
            series.append(Series(plan.label, link.label, t, fits, sd))
    crossings: list[Crossing] = []
    for link in exp.links:
        times, valid = {}, {}
        for plan in exp.plans:
            t, fits, _ = priced[(link.label, plan.label)]
            times[plan.label] = np.where(~np.isnan(t) & (fits | ignore_memory), t, np.nan)
            valid[plan.label] = ~np.isnan(t)
        found = _winner_changes(exp, link, variable, dense, times, ignore_memory, valid)
        for a, b in combinations(exp.plans, 2):
            for c in _pair_crossings(exp, link, a, b, variable, dense, times, ignore_memory):
                if not any(_same(c, w) for w in [*crossings, *found]):
                    found.append(c)
        plans = {p.label: p for p in exp.plans}
        crossings += [
            with_tie_range(c, dense, times, ratio_sd(exp, link, variable, dense, plans, c, priced)) for c in found
        ]
    kept = dense if keep_parts else None
    return CrossoverResult(exp, variable, values, tuple(series), tuple(crossings), ignore_memory, kept, parts)


def point_log_sd(
    exp: Experiment, plan: PlanSpec, link: LinkSpec, variable: str, values: np.ndarray, t: np.ndarray
) -> np.ndarray:
    """Each point's 80% band width in log space (`analyses.bands`)."""
    from shardwise.analyses.bands import pcie_log_sd
    from shardwise.analyses.bands import point_log_sd as band_sd

    sd = band_sd(exp, lambda e: times_s(e, plan, link.link, variable, values)[0], t)
    return pcie_log_sd(exp, plan, link.link, {variable: np.asarray(values, dtype=float)}, sd)


def _dense_grid(variable: str, values: np.ndarray) -> np.ndarray:
    lo, hi = float(values.min()), float(values.max())
    spec = VARIABLES[variable]
    if spec.integer and hi - lo + 1 <= MAX_DENSE:
        return np.arange(lo, hi + 1)
    if len(values) >= MIN_DENSE or lo == hi:
        return np.unique(values)
    extra = np.geomspace(lo, hi, MIN_DENSE) if spec.log and lo > 0 else np.linspace(lo, hi, MIN_DENSE)
    if spec.integer:
        extra = np.round(extra)
    return np.unique(np.concatenate([values, extra]))


def _same(c: Crossing, w: Crossing) -> bool:
    return {c.before, c.after} == {w.before, w.after} and c.at == w.at


def _signs(diff: np.ndarray) -> np.ndarray:
    """Sign of a - b where both are feasible, ties carrying the previous sign (0 where unknown)."""
    sign = np.sign(diff)
    sign[np.isnan(diff)] = 0
    out = sign.copy()
    for i in range(1, len(out)):
        if out[i] == 0 and not np.isnan(diff[i]):
            out[i] = out[i - 1]
    return out


def _pair_crossings(
    exp: Experiment,
    link: LinkSpec,
    a: PlanSpec,
    b: PlanSpec,
    variable: str,
    x: np.ndarray,
    times: dict[str, np.ndarray],
    ignore_memory: bool,
) -> list[Crossing]:
    diff = times[a.label] - times[b.label]  # < 0: a is faster; NaN where either is infeasible
    ok = ~np.isnan(diff)
    xs, sign = x[ok], _signs(diff)[ok]
    out = []
    for i in range(len(xs) - 1):
        if sign[i] == 0 or sign[i + 1] == 0 or sign[i] == sign[i + 1]:
            continue
        before, after = (a, b) if sign[i] < 0 else (b, a)
        at, exact = _refine(exp, link, a, b, variable, xs[i], xs[i + 1], sign[i], ignore_memory)
        t_at = _time_at(exp, after, link, variable, at, x, times)
        out.append(
            Crossing(link.label, before.label, after.label, at, float(xs[i]), float(xs[i + 1]), exact, False, t_at)
        )
    return out


def _winner_changes(
    exp: Experiment,
    link: LinkSpec,
    variable: str,
    x: np.ndarray,
    times: dict[str, np.ndarray],
    ignore_memory: bool,
    valid: dict[str, np.ndarray],
) -> list[Crossing]:
    """Where the fastest plan changes. A point where the current winner is invalid (`valid`: its
    layout rules hold; not fitting in memory still counts, a real change) is passed over: a plan
    invalid at a point (tp=8 at an odd batch over two data-parallel ranks) does not lose there, so
    the winner does not flip at every such point, while a plan valid at a few points only hides no
    change between the others. A change is one where both plans ran at both points; otherwise (a
    plan that could not run at the previous winner's point, one never valid again) the winner is
    taken over without a crossing."""
    plans = {p.label: p for p in exp.plans}
    names = list(times)
    stack = np.vstack([np.where(np.isnan(times[n]), np.inf, times[n]) for n in names])
    winners = [_winner(col, names) for col in stack.T]
    # valid somewhere from each point on: a winner invalid here but valid again later is waited for
    later = {n: np.logical_or.accumulate(v[::-1])[::-1] for n, v in valid.items()}
    out = []
    last_i, last = None, None
    for i, w in enumerate(winners):
        if w in ("", TIE):
            continue
        if last is not None and not valid[last][i] and later[last][i]:
            continue
        if last is not None and w != last and valid[last][i]:
            j = last_i if valid[w][last_i] else _last_won_beside(winners, valid, last, w, last_i)
            if j is not None:
                at, exact = _refine(exp, link, plans[last], plans[w], variable, x[j], x[i], -1.0, ignore_memory)
                t_at = _time_at(exp, plans[w], link, variable, at, x, times)
                out.append(Crossing(link.label, last, w, at, float(x[j]), float(x[i]), exact, True, t_at))
        last_i, last = i, w
    return out


def _last_won_beside(winners: list[str], valid: dict[str, np.ndarray], last: str, w: str, i: int) -> int | None:
    """The latest point at or before `i` where `last` won with `w` valid beside it, `last` the
    winner (or none) at every point between: where the two were last compared. A width whose
    heads TP cannot split (hidden 3040: 23 heads) leaves `last` alone at the points before the
    switch, yet the switch is a crossing (walkthrough: `--vary hidden=1024..16384` printed "no
    crossover" above a table where pp=8 won at 2160 and tp=8 from 3072)."""
    for j in range(i, -1, -1):
        if winners[j] not in ("", TIE, last):
            return None  # a third plan won in between: no comparison of these two
        if winners[j] == last and valid[w][j]:
            return j
    return None


def _time_at(
    exp: Experiment,
    plan: PlanSpec,
    link: LinkSpec,
    variable: str,
    at: float,
    x: np.ndarray,
    times: dict[str, np.ndarray],
) -> float:
    """The plan's time at the crossing (where the figure marks it): read off the dense grid `x`
    where the crossing is one of its points (an integer variable's), else priced there. The plan
    is the faster of the two at `at`, so feasible there: its grid time is its time."""
    i = int(np.searchsorted(x, at))
    if i < len(x) and x[i] == at and np.isfinite(times[plan.label][i]):
        return float(times[plan.label][i])
    t, _ = times_s(exp, plan, link.link, variable, np.array([at]))
    return float(t[0])


def _refine(
    exp: Experiment,
    link: LinkSpec,
    a: PlanSpec,
    b: PlanSpec,
    variable: str,
    lo: float,
    hi: float,
    sign_lo: float,
    ignore_memory: bool,
) -> tuple[float, bool]:
    """The switch point inside [lo, hi]: a is faster at lo (sign_lo < 0) or b is (> 0)."""
    if VARIABLES[variable].integer:
        return float(hi), bool(hi - lo <= 1)  # the dense grid holds every integer: hi is the first flip

    def diff(v: float) -> float:
        ta, fa = times_s(exp, a, link.link, variable, np.array([v]))
        tb, fb = times_s(exp, b, link.link, variable, np.array([v]))
        if not ignore_memory and not (fa[0] and fb[0]):
            return float("nan")
        return float(ta[0] - tb[0])

    log = VARIABLES[variable].log and lo > 0
    left, right = (np.log(lo), np.log(hi)) if log else (lo, hi)
    for _ in range(BISECTION_STEPS):
        mid = 0.5 * (left + right)
        d = diff(float(np.exp(mid) if log else mid))
        if np.isnan(d):
            return float(np.exp(right) if log else right), False
        if d != 0 and np.sign(d) == np.sign(sign_lo):
            left = mid
        else:
            right = mid
        if abs(right - left) <= 1e-6 * max(1.0, abs(right)):
            break
    root = 0.5 * (left + right)
    return float(np.exp(root) if log else root), True


def crossing_breakdown(result: CrossoverResult, c: Crossing) -> dict[str, dict[str, float]] | None:
    """Where the time of the two plans goes at the switch point (seconds per term, each plan),
    the reason for the crossing; None where a plan is invalid there or the cost model has no terms."""
    from shardwise.analyses.evaluate import breakdown_at

    exp = result.experiment
    link = next(lk.link for lk in exp.links if lk.label == c.link)
    plans = {p.label: p for p in exp.plans}
    at = np.flatnonzero(result.dense == c.at) if result.dense is not None else np.array([], dtype=int)
    if at.size and all(result.dense_parts.get((c.link, name)) for name in (c.before, c.after)):
        parts: dict[str, dict[str, float] | None] = {}
        for name in (c.before, c.after):  # read off the grid the crossing was found on
            point = {k: float(v[at[0]]) for k, v in result.dense_parts[(c.link, name)].items()}
            parts[name] = None if any(np.isnan(v) for v in point.values()) else point
    else:
        parts = {name: breakdown_at(exp, plans[name], link, result.variable, c.at) for name in (c.before, c.after)}
    if any(v is None for v in parts.values()):
        return None
    return parts  # type: ignore[return-value]


def describe_crossing(c: Crossing, variable: str) -> str:
    """'NVLink: tp=8 is faster below batch 11, pp=8 from 11 on (a tie within the 80% interval of their
    ratio from batch 9 to 13)'."""
    from shardwise.analyses.experiment import DISPLAY_SCALE, DISPLAY_UNIT, SHORT_NAME

    scale = DISPLAY_SCALE.get(variable, 1.0)
    value = c.at * scale
    name, unit = SHORT_NAME[variable], DISPLAY_UNIT.get(variable, "")
    ranged = ""
    if c.range_low == c.range_low and c.range_high > c.range_low:
        low, high = c.range_low * scale, c.range_high * scale
        ranged = f" (a tie within the 80% interval of their ratio from {name} {low:.4g} to {high:.4g}{unit})"
    elif c.range_low == c.range_low:
        ranged = f" (a tie within the 80% interval of their ratio at {name} {c.range_low * scale:.4g}{unit})"
    if VARIABLES[variable].integer and c.exact:
        return f"{c.link}: {c.before} is faster below {name} {value:g}, {c.after} from {value:g}{unit} on{ranged}"
    if VARIABLES[variable].integer:
        low = c.low * scale
        return (
            f"{c.link}: {c.before} is faster at {name} {low:g}, {c.after} from {value:g}{unit} (none valid between)"
            f"{ranged}"
        )
    return f"{c.link}: {c.before} is faster below {name} {value:.4g}{unit}, {c.after} above{ranged}"
