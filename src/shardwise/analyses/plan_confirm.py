"""The closed form searches, the discrete-event simulator confirms: the planner's best plans with a
pipeline re-timed operation by operation (`confirm`), each simulated estimate kept per scenario
(`confirmed_estimate`, `CONFIRMED`), and which plans are simulated at all (`simulable`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from shardwise.analyses.plan_search import PlanSearch
from shardwise.engines.result import TrainingEstimate
from shardwise.engines.training import estimate_training_step
from shardwise.specs import Plan, Scenario
from shardwise.specs.memo import Memo

# The closed form searches, the discrete-event simulator confirms: the best CONFIRM_TOP plans (by
# the closed form) with a pipeline are re-timed operation by operation and re-ranked. The simulator
# prices what the closed form averages away: an interleaved schedule's sends hide behind compute
# in the steady state, but a micro-batch's v x p chunk hops are all on the fill and drain path, so
# over a slow link the closed form is optimistic (10% for Llama 3 8B, pp=2 v=8 over one 100 GbE
# link per server). Plans with more than CONFIRM_MAX_SLOTS (p x m x v) keep the closed form, which
# bounds the cost (about 7 ms per plan at 1,000 slots, 0.4 s at 65,000).
CONFIRM_TOP = 16
CONFIRM_ROUNDS = 4  # re-time the next CONFIRM_TOP while the best plan is an unchecked one
CONFIRM_MAX_SLOTS = 20_000
# then the best plan alone, re-timed until it is a checked one (at most this many more)
CONFIRM_SINGLES = 256


def simulable(plan: Plan) -> bool:
    """Whether the planner confirms this plan with the simulator (see CONFIRM_TOP)."""
    slots = int(plan.pp) * int(plan.num_micro_batches) * int(plan.vpp)
    # the simulator runs one schedule per step: separate flushes stay with the closed form
    return int(plan.pp) > 1 and slots <= CONFIRM_MAX_SLOTS and int(plan.pipeline_flushes) == 1


def confirmed_estimate(scn: Scenario) -> TrainingEstimate:
    """One plan's estimate as the planner reports it: the simulator's where `simulable`, the
    closed form otherwise. A simulated estimate is kept per scenario (`CONFIRMED`): a request
    re-times its best plans in the search and again among the alternatives it explains."""
    if not simulable(scn.plan):
        return estimate_training_step(scn)
    from shardwise.engines.simulated import simulate_training_step

    est = CONFIRMED.get_or_compute(scn, lambda: simulate_training_step(scn, records=False).estimate)
    return est if est.scenario is scn else dataclasses.replace(est, scenario=scn)


CONFIRMED = Memo("planner.confirmed_estimate", size=256)


def confirm(search: PlanSearch, indices: np.ndarray) -> tuple[TrainingEstimate | None, np.ndarray]:
    """The search's estimate of the plans that fit with the step time and breakdown of `indices`
    (plans that fit) from the simulator, and which of them it re-timed."""
    from dataclasses import replace

    est = search.fitting
    simulated = np.zeros(search.fits.size, dtype=bool)
    if est is None:
        return est, simulated
    fit = np.flatnonzero(search.fits)
    n = fit.size
    step = np.array(np.broadcast_to(np.asarray(est.step_time_s, dtype=float), (n,)))
    # the fields by name, not vars(): a breakdown gathered lazily (`engines.distinct`) holds only what was read
    fields = [f.name for f in dataclasses.fields(est.breakdown)]
    parts = {k: np.array(np.broadcast_to(np.asarray(getattr(est.breakdown, k), dtype=float), (n,))) for k in fields}
    for i in indices.tolist():
        scn = search.scenario(i)
        if not simulable(scn.plan):
            continue
        sim = confirmed_estimate(scn)
        simulated[i] = True
        j = int(np.searchsorted(fit, i))
        step[j] = float(np.asarray(sim.step_time_s))
        for k in parts:
            parts[k][j] = float(np.asarray(getattr(sim.breakdown, k)))
    if not simulated.any():
        return est, simulated
    breakdown = replace(est.breakdown, **parts)
    return replace(est, step_time_s=step, breakdown=breakdown, bubble_fraction=parts["pp_bubble_s"] / step), simulated
