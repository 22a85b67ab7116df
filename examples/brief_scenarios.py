"""The brief's scenarios (Sections 4 and 5 of the Russian article), one figure and a two-line
finding each, computed by shardwise's model.

    python examples/brief_scenarios.py                 # all eight, figures in docs/figures/
    python examples/brief_scenarios.py small-batch ttft

Names: small-batch, slow-interconnect, thin-layers, batch1-inference, shallow-model,
unbalanced-layers, wide-layers, ttft (the same as `shardwise scenario NAME`).
"""

import sys
from pathlib import Path

from shardwise import plots
from shardwise.analyses.scenarios import SCENARIOS, run

OUT = Path(__file__).resolve().parent.parent / "docs" / "figures"

if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    for name in sys.argv[1:] or SCENARIOS:
        report = run(name, plot=True)
        plots.save(plots.draw(report.chart), OUT / f"{name}.png")
        print(f"[{name}] {report.title}\n{report.finding}\nfigure: {OUT / (name + '.png')}\n")
