"""The plans the search dropped only for its memory headroom (`within_headroom`): they fit in the
GPU's memory by the same estimate `predict` uses (`fits_in_memory`), allocator's share and the
runtime's reserve included, but not with `--memory-headroom` kept free too. `plan` lists them apart
with their predicted step time (review 41: on 32 DGX H100 a Llama 3 70B layout at 76.8 of 80 GB,
faster than the pick, was dropped as "needs 77 GB > 76 GB"), so a planner sees what the margin
costs. Why the margin: docs/planner.md ("Memory headroom").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardwise.analyses.plan_search import PlanSearch, columns_scenario


@dataclass(frozen=True)
class WithinHeadroom:
    """The plans that fit in the GPU but not with the headroom: their indices into the search's
    columns, fastest first, with their closed-form step times and memory."""

    indices: np.ndarray
    step_time_s: np.ndarray
    memory_bytes: np.ndarray


def within_headroom(search: PlanSearch) -> WithinHeadroom:
    """Every plan dropped only by the headroom, priced (closed form), fastest first."""
    from shardwise.engines.training import estimate_training_step, training_memory

    empty = WithinHeadroom(np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0))
    dropped = np.flatnonzero(~search.fits)
    if search.space.memory_headroom_bytes <= 0 or dropped.size == 0:
        return empty
    cols = {k: v[dropped] for k, v in search.columns.items()}
    scn = columns_scenario(search.model, search.cluster, search.global_batch, search.space, cols)
    total = np.broadcast_to(np.asarray(training_memory(scn).total_bytes, dtype=float), dropped.shape)
    inside = total <= float(search.cluster.gpu.memory_bytes)
    if not inside.any():
        return empty
    idx = dropped[inside]
    cols = {k: v[idx] for k, v in search.columns.items()}
    est = estimate_training_step(
        columns_scenario(search.model, search.cluster, search.global_batch, search.space, cols)
    )
    step = np.broadcast_to(np.asarray(est.step_time_s, dtype=float), idx.shape)
    order = np.argsort(step, kind="stable")
    return WithinHeadroom(idx[order], step[order], total[inside][order])
