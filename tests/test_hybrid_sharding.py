"""Hybrid sharded data parallelism (`Plan.shard_group`: FSDP HYBRID_SHARD / HSDP, MaxText's FSDP
inside a slice): the model state divided by the shard group, the gathers and reduce-scatters in
it, the replicas' all-reduce of each shard across it; 0 is plain ZeRO over dp x cp."""

from __future__ import annotations

import pytest

from shardwise import presets
from shardwise.engines.data_parallel import collective_prices
from shardwise.engines.training import estimate_training_step
from shardwise.physics import memory as mem
from shardwise.physics.collectives import Fabric
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
        ({"shard_group": 3}, "shard_group 3 is not allowed; it must divide dp x cp = 32"),
        ({"shard_group": 8, "zero_stage": 0}, "shard_group 8 needs ZeRO >= 1"),
        ({"shard_group": -2}, "shard_group: -2 is not allowed"),
        ({"shard_group": 64}, "shard_group 64 is not allowed; it must divide dp x cp = 32"),
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
    assert code == 2 and len(err.strip().splitlines()) == 1 and "shard_group 5" in err and "Traceback" not in err
    code, out, err = cli([*base, "--zero", "0", "--shard-group", "8"])
    assert code == 2 and "needs ZeRO >= 1" in err.strip()


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
