"""The published scaling ratios' own run-to-run noise (issue #37: is a wrong direction a flat line
whose sign is noise?). llama-bench prints each rate as the mean and the standard deviation of its
repetitions (`-r 5` by default: "t/s 771.28 ± 0.87"); `data/public_serving_multi_gpu.csv` keeps
that deviation as `value_sd` for XiongjieDai's rows (read from the same notebooks as the means;
empty where a source prints none). A ratio r = a / b of two such means, from two runs, has the
standard deviation r sqrt((s_a / a)^2 + (s_b / b)^2). A measured ratio within `NOISE_SDS` of them
of 1 could have its sign set by the repetitions' noise; the direction's definition
(`serving_scaling.ScalingRow.direction_right`) is not changed by it: this only says how many of the
wrong directions that noise could explain. It measures one session on one pod: the notebooks of
1 and k GPUs were run hours apart, on pods whose differences (clocks, the card's own specimen)
llama-bench's deviation does not see.
"""

from __future__ import annotations

import math

from shardwise.analyses.serving_pcie import serving_rows

# A measured ratio within this many standard deviations of 1 is "within the noise" (two-sided, ~95%).
NOISE_SDS = 2.0


def ratio_sd(group: str, gpus: int, base_gpus: int) -> float:
    """The standard deviation of the measured ratio (value at `gpus`) / (value at `base_gpus`) of a
    comparison group's rows, from their `value_sd`; 0 where either row has none."""
    by = {
        int(r["num_gpus"]): (float(r["value"]), r.get("value_sd", ""))
        for r in serving_rows()
        if r["comparison_group"] == group
    }
    if gpus not in by or base_gpus not in by or not by[gpus][1] or not by[base_gpus][1]:
        return 0.0
    (a, sa), (b, sb) = (by[gpus][0], float(by[gpus][1])), (by[base_gpus][0], float(by[base_gpus][1]))
    return a / b * math.hypot(sa / a, sb / b)


def within_noise(measured: float, sd: float) -> bool | None:
    """Whether a measured ratio lies within `NOISE_SDS` standard deviations of 1 (None where its
    deviation is unknown, 0: not printed, or printed as 0.00 on both sides)."""
    return abs(measured - 1.0) <= NOISE_SDS * sd if sd > 0 else None
