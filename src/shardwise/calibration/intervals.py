"""The 80% interval every prediction carries.

- With a calibration (`--calibration FILE`): the scenario is priced with the fitted values, and
  its spread in log space is s^2 = max(g_f^T Sigma_u g_f, g^T Sigma_all g) + sigma^2, where g =
  d ln t / d u is the scenario's own sensitivity to every parameter (g_f: to the fitted ones),
  Sigma_u the fitted parameters' posterior covariance, Sigma_all every parameter's, the unfitted
  ones at their prior spread where the runs say nothing of them (`calibration.unmeasured`: a
  layout far from the calibration runs, e.g. more servers or a pipeline when none was measured,
  gets a wider interval, and its basis names the terms that widened it), and sigma the
  calibration's residual spread (`calibration.fit`).
- Without one: the uncalibrated model's spread for a source it has not seen, measured on the
  public runs each predicted without its source, `spreads.uncalibrated_log_sd`: its stack's
  (between- and within-source; a stack without published runs: the stacks' spread when each is
  left out whole), which already holds a fitted GPU's efficiency error (each fold refitted it),
  plus the GPU's efficiency error where it was not refitted there (taken from a sibling's fit, or
  fitted on no published run), the same relative width for every prediction of
  one stack on one GPU; a mixture of experts or a hybrid Mamba-2 model its family's spread where
  wider (`spreads.FAMILY_LOG_SD`: the rms miss over the family's published runs); serving cases
  the serving model's spread, `spreads.SERVING_LOG_SD`, widened for a model family or a GPU no
  published serving run measured (`spreads.serving_log_sd`).

The interval is t exp(-z s) .. t exp(+z s) with z = 1.2816 (80%, two-sided).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from shardwise.calibration.spreads import (
    NOISE_LOG_SD,
    NOISE_PRIOR_RUNS,
    Z80,
    family_basis,
    family_widens,
    gpu_basis,
    model_family,
    serving_log_sd,
    stack_basis,
    uncalibrated_log_sd,
)

if TYPE_CHECKING:  # the fit is imported where a calibration is used (an uncalibrated command skips it)
    from shardwise.calibration.cases import Case
    from shardwise.calibration.fit import Fit

LEVEL = 0.8


@dataclass(frozen=True)
class Spread:
    """Log-space spread of predictions (one per scenario) and where it comes from."""

    log_sd: np.ndarray
    basis: str  # "calibration FILE (n runs)" or "uncalibrated: public runs' spread"
    log_gradient: np.ndarray | None = None  # calibrated: d ln t / d u, one row per scenario, every parameter
    fit: Fit | None = None  # calibrated: the fit the spread is from
    other_gpu: bool = False  # calibrated, and some case on a GPU (or a stack) its runs did not measure

    def bounds(self, value: Any) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) of a time or a rate (the same factors either way)."""
        v = np.asarray(value, dtype=float)
        return v * np.exp(-Z80 * self.log_sd), v * np.exp(Z80 * self.log_sd)

    def ratio_log_sd(self, a: int, b: int) -> float:
        """The spread (log) of scenario a's time over scenario b's, two layouts of one job: with a
        calibration both share the fit (their gradients' difference, `calibration.unmeasured`); without one how far the
        model misses two layouts' ratio (`spreads.PAIR_LOG_SD`), a bias both share cancelling."""
        if self.fit is None or self.log_gradient is None:
            from shardwise.calibration.spreads import PAIR_LOG_SD

            return PAIR_LOG_SD
        from shardwise.calibration.unmeasured import parameter_var

        var, _ = parameter_var(self.log_gradient[a] - self.log_gradient[b], self.fit)  # every parameter's
        sd = float(np.sqrt(2 * self.fit.noise_log_sd**2 + var) * t_factor(self.fit.dof))
        if self.other_gpu:  # no narrower than the uncalibrated pair spread where the runs measured no such GPU or stack
            from shardwise.calibration.spreads import PAIR_LOG_SD

            sd = max(sd, PAIR_LOG_SD)
        return sd


