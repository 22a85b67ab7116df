"""Intervals where a calibration or the published runs say nothing (review 45 #1 and #6): a
calibrated prediction carries the prior spread of the parameters its runs did not fit, where the
scenario leans on them (`calibration.unmeasured`); a serving case no published serving run
measured (a mixture of experts, a GPU without a serving row) widens as training does and says
"unmeasured" (`spreads.serving_log_sd`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

# Three torchtitan Llama 3 8B runs on 8-16 H100 (one or two servers, tp 1-2, no pipeline):
# review 45's runs.csv. They fit the GEMMs' ramp and nothing of a network beyond two servers,
# of a pipeline or of a 100 GbE link.
RUNS = """model,system,num_gpus,tp,pp,global_batch,framework,recompute,tokens_per_s_per_gpu
llama3-8b,dgx-h100,8,1,1,16,torchtitan,selective,5800
llama3-8b,dgx-h100,8,2,1,16,torchtitan,selective,5200
llama3-8b,dgx-h100,16,1,1,32,torchtitan,selective,5600
"""
IN_SAMPLE = "--model llama3-8b --system dgx-h100 --global-batch 16 --framework torchtitan"
FAR = {
    "405b pp 8 on 512 GPUs": "--model llama3-405b --system dgx-h100 --nodes 64 --global-batch 512 --tp 8 --pp 8 "
    "--framework torchtitan",
    "70b over one 100 GbE NIC per server": "--model llama3-70b --system dgx-h100 --nodes 16 --inter-link eth-100g "
    "--nics-per-node 1 --global-batch 256 --tp 8 --pp 4 --framework torchtitan",
}


@pytest.fixture(scope="module")
def calibration(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from shardwise.cli import main

    d = tmp_path_factory.mktemp("r45")
    (d / "runs.csv").write_text(RUNS)
    out = d / "mine.yaml"
    try:
        main(["calibrate", str(d / "runs.csv"), "-o", str(out)])
    except SystemExit as exc:
        assert not exc.code
    assert out.exists()
    return out


def _interval(cli, args: str, cal: Path | None) -> tuple[float, str]:
    """(the step time's 80% interval as a log half-width, its basis) of `predict args`."""
    extra = ["--calibration", str(cal)] if cal else []
    code, out, err = cli(["predict", *args.split(), *extra, "--json"])
    assert code == 0, err
    d = json.loads(out)
    return math.log(d["step_time_s_high"] / d["step_time_s_low"]) / 2, d["interval"]["basis"]


def test_a_layout_unlike_the_runs_is_never_narrower_than_uncalibrated(cli, calibration: Path):
    """Review 45 #1: the 405B pipeline on 512 GPUs and the 70B over 100 GbE were given -7%/+7%
    from three 8B runs (the fitted parameter's posterior alone), against -19%/+23% uncalibrated.
    Now they carry the unfitted parameters' prior spread and are at least as wide as uncalibrated,
    naming the terms that widened them; the in-sample case stays narrow."""
    near, basis = _interval(cli, IN_SAMPLE, calibration)
    plain, _ = _interval(cli, IN_SAMPLE, None)
    assert near < 0.5 * plain and "wider where" not in basis
    for what, args in FAR.items():
        far, basis = _interval(cli, args, calibration)
        uncalibrated, _ = _interval(cli, args, None)
        assert far >= uncalibrated, what
        assert far > 2 * near and "wider where the runs measured nothing" in basis, what
    # the 100 GbE case leans on the network the runs never measured beyond two servers
    assert "inter_node_bandwidth_scale" in basis and "inter_node_scaling_exponent" in basis


def test_the_unmeasured_part_is_the_prior_along_what_no_run_measured():
    """`calibration.unmeasured.parameter_var`: a gradient along a parameter no run is sensitive to
    gets that parameter's variance from Sigma_all; along a fitted one, its posterior (never less)."""
    from shardwise.calibration.fit import Fit
    from shardwise.calibration.unmeasured import ALL, covariance_all, parameter_var, widening_terms

    fit = Fit(("matmul_efficiency_scale",), {}, np.array([[1e-4]]), 0.05, dof=10.0)
    cov = covariance_all(fit)  # no full covariance stored: the unfitted priors' mixture variance
    j, m = ALL.index("inter_node_p2p_scale"), ALL.index("matmul_efficiency_scale")
    g = np.zeros((2, len(ALL)))
    g[0, m] = 0.8  # in-sample: the fitted parameter only
    g[1, m], g[1, j] = 0.8, 0.3  # a pipeline cut across servers, which no run measured
    var, measured = parameter_var(g, fit)
    assert var[0] == pytest.approx(0.64e-4) and measured[1] == pytest.approx(0.64e-4)
    assert var[1] == pytest.approx(0.64e-4 + 0.09 * cov[j, j]) and cov[j, j] > math.log(1.5) ** 2
    assert widening_terms(g[:1], fit) == [] and widening_terms(g, fit) == ["inter_node_p2p_scale"]


def test_serving_ranges_widen_where_no_published_serving_run_measured(cli):
    """Review 45 #6: a mixture of experts got the dense models' +-14%. A family no published serving
    run measured takes its training family's spread where wider, a GPU without a serving row its GPU
    term, as training intervals do; the number says "unmeasured"."""
    from shardwise.calibration import spreads

    dense = spreads.serving_log_sd("h100-sxm5-80gb")
    assert dense == spreads.SERVING_LOG_SD
    assert spreads.serving_log_sd("h100-sxm5-80gb", "moe") == spreads.FAMILY_LOG_SD["moe"][0]
    assert spreads.serving_log_sd("l40s", "moe") > spreads.serving_log_sd("h100-sxm5-80gb", "moe")
    code, out, _ = cli(
        [
            "serve",
            "--model",
            "qwen3-235b-a22b",
            "--system",
            "dgx-h100",
            "--framework",
            "sglang",
            "--weight-precision",
            "fp8",
            "--concurrency",
            "128",
            "--plan",
            "tp=8,ep=8",
        ]
    )
    text = " ".join(out.split())
    assert code == 0 and "unmeasured (no serving run of mixture-of-experts models in the serving model's spread" in text
    # the one public MoE serving figure is named beside the band, not hidden (review 50 #4)
    assert "SGLang PR 3602" in text and "1,468 against 4,624" in text
    code, out, _ = cli(["serve", "--model", "llama3-70b", "--system", "dgx-h100", "--plan", "tp=8", "--json"])
    interval = json.loads(out)["plans"][0]["interval"]
    assert code == 0 and interval["log_sd"] == spreads.SERVING_LOG_SD and not interval["unmeasured"]
    code, out, _ = cli(
        [
            "serve",
            "--model",
            "mixtral-8x7b",
            "--system",
            "l40s-8x",
            "--framework",
            "vllm",
            "--plan",
            "tp=1,ep=8",
            "--json",
        ]
    )
    interval = json.loads(out)["plans"][0]["interval"]
    assert interval["unmeasured"] and interval["log_sd"] == pytest.approx(spreads.serving_log_sd("l40s", "moe"))
    assert "l40s" in interval["basis"] and "mixture-of-experts" in interval["basis"]
    # crossover of a serving workload: the same width and word (`specs.experiment`)
    args = "--model mixtral-8x7b --system dgx-h100 --workload decode --plan tp=8 --plan tp=2,pp=4 --vary batch=1,8"
    code, out, _ = cli(["crossover", *args.split(), "--json"])
    interval = json.loads(out)["interval"]
    assert interval["log_sd"] == spreads.FAMILY_LOG_SD["moe"][0] and interval["basis"].startswith("unmeasured: ")


def test_the_serving_gpus_are_those_of_the_published_serving_runs():
    """`spreads.SERVING_GPUS` is the GPUs of `validate inference`'s rows (SERVING_RUNS of them)."""
    from shardwise import presets
    from shardwise.analyses.serving_validation import SYSTEMS, inference_rows
    from shardwise.calibration import spreads

    systems = {SYSTEMS[r["gpu"]] for r in inference_rows()}
    gpus = {presets.system(s).gpu.name for s in systems}
    assert gpus == spreads.SERVING_GPUS


def test_the_serving_engines_are_those_of_the_published_serving_runs(cli):
    """`spreads.SERVING_ENGINES` is the engines of `validate inference`'s rows; another engine's interval
    says no run of its own checks it (its width stays the serving spread: no between-engine spread is published)."""
    from shardwise.analyses.serving_validation import inference_rows
    from shardwise.calibration import spreads

    engines = {
        "fastertransformer" if r["framework"].startswith("FasterTransformer") else "tensorrt-llm"
        for r in inference_rows()
    }
    assert engines == spreads.SERVING_ENGINES
    assert {r["framework"].split()[0] for r in inference_rows()} <= {"TensorRT-LLM", "FasterTransformer"}
    args = ["serve", "--model", "llama3-70b", "--system", "dgx-h100", "--plan", "tp=8", "--json"]
    bases = {}
    for engine in ("tensorrt-llm", "vllm"):
        code, out, err = cli([*args, "--framework", engine])
        assert code == 0, err
        bases[engine] = json.dumps(json.loads(out))
    assert "none of vllm" in bases["vllm"] and "none of" not in bases["tensorrt-llm"]


def test_serve_prints_the_bands_two_sides(cli):
    """Review 46 #3: the band is log-normal, so its two sides differ (-35%/+54% for a mixture of experts);
    the text prints both, as the JSON's *_low and *_high hold them."""
    import math

    from shardwise.calibration import spreads

    args = ["serve", "--model", "mixtral-8x7b", "--system", "dgx-h100", "--plan", "tp=8", "--concurrency", "8"]
    code, out, err = cli(args)
    assert code == 0, err
    sd = spreads.serving_log_sd("h100-sxm5-80gb", "moe")
    low, high = -math.expm1(-spreads.Z80 * sd), math.expm1(spreads.Z80 * sd)
    assert f"about -{low:.0%}/+{high:.0%} unmeasured" in " ".join(out.split())
