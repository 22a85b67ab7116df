"""The request layer: one frozen request per question, built from plain fields with one set of
defaults and one validation, answered by `run()`, and turned back into a command line
(`to_argv`) or a CSV row. The command line, the explorer, calibration, public validation and the
planner's rows all ask through it, so they give the same numbers for the same words.

This layer never imports `shardwise.cli` or `shardwise.explore` (a test checks the rule).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CalibrateRequest",
    "CrossoverRequest",
    "ExperimentRequest",
    "MeasureCrossoverRequest",
    "MeasureStepRequest",
    "MicroRequest",
    "PlanRequest",
    "PredictRequest",
    "PredictResult",
    "SensitivityRequest",
    "ServeRequest",
    "SweepRequest",
    "TimelineRequest",
    "TrainingRequest",
]

_WHERE = {
    "TrainingRequest": "shardwise.requests.training",
    "PredictRequest": "shardwise.requests.training",
    "PredictResult": "shardwise.requests.training",
    "PlanRequest": "shardwise.requests.plan",
    "TimelineRequest": "shardwise.requests.timeline",
    "ExperimentRequest": "shardwise.requests.compare",
    "CrossoverRequest": "shardwise.requests.compare",
    "SweepRequest": "shardwise.requests.compare",
    "SensitivityRequest": "shardwise.requests.sensitivity",
    "ServeRequest": "shardwise.requests.serve",
    "MeasureStepRequest": "shardwise.requests.measure",
    "MeasureCrossoverRequest": "shardwise.requests.measure",
    "MicroRequest": "shardwise.requests.measure",
    "CalibrateRequest": "shardwise.requests.calibrate",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'shardwise.requests' has no attribute {name!r}")
