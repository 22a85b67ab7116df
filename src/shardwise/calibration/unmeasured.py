"""What a calibration's runs did not measure, in a calibrated interval (review 45 #1).

A calibration fits the parameters its runs are sensitive to (`calibration.fit`); the others stay
at their prior value ("left out by need", "no run is sensitive to it"). A scenario may lean on
exactly those: three Llama 3 8B runs on one or two servers fit the GEMMs' ramp, and say nothing of
a 100 GbE network across 16 servers, of a pipeline's sends, of the network's decline with size.
The interval of such a scenario must carry those parameters' own uncertainty, not only the
fitted ones' posterior:

    s^2 = sigma^2 + max(g_f^T Sigma_u g_f, g^T Sigma_all g)

with g = d ln t / d u over every parameter of `calibration.parameters` (u space: ln of a scale,
seconds of an overhead, tokens of the GEMM ramp, the exponent itself), g_f its fitted part,
Sigma_u the fitted parameters' posterior covariance and Sigma_all every parameter's Laplace
covariance at the fitted values (`Fit.full_covariance`): the runs' Jacobian over all parameters
plus each prior, a fitted parameter under the prior its fit used, an unfitted one under its
two-component prior's variance, prior_sd^2 (1 - WIDE_SHARE + WIDE_SHARE widen^2) (the public
stacks' narrow prior or a 4 x wider one for a stack unlike them; `calibration.parameters` gives
each prior's physical meaning, unit and source: x1.5 per sd for the inter-node rate, +-0.1 for the
network's exponent, x1.056 for the GEMM efficiency, ...). Along what the runs measured Sigma_all is
as narrow as the fit (an in-sample scenario's g is one of the runs' rows); along what they did not
it is the prior's, so a layout unlike the runs gets a wider interval and is never narrower than
its fitted part alone. A calibration file without `u_covariance_all` (older) takes the fitted
block and the unfitted priors, uncorrelated.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shardwise.calibration.parameters import PARAMETERS

ALL = tuple(p.name for p in PARAMETERS)
# A term is named in the interval's basis when it holds at least this share of the scenario's
# parameter variance g^T Sigma_all g (a presentation threshold: which terms to name, not a width) ...
SHARE_NAMED = 0.1
# ... and the unmeasured terms widen the interval by at least this factor (1.1: a tenth wider).
WIDER_NAMED = 1.1
# how the basis's clause naming them begins (`describe`; the regret, drawn from Sigma_all, drops it)
WIDER_CLAUSE = "; wider where the runs measured nothing: "


def covariance_all(fitted: Any) -> np.ndarray:
    """Sigma_all of `fitted` (PARAMETERS order, u space): its `full_covariance`, or for a file
    without one the fitted block's posterior and the unfitted priors' mixture variance."""
    if fitted.full_covariance is not None:
        return np.asarray(fitted.full_covariance, dtype=float)
    from shardwise.calibration.fit import WIDE_SHARE

    var = [p.prior_sd**2 * (1 - WIDE_SHARE + WIDE_SHARE * p.widen**2) for p in PARAMETERS]
    cov = np.diag(var)
    idx = fitted_columns(fitted)
    cov[np.ix_(idx, idx)] = np.asarray(fitted.u_covariance, dtype=float)
    return cov


def fitted_columns(fitted: Any) -> list[int]:
    """The columns of the fitted parameters in a gradient over ALL."""
    return [ALL.index(n) for n in fitted.fitted]


def parameter_var(g_all: np.ndarray, fitted: Any) -> tuple[np.ndarray, np.ndarray]:
    """(max(g_f^T Sigma_u g_f, g^T Sigma_all g), g_f^T Sigma_u g_f) of a gradient over ALL (last
    axis; a non-finite entry, a parameter the scenario cannot move, counts 0)."""
    g = np.where(np.isfinite(g_all), g_all, 0.0)
    gf = g[..., fitted_columns(fitted)]
    measured = np.einsum("...i,ij,...j->...", gf, np.asarray(fitted.u_covariance, dtype=float), gf)
    full = np.einsum("...i,ij,...j->...", g, covariance_all(fitted), g)
    return np.maximum(measured, full), measured


def widening_terms(g_all: np.ndarray, fitted: Any) -> list[str]:
    """The parameters that widen these scenarios' intervals beyond the fitted part's (one row per
    scenario): those holding SHARE_NAMED of a scenario's g^T Sigma_all g where that widens its
    interval WIDER_NAMED x or more, largest first; a fitted one is named as well where the runs
    fitted it only with the others held at their prior (it trades off with one left out)."""
    g = np.atleast_2d(np.where(np.isfinite(g_all), g_all, 0.0))
    cov = covariance_all(fitted)
    var, measured = parameter_var(g, fitted)
    noise = fitted.noise_log_sd**2
    share: dict[str, float] = {}
    for row, v, m in zip(g, var, measured, strict=True):
        if v <= 0 or (noise + v) < WIDER_NAMED**2 * (noise + m):
            continue
        contribution = row * (cov @ row) / v
        for j in np.flatnonzero(contribution >= SHARE_NAMED):
            share[ALL[j]] = max(share.get(ALL[j], 0.0), float(contribution[j]))
    return sorted(share, key=lambda n: -share[n])


def describe(names: list[str], fitted: Any) -> str:
    """The basis's clause naming the terms that widened an interval (`widening_terms`)."""
    if not names:
        return ""
    words = [f"{n} (fitted, confounded with those left out)" if n in fitted.fitted else n for n in names]
    return WIDER_CLAUSE + ", ".join(words) + " at their prior spread (docs/calibration.md, error bars)"
