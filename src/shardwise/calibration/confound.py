"""Parameters the runs cannot tell apart, and the run that would (review 47 #5).

Runs that vary only the GPU count at a fixed number of micro-batches per GPU are about as long
each: a fixed time per step and slower GEMMs both lengthen every one of them by the same share,
and a fit takes whichever comes first (`calibration.explain`), though the two predict a larger
global batch differently (the overhead stays, the GEMM time grows with it).

`confounded`: for each fitted parameter X and each parameter Y the runs are sensitive to but the
fit left out (d ln t / d u above SENSITIVE per prior sd on some run), Y can stand for X where
their sensitivities over the runs point the same way (|cos| of the two columns of G = d ln t / d u,
each scaled by its prior sd, at least COLLINEAR: the Fisher information of the pair is then
near-singular) and the fit with Y in X's place explains the runs as well: its -2 log evidence
(`explain.score`, both fits with their wide priors) within MIN_GAIN of X's, the margin forward
selection asks of a parameter (`explain.MIN_GAIN`; Kass & Raftery 1995: a Bayes factor below
e^1, "not worth more than a bare mention").

`separation`: how much a further run would tell X from Y: the two fits' values differ by du (u
space, every parameter), and a run's ln t by g . du between them (g = d ln t / d u there, linearised
at the calibration): measured within the noise sigma, a run separates them where |g . du| exceeds
sigma; runs of the same proportions as those fitted do not (both fits explain them).

`HOW`: what kind of run changes one's share and not the other's, in words (the physics of each
pair: a per-step time against per-token compute, a per-micro-batch time against per-token compute,
a per-micro-batch GEMM ramp against a flat GEMM scale, ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from shardwise.calibration.parameters import PARAMETERS

COLLINEAR = 0.95  # |cos| of two scaled sensitivity columns over the runs from which they may stand for each other
SENSITIVE = 0.01  # d ln t per prior sd: 1% on some run, or the runs do not measure the parameter

# What run separates each pair (either order), from what each parameter scales with
# (`calibration.parameters`): a fixed time per step, per micro-batch per stage, per token of GEMM.
PER_STEP = (
    "measure another number of micro-batches per step (another global batch on the same GPUs): a time per step "
    "stays, the GEMMs' time grows with the tokens"
)
HOW = {
    frozenset(("step_overhead_s", "matmul_efficiency_scale")): PER_STEP,
    frozenset(("step_overhead_s", "gemm_half_rate_tokens")): PER_STEP,
    frozenset(("step_overhead_s", "micro_batch_overhead_s")): PER_STEP,
    frozenset(("micro_batch_overhead_s", "matmul_efficiency_scale")): (
        "measure another micro-batch size at the same global batch: the tokens stay, the micro-batches change"
    ),
    frozenset(("gemm_half_rate_tokens", "matmul_efficiency_scale")): (
        "measure another micro-batch size or sequence length: the ramp slows small micro-batches' GEMMs only"
    ),
    frozenset(("memory_bandwidth_scale", "matmul_efficiency_scale")): (
        "measure another sequence length or micro-batch size, or a decode (serving) run: HBM-bound kernels and "
        "GEMMs take other shares there"
    ),
    frozenset(("inter_node_bandwidth_scale", "inter_node_scaling_exponent")): (
        "measure another number of servers: the exponent's effect grows with it, the scale's does not"
    ),
}


@dataclass(frozen=True)
class Confound:
    fitted: str  # the parameter the fit took
    other: str  # one the runs cannot tell from it
    score_gap: float  # -2 log evidence of the fit with `other` in its place, less the fit's (|gap| < MIN_GAIN)
    delta_u: tuple[float, ...] = ()  # that fit's values less the fit's, u space (PARAMETERS order)

    def how(self) -> str:
        """The run that would tell them apart, in words (`HOW`)."""
        return HOW.get(frozenset((self.fitted, self.other)), "measure a run that changes one's share of the step alone")


def lines(pairs: tuple[Confound, ...]) -> list[str]:
    """One line per fitted parameter that the runs cannot tell from others: what `calibrate` prints."""
    out = []
    for x in dict.fromkeys(c.fitted for c in pairs):
        mine = [c for c in pairs if c.fitted == x]
        how = "; or ".join(dict.fromkeys(c.how() for c in mine))
        gaps = ", ".join(f"{c.score_gap:+.1f}" for c in mine)
        out.append(
            f"these runs cannot tell {x} from {' or '.join(c.other for c in mine)} (fitted in its place, each "
            f"explains them as well: -2 log evidence {gaps}): {how}"
        )
    return out


def gradient(cases: list[Any], values: dict[str, float] | None = None) -> np.ndarray:
    """d ln t / d u of each case (PARAMETERS order), at `values` (None: as the cases are priced)."""
    from shardwise.calibration.cases import Evaluator, log_step_and_gradient, with_values

    names = tuple(p.name for p in PARAMETERS)
    priced = cases if values is None else [with_values(c, values) for c in cases]
    _, g = log_step_and_gradient(Evaluator(priced), names, np.zeros(len(names)), {})
    return np.where(np.isfinite(g), g, 0.0)


def confounded(cases: list[Any], measured: np.ndarray, fitted: Any) -> tuple[Confound, ...]:
    """The pairs (a fitted parameter, one left out) the runs cannot tell apart (module docstring)."""
    from shardwise.calibration.cases import Evaluator
    from shardwise.calibration.explain import MIN_GAIN, _fitter, score
    from shardwise.calibration.together import side_by_side

    if not fitted.fitted or len(measured) < 2:
        return ()
    g = gradient(cases, fitted.values) * np.array([p.prior_sd for p in PARAMETERS])  # per prior sd
    norm = np.linalg.norm(g, axis=0)
    names = [p.name for p in PARAMETERS]
    pairs = []
    for x in fitted.fitted:
        i = names.index(x)
        for j, y in enumerate(names):
            if y in fitted.fitted or np.max(np.abs(g[:, j])) < SENSITIVE or norm[i] == 0:
                continue
            if abs(float(g[:, i] @ g[:, j])) / (norm[i] * norm[j]) >= COLLINEAR:
                pairs.append((x, y))
    if not pairs:
        return ()
    base = tuple(fitted.fitted)
    sets = [base] + [tuple(n for n in names if n in (*base, y) and n != x) for x, y in pairs]
    ev = Evaluator(cases)
    fits = side_by_side(ev, [_fitter(cases, measured, s) for s in sets])
    scores = [score(f, s) for f, s in zip(fits, sets, strict=True)]
    out = []
    for (x, y), s, f in zip(pairs, scores[1:], fits[1:], strict=True):
        if y in f.fitted and abs(s - scores[0]) < MIN_GAIN:
            du = tuple(p.u(f.values[p.name]) - p.u(fitted.values[p.name]) for p in PARAMETERS)
            out.append(Confound(x, y, s - scores[0], du))
    return tuple(out)


def separation(g: np.ndarray, pair: Confound) -> np.ndarray:
    """|g . du| of each case (module docstring): how much longer or shorter its step is under the fit
    with `pair.other` than under the fit with `pair.fitted` (log); `g` from `gradient`."""
    return np.abs(g @ np.asarray(pair.delta_u, dtype=float))
