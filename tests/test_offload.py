"""Activations offloaded to host memory (`Plan.offload_activation_layers`, `physics.offload`): the
closed form against the copy schedule run step by step, what the GPU keeps, when the copies show
in the step, the rules Megatron-Core sets, the simulator, and the public runs it brings back."""

from __future__ import annotations

import csv
from importlib import resources

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardwise import presets
from shardwise.analyses import public_memory_recipes, public_runs
from shardwise.engines.simulated import simulate_training_step
from shardwise.engines.training import estimate_training_step
from shardwise.errors import SpecError
from shardwise.physics import offload
from shardwise.physics.params import total_params
from shardwise.specs import Plan, Scenario

LLAMA8 = presets.model("llama3-8b")  # 32 layers
H100 = presets.system("dgx-h100", nodes=1)  # host_link 55 GB/s (PCIe 5.0)
LLAMA8_PARAMS = total_params(LLAMA8)


def scenario(n: int, **plan: object) -> Scenario:
    layout = dict(tp=1, pp=1, dp=8, zero_stage=3, micro_batch=1, global_batch=16)
    return Scenario(LLAMA8, H100, Plan(offload_activation_layers=n, **{**layout, **plan}))  # type: ignore[arg-type]


def schedule_s(layers: int, offloaded: int, copy_s: float, layer_s: float) -> float:
    """One pass as Transformer Engine's OffloadSynchronizer runs it, event by event: layer i's copy
    starts when its compute ends (after the stream's previous copy) and must be done before layer
    i + L - n starts."""
    k = layers - offloaded - 1
    clock, stream_free, done = 0.0, 0.0, {}
    for j in range(layers):
        waits = [done[i] for i in range(offloaded) if i + k + 1 == j]
        clock = max([clock, *waits]) + layer_s  # layer j's compute
        if j < offloaded:
            stream_free = max(stream_free, clock) + copy_s
            done[j] = stream_free
    return clock


def test_the_closed_form_by_hand():
    assert offload.exposed_copy_s(10, 4, 3.0, 1.0) == pytest.approx(4.0)  # 12 of copies, 8 layers to hide them
    assert offload.exposed_copy_s(10, 4, 2.0, 1.0) == pytest.approx(0.0)  # 8 of copies: hidden
    assert offload.exposed_copy_s(10, 9, 0.1, 1.0) == pytest.approx(0.9)  # n = L - 1: each copy waited for
    assert offload.exposed_copy_s(10, 0, 5.0, 1.0) == 0.0
    assert offload.exposed_copy_s(0, 4, 5.0, 1.0) == 0.0  # a stage without layers


@given(
    st.integers(2, 40).flatmap(lambda L: st.tuples(st.just(L), st.integers(1, L - 1))),
    st.floats(0.0, 5.0),
    st.floats(0.01, 2.0),
)
def test_the_closed_form_is_the_schedule_run_step_by_step(shape, copy_s, layer_s):
    layers, n = shape
    expected = schedule_s(layers, n, copy_s, layer_s) - layers * layer_s
    assert float(offload.exposed_copy_s(layers, n, copy_s, layer_s)) == pytest.approx(expected, abs=1e-9)


def test_the_gpu_keeps_the_activations_of_the_layers_not_offloaded():
    kept = [float(estimate_training_step(scenario(n)).memory.activations_bytes) for n in (0, 8, 16)]
    per_layer = (kept[0] - kept[1]) / 8
    assert per_layer > 0.5e9  # about a GB a layer at 8192 tokens
    assert kept[1] - kept[2] == pytest.approx(8 * per_layer, rel=1e-9)


def test_copies_show_only_where_the_compute_cannot_hide_them():
    base = estimate_training_step(scenario(0))
    few, many = estimate_training_step(scenario(4)), estimate_training_step(scenario(24))
    assert float(few.step_time_s) == pytest.approx(float(base.step_time_s))  # 4 layers: hidden
    assert float(few.breakdown.offload_s) == 0.0
    assert float(many.breakdown.offload_s) > 0.1 * float(many.step_time_s)  # 24 layers over PCIe: exposed
    assert float(many.step_time_s) == pytest.approx(float(base.step_time_s) + float(many.breakdown.offload_s))


def test_a_faster_host_link_is_never_slower():
    slow = estimate_training_step(scenario(24))
    fast_gpu = H100.gpu.with_(host_link_bytes_per_s=450e9)  # GH200's NVLink-C2C one way
    fast = estimate_training_step(Scenario(LLAMA8, H100.with_(gpu=fast_gpu), scenario(24).plan))
    assert float(fast.step_time_s) < float(slow.step_time_s)
    assert float(fast.breakdown.offload_s) == 0.0


@pytest.mark.parametrize(
    ("plan", "says"),
    [
        (dict(pp=2, dp=4), "pp=1"),
        (dict(recompute="full"), "recompute"),
        (dict(recompute_layers=2), "recompute"),
    ],
)
def test_megatron_cores_rules(plan, says):
    with pytest.raises(SpecError, match=says):
        estimate_training_step(scenario(8, **plan))


def test_fewer_layers_than_the_model():
    with pytest.raises(SpecError, match="below the model's 32 layers"):
        estimate_training_step(scenario(32))


def test_a_gpu_without_a_host_link_cannot_offload():
    a100 = presets.system("dgx-a100", nodes=1)
    with pytest.raises(SpecError, match="host_link"):
        estimate_training_step(Scenario(LLAMA8, a100, scenario(8).plan))


