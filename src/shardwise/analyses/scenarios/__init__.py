"""The brief's scenarios (Sections 4 and 5 of the Russian article), each as a runnable
experiment with a figure and a two-line finding. Every number and every verdict ("the claim
holds / fails") is computed from the model's results; only the sentence around them is fixed.

Common setting unless a scenario says otherwise: the brief's model (hidden 4096, 96 layers),
8 A100-SXM4-80GB, TP=8 against PP=8, NVLink (nvlink3) or PCIe Gen4 (pcie4) inside the server,
sequences of 2048 tokens, micro-batch 1, bf16, FlashAttention.
"""

from __future__ import annotations

from collections.abc import Callable

from shardwise.analyses.scenarios.common import ScenarioReport
from shardwise.analyses.scenarios.inference import batch1_inference, ttft
from shardwise.analyses.scenarios.training import (
    shallow_model,
    slow_interconnect,
    small_batch,
    thin_layers,
    unbalanced_layers,
    wide_layers,
)

SCENARIOS: dict[str, Callable[[bool], ScenarioReport]] = {
    "small-batch": small_batch,
    "slow-interconnect": slow_interconnect,
    "thin-layers": thin_layers,
    "batch1-inference": batch1_inference,
    "shallow-model": shallow_model,
    "unbalanced-layers": unbalanced_layers,
    "wide-layers": wide_layers,
    "ttft": ttft,
}


def run(name: str, plot: bool = False) -> ScenarioReport:
    """Run one scenario; with `plot`, its report also carries the chart to draw
    (`plots.draw(report.chart)`)."""
    return SCENARIOS[name](plot)
