"""`fits_in_memory` on the published training runs that `shardwise validate public` prices: every
one of them ran, so a run called out of memory is a false OOM (`validate memory` prints the count
beside the memory evidence of `analyses.memory_validation`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardwise.engines.training import training_memory
from shardwise.errors import SpecError


@dataclass(frozen=True)
class PublishedFit:
    """`fits_in_memory` on one source's published training runs, every one of which ran."""

    source: str
    runs: int
    called_oom: int  # false OOMs: the estimate is over the GPU preset's memory
    moe_runs: int = 0  # of `runs`, mixture-of-experts runs
    moe_called_oom: int = 0  # of `called_oom`, mixture-of-experts runs
    oom_ids: tuple[str, ...] = ()  # the rows called out of memory
    over_headroom: int = 0  # runs `plan` would drop: less than its headroom share of the GPU left free


def published_runs_fit(headroom_share: float = 0.1) -> tuple[PublishedFit, ...]:
    """`fits_in_memory` on the published training runs `shardwise validate public` prices
    (`data/public_training_runs.csv`): they ran, so a run called out of memory is a false OOM, or a
    run whose row leaves out a recomputation, an offload or a memory setting its source used. Rows
    whose source reports an out-of-memory rank (`parse_notes`: "reports OOM") are left to the
    memory evidence, where they are out-of-memory runs. Each row is read as `validate public` reads
    it (`public_moe.resolved`: a mixture-of-experts row with its model preset and layers filled in).
    `headroom_share`: the share of each GPU `plan` keeps free (requests.training.PLAN_MEMORY_HEADROOM),
    for `PublishedFit.over_headroom`."""
    from shardwise.analyses import public_validation

    counts: dict[str, list[int]] = {}
    ids: dict[str, list[str]] = {}
    for raw in public_validation.raw_rows():
        row = public_validation.public_moe.resolved(raw)
        if public_validation.skip_reason(row) or "reports OOM" in row["parse_notes"]:
            continue
        try:
            scn = public_validation.scenario_for(row)
        except SpecError:
            continue
        total, capacity = float(np.asarray(training_memory(scn).total_bytes)), float(scn.cluster.gpu.memory_bytes)
        over = total > capacity
        source, moe = public_validation.source_of(row), row["moe"] == "yes"
        tally = counts.setdefault(source, [0, 0, 0, 0, 0])
        tally[0] += 1
        tally[1] += int(over)
        tally[2] += int(moe)
        tally[3] += int(over and moe)
        tally[4] += int(total > (1.0 - headroom_share) * capacity)
        if over:
            ids.setdefault(source, []).append(row["id"])
    return tuple(PublishedFit(s, *t[:4], oom_ids=tuple(ids.get(s, ())), over_headroom=t[4]) for s, t in counts.items())
