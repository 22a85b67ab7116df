"""Where an uncalibrated 80% interval's width comes from: a random-effects model of the public
runs' leave-one-out errors (pure: numbers in, numbers out; `analyses.loso` feeds it).

The log error of a run r of source s (one software release on one cluster) of stack k on GPU g,
each predicted by the model fitted without its source, is taken as

    e = mu_k + b_s + w_r + f_g

- w_r, the scatter of one source's runs around their source's mean, runs on a GPU whose error the
  interval adds on its own (f_g below: a sibling's scale or none in their fold) around their own
  GPU's mean, since they share that error and it must not be counted twice (`Cell.strata`;
  within-source variance `within2`, pooled over the stack's sources by degrees of freedom, then
  moderated towards the stacks' common value by empirical Bayes, Smyth 2004, Stat. Appl. Genet. Mol. Biol. 3(1) art. 3:
  a stack whose variance rests on one or two groups borrows the others' as prior degrees of
  freedom, `moderated_within`);
- b_s, the source's bias beyond its stack's mean mu_k: between-source variance tau^2, the
  DerSimonian-Laird moment estimate (DerSimonian & Laird 1986, Controlled Clinical Trials 7:177)
  pooled over the stacks that have two sources or more, one common tau^2 for every stack, each
  stack its own mean (Borenstein et al. 2009, Introduction to Meta-Analysis, ch. 19, which pools
  tau^2 across subgroups unless they hold enough studies to estimate it apart: no stack here has
  more than three sources, and a stack's own estimate at 1-2 degrees of freedom put Student's t
  at 3.1-1.9 on it), so that one large source (dgxc-benchmarking's 304 Megatron-Core runs) weighs
  as one source, not as 304 runs;
- mu_k, the stack's mean error, estimated with its sources weighted 1 / (v_s + tau^2) and its
  standard error se^2 = 1 / sum(1 / (v_s + tau^2)) (a stack known from one source has se^2 = v + tau^2);
- f_g, the error of the GPU's fitted sustained efficiency: already inside the errors above for a
  GPU fitted in the folds (each fold refits the scales without its source), so only what those
  errors do not contain is added (`GpuFit.var`).

A stack without published runs adds the spread of whole stacks: each other stack's mean error when
it was left out of the fit altogether, DerSimonian-Laird across stacks (tau_stack^2, mean, se^2).
Its interval is never narrower than the widest of the stacks that have published runs: those are
the stacks people publish for, and a stack nobody has measured may miss as far as the worst one.

The interval stays centred on the prediction (point predictions are not moved): its half-width h
in log space is the one for which a run drawn from the predictive distribution, mu + s T, T
Student's t with Welch-Satterthwaite degrees of freedom, lands inside (-h, h) 80% of the time.
It is stored as the normal-equivalent spread h / Z80, so it combines with the GPU's term in
quadrature as every other spread does (`calibration.spreads.gpu_widened_log_sd`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, replace

import numpy as np

from shardwise.calibration.spreads import Z80, gpu_fit_var

LEVEL = 0.8
# The floor of every variance: (1e-4)^2, a 0.01% log spread, far below any measured one; it keeps
# the inverse-variance weights finite where every source has one run or runs agree exactly.
VAR_FLOOR = 1e-8


def t_quantile(dof: float) -> float:
    """Student's t 90% point (the 80% two-sided interval's upper end); the normal's at dof = inf."""
    if math.isnan(dof):
        raise ValueError("interval model: degrees of freedom are NaN")
    if math.isinf(dof):
        return Z80
    from scipy.stats import t

    return float(t.ppf(0.9, max(dof, 1.0)))


def symmetric_half_width(mu: float, sd: float, dof: float) -> float:
    """h with P(|mu + sd T| <= h) = 80%, T Student's t with `dof` degrees of freedom: the
    half-width of an interval centred on 0 that covers a distribution centred on mu."""
    from scipy.optimize import brentq
    from scipy.stats import t

    if not (math.isfinite(mu) and math.isfinite(sd)):
        raise ValueError(f"interval model: the centre {mu} or the spread {sd} is not a finite number")
    if math.isnan(dof):
        raise ValueError("interval model: degrees of freedom are NaN")
    dist = t(max(dof, 1.0)) if math.isfinite(dof) else None
    if sd <= 0.0:
        return abs(mu)

    def cover(h: float) -> float:
        hi, lo = (h - mu) / sd, (-h - mu) / sd
        if dist is None:
            from scipy.stats import norm

            return float(norm.cdf(hi) - norm.cdf(lo)) - LEVEL
        return float(dist.cdf(hi) - dist.cdf(lo)) - LEVEL

    return float(brentq(cover, 0.0, abs(mu) + 100.0 * sd, xtol=1e-9))


