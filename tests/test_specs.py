"""Value types reject bad input with a message naming field, value and rule."""

import numpy as np
import pytest

from shardwise import presets
from shardwise.engines.training import estimate_training_step
from shardwise.specs import Cluster, Gpu, Link, Model, Plan, Recompute, Scenario, Schedule, SpecError


def test_plan_normalises_names_to_enums():
    plan = Plan(global_batch=8, schedule="1F1B", recompute="Selective")
    assert plan.schedule is Schedule.ONE_F_ONE_B
    assert plan.recompute is Recompute.SELECTIVE
    assert plan.num_micro_batches == 8


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tp": 0}, "plan: tp: 0"),
        ({"tp": 2.5}, "whole number"),
        ({"global_batch": 6, "dp": 4}, "not divisible by dp\\*micro_batch=4"),
        ({"schedule": "zigzag"}, "choose one of 1f1b, gpipe, interleaved, zb-h1"),
        ({"recompute": "most"}, "choose one of full, none, selective"),
        ({"zero_stage": 4}, "zero_stage 4"),
        ({"precision": "fp6"}, "precision 'fp6'"),
        ({"vpp": 2, "pp": 2}, "needs schedule=interleaved"),
        ({"schedule": "interleaved", "pp": 1}, "needs pp >= 2"),
        ({"schedule": "interleaved", "pp": 4, "vpp": 2, "global_batch": 6}, "multiple of pp=4"),
    ],
)
def test_bad_plans(kwargs, message):
    with pytest.raises(SpecError, match=message):
        Plan(**{"global_batch": 8, **kwargs})


def test_model_rules():
    with pytest.raises(SpecError, match="hidden: 100 is not divisible by heads=3"):
        Model("m", layers=2, hidden=100, heads=3, vocab=10, seq_len=8)
    with pytest.raises(SpecError, match="heads: 6 is not divisible by kv_heads=4"):
        Model("m", layers=2, hidden=12, heads=6, kv_heads=4, vocab=10, seq_len=8)
    with pytest.raises(SpecError, match="layers: -1"):
        Model("m", layers=-1, hidden=12, heads=6, vocab=10, seq_len=8)


def test_hardware_rules():
    with pytest.raises(SpecError, match="memory_bytes: 0"):
        Gpu("g", 1e12, 0, 1e12)
    with pytest.raises(SpecError, match="efficiency: 2"):
        Link("l", 1e9, efficiency=2)
    with pytest.raises(SpecError, match="needs an inter_node_link"):
        presets.system("dgx-a100").with_(nodes=2, inter_node_link=None)


def test_scenario_cross_rules(gpt3, dgx_a100_8):
    with pytest.raises(SpecError, match="tp\\*pp\\*dp: 32 must equal GPUs in the cluster=64"):
        Scenario(gpt3, dgx_a100_8, Plan(tp=8, pp=4, dp=1, global_batch=8))
    with pytest.raises(SpecError, match="pipeline stage would get 0 layer"):
        Scenario(gpt3.with_(layers=32), dgx_a100_8, Plan(tp=1, pp=64, dp=1, global_batch=64))
    with pytest.raises(SpecError, match="at least one layer per model chunk"):
        Scenario(gpt3, dgx_a100_8, Plan(tp=1, pp=64, dp=1, global_batch=64, vpp=2, schedule="interleaved"))
    with pytest.raises(SpecError, match="adds up to 95 layers but the model has 96"):
        Scenario(
            gpt3,
            dgx_a100_8.with_(nodes=1, gpus_per_node=2),
            Plan(tp=1, pp=2, dp=1, global_batch=8, stage_layers=(47, 48)),
        )
    # any layer count on any number of stages (Llama 3.1 405B at pp=8)
    Scenario(gpt3.with_(layers=126), dgx_a100_8, Plan(tp=8, pp=8, dp=1, global_batch=8))
    llama = presets.model("llama3-70b")  # 8 KV heads: serving replicates them at tp=16, training refuses
    above = Scenario(llama, presets.system("dgx-h100", nodes=2), Plan(tp=16, pp=1, dp=1, global_batch=8))
    with pytest.raises(SpecError, match="kv_heads: 8 is not divisible by tp=16"):
        estimate_training_step(above)
    with pytest.raises(SpecError, match="tp=24 is above the model's kv_heads=16 but not a multiple"):
        wide = llama.with_(heads=96, kv_heads=16, head_dim=128)
        Scenario(wide, presets.system("dgx-h100", nodes=3), Plan(tp=24, pp=1, dp=1, global_batch=8))


def test_tp_group_must_fit_a_node_or_span_whole_nodes(gpt3):
    cluster = presets.system("dgx-a100", nodes=3)  # 24 GPUs
    with pytest.raises(SpecError, match="tp=12 neither divides nor is a multiple of gpus_per_node=8"):
        Scenario(gpt3.with_(heads=96), cluster, Plan(tp=12, pp=2, dp=1, global_batch=8))


