"""Which runs to measure next: the layouts whose measurement most reduces the expected regret of
the planner's pick (`shardwise calibrate --suggest N`).

Notation: u the calibration's parameters (`calibration.parameters`, in u space) as deviations
from the calibrated values, Sigma their covariance (`regret.Uncertainty`), L_p(u) = ln cost of
plan p, g_p = d L_p / d u (a secant over +-1 sd of each parameter), sigma the spread of a
measured run around the calibrated model (the fit's, or `spreads.NOISE_LOG_SD` without one).

Measuring the runs M gives y_M = L_M(u_true) + r_M + e, e ~ N(0, sigma^2 I), r the plans' own
residuals (`regret`: tau, what the calibration leaves unexplained; their variance joins sigma^2
below). The re-calibrated planner still ranks by the model, so a residual is regret that no run
removes: it sets the floor the suggestions work above. Re-calibrating on them moves
the parameters, to first order (the Kalman update of the Laplace posterior), by

    delta = K (y_M - L_M(0)),   K = Sigma H^T (H Sigma H^T + sigma^2 I)^-1,   H = g_M,

and the planner then picks argmin_p L_p(0) + g_p delta. The preposterior expected regret of
measuring M is the mean over draws s of the parameters (`regret.draws`: the truth of draw s is
priced by the full cost model, not linearised) of R[s, pick_s(M)], with y_M drawn from draw s's
costs and the measurement noise. Runs are chosen greedily: each step adds the plan whose
measurement brings that expected regret lowest (ties, e.g. when the pick is already certain: the
run whose outcome is least predictable, sqrt(g Sigma g^T)); the covariance then shrinks to
Sigma - K H Sigma. What a run settles is reported as how much it narrows each parameter's
posterior sd.

The greedy choice of a set is the usual approximation of the optimal design (Krause & Guestrin
2005 for its guarantees under submodularity; regret reduction is not always submodular, so it
is a heuristic here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from shardwise.calibration.parameters import PARAMETERS
from shardwise.calibration.regret import SAMPLES, SEED, Draws, Regret, costs, draws, regret_of
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


def gradients(search: PlanSearch, d: Draws) -> np.ndarray:
    """g (P, k): d ln cost / d u of each pool plan, a secant over +-1 sd of each parameter."""
    k = len(d.unc.names)
    moves = []
    for j, s in enumerate(d.unc.sd):
        for sign in (-1.0, 1.0):
            m = np.zeros(k)
            m[j] = sign * s
            moves.append(m)
    moved = d.unc.bounded(np.array(moves))
    logc = np.log(costs(search, d.plans, moved, d.unc))
    g = np.zeros((len(d.plans), k))
    for j in range(k):
        lo, hi = moved[2 * j, j], moved[2 * j + 1, j]
        if hi - lo > 0:
            g[:, j] = (logc[2 * j + 1] - logc[2 * j]) / (hi - lo)
    return g


def suggest(
    search: PlanSearch,
    fit: Fit | None,
    n: int,
    measured: tuple[int, ...] = (),
    samples: int = SAMPLES,
    seed: int = SEED,
) -> Suggestions:
    """The n runs to measure next (see the module docstring); `search` is priced on the cluster
    calibrated by `fit` (None: the uncalibrated presets); `measured`: plans (indices into the
    search) already measured, never suggested again."""
    d = draws(search, fit, samples, seed)
    sigma = float(fit.noise_log_sd) if fit is not None and fit.fitted else NOISE_LOG_SD
    g = gradients(search, d)
    logc = np.log(d.cost)  # (S, P): the truth of each draw, its per-plan residual included
    base = np.log(costs(search, d.plans, np.zeros((1, len(d.unc.names))), d.unc)[0] * d.ratio)  # L(0)
    rng = np.random.default_rng(seed + 1)
    y = logc + rng.normal(0.0, sigma, logc.shape)  # what measuring each plan would show, per draw
    # a measurement departs from L(u) by the noise and by the plan's own residual
    sigma = float(np.hypot(sigma, d.residual_log_sd))
    rel = d.relative
    sigma_u = d.unc.mixture_covariance
    chosen: list[int] = []
    runs = []
    for _ in range(min(n, len(d.plans))):
        best: tuple[float, float, int] | None = None
        for m in range(len(d.plans)):
            if m in chosen or int(d.plans[m]) in measured:
                continue
            after, _, _ = _after([*chosen, m], g, sigma_u, sigma, y, base, rel)
            spread = float(np.sqrt(g[m] @ _posterior(chosen, g, sigma_u, sigma) @ g[m] + sigma**2))
            key = (round(after, 4), -spread, m)
            if best is None or key < best:
                best = key  # type: ignore[assignment]
        if best is None:  # every contending plan is measured
            break
        m = best[2]
        before_cov = _posterior(chosen, g, sigma_u, sigma)
        chosen.append(m)
        after, changes, after_cov = _after(chosen, g, sigma_u, sigma, y, base, rel)
        sd0, sd1 = np.sqrt(np.diag(before_cov)), np.sqrt(np.diag(after_cov))
        narrows = {p.name: float(1 - sd1[j] / sd0[j]) for j, p in enumerate(PARAMETERS) if sd0[j] > 0}
        runs.append(
            Suggestion(
                int(d.plans[m]),
                float(np.exp(base[m])) / _gpus(search, int(d.plans[m])),
                -best[1],
                after,
                changes,
                narrows,
            )
        )
    return Suggestions(regret_of(d), tuple(runs), sigma)


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


def _posterior(chosen: list[int], g: np.ndarray, cov: np.ndarray, sigma: float) -> np.ndarray:
    if not chosen:
        return cov
    h = g[chosen]
    s = h @ cov @ h.T + sigma**2 * np.eye(len(chosen))
    k = cov @ h.T @ np.linalg.inv(s)
    return cov - k @ h @ cov


def _after(
    chosen: list[int],
    g: np.ndarray,
    cov: np.ndarray,
    sigma: float,
    y: np.ndarray,
    base: np.ndarray,
    rel: np.ndarray,
) -> tuple[float, float, np.ndarray]:
    """(expected regret once `chosen` are measured, chance the pick changes, posterior covariance)."""
    h = g[chosen]
    s = h @ cov @ h.T + sigma**2 * np.eye(len(chosen))
    k = cov @ h.T @ np.linalg.inv(s)  # (k, |M|)
    delta = (y[:, chosen] - base[chosen]) @ k.T  # (S, k)
    picks = np.argmin(base[None, :] + delta @ g.T, axis=1)
    regret = rel[np.arange(len(picks)), picks]
    return float(regret.mean()), float(np.mean(picks != 0)), cov - k @ h @ cov
