"""A grid over several variables at once, every plan on every link, in vectorized calls.

The grid is an outer product of the varied values. Each input keeps its own axis
(`np.meshgrid(sparse=True)`), so the cost model computes what depends on one variable once per
value of that variable and only combines at the end; large grids are evaluated in blocks
along the first axis (a progress callback sees each block).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardwise.analyses.evaluate import evaluate, evaluate_parts
from shardwise.calibration.spreads import Z80
from shardwise.specs.experiment import Experiment

BLOCK_POINTS = 2_000_000  # grid points per vectorized call
# At most this many (grid point, link, plan) configurations per sweep: about 25 s and 0.5 GB of
# results on one core; a larger grid is refused before any work, with the way to shrink it.
MAX_CONFIGURATIONS = 50_000_000


def check_size(configurations: int, what: str = "the grid") -> None:
    """Refuse a grid larger than MAX_CONFIGURATIONS before allocating it."""
    if configurations > MAX_CONFIGURATIONS:
        from shardwise.errors import SpecError

        raise SpecError(
            f"{what} has {configurations:,} configurations; at most {MAX_CONFIGURATIONS:,} "
            "(use fewer values, fewer plans or links, or split the range)"
        )


# SI columns carry their unit in the name (the tables and figures show readable units)
COLUMN_NAMES = {
    "bandwidth": "bandwidth_bytes_per_s",
    "latency": "latency_s",
    "peak_flops": "peak_flops_per_s",
    "hbm_bandwidth": "hbm_bandwidth_bytes_per_s",
}


@dataclass(frozen=True)
class SweepResult:
    experiment: Experiment
    variables: tuple[str, ...]
    axes: tuple[np.ndarray, ...]
    links: tuple[str, ...]
    plans: tuple[str, ...]
    times_s: dict[tuple[str, str], np.ndarray]  # (link, plan) -> grid-shaped seconds (NaN = invalid)
    fits: dict[tuple[str, str], np.ndarray]
    # (link, plan) -> each point's 80% band width (log; `analyses.bands`); absent: the experiment's
    log_sd: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)
    # (link, plan) -> term -> grid-shaped seconds (`run_sweep(..., breakdown=True)`); absent: not asked
    parts: dict[tuple[str, str], dict[str, np.ndarray]] = field(default_factory=dict)

    def band(self, link: str, plan: str) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) of the plan's 80% band on `link`, grid-shaped."""
        t = self.times_s[(link, plan)]
        sd = self.log_sd.get((link, plan), self.experiment.prediction_log_sd)
        factor = np.exp(Z80 * np.asarray(sd))
        return t / factor, t * factor

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(a) for a in self.axes)

    @property
    def points(self) -> int:
        return int(np.prod(self.shape)) * len(self.links) * len(self.plans)

    def stack(self, link: str) -> np.ndarray:
        """(plans, *grid) seconds on one link; inf where a plan is invalid."""
        t = np.stack([self.times_s[(link, p)] for p in self.plans])
        return np.where(np.isnan(t), np.inf, t)

    def winner(self, link: str) -> np.ndarray:
        """Index into `plans` of the fastest plan at each grid point (-1 where none is valid)."""
        t = self.stack(link)
        best = np.argmin(t, axis=0)
        return np.where(np.isinf(np.min(t, axis=0)), -1, best)

    def margin(self, link: str) -> np.ndarray:
        """How many times faster the winner is than the runner-up (1 = a tie; inf: only one valid)."""
        t = np.sort(self.stack(link), axis=0)
        if t.shape[0] < 2:
            return np.full(t.shape[1:], np.inf)
        with np.errstate(invalid="ignore", divide="ignore"):
            return t[1] / t[0]

    def columns(self) -> Iterator[tuple[str, np.ndarray]]:
        """Wide table, one row per (link, grid point): the variables, each plan's time, winner, margin."""
        mesh = np.meshgrid(*self.axes, indexing="ij")
        n = int(np.prod(self.shape))
        yield "link", np.repeat(np.array(self.links, dtype=object), n)
        for name, values in zip(self.variables, mesh, strict=True):
            yield COLUMN_NAMES.get(name, name), np.tile(values.ravel(), len(self.links))
        for plan in self.plans:
            bands = [self.band(link, plan) for link in self.links]
            yield f"time_s[{plan}]", np.concatenate([self.times_s[(link, plan)].ravel() for link in self.links])
            yield f"time_s_low[{plan}]", np.concatenate([lo.ravel() for lo, _ in bands])
            yield f"time_s_high[{plan}]", np.concatenate([hi.ravel() for _, hi in bands])
            yield f"fits[{plan}]", np.concatenate([self.fits[(link, plan)].ravel() for link in self.links])
            for term in self.parts.get((self.links[0], plan), {}):
                yield f"{term}_s[{plan}]", np.concatenate([self.parts[(lk, plan)][term].ravel() for lk in self.links])
        names = np.array([*self.plans, ""], dtype=object)
        yield "winner", np.concatenate([names[self.winner(link).ravel()] for link in self.links])
        yield "margin", np.concatenate([self.margin(link).ravel() for link in self.links])


