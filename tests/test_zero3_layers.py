"""ZeRO-3 gathers and reduces one layer at a time (`engines.data_parallel.collective_prices`:
`layer_all_gather`, `layer_reduce_scatter`): each of a stage's layers is its own collective of
1/L of the stage's bytes and pays the collective's fixed time; the other ZeRO stages and XLA's
scanned layers' edges keep the whole stage's prices."""

from __future__ import annotations

import itertools

import pytest

from shardwise import presets
from shardwise.engines.data_parallel import collective_prices, stage_collective_prices, zero_collectives
from shardwise.engines.dp_comm import zero_stage_fields
from shardwise.engines.simulated import simulate_training_step
from shardwise.engines.training import estimate_training_step
from shardwise.engines.training_layout import stage_params_of
from shardwise.physics import memory as mem
from shardwise.physics.collectives import Fabric
from shardwise.physics.topology import placement
from shardwise.specs import Plan, Scenario

LAYERED = ("layer_all_gather", "layer_reduce_scatter", "weights_all_gather", "reduce_scatter")


def _fsdp(nodes: int, **plan: object) -> Scenario:
    """Modalities' FULL_SHARD runs: GPT 2.7B on Leonardo (4 A100 a node), micro-batch 1, one
    micro-batch per GPU."""
    fields = {"dp": 4 * nodes, "global_batch": 4 * nodes, "zero_stage": 3, "framework": "fsdp"} | plan
    return Scenario(presets.model("gpt-2.7b-hd128"), presets.system("leonardo-booster", nodes=nodes), Plan(**fields))


def test_each_layer_is_its_own_collective_of_its_share_of_the_stage():
    scn = _fsdp(32)
    fabric, place = Fabric.of(scn.cluster), placement(scn.plan, scn.cluster.gpus_per_node)
    n, layers = 2.5e9, 32
    prices = collective_prices(scn, fabric, place, n, LAYERED, layers=layers)
    group = fabric.group(128, 4)
    w, g = mem.weight_bytes_per_param("bf16"), mem.grad_bytes_per_param("bf16")
    assert prices["layer_all_gather"] == pytest.approx(layers * group.all_gather(w * n / layers), rel=1e-12)
    assert prices["layer_reduce_scatter"] == pytest.approx(layers * group.reduce_scatter(g * n / layers), rel=1e-12)
    assert prices["weights_all_gather"] == pytest.approx(group.all_gather(w * n), rel=1e-12)
    # each layer pays the collective's fixed time: across 32 servers, more than the whole at once
    assert prices["layer_all_gather"] > 1.1 * prices["weights_all_gather"]
    assert prices["layer_reduce_scatter"] > prices["reduce_scatter"]
    one = collective_prices(scn, fabric, place, n, LAYERED, layers=1)  # one layer: the whole stage's
    assert one["layer_all_gather"] == pytest.approx(one["weights_all_gather"], rel=1e-12)


def test_hybrid_sharding_all_reduces_each_layers_shard_over_the_replicas():
    scn = _fsdp(16, shard_group=4)
    fabric, place = Fabric.of(scn.cluster), placement(scn.plan, scn.cluster.gpus_per_node)
    n, layers = 2.5e9, 32
    prices = collective_prices(scn, fabric, place, n, LAYERED, layers=layers)
    shard, replicas = fabric.group(4, 4), fabric.group(16, 1)
    g = mem.grad_bytes_per_param("bf16")
    per_layer = shard.reduce_scatter(g * n / layers) + replicas.all_reduce(g * n / layers / 4)
    assert prices["layer_reduce_scatter"] == pytest.approx(layers * per_layer, rel=1e-12)


def test_zero_3_reads_the_per_layer_prices_and_the_others_the_whole_stages():
    prices = {
        "layer_reduce_scatter": 3.0,
        "layer_all_gather": 2.0,
        "reduce_scatter": 1.0,
        "weights_all_gather": 0.5,
        "unit_reduce_scatter": 0.1,
        "bucket_weights_all_gather": 0.05,
        "bucket_reduce_scatter": 0.1,
        "all_gather": 0.5,
        "bucket_all_gather": 0.05,
    }
    grad, _, _, gather, *_ = zero_stage_fields(3, prices, 1.0, 0.5, 1.5, 4, False)
    assert (grad, gather) == (4 * 3.0, 2 * 4 * 2.0)
    grad, _, _, gather, *_ = zero_stage_fields(2, prices, 1.0, 0.5, 0.0, 4, False)
    assert (grad, gather) == (4 * 1.0, 0.5)
    assert {"layer_reduce_scatter", "layer_all_gather"} <= set(zero_collectives(3))
    assert not {"layer_reduce_scatter", "layer_all_gather"} & set(zero_collectives(1))


def test_each_pipeline_stage_splits_over_its_own_layers():
    model = presets.model("llama3-8b")  # 32 layers: 10 on the first stage, 22 on the last
    plan = Plan(dp=16, pp=2, first_stage_layers=10, global_batch=64, zero_stage=3, framework="fsdp")
    scn = Scenario(model, presets.system("dgx-h100", nodes=4), plan)
    fabric, place = Fabric.of(scn.cluster), placement(scn.plan, 8)
    params, _ = stage_params_of(scn.model, scn.plan, scn.split)
    (first, _), _, (last, _) = stage_collective_prices(scn, fabric, place, params)
    for prices, n, layers in ((first, params[0], 10), (last, params[2], 22)):
        alone = collective_prices(scn, fabric, place, n, ("layer_all_gather",), layers=layers)
        assert prices["layer_all_gather"] == pytest.approx(alone["layer_all_gather"], rel=1e-12)
    # the simulator prices each stage's own layers the same way
    # (they differ by the exposed data-parallel part the closed form keeps and the simulator's
    # schedule hides: 76 ms of 2.6 s here, since each ring step across servers pays NCCL's network post)
    closed, simulated = estimate_training_step(scn), simulate_training_step(scn).estimate
    gap = abs(float(simulated.step_time_s) - float(closed.step_time_s))
    assert gap <= float(closed.breakdown.dp_comm_s) + 0.01 * float(closed.step_time_s)


def test_full_shard_at_micro_batch_1_exposes_more_as_the_servers_grow():
    """At a fixed batch per GPU the bytes per rank stay, but each layer's ring takes more steps:
    Modalities' FULL_SHARD 2.7B slows from 64 to 256 GPUs (0.74 s to 1.28 s at 128)."""
    exposed = [float(estimate_training_step(_fsdp(nodes)).breakdown.dp_comm_s) for nodes in (8, 16, 32, 64)]
    assert all(b > a for a, b in itertools.pairwise(exposed))
    assert exposed[-1] > 1.5 * exposed[0]  # 256 against 32 GPUs (1.2x priced whole, before 2026-12)
