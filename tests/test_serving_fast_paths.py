"""The serving paths made faster for issue 38 (the explorer's serving tab), each the same numbers
to the bit: `linears_times` and `layer_times` with `backward=False` price the forward alone (the
gradients NaN); the output layer without a loss (`stage_ends.head_forward_s`) is `head_cost`'s; an
iteration table priced once per distinct token count is the one priced element by element; two
micro-batches priced in one call are each priced alone."""

from __future__ import annotations

import math

import numpy as np
import pytest

from shardwise import presets
from shardwise.engines import iteration
from shardwise.engines.serving import plan_for_serving, serving_scenario
from shardwise.engines.stage_ends import head_cost, head_forward_s, head_inference_tp_s
from shardwise.engines.tp_overlap import tp_comm
from shardwise.physics.collectives import Fabric
from shardwise.physics.compute import layer_times
from shardwise.physics.flops import layer_forward
from shardwise.physics.layer_parts import gemm
from shardwise.physics.linears import linears_times
from shardwise.physics.topology import placement
from shardwise.specs import Scenario
from shardwise.specs.serving import ServingWorkload

TOKENS = np.array([1.0, 7.0, 64.0, 300.0, 2048.0, 9000.0])


def bits(x) -> np.ndarray:
    return np.ascontiguousarray(np.broadcast_to(np.asarray(x, dtype=float), np.shape(TOKENS))).view(np.uint64)


@pytest.mark.parametrize(
    ("gpu", "precision", "recipe"),
    [
        ("a100-sxm4-80gb", "bf16", "te"),
        ("h100-sxm5-80gb", "bf16", "te"),
        ("h100-sxm5-80gb", "fp8", "te"),
        ("h100-sxm5-80gb", "fp8", "rowwise"),
        ("b200-sxm-180gb", "fp8", "rowwise_with_gw_hp"),
        ("b200-sxm-180gb", "fp4", "te"),
    ],
)
def test_the_forward_alone_is_the_forwards_numbers_and_the_gradients_are_not_priced(gpu, precision, recipe):
    g = presets.gpu(gpu)
    gs = [
        gemm(TOKENS, 1280.0, 8192.0, 2.0),
        gemm(TOKENS, 8192.0, 1024.0, 2.0),
        gemm(TOKENS[:, None], 4096.0, 64.0, 2.0),
    ]
    full = linears_times(gs, g, precision, fp8_recipe=recipe)
    alone = linears_times(gs, g, precision, fp8_recipe=recipe, backward=False)
    for f, a in zip(full, alone, strict=True):
        assert np.array_equal(np.asarray(f.forward_s).view(np.uint64), np.asarray(a.forward_s).view(np.uint64))
        assert np.all(np.isnan(a.input_grad_s)) and np.all(np.isnan(a.weight_grad_s))


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_a_layers_forward_is_the_same_without_its_backward(precision):
    model, g = presets.model("llama3-70b"), presets.gpu("h100-sxm5-80gb")
    fwd = layer_forward(model, 1, 4, False, 2.0, TOKENS, TOKENS)
    full, alone = (layer_times(fwd, g, precision, True, backward=b) for b in (True, False))
    for field in ("gemm_s", "attention_s", "elementwise_s", "cast_f_s"):
        assert np.array_equal(bits(getattr(full, field)), bits(getattr(alone, field))), field
    assert np.all(np.isnan(alone.qkv.input_grad_s)) and np.all(np.isnan(alone.weight_grad_s))


