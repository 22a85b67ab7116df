"""physics/flops.py's docstring: one forward is 24 B s l h^2 (1 + s/6h + V/12lh); Korthikanti et al.
2022 App. A's model count is 3x it, and Narayanan et al. 2021 Eq. 3, 96 B s l h^2 (1 + s/6h +
V/16lh), is the layers' 4 passes (full recomputation) with the logits' 3, not 4x one forward."""

import pytest

from shardwise import presets
from shardwise.engines.training_flops import flops_per_step
from shardwise.specs import Plan, Scenario


def test_model_and_hardware_flops_are_korthikanti_and_eq3():
    model = presets.model("gpt3-175b")
    b, s, layers, h, v = 64, model.seq_len, model.layers, model.hidden, model.vocab
    plan = Plan(tp=8, pp=8, dp=1, global_batch=b, recompute="full")
    model_flops, hardware_flops = (
        float(x) for x in flops_per_step(Scenario(model, presets.system("dgx-a100", nodes=8), plan))
    )
    base = b * s * layers * h * h
    assert model_flops == pytest.approx(72 * base * (1 + s / (6 * h) + v / (12 * layers * h)), rel=1e-9)
    assert hardware_flops == pytest.approx(96 * base * (1 + s / (6 * h) + v / (16 * layers * h)), rel=1e-9)
    # Eq. 3 / 4 is not one forward: its logit term is 3/4 of a forward's
    assert hardware_flops / 4 != pytest.approx(model_flops / 3, rel=1e-4)
