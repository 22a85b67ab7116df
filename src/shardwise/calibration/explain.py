"""A run far from the prediction is evidence: what would have to be true to explain it, and a fit
that follows it.

`explain_run`: for each calibration parameter alone, the value inside its physical range
(`Parameter.low .. high`) at which the model predicts the measured figure, found on a grid of
GRID points over the range and refined by one more grid inside the bracketing interval (the
prediction is monotone in each parameter), with the physical quantity it implies ("the network
at about 6 GB/s per GPU across 64 servers"). A run no single parameter explains is reported with
the range of predictions each parameter reaches.

`explaining_fit`: when the ordinary fit (`fit.fit`, parameters taken in the table's order, narrow
priors) still misses a run by more than FAR_LOG (8%: about 1.5 x the spread of a calibrated stack,
`spreads.NOISE_LOG_SD`), or there are 2 to FEW_RUNS runs (the table's order then fits about as
many parameters as runs, which explains any runs: its misses say nothing about whether it took
the right ones), the parameters are chosen by need, and of every fit tried the one with the best
score (`score`: -2 log evidence, Laplace approximation) is kept, the ordinary fit included. Two
searches propose parameter sets, each parameter with its wide prior (`Parameter.widen`):

- forward selection: each round adds the sensitive parameter that lowers the score most, while it
  lowers it by more than MIN_GAIN and runs allow (n runs, at most n parameters);
- the posterior's particles (`particle_need`; `calibration.particles`, fixed seed): per parameter,
  the particles' mean rise of -2 ln posterior density when that parameter alone returns to its
  prior mean, i.e. how much the posterior needs it moved. The sensitive parameters whose rise
  exceeds MIN_GAIN (the n largest) are fitted together, started also from the particles' mean
  values (`fit.fit(start=...)`), and pruned by backward elimination: drop the parameter whose
  removal scores best while removing it costs less than MIN_GAIN.

Forward selection from the prior reaches an explanation one parameter at a time; parameters the
runs need together (GEMMs faster than the presets at large micro-batches and slower at small
ones: the GEMM scale and the ramp, each alone worse than a link latency) it cannot reach, while
the particles, drawn from the whole prior, hold them (Miller 2002, "Subset Selection in
Regression", Ch. 3, on forward selection missing jointly needed variables that backward
elimination keeps). A parameter is thus fitted because the runs need it, not because it comes
early in the table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from shardwise.calibration.parameters import BY_NAME, NEUTRAL, PARAMETERS, apply

GRID = 25
FAR_LOG = math.log(1.08)  # a run the ordinary fit misses by more than 8%: choose parameters by need
MIN_GAIN = 2.0  # -2 log evidence: a parameter must improve the fit at least this much to be added
FEW_RUNS = 8  # up to this many runs, forward selection is always tried (module docstring)


@dataclass(frozen=True)
class Explanation:
    parameter: str
    value: float  # the parameter's value at which the model predicts the measurement
    prior_sds: float  # how far from its prior, in (narrow) prior standard deviations
    text: str  # the physical quantity that value means


@dataclass(frozen=True)
class RunExplanations:
    ratio: float  # measured / predicted
    found: tuple[Explanation, ...]  # most plausible first
    tried: dict[str, tuple[float, float]]  # parameter -> (lowest, highest) prediction over its range


def explain_run(case: Any, measured: float) -> RunExplanations:
    """What single parameter change would make the model predict `measured` for `case`."""
    from shardwise.calibration.cases import Evaluator

    ev = Evaluator([case])
    target = math.log(measured)
    predicted = float(ev.step_s({})[0, 0])
    found, tried = [], {}
    for p in PARAMETERS:
        lo, hi = p.low, p.high
        for _ in range(2):  # a grid, then a grid inside the bracket
            u = np.linspace(lo, hi, GRID)
            logt = np.log(ev.step_s({p.name: p.value(u)})[:, 0])
            if _ == 0:
                tried[p.name] = (float(np.exp(logt.min())), float(np.exp(logt.max())))
            above = logt >= target
            cross = np.flatnonzero(above[:-1] != above[1:])
            if cross.size == 0:
                break
            j = int(cross[np.argmin(np.abs(u[cross] - p.prior_mean))])
            lo, hi = float(u[j]), float(u[j + 1])
        else:
            t0, t1 = logt[0], logt[-1]
            uu = lo if t1 == t0 else lo + (target - t0) * (hi - lo) / (t1 - t0)
            value = float(p.value(uu))
            text = f"{quantity(case, p.name, value)}, i.e. {p.name} = {value:.3g}"
            found.append(Explanation(p.name, value, abs(uu - p.prior_mean) / p.prior_sd, text))
    found.sort(key=lambda e: e.prior_sds)
    return RunExplanations(measured / predicted, tuple(found), tried)


def quantity(case: Any, name: str, value: float) -> str:
    """The physical quantity a parameter value means for this run's hardware, in words."""
    scn = getattr(case, "scenario", case)
    c = apply(scn.cluster, {name: value})
    nodes = int(np.max(np.asarray(scn.cluster.nodes)))
    if name in ("inter_node_bandwidth_scale", "inter_node_scaling_exponent") and c.inter_node_link is not None:
        rate = float(np.max(c.inter_node_link.effective_bandwidth_bytes_per_s)) / 1e9
        nominal = float(np.max(scn.cluster.inter_node_link.effective_bandwidth_bytes_per_s)) / 1e9
        return f"inter-node collectives at about {rate:.3g} GB/s per GPU across {nodes} servers (presets {nominal:.3g})"
    if name in ("inter_node_all_to_all_scale", "inter_node_p2p_scale") and c.inter_node_link is not None:
        kind = "all-to-all" if name == "inter_node_all_to_all_scale" else "pipeline sends"
        rate = float(np.max(c.inter_node_link.effective_bandwidth_bytes_per_s)) * value / 1e9
        return f"{kind} across servers at about {rate:.3g} GB/s per GPU ({value:.3g} x the other collectives')"
    if name == "matmul_efficiency_scale":
        return f"GEMMs at about {float(np.max(c.gpu.matmul_efficiency)):.0%} of peak (presets: " + (
            f"{float(np.max(scn.cluster.gpu.matmul_efficiency)):.0%})"
        )
    if name == "intra_node_bandwidth_scale":
        rate = float(np.max(c.intra_node_link.effective_bandwidth_bytes_per_s)) / 1e9
        return f"{c.intra_node_link.name} inside a server at about {rate:.3g} GB/s per GPU"
    if name == "memory_bandwidth_scale":
        return f"HBM at about {float(np.max(c.gpu.memory_bandwidth_bytes_per_s)) / 1e12:.3g} TB/s"
    if name == "link_latency_scale":
        return f"every link's latency {value:.3g} x the presets'"
    if name == "gemm_half_rate_tokens":
        return f"GEMMs at half their large-batch rate at about {value:,.0f} tokens per micro-batch"
    from shardwise.units import format_seconds

    what = {"step_overhead_s": "per step", "micro_batch_overhead_s": "per micro-batch per pipeline stage"}[name]
    return f"about {format_seconds(value)} of fixed time {what}"


