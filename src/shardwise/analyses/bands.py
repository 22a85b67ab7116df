"""Each point's own 80% band for the experiment analyses (crossover, sweep, sensitivity).

- Uncalibrated: one relative width for every point, the experiment's `prediction_log_sd` (the
  model's measured spread on public runs, `calibration.spreads`).
- Calibrated: s = sqrt(sigma^2 + max(g_f^T Sigma_u g_f, g^T Sigma_all g)) x Student's t factor at
  each point, with g = d ln t / d u there over every parameter (`calibration.unmeasured`: the
  unfitted ones at their prior spread where the runs say nothing of them; `predict`'s interval):
  the series is priced once more per parameter, that parameter moved by one finite-difference
  step. A point far from the calibration runs (more servers, another GPU count) gets a wider band.
- A ratio of two plans' times (sensitivity): both plans share the calibration, so the parameter
  part uses the difference of their gradients, g_a - g_b, in the same form, and the
  residual part is each plan's own residual, 2 sigma^2; uncalibrated, the model's measured spread
  of the ratio of two layouts of one model on one cluster (`calibration.spreads.PAIR_LOG_SD`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from shardwise.specs.experiment import Experiment

Price = Callable[[Experiment], np.ndarray]  # the experiment -> the series' times (any shape)


def calibrated(exp: Experiment) -> bool:
    fitted = exp.calibration_fit
    return fitted is not None and bool(fitted.fitted)


def log_gradient(exp: Experiment, price: Price, t: np.ndarray) -> np.ndarray:
    """d ln t / d u for every parameter (last axis, `calibration.unmeasured.ALL`), by one finite
    step each."""
    from shardwise.calibration.cases import fd_step
    from shardwise.calibration.parameters import BY_NAME
    from shardwise.calibration.unmeasured import ALL

    base = dict(exp.calibration)
    grads = []
    for name in ALL:
        p = BY_NAME[name]
        step = fd_step(name)
        moved = {**base, name: float(p.value(p.u(base[name]) + step))}
        tj = price(replace(exp, calibration=tuple(sorted(moved.items()))))
        with np.errstate(divide="ignore", invalid="ignore"):
            grads.append((np.log(tj) - np.log(t)) / step)
    return np.stack(grads, axis=-1)


def point_log_sd(exp: Experiment, price: Price, t: np.ndarray) -> np.ndarray:
    """Each point's 80% band width in log space (see the module docstring)."""
    if not calibrated(exp):
        return np.full(np.shape(t), exp.prediction_log_sd)
    from shardwise.calibration.intervals import t_factor
    from shardwise.calibration.unmeasured import parameter_var

    fit = exp.calibration_fit
    g = log_gradient(exp, price, t)
    var, _ = parameter_var(g, fit)
    floor = exp.floor_log_sd
    if exp.calibration_other_stack:  # and the shift its stack-bound values make (`intervals.spread`)
        from shardwise.calibration.intervals import stack_shift

        floor = np.hypot(floor, stack_shift(g, fit, exp.calibration_other_stack))
    return np.maximum(np.sqrt(fit.noise_log_sd**2 + var) * t_factor(fit.dof), floor)


def pcie_log_sd(exp: Experiment, plan: object, link: object, grid: dict, sd: np.ndarray) -> np.ndarray:
    """Uncalibrated training: `sd` widened where the plan runs a TP, CP or data-parallel group over a
    PCIe link inside a server, which no published training run measured (`calibration.link_spread`)."""
    if calibrated(exp) or exp.workload != "train" or exp.cost_model != "physical":
        return sd
    from shardwise.analyses.evaluate import scenario_of
    from shardwise.calibration.link_spread import link_widened_log_sd, over_pcie

    scn, _ = scenario_of(exp, plan, link, grid)  # type: ignore[arg-type]
    if scn is None:
        return sd
    return np.broadcast_to(link_widened_log_sd(sd, over_pcie(scn)), np.shape(sd))


def ratio_log_sd(exp: Experiment, price_a: Price, price_b: Price, ta: np.ndarray, tb: np.ndarray) -> np.ndarray:
    """The 80% band width (log) of time_a / time_b at each point (see the module docstring)."""
    if not calibrated(exp):
        from shardwise.calibration.spreads import PAIR_LOG_SD

        return np.full(np.shape(ta), PAIR_LOG_SD)
    from shardwise.calibration.intervals import t_factor
    from shardwise.calibration.unmeasured import parameter_var

    fit = exp.calibration_fit
    var, _ = parameter_var(log_gradient(exp, price_a, ta) - log_gradient(exp, price_b, tb), fit)
    sd = np.sqrt(2 * fit.noise_log_sd**2 + var) * t_factor(fit.dof)
    if exp.floor_log_sd > 0:  # a GPU or stack the calibration did not measure: no narrower than uncalibrated
        from shardwise.calibration.spreads import PAIR_LOG_SD

        sd = np.maximum(sd, PAIR_LOG_SD)
    return sd