def test_the_simulator_adds_what_the_closed_form_adds():
    (closed0, sim0), (closed, sim) = (
        (estimate_training_step(scn), simulate_training_step(scn).estimate) for scn in (scenario(0), scenario(24))
    )
    added = float(closed.step_time_s) - float(closed0.step_time_s)
    assert added > 0.1
    assert float(sim.step_time_s) - float(sim0.step_time_s) == pytest.approx(added, rel=1e-6)
    assert float(sim.breakdown.offload_s) == pytest.approx(float(closed.breakdown.offload_s), rel=1e-6)


def test_the_recipes_offload_rows_are_priced_with_their_layers():
    with resources.files("shardwise.data").joinpath("public_training_runs.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if public_memory_recipes.offloaded_layers(r)]
    assert len(rows) == 13
    for row in rows:
        assert public_runs.skip_reason(row) == ""
        req = public_runs.request_for(row)
        assert req.offload_activations == public_memory_recipes.offloaded_layers(row) in (20, 40, 95)


def test_the_flag(cli):
    args = ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--num-gpus", "8", "--tp", "1", "--dp", "8"]
    args += ["--zero", "3", "--global-batch", "16"]
    code, out, _ = cli([*args, "--offload-activations", "24"])
    assert code == 0 and "activation offload" in out  # (the label wraps in a narrow terminal)
    code, _, err = cli([*args, "--offload-activations", "40"])
    assert code == 2 and "below the model's 32 layers" in err and "Traceback" not in err


def test_the_planner_keeps_to_what_offload_allows(cli):
    args = ["plan", "--model", "llama3-8b", "--system", "dgx-h100", "--num-gpus", "16", "--global-batch", "32"]
    code, out, err = cli([*args, "--offload-activations", "8", "--json", "--top", "20"])
    assert code == 0, err
    import json

    plans = json.loads(out)["plans"]
    assert plans and all(p["pp"] == 1 and p["recompute"] == "none" for p in plans)


def test_megatron_is_told_to_offload(cli):
    args = ["plan", "--model", "llama3-8b", "--system", "dgx-h100", "--num-gpus", "8", "--global-batch", "16"]
    code, out, err = cli([*args, "--offload-activations", "8", "--top", "1", "--emit", "megatron"])
    assert code == 0, err
    assert "--cpu-offloading --cpu-offloading-num-layers 8" in out
    code, _, err = cli([*args, "--offload-activations", "8", "--top", "1", "--emit", "torchtitan"])
    assert code == 2 and "--offload-activations" in err


HOST_GPU = H100.gpu.with_(host_adam_params_per_s=2e8)  # the host's CPU Adam shared by 8 GPUs (a given rate)
H100_HOST = H100.with_(gpu=HOST_GPU)


def optimizer_scenario(share: float) -> Scenario:
    plan = Plan(tp=1, pp=1, dp=8, zero_stage=1, micro_batch=1, global_batch=16, offload_optimizer=share)
    return Scenario(LLAMA8, H100_HOST, plan)


def test_the_host_optimizer_step_by_hand():
    # 1e9 parameters: out 4 B gradients and back 2 B weights at 50 GB/s, 0.12 s; Adam at 2e8/s, 5 s
    assert float(offload.optimizer_host_s(1e9, 1.0, 4.0, 2.0, 50e9, 2e8)) == pytest.approx(5.12)
    assert float(offload.optimizer_host_s(1e9, 0.25, 4.0, 2.0, 50e9, 2e8)) == pytest.approx(1.28)
    assert float(offload.optimizer_host_s(1e9, 0.0, 4.0, 2.0, 50e9, 2e8)) == 0.0


def test_the_offloaded_share_leaves_the_gpu_and_steps_on_the_host():
    none, half, full = (estimate_training_step(optimizer_scenario(f)) for f in (0.0, 0.5, 1.0))
    o = float(none.memory.optimizer_bytes)
    assert float(half.memory.optimizer_bytes) == pytest.approx(o / 2)
    assert float(full.memory.optimizer_bytes) == 0.0
    assert float(full.memory.weights_bytes) == float(none.memory.weights_bytes)
    local = float(LLAMA8_PARAMS) / 8  # ZeRO-1 over 8 ranks
    host = local * (4.0 + 2.0) / float(HOST_GPU.host_link_bytes_per_s) + local / 2e8
    gpu_update = float(none.breakdown.optimizer_s)
    assert float(full.breakdown.optimizer_s) == pytest.approx(host, rel=1e-3)
    assert float(half.breakdown.optimizer_s) == pytest.approx(gpu_update / 2 + host / 2, rel=1e-3)


def test_optimizer_offload_needs_the_hosts_rates():
    plan = optimizer_scenario(1.0).plan
    with pytest.raises(SpecError, match="host_adam"):
        estimate_training_step(Scenario(LLAMA8, H100, plan))  # the preset gives no CPU Adam rate
    with pytest.raises(SpecError, match="offload_optimizer"):
        Plan(offload_optimizer=1.5)


def test_megatron_is_told_to_offload_the_optimizer(tmp_path, cli):
    gpu = tmp_path / "gpu.yaml"
    gpu.write_text(
        "h100-host:\n  peak_16bit: 989.4 TFLOPS\n  memory: 79.11GiB\n  memory_bandwidth: 3.35TB/s\n"
        "  host_link: 55GB/s\n  host_adam: 2e8\n  source: test\n"
    )
    args = ["plan", "--model", "llama3-8b", "--system", "dgx-h100", "--gpu", str(gpu), "--num-gpus", "8"]
    code, out, err = cli(
        [*args, "--global-batch", "16", "--offload-optimizer", "0.5", "--top", "1", "--emit", "megatron"]
    )
    assert code == 0, err
    assert "--optimizer-cpu-offload --optimizer-offload-fraction 0.5 --use-precision-aware-optimizer" in out