def satterthwaite(parts: list[tuple[float, float]]) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of variances, each (variance, its dof); a
    part estimated with no degrees of freedom (d <= 0: e.g. a pooled tau^2 of 0 where no stack has
    two sources) or known exactly (d = inf) adds its variance but no uncertainty of its own."""
    if not parts or any(math.isnan(v) or math.isnan(d) or v < 0.0 for v, d in parts):
        raise ValueError(f"interval model: no variances, or a NaN or negative one: {parts}")
    total = sum(v for v, _ in parts)
    denom = sum(v * v / d for v, d in parts if v > 0.0 and 0.0 < d < math.inf)
    return total * total / denom if denom > 0.0 else math.inf


@dataclass(frozen=True)
class Cell:
    """One source's runs of one stack, each predicted without the source (log errors)."""

    stack: str
    source: str
    errors: tuple[float, ...]
    groups: int  # distinct groups (model, cluster, GPU count, release): the runs' effective count
    # per run, the GPU whose efficiency error its interval adds on its own (a GPU its fold did not
    # fit: a sibling's scale or none), "" for a GPU the fold fitted; () : all ""
    strata: tuple[str, ...] = ()

    @property
    def n(self) -> int:
        return len(self.errors)

    def __post_init__(self) -> None:
        if not self.errors or any(not math.isfinite(e) for e in self.errors):
            raise ValueError(f"interval model: {self.source} ({self.stack}) has no errors or a non-finite one")
        if self.strata and len(self.strata) != len(self.errors):
            raise ValueError(f"interval model: {self.source} ({self.stack}) labels {len(self.strata)} of {self.n} runs")

    @property
    def mean(self) -> float:
        return float(np.mean(self.errors))

    def _strata(self) -> list[np.ndarray]:
        e = np.asarray(self.errors)
        labels = np.asarray(self.strata or ("",) * self.n)
        return [e[labels == k] for k in dict.fromkeys(labels.tolist())]

    @property
    def sum_sq(self) -> float:
        """Sum of squared deviations from the cell's mean, each run's taken about its stratum's
        mean (`strata`): runs on a GPU the fold did not fit share that GPU's efficiency error,
        which the interval adds on its own (`GpuFit.var`); left in the scatter inside the source,
        it would be counted twice, and spread over every run of the stack."""
        return float(sum(np.sum((x - x.mean()) ** 2) for x in self._strata()))

    @property
    def n_strata(self) -> int:
        return len(self._strata())


def within_variance(cells: list[Cell]) -> tuple[float, float]:
    """The within-source variance pooled over `cells`: (variance, dof). The variance divides the
    runs' squared deviations by the runs' degrees of freedom; its own dof counts groups, not runs
    (a group's runs share its model, cluster and GPU count: they are not independent draws).
    NaN variance where no cell has two runs."""
    runs = sum(c.n - c.n_strata for c in cells)
    dof = sum(max(min(c.groups, c.n) - c.n_strata, 0) for c in cells)
    return (sum(c.sum_sq for c in cells) / runs, float(dof)) if runs > 0 else (math.nan, 0.0)


def dersimonian_laird(y: np.ndarray, v: np.ndarray) -> tuple[float, float, float]:
    """(Q, C, k - 1) of the DerSimonian-Laird estimator: tau^2 = max(0, (Q - (k - 1)) / C)."""
    w = 1.0 / v
    mean = np.sum(w * y) / np.sum(w)
    return float(np.sum(w * (y - mean) ** 2)), float(np.sum(w) - np.sum(w * w) / np.sum(w)), float(len(y) - 1)