def spread(
    calibrated: list[Case],
    fitted: Fit | None,
    basis: str = "",
    gpus: tuple[str, ...] = (),
    stacks: tuple[str, ...] | None = None,
) -> Spread:
    """The spread of each (already calibrated) case's prediction. With a calibration fitted on runs
    of `gpus` (its hardware; () : not recorded), a case on another GPU is never given a narrower
    interval than the uncalibrated model's: the runs say nothing of that GPU's efficiency, and
    the parameters fitted on theirs move its prediction without measuring it. So with `stacks` (the
    runs' framework presets; None: not recorded) for a training case of another stack, where the fit
    moved a parameter that belongs to the stack (`parameters.STACK_BOUND`: its GEMMs, its host time),
    whose shift of ln t, |sum_j g_j (u_j - u_j,neutral)| over those parameters (linearised at the
    calibrated values), is as unknown there as it is large: the floor is that shift and the
    uncalibrated spread added in quadrature, so the interval reaches the uncalibrated prediction."""
    if fitted is None or not fitted.fitted:  # a calibration that fitted nothing knows no more than none
        what = "uncalibrated, the model's spread on public runs (--calibration fits your runs)"
        if fitted is not None:
            what = f"{basis or 'the calibration'} fitted no parameter: the model's spread on public runs"
        sd = uncalibrated_log_sd_of(calibrated)
        # a serving case exists only once its module is loaded (an uncalibrated command skips it)
        cases_module = sys.modules.get("shardwise.calibration.cases")
        serving = cases_module.ServingCase if cases_module is not None else ()
        training = [c for c in calibrated if not isinstance(c, serving)]
        if fitted is None and training:
            what = f"uncalibrated: {_basis(training)}; --calibration fits it to your own runs"
        return Spread(np.array(sd, dtype=float), what)
    from shardwise.calibration.cases import Evaluator, ServingCase, log_step_and_gradient
    from shardwise.calibration.unmeasured import ALL, describe, parameter_var, widening_terms

    # relative to the calibrated scenario: scales x1, overheads +0 (see calibration.parameters);
    # every parameter, the unfitted ones too (`calibration.unmeasured`: what the runs did not measure)
    _, g = log_step_and_gradient(Evaluator(calibrated), ALL, np.zeros(len(ALL)), {})
    var, _ = parameter_var(g, fitted)
    sd = np.sqrt(fitted.noise_log_sd**2 + var) * t_factor(fitted.dof)
    basis = (basis or "calibration") + describe(widening_terms(g, fitted), fitted)
    others = [i for i, c in enumerate(calibrated) if gpus and _gpu_of(c) not in gpus]
    bound = stack_bound(fitted)
    strangers = [
        i
        for i, c in enumerate(calibrated)
        if stacks is not None and bound and not isinstance(c, ServingCase) and stack_of(c) not in stacks
    ]
    if others or strangers:
        sd = np.array(sd, dtype=float)
        wider = sorted({*others, *strangers})
        floor = uncalibrated_log_sd_of([calibrated[i] for i in wider])
        if strangers:  # and what the stack-bound values move it by, unknown for another stack
            shift = stack_shift(g, fitted, bound)
            floor = np.where(np.isin(wider, strangers), np.hypot(floor, shift[wider]), floor)
        sd[wider] = np.maximum(sd[wider], floor)
    if others:
        names_ = sorted({_gpu_of(calibrated[i]) for i in others})
        basis = (
            f"{basis or 'calibration'}, fitted on {', '.join(gpus)}: on {', '.join(names_)} at least the "
            "uncalibrated spread (the runs measured no other GPU)"
        )
    if strangers:
        names_ = sorted({stack_of(calibrated[i]) for i in strangers})
        basis = (
            f"{basis or 'calibration'}, fitted on {_runs_of(stacks)}: under {', '.join(names_)} the "
            f"uncalibrated spread and the shift its {', '.join(bound)} make{'s' if len(bound) == 1 else ''} (the "
            "runs' stack's, not this one's)"
        )
    return Spread(sd, basis or "calibration", g, fitted, bool(others or strangers))


def stack_shift(g: np.ndarray, fitted: Fit, names: tuple[str, ...]) -> np.ndarray:
    """|sum_j g_j (u_j - u_j,neutral)| over `names`: how far the fitted values of those parameters
    move ln t, linearised at the calibrated values (g: d ln t / d u of every parameter, `ALL`'s order,
    one row per case or point)."""
    from shardwise.calibration.parameters import BY_NAME, NEUTRAL, PARAMETERS

    order = [p.name for p in PARAMETERS]
    moved = np.array([BY_NAME[n].u(fitted.values[n]) - BY_NAME[n].u(NEUTRAL[n]) for n in names], dtype=float)
    g = np.where(np.isfinite(g), g, 0.0)
    return np.abs(g[..., [order.index(n) for n in names]] @ moved)


