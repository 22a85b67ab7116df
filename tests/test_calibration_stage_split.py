"""Runs with one explicit stage split price together in a calibration (`calibration.cases.Evaluator`
stacks a group's plans into arrays; an explicit split needs a single pp: `shardwise validate
--calibrated` failed with "stage_layers ... needs a single pp" before the stack kept pp a number)."""

from __future__ import annotations

import numpy as np
import pytest

from shardwise import presets
from shardwise.calibration.cases import Evaluator
from shardwise.engines.training import estimate_training_step
from shardwise.specs import Plan, Scenario


def test_runs_with_one_explicit_split_price_together_as_alone():
    model = presets.model("gpt-96l-4096h", layers=30)
    cluster = presets.system("dgx-a100")
    plans = [Plan(pp=2, dp=4, global_batch=b, stage_layers=(10, 20)) for b in (32, 64)]
    cases = [Scenario(model, cluster, p) for p in plans]
    together = Evaluator(cases).step_s({})[0]
    alone = np.array([float(estimate_training_step(c).step_time_s) for c in cases])
    assert together == pytest.approx(alone, rel=1e-9)
    assert together[1] > 1.5 * together[0]  # twice the micro-batches: the two runs really differ
