"""What the physics guarantees for any valid training configuration, checked over a few hundred
random ones (`invariant_cases`: model presets and custom shapes, systems, tp/pp/cp/ep, batches,
recomputation, precision, frameworks and their switches).

Each test walks its cases and collects every one that breaks the property, so a failure lists
them all (the request's fields: paste them into `TrainingRequest(**fields)` to see one).
The larger sweeps are marked slow.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import pytest

from invariant_cases import Case, step_s, training_cases
from shardwise.engines.training import estimate_training_step
from shardwise.specs import Cluster, Link, Scenario

CASES = 200  # per test in the default run
SLOW_CASES = 600  # the marked sweeps (a case they found is pinned in test_invariants_pinned.py)
RTOL = 1e-9  # rounding: sums of a dozen terms in another order


def _failures(cases: Iterable[Case], check: Callable[[Case], str | None]) -> list[str]:
    out = []
    for case in cases:
        why = check(case)
        if why:
            out.append(f"{case}: {why}")
    return out


def _assert_none(failures: list[str]) -> None:
    assert not failures, f"{len(failures)} cases break it:\n" + "\n".join(failures[:10])


def _link(link: Link | None, **scale: float) -> Link | None:
    """`link` with each named field multiplied by its factor."""
    if link is None:
        return None
    return link.with_(**{name: getattr(link, name) * factor for name, factor in scale.items()})


FASTER = 3.0


def faster_links(cluster: Cluster) -> dict[str, Cluster]:
    """The cluster with one kind of link made faster at a time (more bandwidth, less latency), and
    with all of them at once."""
    intra, inter = cluster.intra_node_link, cluster.inter_node_link
    bandwidth = {"bandwidth_bytes_per_s": FASTER, "ll_bandwidth_bytes_per_s": FASTER}
    latency = {"latency_s": 1 / FASTER, "base_latency_s": 1 / FASTER}
    return {
        "intra bandwidth": cluster.with_(intra_node_link=_link(intra, **bandwidth)),
        "inter bandwidth": cluster.with_(inter_node_link=_link(inter, **bandwidth)),
        "intra latency": cluster.with_(intra_node_link=_link(intra, **latency)),
        "inter latency": cluster.with_(inter_node_link=_link(inter, **latency)),
        "every link": cluster.with_(
            intra_node_link=_link(intra, **bandwidth, **latency), inter_node_link=_link(inter, **bandwidth, **latency)
        ),
    }


def faster_gpus(cluster: Cluster) -> dict[str, Cluster]:
    """The cluster with a faster GPU: more tensor-core peak (every precision), more memory
    bandwidth, shorter kernel launches, both peak and bandwidth."""
    g = cluster.gpu
    peak = {
        "peak_flops_per_s_16bit": g.peak_flops_per_s_16bit * FASTER,
        "peak_flops_per_s_fp8": g.peak_flops_per_s_fp8 * FASTER,
        "peak_flops_per_s_fp4": g.peak_flops_per_s_fp4 * FASTER,
    }
    hbm = {"memory_bandwidth_bytes_per_s": g.memory_bandwidth_bytes_per_s * FASTER}
    return {
        "peak": cluster.with_(gpu=g.with_(**peak)),
        "memory bandwidth": cluster.with_(gpu=g.with_(**hbm)),
        "kernel launch": cluster.with_(gpu=g.with_(kernel_launch_s=g.kernel_launch_s / FASTER)),
        "peak and bandwidth": cluster.with_(gpu=g.with_(**peak, **hbm)),
    }


def _never_slower(variants: Callable[[Cluster], dict[str, Cluster]]) -> Callable[[Case], str | None]:
    def check(case: Case) -> str | None:
        scn = case.scenario
        for name, cluster in variants(scn.cluster).items():
            t = step_s(Scenario(scn.model, cluster, scn.plan))
            if t > case.step_time_s * (1 + RTOL):
                return f"faster {name}: {case.step_time_s:.6g} s -> {t:.6g} s"
        return None

    return check


def test_faster_links_never_slow_a_step():
    _assert_none(_failures(training_cases(1, CASES), _never_slower(faster_links)))


def test_a_faster_gpu_never_slows_a_step():
    _assert_none(_failures(training_cases(2, CASES), _never_slower(faster_gpus)))


@pytest.mark.slow
@pytest.mark.parametrize("variants", [faster_links, faster_gpus], ids=["links", "gpu"])
def test_faster_hardware_never_slows_a_step_many(variants):
    _assert_none(_failures(training_cases(11, SLOW_CASES), _never_slower(variants)))


def _more_memory_keeps_fitting(case: Case) -> str | None:
    est = estimate_training_step(case.scenario)
    if not bool(est.fits_in_memory):
        return None
    scn = case.scenario
    for factor in (1.01, 2.0):
        bigger = scn.cluster.with_(gpu=scn.cluster.gpu.with_(memory_bytes=scn.cluster.gpu.memory_bytes * factor))
        if not bool(estimate_training_step(Scenario(scn.model, bigger, scn.plan)).fits_in_memory):
            return f"fits at {float(scn.cluster.gpu.memory_bytes):.4g} B, not at x{factor}"
    return None


def test_more_gpu_memory_never_makes_a_fitting_plan_not_fit():
    _assert_none(_failures(training_cases(3, CASES), _more_memory_keeps_fitting))


def _more_accumulation(case: Case) -> str | None:
    """Twice the global batch at the same micro-batch: twice the micro-batches per step."""
    scn = case.scenario
    plan = scn.plan
    doubled = step_s(Scenario(scn.model, scn.cluster, plan.with_(global_batch=plan.global_batch * 2)))
    if doubled < case.step_time_s * (1 - RTOL):
        return f"twice the batch is faster: {case.step_time_s:.6g} s -> {doubled:.6g} s"
    if doubled > 2 * case.step_time_s * (1 + RTOL):
        return f"time per sequence rose: {case.step_time_s:.6g} s -> {doubled:.6g} s for twice the batch"
    return None


def test_more_micro_batches_never_shorten_the_step_nor_lengthen_each_sequence():
    """Twice the global batch at a fixed micro-batch never lowers the step time, and never raises
    the time per sequence: the step's fixed costs (the optimizer, the gradient reduction's last
    bucket, the pipeline's fill and drain) amortise over more micro-batches. Checked at every pp,
    not only pp = 1: fill and drain are (p - 1) micro-batch times whatever m, and the pipeline
    flushes (`pipeline_flushes`) double with m only where the plan says so (then each flush's
    bubble is the same share)."""
    _assert_none(_failures(training_cases(4, CASES), _more_accumulation))


@pytest.mark.slow
def test_more_micro_batches_many():
    _assert_none(_failures(training_cases(12, SLOW_CASES), _more_accumulation))


def _bounds_and_sums(case: Case) -> str | None:
    est = estimate_training_step(case.scenario)
    scn, t = case.scenario, case.step_time_s
    if not (np.isfinite(t) and t > 0):
        return f"step time {t}"
    # compute-only lower bound: the FLOPs the GPUs run, at the peak of the plan's precision (a
    # bound: an FP8 plan runs attention and the rest slower), on every GPU at once
    peak = float(scn.cluster.gpu.peak_flops_per_s(scn.plan.precision))
    gpus = int(scn.plan.num_gpus)
    for name in ("executed_flops_per_step", "useful_flops_per_step"):
        bound = float(getattr(est, name)) / (peak * gpus)
        if t < bound * (1 - RTOL):
            return f"step {t:.6g} s < {name} / (peak x GPUs) = {bound:.6g} s"
    if not 0 < float(est.mfu) <= float(est.hfu) + RTOL or float(est.hfu) > 1:
        return f"mfu {float(est.mfu)}, hfu {float(est.hfu)}"
    parts = {k: float(v) for k, v in est.breakdown.as_dict().items()}
    if min(parts.values()) < 0:
        return f"a negative part: {parts}"
    if abs(sum(parts.values()) - t) > RTOL * t:  # StepBreakdown: the parts add up to the step time
        return f"parts add to {sum(parts.values()):.9g} s, step {t:.9g} s"
    mem = {k: float(v) for k, v in est.memory.as_dict().items()}
    if min(mem.values()) < 0 or not np.isfinite(list(mem.values())).all():
        return f"memory {mem}"
    if abs(sum(v for k, v in mem.items() if k != "total") - mem["total"]) > RTOL * mem["total"]:
        return f"memory parts do not add to the total: {mem}"
    if not mem["total"] > mem["weights"] > 0:
        return f"memory {mem['total']:.4g} B does not exceed the weights' {mem['weights']:.4g} B"
    capacity = float(scn.cluster.gpu.memory_bytes)
    if bool(est.fits_in_memory) != (mem["total"] <= capacity):
        return f"fits_in_memory {bool(est.fits_in_memory)} with {mem['total']:.4g} of {capacity:.4g} B"
    if not 0 <= float(est.bubble_fraction) < 1:
        return f"bubble fraction {float(est.bubble_fraction)}"
    return None


def test_the_step_is_above_the_compute_bound_and_its_parts_add_up():
    """step time >= the FLOPs the GPUs run / (peak x GPUs); 0 < MFU <= HFU <= 1; the breakdown's
    parts are non-negative and add to the step (`StepBreakdown`); the memory's parts add to its
    total, which exceeds the weights' bytes, and `fits_in_memory` says total <= the GPU's memory."""
    _assert_none(_failures(training_cases(5, CASES), _bounds_and_sums))


@pytest.mark.slow
def test_the_step_is_above_the_compute_bound_many():
    _assert_none(_failures(training_cases(13, SLOW_CASES), _bounds_and_sums))
