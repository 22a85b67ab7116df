"""FSDP2's exposed units (physics.fsdp2): the gather that opens a micro-batch and the reduce-scatter
that closes it move whole FSDP units (the word embedding, one block), not Megatron-Core's 40M-
parameter buckets; counted by hand for Llama 3 8B under torchtitan's preset on one DGX H100."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shardwise import presets
from shardwise.engines.data_parallel import DP_BUCKET_PARAMS, collective_prices, fsdp2_units
from shardwise.engines.dp_comm import unhideable_s
from shardwise.engines.training import estimate_training_step
from shardwise.physics import fsdp2
from shardwise.physics.collectives import Fabric
from shardwise.physics.topology import placement
from shardwise.specs import Plan, Recompute, Scenario


def _scenario(framework: str = "torchtitan", model: str = "llama3-8b", **overrides) -> Scenario:
    flags = presets.framework(framework)
    zero = flags.pop("zero_stage")
    kw = {"dp": 8, "global_batch": 8, "recompute": Recompute.SELECTIVE, "zero_stage": zero, **flags, **overrides}
    return Scenario(presets.model(model, seq_len=8192), presets.system("dgx-h100"), Plan(**kw))


def _block_by_hand(m, tp: int = 1) -> float:
    q, kv = m.heads * m.head_dim, m.kv_heads * m.head_dim
    matrices = m.hidden * (q + 2 * kv) + q * m.hidden + 3 * m.hidden * m.ffn_hidden  # wq wk wv, wo, w1 w3 w2
    return matrices / tp + 2 * m.hidden  # two RMSNorm weights, whole on every TP rank


def test_the_units_are_a_block_and_the_embedding_on_the_first_stage():
    m = _scenario().model
    block = _block_by_hand(m)
    assert block == pytest.approx(218.1e6, rel=0.01)  # Llama 3 8B: 218M per block
    gather, reduce = fsdp2.edge_units(m, 1, first_stage=True)
    assert reduce == pytest.approx(block + m.vocab * m.hidden)
    assert gather == pytest.approx(reduce / 2)  # the forward's, spread over the two passes priced
    assert fsdp2.edge_units(m, 1, first_stage=False) == pytest.approx((block / 2, block))
    # DTensor TP: the matrices and the vocab-parallel embedding split over tp, the norms whole
    assert fsdp2.edge_units(m, 8, first_stage=False)[1] == pytest.approx(_block_by_hand(m, 8))
    assert reduce > 18 * DP_BUCKET_PARAMS  # what Megatron-Core's bucket stood for


def test_the_units_replace_the_buckets_only_under_per_parameter_sharding():
    scn = _scenario()
    fabric, place = Fabric.of(scn.cluster), placement(scn.plan, scn.cluster.gpus_per_node)
    names = ("unit_reduce_scatter", "bucket_weights_all_gather")
    n = 8.03e9 / 8
    units = fsdp2_units(scn, first_stage=True)
    with_units = collective_prices(scn, fabric, place, n, names, units=units)
    flat = replace(scn, plan=replace(scn.plan, per_param_sharding=False))
    buckets = collective_prices(flat, fabric, place, n, names, units=units)
    group = fabric.group(8, place["dpcp"])
    assert with_units["unit_reduce_scatter"] == pytest.approx(group.reduce_scatter(4.0 * units[1]))  # fp32 reduce
    assert with_units["bucket_weights_all_gather"] == pytest.approx(group.all_gather(2.0 * units[0]))
    assert buckets["unit_reduce_scatter"] == pytest.approx(group.reduce_scatter(4.0 * DP_BUCKET_PARAMS))
    assert with_units["unit_reduce_scatter"] > 10 * buckets["unit_reduce_scatter"]


def test_a_mixture_of_experts_keeps_the_buckets():
    scn = _scenario("nemo-automodel", model="qwen3-30b-a3b")
    assert scn.model.is_moe and fsdp2_units(scn, first_stage=True) is None
    assert fsdp2_units(_scenario("fsdp"), first_stage=True) is None  # FSDP1: no per-parameter sharding


def test_the_exposed_units_add_to_the_contention_not_hide_in_it():
    assert unhideable_s(0.01, 0.2, 0.1) == pytest.approx(0.01 + 0.1 * 0.19)
    assert unhideable_s(0.0, 0.2, 0.1) == pytest.approx(0.02)  # no bucket: the contention alone
    scn = _scenario()
    fabric, place = Fabric.of(scn.cluster), placement(scn.plan, scn.cluster.gpus_per_node)
    units = fsdp2_units(scn, first_stage=True)
    group = fabric.group(8, place["dpcp"])
    # one micro-batch: the embedding and block 0 gathered before any GEMM, reduced after the last
    by_hand = group.all_gather(2.0 * 2 * units[0]) + group.reduce_scatter(4.0 * units[1])
    exposed = float(estimate_training_step(scn).breakdown.dp_comm_s)
    assert exposed > by_hand > 0.005  # several ms on one DGX H100, beside the contention
    flat = replace(scn, plan=replace(scn.plan, per_param_sharding=False))
    assert float(estimate_training_step(flat).breakdown.dp_comm_s) < exposed
