"""Properties that must hold for every plan (Hypothesis)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import small_plans
from shardwise import presets
from shardwise.engines.training import estimate_training_step
from shardwise.physics.collectives import all_reduce_time_s
from shardwise.physics.params import stage_params_per_gpu
from shardwise.specs import Scenario

MODEL = presets.model("gpt-96l-4096h")  # 96 layers, 32 heads
CLUSTER = presets.system("dgx-a100", nodes=8)
settings.register_profile("shardwise", deadline=None, max_examples=60)
settings.load_profile("shardwise")


def _scale_links(cluster, factor):
    return cluster.with_(
        intra_node_link=cluster.intra_node_link.with_(
            bandwidth_bytes_per_s=cluster.intra_node_link.bandwidth_bytes_per_s * factor
        ),
        inter_node_link=cluster.inter_node_link.with_(
            bandwidth_bytes_per_s=cluster.inter_node_link.bandwidth_bytes_per_s * factor
        ),
    )


@given(plan=small_plans(), factor=st.floats(1.0, 100.0))
def test_more_bandwidth_is_never_slower(plan, factor):
    slow = estimate_training_step(Scenario(MODEL, CLUSTER, plan))
    fast = estimate_training_step(Scenario(MODEL, _scale_links(CLUSTER, factor), plan))
    assert fast.step_time_s <= slow.step_time_s * (1 + 1e-12)


@given(
    n=st.floats(1.0, 1e11), p=st.integers(2, 1024), per_node=st.sampled_from([1, 2, 4, 8]), factor=st.floats(1.0, 50.0)
)
def test_a_faster_link_never_slows_a_collective(n, p, per_node, factor):
    intra, inter = presets.link("nvlink3"), presets.link("ib-hdr")
    fast_inter = inter.with_(bandwidth_bytes_per_s=inter.bandwidth_bytes_per_s * factor)
    assert all_reduce_time_s(n, p, per_node, intra, fast_inter) <= all_reduce_time_s(n, p, per_node, intra, inter) * (
        1 + 1e-12
    )


@given(
    tp=st.sampled_from([1, 2, 4, 8]),
    pp=st.sampled_from([1, 2, 4, 8]),
    model=st.sampled_from(["gpt-96l-4096h", "gpt3-175b", "llama3-70b"]),
)
def test_more_tensor_parallelism_never_raises_weight_memory_per_gpu(tp, pp, model):
    m = presets.model(model)
    now = [np.max(x) for x in stage_params_per_gpu(m, tp, pp)]
    more = [np.max(x) for x in stage_params_per_gpu(m, 2 * tp, pp)]
    assert max(more) <= max(now)


@given(plan=small_plans(), extra=st.integers(1, 8))
def test_more_micro_batches_never_raise_the_bubble_fraction(plan, extra):
    # the same micro-batch size, more of them per step
    bigger = plan.with_(global_batch=plan.global_batch * (1 + extra))
    a = estimate_training_step(Scenario(MODEL, CLUSTER, plan))
    b = estimate_training_step(Scenario(MODEL, CLUSTER, bigger))
    assert b.breakdown.pp_bubble_s / b.step_time_s <= a.breakdown.pp_bubble_s / a.step_time_s + 1e-12


@given(plan=small_plans())
def test_breakdown_always_adds_up_and_is_non_negative(plan):
    est = estimate_training_step(Scenario(MODEL, CLUSTER, plan))
    parts = est.breakdown.as_dict()
    assert all(float(v) >= 0 for v in parts.values())
    assert abs(float(est.breakdown.total_s) - float(est.step_time_s)) <= 1e-9 * float(est.step_time_s)


@given(plan=small_plans())
def test_recomputation_never_raises_activation_memory(plan):
    none = estimate_training_step(Scenario(MODEL, CLUSTER, plan.with_(recompute="none")))
    full = estimate_training_step(Scenario(MODEL, CLUSTER, plan.with_(recompute="full")))
    assert full.memory.activations_bytes <= none.memory.activations_bytes


@given(plan=small_plans(), factor=st.floats(1.0, 10.0))
def test_faster_gpu_memory_or_compute_is_never_slower(plan, factor):
    gpu = CLUSTER.gpu
    faster = CLUSTER.with_(
        gpu=gpu.with_(
            memory_bandwidth_bytes_per_s=gpu.memory_bandwidth_bytes_per_s * factor,
            peak_flops_per_s_16bit=gpu.peak_flops_per_s_16bit * factor,
        )
    )
    slow = estimate_training_step(Scenario(MODEL, CLUSTER, plan))
    fast = estimate_training_step(Scenario(MODEL, faster, plan))
    assert fast.step_time_s <= slow.step_time_s * (1 + 1e-12)


RATES = st.floats(1e9, 2e12)  # bytes/s, one direction


@given(rate=RATES, factor=st.floats(1.0, 20.0), inter=st.booleans(), plan=small_plans())
def test_a_slower_link_given_as_a_rate_is_never_faster_for_training(rate, factor, inter, plan):
    """A link typed as a rate (`--intra-link 10GB/s`) keeps the latency of its kind, so a slower
    rate never predicts a faster step than a faster one (the trap of a rate with another latency)."""
    from shardwise.loaders import link_from_rate

    role = "inter" if inter else "intra"
    key = "inter_node_link" if inter else "intra_node_link"
    slow = CLUSTER.with_(**{key: link_from_rate("slow", rate, role)})
    fast = CLUSTER.with_(**{key: link_from_rate("fast", rate * factor, role)})
    t_slow = estimate_training_step(Scenario(MODEL, slow, plan)).step_time_s
    t_fast = estimate_training_step(Scenario(MODEL, fast, plan)).step_time_s
    assert t_fast <= t_slow * (1 + 1e-12)


@pytest.mark.slow  # 2-4 s: 60 examples, two serving estimates each
@given(rate=RATES, factor=st.floats(1.0, 20.0), tp=st.sampled_from([1, 2, 4, 8]), batch=st.integers(1, 64))
def test_a_slower_link_is_never_faster_for_serving(rate, factor, tp, batch):
    from shardwise.engines.serving import estimate_serving, plan_for_serving
    from shardwise.loaders import link_from_rate
    from shardwise.specs.serving import ServingWorkload

    cluster = presets.system("dgx-a100")
    plan = plan_for_serving(tp, 8 // tp)
    wl = ServingWorkload(512, 64, batch)
    times = []
    for r in (rate, rate * factor):
        c = cluster.with_(intra_node_link=link_from_rate("x", r, "intra"))
        est = estimate_serving(Scenario(MODEL, c, plan), wl)
        times.append((float(est.ttft_s), float(est.tpot_s)))
    assert times[1][0] <= times[0][0] * (1 + 1e-12) and times[1][1] <= times[0][1] * (1 + 1e-12)


def test_the_pcie_preset_and_a_slower_pcie_rate_agree_in_order(cli):
    """The reported trap: `serve --intra-link 10GB/s` must not beat the pcie4 preset (24 GB/s
    sustained) on time per token."""
    import json

    base = ["serve", "--model", "llama3-8b", "--system", "a100-pcie-8x", "--plan", "tp=8", "--json"]
    tpot = {}
    for link in ("pcie4", "10GB/s"):
        code, out, err = cli([*base, "--intra-link", link])
        assert code == 0, err
        tpot[link] = json.loads(out)["plans"][0]["tpot_s"]
    assert tpot["10GB/s"] > tpot["pcie4"]
