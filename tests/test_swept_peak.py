"""The `peak_flops` variable moves the peak of the experiment's precision, and only that one: each
precision reads its own Gpu field (`Gpu.peak_field`), and the other peaks stay as the preset has
them (attention runs in 16 bits under FP8 and FP4, at the 16-bit peak)."""

import numpy as np
import pytest

from shardwise import presets
from shardwise.analyses.evaluate import _scenario, evaluate
from shardwise.analyses.experiment import brief_experiment
from shardwise.specs.hardware import Gpu

FIELDS = ("peak_flops_per_s_16bit", "peak_flops_per_s_fp8", "peak_flops_per_s_fp4")


@pytest.mark.parametrize(
    ("precision", "field"),
    [
        ("bf16", "peak_flops_per_s_16bit"),
        ("fp8", "peak_flops_per_s_fp8"),
        ("mxfp8", "peak_flops_per_s_fp8"),
        ("nvfp4", "peak_flops_per_s_fp4"),
        ("fp4", "peak_flops_per_s_fp4"),  # FP4 GEMMs on NVFP4 activations; a Plan takes it (Python API)
    ],
)
def test_the_peak_field_of_each_precision(precision, field):
    assert Gpu.peak_field(precision) == field
    gpu = presets.gpu("b200-sxm-180gb")
    assert getattr(gpu, field) == gpu.peak_flops_per_s(precision)


SWEPT = [
    ("fp4", "train", "peak_flops_per_s_fp4"),  # before: the FP4 peak written into the 16-bit field
    ("nvfp4", "prefill", "peak_flops_per_s_fp4"),
    ("nvfp4", "train", "peak_flops_per_s_fp4"),
    ("fp8", "train", "peak_flops_per_s_fp8"),
    ("bf16", "train", "peak_flops_per_s_16bit"),
]


@pytest.mark.parametrize(("precision", "workload", "field"), SWEPT)
def test_a_swept_peak_moves_its_precisions_field_alone(precision, workload, field):
    base = brief_experiment()
    gpu = presets.gpu("b200-sxm-180gb")
    exp = base.with_(gpu=gpu, workload=workload, plan_defaults={**base.plan_defaults, "precision": precision})
    plan, link = exp.plans[0], exp.links[0].link
    # not swept: every peak as the preset has it
    scn, _ = _scenario(exp, plan, link, {"batch": np.array([8.0])})
    for name in FIELDS:
        assert np.all(getattr(scn.cluster.gpu, name) == getattr(gpu, name)), name
    # swept: the precision's own peak moves, the others stay
    swept = np.array([1e15, 3e15])
    scn, _ = _scenario(exp, plan, link, {"peak_flops": swept})
    np.testing.assert_array_equal(getattr(scn.cluster.gpu, field), swept)
    for name in FIELDS:
        if name != field:
            assert np.all(getattr(scn.cluster.gpu, name) == getattr(gpu, name)), name


def test_a_faster_fp4_peak_makes_nvfp4_prefill_faster():
    """Serving's NVFP4 weights run FP4 GEMMs (`engines.serving.compute_precision`) at the swept peak."""
    base = brief_experiment()
    exp = base.with_(
        gpu=presets.gpu("b200-sxm-180gb"),
        workload="prefill",
        plan_defaults={**base.plan_defaults, "precision": "nvfp4"},
    )
    peak = exp.gpu.peak_flops_per_s_fp4
    t, _ = evaluate(exp, exp.plans[0], exp.links[0].link, {"peak_flops": np.array([peak / 4, peak])})
    assert t[0] > t[1]
