"""Review 47 #5: runs that cannot tell two parameters apart are said to, with the run that would."""

import json
from pathlib import Path

import numpy as np
import pytest

from shardwise.calibration.cases import Evaluator, with_values
from shardwise.calibration.confound import Confound, confounded, lines, separation
from shardwise.calibration.explain import explaining_fit
from shardwise.calibration.parameters import PARAMETERS
from shardwise.calibration.runs import read_runs

ROOT = Path(__file__).resolve().parent.parent
SLOW = ROOT / "examples" / "calibration" / "torchtitan-8b-slow.csv"


def _runs() -> tuple[list, np.ndarray]:
    runs = read_runs(str(SLOW))
    return [r.case for r in runs], np.array([r.measured for r in runs])


def test_runs_at_one_micro_batch_count_cannot_tell_a_step_overhead_from_slow_gemms():
    cases, measured = _runs()
    fitted = explaining_fit(cases, measured)
    pairs = confounded(cases, measured, fitted)
    named = {frozenset((c.fitted, c.other)) for c in pairs}
    assert frozenset(("step_overhead_s", "matmul_efficiency_scale")) in named
    assert all(abs(c.score_gap) < 2.0 for c in pairs)
    text = lines(pairs)
    assert len(text) == len({c.fitted for c in pairs})  # one line per fitted parameter
    assert "cannot tell" in text[0] and "micro-batches per step" in text[0]


def test_a_run_at_another_global_batch_tells_them_apart():
    cases, _ = _runs()
    from dataclasses import replace

    # the same 8 GPUs at 4x the global batch: 16 micro-batches per GPU instead of 4
    more = replace(cases[0], plan=replace(cases[0].plan, global_batch=128))
    every = [*cases, more]
    truth = {p.name: p.value(p.prior_mean) for p in PARAMETERS} | {"step_overhead_s": 1.3}
    measured = Evaluator([with_values(c, truth) for c in every]).step_s({})[0]
    fitted = explaining_fit(every, measured)
    assert "step_overhead_s" in fitted.fitted
    pairs = confounded(every, measured, fitted)
    assert frozenset(("step_overhead_s", "matmul_efficiency_scale")) not in {
        frozenset((c.fitted, c.other)) for c in pairs
    }


def test_separation_is_the_step_difference_between_the_two_fits():
    du = np.zeros(len(PARAMETERS))
    du[0] = np.log(0.8)  # the GEMM scale lower by 20% in the other fit
    pair = Confound("step_overhead_s", "matmul_efficiency_scale", 0.1, tuple(du))
    g = np.zeros((2, len(PARAMETERS)))
    g[:, 0] = [-1.0, -0.5]  # a GEMM-bound step and one half GEMMs
    assert separation(g, pair) == pytest.approx([0.223, 0.112], rel=0.01)


def test_calibrate_says_the_confound_in_one_line(cli, tmp_path):
    code, out, err = cli(["calibrate", str(SLOW), "-o", str(tmp_path / "c.yaml"), "--json"])
    assert code == 0, err
    doc = json.loads(out)
    said = [line for line in doc["notes"] if "cannot tell" in line]
    assert len(said) == 1 and "step_overhead_s" in said[0] and "matmul_efficiency_scale" in said[0]
    assert {"fitted": "step_overhead_s", "other": "matmul_efficiency_scale"}.items() <= doc["confounded"][0].items()


@pytest.mark.slow
def test_suggest_names_the_run_that_separates_them(cli, tmp_path):
    job = ["--model", "llama3.1-8b", "--system", "dgx-h100", "--nodes", "4", "--global-batch", "1024"]
    code, out, err = cli(["calibrate", str(SLOW), "--suggest", "2", *job, "--json"])
    assert code == 0, err
    separate = json.loads(out)["separate"]
    pair = [s for s in separate if {s["fitted"], s["other"]} == {"step_overhead_s", "matmul_efficiency_scale"}]
    assert pair and pair[0]["plan"] and "tells step_overhead_s from matmul_efficiency_scale" in pair[0]["note"]
