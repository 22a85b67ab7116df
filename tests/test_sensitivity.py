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
