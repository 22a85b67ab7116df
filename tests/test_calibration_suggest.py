"""Calibration learns the cluster: the network's degradation with scale, far runs explained,
the pick's expected regret, and `calibrate --suggest` on synthetic clusters whose truth differs
from the presets in known ways."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from shardwise import presets
from shardwise.analyses.planner import SearchSpace, _scenario, confirmed_estimate, search
from shardwise.calibration import explain, regret, store
from shardwise.calibration import fit as fitting
from shardwise.calibration import suggest as sg
from shardwise.calibration.cases import Evaluator
from shardwise.calibration.parameters import BY_NAME, apply, network_degradation
from shardwise.engines.training import estimate_training_step
from shardwise.errors import SpecError
from shardwise.specs import Plan, Scenario
from shardwise.specs.memo import Memo

# A job whose planner search is quick: Llama 3 8B on 32 DGX H100, without interleaving (whose
# closed form the planner re-times with the simulator only for its first plans).
MODEL, NODES, BATCH = "llama3-8b", 32, 512
SPACE = SearchSpace(schedule=("1f1b", "gpipe"))


def degraded_network(scn: Scenario) -> Scenario:
    """The truth: each GPU's network rate is 0.8 / (1 + nodes / 8) of the preset's (a shape the
    calibration does not have: it fits (nodes / 2)^-a), 16% of it across 32 servers."""
    c = scn.cluster
    inter = c.inter_node_link
    f = 0.8 / (1 + np.asarray(c.nodes, dtype=float) / 8)
    return Scenario(
        scn.model, c.with_(inter_node_link=inter.with_(bandwidth_bytes_per_s=inter.bandwidth_bytes_per_s * f)), scn.plan
    )


def slow_small_gemms(scn: Scenario) -> Scenario:
    """The truth: GEMM efficiency x 1.3 M / (M + 4096), M the tokens of a micro-batch per
    context-parallel rank (faster than the presets at large M, slower at small M)."""
    c, p = scn.cluster, scn.plan
    m = np.asarray(p.micro_batch, dtype=float) * scn.model.seq_len / np.asarray(p.cp, dtype=float)
    f = 1.3 * m / (m + 4096.0)
    fp8 = np.asarray(c.gpu.matmul_efficiency_fp8)
    gpu = c.gpu.with_(
        matmul_efficiency=np.minimum(1.0, c.gpu.matmul_efficiency * f),
        matmul_efficiency_fp8=np.where(fp8 > 0, np.minimum(1.0, fp8 * f), 0.0),
    )
    return Scenario(scn.model, c.with_(gpu=gpu), p)


def slow_all_to_all(scn: Scenario) -> Scenario:
    """The truth: all-to-all across servers at a quarter of the rate the other collectives get
    there (a fabric whose spine or cross-rail paths are oversubscribed); nothing else differs."""
    return Scenario(scn.model, scn.cluster.with_(inter_node_all_to_all_scale=0.25), scn.plan)


class Truth:
    """Measured times of a synthetic cluster: the planner's own pricing (the simulator for a
    pipeline) on the perturbed hardware; the true best among the 32 plans fastest in closed form."""

    def __init__(self, base_search, perturb, top: int = 32):
        self.search, self.perturb, self.cache = base_search, perturb, {}
        fit = np.flatnonzero(base_search.fits)
        cols = {k: v[fit] for k, v in base_search.columns.items()}
        s = base_search
        closed = estimate_training_step(perturb(_scenario(s.model, s.cluster, s.global_batch, s.space, cols)))
        order = np.argsort(np.asarray(closed.step_time_s))[:top]
        self.best = min(self.time(int(fit[j])) for j in order)

    def time(self, i: int) -> float:
        if i not in self.cache:
            est = confirmed_estimate(self.perturb(self.search.scenario(i)))
            self.cache[i] = float(np.asarray(est.step_time_s))
        return self.cache[i]

    def regret(self, i: int) -> float:
        return self.time(i) / self.best - 1


def test_network_degradation_is_one_up_to_two_servers_and_a_power_law_beyond():
    assert float(network_degradation(1, 0.7)) == 1.0
    assert float(network_degradation(2, 0.7)) == 1.0
    assert float(network_degradation(64, 0.0)) == 1.0
    assert float(network_degradation(64, 1.0)) == pytest.approx(1 / 32)
    assert float(network_degradation(16, 0.5)) == pytest.approx(1 / math.sqrt(8))
    cluster = presets.system("dgx-h100", 64)
    slow = apply(cluster, {"inter_node_scaling_exponent": 0.5})
    ratio = slow.inter_node_link.bandwidth_bytes_per_s / cluster.inter_node_link.bandwidth_bytes_per_s
    assert ratio == pytest.approx(32**-0.5)
    assert slow.intra_node_link == cluster.intra_node_link


def test_the_exponent_is_bounded_physically_and_stored_as_a_pure_number():
    p = BY_NAME["inter_node_scaling_exponent"]
    assert (p.low, p.high, p.unit) == (0.0, 1.0, "1")


def _far_run(exponent: float) -> tuple[Scenario, float]:
    model = presets.model("llama3-70b")
    scn = Scenario(model, presets.system("dgx-h100", 64), Plan(tp=8, pp=1, dp=64, global_batch=512, zero_stage=3))
    measured = float(Evaluator([scn]).step_s({"inter_node_scaling_exponent": [exponent]})[0, 0])
    return scn, measured


def test_a_run_far_from_the_prediction_is_explained_by_the_network_at_scale():
    scn, measured = _far_run(0.6)
    ex = explain.explain_run(scn, measured)
    assert ex.ratio > 3  # far: `calibrate` used to refuse it
    by_name = {e.parameter: e for e in ex.found}
    assert by_name["inter_node_scaling_exponent"].value == pytest.approx(0.6, abs=0.01)
    assert "GB/s per GPU across 64 servers" in by_name["inter_node_scaling_exponent"].text
    rate = float(
        apply(scn.cluster, {"inter_node_scaling_exponent": 0.6}).inter_node_link.effective_bandwidth_bytes_per_s
    )
    said = re.search(r"about ([0-9.]+) GB/s", by_name["inter_node_scaling_exponent"].text)
    assert said is not None and float(said[1]) == pytest.approx(rate / 1e9, rel=0.01)
    assert "matmul_efficiency_scale" not in by_name  # GEMMs at 30% of their preset are not slow enough


def test_a_run_no_parameter_can_explain_is_named_with_what_was_tried():
    scn, measured = _far_run(0.0)
    ex = explain.explain_run(scn, measured / 1000)  # a thousand times faster than the hardware allows
    assert ex.found == ()
    assert set(ex.tried) == set(BY_NAME)
    text = explain.describe("runs.csv line 2", "step_time_s", measured / 1000, ex)
    assert "no parameter within its physical range explains it" in text and "GEMM efficiency" in text


def _runs_csv(tmp_path: Path, rows: list[tuple[int, int, int, float]]) -> Path:
    lines = ["model,system,num_gpus,tp,pp,global_batch,zero,step_time_s"]
    lines += [f"llama3-70b,dgx-h100,{n},{tp},{pp},512,3,{t:.6g}" for n, tp, pp, t in rows]
    path = tmp_path / "runs.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.slow
def test_calibrate_fits_a_far_run_and_refuses_only_what_nothing_explains(cli, tmp_path):
    model = presets.model("llama3-70b")
    rows = []
    for nodes, tp in ((2, 8), (16, 8), (64, 8)):
        scn = Scenario(
            model,
            presets.system("dgx-h100", nodes),
            Plan(tp=tp, pp=1, dp=nodes * 8 // tp, global_batch=512, zero_stage=3),
        )
        rows.append((nodes * 8, tp, 1, float(estimate_training_step(degraded_network(scn)).step_time_s)))
    code, out, err = cli(["calibrate", str(_runs_csv(tmp_path, rows)), "-o", str(tmp_path / "c.yaml")])
    assert code == 0, err
    assert "would be explained by inter-node collectives at about" in " ".join(out.split())
    cal = store.load(tmp_path / "c.yaml")
    assert np.max(np.abs(cal.fit.full_covariance - cal.fit.full_covariance.T)) < 1e-9
    assert {"inter_node_bandwidth_scale", "inter_node_scaling_exponent"} & set(cal.fit.fitted)
    # every parameter's covariance is part of what the checksum protects
    text = (tmp_path / "c.yaml").read_text()
    start = text.index("u_covariance_all:")
    first = text.index("- [", start) + 3
    (tmp_path / "e.yaml").write_text(text[:first] + "9" + text[first:])
    with pytest.raises(SpecError, match="checksum"):
        store.load(tmp_path / "e.yaml")
    code, out, err = cli(
        [
            "calibrate",
            str(_runs_csv(tmp_path, [*rows[:2], (512, 8, 1, rows[2][3] / 1000)])),
            "-o",
            str(tmp_path / "d.yaml"),
        ]
    )
    assert code == 2 and "no parameter within its physical range explains it" in err
    assert not (tmp_path / "d.yaml").exists()


@pytest.mark.slow
def test_the_fit_finds_parameters_the_runs_need_together(monkeypatch):
    """GEMMs slow at small micro-batches and fast at large ones (`slow_small_gemms`), six runs at 8k
    and 16k tokens per micro-batch: the GEMM scale and the ramp explain them together, and neither
    alone beats a link latency, so forward selection stops there; the particles' explanation
    (`explain.particle_need`) finds the pair."""
    model, cluster = presets.model(MODEL), presets.system("dgx-h100", NODES)
    layouts = [(2, 2, 4, 3), (1, 1, 1, 3), (2, 2, 4, 1), (2, 1, 2, 1), (2, 1, 2, 3), (1, 1, 1, 2)]  # tp, cp, mb, ZeRO
    scns = [
        Scenario(
            model,
            cluster,
            Plan(
                tp=tp,
                cp=cp,
                pp=1,
                dp=NODES * 8 // (tp * cp),
                global_batch=BATCH,
                micro_batch=mb,
                zero_stage=zero,
                sequence_parallel=tp > 1,
            ),
        )
        for tp, cp, mb, zero in layouts
    ]
    measured = np.array([float(estimate_training_step(slow_small_gemms(s)).step_time_s) for s in scns])
    found = explain.explaining_fit(scns, measured)
    assert set(found.fitted) == {"matmul_efficiency_scale", "gemm_half_rate_tokens"}
    assert found.values["matmul_efficiency_scale"] > 1.1 and found.values["gemm_half_rate_tokens"] > 2000
    assert np.max(np.abs(found.after_log_error)) < 0.05
    # forward selection alone: one parameter that leaves a run more than 8% off
    monkeypatch.setattr(explain, "particle_need", lambda cases, y: (dict.fromkeys(BY_NAME, 0.0), {}))
    forward = explain.explaining_fit(scns, measured)
    assert "gemm_half_rate_tokens" not in forward.fitted and np.max(np.abs(forward.after_log_error)) > 0.08


def _draws(cost: list[list[float]]) -> regret.Draws:
    c = np.array(cost)
    unc = regret.uncertainty(None)
    return regret.Draws(np.arange(c.shape[1]), np.zeros((len(c), len(unc.names))), c, unc, np.ones(c.shape[1]))


def test_regret_of_the_pick_by_hand():
    # three draws, three plans; the pick (plan 0) is best in the first, 10% and 50% slower in the others
    d = _draws([[1.0, 1.2, 1.3], [1.1, 1.0, 1.4], [1.5, 1.2, 1.0]])
    r = regret.regret_of(d)
    assert r.expected == pytest.approx((0 + 0.1 + 0.5) / 3)
    assert r.chance == pytest.approx(2 / 3)
    assert r.size_when_beaten == pytest.approx(0.3)
    d = _draws([[1.0, 1.2], [1.0, 1.001], [1.0, 2.0]])  # never beaten beyond the planner's tie
    r = regret.regret_of(d)
    assert (r.expected, r.chance, r.rival) == (0.0, 0.0, None)


def test_draws_truncated_to_the_ranges_keep_the_correlations_the_runs_impose():
    """`regret.truncated_normal` against rejection from a million draws: two parameters the runs tie
    (correlation -0.9), one centred on its lower bound 0 (an overhead calibrated at 0 s). Its draws
    keep the tie (the other parameter is pushed the other way), which reflecting the rejected half
    into range would break (its mean would not move)."""
    cov = np.array([[1.0, -0.9], [-0.9, 1.0]])
    low, high = np.array([0.0, -np.inf]), np.array([np.inf, np.inf])
    rng = np.random.default_rng(1)
    x = regret.truncated_normal(cov, low, high, np.ones((20000, 2)), rng)
    ref = rng.multivariate_normal(np.zeros(2), cov, 1_000_000)
    ref = ref[ref[:, 0] >= 0]
    assert np.all(x[:, 0] >= 0)
    assert np.allclose(x.mean(axis=0), ref.mean(axis=0), atol=0.03)  # (0.80, -0.72)
    assert np.corrcoef(x.T)[0, 1] == pytest.approx(np.corrcoef(ref.T)[0, 1], abs=0.03)
    reflected = rng.multivariate_normal(np.zeros(2), cov, 20000)
    reflected[:, 0] = np.abs(reflected[:, 0])
    assert abs(reflected[:, 1].mean()) < 0.05 < abs(x[:, 1].mean() - reflected[:, 1].mean()) - 0.5


@pytest.mark.slow
@pytest.mark.parametrize("perturb", [degraded_network, slow_small_gemms])
def test_suggested_runs_teach_the_planner_the_cluster(perturb):
    """The issue's clusters: the network far below nominal across servers; GEMMs slow at small
    micro-batches (the calibration's GEMM ramp, `gemm_half_rate_tokens`, has the shape but not
    the 1.3 x at large M). Uncalibrated, the pick is more than 5% slower than the best; after runs
    chosen by --suggest (at most 6), the calibrated planner's pick is within 5% of the true best,
    and where it was still wrong the expected regret did not claim under half its true size."""
    model, base = presets.model(MODEL), presets.system("dgx-h100", NODES)
    first = search(model, base, BATCH, SPACE)
    truth = Truth(first, perturb)
    assert truth.regret(int(first.ranked(1)[0])) > 0.05
    now, fitted = _calibrate_on_suggested_runs(first, truth, base, BATCH, SPACE)
    assert truth.regret(int(now.ranked(1)[0])) <= 0.05
    assert np.max(np.abs(fitted.after_log_error)) < 0.08  # the calibration explains its own runs


def _calibrate_on_suggested_runs(
    first, truth: Truth, base, batch: int, space: SearchSpace, runs: int = 6, honest_from: int = 1
):
    """Measure the run --suggest names, calibrate, re-plan; `runs` times. The last search and fit.
    From run `honest_from` on, the expected regret never claims under half the true one."""
    cases, measured, done, now, fitted = [], [], [], first, None
    for _ in range(runs):
        found = sg.suggest(now, fitted, 1, tuple(done), runs=(cases, np.array(measured)) if cases else None)
        i = found.runs[0].plan
        done.append(i)
        cases.append(first.scenario(i))
        measured.append(truth.time(i))
        fitted = explain.explaining_fit(cases, np.array(measured))
        now = search(first.model, apply(base, fitted.values), batch, space)
        true, expected = truth.regret(int(now.ranked(1)[0])), regret.plan_regret(now, fitted).expected
        print(f"run {len(done)}: {regret.label(first, i)}; {fitted.fitted}; true {true:.1%}, expected {expected:.1%}")
        if len(done) >= honest_from:
            assert expected >= true / 2  # never confident about a pick that is far off
    return now, fitted


@pytest.mark.slow
def test_a_slow_all_to_all_across_servers_is_learned_and_moves_the_moe_pick():
    """Mixtral 8x7B on 16 servers of 4 H100 (the 4-GPU HGX boards many clouds rent), global batch
    256; the truth's all-to-all across servers runs at 0.25 x the other collectives' rate. The
    presets' pick spreads its 8 experts over two servers (ep=8): 31% slower than the best. After
    at most six suggested runs `inter_node_all_to_all_scale` is fitted near 0.25 and the pick is
    within 5% of the best (with the older nine parameters the same loop fitted a slower GEMM and
    the pick stayed 30.7% off after six runs). The promise about the expected regret holds from
    run 3 on: before a run that sets the all-to-all apart, the exact posterior (importance sampling
    of 16,384 prior draws, once ZeRO-3 is priced per layer) itself says 2-3%: the prior puts about
    93% of its weight on all-to-all rates at which the pick is fine, and the first runs, bound by
    their ZeRO-3 gathers, do not move that."""
    model, base = presets.model("mixtral-8x7b"), presets.system("dgx-h100", 16).with_(gpus_per_node=4)
    space = SearchSpace(schedule=("1f1b",))
    first = search(model, base, 256, space)
    truth = Truth(first, slow_all_to_all)
    assert truth.regret(int(first.ranked(1)[0])) > 0.2
    now, fitted = _calibrate_on_suggested_runs(first, truth, base, 256, space, honest_from=3)
    assert truth.regret(int(now.ranked(1)[0])) <= 0.05
    assert "inter_node_all_to_all_scale" in fitted.fitted
    assert fitted.values["inter_node_all_to_all_scale"] == pytest.approx(0.25, rel=0.2)


def test_the_all_to_all_and_pipeline_send_scales_move_only_their_own_kind_across_servers():
    from shardwise.physics.collectives import Fabric

    cluster = presets.system("dgx-h100", 4)
    n = 1 << 28
    base = Fabric.of(cluster)
    for name, slower in (("inter_node_all_to_all_scale", "a2a"), ("inter_node_p2p_scale", "p2p")):
        f = Fabric.of(apply(cluster, {name: 0.5}))
        times = {
            "a2a": (f.group(32, 8).all_to_all(n), base.group(32, 8).all_to_all(n)),
            "p2p": (f.p2p(n, True), base.p2p(n, True)),
        }
        for kind, (t, t0) in times.items():
            assert (float(t) / float(t0) > 1.5) == (kind == slower), (name, kind)
        # the ring collectives across servers and everything inside a server are untouched
        assert float(f.group(32, 8).all_reduce(n)) == float(base.group(32, 8).all_reduce(n))
        assert float(f.group(8, 8).all_to_all(n)) == float(base.group(8, 8).all_to_all(n))
        assert float(f.p2p(n, False)) == float(base.p2p(n, False))
    p = BY_NAME["inter_node_all_to_all_scale"]
    assert (round(math.exp(p.low), 3), round(math.exp(p.high), 3), p.unit) == (0.05, 2.0, "x")


def test_a_dense_job_in_one_pipeline_stage_leaves_the_kind_scales_not_fitted():
    scn, measured = _far_run(0.3)  # dense, pp=1: no all-to-all, no pipeline send
    result = fitting.fit([scn], np.array([measured]))
    for name in ("inter_node_all_to_all_scale", "inter_node_p2p_scale"):
        assert name not in result.fitted and "no run" in result.not_fitted[name]


@pytest.mark.slow
def test_suggest_prints_runs_with_launch_commands_and_plan_prints_the_regret(cli, tmp_path):
    job = ["--model", MODEL, "--system", "dgx-h100", "--nodes", str(NODES), "--global-batch", str(BATCH)]
    job += ["--schedule", "1f1b,gpipe"]
    code, out, err = cli(["calibrate", "--suggest", "2", *job])
    assert code == 0, err
    assert "expected regret of the pick" in out and "measure next, in this order" in out
    assert out.count("torchrun") == 2 and "1. tp=" in out and "2. tp=" in out
    code, out, err = cli(["calibrate", "--suggest", "1", "--emit", "torchtitan", *job])
    assert code == 0, err
    assert "launch with torchtitan" in out or "no launch:" in out
    assert "priced under torchtitan-compile, the stack torchtitan's launch runs" in err  # as plan --emit searches
    # plan --calibration: the pick's expected regret under the calibration
    model = presets.model(MODEL)
    rows = []
    for nodes in (4, 32):
        scn = Scenario(
            model, presets.system("dgx-h100", nodes), Plan(tp=1, pp=1, dp=nodes * 8, global_batch=512, zero_stage=3)
        )
        rows.append(
            f"{MODEL},dgx-h100,{nodes * 8},1,1,512,3,{float(estimate_training_step(scn).step_time_s) * 1.1:.6g}"
        )
    runs = tmp_path / "runs.csv"
    runs.write_text("model,system,num_gpus,tp,pp,global_batch,zero,step_time_s\n" + "\n".join(rows) + "\n")
    assert cli(["calibrate", str(runs), "-o", str(tmp_path / "c.yaml")])[0] == 0
    code, out, err = cli(["plan", *job, "--calibration", str(tmp_path / "c.yaml")])
    assert code == 0, err
    assert "expected regret of the pick:" in out and "calibration" in out.split("expected regret of the pick:")[1]
    code, out, err = cli(["plan", *job, "--calibration", str(tmp_path / "c.yaml"), "--json"])
    assert code == 0, err
    printed = json.loads(out)["regret"]
    assert printed["expected"] >= 0 and 0 <= printed["chance_another_is_faster"] <= 1
    assert printed["text"].startswith("expected regret of the pick:")


def test_suggest_needs_a_job_and_job_flags_need_suggest(cli, tmp_path):
    code, _, err = cli(["calibrate", "--suggest", "2", "--model", MODEL, "--system", "dgx-h100", "--nodes", "2"])
    assert code == 2 and "--global-batch" in err
    code, _, err = cli(["calibrate", "--model", MODEL])
    assert code == 2 and "--suggest" in err
    code, _, err = cli(["calibrate"])
    assert code == 2 and "RUNS.csv" in err


def test_measured_plans_are_not_suggested_again():
    model, base = presets.model(MODEL), presets.system("dgx-h100", 4)
    s = search(model, base, 64, SPACE)
    first = sg.suggest(s, None, 1).runs[0].plan
    again = sg.measured_plans(s, [s.scenario(first)])
    assert first in again
    assert sg.suggest(s, None, 1, again).runs[0].plan != first


def test_fits_side_by_side_are_the_fits_run_alone_and_errors_reach_the_caller():
    """`together.side_by_side`: each fit's evaluations priced with the others' in one call give
    the same fits, to the bit, as each run alone; an error in one fit is raised to the caller."""
    from shardwise.calibration.together import side_by_side

    scns = [_far_run(0.3)[0], _far_run(0.6)[0]]
    ev = Evaluator(scns)
    measured = ev.step_s({})[0] * np.array([1.3, 0.9])

    class Counting:
        def __init__(self):
            self.calls = 0

        def step_s(self, sets):
            self.calls += 1
            return ev.step_s(sets)

    # fits of different lengths on this network-bound run (its ZeRO-3 gathers across 64 servers, layer
    # by layer; the memory bandwidth, tried here before 2026-12, no longer moves it enough to be fitted)
    tried = (("matmul_efficiency_scale",), ("inter_node_bandwidth_scale",), ("step_overhead_s", "link_latency_scale"))
    jobs = [lambda e, names=names: fitting.fit(scns, measured, only=names, wide=names, ev=e) for names in tried]
    one, three = Counting(), Counting()
    alone = [job(one) for job in jobs]
    together = side_by_side(three, jobs)
    assert three.calls < 0.75 * one.calls  # one call prices a step of each fit still running (here 35 calls, 52 alone)
    for a, b in zip(alone, together, strict=True):
        assert a.fitted == b.fitted and a.values == b.values
        assert np.array_equal(a.after_log_error, b.after_log_error) and np.array_equal(a.u_covariance, b.u_covariance)

    def broken(e):
        raise SpecError("no such run")

    with pytest.raises(SpecError, match="no such run"):
        side_by_side(ev, [jobs[0], broken, jobs[1]])


def test_a_posterior_asked_for_again_is_the_one_drawn_and_cannot_be_changed(monkeypatch):
    """`particles.posterior` keeps its last answers (`explain.particle_need` and the next `suggest`
    ask for the same one): the same runs, count and seed are drawn once; other runs or another
    seed are drawn anew; a kept answer's arrays are read-only (no caller can change it for the next)."""
    from shardwise.calibration import particles

    drawn = []

    def fake(cases, y, n, seed):
        drawn.append((len(cases), float(y[0]), n, seed))
        return particles.Posterior(np.full((n, len(BY_NAME)), float(seed)), 1, 0.5, np.zeros(n))

    monkeypatch.setattr(particles, "_posterior", fake)
    monkeypatch.setattr(particles, "_KEPT", Memo("test: particles.posterior", size=4))
    scn = _far_run(0.3)[0]
    a = particles.posterior([scn], np.array([2.0]), n=4, seed=1)
    assert particles.posterior([scn], [2.0], n=4, seed=1) is a and len(drawn) == 1
    assert particles.posterior([scn], [2.5], n=4, seed=1) is not a
    assert particles.posterior([scn], [2.0], n=4, seed=2).u[0, 0] == 2.0
    assert particles.posterior([scn, scn], [2.0, 2.0], n=4, seed=1) is not a and len(drawn) == 4
    with pytest.raises(ValueError, match="read-only"):
        a.u[0, 0] = 5.0