def stack_tau2(by_stack: dict[str, list[Cell]], within: dict[str, float]) -> dict[str, tuple[float, float]]:
    """The between-source variance and its dof, one value common to every stack (and under key ""):
    T^2 = (sum Q_j - sum df_j) / sum C_j over the stacks with two sources or more, each stack its own
    mean, dof sum df_j (Borenstein et al. 2009, ch. 19: each source counts once, not each run;
    pooled, as that chapter advises where subgroups hold few studies); (0, 0) where no stack has
    two sources."""
    parts = []
    for stack, cells in by_stack.items():
        if len(cells) >= 2:
            y = np.array([x.mean for x in cells])
            v = np.array([max(within[stack], VAR_FLOOR) / max(x.groups, 1) for x in cells])
            parts.append(dersimonian_laird(y, v))
    q_sum, c_sum, dof = (sum(p[i] for p in parts) for i in range(3))
    pooled = (max(0.0, (q_sum - dof) / c_sum), dof) if c_sum > 0.0 else (0.0, 0.0)
    return {"": pooled, **{s: pooled for s in by_stack}}


@dataclass(frozen=True)
class Predictive:
    """The predictive distribution of a run's log error: centre, variance, degrees of freedom."""

    mu: float
    var: float
    dof: float
    runs: int
    sources: int

    @property
    def log_sd(self) -> float:
        """The normal-equivalent spread of the centred 80% interval: h / Z80."""
        return symmetric_half_width(self.mu, math.sqrt(self.var), self.dof) / Z80


def stack_mean(cells: list[Cell], within2: float, tau2: float) -> tuple[float, float]:
    """The stack's random-effects mean error over its sources and its variance (se^2)."""
    if not cells:
        raise ValueError("interval model: a stack's mean needs at least one source")
    w = np.array([1.0 / (max(within2, VAR_FLOOR) / max(x.groups, 1) + tau2) for x in cells])
    y = np.array([x.mean for x in cells])
    return float(np.sum(w * y) / np.sum(w)), float(1.0 / np.sum(w))


def known_stack(cells: list[Cell], within2: float, within_dof: float, tau2: float, tau_dof: float) -> Predictive:
    """A run of a new source of a stack known from `cells` (its other sources)."""
    mu, se2 = stack_mean(cells, within2, tau2)
    dof = satterthwaite([(tau2 + se2, tau_dof), (within2, within_dof)])
    return Predictive(mu, tau2 + se2 + within2, dof, sum(x.n for x in cells), len(cells))


def new_stack(
    stack_means: list[tuple[float, float]], within2: float, within_dof: float, tau2: float, tau_dof: float
) -> Predictive:
    """A run of a stack without published runs: the other stacks' means when each was left out
    whole ((mean, se^2) each), DerSimonian-Laird across them, plus a source's and a run's spread."""
    if not stack_means:
        raise ValueError("interval model: a stack without published runs needs other stacks' errors")
    y = np.array([m for m, _ in stack_means])
    v = np.array([max(s, 1e-12) for _, s in stack_means])
    q, c, k1 = dersimonian_laird(y, v)
    between = max(0.0, (q - k1) / c) if c > 0.0 else 0.0
    w = 1.0 / (v + between)
    mu, se2 = float(np.sum(w * y) / np.sum(w)), float(1.0 / np.sum(w))
    dof = satterthwaite([(between + se2, k1), (tau2, tau_dof), (within2, within_dof)])
    return Predictive(mu, between + se2 + tau2 + within2, dof, 0, len(stack_means))


