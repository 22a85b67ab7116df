"""The random-effects model the uncalibrated intervals rest on (`analyses.interval_model`) and the
words `predict` gives its interval (`calibration.spreads`, `calibration.intervals`)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.stats import norm, t

from shardwise.analyses import interval_model as im
from shardwise.calibration import spreads


def test_the_centred_half_width_covers_80_percent_of_a_shifted_distribution():
    assert im.symmetric_half_width(0.0, 0.1, math.inf) == pytest.approx(spreads.Z80 * 0.1, rel=1e-6)
    assert im.symmetric_half_width(0.0, 0.1, 3) == pytest.approx(t.ppf(0.9, 3) * 0.1, rel=1e-6)
    h = im.symmetric_half_width(0.05, 0.1, math.inf)
    assert norm.cdf((h - 0.05) / 0.1) - norm.cdf((-h - 0.05) / 0.1) == pytest.approx(0.8, abs=1e-6)
    assert h > spreads.Z80 * 0.1  # an offset centre needs a wider centred interval
    assert im.symmetric_half_width(-0.05, 0.1, math.inf) == pytest.approx(h, rel=1e-6)


def test_dersimonian_laird_by_hand():
    """Two sources 0.2 apart, each mean known to variance 0.01: Q = 2, C = 100, tau^2 = 0.01."""
    q, c, dof = im.dersimonian_laird(np.array([0.1, -0.1]), np.array([0.01, 0.01]))
    assert (q, c, dof) == pytest.approx((2.0, 100.0, 1.0))
    assert max(0.0, (q - dof) / c) == pytest.approx(0.01)


def _cell(stack, source, errors, groups=None):
    return im.Cell(stack, source, tuple(errors), groups or len(errors))


def test_one_large_source_weighs_as_one_source():
    """The between-source variance is the sources' scatter, whatever their run counts: a stack of
    one 300-run source at 0 and two 5-run sources at +-0.1 has tau^2 of the order of 0.01 (the
    sources' variance; DerSimonian-Laird centres them on the precise source: 0.005), not the
    runs' pooled mean square, 0.0004."""
    rng = np.random.default_rng(0)
    cells = [
        _cell("a", "big", rng.normal(0.0, 0.02, 300)),
        _cell("a", "s1", 0.1 + rng.normal(0.0, 0.02, 5)),
        _cell("a", "s2", -0.1 + rng.normal(0.0, 0.02, 5)),
    ]
    within, dof = im.within_variance(cells)
    assert dof == 307 and math.sqrt(within) == pytest.approx(0.02, rel=0.2)
    tau2 = im.stack_tau2({"a": cells}, {"a": within})
    assert 0.004 < tau2["a"][0] < 0.02 and tau2["a"][1] == 2
    assert np.mean(np.concatenate([c.errors for c in cells]) ** 2) < 0.001
    # a stack known from one source takes the pooled value
    tau2 = im.stack_tau2({"a": cells, "b": [_cell("b", "x", [0.0, 0.1])]}, {"a": within, "b": 0.005})
    assert tau2["b"] == tau2[""] == tau2["a"]


def test_a_new_stack_is_wider_than_a_known_one():
    known = [
        _cell("a", "s1", [0.01, 0.03, -0.02, 0.0]),
        _cell("a", "s2", [0.05, 0.02, 0.04]),
        _cell("b", "s3", [-0.2, -0.15, -0.1]),
        _cell("b", "s4", [-0.05, 0.0, -0.1]),
    ]
    whole = [*known, _cell("c", "s5", [0.15, 0.2])]
    a = im.predictive("a", known, whole)
    new = im.predictive("z", known, whole)
    assert (a.runs, a.sources) == (7, 2) and (new.runs, new.sources) == (0, 3)
    assert new.log_sd > a.log_sd > 0.0


def test_a_gpus_term_adds_only_what_the_leave_one_out_errors_miss():
    """A GPU fitted in the folds adds nothing (its fit's error is in every fold's errors); one that
    took a sibling's scale adds one source's variance; one fitted on nothing the unfitted variance.
    The fit's own error still grows as it rests on less (`fit_var`)."""
    fit = im.GpuFit({"many": (20, 4.0), "few": (4, 1.0)}, 0.05**2, 0.06**2, 0.25**2)
    assert fit.var("many") == fit.var("few") == 0.0
    assert fit.var("unknown") == pytest.approx(0.25**2)
    assert fit.fit_var("many") < fit.fit_var("few")
    sib = im.GpuFit({"gb200": (7, 2.0)}, 0.05**2, 0.06**2, 0.25**2)
    assert sib.var("b200-sxm-180gb") == pytest.approx(0.06**2)  # FITTED_FROM: gb200's silicon
    stack = spreads.STACK_LOG_SD["megatron-core"][0]
    assert spreads.uncalibrated_log_sd("gb200") == pytest.approx(stack)
    assert spreads.uncalibrated_log_sd("b200-sxm-180gb") == pytest.approx(math.hypot(stack, spreads.GPU_SOURCE_LOG_SD))
    assert spreads.uncalibrated_log_sd("mi300x") == pytest.approx(math.hypot(stack, spreads.UNFITTED_LOG_SD))


def test_the_fits_sources_are_kish_effective():
    """The scale is a median over rows: H100 fitted on 50 + 4 + 2 rows of three sources rests on
    (56)^2 / (2500 + 16 + 4) = 1.24 effective sources, not 3."""
    assert im.kish(np.array([50.0, 4.0, 2.0])) == pytest.approx(1.24, abs=0.005)
    rows = {"h100": [(0.01 * i, f"g{i % 5}", "big") for i in range(50)]}
    rows["h100"] += [(0.02, "n1", "nemo"), (-0.02, "n2", "nemo"), (0.0, "n1", "nemo"), (0.01, "n2", "nemo")]
    rows["h100"] += [(0.03, "b1", "bridge"), (0.0, "b2", "bridge")]
    fit = im.gpu_fit(rows, {"h100": 1.0})
    assert fit.support["h100"] == (9, pytest.approx(1.24, abs=0.005))


def test_thin_data_gives_an_interval_not_a_crash():
    """No stack with two sources (pooled tau^2 (0, 0)), every source one run (no within variance),
    runs that agree exactly (zero variance): each still gives a finite interval."""
    one_each = [_cell("a", "s1", [0.1]), _cell("b", "s2", [-0.05]), _cell("c", "s3", [0.02])]
    for stack in ("a", "z"):
        p = im.predictive(stack, one_each, one_each)
        assert math.isfinite(p.log_sd) and p.log_sd > 0.0
    exact = [_cell("a", "s1", [0.1, 0.1]), _cell("a", "s2", [0.1, 0.1])]
    assert math.isfinite(im.predictive("a", exact, exact).log_sd)
    assert im.satterthwaite([(0.01, 0.0), (0.02, 4.0)]) == pytest.approx(0.03**2 / (0.02**2 / 4))
    assert im.satterthwaite([(0.0, 0.0), (0.01, 0.0)]) == math.inf


def test_empty_or_nan_input_is_one_clear_error():
    with pytest.raises(ValueError, match="interval model"):
        im.predictive("a", [], [])
    with pytest.raises(ValueError, match="interval model"):
        _cell("a", "s1", [0.1, math.nan])
    with pytest.raises(ValueError, match="interval model"):
        im.satterthwaite([(0.01, math.nan)])
    with pytest.raises(ValueError, match="interval model"):
        im.symmetric_half_width(0.0, 0.1, math.nan)


def test_the_pooled_tau2_sums_q_and_c_over_the_stacks():
    """Borenstein et al. 2009 ch. 19: T^2 = (sum Q_j - sum df_j) / sum C_j, not a dof-weighted mean
    of the stacks' truncated estimates: a stack whose own estimate truncates at 0 pulls it down."""
    by = {
        "a": [_cell("a", "s1", [0.1, 0.12]), _cell("a", "s2", [-0.1, -0.12])],
        "b": [_cell("b", "s3", [0.0, 0.01]), _cell("b", "s4", [0.001, 0.011])],
        "c": [_cell("c", "s5", [0.0])],
    }
    within = {"a": 0.0002, "b": 0.0002, "c": 0.0002}
    parts = []
    for s in ("a", "b"):
        y = np.array([c.mean for c in by[s]])
        parts.append(im.dersimonian_laird(y, np.array([0.0002 / 2, 0.0002 / 2])))
    want = (sum(p[0] for p in parts) - 2.0) / sum(p[1] for p in parts)
    tau2 = im.stack_tau2(by, within)
    assert tau2[""] == pytest.approx((want, 2.0))
    # one common value: "b"'s own estimate (0) and "a"'s (> 0) at one dof each are not used apart
    assert tau2["a"] == tau2["b"] == tau2["c"] == tau2[""]


def test_the_variance_prior_by_moments_of_log_variances():
    """Smyth 2004: variances that scatter no more than their own dof explain share one value (d0 =
    inf); ones that scatter more give a finite d0, and a stack resting on one group borrows it."""
    s0, d0 = im.variance_prior([(0.01, 1000.0), (0.01, 1000.0), (0.0101, 1000.0)])
    assert math.isinf(d0) and s0 == pytest.approx(0.01, rel=0.01)
    s0, d0 = im.variance_prior([(0.001, 20.0), (0.01, 20.0), (0.1, 20.0), (0.003, 20.0)])
    assert 0.0 < d0 < 20.0 and 0.001 < s0 < 0.1
    assert im.variance_prior([(0.02, 3.0)]) == (0.02, 0.0) and im.variance_prior([]) == (im.VAR_FLOOR, 0.0)
    # a scatter beyond the dof's own too small for the solver's bracket: one common variance, no crash
    from scipy.special import polygamma

    tiny = 0.01 * math.exp(math.sqrt(2 * (float(polygamma(1, 5)) + 1e-10)))
    assert math.isinf(im.variance_prior([(0.01, 10.0), (tiny, 10.0)])[1])
    # a variance of 0 (limma's floor relative to the median) is finite in the logs, and the prior
    # it makes is weak: the others keep nearly their own
    base = [(0.001, 20.0), (0.01, 20.0), (0.1, 20.0), (0.003, 20.0)]
    s0, d0 = im.variance_prior([*base, (0.0, 2.0)])
    assert s0 > 0.0 and 0.0 < d0 < 2.0
    assert all(abs((d0 * s0 + d * v) / (d0 + d) / v - 1.0) < 0.1 for v, d in base)
    # one stack with dof: moderated by itself it keeps its own dof, not twice them
    one = im._within([_cell("a", "s1", [0.0, 0.1, -0.1, 0.05]), _cell("b", "s2", [0.3])])
    assert one["a"][1] == 3.0
    cells = [
        _cell("a", "s1", [0.0, 0.05, -0.05, 0.02, -0.02, 0.01]),
        _cell("b", "s2", [0.0, 0.03, -0.03, 0.01, -0.01, 0.02]),
        _cell("c", "s3", [0.0, 0.06, -0.04, 0.03, -0.03, 0.0]),
        _cell("d", "s4", [0.5, -0.5], groups=2),  # one dof, a huge spread
    ]
    within = im._within(cells)
    raw, _ = im.within_variance([cells[3]])
    s0, d0 = within[""]
    assert within["d"][1] == pytest.approx(d0 + 1.0)
    assert within["d"][0] == pytest.approx((d0 * s0 + raw) / (d0 + 1.0)) and within["d"][0] < raw


def test_a_stack_without_runs_is_never_narrower_than_the_widest_with_runs():
    known = [
        _cell("a", "s1", [0.01, 0.03, -0.02, 0.0]),
        _cell("a", "s2", [0.05, 0.02, 0.04]),
        _cell("b", "s3", [-0.6, -0.5, 0.2, 0.1], groups=2),
        _cell("b", "s4", [0.4, -0.3]),
    ]
    new = im.predictive("z", known, known)
    assert new.runs == 0 and new.log_sd >= max(im.predictive(s, known, known).log_sd for s in "ab") - 1e-12


def test_within_source_dof_counts_groups_not_runs():
    """Ten runs of two groups are two groups' worth: one dof per source, not nine."""
    cells = [_cell("a", "s1", [0.0] * 5 + [0.1] * 5, groups=2), _cell("a", "s2", [0.0] * 5 + [0.1] * 5, groups=2)]
    var, dof = im.within_variance(cells)
    assert dof == 2.0 and var == pytest.approx(2 * 10 * 0.05**2 / 18)


def test_predict_says_where_its_interval_comes_from(cli):
    args = ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--nodes", "1", "--global-batch", "8", "--json"]
    code, out, err = cli(args)
    assert code == 0, err
    basis = json.loads(out)["interval"]["basis"]
    _, runs, sources = spreads.STACK_LOG_SD["megatron-core"]
    assert basis.startswith(
        f"uncalibrated: how far the model missed {runs} published megatron-core runs ({sources} sources)"
    )
    assert "with each source held out" in basis and basis.endswith("--calibration fits it to your own runs")
    assert "h100-sxm5-80gb's fitted efficiency included" in basis
    assert "from other stacks" in spreads.stack_basis("internevo")  # one source: tau^2 borrowed
    assert "taken from the gb200's fit" in spreads.gpu_basis("b200-sxm-180gb")
    code, out, err = cli([*args, "--framework", "nanotron"])
    assert code == 0, err
    d = json.loads(out)
    # nanotron has no published step time in the table (its benchmark grid is kept for evaluation)
    assert "nanotron" not in spreads.STACK_LOG_SD
    assert "no published runs of nanotron that the model prices" in d["interval"]["basis"]
    assert f"the {spreads.NO_DATA_STACKS} stacks" in d["interval"]["basis"]
    want = spreads.gpu_widened_log_sd(spreads.NO_DATA_LOG_SD, "h100-sxm5-80gb")
    assert math.log(d["step_time_s_high"] / d["step_time_s"]) == pytest.approx(spreads.Z80 * want, rel=1e-6)
    assert max(sd for sd, _, _ in spreads.STACK_LOG_SD.values()) - 5e-4 <= spreads.NO_DATA_LOG_SD  # the widest
    # a preset on the engine of a stack with runs takes that stack's spread, and says so
    code, out, err = cli([*args, "--framework", "composer"])
    assert code == 0, err
    d = json.loads(out)
    assert "no published runs of composer itself" in d["interval"]["basis"]
    assert "fsdp runs" in d["interval"]["basis"]
    want = spreads.gpu_widened_log_sd(spreads.STACK_LOG_SD["fsdp"][0], "h100-sxm5-80gb")
    assert math.log(d["step_time_s_high"] / d["step_time_s"]) == pytest.approx(spreads.Z80 * want, rel=1e-6)


def test_the_borrowed_spreads_name_real_presets():
    from shardwise import presets

    for preset, stack in spreads.SPREAD_OF.items():
        presets.framework(preset)  # raises on an unknown name
        presets.framework(stack)
        assert preset not in spreads.STACK_LOG_SD and stack in spreads.STACK_LOG_SD


def test_a_gpus_shared_error_is_not_counted_twice():
    """A source's runs on a GPU its fold did not fit share that GPU's efficiency error, which the
    interval adds on its own: the scatter inside the source is taken about each such GPU's mean,
    so an offset between its GPUs does not widen every run's interval a second time. Scatter the
    same inside each GPU, and an offset of 0.3 between them: labelled, the within-source variance
    is the scatter's; unlabelled, the offset's."""
    scatter = [0.01, -0.01, 0.02, -0.02]
    errors = [*scatter, *(0.3 + e for e in scatter)]
    labels = ("",) * 4 + ("a800",) * 4
    labelled = im.Cell("a", "s", tuple(errors), 8, labels)
    plain = im.Cell("a", "s", tuple(errors), 8)
    (v_labelled, d_labelled), (v_plain, d_plain) = im.within_variance([labelled]), im.within_variance([plain])
    assert v_labelled == pytest.approx(np.sum(np.square(scatter)) * 2 / 6)
    assert v_plain > 0.02 > 10 * v_labelled
    assert (d_labelled, d_plain) == (6.0, 7.0)  # each GPU's mean costs a degree of freedom
    assert labelled.mean == plain.mean  # the source's mean (its offset from the stack's) keeps them all
