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
from shardwise.analyses.experiment import column_values
from shardwise.calibration.spreads import Z80
from shardwise.specs.experiment import Experiment

BLOCK_POINTS = 2_000_000  # grid points per vectorized call
# At most this many (grid point, link, plan) configurations per sweep held in memory: 8 s (plans
# without a pipeline) to 3 min (with one) of one core (`sweep_cost`) and 0.5 GB of results; a
# larger grid is refused before any work, with the way to shrink it, unless it is streamed to a
# file (`stream_sweep`, up to MAX_STREAMED).
MAX_CONFIGURATIONS = 50_000_000
# A streamed sweep writes each block and keeps only its totals: memory stays that of one block
# (about 1 GB at BLOCK_POINTS), so the limit is time: 1e9 configurations of one plan without a
# pipeline take about 1.4 h of one core to CSV and 17 min to Parquet, a pipelined plan an hour more
# (`sweep_cost`, measured; review 47 #7: this said 2 minutes); the command asks --yes above 10 min.
MAX_STREAMED = 1_000_000_000


def check_size(configurations: int, what: str = "the grid", limit: int = MAX_CONFIGURATIONS, hint: str = "") -> None:
    """Refuse a grid larger than `limit` before allocating it."""
    if configurations > limit:
        from shardwise.errors import SpecError

        raise SpecError(
            f"{what} has {configurations:,} configurations; at most {limit:,} "
            f"(use fewer values, fewer plans or links, or split the range{hint})"
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
    # a plan that does not fit in GPU memory may win a point (`--ignore-memory`); by default it cannot
    ignore_memory: bool = False

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
        """(plans, *grid) seconds on one link; inf where a plan is invalid, or does not fit in GPU
        memory (unless `ignore_memory`): the times the winner and the margin compare."""
        t = np.stack([self.times_s[(link, p)] for p in self.plans])
        out = np.isnan(t)
        if not self.ignore_memory:
            out |= ~np.stack([self.fits[(link, p)] for p in self.plans])
        return np.where(out, np.inf, t)

    def winner(self, link: str) -> np.ndarray:
        """Index into `plans` of the fastest plan at each grid point (-1 where none is valid and fits)."""
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

    def winner_cells(self) -> dict[str, dict[str, int]]:
        """link -> plan (or "none valid") -> grid cells it wins."""
        out = {}
        for link in self.links:
            w = self.winner(link)
            counts = {plan: int(np.sum(w == i)) for i, plan in enumerate(self.plans)}
            counts["none valid"] = int(np.sum(w < 0))
            out[link] = counts
        return out

    def invalid_cells(self) -> dict[str, dict[str, int]]:
        """link -> plan -> grid cells where the plan is invalid: its layout cannot run the point
        (not priced; neither out of memory nor a loss)."""
        return {lk: {p: int(np.isnan(self.times_s[(lk, p)]).sum()) for p in self.plans} for lk in self.links}

    def wins_beside_invalid(self) -> dict[str, dict[str, int]]:
        """link -> plan -> grid cells it wins where another plan is invalid (won among fewer plans;
        `analyses.sweep_invalid`)."""
        from shardwise.analyses.sweep_invalid import wins_beside_invalid

        return {
            lk: wins_beside_invalid(self.plans, np.stack([self.times_s[(lk, p)] for p in self.plans]), self.winner(lk))
            for lk in self.links
        }

    def invalid_tallies(self) -> dict[str, Any]:
        """plan -> where it is invalid (`analyses.sweep_invalid.InvalidTally`), every link together."""
        from shardwise.analyses.sweep_invalid import tallies

        return tallies(self)

    @property
    def per_point_bands(self) -> bool:
        """Each point has its own band width (a calibrated sweep)."""
        return bool(self.log_sd)

    def valid_somewhere(self, plan: str) -> bool:
        """The plan is valid at some point of the grid on some link."""
        return any(bool(np.any(~np.isnan(self.times_s[(link, plan)]))) for link in self.links)

    def columns(self) -> Iterator[tuple[str, np.ndarray]]:
        """Wide table, one row per (link, grid point): the variables, each plan's time, whether it
        fits in memory (empty where the plan is invalid: never priced there) and whether it is valid,
        winner, margin."""
        mesh = np.meshgrid(*self.axes, indexing="ij")
        n = int(np.prod(self.shape))
        yield "link", np.repeat(np.array(self.links, dtype=object), n)
        for name, values in zip(self.variables, mesh, strict=True):
            yield COLUMN_NAMES.get(name, name), column_values(name, np.tile(values.ravel(), len(self.links)))
        for plan in self.plans:
            bands = [self.band(link, plan) for link in self.links]
            yield f"time_s[{plan}]", np.concatenate([self.times_s[(link, plan)].ravel() for link in self.links])
            yield f"time_s_low[{plan}]", np.concatenate([lo.ravel() for lo, _ in bands])
            yield f"time_s_high[{plan}]", np.concatenate([hi.ravel() for _, hi in bands])
            valid = np.concatenate([~np.isnan(self.times_s[(link, plan)]).ravel() for link in self.links])
            fits = np.concatenate([self.fits[(link, plan)].ravel() for link in self.links]).astype(object)
            fits[~valid] = None
            yield f"fits_in_memory[{plan}]", fits
            yield f"valid[{plan}]", valid
            for term in self.parts.get((self.links[0], plan), {}):
                yield f"{term}_s[{plan}]", np.concatenate([self.parts[(lk, plan)][term].ravel() for lk in self.links])
        names = np.array([*self.plans, ""], dtype=object)
        yield "winner_plan", np.concatenate([names[self.winner(link).ravel()] for link in self.links])
        yield "margin", np.concatenate([self.margin(link).ravel() for link in self.links])
        yield from stack_columns(self.experiment, n * len(self.links))


def stack_columns(exp: Experiment, rows: int) -> Iterator[tuple[str, np.ndarray]]:
    """The stack priced, on every row of the table: `framework`, and for a training step
    `recompute[PLAN]`, what each plan recomputes (`analyses.evaluate.recompute_label`), and its
    `zero_stage[PLAN]` and `sequence_parallel[PLAN]` as written (`layout_as_written`)."""
    from shardwise.analyses.evaluate import layout_as_written, recompute_label

    yield "framework", np.full(rows, str(exp.plan_defaults.get("framework") or "megatron-core"), dtype=object)
    for plan in exp.plans:
        label = recompute_label(exp, plan)
        if label:
            yield f"recompute[{plan.label}]", np.full(rows, label, dtype=object)
        for key, value in layout_as_written(exp, plan).items():
            yield f"{key}[{plan.label}]", np.full(rows, value)


def run_sweep(
    exp: Experiment,
    grid: Sequence[tuple[str, np.ndarray]],
    progress: Callable[[int], Any] | None = None,
    breakdown: bool = False,
    ignore_memory: bool = False,
) -> SweepResult:
    """Evaluate every plan on every link over the outer product of `grid` (name, values) pairs.
    `progress(points)` is called after each block with the grid points just done. Calibrated
    (`--calibration`), each point also gets its own band width (`analyses.bands`), at the cost of
    one more evaluation per fitted parameter. With `breakdown`, each plan's time per term too."""
    names, axes = _axes(grid)
    shape = tuple(len(a) for a in axes)
    check_size(int(np.prod(shape)) * len(exp.links) * len(exp.plans))
    times: dict[tuple[str, str], np.ndarray] = {}
    fits: dict[tuple[str, str], np.ndarray] = {}
    log_sd: dict[tuple[str, str], np.ndarray] = {}
    parts: dict[tuple[str, str], dict[str, np.ndarray]] = {}
    for link in exp.links:
        for start, stop, block in _blocks(axes, BLOCK_POINTS):
            result = _evaluate_block(exp, link, names, block, breakdown, ignore_memory)
            for key, t in result.times_s.items():
                times.setdefault(key, np.empty(shape))[start:stop] = t
                fits.setdefault(key, np.empty(shape, dtype=bool))[start:stop] = result.fits[key]
                if key in result.log_sd:
                    log_sd.setdefault(key, np.empty(shape))[start:stop] = result.log_sd[key]
                for term, seconds in result.parts.get(key, {}).items():
                    parts.setdefault(key, {}).setdefault(term, np.empty(shape))[start:stop] = seconds
            if progress is not None:
                progress(result.points)
    labels = tuple(lk.label for lk in exp.links), tuple(p.label for p in exp.plans)
    return SweepResult(exp, names, axes, *labels, times, fits, log_sd, parts, ignore_memory)


@dataclass(frozen=True)
class SweepTotals:
    """What a streamed sweep keeps once its rows are written: the grid, how many cells each
    plan won on each link, and whether each plan was valid anywhere."""

    experiment: Experiment
    variables: tuple[str, ...]
    axes: tuple[np.ndarray, ...]
    links: tuple[str, ...]
    plans: tuple[str, ...]
    cells: dict[str, dict[str, int]]  # link -> plan (or "none valid") -> cells won
    valid: dict[str, bool]  # plan -> valid at some point on some link
    per_point_bands: bool
    invalid: dict[str, dict[str, int]] = field(default_factory=dict)  # link -> plan -> cells invalid
    beside_invalid: dict[str, dict[str, int]] = field(default_factory=dict)  # link -> plan -> won beside one
    tallied: dict[str, Any] = field(default_factory=dict)  # plan -> analyses.sweep_invalid.InvalidTally

    @property
    def points(self) -> int:
        return int(np.prod([len(a) for a in self.axes])) * len(self.links) * len(self.plans)

    def winner_cells(self) -> dict[str, dict[str, int]]:
        return self.cells

    def valid_somewhere(self, plan: str) -> bool:
        return self.valid[plan]

    def invalid_cells(self) -> dict[str, dict[str, int]]:
        return self.invalid

    def wins_beside_invalid(self) -> dict[str, dict[str, int]]:
        return self.beside_invalid

    def invalid_tallies(self) -> dict[str, Any]:
        return self.tallied


def stream_sweep(
    exp: Experiment,
    grid: Sequence[tuple[str, np.ndarray]],
    write: Callable[[dict[str, np.ndarray]], Any],
    progress: Callable[[int], Any] | None = None,
    breakdown: bool = False,
    block_points: int = BLOCK_POINTS,
    ignore_memory: bool = False,
) -> SweepTotals:
    """`run_sweep` whose table (`SweepResult.columns`, the same rows in the same order: link by
    link, the grid in C order) goes to `write` one block at a time; only the totals stay in
    memory, so a grid of up to MAX_STREAMED configurations takes the memory of one block."""
    from shardwise.analyses.sweep_invalid import merge

    names, axes = _axes(grid)
    check_size(int(np.prod([len(a) for a in axes])) * len(exp.links) * len(exp.plans), limit=MAX_STREAMED)
    plans = tuple(p.label for p in exp.plans)
    cells = {lk.label: dict.fromkeys([*plans, "none valid"], 0) for lk in exp.links}
    valid = dict.fromkeys(plans, False)
    invalid = {lk.label: dict.fromkeys(plans, 0) for lk in exp.links}
    beside = {lk.label: dict.fromkeys(plans, 0) for lk in exp.links}
    tallied: dict[str, Any] = {}
    per_point = False
    for link in exp.links:
        for _, _, block in _blocks(axes, block_points):
            result = _evaluate_block(exp, link, names, block, breakdown, ignore_memory)
            write(dict(result.columns()))
            for name, count in result.winner_cells()[link.label].items():
                cells[link.label][name] += count
            block_invalid, block_beside = result.invalid_cells()[link.label], result.wins_beside_invalid()[link.label]
            block_tallies = result.invalid_tallies()
            for plan in plans:
                valid[plan] |= result.valid_somewhere(plan)
                invalid[link.label][plan] += block_invalid[plan]
                beside[link.label][plan] += block_beside[plan]
                t = block_tallies[plan]
                tallied[plan] = merge(tallied[plan], t) if plan in tallied else t
            per_point |= bool(result.log_sd)
            if progress is not None:
                progress(result.points)
    labels = tuple(lk.label for lk in exp.links)
    return SweepTotals(exp, names, axes, labels, plans, cells, valid, per_point, invalid, beside, tallied)


def _axes(grid: Sequence[tuple[str, np.ndarray]]) -> tuple[tuple[str, ...], tuple[np.ndarray, ...]]:
    names = tuple(name for name, _ in grid)
    if len(set(names)) != len(names):
        raise ValueError("each variable may be varied once")
    return names, tuple(np.asarray(values, dtype=float) for _, values in grid)


def _blocks(axes: tuple[np.ndarray, ...], block_points: int) -> Iterator[tuple[int, int, tuple[np.ndarray, ...]]]:
    """(start, stop, axes) of blocks of whole rows of the first axis, about `block_points` each."""
    rows = max(1, block_points // max(1, int(np.prod([len(a) for a in axes[1:]]))))
    for start in range(0, len(axes[0]), rows):
        stop = min(len(axes[0]), start + rows)
        yield start, stop, (axes[0][start:stop], *axes[1:])


def _evaluate_block(
    exp: Experiment,
    link: Any,
    names: tuple[str, ...],
    axes: tuple[np.ndarray, ...],
    breakdown: bool,
    ignore_memory: bool,
) -> SweepResult:
    """Every plan on one link over one block of the grid."""
    from shardwise.analyses.bands import calibrated, pcie_log_sd, point_log_sd
    from shardwise.physics.custom_allreduce import is_nvlink_class

    inputs = dict(zip(names, np.meshgrid(*axes, indexing="ij", sparse=True), strict=True))
    shape = tuple(len(a) for a in axes)
    times, fits, log_sd, parts = {}, {}, {}, {}
    for plan in exp.plans:
        key = (link.label, plan.label)
        t, f, terms = evaluate_parts(exp, plan, link.link, inputs, parts=breakdown, embedding_apart=True)
        times[key], fits[key] = np.broadcast_to(t, shape), np.broadcast_to(f, shape)
        if terms:
            parts[key] = {term: np.broadcast_to(v, shape) for term, v in terms.items()}
        if calibrated(exp):
            price = lambda e, p=plan, i=inputs: evaluate(e, p, link.link, i)[0]  # noqa: E731
            log_sd[key] = point_log_sd(exp, price, times[key])
        elif not is_nvlink_class(link.link):  # a group over PCIe: wider (`analyses.bands.pcie_log_sd`)
            log_sd[key] = pcie_log_sd(exp, plan, link.link, inputs, np.full(shape, float(exp.prediction_log_sd)))
    labels = (link.label,), tuple(p.label for p in exp.plans)
    return SweepResult(exp, names, axes, *labels, times, fits, log_sd, parts, ignore_memory)