@pytest.mark.parametrize(("tp", "sp"), [(1, False), (4, False), (4, True)])
def test_the_output_layer_without_a_loss_is_head_costs(tp, sp):
    cluster = presets.system("dgx-h100").with_(gpus_per_node=tp)
    plan = plan_for_serving(tp, 1, 1).with_(sequence_parallel=sp)
    scn = Scenario(presets.model("llama3-70b"), cluster, plan)
    place = placement(plan, cluster.gpus_per_node)
    comm = tp_comm(scn, Fabric.of(cluster), place["tp"], TOKENS)
    cost = head_cost(scn, comm, TOKENS, loss=False)
    assert np.array_equal(bits(cost.compute_forward_s), bits(head_forward_s(scn, TOKENS)))
    assert np.array_equal(bits(cost.tp_forward_s), bits(head_inference_tp_s(scn, comm, TOKENS)))


@pytest.mark.parametrize(("framework", "tp", "pp"), [("tensorrt-llm", 8, 1), ("tensorrt-llm", 1, 8), ("vllm", 4, 2)])
def test_an_iteration_priced_once_per_distinct_value_is_the_one_priced_element_by_element(
    framework, tp, pp, monkeypatch
):
    """`once_per_value` (a scenario of plain numbers) against `_at_once` (what a scenario holding
    arrays takes): the same table to the bit, the heaviest micro-batch's pass included (pp)."""
    wl = ServingWorkload(2048, 256, 1, engine=framework)
    scn = Scenario(presets.model("llama3-70b"), presets.system("dgx-h100"), plan_for_serving(tp, pp, 1))
    s = serving_scenario(scn, wl)
    d = np.array([0.0, 1.0, 3.0, 17.0, 64.0, 200.0])[:, None]
    q = np.array([0.0, 5.0, 512.0, 2048.0, 4096.0, 8192.0, 16384.0])[None, :]
    kept = iteration.iteration_times(s, wl, d, q, 2048.0 + 128.0)
    assert iteration._plain(s)
    monkeypatch.setattr(iteration, "_plain", lambda scn: False)
    each = iteration.iteration_times(s, wl, d, q, 2048.0 + 128.0)
    for field in ("total_s", "compute_s", "tp_comm_s", "pp_p2p_s"):
        a, b = getattr(kept, field), getattr(each, field)
        assert np.array_equal(np.asarray(a).view(np.uint64), np.asarray(b).view(np.uint64)), field
    assert not math.isnan(float(np.max(kept.total_s)))


@pytest.mark.parametrize(("model", "tp", "pp"), [("llama3-70b", 1, 8), ("llama3-70b", 4, 2), ("mixtral-8x7b", 2, 4)])
def test_two_micro_batches_priced_in_one_call_are_each_priced_alone(model, tp, pp):
    """`iteration_times` prices the even split's micro-batch and the heaviest one together
    (`_stacked`, `_take`): each is the stage cost of its own inputs, to the bit."""
    wl = ServingWorkload(2048, 256, 1, engine="tensorrt-llm")
    scn = Scenario(presets.model(model), presets.system("dgx-h100"), plan_for_serving(tp, pp, 1))
    s = serving_scenario(scn, wl)
    d = np.array([0.0, 1.0, 9.0, 100.0])[:, None]
    q_even = np.array([0.0, 3.0, 700.0, 2048.0, 6000.0])[None, :]
    q_heavy = np.minimum(q_even * 2.0, 8192.0)
    decodes, prompts = iteration._stacked((d, d), (q_even, q_heavy))
    both = iteration.stage_costs(s, wl, decodes, prompts, 2048.0)
    for i, q in enumerate((q_even, q_heavy)):
        alone = iteration.stage_costs(s, wl, np.broadcast_to(d, (4, 5)), np.broadcast_to(q, (4, 5)), 2048.0)
        taken = iteration._take(both, i, decodes.ndim)
        parts = zip((*alone.per_stage, alone.middle_sum_s(pp)), (*taken.per_stage, taken.middle_sum_s(pp)), strict=True)
        for a, b in parts:
            a, b = np.broadcast_to(a, (4, 5)), np.broadcast_to(b, (4, 5))
            assert np.array_equal(np.ascontiguousarray(a).view(np.uint64), np.ascontiguousarray(b).view(np.uint64))
