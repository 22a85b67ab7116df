"""Review 41 #1: the planner prices every candidate exactly as `predict` prices the same layout.
A stack field that depends on the candidate (nanotron's host count of its asynchronous
REDUCE_SCATTER linears, 206 with sequence parallelism against 160 without) was resolved once per
request, so `plan` priced nanotron's SP layouts 12-20% fast on host-bound layers. Sampled
candidates of several stacks, with SP on and off, against their `predict` requests (closed form)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from shardwise.analyses.plan_search import columns_scenario
from shardwise.engines.training import estimate_training_step
from shardwise.requests.plan import PlanRequest, row_request

CELLS = (
    "--model llama3.2-1b --seq-len 4096 --system dgx-h100 --nodes 1 --global-batch 256 --framework nanotron",
    "--model llama3.2-1b --seq-len 4096 --system dgx-h100 --nodes 1 --global-batch 256 --framework nanotron-defaults",
    "--model llama3.1-8b --seq-len 4096 --system dgx-h100 --nodes 1 --global-batch 64 --framework torchtitan",
    "--model llama3.1-8b --seq-len 4096 --system dgx-h100 --nodes 1 --global-batch 64 --framework megatron-core",
)


def _sample(search, n: int = 6) -> list[int]:
    """Up to n candidates of each SP value with tp > 1 (and pp = 1 and 2), spread over the table."""
    cols = search.columns
    out: list[int] = []
    for sp in (0, 1):
        idx = np.flatnonzero((cols["sequence_parallel"] == sp) & (cols["tp"] > 1))
        out += idx[np.linspace(0, idx.size - 1, min(n, idx.size)).astype(int)].tolist() if idx.size else []
    return out


@pytest.mark.parametrize("argv", CELLS)
def test_plan_prices_each_candidate_as_predict_does(argv):
    request = PlanRequest.from_argv(argv)
    search = request.search()
    sample = _sample(search)
    assert sample
    cols = {k: v[sample] for k, v in search.columns.items()}
    plan = estimate_training_step(
        columns_scenario(search.model, search.cluster, search.global_batch, search.space, cols)
    )
    step = np.broadcast_to(np.asarray(plan.step_time_s, dtype=float), (len(sample),))
    for j, i in enumerate(sample):
        predicted = dataclasses.replace(row_request(search, i, request.training), engine="analytic").run()
        assert float(np.asarray(predicted.estimate.step_time_s)) == pytest.approx(step[j], rel=1e-9), (argv, i)
        # and the search's own one-plan scenario (`PlanSearch.plan`) is the same plan
        alone = estimate_training_step(search.scenario(i))
        assert float(np.asarray(alone.step_time_s)) == pytest.approx(step[j], rel=1e-9)


def test_nanotron_sp_candidates_take_the_async_host_count():
    search = PlanRequest.from_argv(CELLS[0]).search()
    cols = search.columns
    for sp, ops in ((1, 206.0), (0, 160.0)):
        i = int(np.flatnonzero((cols["sequence_parallel"] == sp) & (cols["tp"] > 1))[0])
        assert float(search.plan(i).layer_host_ops) == ops
