"""Review 33's calibration findings: which parameter a stack's slowdown is blamed on, fitted values
at their range's limit, what `calibrate --suggest` writes and counts."""

from __future__ import annotations

import json

import numpy as np
import pytest

# Six Llama 3 8B runs on 2 DGX H100 (16 GPUs), each 12-16% slower than the model predicts
# (review 33, cal/runs.csv): a stack slower all over.
SLOW_STACK = """id,model,system,num_gpus,tp,pp,global_batch,micro_batch,step_time_s
r1,llama3-8b,dgx-h100,16,2,1,128,1,7.70
r2,llama3-8b,dgx-h100,16,4,1,128,1,8.20
r3,llama3-8b,dgx-h100,16,8,1,128,1,10.1
r4,llama3-8b,dgx-h100,16,2,2,128,1,8.60
r5,llama3-8b,dgx-h100,16,1,4,128,1,9.70
r6,llama3-8b,dgx-h100,16,4,1,256,2,15.9
"""


@pytest.fixture
def slow_stack(tmp_path):
    path = tmp_path / "runs.csv"
    path.write_text(SLOW_STACK)
    return path


def test_a_uniform_slowdown_is_a_slower_gemm_not_a_slower_hbm(slow_stack):
    """The HBM scale slows GEMM epilogues and memory roofs too, so it mimics a slower GEMM; with a
    wide prior component it fitted these runs at 0.41 x (1.4 TB/s on an H100) by a residual 0.2%
    better. The sustained HBM rate is the GPU's: no wide component, and the runs fit the GEMMs."""
    from shardwise.calibration.parameters import BY_NAME
    from shardwise.requests.calibrate import CalibrateRequest

    assert BY_NAME["memory_bandwidth_scale"].widen == 1.0 and BY_NAME["matmul_efficiency_scale"].widen > 1.0
    fit = CalibrateRequest((str(slow_stack),)).run().fit
    assert "memory_bandwidth_scale" not in fit.fitted
    assert fit.fitted == ("matmul_efficiency_scale",)
    assert 0.78 < fit.values["matmul_efficiency_scale"] < 0.88
    assert np.max(np.abs(fit.after_log_error)) < 0.06


def test_a_parameter_without_a_wide_component_is_never_widened(slow_stack):
    """The prior-data conflict widens each parameter in turn; one with widen 1 keeps its prior."""
    from shardwise.calibration.fit import fit
    from shardwise.requests.calibrate import CalibrateRequest

    runs = CalibrateRequest((str(slow_stack),)).read()
    f = fit([r.case for r in runs], np.array([r.measured for r in runs]), only=("memory_bandwidth_scale",))
    assert f.widened == ()
    g = fit(
        [r.case for r in runs],
        np.array([r.measured for r in runs]),
        only=("memory_bandwidth_scale",),
        wide=("memory_bandwidth_scale",),
    )
    assert g.widened == () and g.values["memory_bandwidth_scale"] == pytest.approx(f.values["memory_bandwidth_scale"])


def test_a_fitted_value_at_its_limit_is_flagged():
    from shardwise.calibration.checks import at_limit, limit_notes
    from shardwise.calibration.fit import Fit
    from shardwise.calibration.parameters import NEUTRAL

    def one(name, value):
        return Fit((name,), {**NEUTRAL, name: value}, np.eye(1) * 0.01, 0.05)

    assert at_limit(one("memory_bandwidth_scale", 0.3)) == {"memory_bandwidth_scale": "lower"}
    assert at_limit(one("inter_node_bandwidth_scale", 4.0)) == {"inter_node_bandwidth_scale": "upper"}
    assert at_limit(one("matmul_efficiency_scale", 0.83)) == {}
    (line,) = limit_notes(one("inter_node_bandwidth_scale", 0.05))
    assert "at the lower limit of its range (0.05-4 x): the runs want less than the model allows" in line
    assert "check the runs" in line


def test_an_additive_parameter_is_at_its_limit_only_within_a_fraction_of_its_prior_sd():
    """caldoc: step_overhead_s = 0.049 s (range 0-60 s, prior 0.5 s) was flagged "at the lower
    limit" by a rule of 0.1% of the range (60 ms); a tenth of a prior sd from 0 is a value the runs
    chose. The rule is 2% of the parameter's prior sd, in the fitted scale, for every parameter."""
    from shardwise.calibration.checks import AT_LIMIT_SDS, at_limit
    from shardwise.calibration.fit import Fit
    from shardwise.calibration.parameters import BY_NAME, NEUTRAL

    def one(name, value):
        return Fit((name,), {**NEUTRAL, name: value}, np.eye(1) * 0.01, 0.05)

    assert AT_LIMIT_SDS * BY_NAME["step_overhead_s"].prior_sd == pytest.approx(0.01)  # 10 ms
    assert at_limit(one("step_overhead_s", 0.049)) == {}
    assert at_limit(one("step_overhead_s", 0.005)) == {"step_overhead_s": "lower"}
    assert at_limit(one("step_overhead_s", 59.995)) == {"step_overhead_s": "upper"}
    # 0.5 ms per micro-batch is a tenth of its 5 ms prior: a value (0.1% of its 0-1 s range was 1 ms)
    assert at_limit(one("micro_batch_overhead_s", 0.0005)) == {}
    assert at_limit(one("micro_batch_overhead_s", 0.00005)) == {"micro_batch_overhead_s": "lower"}
    # the MaxText example's network exponent stopped 0.003 prior sds from its floor: at it
    assert at_limit(one("inter_node_scaling_exponent", 0.00031)) == {"inter_node_scaling_exponent": "lower"}
    assert at_limit(one("gemm_half_rate_tokens", 40.0)) == {}  # 0.1% of 0-65,536 tokens was 65
    # a scale: 2% of its prior sd in the log (HBM: x1.3 prior, 0.5% above its 0.3 x floor is at it)
    assert at_limit(one("memory_bandwidth_scale", 0.3 * 1.004)) == {"memory_bandwidth_scale": "lower"}
    assert at_limit(one("memory_bandwidth_scale", 0.3 * 1.02)) == {}


