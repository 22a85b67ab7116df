"""Where a sweep's plan is invalid on part of its grid (review 43 #2).

A plan whose layout cannot run a grid point (the batch does not split over its data-parallel
ranks and micro-batch, the layers over its pipeline stages, ...) is not priced there: its time is
NaN. That is neither "out of memory" nor a loss to the other plans, and a sweep says so: the CSV
leaves `fits_in_memory[PLAN]` empty there and writes `valid[PLAN]` false, the wins table counts
the points a plan won only among the plans valid there apart, and a note names each plan invalid
on part of the grid, the first such point and the rule it breaks. Where the batch is varied in
steps of one (`--vary batch=64..512`, every integer) and a coarser step makes every plan valid,
the note gives that range.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np


@dataclass(frozen=True)
class InvalidTally:
    """One plan's invalid points over the grid, every link together (merged block by block when
    a sweep is streamed)."""

    plan: str
    invalid: int = 0  # grid points x links where the plan is invalid
    points: int = 0  # grid points x links seen
    first: tuple[tuple[str, float], ...] = ()  # the first invalid point (variable, SI value)
    first_link: str = ""
    bad_batches: tuple[float, ...] = ()  # batches at which the plan is invalid somewhere (batch varied)
    good_batches: tuple[float, ...] = ()  # batches at which it is valid somewhere


def tally_block(
    plan: str,
    link: str,
    variables: tuple[str, ...],
    axes: tuple[np.ndarray, ...],
    times_s: np.ndarray,
) -> InvalidTally:
    """The tally of one block of the grid on one link (`times_s` grid-shaped, NaN where invalid)."""
    bad = np.isnan(np.asarray(times_s))
    first: tuple[tuple[str, float], ...] = ()
    if bad.any():
        where = np.unravel_index(int(np.flatnonzero(bad.ravel())[0]), bad.shape)
        first = tuple((name, float(axis[k])) for name, axis, k in zip(variables, axes, where, strict=True))
    bad_b: tuple[float, ...] = ()
    good_b: tuple[float, ...] = ()
    if "batch" in variables:
        k = variables.index("batch")
        others = tuple(d for d in range(bad.ndim) if d != k)
        batch = np.asarray(axes[k], dtype=float)
        bad_b = tuple(batch[bad.any(axis=others)].tolist())
        good_b = tuple(batch[(~bad).any(axis=others)].tolist())
    return InvalidTally(plan, int(bad.sum()), int(bad.size), first, link if first else "", bad_b, good_b)


def merge(a: InvalidTally, b: InvalidTally) -> InvalidTally:
    """Two tallies of the same plan (blocks, links) as one."""
    first, link = (a.first, a.first_link) if a.first else (b.first, b.first_link)
    return replace(
        a,
        invalid=a.invalid + b.invalid,
        points=a.points + b.points,
        first=first,
        first_link=link,
        bad_batches=tuple(np.union1d(a.bad_batches, b.bad_batches).tolist()),
        good_batches=tuple(np.union1d(a.good_batches, b.good_batches).tolist()),
    )


def tallies(result: Any) -> dict[str, InvalidTally]:
    """plan -> its tally over a whole `SweepResult` (every link)."""
    out: dict[str, InvalidTally] = {}
    for plan in result.plans:
        for link in result.links:
            t = tally_block(plan, link, result.variables, result.axes, result.times_s[(link, plan)])
            out[plan] = merge(out[plan], t) if plan in out else t
    return out


def wins_beside_invalid(plans: tuple[str, ...], times: np.ndarray, winner: np.ndarray) -> dict[str, int]:
    """plan -> grid points it wins where another plan is invalid (`times`: (plans, *grid), NaN
    invalid; `winner`: index into plans, -1 none): won among fewer plans than asked."""
    some_invalid = np.isnan(times).any(axis=0)
    return {plan: int(np.sum((winner == i) & some_invalid)) for i, plan in enumerate(plans)}


def batch_step(tallied: Mapping[str, InvalidTally], axis: np.ndarray) -> tuple[int, float, float, int] | None:
    """(step, low, high, values) of a batch range every plan can run, where the batch axis holds
    every whole number of its range and some plan is invalid at some of them: the step is the least
    common multiple of each plan's greatest common divisor of the batches it runs, kept only where no
    plan is invalid at any multiple of it inside the range; None where none such exists."""
    values = np.asarray(axis, dtype=float)
    if values.size < 3 or not np.all(np.diff(values) == 1) or not any(t.bad_batches for t in tallied.values()):
        return None
    step = 1
    for t in tallied.values():
        good = [int(b) for b in t.good_batches]
        if not good:
            return None
        step = math.lcm(step, math.gcd(*good))
    low, high = math.ceil(values[0] / step) * step, math.floor(values[-1] / step) * step
    if step <= 1 or high <= low:
        return None
    if any(float(b) % step == 0 for t in tallied.values() for b in t.bad_batches):
        return None
    return step, float(low), float(high), int((high - low) // step) + 1


def invalid_notes(exp: Any, tallied: Mapping[str, InvalidTally], axes: Mapping[str, np.ndarray]) -> tuple[str, ...]:
    """A note per plan invalid on part of the grid: how many points, the first one and the rule
    it breaks there (`analyses.evaluate.why_invalid`); and a batch range every plan runs."""
    from shardwise.analyses.evaluate import why_invalid
    from shardwise.analyses.experiment import DISPLAY_SCALE, DISPLAY_UNIT

    links = {lk.label: lk.link for lk in exp.links}
    plans = {p.label: p for p in exp.plans}
    out = []
    for t in tallied.values():
        if not t.invalid or t.invalid == t.points:  # none, or everywhere (an error of its own)
            continue
        point = {name: np.array([value]) for name, value in t.first}
        rule = why_invalid(exp, plans[t.plan], links[t.first_link], point) or "see the rules"
        at = ", ".join(f"{n} {v * DISPLAY_SCALE.get(n, 1):g}{DISPLAY_UNIT.get(n, '')}" for n, v in t.first)
        over = f" over {len(links)} links" if len(links) > 1 else ""
        out.append(
            f"--plan {t.plan} is invalid at {t.invalid:,} of {t.points:,} grid points{over} (first at {at}: "
            f"{rule}); the plans valid there are compared without it"
        )
    if "batch" in axes and out and (step := batch_step(tallied, axes["batch"])) is not None:
        k, low, high, n = step
        out.append(f"every plan is valid at each batch that is a multiple of {k}: --vary batch={low:g}..{high:g}:{n}")
    return tuple(out)


def crossover_notes(exp: Any, result: Any) -> tuple[str, ...]:
    """`invalid_notes` for a crossover (`analyses.crossover.CrossoverResult`): its table shows
    'invalid' only on the rows it prints, and its `faster` column names the plans valid there."""
    tallied: dict[str, InvalidTally] = {}
    axes = (np.asarray(result.values, dtype=float),)
    for s in result.series:
        t = tally_block(s.plan, s.link, (result.variable,), axes, s.time_s)
        tallied[s.plan] = merge(tallied[s.plan], t) if s.plan in tallied else t
    return invalid_notes(exp, tallied, {result.variable: axes[0]})
