"""An MoE training layer waits for its host once: max(0, all its kernels x host time - the layer's
GPU time), not a wait for the attention and shared part plus one for the routed experts."""

from __future__ import annotations

import numpy as np
import pytest

from shardwise import presets
from shardwise.engines.costs import layer_cost
from shardwise.engines.moe import experts_cost, moe_layer_cost
from shardwise.engines.tp_overlap import tp_comm
from shardwise.physics.collectives import Fabric
from shardwise.physics.moe_dispatch import SYNC_HOST_OPS
from shardwise.physics.topology import placement
from shardwise.specs import Plan, Scenario


def _compute_s(cost) -> float:
    return float(np.asarray(cost.compute_forward_s + cost.compute_backward_s))


def _parts(host_kernel_s: float) -> tuple[float, float, float]:
    """(the whole layer, the attention and shared part alone, the routed experts alone): compute seconds,
    less the dispatcher's wait for the host to read the split sizes (`physics.moe_dispatch.SYNC_HOST_OPS`, a
    fixed wait of its own in the routed part, not the host-bound wait tested here)."""
    model, cluster = presets.model("qwen3-30b-a3b"), presets.system("dgx-b200")
    plan = Plan(dp=8, ep=8, etp=1, global_batch=64, host_kernel_s=host_kernel_s)
    scn = Scenario(model, cluster, plan)
    fabric = Fabric.of(cluster)
    place = placement(plan, cluster.gpus_per_node, experts=True)
    comm = tp_comm(scn, fabric, place["tp"])
    whole = moe_layer_cost(scn, comm, fabric, place, model.seq_len, training=True)
    shared = model.shared_experts * model.expert_ffn_hidden
    dense, _ = layer_cost(scn, comm, kv_len=model.seq_len, ffn=shared, moe_layer=True)
    routed = experts_cost(scn, fabric, place, training=True)
    sync = SYNC_HOST_OPS * host_kernel_s
    return _compute_s(whole) - sync, _compute_s(dense), _compute_s(routed) - sync


def test_one_host_wait_for_the_whole_moe_layer():
    _, dense0, routed0 = _parts(0.0)
    one_part_waits = both_wait = False
    for host_kernel_s in np.geomspace(1e-6, 1e-3, 31):
        whole, dense, routed = _parts(float(host_kernel_s))
        waits = (dense > dense0 * (1 + 1e-12), routed > routed0 * (1 + 1e-12))
        if waits[0] != waits[1]:  # one part host-bound, the other's GPU time to spare covers some of it
            one_part_waits = True
            assert whole < dense + routed
        elif all(waits):  # both host-bound: one wait is the two waits' sum
            both_wait = True
            assert whole == pytest.approx(dense + routed, rel=1e-12)
        assert dense0 + routed0 <= whole * (1 + 1e-12) and whole <= (dense + routed) * (1 + 1e-12)
    assert one_part_waits and both_wait


def test_no_host_time_no_wait():
    whole, dense, routed = _parts(0.0)
    assert whole == pytest.approx(dense + routed, rel=1e-12)
