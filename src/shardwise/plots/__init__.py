"""Figures (matplotlib, Agg). The only package that imports matplotlib; imported only when a
figure is asked for. Every figure has units on its axes, a legend, and annotations that say
what the reader is looking at; files are written atomically (PNG or SVG by extension)."""

from shardwise.plots._base import save
from shardwise.plots.charts import lines, stacked_bars, two_panels
from shardwise.plots.crossover import crossover_figure, side_by_side
from shardwise.plots.maps import winner_map
from shardwise.plots.planner import plan_heatmap
from shardwise.plots.sensitivity import crossover_curves, tornado
from shardwise.plots.serving import serving_frontier
from shardwise.plots.timeline import gantt


def draw(chart: object):
    """The figure an analysis described as data (`analyses.scenarios.common.Chart`)."""
    return globals()[chart.kind](*chart.args, **chart.kwargs)  # type: ignore[attr-defined]


__all__ = [
    "crossover_curves",
    "crossover_figure",
    "draw",
    "gantt",
    "lines",
    "plan_heatmap",
    "save",
    "serving_frontier",
    "side_by_side",
    "stacked_bars",
    "tornado",
    "two_panels",
    "winner_map",
]
