"""Leave-one-source-out validation (issue 32): each source is predicted by a fit that never saw it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from shardwise.analyses import interval_model as im
from shardwise.analyses import loso

pytestmark = pytest.mark.slow  # prices every public row over a grid of efficiencies (~8 s)


def test_the_fit_on_every_source_gives_the_shipped_scales():
    """The procedure reproduces what presets/gpus.yaml ships (to the grid's step)."""
    scales = loso.fit_scales(list(loso.priced_rows()))
    for gpu, shipped in loso.SHIPPED_SCALES.items():
        assert scales[gpu] == pytest.approx(shipped, abs=0.011), gpu


def test_a_left_out_source_does_not_move_its_own_fit():
    """Changing every measurement of the left-out source changes nothing its fold fitted: the fold's
    scales come from the other sources only (with it in, the scales move)."""
    rows = list(loso.priced_rows())
    source = "NVIDIA dgxc-benchmarking"
    others = [p for p in rows if p.row.source != source]
    doubled = [
        replace(p, row=replace(p.row, measured_step_s=2 * p.row.measured_step_s)) if p.row.source == source else p
        for p in rows
    ]
    assert loso.fit_scales(others) == loso.fit_scales([p for p in doubled if p.row.source != source])
    assert loso.fit_scales(doubled) != loso.fit_scales(rows)


def test_intervals_come_from_what_the_fold_knows():
    """A left-out source's interval comes from the other sources' errors (its stack's, or the
    stacks left out whole), never its own: changing every error of the source changes nothing of
    its interval, while changing another source of its stack does."""
    folds = loso.by_source()
    preds = folds["NVIDIA-NeMo Megatron-Bridge"]
    mc = [x for x in preds if x.priced.stack == "megatron-core"]
    others = [x for n, ps in loso._folds("source").items() if n != "NVIDIA-NeMo Megatron-Bridge" for x in ps[0]]
    whole = loso.cells([x for ps, _ in loso._folds("stack").values() for x in ps])
    known = loso.cells(others)
    sd = im.predictive("megatron-core", known, whole).log_sd
    fit = loso._folds("source")["NVIDIA-NeMo Megatron-Bridge"][1]
    for x in mc:
        assert x.log_sd == pytest.approx(np.sqrt(sd**2 + fit.var(x.priced.gpu)))
    # the source's own errors are not in `known`; another source's are
    shifted = [
        replace(c, errors=tuple(e + 0.2 for e in c.errors)) if c.source.startswith("NVIDIA NeMo") else c for c in known
    ]
    assert im.predictive("megatron-core", shifted, whole).log_sd > sd
    # the fold's own GPU fit: GB300's only source is Bridge, so its fold fits no GB300 scale
    assert "gb300" not in fit.support and "gb300" in loso.shipped_gpu_fit().support
    table = {s.name: s for s in loso.source_table()}
    assert 0.0 <= table["all sources"].coverage <= 1.0
    assert np.isfinite(table["all sources"].mape)


def test_a_stack_left_out_gets_the_other_stacks_spread():
    """Leave one stack out: every row's interval is the no-published-runs one built without the
    stack (its own whole-stack error left out), widened for its GPU at the fold's fit."""
    folds, whole = loso._folds("source"), loso._folds("stack")
    for name in ("internevo", "paxml"):
        known = loso.cells([x for ps, _ in folds.values() for x in ps if x.priced.stack != name])
        others = loso.cells([x for n, (ps, _) in whole.items() if n != name for x in ps])
        sd = im.predictive(name, known, others).log_sd
        assert im.predictive(name, known, others).runs == 0  # the no-data path
        fit = whole[name][1]
        for x in loso.by_stack()[name]:
            assert x.log_sd == pytest.approx(np.sqrt(sd**2 + fit.var(x.priced.gpu)))


def test_coverage_of_the_large_sources_is_near_80_percent():
    """The intervals are neither the old flat ±40% (100% covered) nor too narrow: the sources with
    20 runs or more of a stack the fold knows are covered 65-92% of the time (80% expected; each
    source is a few groups)."""
    table = {s.name: s for s in loso.source_table()}
    for name in ("Modalities/modalities", "NVIDIA NeMo performance docs", "NVIDIA-NeMo Megatron-Bridge"):
        assert 0.65 <= table[name].coverage <= 0.92, name
    assert 0.70 <= table["all sources"].coverage <= 0.92


def test_the_shipped_spreads_are_what_the_public_runs_give():
    """calibration/spreads.py holds what tools/stack_spreads.py measures: each stack's
    leave-one-source-out spread, a stack's without published runs, the GPUs' fits and each model
    family's spread (runs and sources too)."""
    from shardwise.calibration import spreads

    for shipped, measured in (
        (spreads.STACK_LOG_SD, loso.shipped_stack_spreads()),
        (spreads.FAMILY_LOG_SD, loso.shipped_family_spreads()),
    ):
        assert set(shipped) == set(measured)
        for name, (sd, runs, sources) in measured.items():
            assert shipped[name][0] == pytest.approx(sd, abs=5e-4), name
            assert shipped[name][1:] == (runs, sources), name
    sd, stacks = loso.shipped_no_data_spread()
    assert (sd, stacks) == (pytest.approx(spreads.NO_DATA_LOG_SD, abs=5e-4), spreads.NO_DATA_STACKS)
    fit = loso.shipped_gpu_fit()
    assert fit.support == spreads.GPU_FIT
    measured = np.sqrt([fit.group_var, fit.source_var, fit.unfitted_var])
    shipped = [spreads.GPU_GROUP_LOG_SD, spreads.GPU_SOURCE_LOG_SD, spreads.UNFITTED_LOG_SD]
    assert measured == pytest.approx(shipped, abs=5e-4)
