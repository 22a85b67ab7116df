"""How sure is the planner's pick? Its expected regret under the calibration's posterior.

The calibration's parameters are uncertain (`calibration.fit`: a Laplace posterior for the fitted
ones, the prior for the others; without a calibration, the prior for all). Draw S parameter sets
from that distribution, price the plans that could win under each, and for each set compare the
planner's pick with the best plan under that set:

    R[s, p] = cost_s(p) / min_q cost_s(q) - 1          (regret of plan p if set s is the truth)
    expected regret of the pick = mean_s R[s, pick]
    chance another plan is faster = share of s with R[s, pick] > TIE_TOLERANCE

(cost: the step time, or GPUs x step time for the throughput-per-GPU objective).

What the parameters cannot express counts too. A calibration that misses its own runs by a few
percent will miss the plans it ranks by as much, in ways no draw of its parameters reproduces
(a cluster whose GEMMs slow down at small micro-batches, calibrated with parameters that had no
such shape, fitted its runs within 10% and ranked first a plan 11.6% slower than the best, while
the parameters' uncertainty alone said 0-3%). Each plan's cost in each draw therefore carries a
residual, r[s, p] ~ N(0, tau^2) in log space, with tau the calibration's own spread
(`Fit.noise_log_sd`: the root mean square of its runs' residuals with the prior's NOISE_PRIOR_RUNS
runs at NOISE_LOG_SD, over runs - fitted parameters + those; the sigma every calibrated interval
carries). It is shared by plans with the same tp, pp, cp, ep, micro-batch and virtual stages (the
same GEMM shapes and pipeline; they may still differ in ZeRO-3's gathers, recomputation or sequence
parallelism, which `plan`'s tie line treats as independent instead: docs/calibration.md) and
independent between the others. Without a calibration tau is 0 (the uncalibrated model's
scatter is the parameters' prior). A calibration that explains many runs earns a small tau; one
fitted on as many parameters as runs, or missing its runs, cannot claim more confidence than that.

Which plans could win: every plan that fits is priced at the calibrated values and at each
parameter moved CORNER_SDS of its sd either way (one-sided for an overhead or exponent at its
bound); the best POOL_PER_CORNER distinct plans of each corner form the pool (plans that cost
the same at every corner, e.g. micro-batch variants with one step time, count once).

Without a calibration, every parameter is drawn from the fit's own two-component prior
(`Parameter.widen`): the public stacks' narrow prior, or with probability `fit.WIDE_SHARE` one widen x
wider (a cluster unlike the public ones: a network far below its nominal
rate at scale is the common case). With one, every parameter is drawn from the Laplace
posterior over all of them at the fitted values (`Fit.full_covariance`: the unfitted ones under
that prior's variance, conditioned on the runs; a file without it: the fitted ones' posterior and
the others' two-component prior).

The draws are deviations from the calibrated values, applied to the calibrated cluster
(`parameters.apply` composes: scales multiply, overheads and the exponent add), from the normal
truncated to each parameter's physical range (`truncated_normal`, a Gibbs sampler). Rejection kept
too few draws where overheads sit at their bound 0 (1.7% inside on an MoE job's two runs) and the
rest were reflected into range, which broke the runs' correlations: the "posterior" draws then
missed the runs they were conditioned on by 34-54% rms (ln), as the prior would, against 13-25% now
(5% from four runs on).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from shardwise.calibration.fit import WIDE_SHARE
from shardwise.calibration.parameters import NEUTRAL, PARAMETERS, WIDEN_BY_PARAMETER, apply

if TYPE_CHECKING:
    from shardwise.analyses.planner import PlanSearch
    from shardwise.calibration.fit import Fit

SAMPLES = 256
CORNER_SDS = 2.0
POOL_PER_CORNER = 6
POOL_CONFIGURATIONS = 1 << 16  # (plan, corner) pairs `pool` prices in one call
TIE_TOLERANCE = 0.005  # the planner's: costs this close are a tie
SEED = 20261204  # a fixed seed: the same question gets the same answer
GIBBS_SWEEPS = 60  # sweeps of the truncated normal's Gibbs sampler (`truncated_normal`)


@dataclass(frozen=True)
class Uncertainty:
    """The parameters' distribution around the calibrated values, in u space (`Parameter.u`)."""

    names: tuple[str, ...]  # every parameter, PARAMETERS order
    center: np.ndarray  # u of the calibrated (or neutral) values
    covariance: np.ndarray  # the fit's posterior covariance for fitted ones, the prior's variance elsewhere
    fitted: tuple[str, ...]

    @property
    def open(self) -> np.ndarray:
        """Which parameters follow the two-component prior (not fitted)."""
        return np.array([n not in self.fitted for n in self.names])

    @property
    def mixture_covariance(self) -> np.ndarray:
        """The covariance with each unfitted parameter's variance that of its two-component prior."""
        factor = np.where(self.open, np.sqrt(1 - WIDE_SHARE + WIDE_SHARE * WIDEN_BY_PARAMETER**2), 1.0)
        return self.covariance * np.outer(factor, factor)

    @property
    def sd(self) -> np.ndarray:
        return np.sqrt(np.diag(self.mixture_covariance))

    def draw(self, n: int, seed: int = SEED) -> np.ndarray:
        """n deviations (n, k) in u space from the covariance truncated to each parameter's range
        (`truncated_normal`), an unfitted parameter `Parameter.widen` x wider in a WIDE_SHARE of the draws."""
        rng = np.random.default_rng(seed)
        wide = (rng.random((n, len(self.names))) < WIDE_SHARE) & self.open[None, :]
        scale = np.where(wide, WIDEN_BY_PARAMETER[None, :], 1.0)
        return truncated_normal(self.covariance, self.low, self.high, scale, rng)

    @property
    def low(self) -> np.ndarray:
        return np.array([p.low for p in PARAMETERS]) - self.center

    @property
    def high(self) -> np.ndarray:
        return np.array([p.high for p in PARAMETERS]) - self.center

    def bounded(self, dev: np.ndarray) -> np.ndarray:
        """Deviations moved inside the ranges: reflected at a lower bound (an overhead at 0 s), clipped."""
        low, high = self.low, self.high
        dev = np.where(dev < low, 2 * low - dev, dev)
        return np.clip(dev, low, high)

    def values(self, dev: np.ndarray) -> dict[str, np.ndarray]:
        """`parameters.apply` values of deviations (n, k): a factor for a scale, an addition otherwise."""
        d = np.atleast_2d(dev)
        return {p.name: (np.exp(d[:, j]) if p.log_scale else d[:, j]) for j, p in enumerate(PARAMETERS)}


