"""Leave-one-source-out validation (issue 32): each source is predicted by a fit that never saw it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from shardwise.analyses import loso
from shardwise.calibration.spreads import gpu_widened_log_sd

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


def test_intervals_come_from_the_other_sources_of_the_stack():
    folds = loso.by_source()
    for name, preds in folds.items():
        others = [x for n, ps in folds.items() if n != name for x in ps]
        want = loso.stack_log_sd([x for x in others if x.priced.stack == preds[0].priced.stack])
        # the recorded spread uses the other sources' fold errors, never the source's own, widened
        # for each row's GPU as the tool's interval is (`spreads.uncalibrated_log_sd`)
        same = [x for x in preds if x.priced.stack == preds[0].priced.stack]
        assert all(x.log_sd == pytest.approx(gpu_widened_log_sd(want, x.priced.gpu)) for x in same)
        assert all(x.log_sd >= want for x in same)
    table = {s.name: s for s in loso.source_table()}
    assert 0.0 <= table["all sources"].coverage <= 1.0
    assert np.isfinite(table["all sources"].mape)


def test_the_shipped_spreads_are_what_the_public_runs_give():
    """calibration/spreads.py holds what tools/stack_spreads.py measures: each stack's
    leave-one-source-out spread and each model family's spread (runs and sources too)."""
    from shardwise.calibration import spreads

    for shipped, measured in (
        (spreads.STACK_LOG_SD, loso.shipped_stack_spreads()),
        (spreads.FAMILY_LOG_SD, loso.shipped_family_spreads()),
    ):
        assert set(shipped) == set(measured)
        for name, (sd, runs, sources) in measured.items():
            assert shipped[name][0] == pytest.approx(sd, abs=5e-4), name
            assert shipped[name][1:] == (runs, sources), name
