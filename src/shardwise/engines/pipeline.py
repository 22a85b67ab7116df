"""The pipeline's makespan in closed form, shared by the training, forward and serving engines.

With c_j one micro-batch's work on stage j (forward + backward + blocking sends in training; the
forward in inference), m micro-batches and v model chunks per GPU (Narayanan et al. 2021 Sec.
2.2): T = m max_j c_j + (sum_j c_j - max_j c_j) / v.
"""

from __future__ import annotations

import numpy as np

from shardwise.arrays import where
from shardwise.specs._checks import Number


def pipeline_makespan_s(
    c_first: Number,
    c_middle: Number,
    c_last: Number,
    pp: Number,
    micro_batches: Number,
    vpp: Number = 1,
    c_middle_sum: Number | None = None,
) -> Number:
    """T = m max_j c_j + (sum_j c_j - max_j c_j) / v for stages first, middle ones, last.

    c_j is one micro-batch's forward + backward (+ sends) on stage j; `c_middle` is the slowest
    middle stage and `c_middle_sum` all middle stages together (default (p - 2) c_middle, equal
    stages). Equal stages give (m + (p - 1)/v) c: the bubble (p - 1)/m of GPipe and 1F1B
    (Narayanan et al. 2021 Sec. 2.2), divided by v with v model chunks per GPU (Sec. 2.2.2).
    With p = 1 the single stage is c_first.
    """
    p = np.asarray(pp, dtype=float)
    c_max = np.maximum(np.maximum(c_first, where(p > 2, c_middle, 0.0)), c_last)
    mids = (p - 2) * c_middle if c_middle_sum is None else c_middle_sum
    c_sum = where(p == 1, c_first, c_first + where(p > 2, mids, 0.0) + c_last)
    return micro_batches * c_max + (c_sum - c_max) / vpp