def describe(
    where: str, metric: str, measured: float, ex: RunExplanations, given: tuple[str, float] = ("", 0.0)
) -> str:
    """'runs.csv line 5: step_time_s 12.3 s is 4.1 x the predicted 3 s; it would be explained by ...'
    (one line), quoting the column and value the user wrote (`given`: a tokens/s or TFLOP/s the run
    was converted from; ("", 0): `metric` `measured` itself) beside the prediction in its unit. A run
    nothing explains: `head(...)` and `tried(...)`, two lines (`far.refuse_unexplained`)."""
    line = head(where, metric, measured, ex, given)
    if ex.found:
        options = "; or ".join(e.text for e in ex.found[:3])
        return f"{line}; it would be explained by {options}"
    return f"{line}, and no parameter within its physical range explains it ({tried(ex)})"


RATE_UNITS = {"tokens_per_s_per_gpu": "tokens/s per GPU", "model_tflops_per_gpu": "TFLOP/s per GPU"}


def head(where: str, metric: str, measured: float, ex: RunExplanations, given: tuple[str, float] = ("", 0.0)) -> str:
    """'k.csv line 2: tokens_per_s_per_gpu 6.3 is 1/1,580 of the predicted 9,950 tokens/s per GPU': the
    measurement as written and the prediction in its unit (a rate: the prediction's step inverted)."""
    from shardwise.units import format_seconds

    column, value = given if given[0] else (metric, measured)
    if column in RATE_UNITS:  # a rate: the predicted rate is the given one x measured step / predicted step
        predicted = value * ex.ratio
        part = f"1/{_times(ex.ratio)} of" if ex.ratio > 1 else f"{_times(1 / ex.ratio)} x"
        return f"{where}: {column} {value:,.4g} is {part} the predicted {predicted:,.4g} {RATE_UNITS[column]}"
    predicted = measured / ex.ratio
    if column == "throughput_tokens_per_s":  # a serving rate, priced as such
        return f"{where}: {column} {value:,.4g} is {_times(ex.ratio)} x the predicted {predicted:,.4g} tokens/s"
    times = _times(ex.ratio)
    return f"{where}: {column} {format_seconds(value)} is {times} x the predicted {format_seconds(predicted)}"


