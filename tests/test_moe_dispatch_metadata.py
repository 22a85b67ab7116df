"""The token dispatchers' metadata in a training MoE layer (`physics.moe_dispatch.dispatch_metadata_bytes`,
SYNC_HOST_OPS): the all-to-all dispatcher all-gathers the per-expert counts and sends the router's
probabilities by an all-to-all of their own; every dispatcher waits once per layer and forward pass
for the host to read the split sizes, except under a full-iteration CUDA graph."""

from __future__ import annotations

import numpy as np
import pytest

from shardwise import presets
from shardwise.engines.moe import experts_parts
from shardwise.physics.collectives import Fabric
from shardwise.physics.moe import routed_tokens
from shardwise.physics.moe_dispatch import (
    COUNT_BYTES,
    PROB_BYTES,
    SYNC_HOST_OPS,
    dispatch_bytes,
    dispatch_metadata_bytes,
)
from shardwise.physics.topology import placement
from shardwise.specs import Plan, Scenario


def test_metadata_bytes_by_hand():
    model = presets.model("qwen3-30b-a3b")  # 128 experts, 8 per token
    counts, probs_in, probs_out = dispatch_metadata_bytes(model, 4096, 16, 8)  # 16 ranks, 8 per node
    assert float(counts) == 16 * 128 * COUNT_BYTES  # every rank's 128 counts, gathered
    copies = 4096 * 8 * PROB_BYTES
    assert float(probs_in) == pytest.approx(copies * 7 / 16)  # to the 7 peers in the node
    assert float(probs_out) == pytest.approx(copies * 8 / 16)  # to the 8 ranks of the other node
    # one probability a copy against h = 2048 16-bit values: 1/1024 of the tokens' bytes
    intra, inter = dispatch_bytes(model, 4096, 16, 8, 2.0)
    assert float(probs_in + probs_out) == pytest.approx(float(intra + inter) / 1024)


def _routed(host_kernel_s: float = 0.0, **kw):
    model, cluster = presets.model("qwen3-30b-a3b"), presets.system("dgx-h100")
    plan = Plan(**{"dp": 8, "ep": 8, "etp": 1, "global_batch": 64, "host_kernel_s": host_kernel_s, **kw})
    scn = Scenario(model, cluster, plan)
    fabric = Fabric.of(cluster)
    place = placement(plan, cluster.gpus_per_node, experts=True)
    cost, _, _ = experts_parts(scn, fabric, place, training=True)
    return scn, fabric, place, cost


@pytest.mark.parametrize("dispatcher", ["alltoall", "flex"])
def test_the_alltoall_dispatcher_alone_moves_counts_and_probabilities(dispatcher):
    scn, fabric, place, cost = _routed(moe_dispatcher=dispatcher)
    model, plan = scn.model, scn.plan
    tokens = routed_tokens(model, plan.micro_batch, model.seq_len, plan.tp, plan.sequence_parallel)
    ep_group = fabric.group(plan.ep, place["ep"])
    flex = dispatcher == "flex"
    a2a = ep_group.exchange(*dispatch_bytes(model, tokens, plan.ep, place["ep"], 2.0, dedup=flex))
    counts, probs_in, probs_out = dispatch_metadata_bytes(model, tokens, plan.ep, place["ep"])
    probs = ep_group.exchange(probs_in, probs_out)
    extra_f = 0.0 if flex else fabric.group(plan.ep, place["ep"]).all_gather(counts) + probs
    extra_b = 0.0 if flex else probs
    assert float(cost.ep_forward_s) == pytest.approx(float(2 * a2a + extra_f), rel=1e-12)
    assert float(cost.ep_backward_s) == pytest.approx(float(2 * a2a + extra_b), rel=1e-12)
    if not flex:  # latency-bound: tens of microseconds beside a dispatch of milliseconds
        assert 0.0 < float(extra_f) < 0.1 * float(2 * a2a)


@pytest.mark.parametrize(("ep", "scope", "waits"), [(8, (), True), (1, (), False), (8, ("full_iteration",), False)])
def test_the_gpu_waits_for_the_host_to_read_the_split_sizes(ep, scope, waits):
    host_kernel_s = 10e-6
    *_, eager = _routed(host_kernel_s, ep=ep, cuda_graph_scope=scope)
    *_, no_host = _routed(0.0, ep=ep, cuda_graph_scope=scope)
    wait = float(eager.compute_forward_s - no_host.compute_forward_s)
    assert wait == pytest.approx(SYNC_HOST_OPS * host_kernel_s if waits else 0.0, abs=1e-15)
    assert float(eager.compute_backward_s) == pytest.approx(float(no_host.compute_backward_s), rel=1e-12)


def test_full_recomputation_reads_the_split_sizes_again():
    host_kernel_s = 10e-6
    *_, eager = _routed(host_kernel_s, recompute="full")
    *_, no_host = _routed(0.0, recompute="full")
    redo = float(np.asarray(eager.compute_backward_s - no_host.compute_backward_s))
    assert redo == pytest.approx(SYNC_HOST_OPS * host_kernel_s, rel=1e-9)