def test_array_fields_are_checked_element_by_element():
    Plan(tp=np.array([1, 2, 4]), dp=np.array([4, 2, 1]), global_batch=8)
    with pytest.raises(SpecError, match="plan: tp: 0"):
        Plan(tp=np.array([1, 0, 4]), global_batch=8)


def test_specs_are_frozen(gpt3):
    with pytest.raises(AttributeError):
        gpt3.layers = 3  # type: ignore[misc]


def test_sequence_parallel_may_be_an_array(gpt3, dgx_a100_8):
    from shardwise.engines.training import estimate_training_step

    plan = Plan(tp=8, pp=8, global_batch=64, sequence_parallel=np.array([False, True]))
    both = estimate_training_step(Scenario(gpt3, dgx_a100_8, plan))
    for i, sp in enumerate((False, True)):
        one = estimate_training_step(Scenario(gpt3, dgx_a100_8, plan.with_(sequence_parallel=sp)))
        assert both.step_time_s[i] == pytest.approx(float(one.step_time_s))
    # Korthikanti et al. 2022 Table 2 (no attention scores stored): sbh (10 + 24/t) -> sbh 34/t at t = 8
    act = both.memory.activations_bytes
    assert act[1] / act[0] == pytest.approx((34 / 8) / (10 + 24 / 8), rel=0.01)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sequence_parallel": "off"}, "plan: sequence_parallel: 'off' is not allowed; it must be true or false"),
        ({"flash_attention": 1}, "plan: flash_attention: 1 is not allowed; it must be true or false"),
        ({"zero_stage": "3"}, "plan: zero_stage '3' is not allowed; choose 0, 1, 2 or 3"),
        ({"pp": 2**63}, "plan: pp: 9223372036854775808 is not allowed; it must be at most"),
        ({"tp": 1 + 2j}, "plan: tp: (1+2j) is not a number"),
        ({"precision": 3}, "plan: precision 3 is not allowed"),
        ({"zero_stage": None}, "plan: zero_stage None is not allowed; choose 0, 1, 2 or 3"),
        ({"zero_stage": ()}, "plan: zero_stage () is not allowed; choose 0, 1, 2 or 3"),
        ({"stage_layers": np.array(8)}, "plan: stage_layers array(8) is not allowed; give a list"),
        ({"recompute": np.array([])}, "plan: recompute: an empty array is not allowed"),
        ({"schedule": np.array([], dtype=int)}, "plan: schedule: an empty array is not allowed"),
    ],
)
def test_the_api_refuses_wrong_types_with_the_field_named(kwargs, message):
    with pytest.raises(SpecError) as excinfo:
        Plan(**kwargs)
    assert str(excinfo.value).startswith(message)


def test_a_cluster_checks_its_parts_and_a_gpu_cannot_beat_its_peak():
    gpu = presets.gpu("a100-sxm4-80gb")
    with pytest.raises(SpecError, match="cluster 'c': gpu: 'a100' \\(str\\) is not allowed; give a Gpu"):
        Cluster("c", "a100", 8, 1, presets.link("nvlink3"))
    with pytest.raises(SpecError, match=r"matmul_efficiency: 1.5 is not allowed; it must be in \(0, 1\]"):
        gpu.with_(matmul_efficiency=1.5)
    assert presets.link("nvlink3").with_(efficiency=1.2).efficiency == 1.2  # NVLS-style links may exceed 1


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda g, lk: g.with_(sm_count=1.5), "gpu 'a100-sxm4-80gb': sm_count: 1.5 is not allowed; it must be a whole"),
        (lambda g, lk: g.with_(kernel_launch_s=1e308), "kernel_launch_s: 1e+308 is not allowed; it must be between 0"),
        (lambda g, lk: lk.with_(base_latency_s=1.8e19), "base_latency_s: 1.8e+19 is not allowed; it must be between"),
        (lambda g, lk: g.with_(name=1), "gpu: name: 1 is not allowed; it must be a string"),
        (lambda g, lk: lk.with_(name=1), "link: name: 1 is not allowed; it must be a string"),
        (lambda g, lk: Cluster(1, g, 8, 1, lk), "cluster: name: 1 is not allowed; it must be a string"),
        (lambda g, lk: Cluster("c", g, 8, 1, lk, notes=1), "cluster 'c': notes: 1 is not allowed; it must be a string"),
        (lambda g, lk: presets.model("llama3-8b").with_(notes=1), "model 'llama3-8b': notes: 1 is not allowed"),
    ],
)
def test_hardware_and_model_fields_outside_their_range_or_type_are_refused(build, message):
    gpu, link = presets.gpu("a100-sxm4-80gb"), presets.link("nvlink3")
    with pytest.raises(SpecError) as excinfo:
        build(gpu, link)
    assert message in str(excinfo.value)


