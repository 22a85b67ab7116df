"""Which runs to measure next: the layouts whose measurement most reduces the expected regret of
the planner's pick (`shardwise calibrate --suggest N`).

The parameters' posterior is a set of T particles u_t (`calibration.parameters`, u space, as
deviations from the calibrated values), equally weighted:

- given the runs the calibration was fitted on: `calibration.particles`, the two-component prior
  moved to the posterior by tempered sequential Monte Carlo. It keeps every explanation of the
  runs, not only the fit's: a ZeRO-3 step slower than predicted is slow GEMMs, or a slow network
  whose traffic the prediction hides behind compute (at the fit's optimum the network then has
  no gradient, so the Laplace posterior around it, or any update linearised there, cannot see it);
- without a calibration: the draws of the two-component prior (`regret.draws`);
- with a calibration but not its runs (`--calibration FILE`): the draws of its Laplace posterior
  (`regret.draws`), which hold only the fit's explanation.

Each particle prices the pool of plans that could win (`regret.pool`) in closed form x the
planner's ratio (`regret.confirmed_ratio`): L_t(p) = ln cost. A particle taken as the truth adds
each plan's own residual r (`regret`: tau, what the calibration leaves unexplained, shared by one
layout shape), and measuring plan m there shows y_tm = L_t(m) + r_tm + e, e ~ N(0, sigma^2),
sigma the calibration's spread (`spreads.NOISE_LOG_SD` without one).

The preposterior expected regret of measuring M: for each particle s taken as the truth, with
its simulated measurements y_sM, the particles are re-weighted by their likelihood,

    w_st ~ prod_{m in M} N(y_sm; L_t(m), sigma^2 + tau^2),    w_ss = 0 (leave-self-out),

the re-calibrated planner picks argmin_p sum_t w_st L_t(p) (the posterior mean log cost), and the
regret is truth s's, R[s, pick_s] (`regret`); the mean over s is the expected regret after M. A
particle never weighs its own measurement: otherwise every candidate would look like it settles
the truth exactly. Runs are chosen greedily: each step adds the plan whose measurement brings
that expected regret lowest (ties, e.g. when the pick is already certain: the run whose outcome
is least predictable, its predictive sd under the particles plus sigma). What a run settles is
reported as how much it narrows each parameter's posterior sd (the particles' weighted sd, mean
over the truths).

The greedy choice of a set is the usual approximation of the optimal design (Krause & Guestrin
2005 for its guarantees under submodularity; regret reduction is not always submodular, so it
is a heuristic here). Re-weighting particles by a simulated measurement is importance sampling
of the preposterior (Müller 1999, "Simulation-based optimal design"); it is as good as the
particles cover the posterior after the measurement.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from shardwise.calibration import particles
from shardwise.calibration.parameters import PARAMETERS
from shardwise.calibration.regret import SAMPLES, SEED, Draws, Regret, costs, draws, regret_of, residuals
from shardwise.calibration.spreads import NOISE_LOG_SD

if TYPE_CHECKING:
    from shardwise.analyses.planner import PlanSearch
    from shardwise.calibration.fit import Fit


@dataclass(frozen=True)
class Suggestion:
    """One run to measure, in the order chosen."""

    plan: int  # index into the search
    step_time_s: float  # its calibrated prediction
    spread_log_sd: float  # how unpredictable its time is now (log sd, parameters and noise)
    regret_after: float  # expected regret of the pick once this and the earlier suggestions are measured
    pick_changes: float  # chance the re-calibrated planner picks another plan than today's
    narrows: dict[str, float]  # parameter -> share by which its posterior sd shrinks


@dataclass(frozen=True)
class Suggestions:
    regret: Regret  # today's pick's
    runs: tuple[Suggestion, ...]
    noise_log_sd: float


def suggest(
    search: PlanSearch,
    fit: Fit | None,
    n: int,
    measured: tuple[int, ...] = (),
    samples: int = SAMPLES,
    seed: int = SEED,
    runs: tuple[list[Any], np.ndarray] | None = None,
) -> Suggestions:
    """The n runs to measure next (see the module docstring); `search` is priced on the cluster
    calibrated by `fit` (None: the uncalibrated presets); `measured`: plans (indices into the
    search) already measured, never suggested again; `runs`: the runs `fit` was fitted on (their
    cases and measured figures), whose likelihood weighs the particles (None: the fit's Laplace
    posterior stands in for it)."""
    d = draws(search, fit, samples, seed)
    sigma = float(fit.noise_log_sd) if fit is not None and fit.fitted else NOISE_LOG_SD
    if runs is not None and len(runs[1]):
        post = particles.posterior(list(runs[0]), np.asarray(runs[1], dtype=float), seed=seed)
        dev = post.u - d.unc.center  # deviations from the calibrated values
        model = costs(search, d.plans, dev, d.unc) * d.ratio
        r = residuals(search, d.plans, len(dev), d.residual_log_sd, seed)
        d = Draws(d.plans, dev, model * np.exp(r), d.unc, d.ratio, d.residual_log_sd)
    else:
        r = residuals(search, d.plans, len(d.dev), d.residual_log_sd, seed)
        model = d.cost / np.exp(r)
    logm = np.log(model)  # (T, P): each particle's model cost, its per-plan residual left out
    rng = np.random.default_rng(seed + 1)
    y = np.log(d.cost) + rng.normal(0.0, sigma, d.cost.shape)  # what measuring each plan would show
    # a measurement departs from the particle's model cost by the noise and the plan's own residual
    sigma = float(np.hypot(sigma, d.residual_log_sd))
    rel = d.relative
    t = len(d.dev)
    logw = np.zeros((t, t))
    np.fill_diagonal(logw, -np.inf)  # leave-self-out: a truth does not weigh itself
    chosen: list[int] = []
    runs_out = []
    for _ in range(min(n, len(d.plans))):
        best: tuple[float, float, int] | None = None
        before = _normalised(logw)
        for m in range(len(d.plans)):
            if m in chosen or int(d.plans[m]) in measured:
                continue
            after, _, _ = _after(logw + _log_lik(y[:, m], logm[:, m], sigma), logm, rel)
            spread = float(np.sqrt(np.mean(_weighted_var(before, logm[:, m])) + sigma**2))
            key = (round(after, 4), -spread, m)
            if best is None or key < best:
                best = key  # type: ignore[assignment]
        if best is None:  # every contending plan is measured
            break
        m = best[2]
        chosen.append(m)
        logw = logw + _log_lik(y[:, m], logm[:, m], sigma)
        after, changes, w = _after(logw, logm, rel)
        sd0 = np.sqrt(np.mean(_weighted_var(before, d.dev), axis=0))
        sd1 = np.sqrt(np.mean(_weighted_var(w, d.dev), axis=0))
        narrows = {p.name: float(1 - sd1[j] / sd0[j]) for j, p in enumerate(PARAMETERS) if sd0[j] > 1e-12}
        runs_out.append(
            Suggestion(
                int(d.plans[m]),
                _calibrated(search, d, m) / _gpus(search, int(d.plans[m])),
                -best[1],
                after,
                changes,
                narrows,
            )
        )
    return Suggestions(regret_of(d), tuple(runs_out), sigma)


KEY = ("gpus", "tp", "pp", "dp", "cp", "ep", "micro_batch", "vpp", "recompute", "zero_stage", "sequence_parallel")


def measured_plans(search: PlanSearch, scenarios: list[Any]) -> tuple[int, ...]:
    """The search's plans that these measured runs ran (same GPUs, degrees, micro-batch, virtual
    stages, recomputation, ZeRO stage and sequence parallelism)."""
    keys = np.stack([np.asarray(search.columns[k], dtype=np.int64) for k in KEY], axis=1)
    out = []
    for scn in scenarios:
        p = scn.plan
        want = [int(scn.cluster.num_gpus), *(int(np.asarray(getattr(p, k))) for k in KEY[1:8])]
        want += [int(np.asarray(p.recompute)), int(p.zero_stage), int(bool(np.asarray(p.sequence_parallel)))]
        out += np.flatnonzero(np.all(keys == np.array(want), axis=1)).tolist()
    return tuple(sorted(set(out)))


def _gpus(search: PlanSearch, i: int) -> float:
    return float(search.columns["gpus"][i]) if search.space.objective != "time" else 1.0


def _calibrated(search: PlanSearch, d: Draws, m: int) -> float:
    """Pool plan m's cost at the calibrated values, as the planner prices it."""
    return float(costs(search, d.plans[m : m + 1], np.zeros((1, len(d.unc.names))), d.unc)[0, 0] * d.ratio[m])


def _log_lik(y: np.ndarray, logm: np.ndarray, sigma: float) -> np.ndarray:
    """(S, T): ln N(y_s; logm_t, sigma^2) up to a constant, measurement y of truth s under particle t."""
    return -0.5 * ((y[:, None] - logm[None, :]) / sigma) ** 2


def _normalised(logw: np.ndarray) -> np.ndarray:
    w = np.exp(logw - np.max(logw, axis=1, keepdims=True))
    return w / w.sum(axis=1, keepdims=True)


def _weighted_var(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Per truth (row of w), the weighted variance of x (T,) or of each column of x (T, k)."""
    mean = w @ x
    return np.maximum(w @ (x * x) - mean * mean, 0.0)


def _after(logw: np.ndarray, logm: np.ndarray, rel: np.ndarray) -> tuple[float, float, np.ndarray]:
    """(expected regret of the re-calibrated pick, chance it is not today's pick, the weights):
    each truth's pick is the plan of least posterior-mean log cost under its re-weighted particles."""
    w = _normalised(logw)
    picks = np.argmin(w @ logm, axis=1)
    regret = rel[np.arange(len(picks)), picks]
    return float(regret.mean()), float(np.mean(picks != 0)), w