@dataclass(frozen=True)
class GpuFit:
    """How far a GPU's fitted sustained efficiency may be off, in log step time.

    A fitted GPU's scale sets the median error of its fitting rows to zero: its error is that
    median's, (pi / 2) group_var / groups (the groups' scatter inside one source) plus
    source_var / sources, sources the Kish effective count (sum n)^2 / sum n^2 of the rows per
    source (the median weighs rows, so one large source weighs as nearly one: `fit_var`). The
    stacks' leave-one-source-out errors already hold that error (each fold refitted the scales
    without its source), so an interval adds only what they do not hold (`var`): nothing for a
    fitted GPU; for a GPU that took a sibling's scale (same silicon, another system) one whole
    source_var (its own system sits like one more source). A GPU fitted on nothing keeps its microbenchmark value:
    `unfitted_var`, the mean square of ln(fitted scale) over the fitted GPUs (how far a training
    job's sustained efficiency sits from the microbenchmark's), times Student's t over the normal
    at as many degrees of freedom as fitted GPUs. Each variance is stored at Student's t of the
    degrees of freedom it was estimated with, as a normal-equivalent (x (t_90% / Z80)^2)."""

    support: dict[str, tuple[int, float]]  # fitted GPU -> (groups, Kish effective sources) of its rows
    group_var: float
    source_var: float
    unfitted_var: float

    def var(self, gpu: str) -> float:
        """The variance of ln(step) from `gpu`'s efficiency that the leave-one-source-out errors do
        not already hold: what an interval adds (`spreads.gpu_fit_var`)."""
        sd = (math.sqrt(self.group_var), math.sqrt(self.source_var), math.sqrt(self.unfitted_var))
        return gpu_fit_var(self.support, *sd, gpu)

    def fit_var(self, gpu: str) -> float:
        """The variance of a fitted GPU's median-fitted scale, in log step time: (pi / 2)
        group_var / groups + source_var / Kish effective sources (held by the LOO errors)."""
        groups, sources = self.support[gpu]
        return math.pi / 2 * self.group_var / groups + self.source_var / sources


def kish(n: np.ndarray) -> float:
    """Kish's effective count of units weighted n each: (sum n)^2 / sum n^2 (Kish 1965, Survey
    Sampling): 50, 4 and 2 rows -> 1.24 sources, not 3."""
    return round(float(np.sum(n) ** 2 / np.sum(n**2)), 2)


def gpu_fit(fitted: dict[str, list[tuple[float, str, str]]], scales: dict[str, float]) -> GpuFit:
    """`GpuFit` from each fitted GPU's fitting rows at its fitted scale: (log error, group,
    source) per row (a source: one publication's runs of one stack), and the fitted scales."""
    g_ss = g_dof = s_ss = s_dof = 0.0
    support, per_source_groups = {}, []
    for gpu, rows in fitted.items():
        groups: dict[tuple[str, str], list[float]] = {}
        for e, group, source in rows:
            groups.setdefault((source, group), []).append(e)
        by_source: dict[str, list[float]] = {}
        for (source, _), v in groups.items():
            by_source.setdefault(source, []).append(float(np.mean(v)))
        for means in by_source.values():
            g_ss += float(np.sum((np.array(means) - np.mean(means)) ** 2))
            g_dof += len(means) - 1
        source_means = np.array([np.mean(m) for m in by_source.values()])
        s_ss += float(np.sum((source_means - source_means.mean()) ** 2))
        s_dof += len(source_means) - 1
        per_source_groups += [len(m) for m in by_source.values()]
        rows_per_source = np.array([sum(s == source for _, _, s in rows) for source in by_source], dtype=float)
        support[gpu] = (len(groups), kish(rows_per_source))
    logs = np.log(np.array([scales[g] for g in fitted])) if fitted else np.zeros(0)
    unfitted = float(np.mean(logs**2)) * (t_quantile(len(logs)) / Z80) ** 2 if len(logs) else math.nan
    group_var = g_ss / g_dof if g_dof else 0.0
    # a source's mean carries its groups' scatter / its groups: the moment estimate takes it out
    noise = group_var * float(np.mean([1.0 / n for n in per_source_groups])) if per_source_groups else 0.0
    source_var = max(0.0, s_ss / s_dof - noise) if s_dof else 0.0
    # each at Student's t of its own degrees of freedom, as a normal-equivalent variance
    return GpuFit(
        support,
        group_var * (t_quantile(g_dof) / Z80) ** 2 if g_dof else 0.0,
        source_var * (t_quantile(s_dof) / Z80) ** 2 if s_dof else 0.0,
        unfitted,
    )