def test_the_regret_sentence_takes_an_before_eighty_and_eleven():
    from shardwise.calibration.regret import Regret, describe

    def said(chance: float) -> str:
        return describe(Regret(0, 0.04, chance, 0.05, None, 0.0, 256, 21, "the presets' priors"))

    assert ": an 86% chance that another plan" in said(0.86)
    assert ": an 8% chance" in said(0.08) and ": an 11% chance" in said(0.11)
    assert ": a 12% chance" in said(0.12) and ": a 1% chance" in said(0.01)


def test_calibrate_suggest_as_a_word_points_at_the_option(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = cli(["calibrate", "suggest"])
    assert code == 2 and "calibrate --suggest N" in err and "Traceback" not in err


def test_suggest_json_writes_memory_bytes_as_a_dict_of_parts_with_its_total():
    """calibrate --suggest --json's pick and each suggestion's row carry the planner's row, whose
    memory_bytes became a dict of parts with its `total` (was the total alone, parts under
    memory_breakdown_bytes): the shape docs/calibration.md names."""
    from shardwise.cli.calibrate_suggest import _as_dict

    s = search(presets.model(MODEL), presets.system("dgx-h100", 4), 64, SPACE)
    found = sg.suggest(s, None, 1)
    out = _as_dict(s, found, [{"target": "megatron"}], "presets")
    for row in (out["pick"], out["suggestions"][0]["row"]):
        parts = row["memory_bytes"]
        assert isinstance(parts, dict) and "memory_breakdown_bytes" not in row
        summed = sum(v for k, v in parts.items() if k not in ("total", "cached"))  # cached: beside the total
        assert parts["total"] == pytest.approx(summed, rel=1e-9)