def truncated_normal(
    cov: np.ndarray, low: np.ndarray, high: np.ndarray, scale: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """len(scale) draws x = scale * z, z ~ N(0, cov) truncated to low / scale <= z <= high / scale:
    Gibbs sampling, each coordinate in turn from its conditional normal given the others (mean
    -sum_{i != j} Q_ji z_i / Q_jj, variance 1 / Q_jj, Q = cov^-1) truncated to its range by the
    inverse CDF (Geweke 1991; Robert 1995), GIBBS_SWEEPS sweeps of parallel chains started at 0
    (the calibrated values, inside every range). Unlike rejection, it works when most of the
    Gaussian lies outside the ranges (overheads and the exponent calibrated at their bound 0, where
    a draw is inside every range only a few % of the time); unlike reflecting or clipping, it keeps
    the correlations by which the runs tie the parameters (a slower all-to-all only with faster GEMMs)."""
    from scipy.special import ndtr, ndtri

    q = np.linalg.inv(cov)
    lo, hi = low[None, :] / scale, high[None, :] / scale
    z = np.clip(np.zeros(scale.shape), lo, hi)
    sd = 1.0 / np.sqrt(np.diag(q))
    for _ in range(GIBBS_SWEEPS):
        for j in range(len(q)):
            mean = -(z @ q[:, j] - z[:, j] * q[j, j]) / q[j, j]
            a, b = ndtr((lo[:, j] - mean) / sd[j]), ndtr((hi[:, j] - mean) / sd[j])
            p = np.clip(a + (b - a) * rng.random(len(z)), 1e-300, 1 - 1e-16)
            z[:, j] = np.clip(mean + sd[j] * ndtri(p), lo[:, j], hi[:, j])
    return z * scale


def uncertainty(fit: Fit | None) -> Uncertainty:
    """The distribution of `fit` (None: the priors around the uncalibrated values)."""
    values = dict(NEUTRAL) if fit is None else {**NEUTRAL, **fit.values}
    names = tuple(p.name for p in PARAMETERS)
    center = np.array([p.u(values[p.name]) if p.log_scale else values[p.name] for p in PARAMETERS])
    cov = np.diag([p.prior_sd**2 for p in PARAMETERS])
    if fit is not None and fit.full_covariance is not None:  # every parameter conditioned on the runs
        return Uncertainty(names, center, np.asarray(fit.full_covariance, dtype=float), names)
    fitted = tuple(fit.fitted) if fit is not None else ()
    idx = [names.index(n) for n in fitted]
    if idx:
        cov[np.ix_(idx, idx)] = np.asarray(fit.u_covariance, dtype=float)  # type: ignore[union-attr]
    return Uncertainty(names, center, cov, fitted)


def costs(search: PlanSearch, plans: np.ndarray, dev: np.ndarray, unc: Uncertainty) -> np.ndarray:
    """Cost of each plan (indices into the search) under each deviation: shape (len(dev), len(plans)).
    The search's cluster is the calibrated one; the deviations move it (see the module docstring)."""
    from shardwise.analyses.planner import _scenario
    from shardwise.engines.training import estimate_training_step
    from shardwise.specs import Scenario

    cols = {k: v[plans] for k, v in search.columns.items()}
    scn = _scenario(search.model, search.cluster, search.global_batch, search.space, cols)
    values = {k: v[:, None] for k, v in unc.values(dev).items()}
    est = estimate_training_step(Scenario(scn.model, apply(scn.cluster, values), scn.plan))
    t = np.broadcast_to(np.asarray(est.step_time_s, dtype=float), (len(dev), len(plans)))
    return t * cols["gpus"][None, :] if search.space.objective != "time" else np.array(t)


def corners(unc: Uncertainty, sds: float = CORNER_SDS) -> np.ndarray:
    """The calibrated point and each parameter moved `sds` of its sd either way (bounded), of the
    narrow and of the wide prior for an unfitted one."""
    k = len(unc.names)
    moves = [np.zeros(k)]
    narrow = np.sqrt(np.diag(unc.covariance))
    for j, s in enumerate(narrow):
        for sign in (-1.0, 1.0):
            for width in (1.0, WIDEN_BY_PARAMETER[j]) if unc.open[j] and WIDEN_BY_PARAMETER[j] > 1 else (1.0,):
                d = np.zeros(k)
                d[j] = sign * sds * s * width
                moves.append(d)
    out = unc.bounded(np.array(moves))
    _, keep = np.unique(np.round(out, 12), axis=0, return_index=True)  # one-sided moves clip to the centre
    return out[np.sort(keep)]


def pool(search: PlanSearch, unc: Uncertainty, per_corner: int = POOL_PER_CORNER) -> np.ndarray:
    """The plans that could win (see the module docstring), the planner's pick first."""
    fit = np.flatnonzero(search.fits)
    pick = int(search.ranked(1)[0])
    at = corners(unc)
    # several corners per call (the model's Python overhead is per call), at most POOL_CONFIGURATIONS
    # (plan, corner) pairs at a time: bounded memory
    per_call = max(1, POOL_CONFIGURATIONS // max(len(fit), 1))
    c = np.vstack([costs(search, fit, at[i : i + per_call], unc) for i in range(0, len(at), per_call)])
    _, first = np.unique(np.round(np.log(c).T, 6), axis=0, return_index=True)
    distinct = fit[np.sort(first)]
    cd = c[:, np.sort(first)]
    chosen = [pick]
    for row in cd:
        for j in np.argsort(row, kind="stable")[:per_corner]:
            if int(distinct[j]) not in chosen:
                chosen.append(int(distinct[j]))
    return np.array(chosen, dtype=np.int64)


@dataclass(frozen=True)
class Regret:
    """The pick's expected regret (see the module docstring)."""

    pick: int  # the planner's pick (index into the search)
    expected: float  # mean relative regret
    chance: float  # chance another plan is faster by more than TIE_TOLERANCE
    size_when_beaten: float  # mean regret over the draws where it is beaten
    rival: int | None  # the plan most often best when the pick is beaten
    rival_chance: float
    samples: int
    pool_size: int
    basis: str
    residual_log_sd: float = 0.0  # the per-plan residual the draws carry (0: the parameters alone)


@dataclass(frozen=True)
class Draws:
    """The pool priced under the draws (what the regret and the suggestions share)."""

    plans: np.ndarray  # pool, indices into the search (the pick first)
    dev: np.ndarray  # (S, k) deviations
    cost: np.ndarray  # (S, P), as the planner prices it (closed form x `ratio`)
    unc: Uncertainty
    ratio: np.ndarray  # (P,) the planner's step time over the closed form's (`confirmed_ratio`)
    residual_log_sd: float = 0.0  # tau: the per-plan residual in `cost` (module docstring)

    @property
    def relative(self) -> np.ndarray:
        """R[s, p] = cost / best cost - 1."""
        return self.cost / self.cost.min(axis=1, keepdims=True) - 1.0


def residual_log_sd(fit: Fit | None) -> float:
    """tau: the calibration's own spread (module docstring); 0 without one. A calibration whose runs
    needed no fitted parameter still carries its runs' spread: they are its evidence that the model
    misses by that much, which no draw of the priors reproduces."""
    return float(fit.noise_log_sd) if fit is not None else 0.0


# Plans that share these run the same kernels and messages per micro-batch: one residual
SHAPE = ("tp", "pp", "cp", "ep", "micro_batch", "vpp")


def residuals(search: PlanSearch, plans: np.ndarray, samples: int, tau: float, seed: int) -> np.ndarray:
    """r (samples, P): one N(0, tau^2) draw per layout shape (SHAPE), shared by its plans."""
    if tau <= 0:
        return np.zeros((samples, len(plans)))
    keys = np.stack(
        [
            np.asarray(search.columns.get(k, np.ones(1)), dtype=np.int64)[plans]
            if k in search.columns
            else np.ones(len(plans), dtype=np.int64)
            for k in SHAPE
        ],
        axis=1,
    )
    _, group = np.unique(keys, axis=0, return_inverse=True)
    r = np.random.default_rng(seed + 2).normal(0.0, tau, (samples, int(group.max()) + 1))
    return r[:, np.asarray(group).reshape(-1)]


def draws(search: PlanSearch, fit: Fit | None, samples: int = SAMPLES, seed: int = SEED) -> Draws:
    unc = uncertainty(fit)
    plans = pool(search, unc)
    dev = unc.draw(samples, seed)
    ratio = confirmed_ratio(search, plans, unc)
    tau = residual_log_sd(fit)
    r = residuals(search, plans, len(dev), tau, seed)
    return Draws(plans, dev, costs(search, plans, dev, unc) * ratio * np.exp(r), unc, ratio, tau)


def confirmed_ratio(search: PlanSearch, plans: np.ndarray, unc: Uncertainty) -> np.ndarray:
    """Each plan's step time as the planner reports it (the simulator's for a pipeline,
    `plan_confirm.confirmed_estimate`) over the closed form's, at the calibrated values: the draws are
    priced in closed form (one array call) and scaled by it, so they rank the plans as `plan` does."""
    from shardwise.analyses.planner import confirmed_estimate, simulable

    closed = costs(search, plans, np.zeros((1, len(unc.names))), unc)[0]
    ratio = np.ones(len(plans))
    for j, i in enumerate(plans.tolist()):
        scn = search.scenario(i)
        if simulable(scn.plan):
            t = float(np.asarray(confirmed_estimate(scn).step_time_s))
            ratio[j] = t * (float(search.columns["gpus"][i]) if search.space.objective != "time" else 1.0) / closed[j]
    return ratio


def regret_of(d: Draws, column: int = 0, basis: str = "") -> Regret:
    """The regret of the pool's plan `column` (0: the pick)."""
    r = d.relative
    mine = r[:, column]
    beaten = mine > TIE_TOLERANCE
    rival, rival_chance = None, 0.0
    if beaten.any():
        winners = np.argmin(d.cost[beaten], axis=1)
        best = np.bincount(winners, minlength=r.shape[1])
        rival, rival_chance = int(d.plans[int(np.argmax(best))]), float(best.max() / len(mine))
    return Regret(
        int(d.plans[column]),
        float(mine.mean()),
        float(beaten.mean()),
        float(mine[beaten].mean()) if beaten.any() else 0.0,
        rival,
        rival_chance,
        len(mine),
        len(d.plans),
        basis,
        d.residual_log_sd,
    )


def plan_regret(search: PlanSearch, fit: Fit | None, basis: str = "") -> Regret:
    """The expected regret of the search's best plan (its cluster already calibrated by `fit`); its
    draws hold every parameter, so a basis's widening clause (`calibration.unmeasured`) is left out."""
    from shardwise.calibration.unmeasured import WIDER_CLAUSE

    return regret_of(draws(search, fit), 0, basis.partition(WIDER_CLAUSE)[0])


def describe(reg: Regret, label: Any = None) -> str:
    """'expected regret of the pick: 0.4% (a 12% chance that another plan is faster, by 3.1% when it is; ...)'."""
    what = reg.basis or "the parameters' uncertainty"
    if reg.residual_log_sd > 0:
        what += f" and its {reg.residual_log_sd:.1%} unexplained spread per plan"
    head = f"expected regret of the pick: {reg.expected:.1%} under {what}"
    if reg.chance == 0:
        return f"{head}; no draw of {reg.samples} makes another of the {reg.pool_size} contending plans faster"
    chance = f"{reg.chance:.0%}"
    article = "an" if chance.startswith(("8", "11%", "18%")) else "a"  # an 8%, an 11%, an 18%, an 80-89%
    text = (
        f"{head}: {article} {chance} chance that another plan is faster, by {reg.size_when_beaten:.1%} on average "
        f"when it is ({reg.samples} draws, {reg.pool_size} contending plans)"
    )
    if reg.rival is not None and label is not None:
        text += f"; most often {label(reg.rival)} ({reg.rival_chance:.0%} of draws)"
    return text


def text(search: PlanSearch, fit: Fit | None, basis: str = "") -> str:
    """The line `plan --calibration` prints under its table."""
    reg = plan_regret(search, fit, basis)
    return describe(reg, lambda i: label(search, i))


def label(search: PlanSearch, i: int) -> str:
    """'tp=2 pp=4 dp=8, micro-batch 1, interleaved v=2, recompute none, SP on, ZeRO-1'."""
    from shardwise.analyses.plan_space import RECOMPUTE_NAMES, SCHEDULE_NAMES

    c = {k: v[i].item() for k, v in search.columns.items()}
    extra = "".join(f" {k}={c[k]}" for k in ("cp", "ep") if c.get(k, 1) > 1)
    gpus = f"{c['gpus']} GPUs: " if search.space.objective != "time" else ""
    sched = SCHEDULE_NAMES[int(c["schedule"])] + (f" v={c['vpp']}" if c["vpp"] > 1 else "")
    sched = f", {sched}" if c["pp"] > 1 else ""
    whole = f" + {c['recompute_layers']} layers whole" if c.get("recompute_layers", 0) else ""
    shard = f" over {c['shard_group']} ranks" if c.get("shard_group", 0) else ""
    return (
        f"{gpus}tp={c['tp']} pp={c['pp']} dp={c['dp']}{extra}, micro-batch {c['micro_batch']}{sched}, recompute "
        f"{RECOMPUTE_NAMES[int(c['recompute'])]}{whole}, SP {'on' if c['sequence_parallel'] else 'off'}, "
        f"ZeRO-{c['zero_stage']}{shard}"
    )
