"""Shared pieces of the brief's scenarios: the report type, the verdict and the common setting
(the brief's model on one DGX A100 with NVLink or PCIe Gen4 inside)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shardwise import presets
from shardwise.engines.training import estimate_training_step
from shardwise.specs import Model, Plan, Scenario

LINKS = {"NVLink": "nvlink3", "PCIe": "pcie4"}


@dataclass(frozen=True)
class Chart:
    """A figure as data: which `shardwise.plots` function draws it and with what. The analyses
    stay free of matplotlib; the edges (`shardwise scenario`, examples) draw it with
    `plots.draw(chart)`."""

    kind: str  # the name of a function in shardwise.plots
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


def chart(kind: str, *args: Any, **kwargs: Any) -> Chart:
    return Chart(kind, args, kwargs)


@dataclass(frozen=True)
class ScenarioReport:
    name: str
    title: str  # the brief's claim, in one line
    finding: str  # two lines, from the model's numbers
    numbers: dict[str, float]
    holds: bool  # does the brief's claim hold in the model?
    chart: Chart | None  # the figure to draw, or None when plots were not asked for


def verdict(holds: bool, fails_because: str = "") -> str:
    return "The claim holds." if holds else f"The claim fails{': ' + fails_because if fails_because else ''}."


def brief_cluster(link: str, gpus: int = 8) -> Any:
    return presets.system("dgx-a100").with_(intra_node_link=presets.link(LINKS[link]), gpus_per_node=gpus)


def brief_model(**changes: Any) -> Model:
    return presets.model("gpt-96l-4096h", **changes)


def wide_model(hidden: int, **changes: Any) -> Model:
    return brief_model(hidden=hidden, heads=max(hidden // 128, 8), ffn_hidden=4 * hidden, **changes)


def train_step(m: Model, link: str, **plan: Any) -> Any:
    return estimate_training_step(Scenario(m, brief_cluster(link), Plan(**plan)))