def _times(ratio: float) -> str:
    """A ratio as read: 1,581 (not 1.58e+03), 7.74."""
    return f"{ratio:,.0f}" if ratio >= 100 else f"{ratio:.3g}"


def tried(ex: RunExplanations) -> str:
    """'tried: GEMM efficiency (x) 0.3-1.6x: 2.36 s-9.93 s; ...': each parameter's range and the step
    times it reaches."""
    from shardwise.units import format_seconds

    return "tried (each parameter's range: the step times it reaches): " + "; ".join(
        f"{BY_NAME[n].description} {_range(n)}: {format_seconds(lo)}-{format_seconds(hi)}"
        for n, (lo, hi) in ex.tried.items()
    )


def _range(name: str) -> str:
    p = BY_NAME[name]
    unit = {"1": "", "x": "x", "s": "s"}.get(p.unit, f" {p.unit}")
    return f"{p.value(p.low):.3g}-{p.value(p.high):.3g}{unit}"


def score(fitted: Any, wide: tuple[str, ...]) -> float:
    """-2 log evidence (up to a constant) of a fit, in the Laplace approximation: `fit.fit`'s score of
    its prior choices less ln det of the posterior covariance, so that fits of different parameter
    sets compare (MacKay 2003, Sec. 28.2)."""
    r = np.asarray(fitted.after_log_error, dtype=float)
    s = float(fitted.noise_log_sd)
    total = float(np.sum(r**2) / s**2 + len(r) * np.log(s**2))
    for name in fitted.fitted:
        p = BY_NAME[name]
        sd = p.prior_sd * (p.widen if name in wide or name in fitted.widened else 1.0)
        total += ((p.u(fitted.values[name]) if p.log_scale else fitted.values[name]) - p.prior_mean) ** 2 / sd**2
        total += 2 * math.log(sd)
    if len(fitted.fitted):  # the Occam factor: a parameter the runs do not pin down costs what its prior spends
        total -= float(np.linalg.slogdet(np.asarray(fitted.u_covariance, dtype=float))[1])
    return total


def explaining_fit(
    cases: list[Any], measured: np.ndarray, max_parameters: int | None = None, check: bool = True
) -> Any:
    """The ordinary fit, or the fit of parameters chosen by need (forward selection, or the
    particles' explanation pruned by backward elimination) where its evidence is better (see the
    module docstring); `check`: as `fit.fit`'s (the measurements checked once, by the first fit)."""
    from shardwise.calibration.cases import Evaluator
    from shardwise.calibration.fit import fit
    from shardwise.calibration.together import side_by_side

    ev = Evaluator(cases)
    base = fit(cases, measured, max_parameters, ev=ev, check=check)
    # with few runs the table's order fits as many parameters as runs and explains any of them:
    # its misses cannot tell whether it took the parameters the runs need, so these are chosen by
    # need too and the fit with the better evidence kept
    few = 1 < len(measured) <= FEW_RUNS
    if np.max(np.abs(base.after_log_error)) <= FAR_LOG and not few:
        return base
    limit = len(measured) if max_parameters is None else min(max_parameters, len(measured))
    sensitive = [
        p.name for p in PARAMETERS if p.name in base.fitted or "sensitive" not in base.not_fitted.get(p.name, "")
    ]
    chosen: list[str] = []
    # forward selection starts from fitting nothing (the presets, the spread alone fitted): a
    # parameter must beat that by MIN_GAIN too, or runs that scatter about the presets fit one
    # that moves them by nothing (four runs +7/+3/-10/+5% took a pipeline-send scale, its interval
    # over the whole range: review 40)
    best = fit(cases, measured, only=(), ev=ev, check=False)
    best_score = empty_score = score(best, ())
    # ... and so must a fit from the particles or the table's order (review 42: a one-parameter fit
    # 0.1 better than fitting nothing could win there)
    enough = empty_score - MIN_GAIN
    while len(chosen) < limit:  # each round's fits side by side (`calibration.together`)
        tried = [name for name in sensitive if name not in chosen]
        sets = [tuple(n for n in NEUTRAL if n in (*chosen, name)) for name in tried]
        fits = side_by_side(ev, [_fitter(cases, measured, names) for names in sets])
        found = zip(tried, sets, fits, strict=True)
        trials = [(score(f, names), name, f) for name, names, f in found if name in f.fitted]
        if not trials:
            break
        s, name, f = min(trials, key=lambda t: t[0])
        if s > best_score - MIN_GAIN:
            break
        chosen.append(name)
        best, best_score = f, s
    # the particles' explanation: parameters the runs need together, which one at a time do not
    # lower the score (GEMMs faster at large micro-batches and slower at small ones: the GEMM scale
    # and the ramp, each alone worse than a link latency); backward elimination from all of them
    need, start = particle_need(cases, measured)
    names = tuple(sorted((n for n in sensitive if need[n] > MIN_GAIN), key=lambda n: -need[n])[:limit])
    names = tuple(n for n in NEUTRAL if n in names)
    f = fit(cases, measured, only=names, wide=names, start=start, ev=ev, check=False) if names else None
    s = score(f, names) if f is not None else math.inf
    while f is not None:
        if s < min(best_score, enough):
            best, best_score = f, s
        if len(names) == 1:
            break
        rests = [tuple(n for n in names if n != name) for name in names]
        fits = side_by_side(ev, [_fitter(cases, measured, rest, start) for rest in rests])
        drops = [(score(g, rest), rest, g) for rest, g in zip(rests, fits, strict=True)]
        s_drop, rest, g = min(drops, key=lambda t: t[0])
        if s_drop > s + MIN_GAIN:  # every parameter left is worth its MIN_GAIN
            if s_drop < min(best_score, enough):
                best, best_score = g, s_drop
            break
        names, f, s = rest, g, s_drop
    base_score = score(base, ())
    if base_score <= best_score and (base_score < enough or not base.fitted):
        return base
    # a parameter no run is sensitive to says so, not that the evidence did without it
    insensitive = {n: why for n, why in base.not_fitted.items() if "sensitive" in why and n not in best.fitted}
    return replace(best, not_fitted={**best.not_fitted, **insensitive})


