"""The calibration's posterior as particles: every explanation of the runs measured so far, not
only the one the fit found.

The fit (`calibration.fit`) finds one optimum and its Laplace posterior. Runs can have several
explanations far apart: a ZeRO-3 step 33% slower than predicted is slow GEMMs, or a slow network
whose traffic the prediction hid behind compute. At the fit's optimum the other explanation has
no gradient (the network's effect is hidden), so the Laplace posterior, and anything linearised
around it, cannot represent it. Particles drawn from the prior and moved to the posterior keep it.

Target: the fit's own model. The prior is the two-component prior every parameter starts under
without a calibration (`regret.uncertainty(None)`: per parameter the public stacks' narrow prior,
or with probability `fit.WIDE_SHARE` one `Parameter.widen` x wider; truncated to its physical range).
The likelihood of the runs, with their spread sigma integrated out under the fit's prior for it
(a scaled inverse chi-squared with NOISE_PRIOR_RUNS pseudo-runs at NOISE_LOG_SD), is a Student-t
in the log errors e_i = ln(predicted_i / measured_i):

    p(y | u) ~ (NOISE_PRIOR_RUNS NOISE_LOG_SD^2 + sum_i e_i(u)^2) ^ -(NOISE_PRIOR_RUNS + n) / 2

(heavy-tailed: a shape the parameters cannot express costs an explanation less than a normal
would).

Sampler: sequential Monte Carlo with likelihood tempering (Chopin 2002; Del Moral, Doucet &
Jasra 2006): PARTICLES draws of the prior, the likelihood raised to a power beta rising from 0
to 1 in steps chosen so that the effective sample size stays at half the particles, each step
followed by a systematic resampling and MOVES Metropolis random-walk moves (proposal: the
particles' covariance x (2.38^2 / k) x MOVE_SHRINK, Gelman, Roberts & Gilks 1996) that leave the
tempered posterior invariant. Each move prices every run under every particle in one array call
(`cases.Evaluator`).

Users: `calibration.suggest` (the preposterior over the particles) and `calibration.explain`
(which parameters the particles need moved from their prior: the explanations the fit then tries,
from the particles' mean values).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardwise.calibration.cases import Evaluator
from shardwise.calibration.fit import WIDE_SHARE
from shardwise.calibration.parameters import PARAMETERS, WIDEN_BY_PARAMETER
from shardwise.calibration.spreads import NOISE_LOG_SD, NOISE_PRIOR_RUNS
from shardwise.specs.memo import Memo

PARTICLES = 512
MOVES = 3
MOVE_SHRINK = 0.5  # of the random walk's optimal scale: posteriors with two modes accept less
MAX_STAGES = 40
ESS_SHARE = 0.5


@dataclass(frozen=True)
class Posterior:
    u: np.ndarray  # (T, k) particles, u space of every parameter (PARAMETERS order), equally weighted
    stages: int  # tempering steps taken
    acceptance: float  # mean Metropolis acceptance over the moves
    # ln prior + ln likelihood (untempered) of each particle, up to a constant: the posterior density
    log_density: np.ndarray = field(default_factory=lambda: np.zeros(0))


def log_prior(u: np.ndarray) -> np.ndarray:
    """ln of the two-component prior (up to a constant) of particles (T, k); -inf outside a range."""
    mu = np.array([p.prior_mean for p in PARAMETERS])
    sd = np.array([p.prior_sd for p in PARAMETERS])
    low = np.array([p.low for p in PARAMETERS])
    high = np.array([p.high for p in PARAMETERS])
    z = (u - mu) / sd
    narrow = (1 - WIDE_SHARE) * np.exp(-0.5 * z**2)
    wide = WIDE_SHARE / WIDEN_BY_PARAMETER * np.exp(-0.5 * (z / WIDEN_BY_PARAMETER) ** 2)
    out = np.sum(np.log(narrow + wide), axis=1)
    inside = np.all((u >= low) & (u <= high), axis=1)
    return np.where(inside, out, -np.inf)


def log_likelihood(ev: Evaluator, measured: np.ndarray, u: np.ndarray) -> np.ndarray:
    """ln p(runs | u) of each particle, sigma integrated out (module docstring)."""
    sets = {p.name: p.value(u[:, j]) for j, p in enumerate(PARAMETERS)}
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.log(ev.step_s(sets)) - np.log(measured)[None, :]
    sq = np.sum(np.where(np.isfinite(e), e, 1e3) ** 2, axis=1)
    n = len(measured)
    return -0.5 * (NOISE_PRIOR_RUNS + n) * np.log(NOISE_PRIOR_RUNS * NOISE_LOG_SD**2 + sq)


# The last posteriors drawn, by their runs, particle count and seed: `calibration.explain` (the
# particles' need) and the next `calibration.suggest` (its preposterior) ask for the same one (a
# pure function of its arguments; its arrays are read-only).
_KEPT = Memo("particles.posterior", size=4)


def posterior(cases: list[Any], measured: np.ndarray, n: int = PARTICLES, seed: int = 0) -> Posterior:
    """Particles of the calibration parameters' posterior given the runs (module docstring); the
    same runs, count and seed give the same particles (the last few are kept, `_KEPT`; an
    array-valued case cannot be a key: drawn every time)."""
    y = np.asarray(measured, dtype=float)

    def draw() -> Posterior:
        post = _posterior(cases, y, n, seed)
        for a in (post.u, post.log_density):
            a.flags.writeable = False
        return post

    return _KEPT.get_or_compute((tuple(cases), y.tobytes(), len(y), n, seed), draw)  # type: ignore[no-any-return]


def _posterior(cases: list[Any], measured: np.ndarray, n: int, seed: int) -> Posterior:
    from shardwise.calibration.regret import uncertainty

    rng = np.random.default_rng(seed)
    prior = uncertainty(None)
    u = prior.center + prior.draw(n, seed)
    ev = Evaluator(cases)
    y = np.asarray(measured, dtype=float)
    ll = log_likelihood(ev, y, u)
    lp = log_prior(u)
    k = u.shape[1]
    beta, stages, accepted, tried = 0.0, 0, 0, 0
    while beta < 1.0 and stages < MAX_STAGES:
        nxt = _next_beta(ll, beta)
        logw = (nxt - beta) * ll
        w = np.exp(logw - logw.max())
        w /= w.sum()
        idx = _systematic(w, rng)
        u, ll, lp = u[idx], ll[idx], lp[idx]
        beta, stages = nxt, stages + 1
        cov = np.cov(u, rowvar=False) + np.diag((1e-3 * np.array([p.prior_sd for p in PARAMETERS])) ** 2)
        chol = np.linalg.cholesky(cov * (2.38**2 / k) * MOVE_SHRINK)
        for _ in range(MOVES):
            prop = u + rng.standard_normal(u.shape) @ chol.T
            lp2 = log_prior(prop)
            ok = np.isfinite(lp2)
            ll2 = np.full(len(u), -np.inf)
            if ok.any():
                ll2[ok] = log_likelihood(ev, y, prop[ok])
            log_a = (lp2 + beta * ll2) - (lp + beta * ll)
            accept = np.log(rng.random(len(u))) < log_a
            u = np.where(accept[:, None], prop, u)
            ll, lp = np.where(accept, ll2, ll), np.where(accept, lp2, lp)
            accepted, tried = accepted + int(accept.sum()), tried + len(u)
    return Posterior(u, stages, accepted / tried if tried else 1.0, lp + ll)


def _next_beta(ll: np.ndarray, beta: float) -> float:
    """The largest next power of the likelihood that keeps the effective sample size at ESS_SHARE."""

    def ess(b: float) -> float:
        logw = (b - beta) * ll
        w = np.exp(logw - logw.max())
        return float(w.sum() ** 2 / (w**2).sum()) / len(ll)

    if ess(1.0) >= ESS_SHARE:
        return 1.0
    lo, hi = beta, 1.0
    for _ in range(30):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if ess(mid) >= ESS_SHARE else (lo, mid)
    return max(lo, beta + 1e-6)


def _systematic(w: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Systematic resampling (Kitagawa 1996): indices of len(w) particles drawn by weight."""
    n = len(w)
    positions = (rng.random() + np.arange(n)) / n
    return np.minimum(np.searchsorted(np.cumsum(w), positions), n - 1)
