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


def split_embedding_sync(parts: dict[str, Any], one_replica: bool) -> dict[str, Any]:
    """With `one_replica` (dp = cp = 1, a dense model) what `dp_comm` holds is the tied embedding's
    gradient sync between the first and last pipeline stage, not data-parallel traffic: it goes under
    its own key, `embedding_sync`, after a `dp_comm` of 0.0, as the text tables name it (the JSON of
    predict and crossover)."""
    if not one_replica or "dp_comm" not in parts:
        return parts
    out: dict[str, Any] = {}
    for k, v in parts.items():
        out.update({"dp_comm": 0.0, "embedding_sync": v} if k == "dp_comm" else {k: v})
    return out


def json_breakdown(result: CrossoverResult, c: Crossing) -> dict[str, dict[str, float]] | None:
    """`crossing_breakdown` for JSON: with one replica the tied embedding's sync under its own key,
    `embedding_sync`, as predict's JSON and the text tables (`split_embedding_sync`)."""
    parts = crossing_breakdown(result, c)
    if parts is None:
        return None
    plans = {p.label: p for p in result.experiment.plans}
    return {name: split_embedding_sync(v, one_replica_at(result, plans[name], c.at)) for name, v in parts.items()}
