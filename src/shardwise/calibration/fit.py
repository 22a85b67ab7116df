"""Fitting the calibration parameters to measured runs, and prediction intervals.

The model is fitted in log space: a run's error is e_i = ln(predicted_i / measured_i), assumed
normal with a common spread sigma (how far this cost model misses one stack's runs once its
parameters are right). The fit is a maximum a posteriori estimate: minimise

    sum_i (e_i / sigma)^2 + sum_j ((u_j - prior_j) / prior_sd_j)^2

over the fitted parameters u (scipy.optimize.least_squares, bounded trust region, started at the
prior mean; with widened priors also 2 prior sds toward slower hardware, and given `start` values
also from those (the particles' mean, `calibration.explain`); the best-scoring optimum is kept,
so with several explanations of the runs the fit takes the one they support best). sigma
itself has a scaled inverse chi-squared prior centred on `NOISE_LOG_SD` with `NOISE_PRIOR_RUNS`
pseudo-runs, so one or two runs cannot claim a spread of zero:

    sigma^2 = (sum_i e_i^2 + NOISE_PRIOR_RUNS NOISE_LOG_SD^2) / (n - k + NOISE_PRIOR_RUNS)

The parameters' uncertainty is the Laplace approximation of the posterior at the optimum,
Sigma_u = (J^T J / sigma^2 + diag(1 / prior_sd^2))^-1 (J: d e / d u), and a new prediction's 80%
interval is exp(+-1.2816 s) around it with s^2 = g^T Sigma_u g + sigma^2 (g: d ln t / d u there),
or every parameter's g^T Sigma_all g where larger (`calibration.unmeasured`: what the runs did not fit).

Speed (`calibration.cases`): runs are stacked into one array-valued Scenario per (model, hardware, precision) group and
the parameter sets (the point and one step per parameter, for the Jacobian) into a second axis,
so one evaluation of the cost model prices every run at every set; serving measurements of one
scenario are stacked the same way (their workloads' lengths and batches as arrays). A fit prices
each point once (the solves and scores that return to a point read it back), and the solves that
do not wait on one another (from each start; with each widened prior) run side by side, their
evaluations priced in one call (`calibration.together`: the same solves as one after another).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardwise.calibration.cases import Case, Evaluator, fd_step, log_step_and_gradient, parameter_sets
from shardwise.calibration.parameters import BY_NAME, NEUTRAL, PARAMETERS, WIDEN, ceilings
from shardwise.calibration.spreads import NOISE_LOG_SD, NOISE_PRIOR_RUNS, Z80
from shardwise.calibration.together import side_by_side
from shardwise.errors import SpecError

# A parameter is fitted only where some run moves by at least this much (log) when the parameter
# moves by one prior standard deviation.
MIN_SENSITIVITY = 0.002
CONFLICT_Z = 1.0  # a fitted parameter this many prior sds from its prior: try a wider prior
# ... and its prior is widened `Parameter.widen` x (WIDEN, 4, unless it has no wide component)
# ... given at least this many runs: one run far from the prior is as likely an odd run as an odd
# stack, and a widened prior would follow it everywhere (on the dev split, one run 18% off moved
# every other prediction of its stack by 19%)
MIN_RUNS_TO_WIDEN = 2
# The two-component prior's weight on the wide component, where a parameter's data are not in
# (its variance, moment-matched: prior_sd^2 (1 - w + w WIDEN^2)); `calibration.regret` draws from it.
WIDE_SHARE = 0.25


@dataclass(frozen=True)
class Fit:
    """What `fit` found."""

    fitted: tuple[str, ...]  # the parameters fitted, in PARAMETERS order
    values: dict[str, float]  # every parameter (prior value where not fitted)
    u_covariance: np.ndarray  # posterior covariance of the fitted parameters in u space
    noise_log_sd: float
    not_fitted: dict[str, str] = field(default_factory=dict)  # parameter -> why
    before_log_error: np.ndarray = field(default_factory=lambda: np.zeros(0))  # ln(pred / measured)
    after_log_error: np.ndarray = field(default_factory=lambda: np.zeros(0))
    widened: tuple[str, ...] = ()  # parameters whose prior was widened (the runs conflict with it)
    dof: float = float("inf")  # the spread's degrees of freedom: runs - fitted parameters + the prior's runs
    # the Laplace covariance of every parameter (PARAMETERS order, u space) at the fitted values,
    # the unfitted ones under their two-component prior's variance: what the runs say about a
    # parameter they did not fit (one confounded with a fitted one, e.g. the network's scale with
    # its exponent when every run spans one server count). None: not computed (an older file).
    full_covariance: np.ndarray | None = None
    # the scales whose top the runs' hardware set below their range's (`parameters.ceilings`: HBM
    # at the datasheet), in value space; `upper` reads them
    ceilings: dict[str, float] = field(default_factory=dict)

    def upper(self, name: str) -> float:
        """The top of the parameter's range in this fit, in u space (its own, or the hardware's ceiling)."""
        p = BY_NAME[name]
        return min(p.high, p.u(self.ceilings[name])) if name in self.ceilings else p.high

    def u_sd(self, name: str) -> float:
        if name not in self.fitted:
            return BY_NAME[name].prior_sd
        j = self.fitted.index(name)
        return float(np.sqrt(self.u_covariance[j, j]))

    def interval80(self, name: str) -> tuple[float, float]:
        """The parameter's 80% posterior interval (the prior's where not fitted)."""
        p = BY_NAME[name]
        u = p.u(self.values[name])
        lo, hi = u - Z80 * self.u_sd(name), u + Z80 * self.u_sd(name)
        return float(p.value(max(lo, p.low))), float(p.value(min(hi, self.upper(name))))


def fit(
    scenarios: list[Case],
    measured_step_s: np.ndarray,
    max_parameters: int | None = None,
    only: tuple[str, ...] | None = None,
    wide: tuple[str, ...] = (),
    start: dict[str, float] | None = None,
    ev: Any = None,
    check: bool = True,
) -> Fit:
    """Fit the calibration parameters to runs (see the module docstring); the priors of `wide` are
    widened WIDEN x from the start (`calibration.explain` chooses them); `start`: parameter values
    the solver also starts from (a particle of the posterior, `calibration.explain`), the better
    scoring optimum kept; `ev`: the evaluator of `scenarios` to price them with (default: a new
    `Evaluator`; `calibration.together` passes one that prices several fits at once); `check`: refuse
    measurements `shardwise calibrate` refuses (`check_measurements`: not one per run, not positive
    and finite, or so far from the model that no parameter within its physical range explains them:
    a unit slip), off for callers that checked them already."""
    from scipy.optimize import least_squares

    measured = _measurements(scenarios, measured_step_s)
    ev = Evaluator(scenarios) if ev is None else ev
    target = np.log(measured)
    candidates = tuple(p.name for p in PARAMETERS if only is None or p.name in only)
    u0 = np.array([BY_NAME[n].prior_mean for n in candidates])
    logt0, grad0, far = _effects_at_prior(ev, candidates, u0)
    before = logt0 - target
    if check:
        from shardwise.calibration.far import refuse_unexplained

        refuse_unexplained(scenarios, measured, np.exp(logt0))
    not_fitted: dict[str, str] = {}
    limit = len(measured) if max_parameters is None else min(max_parameters, len(measured))
    chosen: list[str] = []
    for j, name in enumerate(candidates):
        effect = max(float(np.max(np.abs(grad0[:, j]))) * BY_NAME[name].prior_sd, far[j])
        if effect < MIN_SENSITIVITY:
            not_fitted[name] = "no run is sensitive to it" + _why_insensitive(name)
        elif len(chosen) >= limit:
            not_fitted[name] = (
                f"at most {limit} parameter(s) asked (--max-params), taken by those above"
                if limit < len(measured)
                else f"{len(measured)} run(s) fit at most {limit} parameter(s), taken by those above"
            )
        else:
            chosen.append(name)
    names = tuple(chosen)
    fixed = {n: NEUTRAL[n] for n in candidates if n not in names}
    prior_mu = np.array([BY_NAME[n].prior_mean for n in names])
    prior_sd = np.array([BY_NAME[n].prior_sd * (BY_NAME[n].widen if n in wide else 1.0) for n in names])
    lo = np.array([BY_NAME[n].low for n in names])
    # the top of each range, or the runs' hardware's below it (HBM at most the datasheet's)
    tops = ceilings([getattr(c, "scenario", c).cluster for c in scenarios])
    hi = np.array([min(BY_NAME[n].high, BY_NAME[n].u(tops[n])) if n in tops else BY_NAME[n].high for n in names])
    # every point priced in this fit (each solve starts where an earlier one ended or started,
    # and the scores re-read optima): a point is priced once
    cache: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}

    def evaluate(u: np.ndarray, on: Any = ev) -> tuple[np.ndarray, np.ndarray]:
        """ln t and its gradient at u, priced by `on` (the fit's evaluator, or the batch of the
        solves run side by side); the cache is shared by the threads (a point priced twice at
        worst, to the same numbers)."""
        key = u.tobytes()
        if key not in cache:
            cache[key] = log_step_and_gradient(on, names, u, fixed)
        return cache[key]

    n, k = len(measured), len(names)

    def solve(
        prior_sd: np.ndarray, u0: np.ndarray | None = None, sigma0: float = NOISE_LOG_SD, on: Any = ev
    ) -> tuple[np.ndarray, float]:
        sigma, u = sigma0, (prior_mu.copy() if u0 is None else u0)
        for _ in range(2):  # fit at the prior spread, then at the spread the fit implies
            s = sigma

            def residuals(x: np.ndarray, s: float = s) -> np.ndarray:
                logt, _ = evaluate(x, on)
                return np.concatenate([(logt - target) / s, (x - prior_mu) / prior_sd])

            def jacobian(x: np.ndarray, s: float = s) -> np.ndarray:
                _, g = evaluate(x, on)
                return np.vstack([g / s, np.diag(1.0 / prior_sd)])

            # inside the bounds: a trust region started on a bound (overheads at 0) crawls
            start = np.clip(u, lo + 0.2 * prior_sd, hi - 1e-3 * prior_sd)
            res = least_squares(
                residuals, start, jac=jacobian, bounds=(lo, hi), x_scale=prior_sd, method="trf", xtol=1e-5, ftol=1e-5
            )
            u = res.x
            logt, _ = evaluate(u, on)
            sigma = _spread(logt - target, k)
            if abs(sigma / s - 1.0) < 0.05:  # the spread the fit implies is the one it assumed
                break
        return u, sigma

    def score(u: np.ndarray, prior_sd: np.ndarray) -> float:
        """-2 log posterior (up to a constant), the spread re-estimated: how well a prior explains
        the runs, to choose between the narrow prior and a widened one."""
        logt, _ = evaluate(u)
        r = logt - target
        sigma = _spread(r, k)
        return float(
            np.sum(r**2) / sigma**2
            + n * np.log(sigma**2)
            + np.sum(((u - prior_mu) / prior_sd) ** 2)
            + 2 * np.sum(np.log(prior_sd))
        )

    u = prior_mu.copy()
    widened: list[str] = [n for n in names if n in wide and BY_NAME[n].widen > 1.0]
    if k:
        # the solves that do not wait on one another run side by side (`calibration.together`:
        # each the same solve as alone, their evaluations priced in one call), then are compared
        # in order: the narrow prior's from the prior mean; with widened priors also from 2 sd
        # toward slower hardware (a wide prior's optimum may lie where a hidden cost shows); given
        # `start`, from there (another mode of the posterior: the runs may have several explanations)
        starts: list[np.ndarray | None] = [None]
        if widened:
            toward = np.array([2.0 * np.sign(fd_step(n)) if n in wide else 0.0 for n in names])
            starts.append(np.clip(prior_mu + toward * prior_sd, lo, hi))
        if start is not None:
            u3 = np.array([BY_NAME[n].u(start[n]) if n in start else prior_mu[j] for j, n in enumerate(names)])
            starts.append(np.clip(u3, lo, hi))
        solved = side_by_side(ev, [lambda on, u0=u0: solve(prior_sd, u0, NOISE_LOG_SD, on) for u0 in starts])
        u, sigma_narrow = solved[0]
        for u2, s2 in solved[1:]:
            if score(u2, prior_sd) < score(u, prior_sd):
                u, sigma_narrow = u2, s2
        # Prior-data conflict: runs that pull a parameter more than CONFLICT_Z prior sds away come
        # from a stack unlike the public ones; its prior is widened WIDEN x and the fit repeated
        # (a two-component prior: the public stacks' narrow one, or a wide one).
        # When a parameter lands more than CONFLICT_Z prior sds out, each parameter's prior in
        # turn is widened WIDEN x (a two-component prior: the public stacks' narrow one, or a
        # wide one) and the best-scoring choice kept, the narrow prior included. One at a time:
        # parameters that trade off (GEMM against HBM) must not wander together. The k solves,
        # each warm from the narrow fit, run side by side.
        if not widened and n >= MIN_RUNS_TO_WIDEN and np.any(np.abs(u - prior_mu) > CONFLICT_Z * prior_sd):
            can = [j for j in range(k) if BY_NAME[names[j]].widen > 1.0]  # a parameter with a wide component
            wides = [prior_sd * np.where(np.arange(k) == j, BY_NAME[names[j]].widen, 1.0) for j in can]
            tries = side_by_side(ev, [lambda on, w=w: solve(w, u, sigma_narrow, on) for w in wides])
            best = (score(u, prior_sd), u, prior_sd, -1)
            for j, w, (uj, _) in zip(can, wides, tries, strict=True):
                best = min(best, (score(uj, w), uj, w, j), key=lambda b: b[0])
            _, u, prior_sd, j = best
            widened = [names[j]] if j >= 0 else []
    values = {p.name: float(NEUTRAL[p.name]) for p in PARAMETERS}
    values.update({name: float(BY_NAME[name].value(u[j])) for j, name in enumerate(names)})
    # an overhead fitted at its bound (0 s) is fixed there: a symmetric Gaussian around a bound
    # would put half its weight on negative times. "At" the bound to the solver's tolerance, which
    # is relative to the parameter's scale (a millionth of its prior spread), not an absolute 1e-9
    at_bound = [j for j, name in enumerate(names) if not BY_NAME[name].log_scale and u[j] < 1e-6 * prior_sd[j]]
    for j in at_bound:
        values[names[j]] = 0.0
        bound = "0 s" if BY_NAME[names[j]].unit == "s" else "0"
        not_fitted[names[j]] = f"fitted at its bound ({bound}): fixed there"
    keep = [j for j in range(k) if j not in at_bound]
    logt, g = evaluate(u) if k else (logt0, np.zeros((n, 0)))
    after = logt - target
    names, g, prior_kept = tuple(names[j] for j in keep), g[:, keep], prior_sd[keep] if k else prior_sd
    k = len(names)
    sigma = _spread(after, k)
    precision = g.T @ g / sigma**2 + np.diag(1.0 / prior_kept**2) if k else np.zeros((0, 0))
    cov = np.linalg.inv(precision) if k else np.zeros((0, 0))
    prior_used = dict(zip(names, prior_kept, strict=True)) if k else {}
    full = _full_covariance(ev, values, prior_used, sigma)
    dof = n - k + NOISE_PRIOR_RUNS
    return Fit(names, values, cov, sigma, not_fitted, before, after, tuple(widened), dof, full, tops)


def _full_covariance(ev: Evaluator, values: dict[str, float], prior_used: dict[str, float], sigma: float) -> np.ndarray:
    """(G^T G / sigma^2 + diag(1 / prior variance))^-1 over every parameter at the fitted values, G
    = d ln t / d u of the runs; a fitted parameter's prior is the one its fit used, an unfitted one's
    the two-component prior's variance (see `Fit.full_covariance`)."""
    names = tuple(p.name for p in PARAMETERS)
    u = np.array([BY_NAME[n].u(values[n]) for n in names])
    _, g = log_step_and_gradient(ev, names, u, {})
    mixture = {n: 1 - WIDE_SHARE + WIDE_SHARE * BY_NAME[n].widen ** 2 for n in names}
    var = np.array([prior_used[n] ** 2 if n in prior_used else BY_NAME[n].prior_sd ** 2 * mixture[n] for n in names])
    g = np.where(np.isfinite(g), g, 0.0)
    return np.linalg.inv(g.T @ g / sigma**2 + np.diag(1.0 / var))


