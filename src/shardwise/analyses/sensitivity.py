"""Sensitivity of the TP/PP comparison (the brief's step 6).

- `crossover_batch_vs`: for each value of one variable (layers, hidden, ...), the batch at which
  the fastest of two plans changes, from one sweep over (variable x every batch 1..max_batch);
- `one_at_a_time`: the ratio time(plan A) / time(plan B) at a baseline, and with each input in
  turn halved and doubled, ranked by how far it moves the ratio (a tornado chart), each ratio
  with its 80% interval (`analyses.bands.ratio_log_sd`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardwise.analyses.bands import ratio_log_sd
from shardwise.analyses.evaluate import times_s, why_invalid
from shardwise.analyses.sweep import check_size, run_sweep
from shardwise.calibration.spreads import Z80
from shardwise.specs.experiment import Experiment

TORNADO_INPUTS = ("batch", "bandwidth", "latency", "layers", "hidden", "seq_len", "peak_flops", "hbm_bandwidth")


@dataclass(frozen=True)
class CrossoverCurve:
    """Crossover batch of plans[0] vs plans[1] on one link, per value of `variable`."""

    link: str
    variable: str
    values: np.ndarray
    crossover_batch: np.ndarray  # first batch where the other plan is faster; NaN: none up to max batch
    winner_at_batch_1: list[str]  # faster plan at the smallest feasible batch ('' if none is feasible)
    # the largest batch where both plans are feasible (NaN: none): a winner "up to max batch" was
    # compared only that far when the other plan stops fitting first
    last_feasible_batch: np.ndarray


def crossover_batch_vs(
    exp: Experiment, variable: str, values: np.ndarray, max_batch: int = 256, ignore_memory: bool = False
) -> list[CrossoverCurve]:
    """Where the plan that is faster at the smallest batch stops being faster, as `variable`
    moves: one sweep per link over (variable x every batch 1..max_batch); only batches where
    both plans are feasible (valid, and fitting in memory unless `ignore_memory`) count."""
    if len(exp.plans) != 2:
        raise ValueError("crossover_batch_vs compares exactly two plans")
    a, b = (p.label for p in exp.plans)
    check_size(len(values) * int(max_batch) * len(exp.links) * 2, f"{variable} x batch 1..{max_batch}")
    batches = np.arange(1, max_batch + 1, dtype=float)
    result = run_sweep(exp, [(variable, np.asarray(values, dtype=float)), ("batch", batches)])
    curves = []
    for link in result.links:
        ta, tb = result.times_s[(link, a)], result.times_s[(link, b)]
        both = ~np.isnan(ta) & ~np.isnan(tb)
        if not ignore_memory:
            both &= result.fits[(link, a)] & result.fits[(link, b)]
        diff = np.where(both, ta - tb, np.nan)
        crossing, first_winner = [], []
        last = np.array([batches[np.flatnonzero(ok)[-1]] if ok.any() else np.nan for ok in both])
        for row in diff:
            signs = row[~np.isnan(row) & (row != 0)]
            if signs.size == 0:
                crossing.append(np.nan)
                first_winner.append("")
                continue
            start = np.sign(signs[0])
            first_winner.append(a if start < 0 else b)
            flips = np.flatnonzero(~np.isnan(row) & (np.sign(row) == -start))
            crossing.append(batches[flips[0]] if flips.size else np.nan)
        curves.append(CrossoverCurve(link, variable, result.axes[0], np.array(crossing), first_winner, last))
    return curves


@dataclass(frozen=True)
class TornadoBar:
    variable: str
    base_value: float
    low_value: float
    high_value: float
    ratio_low: float  # time(plan A) / time(plan B) with the input scaled down
    ratio_high: float
    fits_low: bool = True  # both plans fit in GPU memory there
    fits_high: bool = True
    base_ratio: float = float("nan")  # the ratio at the baseline
    # the ratio's 80% band width (log) at (low, baseline, high) (`analyses.bands.ratio_log_sd`)
    log_sd: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def band(self, which: str) -> tuple[float, float]:
        """The ratio's 80% interval with the input scaled down ('low'), as given ('base') or up."""
        i = ("low", "base", "high").index(which)
        ratio = (self.ratio_low, self.base_ratio, self.ratio_high)[i]
        f = float(np.exp(Z80 * self.log_sd[i]))
        return ratio / f, ratio * f

    @property
    def spread(self) -> float:
        """How far the input moves the ratio, in log2 units (a factor of 2 either way = 1)."""
        return float(abs(np.log2(self.ratio_high) - np.log2(self.ratio_low)))


def _base_value(exp: Experiment, link_index: int, variable: str) -> float:
    m, link, gpu = exp.model, exp.links[link_index].link, exp.gpu
    return float(
        {
            "batch": exp.batch,
            "bandwidth": link.bandwidth_bytes_per_s,
            "latency": link.latency_s,
            "layers": m.layers,
            "hidden": m.hidden,
            "seq_len": m.seq_len,
            "peak_flops": gpu.peak_flops_per_s_16bit,
            "hbm_bandwidth": gpu.memory_bandwidth_bytes_per_s,
        }[variable]
    )


def one_at_a_time(
    exp: Experiment, link_index: int = 0, factor: float = 2.0, inputs: tuple[str, ...] = TORNADO_INPUTS
) -> tuple[float, list[TornadoBar]]:
    """(baseline ratio, bars sorted by spread) for plans[0] / plans[1] on one link."""
    if len(exp.plans) != 2:
        raise ValueError("one_at_a_time compares exactly two plans")
    a, b = exp.plans
    link = exp.links[link_index].link
    bars = []
    base_ratio = float("nan")
    for name in inputs:
        base = _base_value(exp, link_index, name)
        values = np.array([base / factor, base, base * factor])
        ta, fa = times_s(exp, a, link, name, values)
        tb, fb = times_s(exp, b, link, name, values)
        ratio, fits = ta / tb, fa & fb
        base_ratio = float(ratio[1])
        sd = ratio_log_sd(
            exp,
            lambda e, p=a, n=name, v=values: times_s(e, p, link, n, v)[0],
            lambda e, p=b, n=name, v=values: times_s(e, p, link, n, v)[0],
            ta,
            tb,
        )
        bars.append(
            TornadoBar(
                name,
                base,
                values[0],
                values[2],
                float(ratio[0]),
                float(ratio[2]),
                bool(fits[0]),
                bool(fits[2]),
                base_ratio,
                (float(sd[0]), float(sd[1]), float(sd[2])),
            )
        )
    bars.sort(key=lambda bar: -bar.spread if np.isfinite(bar.spread) else 0.0)
    return base_ratio, bars


def broken_rules(exp: Experiment, link_index: int, bars: list[TornadoBar]) -> list[str]:
    """The validity rules (`specs.rules`, as `analyses.evaluate.why_invalid` names them) that a
    plan breaks where a bar's ratio is invalid (NaN): what the tornado's "invalid" cells mean, in
    the order met, each once."""
    link = exp.links[link_index].link
    found: list[str] = []
    for bar in bars:
        for ratio, value in ((bar.ratio_low, bar.low_value), (bar.ratio_high, bar.high_value)):
            if ratio == ratio:
                continue
            for plan in exp.plans:
                rule = why_invalid(exp, plan, link, {bar.variable: np.array([value])})
                if rule and rule not in found:
                    found.append(rule)
    return found
