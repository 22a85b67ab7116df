"""Hybrid sharded data parallelism (`Plan.shard_group`: FSDP HYBRID_SHARD / HSDP, MaxText's FSDP
inside a slice): the model state divided by the shard group, the gathers and reduce-scatters in
it, the replicas' all-reduce of each shard across it; 0 is plain ZeRO over dp x cp."""

from __future__ import annotations

import pytest

from shardwise import presets
from shardwise.engines.data_parallel import SPMD_GRAD_BYTES, collective_prices
from shardwise.engines.simulated import simulate_training_step
from shardwise.engines.training import estimate_training_step
from shardwise.physics import memory as mem
from shardwise.physics.collectives import Fabric
from shardwise.physics.params import total_params
from shardwise.physics.topology import placement
from shardwise.specs import Plan, Scenario
from shardwise.specs._checks import SpecError


def _scn(nodes=4, **plan):
    fields = {"dp": 8 * nodes, "global_batch": 16 * nodes, "zero_stage": 3, "framework": "torchtitan"} | plan
    return Scenario(presets.model("llama3-8b"), presets.system("dgx-h100", nodes=nodes), Plan(**fields))


def test_model_state_is_divided_by_the_shard_group_not_by_every_rank():
    full = estimate_training_step(_scn()).memory  # ZeRO-3 over 32 ranks
    hybrid = estimate_training_step(_scn(shard_group=8)).memory  # over 8, 4 replicas
    for name in ("weights_bytes", "gradients_bytes", "optimizer_bytes"):
        assert getattr(hybrid, name) == pytest.approx(4 * getattr(full, name), rel=1e-12), name
    one_node = estimate_training_step(_scn(nodes=1)).memory  # ZeRO-3 over the same 8 ranks
    assert hybrid.optimizer_bytes == pytest.approx(one_node.optimizer_bytes, rel=1e-12)


def test_the_shard_group_reduce_scatters_and_gathers_inside_a_node_the_replicas_all_reduce_a_shard():
    scn = _scn(shard_group=8)
    fabric, n = Fabric.of(scn.cluster), 1e9
    g, w = mem.grad_bytes_per_param("bf16"), mem.weight_bytes_per_param("bf16")
    place = placement(scn.plan, scn.cluster.gpus_per_node)
    names = ("reduce_scatter", "weights_all_gather")
    prices = collective_prices(scn, fabric, place, n, names)
    shard, replicas = fabric.group(8, 8), fabric.group(4, 1)  # one server; one GPU per server
    assert prices["weights_all_gather"] == pytest.approx(shard.all_gather(w * n), rel=1e-12)
    expected = shard.reduce_scatter(g * n) + replicas.all_reduce(g * n / 8)
    assert prices["reduce_scatter"] == pytest.approx(expected, rel=1e-12)
    full = collective_prices(_scn(), fabric, placement(_scn().plan, 8), n, names)
    assert full["reduce_scatter"] == pytest.approx(fabric.group(32, 8).reduce_scatter(g * n), rel=1e-12)
    # the gathers stay inside the server however many servers hold replicas
    big = _scn(nodes=16, shard_group=8)
    far = collective_prices(big, Fabric.of(big.cluster), placement(big.plan, 8), n, names)
    assert far["weights_all_gather"] == prices["weights_all_gather"] != full["weights_all_gather"]
    assert far["reduce_scatter"] > prices["reduce_scatter"]  # the replicas' all-reduce spans 16 servers


def test_a_shard_group_of_every_rank_is_plain_zero():
    plain, whole = estimate_training_step(_scn()), estimate_training_step(_scn(shard_group=32))
    assert whole.step_time_s == plain.step_time_s and whole.memory.total_bytes == plain.memory.total_bytes
    assert _scn(shard_group=32).plan.replicas == 1 and _scn(shard_group=8).plan.replicas == 4


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"shard_group": 3}, "--shard-group 3 is not allowed; it must divide dp x cp = 32"),
        ({"shard_group": 8, "zero_stage": 0}, "--shard-group 8 needs ZeRO >= 1"),
        ({"shard_group": -2}, "shard_group: -2 is not allowed"),
        ({"shard_group": 64}, "--shard-group 64 is not allowed; it must divide dp x cp = 32"),
    ],
)
def test_bad_shard_groups_are_refused(fields, message):
    with pytest.raises(SpecError, match=message):
        _scn(**fields)


def test_the_cli_takes_shard_group_and_refuses_bad_ones_in_one_line(cli):
    base = ["predict", "--model", "llama3-8b", "--system", "dgx-h100", "--nodes", "4", "--global-batch", "64"]
    code, out, err = cli([*base, "--zero", "3", "--shard-group", "8"])
    assert code == 0 and "hybrid sharding: state sharded over 8 ranks, 4 replicas" in " ".join(out.split())
    code, out, err = cli([*base, "--zero", "3", "--shard-group", "5"])
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--shard-group 5" in err and "Traceback" not in err
    code, out, err = cli([*base, "--zero", "0", "--shard-group", "8"])
    assert code == 2 and len(err.strip().splitlines()) == 1 and "needs ZeRO >= 1" in err
    # the flags a user gives, not the fields behind them
    assert "give --zero 1-3 or --shard-group 0" in err and "zero_stage" not in err and "shard_group" not in err


