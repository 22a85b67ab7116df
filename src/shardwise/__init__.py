"""shardwise: time and memory of transformer training and serving under tensor, pipeline, data,
context and expert parallelism.

    >>> from shardwise import presets, Plan, Scenario, estimate_training_step
    >>> est = estimate_training_step(Scenario(presets.model("gpt3-175b"),
    ...                                       presets.system("dgx-a100", nodes=8),
    ...                                       Plan(tp=8, pp=8, global_batch=64, recompute="full")))
    >>> step_s, mfu, parts_s, memory_bytes = est.step_time_s, est.mfu, est.breakdown.as_dict(), est.memory.total_bytes

The specs (`Gpu`, `Link`, `Cluster`, `Model`, `Plan`, `Scenario`; SI units, any numeric field a
numpy array), `estimate_training_step` (a `TrainingEstimate`), the serving model
(`estimate_serving` of a `ServingWorkload` on a scenario of `plan_for_serving`), `presets` (the
built-in GPUs, links, systems, models, frameworks) and `SpecError` (every invalid input). The
command line's questions, with its defaults, framework presets and 80% intervals, are the
requests of `shardwise.requests` (`TrainingRequest`, `PredictRequest`, `PlanRequest`, ...);
`shardwise.export` writes results as JSON. docs/api.md has examples.

Names are imported on first use, so `import shardwise` stays fast.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "Gpu": "shardwise.specs",
    "Link": "shardwise.specs",
    "Cluster": "shardwise.specs",
    "Model": "shardwise.specs",
    "Plan": "shardwise.specs",
    "Scenario": "shardwise.specs",
    "Schedule": "shardwise.specs",
    "Recompute": "shardwise.specs",
    "SpecError": "shardwise.errors",
    "ServingWorkload": "shardwise.specs.serving",
    "estimate_serving": "shardwise.engines.serving",
    "plan_for_serving": "shardwise.engines.serving",
    "TrainingEstimate": "shardwise.engines.result",
    "estimate_training_step": "shardwise.engines.training",
    "presets": "shardwise.presets",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        module = importlib.import_module(_EXPORTS[name])
        value = module if module.__name__.endswith("." + name) else getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'shardwise' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
