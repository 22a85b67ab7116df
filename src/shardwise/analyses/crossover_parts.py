"""The parts of a crossing's time as crossover's JSON and text name them: with one data-parallel
replica of a dense model, `dp_comm` is the tied embedding's sync (review 45 #10)."""

from __future__ import annotations

from typing import Any

import numpy as np

from shardwise.analyses.crossover import Crossing, CrossoverResult, crossing_breakdown


def one_replica_at(result: CrossoverResult, plan: Any, at: float) -> bool:
    """Whether `plan` runs one data-parallel replica of a dense model at `at` (dp = cp = 1): what
    remains of its `dp_comm` is then the tied embedding's gradient sync between the first and last
    pipeline stage (`engines.result.StepBreakdown`), not data-parallel traffic."""
    exp = result.experiment
    gpus = at if result.variable == "gpus" else exp.gpus
    _, _, dp = plan.degrees(gpus)  # gpus / (tp pp cp)
    return not exp.model.is_moe and float(np.asarray(dp)) * dict(plan.options).get("cp", 1) == 1


def json_breakdown(result: CrossoverResult, c: Crossing) -> dict[str, dict[str, float]] | None:
    """`crossing_breakdown` for JSON: with one replica the tied embedding's sync under its own key,
    `embedding_sync`, as predict's JSON and the text tables (`export.seconds_parts`)."""
    from shardwise.export import seconds_parts

    parts = crossing_breakdown(result, c)
    if parts is None:
        return None
    plans = {p.label: p for p in result.experiment.plans}
    return {name: seconds_parts(v, one_replica_at(result, plans[name], c.at)) for name, v in parts.items()}