def variance_prior(variances: list[tuple[float, float]]) -> tuple[float, float]:
    """The prior (s0^2, d0) of a set of sample variances (each (s^2, its dof > 0)), fitted by the
    moments of log s^2 (Smyth 2004, Stat. Appl. Genet. Mol. Biol. 3(1) art. 3, section 6.2): each
    s^2 is s0^2 x chi^2_d0 / d0 a priori, e = log s^2 - psi(d / 2) + log(d / 2), mean(e) and
    var(e) - mean(psi'(d / 2)) = psi'(d0 / 2). d0 = inf where the variances scatter no more than
    their own dof explain (one common variance); one variance alone is its own prior at no dof
    (a stack moderated by it keeps its own dof, not twice them)."""
    from scipy.optimize import brentq
    from scipy.special import digamma, polygamma

    if not variances:
        return VAR_FLOOR, 0.0
    if len(variances) == 1:  # its own prior, worth nothing more than itself: no prior dof
        return max(variances[0][0], VAR_FLOOR), 0.0
    raw = np.array([x for x, _ in variances])
    # limma's fitFDist floor, relative to the median: a variance of 0 (runs that repeat a rounded
    # figure) must not drag the log-moments and with them every other stack's variance
    v = np.maximum(raw, max(1e-5 * float(np.median(raw)), VAR_FLOOR))
    d = np.array([x for _, x in variances], dtype=float)
    e = np.log(v) - digamma(d / 2) + np.log(d / 2)
    excess = float(np.var(e, ddof=1) - np.mean(polygamma(1, d / 2)))
    if excess <= float(polygamma(1, 1e8)):  # no scatter beyond the dof's own: one common variance
        return float(np.exp(np.mean(e))), math.inf
    half = brentq(lambda x: float(polygamma(1, x)) - excess, 1e-8, 1e8)
    return float(np.exp(np.mean(e) + digamma(half) - np.log(half))), 2.0 * half


def _within(cells_: list[Cell]) -> dict[str, tuple[float, float]]:
    """Each stack's within-source variance and dof, moderated (Smyth 2004, `variance_prior`): with
    the stacks' prior (s0^2, d0) fitted on the stacks whose variance has dof, a stack's is
    (d0 s0^2 + d s^2) / (d0 + d) at d0 + d dof, so one resting on one or two groups borrows the
    others' instead of setting Student's t at 1-2 dof; a stack whose sources have one run each, or
    one group, takes the prior, which is also the value under key "" (a stack without runs)."""
    if not cells_:
        raise ValueError("interval model: no leave-one-out errors to build an interval from")
    by: dict[str, list[Cell]] = defaultdict(list)
    for c in cells_:
        by[c.stack].append(c)
    own = {s: within_variance(cs) for s, cs in by.items()}
    s0, d0 = variance_prior([(v, d) for v, d in own.values() if math.isfinite(v) and d > 0])
    s0 = max(s0, VAR_FLOOR)

    def moderated(v: float, d: float) -> tuple[float, float]:
        if not (math.isfinite(v) and d > 0):
            return s0, d0
        if math.isinf(d0):
            return s0, math.inf
        return max((d0 * s0 + d * max(v, 0.0)) / (d0 + d), VAR_FLOOR), d0 + d

    return {"": (s0, d0), **{s: moderated(v, d) for s, (v, d) in own.items()}}


def predictive(stack: str, known: list[Cell], whole: list[Cell]) -> Predictive:
    """A new source's run of `stack`: from `known` (leave-one-source-out cells of the other
    sources) when it holds the stack, else as a stack without published runs, from `whole` (the
    other stacks' cells when each was left out whole)."""
    by: dict[str, list[Cell]] = defaultdict(list)
    for c in known:
        by[c.stack].append(c)
    within = _within(known)
    tau2 = stack_tau2(dict(by), {s: v for s, (v, _) in within.items()})
    if by.get(stack):
        return known_stack(by[stack], *within[stack], *tau2[stack])
    whole_by: dict[str, list[Cell]] = defaultdict(list)
    for c in whole:
        if c.stack != stack:
            whole_by[c.stack].append(c)
    whole_within = _within(whole)
    means = [stack_mean(cs, whole_within[s][0], tau2.get(s, tau2[""])[0]) for s, cs in sorted(whole_by.items())]
    new = new_stack(means, *within[""], *tau2[""])
    # never narrower than the widest stack with published runs (the module docstring)
    widest = max((known_stack(cs, *within[s], *tau2[s]) for s, cs in by.items()), key=lambda p: p.log_sd, default=new)
    return new if new.log_sd >= widest.log_sd else replace(widest, runs=0, sources=new.sources)