def run_sweep(
    exp: Experiment,
    grid: Sequence[tuple[str, np.ndarray]],
    progress: Callable[[int], Any] | None = None,
    breakdown: bool = False,
) -> SweepResult:
    """Evaluate every plan on every link over the outer product of `grid` (name, values) pairs.
    `progress(points)` is called after each block with the grid points just done. Calibrated
    (`--calibration`), each point also gets its own band width (`analyses.bands`), at the cost of
    one more evaluation per fitted parameter. With `breakdown`, each plan's time per term too."""
    from shardwise.analyses.bands import calibrated, point_log_sd

    names = tuple(name for name, _ in grid)
    if len(set(names)) != len(names):
        raise ValueError("each variable may be varied once")
    axes = tuple(np.asarray(values, dtype=float) for _, values in grid)
    shape = tuple(len(a) for a in axes)
    check_size(int(np.prod(shape)) * len(exp.links) * len(exp.plans))
    rows_per_block = max(1, BLOCK_POINTS // max(1, int(np.prod(shape[1:]))))
    times: dict[tuple[str, str], np.ndarray] = {}
    fits: dict[tuple[str, str], np.ndarray] = {}
    log_sd: dict[tuple[str, str], np.ndarray] = {}
    parts: dict[tuple[str, str], dict[str, np.ndarray]] = {}
    for link in exp.links:
        for plan in exp.plans:
            t_out, f_out = np.empty(shape), np.empty(shape, dtype=bool)
            p_out: dict[str, np.ndarray] = {}
            sd_out = np.empty(shape) if calibrated(exp) else None
            for start in range(0, shape[0], rows_per_block):
                stop = min(shape[0], start + rows_per_block)
                block = (axes[0][start:stop], *axes[1:])
                inputs = dict(zip(names, np.meshgrid(*block, indexing="ij", sparse=True), strict=True))
                t, f, terms = evaluate_parts(exp, plan, link.link, inputs, parts=breakdown)
                t_out[start:stop], f_out[start:stop] = t, f
                for term, seconds in terms.items():
                    p_out.setdefault(term, np.empty(shape))[start:stop] = seconds
                if sd_out is not None:
                    price = lambda e, p=plan, lk=link, i=inputs: evaluate(e, p, lk.link, i)[0]  # noqa: E731
                    sd_out[start:stop] = point_log_sd(exp, price, np.broadcast_to(t, t_out[start:stop].shape))
                if progress is not None:
                    progress((stop - start) * int(np.prod(shape[1:])))
            times[(link.label, plan.label)], fits[(link.label, plan.label)] = t_out, f_out
            if p_out:
                parts[(link.label, plan.label)] = p_out
            if sd_out is not None:
                log_sd[(link.label, plan.label)] = sd_out
    labels = tuple(lk.label for lk in exp.links), tuple(p.label for p in exp.plans)
    return SweepResult(exp, names, axes, *labels, times, fits, log_sd, parts)
