"""The tie zone of a crossover (`analyses.crossover`): the span of the swept variable around a
switch where the two plans' times cannot be told apart at 80% confidence. It is judged on their
ratio, as `sensitivity` and `plan` judge two layouts: the ratio's 80% interval r exp(+-z sd) holds
1, with sd the spread of two layouts' ratio (`analyses.bands.ratio_log_sd`; uncalibrated
`calibration.spreads.PAIR_LOG_SD`, a bias both layouts share cancelling), not two independent
bands that merely overlap (review 51 #3: those made a tie of batch 9 to 32 on the brief's NVLink
experiment, where `sensitivity` gives ratios 0.82 (0.74-0.90) and 1.16 (1.05-1.28))."""

from __future__ import annotations

from typing import Any

import numpy as np

from shardwise.analyses.evaluate import times_s
from shardwise.calibration.spreads import Z80
from shardwise.specs.experiment import Experiment, LinkSpec, PlanSpec


def ratio_sd(
    exp: Experiment,
    link: LinkSpec,
    variable: str,
    dense: np.ndarray,
    plans: dict[str, PlanSpec],
    c: Any,  # analyses.crossover.Crossing
    priced: dict[tuple[str, str], Any],
) -> np.ndarray:
    """The 80% band width (log) of time(before) / time(after) on the dense grid: the spread of two
    layouts' ratio that `sensitivity` and `plan` use (`analyses.bands.ratio_log_sd`; uncalibrated
    `calibration.spreads.PAIR_LOG_SD`), not the two plans' own bands taken as independent (review 51
    #3: those put a tie from batch 9 to 32 where sensitivity's ratio is 0.82 and 1.16, no tie)."""
    from shardwise.analyses.bands import ratio_log_sd

    a, b = plans[c.before], plans[c.after]
    ta, tb = priced[(link.label, a.label)][0], priced[(link.label, b.label)][0]
    return ratio_log_sd(
        exp,
        lambda e: times_s(e, a, link.link, variable, dense)[0],
        lambda e: times_s(e, b, link.link, variable, dense)[0],
        ta,
        tb,
    )


def with_tie_range(c: Any, dense: np.ndarray, times: dict[str, np.ndarray], sd: np.ndarray) -> Any:
    """The crossing `c` (`analyses.crossover.Crossing`) with the span of the variable around it
    where the two plans tie: the 80% interval of their time ratio, r exp(+-z sd_ratio), holds 1,
    |ln(t_before / t_after)| <= z sd_ratio."""
    from dataclasses import replace

    with np.errstate(divide="ignore", invalid="ignore"):
        gap = np.abs(np.log(times[c.before] / times[c.after]))
    overlap = gap <= Z80 * sd  # NaN (a plan infeasible) is False
    i = int(np.clip(np.searchsorted(dense, c.at), 0, len(dense) - 1))
    near = [j for j in (i - 1, i) if 0 <= j < len(dense) and overlap[j]]
    if not near:  # the ratio's interval excludes 1 on both sides: a clear switch at this confidence
        return c
    lo = hi = near[0]
    while lo > 0 and overlap[lo - 1]:
        lo -= 1
    while hi < len(dense) - 1 and overlap[hi + 1]:
        hi += 1
    return replace(c, range_low=float(min(dense[lo], c.at)), range_high=float(max(dense[hi], c.at)))
