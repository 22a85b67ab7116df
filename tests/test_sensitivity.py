import numpy as np
import pytest

from shardwise.analyses.crossover import run_crossover
from shardwise.analyses.evaluate import times_s
from shardwise.analyses.experiment import brief_experiment
from shardwise.analyses.sensitivity import crossover_batch_vs, one_at_a_time

EXP = brief_experiment()


def test_crossover_batch_vs_layers_agrees_with_a_direct_crossover():
    curves = crossover_batch_vs(EXP, "layers", np.array([48.0, 96.0]), max_batch=64)
    nvlink = next(c for c in curves if c.link == "NVLink")
    direct = run_crossover(EXP.with_(model=EXP.model.with_(layers=96)), "batch", np.arange(1, 65.0))
    assert nvlink.crossover_batch[1] == direct.crossings_for("NVLink")[0].at


def test_no_crossover_is_nan():
    curves = crossover_batch_vs(EXP, "layers", np.array([8.0]), max_batch=32)
    nvlink = next(c for c in curves if c.link == "NVLink")
    assert np.isnan(nvlink.crossover_batch[0]) and nvlink.winner_at_batch_1[0] == "tp=8"


def test_one_at_a_time_ratio_and_ranking():
    base, bars = one_at_a_time(EXP, 0)
    tp, _ = times_s(EXP, EXP.plans[0], EXP.links[0].link, "batch", np.array([EXP.batch]))
    pp, _ = times_s(EXP, EXP.plans[1], EXP.links[0].link, "batch", np.array([EXP.batch]))
    assert base == pytest.approx(tp[0] / pp[0])
    spreads = [b.spread for b in bars]
    assert spreads == sorted(spreads, reverse=True)
    bandwidth = next(b for b in bars if b.variable == "bandwidth")
    assert bandwidth.ratio_high < base < bandwidth.ratio_low  # more bandwidth helps TP


def test_a_winner_up_to_the_last_batch_says_how_far_both_plans_fit(cli):
    """At 112 layers PP=8 stops fitting from batch 7: '- (tp=8)' read as TP faster at every batch to
    256 (walkthrough); the cell says both fit to 6, the JSON carries it."""
    import json

    exp = brief_experiment()
    nvlink = crossover_batch_vs(exp, "layers", np.array([8.0, 112.0]), max_batch=32)[0]
    assert np.isnan(nvlink.crossover_batch).all() and nvlink.winner_at_batch_1 == ["tp=8", "tp=8"]
    assert list(nvlink.last_feasible_batch) == [32.0, 6.0]
    args = ["sensitivity", "--no-plot", "--max-batch", "32"]
    code, out, err = cli(args)
    assert code == 0, err
    assert "- (tp=8, both fit to 6)" in out and "- (tp=8)" in out  # 8 layers: both fit to 32
    code, out, err = cli([*args, "--json"])
    rows = {r["layers"]: r for r in json.loads(out)["crossover_batch_vs_layers"]["NVLink"]}
    assert rows[112.0]["last_feasible_batch"] == 6.0 and rows[8.0]["last_feasible_batch"] == 32.0