def stack_bound(fitted: Fit | None) -> tuple[str, ...]:
    """The fitted parameters that belong to the runs' software stack (`parameters.STACK_BOUND`)."""
    from shardwise.calibration.parameters import STACK_BOUND

    return tuple(n for n in STACK_BOUND if fitted is not None and n in fitted.fitted)


def _runs_of(stacks: tuple[str, ...] | None) -> str:
    """'runs of torchtitan', or 'serving runs only' for a calibration without training runs."""
    return f"runs of {', '.join(stacks)}" if stacks else "serving runs only"


def stack_of(case: Case) -> str:
    """The framework preset a training case is priced under."""
    return str(_scenario(case).plan.framework)


def stack_note(cal: Any, stack: str) -> str:
    """A calibration's note on a training prediction under `stack`: "" where its runs ran that stack
    (or it fitted nothing that belongs to a stack); where the file does not record its runs' stacks,
    that it cannot be checked."""
    bound = stack_bound(None if cal is None else cal.fit)
    if not bound:
        return ""
    if cal.stacks is None:
        return (
            f"{cal.path} does not record its runs' stacks (written before they were): its "
            f"{', '.join(bound)} may be another stack's, unchecked; calibrate again to have it checked"
        )
    if stack in cal.stacks:
        return ""
    return (
        f"{cal.path} was fitted on {_runs_of(cal.stacks)}, not {stack}: its {', '.join(bound)} "
        f"belong{'s' if len(bound) == 1 else ''} to that stack, so the interval holds the uncalibrated prediction too"
    )


def _gpu_of(case: Case) -> str:
    return str(_scenario(case).cluster.gpu.name)


def uncalibrated_log_sd_of(cases: list[Case]) -> np.ndarray:
    """The uncalibrated spread of each case: a training case its stack's, GPU's and family's, a
    serving case the serving model's, widened where no published serving run measured it
    (`spreads.serving_log_sd`)."""
    cases_module = sys.modules.get("shardwise.calibration.cases")
    serving = cases_module.ServingCase if cases_module is not None else ()
    return np.array(
        [
            serving_log_sd(_gpu_of(c), _family(c)) if isinstance(c, serving) else _training_log_sd(_scenario(c))
            for c in cases
        ],
        dtype=float,
    )


def _training_log_sd(scn: Any) -> float:
    """A training case's: its stack's, GPU's and family's spread, and PCIe's where a group runs over
    it (`calibration.link_spread`)."""
    from shardwise.calibration.link_spread import link_widened_log_sd, over_pcie

    sd = uncalibrated_log_sd(scn.cluster.gpu, scn.plan.framework, model_family(scn.model))
    return float(np.max(link_widened_log_sd(sd, over_pcie(scn))))


def _basis(training: list[Case]) -> str:
    """What the uncalibrated intervals of `training` rest on, in words: its stack's published runs
    (or the stacks' spread when it has none, or its model family's) and its GPU's fitted efficiency."""
    stacks = {_scenario(c).plan.framework for c in training}
    families = {_family(c) for c in training}
    gpus = {str(g.name): g for g in (_scenario(c).cluster.gpu for c in training)}  # a file's: its like:'s fit
    mixed = len(stacks) > 1 or len(families) > 1
    by_family = not mixed and family_widens(next(iter(stacks)), next(iter(families)))
    if mixed:
        what = (
            "how far the model missed each stack's published runs with each source held out (a mixture of "
            "experts or hybrid model: its family's runs, where wider)"
        )
    else:
        what = family_basis(next(iter(families))) if by_family else stack_basis(next(iter(stacks)))
    gpu = (
        gpu_basis(next(iter(gpus.values())), held_out=not by_family)
        if len(gpus) == 1
        else "plus the uncertainty of each GPU's efficiency where it was not refitted in those"
    )
    from shardwise.calibration.link_spread import BASIS, over_pcie

    pcie = any(bool(np.any(over_pcie(_scenario(c)))) for c in training)
    return f"{what}, {gpu}" + (f"; {BASIS}" if pcie else "")