# Review 33's cal/mixed.csv: the six runs above, one on DGX A100, one Mixtral 8x7B 4.6 x slower than
# predicted: the network is fitted at its floor, 0.05 x.
MIXED = SLOW_STACK + "r7,llama3-8b,dgx-a100,16,2,1,128,1,24.0\nr8,mixtral-8x7b,dgx-h100,16,2,1,128,1,30.0\n"


def test_limits_mixed_gpus_and_families_show_in_the_output_the_file_and_json(cli, tmp_path):
    import yaml

    runs, out_file = tmp_path / "mixed.csv", tmp_path / "mixed.yaml"
    runs.write_text(MIXED)
    code, out, err = cli(["calibrate", str(runs), "-o", str(out_file)])
    assert code == 0, err
    flat = " ".join(out.split())
    limited = [n for n, e in yaml.safe_load(out_file.read_text())["parameters"].items() if "limit" in e]
    assert limited, "a parameter at its limit"
    assert f"check: {limited[0]} = " in flat and "limit of its range" in flat
    assert "runs are on 2 GPUs (a100-sxm4-80gb, h100-sxm5-80gb)" in flat
    assert "2 model families (dense transformers, mixture-of-experts models)" in flat
    assert "the fit still misses" in flat  # the Mixtral run
    doc = yaml.safe_load(out_file.read_text())
    assert any("limit of its range" in c for c in doc["checks"])
    code, out, err = cli(["calibrate", str(runs), "-o", str(out_file), "--json"])
    assert code == 0, err
    data = json.loads(out)
    assert data["parameters"][limited[0]]["limit"] in ("lower", "upper") and len(data["checks"]) == 4


def test_a_fitted_scale_shows_its_absolute_value_and_a_left_out_one_its_reason(cli, slow_stack, tmp_path):
    code, out, err = cli(["calibrate", str(slow_stack), "-o", str(tmp_path / "c.yaml")])
    assert code == 0, err
    flat = " ".join(out.split())
    assert "left out by need" in flat and "56% of peak" in flat
    assert "left out by need: the evidence of the runs is better without it" in flat
    code, out, err = cli(["calibrate", str(slow_stack), "-o", str(tmp_path / "c.yaml"), "--json"])
    params = json.loads(out)["parameters"]
    from shardwise import presets

    shipped = float(presets.gpu("h100-sxm5-80gb").matmul_efficiency)  # refitted now and then: read, not pinned
    assert params["matmul_efficiency_scale"]["physical"] == f"56% of peak (presets {shipped:.0%})"
    assert "limit" not in params["matmul_efficiency_scale"]
    from shardwise.calibration.checks import physical
    from shardwise.requests.calibrate import CalibrateRequest

    scn = CalibrateRequest((str(slow_stack),)).read()[0].scenario
    # the sustained rate, 0.85 of the datasheet's 3.35 TB/s at 1 x (review 37: HBM capped at the datasheet)
    assert physical([scn], "memory_bandwidth_scale", 0.408) == "HBM 1.16 TB/s sustained of 3.35 peak (presets 2.85)"
    assert physical([scn], "inter_node_bandwidth_scale", 0.5).endswith("GB/s per GPU across servers (presets 48.5)")
    assert physical([scn], "step_overhead_s", 1.0) == ""


def test_suggest_writes_no_calibration_unless_named_and_counts_runs_not_plans(cli, slow_stack, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "calibration.yaml").write_text("mine\n")
    job = ["--suggest", "1", "--model", "llama3-8b", "--system", "dgx-h100", "--nodes", "2", "--global-batch", "128"]
    code, out, err = cli(["calibrate", str(slow_stack), *job])
    assert code == 0, err
    assert (tmp_path / "calibration.yaml").read_text() == "mine\n"
    assert "no calibration file written" in err and "-o FILE" in err
    flat = " ".join(out.split())
    assert "(6 of the 6 runs measured are layouts of this job" in flat
    code, out, err = cli(["calibrate", str(slow_stack), *job, "-o", "named.yaml"])
    assert code == 0, err
    assert (tmp_path / "named.yaml").is_file() and "calibration: named.yaml" in out
    # a plain calibrate still writes the default, and says it replaced one
    code, out, err = cli(["calibrate", str(slow_stack)])
    assert code == 0, err
    assert (tmp_path / "calibration.yaml").read_text() != "mine\n"
    assert "calibration.yaml was there already and is replaced" in err
