"""Review 51: sensitivity's 'no feasible batch' says why; timeline's chart names the whole layout."""

from dataclasses import replace

import numpy as np

from shardwise.analyses.experiment import brief_experiment
from shardwise.analyses.sensitivity import crossover_batch_vs


def test_no_feasible_batch_names_the_layout_rule_it_breaks(cli):
    """#10: a width whose heads tp=8 cannot split read 'no feasible batch' with no reason, like
    memory; the line under the table names the rule, as crossover refuses such a width."""
    code, out, err = cli(
        ["sensitivity", "--no-plot", "--layers-values", "96", "--hidden-values", "100,4096", "--max-batch", "32"]
    )
    assert code == 0, err
    flat = " ".join(out.split())
    assert "no feasible batch at hidden 100: tp=8 is invalid (heads (and KV heads) must be divisible by tp)" in flat
    assert "no feasible batch at hidden 4096" not in flat


def test_no_feasible_batch_where_nothing_fits_says_memory():
    from shardwise.cli.sensitivity import _why_none

    exp = brief_experiment()
    curves = crossover_batch_vs(exp, "layers", np.array([96.0]), max_batch=4)
    dead = [replace(c, winner_at_batch_1=[""]) for c in curves]  # as if no batch fit
    (line,) = _why_none(exp, "layers", dead, 4)
    assert line == (
        "no feasible batch at layers 96: no plan fits in GPU memory at any batch to 4 (--ignore-memory compares times)"
    )


def test_the_gantt_title_names_tp_and_dp_beside_the_pipeline():
    """#13: `timeline --tp 8 --pp 8` was titled with p and m alone, as if pure PP."""
    from shardwise.cli.timeline import gantt_title
    from shardwise.requests.timeline import TimelineRequest
    from shardwise.requests.training import TrainingRequest

    req = TrainingRequest(model="gpt-96l-4096h", system="dgx-a100", nodes=8, tp=8, pp=8, global_batch=32)
    sim = TimelineRequest(req).run().simulated
    title = gantt_title(sim.estimate.scenario, sim.simulation)
    assert title.startswith("gpt-96l-4096h on 64 x a100-sxm4-80gb, tp=8, dp=1, 1f1b, p=8, m=32")


def test_wide_layers_says_of_tp_and_pp_only_tp_and_names_zero3():
    """#14: 'PP cannot help, TP must' ignored ZeRO-3/FSDP, which shards a layer's state too."""
    from shardwise.analyses.scenarios import run

    report = run("wide-layers", plot=False)
    assert "of TP and PP, only TP" in report.title
    assert "ZeRO-3/FSDP" in report.finding and "16 GB each" in report.finding
