"""GPUs without a microbenchmark row or fitted runs of their own ship the efficiency of the GPU they
assume, its fitted sustained scale included (`calibration.spreads.ASSUMED_FROM`; review 38: the V100
and L40S kept the A100's bare 0.85 while the A100 shipped 0.85 x 0.780)."""

import pytest

from shardwise import presets
from shardwise.analyses import loso
from shardwise.calibration.spreads import ASSUMED_FROM, FITTED_FROM


@pytest.mark.parametrize(("name", "parent"), sorted(ASSUMED_FROM.items()))
def test_an_assumed_efficiency_is_the_named_gpus_shipped_one(name, parent):
    gpu, named = presets.gpu(name), presets.gpu(parent)
    assert parent in loso.SHIPPED_SCALES  # a fitted GPU: its preset holds MAMF x its scale
    assert gpu.matmul_efficiency == named.matmul_efficiency
    if gpu.matmul_efficiency_fp8 and named.matmul_efficiency_fp8:
        assert gpu.matmul_efficiency_fp8 == named.matmul_efficiency_fp8
    assert loso._fitted_gpu(name) == parent  # a refitted scale moves it as it moves the named GPU


def test_every_gpu_without_a_mamf_row_follows_a_fitted_gpu():
    """A preset whose source says it has no MAMF row is fitted itself, a sibling on the same silicon
    (FITTED_FROM), or assumes a fitted GPU's value (ASSUMED_FROM): none ships a bare microbenchmark
    value that its fitted source GPU runs below."""
    raw = presets.raw("gpus")
    without = [n for n, fields in raw.items() if "no MAMF row" in fields.get("source", "")]
    assert {"v100-sxm2-32gb", "l40s", "h100-pcie-80gb"} <= set(without)
    for n in without:
        assert n in loso.SHIPPED_SCALES or n in FITTED_FROM or n in ASSUMED_FROM, n