def _scenario(case: Case) -> Any:
    return getattr(case, "scenario", case)


def _family(case: Case) -> str:
    """The case's model family whose spread may be wider than its stack's (`spreads.FAMILY_LOG_SD`)."""
    return model_family(_scenario(case).model)


def t_factor(dof: float) -> float:
    """Student's t quantile over the normal's at 90% (the 80% interval's upper end): the spread is
    itself estimated from few runs, so its interval is wider (dof = runs - fitted + prior runs)."""
    if not np.isfinite(dof):
        return 1.0
    from scipy.stats import t

    return float(t.ppf(0.9, max(dof, 1.0)) / Z80)


def leave_one_out(scenarios: list[Case], measured: np.ndarray, fitted: Fit) -> tuple[np.ndarray, np.ndarray]:
    """Each run predicted by the calibration on all the other runs, without refitting: (ln(predicted
    / measured), the 80% interval's log spread), from the fit on all runs linearised at its optimum.

    With g_i = d ln t_i / d u, the posterior precision A = G^T G / sigma^2 + diag(1 / prior_sd^2)
    and the leverage h_i = g_i^T A^-1 g_i / sigma^2, dropping run i moves its residual to
    e_i / (1 - h_i) (the PRESS residual of ridge regression; exact for a model linear in u) and its
    parameter variance to g_i^T A^-1 g_i / (1 - h_i) (Sherman-Morrison); the spread sigma_-i is
    re-estimated without run i (the other runs' residuals taken from the full fit), and the
    Student factor loses one degree of freedom. The parameter
    choice (which are fitted, which priors widened) is the full fit's."""
    measured = np.asarray(measured, dtype=float)
    e = np.asarray(fitted.after_log_error, dtype=float)
    n, k = len(measured), len(fitted.fitted)
    sq = np.sum(e**2) - e**2 + NOISE_PRIOR_RUNS * NOISE_LOG_SD**2  # the spread without run i
    sigma = np.sqrt(sq / np.maximum(n - 1 - k + NOISE_PRIOR_RUNS, 1.0))
    if k == 0:
        return e, sigma * t_factor(fitted.dof - 1)
    from shardwise.calibration.cases import Evaluator, log_step_and_gradient, with_values
    from shardwise.calibration.unmeasured import ALL, covariance_all, fitted_columns

    cases = [with_values(c, fitted.values) for c in scenarios]
    _, g_all = log_step_and_gradient(Evaluator(cases), ALL, np.zeros(len(ALL)), {})
    g_all = np.where(np.isfinite(g_all), g_all, 0.0)
    g = g_all[:, fitted_columns(fitted)]
    q = np.einsum("ni,ij,nj->n", g, fitted.u_covariance, g)  # g_i^T A^-1 g_i
    h = np.clip(q / fitted.noise_log_sd**2, 0.0, 0.99)
    loo = e / (1.0 - h)
    # every parameter's part (`calibration.unmeasured`), run i dropped from Sigma_all the same way
    q_all = np.einsum("ni,ij,nj->n", g_all, covariance_all(fitted), g_all)
    h_all = np.clip(q_all / fitted.noise_log_sd**2, 0.0, 0.99)
    var = np.maximum(q / (1.0 - h), q_all / (1.0 - h_all))
    return loo, np.sqrt(sigma**2 + var) * t_factor(fitted.dof - 1)


def predict_with_spread(fitted: Fit | None, scenarios: list[Case]) -> tuple[np.ndarray, Spread]:
    """Each case's prediction, calibrated by `fitted` (None: the uncalibrated model with its
    measured public spread), and the spread of its 80% interval (`spread`)."""
    from shardwise.calibration.cases import Evaluator, with_values

    cases = scenarios if fitted is None else [with_values(c, fitted.values) for c in scenarios]
    return Evaluator(cases).step_s({})[0], spread(cases, fitted)


def predict_interval(fitted: Fit | None, scenarios: list[Case]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(prediction, 80% low, 80% high) of each case (`predict_with_spread`)."""
    t, s = predict_with_spread(fitted, scenarios)
    low, high = s.bounds(t)
    return t, low, high
