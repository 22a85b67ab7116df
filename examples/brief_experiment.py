"""The brief's experiment (Section 8 of the Russian article) and its figures for the README.

    python examples/brief_experiment.py

Writes to docs/figures/:
  crossover.png                 TP=8 vs PP=8 against batch, NVLink and PCIe (shardwise's model)
  crossover-physical-vs-textbook.png   the same with the brief's own formulas, side by side
  winner-map.png                fastest plan over batch x link bandwidth, NVLink- and PCIe-class latency
  sensitivity-layers.png, sensitivity-hidden.png, sensitivity-tornado.png
"""

from pathlib import Path

import numpy as np

from shardwise import plots
from shardwise.analyses.crossover import describe_crossing, run_crossover
from shardwise.analyses.experiment import BRIEF_LINKS, brief_experiment
from shardwise.analyses.sensitivity import crossover_batch_vs, one_at_a_time
from shardwise.analyses.sweep import run_sweep

OUT = Path(__file__).resolve().parent.parent / "docs" / "figures"


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    exp = brief_experiment()
    batches = np.arange(1, 33, dtype=float)
    physical = run_crossover(exp, "batch", batches)
    textbook = run_crossover(exp.with_(cost_model="textbook", links=BRIEF_LINKS), "batch", batches)
    for result in (physical, textbook):
        for c in result.crossings:
            print(f"{result.experiment.cost_model}: {describe_crossing(c, 'batch')}")
        if not result.crossings:
            print(f"{result.experiment.cost_model}: no crossover for batch 1..32")
    plots.save(
        plots.crossover_figure(
            physical,
            "TP=8 vs PP=8: training step time vs batch (physical model)",
            "brief model (hidden 4096, 96 layers), 8 x A100, sequences of 2048 tokens, micro-batch 1",
            "training step time (s)",
        ),
        OUT / "crossover.png",
    )
    plots.save(
        plots.side_by_side(
            [
                ("shardwise's physical model (training step)", physical, "training step time (s)", None),
                (
                    "the brief's Section 7 formulas, verbatim",
                    textbook,
                    "time (s) as the formulas compute it",
                    "batch (the brief's rows of X: tokens)",
                ),
            ],
            "TP=8 vs PP=8 against batch: the same question, two cost models",
        ),
        OUT / "crossover-physical-vs-textbook.png",
    )
    grid = [("batch", np.arange(1, 65, dtype=float)), ("bandwidth", np.geomspace(1e9, 1e12, 49))]
    plots.save(plots.winner_map(run_sweep(exp, grid)), OUT / "winner-map.png")
    plans = [p.label for p in exp.plans]
    by_layers = crossover_batch_vs(exp, "layers", np.arange(8, 200, 8, dtype=float), ignore_memory=True)
    by_hidden = crossover_batch_vs(exp, "hidden", 512 * 2.0 ** np.arange(6), ignore_memory=True)
    plots.save(
        plots.crossover_curves(by_layers, plans, 256, "tp=8 vs pp=8: crossover batch vs depth (hidden 4096)"),
        OUT / "sensitivity-layers.png",
    )
    plots.save(
        plots.crossover_curves(by_hidden, plans, 256, "tp=8 vs pp=8: crossover batch vs width (96 layers)"),
        OUT / "sensitivity-hidden.png",
    )
    base, bars = one_at_a_time(exp, 0)
    plots.save(
        plots.tornado(base, bars, plans, 2.0, "tp=8 vs pp=8 on NVLink, batch 8: which input moves the ratio most"),
        OUT / "sensitivity-tornado.png",
    )
    print(f"figures in {OUT}")


if __name__ == "__main__":
    main()
