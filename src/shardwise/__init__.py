"""shardwise: time and memory of transformer training under tensor, pipeline and data parallelism.

    >>> from shardwise import presets, Plan, Scenario, estimate_training_step
    >>> est = estimate_training_step(Scenario(presets.model("gpt3-175b"),
    ...                                       presets.system("dgx-a100", nodes=8),
    ...                                       Plan(tp=8, pp=8, global_batch=64, recompute="full")))

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
