"""The vectorized paths give exactly the scalar `predict`'s numbers for the same configuration
(the exact pipeline makespans price each plan by the same arithmetic whatever the plans beside it,
`engines.pipeline_1f1b`):
plans with array-valued fields (what `sweep`, `crossover` and the planner evaluate) against each
plan alone, and every row the planner prints against the `predict` command it gives.

The configurations are the invariant cases (`invariant_cases`) and, for each, a few siblings that
differ in the fields an array may hold (tp, pp, micro and global batch, recomputation, ZeRO stage,
sequence parallelism, schedule); the siblings that agree with the case in every other field are
stacked into one Plan of arrays.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from invariant_cases import Case, training_cases
from shardwise import presets
from shardwise.engines.training import estimate_training_step
from shardwise.errors import SpecError
from shardwise.specs import Plan, Scenario


def stacked(plans: list[Plan]) -> Plan | None:
    """One Plan whose fields are arrays where the plans differ, or None where they differ in a
    field that takes no array (a name, a tuple)."""
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(Plan):
        values = [getattr(p, f.name) for p in plans]
        if all(v == values[0] for v in values):
            fields[f.name] = values[0]
        elif any(v is None or isinstance(v, (str, tuple)) for v in values):
            return None
        else:
            fields[f.name] = np.array([int(v) if hasattr(v, "value") else v for v in values])
    return Plan(**fields)


def siblings(case: Case, rng: np.random.Generator, k: int) -> list[Scenario]:
    """Up to `k` valid configurations that differ from `case` in array-valued plan fields."""
    req = case.request
    gpus = int(presets.system(req.system, nodes=req.nodes).num_gpus)
    out = []
    for _ in range(k):
        tp, pp, mb = int(rng.choice([1, 2, 4, 8])), int(rng.choice([1, 2, 4])), int(rng.choice([1, 2, 4]))
        if gpus % (tp * pp * req.cp):
            continue
        dp = gpus // (tp * pp * req.cp)
        changes: dict[str, Any] = {
            "tp": tp,
            "pp": pp,
            "micro_batch": mb,
            "global_batch": dp * mb * pp * int(rng.integers(1, 6)),
            "recompute": str(rng.choice(["none", "selective", "full"])),
        }
        if rng.random() < 0.5:
            changes["zero"] = int(rng.choice([0, 1, 2, 3]))
        if rng.random() < 0.5:
            changes["sequence_parallel"] = bool(rng.random() < 0.5)
        if pp > 1 and rng.random() < 0.5:
            changes["schedule"] = str(rng.choice(["gpipe", "1f1b"]))
        try:
            scn = req.with_(**changes).scenario()
            float(estimate_training_step(scn).step_time_s)
        except SpecError:
            continue
        if scn.model == case.scenario.model and scn.cluster == case.scenario.cluster:
            out.append(scn)
    return out


def _numbers(est: Any, i: int | None = None, n: int = 1) -> dict[str, float]:
    """An estimate's numbers (element i of an estimate of n plans)."""
    pick = (lambda x: float(np.broadcast_to(np.asarray(x), (n,))[i])) if i is not None else float
    out = {"step_time_s": pick(est.step_time_s), "memory_bytes": pick(est.memory.total_bytes)}
    out |= {f"breakdown.{k}": pick(v) for k, v in est.breakdown.as_dict().items()}
    out |= {f"memory.{k}": pick(v) for k, v in est.memory.as_dict().items()}
    out |= {name: pick(getattr(est, name)) for name in ("mfu", "hfu", "bubble_fraction", "model_flops_per_step")}
    return out


def _mismatches(seed: int, n: int) -> tuple[int, list[str]]:
    rng = np.random.default_rng(seed)
    compared, bad = 0, []
    for case in training_cases(seed, n):
        plans = [case.scenario.plan, *(s.plan for s in siblings(case, rng, 6))]
        plan = stacked(plans)
        while plan is None and len(plans) > 2:  # drop the siblings that differ in a scalar field
            plans.pop()
            plan = stacked(plans)
        if plan is None:
            continue
        scn = case.scenario
        vector = estimate_training_step(Scenario(scn.model, scn.cluster, plan))
        for i, one in enumerate(plans):
            scalar = _numbers(estimate_training_step(Scenario(scn.model, scn.cluster, one)))
            got = _numbers(vector, i, len(plans))
            compared += 1
            diff = {k: (scalar[k], got[k]) for k in scalar if not np.array_equal(scalar[k], got[k], equal_nan=True)}
            if diff:
                bad.append(f"{case} sibling {i}: {diff}")
    return compared, bad


def test_array_plans_give_each_plans_numbers_exactly():
    compared, bad = _mismatches(21, 60)
    assert compared >= 200  # 200 configurations at least, each against its element of an array
    assert not bad, "\n".join(bad[:10])


@pytest.mark.slow
def test_array_plans_give_each_plans_numbers_many():
    compared, bad = _mismatches(22, 160)
    assert compared >= 600
    assert not bad, "\n".join(bad[:10])


@pytest.mark.parametrize(
    "argv",
    [
        "--model llama3-8b --system dgx-h100 --nodes 2 --global-batch 128",
        "--model mixtral-8x7b --system dgx-h100 --nodes 2 --global-batch 64",
        "--model gpt3-5b --system a100-pcie-8x --global-batch 32 --framework deepspeed",
        "--layers 12 --hidden 2048 --heads 16 --system mi300x-8x --global-batch 64 --framework torchtitan",
    ],
)
def test_every_plan_row_is_its_predict_commands_numbers(argv):
    """Each row the planner prints (`plan --json`, up to its top rows) is what its `command`, run
    by `predict`, gives: the same step time, memory and fit, to the last bit."""
    from shardwise.requests import PlanRequest, PredictRequest

    rows = PlanRequest.from_argv(argv).run().rows
    assert rows
    for row in rows:
        result = PredictRequest.from_argv(row["command"]).run()
        assert result.step_time_s == row["step_time_s"], row["command"]
        assert float(result.estimate.memory.total_bytes) == row["memory_bytes"]["total"], row["command"]
        assert bool(result.estimate.fits_in_memory) == row["fits_in_memory"], row["command"]