def _effects_at_prior(ev: Evaluator, names: tuple[str, ...], u0: np.ndarray) -> tuple[np.ndarray, ...]:
    """(ln t at u0, d ln t / d u there, each parameter's far effect), priced in one call: the sets
    of `log_step_and_gradient` and those of the far effect, which moves each parameter WIDEN prior
    sds toward slower hardware (bounded) and takes its largest effect on a run's ln t, per prior
    sd: a cost hidden behind another at the prior (gradient 0, e.g. data-parallel traffic
    overlapped with compute) still makes the parameter one the runs can fit."""
    k = len(names)
    sets, steps = parameter_sets(names, u0, {})
    far = np.repeat(u0[None, :], k, axis=0)
    for j, n in enumerate(names):
        p = BY_NAME[n]
        far[j, j] = float(np.clip(u0[j] + np.sign(fd_step(n)) * WIDEN * p.prior_sd, p.low, p.high))
    both = {n: np.concatenate([sets[n], BY_NAME[n].value(far[:, j])]) for j, n in enumerate(names)}
    logt = np.log(ev.step_s(both))
    grad = ((logt[1 : k + 1] - logt[0]) / steps[:, None]).T
    moved = np.max(np.abs(logt[k + 1 :] - logt[0][None, :]), axis=1) / WIDEN
    return logt[0], grad, moved