def _fitter(cases: list[Any], measured: np.ndarray, names: tuple[str, ...], start: dict | None = None) -> Any:
    """A job for `together.side_by_side`: the fit of `names` with their wide priors (and `start`)."""
    from shardwise.calibration.fit import fit

    return lambda ev: fit(cases, measured, only=names, wide=names, start=start, ev=ev, check=False)


def particle_need(cases: list[Any], measured: np.ndarray) -> tuple[dict[str, float], dict[str, float]]:
    """What the posterior's particles (`calibration.particles`, fixed seed) say the runs need: per
    parameter, the particles' mean rise of -2 ln posterior density when that parameter alone
    returns to its prior mean (0: the runs do not need it moved); and the particles' mean values
    (a start for the fit)."""
    from shardwise.calibration import particles
    from shardwise.calibration.cases import Evaluator
    from shardwise.calibration.regret import SEED

    post = particles.posterior(cases, measured, seed=SEED)
    u, k = post.u, len(PARAMETERS)
    ablated = np.repeat(u[:, None, :], k, axis=1)
    ablated[:, np.arange(k), np.arange(k)] = [p.prior_mean for p in PARAMETERS]
    ablated = ablated.reshape(-1, k)
    ev, y = Evaluator(cases), np.asarray(measured, dtype=float)
    density = particles.log_likelihood(ev, y, ablated) + particles.log_prior(ablated)
    cost = np.mean(-2.0 * (density.reshape(len(u), k) - post.log_density[:, None]), axis=0)
    mean = u.mean(axis=0)
    return (
        {p.name: float(cost[j]) for j, p in enumerate(PARAMETERS)},
        {p.name: float(p.value(mean[j])) for j, p in enumerate(PARAMETERS)},
    )


# The parameters a serving step reads far more than a training step does: decode streams the
# weights and the KV cache from HBM (memory_bandwidth_scale) and waits on small all-reduces
# inside a server (intra_node_bandwidth_scale, link_latency_scale).
WHY_SERVING = {
    "memory_bandwidth_scale": "decode streams the weights and the KV cache",
    "intra_node_bandwidth_scale": "every decode step waits on small all-reduces",
    "link_latency_scale": "every decode step waits on small all-reduces",
}
# How far from its prior's centre (in prior standard deviations) a fitted value is worth a word
FAR_PRIOR_SDS = 2.0


def untested_for_serving(cal: Any) -> list[str]:
    """Notes for `serve --calibration` with a calibration fitted on training runs alone: each
    serving-sensitive parameter it moved more than FAR_PRIOR_SDS of its prior from neutral. A
    training step reads these little, so the runs may have set them to explain something else (a
    stack's slow element-wise kernels as a slow HBM), and decode then follows them untested."""
    if cal is None or cal.serving_runs:
        return []
    notes = []
    for name in WHY_SERVING:
        if name not in cal.fit.fitted:
            continue
        p, value = BY_NAME[name], float(cal.fit.values[name])
        sds = abs(p.u(value) - p.prior_mean) / p.prior_sd
        if sds > FAR_PRIOR_SDS:
            notes.append(
                f"{cal.path} was fitted on training runs only and sets {p.description.removesuffix(' (x)')} to "
                f"x{value:.2f}, {sds:.1f} prior sd from the datasheet model; serving reads it directly "
                f"({WHY_SERVING[name]}), untested: calibrate with serving runs too"
            )
    return notes