def test_public_rows_carry_the_hybrid_sharding_their_source_states():
    """MaxText's A3 configs (FSDP over a VM's 8 GPUs, data parallel across VMs) and fms-fsdp's
    HSDP carry a shard group; a run sharded over every rank (fsdp = dp) or that states none does not."""
    import csv
    from importlib import resources

    from shardwise.analyses import public_stacks
    from shardwise.analyses.public_validation import scenario_for

    with resources.files("shardwise.data").joinpath("public_training_runs.csv").open() as f:
        rows = {r["id"]: r for r in csv.DictReader(f)}
    assert scenario_for(rows["PUB-1053"]).plan.shard_group == 8  # 4x A3: 32 GPUs, FSDP over 8
    assert scenario_for(rows["PUB-1053"]).plan.replicas == 4
    assert public_stacks.shard_group(rows["PUB-1051"]) == 0  # 1x A3: FSDP over all 8
    assert public_stacks.shard_group(rows["PUB-0902"]) == 8  # fms-fsdp, sharding=hsdp on 128 GPUs
    plain = [r for r in rows.values() if r["fsdp"] and r["fsdp"] == r["dp"] and r["cp"] in ("", "1")]
    assert plain and all(public_stacks.shard_group(r) == 0 for r in plain)
    # dgxc Paxml (empty fsdp cell): its configure.sh's DCN mesh over the ICI mesh [1, 8, 1]
    paxml_5b, paxml_175b = scenario_for(rows["PUB-0467"]).plan, scenario_for(rows["PUB-0463"]).plan
    assert (paxml_5b.shard_group, paxml_5b.replicas) == (8, 16)  # GPT-5B on 128 GPUs
    assert (paxml_175b.shard_group, paxml_175b.replicas) == (128, 16)  # GPT-175B on 2048 GPUs
    assert scenario_for(rows["PUB-0459"]).plan.shard_group == 0  # 175B on 128 GPUs: FSDP over all


def test_xla_reduces_in_bf16_and_leaves_the_replicas_all_reduce_exposed():
    """`Plan.spmd_grad_reduce` (MaxText, Paxml): the reduction in the bf16 of the dot, 2 bytes per
    parameter, and the replicas' all-reduce of hybrid sharding priced apart and never hidden: the
    step grows by it, and the simulator agrees; without replicas only the bytes change."""
    scn, n = _scn(nodes=16, shard_group=8, spmd_grad_reduce=True), 1e9
    fabric, place = Fabric.of(scn.cluster), placement(scn.plan, 8)
    names = ("reduce_scatter", "replica_all_reduce")
    prices = collective_prices(scn, fabric, place, n, names)
    shard, replicas = fabric.group(8, 8), fabric.group(16, 1)
    assert SPMD_GRAD_BYTES == 2.0 and prices["reduce_scatter"] == pytest.approx(shard.reduce_scatter(2 * n))
    assert prices["replica_all_reduce"] == pytest.approx(replicas.all_reduce(2 * n / 8), rel=1e-12)
    other = collective_prices(_scn(nodes=16, shard_group=8), fabric, place, n, names)
    assert other["replica_all_reduce"] == 0.0  # a PyTorch stack's is inside its reduce-scatter, hidden
    xla, hidden = estimate_training_step(scn), estimate_training_step(_scn(nodes=16, shard_group=8))
    held = total_params(scn.model)  # tp = pp = 1: every parameter, sharded over the 8 of a server
    ar = collective_prices(scn, fabric, place, held, names)["replica_all_reduce"]
    assert ar > 0.05 and xla.breakdown.dp_comm_s >= ar and xla.breakdown.dp_comm_s > hidden.breakdown.dp_comm_s
    # a PyTorch stack's own replicas' all-reduce (fp32 gradients, twice XLA's bytes) runs inside its
    # reduce-scatters, layer by layer, hidden: what it exposes (NCCL's SMs' share of its collectives)
    # is less than that all-reduce alone
    g = mem.grad_bytes_per_param(scn.plan.precision, scn.plan.grad_reduce_bf16)
    assert hidden.breakdown.dp_comm_s < replicas.all_reduce(g * held / 8)
    assert float(simulate_training_step(scn).estimate.step_time_s) == pytest.approx(float(xla.step_time_s), rel=0.02)
    one = _scn(nodes=1, spmd_grad_reduce=True)  # no replicas: nothing apart
    assert collective_prices(one, Fabric.of(one.cluster), placement(one.plan, 8), n, names)["replica_all_reduce"] == 0