def _measurements(scenarios: list[Case], measured_step_s: Any) -> np.ndarray:
    """The measured values as an array, one per run, each positive and finite (else one SpecError)."""
    try:
        measured = np.asarray(measured_step_s, dtype=float).reshape(-1)
    except (TypeError, ValueError):
        raise SpecError(
            f"calibrate: measured times {measured_step_s!r} are not numbers; give one time in seconds per run"
        ) from None
    if len(measured) == 0 or len(scenarios) == 0:
        raise SpecError("calibrate: give at least one run with its measured step time")
    if len(scenarios) != len(measured):
        raise SpecError(
            f"calibrate: {len(measured)} measured value(s) for {len(scenarios)} run(s); "
            "give one per run, in the runs' order"
        )
    bad = np.flatnonzero(~np.isfinite(measured) | (measured <= 0))
    if bad.size:
        i = int(bad[0])
        raise SpecError(
            f"calibrate: run {i + 1}'s measured value {float(measured[i])!r} is not allowed; "
            "give a positive, finite time in seconds (tokens/s per GPU for a serving run)"
        )
    return measured


def _spread(errors: np.ndarray, k: int) -> float:
    n = len(errors)
    return float(np.sqrt((np.sum(errors**2) + NOISE_PRIOR_RUNS * NOISE_LOG_SD**2) / max(n - k + NOISE_PRIOR_RUNS, 1.0)))


def _why_insensitive(name: str) -> str:
    return {
        "inter_node_bandwidth_scale": " (no run crosses servers, or its traffic there is hidden)",
        "intra_node_bandwidth_scale": " (no run communicates inside a server on its critical path)",
        "inter_node_scaling_exponent": " (no run spans more than 2 servers, or its traffic there is hidden)",
        "micro_batch_overhead_s": "",
        "gemm_half_rate_tokens": " (the runs' micro-batches are all of one size, or their GEMMs are a small share)",
        "inter_node_all_to_all_scale": " (no run's all-to-all, an MoE dispatch or Ulysses' exchange, crosses servers)",
        "inter_node_p2p_scale": " (no run's pipeline sends cross servers, or they are a small share of its step)",
    }.get(name, "")
