"""Frozen value types with SI units: what the user asks about, checked on construction."""

from shardwise.specs._checks import SpecError
from shardwise.specs.hardware import PRECISION_BYTES, Cluster, GemmTable, Gpu, Link
from shardwise.specs.model import Model
from shardwise.specs.plan import Plan, Recompute, Schedule
from shardwise.specs.scenario import Scenario

__all__ = [
    "PRECISION_BYTES",
    "Cluster",
    "GemmTable",
    "Gpu",
    "Link",
    "Model",
    "Plan",
    "Recompute",
    "Scenario",
    "Schedule",
    "SpecError",
]