def test_numpy_booleans_are_booleans_for_a_model():
    model = presets.model("llama3-8b").with_(bias=np.True_, dropout=np.False_)
    assert model.bias is True and model.dropout is False


def test_derived_sizes_follow_what_they_derive_from():
    """A head_dim, expert width or value head that was derived moves with hidden / heads /
    ffn_hidden in `with_`; one that was given stays."""
    from shardwise import presets

    llama = presets.model("llama3-8b")  # head_dim derived: 4096 / 32
    assert llama.with_(hidden=8192, heads=64).head_dim == 128 and llama.with_(hidden=8192).head_dim == 256
    qwen = presets.model("qwen3-30b-a3b")  # head_dim 128 given apart from 2048 / 32
    assert qwen.with_(hidden=4096).head_dim == 128
    assert qwen.with_(ffn_hidden=100).expert_ffn_hidden == 768  # given
    mixtral = presets.model("mixtral-8x7b")  # expert width derived from ffn_hidden
    assert mixtral.with_(ffn_hidden=1000).expert_ffn_hidden == 1000


def test_runs_stacked_for_calibration_keep_their_own_head_dims():
    """Calibration prices runs of several models as one array-valued scenario: each keeps its
    head_dim (a stale one priced Nemotron-4 340B's attention with another model's heads)."""
    from shardwise import presets
    from shardwise.calibration.cases import Evaluator
    from shardwise.engines.training import estimate_training_step
    from shardwise.specs import Plan, Scenario

    cluster = presets.system("dgx-h100", nodes=4)
    plan = Plan(tp=8, pp=4, dp=1, micro_batch=1, global_batch=16, sequence_parallel=True)
    llama = presets.model("llama3-70b")  # heads of 128
    wide = Model(  # heads of 192, the same kind (gated, RMSNorm, ...)
        "wide-heads", layers=80, hidden=6144, heads=32, kv_heads=8, ffn_hidden=16384, vocab=128256, seq_len=8192,
        gated_mlp=True, tied_embeddings=False, learned_positions=False, bias=False, rmsnorm=True, dropout=False,
    )  # fmt: skip
    scns = [Scenario(m, cluster, plan) for m in (llama, wide)]
    stacked = Evaluator(scns).step_s({})[0]
    alone = [float(estimate_training_step(s).step_time_s) for s in scns]
    assert np.allclose(stacked, alone, rtol=1e-9)


def test_a_scenario_on_other_rates_is_not_checked_again_but_another_layout_is():
    """`Scenario.on_rates` (a calibration's evaluator): the same scenario on a cluster whose rates
    and latencies changed, equal to one built and checked; a cluster with another GPU count or
    server size is checked as usual."""
    from shardwise.calibration.parameters import apply

    scn = Scenario(presets.model("llama3-8b"), presets.system("dgx-h100", 2), Plan(tp=8, pp=1, dp=2, global_batch=64))
    _ = scn.split
    faster = apply(scn.cluster, {"matmul_efficiency_scale": 1.1, "link_latency_scale": 2.0})
    on = scn.on_rates(faster)
    assert on == Scenario(scn.model, faster, scn.plan) and on.cluster is faster and on.split is scn.split
    with pytest.raises(SpecError, match="tp"):
        scn.on_rates(faster.with_(gpus_per_node=4))  # tp=8 no longer fits in a server
    with pytest.raises(SpecError):
        scn.on_rates(faster.with_(nodes=4))  # 32 GPUs for a plan of 16


def test_arrays_that_do_not_broadcast_are_refused_with_their_fields_and_shapes():
    """A grid whose fields numpy cannot broadcast is one SpecError naming them (was numpy's
    ValueError from deep inside the checks)."""
    import dataclasses

    with pytest.raises(SpecError, match=r"plan: tp \(shape \(4,\)\) and dp \(shape \(2,\)\) do not broadcast"):
        Plan(tp=np.array([1, 2, 4, 8]), dp=np.array([8, 4]), global_batch=64)
    model = dataclasses.replace(presets.model("llama3-8b"), layers=np.array([16, 32, 64]))
    plan = Plan(tp=2, dp=4, global_batch=np.array([16, 32]))
    with pytest.raises(SpecError, match=r"model.layers \(shape \(3,\)\) and plan.global_batch \(shape \(2,\)\)"):
        Scenario(model, presets.system("dgx-h100"), plan)


def test_the_public_names_resolve_and_serving_is_among_them():
    """Every name of shardwise.__all__ imports (lazily), and the serving model is public beside
    the training step: a script finds it with dir() or help(shardwise)."""
    import shardwise

    for name in shardwise.__all__:
        assert getattr(shardwise, name) is not None, name
    assert {"ServingWorkload", "estimate_serving", "plan_for_serving"} <= set(shardwise.__all__)
    assert "estimate_serving" in shardwise.__doc__ and "requests" in shardwise.__doc__
