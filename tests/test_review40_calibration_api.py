"""Review 40: calibration through the Python API as docs/api.md shows it -- `fit` refuses what
`shardwise calibrate` refuses, `store.save_fit` writes the file `--calibration` reads, a string is
one runs file, the JSON carries the widened priors, an interval that reaches a bound is said, and
runs that scatter about the presets fit nothing."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from shardwise import Plan, Scenario, presets
from shardwise.calibration import store
from shardwise.calibration.checks import interval_at_limit
from shardwise.calibration.fit import fit
from shardwise.calibration.parameters import BY_NAME
from shardwise.errors import SpecError
from shardwise.requests.calibrate import CalibrateRequest


@pytest.fixture(scope="module")
def runs():
    cluster = presets.system("dgx-h100", nodes=2)
    return [
        Scenario(presets.model("llama3-8b"), cluster, Plan(tp=tp, pp=1, dp=16 // tp, global_batch=128))
        for tp in (1, 2, 4)
    ]


@pytest.mark.parametrize(
    ("measured", "said"),
    [
        ([6100.0, 6600.0, 7900.0], "no parameter within its physical range explains it"),  # ms as s
        ([6.1, 6.6], "2 measured value(s) for 3 run(s)"),
        ([6.1, -1.0, 7.9], "run 2's measured value -1.0 is not allowed"),
        ([6.1, float("nan"), 7.9], "run 2's measured value nan is not allowed"),
        ("abc", "are not numbers"),
    ],
)
def test_fit_refuses_what_calibrate_refuses(runs, measured, said):
    with pytest.raises(SpecError, match="calibrate") as e:
        fit(runs, measured)
    assert said in str(e.value)


def test_save_fit_writes_what_calibration_reads(runs, tmp_path):
    measured = np.array([6.1, 6.6, 7.9])
    f = fit(runs, measured)
    with pytest.raises(SpecError, match="save_fit"):
        store.save(f, tmp_path / "x.yaml")  # type: ignore[arg-type]
    doc = store.save_fit(f, runs, measured, tmp_path / "cal.yaml")
    cal = store.load(tmp_path / "cal.yaml")
    assert cal.fit.fitted == f.fitted and cal.runs == 3 and cal.gpus == ("h100-sxm5-80gb",)
    assert cal.fit.values == pytest.approx({k: float(f"{v:.6g}") for k, v in f.values.items()})
    assert doc["runs"]["ids"] == ["run1", "run2", "run3"] and doc["runs"]["files"] == {}
    with pytest.raises(SpecError, match="3 run"):
        store.save_fit(f, runs[:2], measured[:2], tmp_path / "y.yaml")
    assert not (tmp_path / "y.yaml").exists()


def test_calibrate_request_takes_one_path_and_comma_params():
    r = CalibrateRequest(runs="runs.csv", params="matmul_efficiency_scale, step_overhead_s")
    assert r.runs == ("runs.csv",) and r.params == ("matmul_efficiency_scale", "step_overhead_s")
    with pytest.raises(SpecError, match="'nope' is not a parameter"):
        CalibrateRequest(runs="runs.csv", params="nope")


def test_an_interval_that_reaches_a_bound_is_said(runs):
    f = fit(runs, np.array([6.1, 6.6, 7.9]), only=("matmul_efficiency_scale",))
    assert interval_at_limit(f) == {}
    p = BY_NAME["matmul_efficiency_scale"]
    wide = replace(f, u_covariance=np.array([[(p.high - p.low) ** 2]]))  # as wide as the range
    assert interval_at_limit(wide) == {"matmul_efficiency_scale": "both"}


def test_runs_scattered_about_the_presets_fit_nothing(runs):
    """Four runs +7/+3/-10/+5% from the presets: forward selection starts from fitting nothing, so
    no parameter that moves them by nothing is fitted (it took a pipeline-send scale whose interval
    spanned its range: review 40)."""
    from shardwise.calibration.explain import explaining_fit

    cluster = presets.system("dgx-h100", nodes=2)
    four = [*runs, Scenario(presets.model("llama3-8b"), cluster, Plan(tp=2, pp=2, dp=4, global_batch=128))]
    from shardwise.calibration.cases import Evaluator

    predicted = Evaluator(four).step_s({})[0]
    measured = predicted / np.array([1.072, 1.029, 0.900, 1.055])
    f = explaining_fit(four, measured)
    assert f.fitted == ()
    assert np.allclose(f.after_log_error, f.before_log_error)


def test_widened_priors_reach_the_json():
    from shardwise.requests.calibrate import CalibrateResult

    base = fit(
        [Scenario(presets.model("llama3-8b"), presets.system("dgx-h100", nodes=1), Plan(tp=1, dp=8, global_batch=64))],
        [5.0],
        only=("matmul_efficiency_scale",),
    )
    res = CalibrateResult(
        CalibrateRequest(runs="r.csv"), [], np.zeros(0), (), replace(base, widened=("matmul_efficiency_scale",))
    )
    assert "matmul_efficiency_scale" in (res.widened_note() or "")
    assert CalibrateResult(CalibrateRequest(runs="r.csv"), [], np.zeros(0), (), base).widened_note() is None
