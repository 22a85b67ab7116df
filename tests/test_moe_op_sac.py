"""An MoE layer under torchtitan's per-op selective checkpointing (`engines.moe_op_sac`), checked by
hand against its save list (pytorch/torchtitan@b5bcd76c activation_checkpoint.py): topk is the
routed part's only saved op but the all-to-alls under torch.compile, the router's gate and every
`_grouped_mm` rerun, eager torchtitan's spmd_types all-to-alls rerun too."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from shardwise import presets
from shardwise.engines.moe import experts_parts
from shardwise.engines.moe_op_sac import rebuilt_routed_bytes
from shardwise.engines.training import training_memory
from shardwise.engines.training_flops import flops_per_step
from shardwise.physics.collectives import Fabric
from shardwise.physics.compute import linears_times
from shardwise.physics.memory_activations import FLASH_STATS_BYTES, layer_activation_bytes, op_sac_routed_bytes
from shardwise.physics.moe import experts_forward
from shardwise.physics.topology import placement
from shardwise.specs import Plan, Recompute, Scenario


def _scenario(framework: str, recompute: Recompute, ep: int = 8, **kw) -> Scenario:
    flags = presets.framework(framework)
    zero = flags.pop("zero_stage")
    flags.update(kw)
    plan = Plan(dp=8, ep=ep, global_batch=8, micro_batch=1, recompute=recompute, zero_stage=zero, **flags)
    return Scenario(presets.model("qwen3-30b-a3b"), presets.system("dgx-h100"), plan)


def _routed(scn: Scenario):
    fabric = Fabric.of(scn.cluster)
    place = placement(scn.plan, scn.cluster.gpus_per_node, experts=True)
    return experts_parts(scn, fabric, place, training=True)[0]


@pytest.mark.parametrize("framework", ["torchtitan", "torchtitan-compile"])
def test_the_routed_forward_reruns_and_eager_all_to_alls_with_it(framework):
    """host_kernel 0: no host sync to leave out. Eager: the routed forward and its all-to-alls again;
    compiled: the all-to-alls are saved, and with them w2's output is read by nothing."""
    none = _routed(_scenario(framework, Recompute.NONE, host_kernel_s=0.0))
    op = _routed(_scenario(framework, Recompute.SELECTIVE, host_kernel_s=0.0))
    redo = float(op.compute_backward_s - none.compute_backward_s)
    again = float(op.ep_backward_s - none.ep_backward_s)
    forward, dispatch = float(none.compute_forward_s), float(none.ep_forward_s)
    if framework == "torchtitan":
        assert redo == pytest.approx(forward, rel=1e-9)
        assert again == pytest.approx(dispatch, rel=1e-9) and dispatch > 0
    else:
        scn = _scenario(framework, Recompute.NONE, host_kernel_s=0.0)
        ef = experts_forward(scn.model, 4096, 8, 1, 2.0, scn.plan.expert_imbalance)
        w2 = float(linears_times(ef.gemms, scn.cluster.gpu, "bf16", False, 0.0)[1].forward_s)
        assert redo == pytest.approx(forward - w2, rel=1e-9) and w2 > 0.2 * forward
        assert again == 0.0


def test_eager_functional_all_to_alls_are_kept_but_w2_reruns():
    """Eager torchtitan before #4085 (functional all-to-alls, saved): the dispatch is not sent again,
    but eager PyTorch reruns the block's whole forward, w2's grouped GEMM included (review 44 #1)."""
    none = _routed(_scenario("torchtitan", Recompute.NONE, host_kernel_s=0.0, functional_a2a=True))
    op = _routed(_scenario("torchtitan", Recompute.SELECTIVE, host_kernel_s=0.0, functional_a2a=True))
    assert float(op.compute_backward_s - none.compute_backward_s) == pytest.approx(float(none.compute_forward_s))
    assert float(op.ep_backward_s - none.ep_backward_s) == 0.0


def test_the_megatron_policy_redoes_nothing_of_the_routed_experts():
    none = _routed(_scenario("torchtitan", Recompute.NONE, host_kernel_s=0.0))
    attention = _routed(_scenario("torchtitan", Recompute.SELECTIVE, host_kernel_s=0.0, selective_policy="attention"))
    assert float(attention.compute_backward_s) == pytest.approx(float(none.compute_backward_s), rel=1e-12)


def test_routed_experts_keep_the_topk_and_compiled_the_exchanged_tokens():
    m = presets.model("qwen3-30b-a3b")
    t, k, h = 4096.0, m.experts_per_token, m.hidden
    eager = op_sac_routed_bytes(m, t, 1.25, 2.0, 8, False)
    assert eager == pytest.approx(12 * t * k)  # fp32 values and int64 indices
    compiled = op_sac_routed_bytes(m, t, 1.25, 2.0, 8, True)  # received (x imbalance) and returned copies
    assert compiled - eager == pytest.approx(2 * t * k * h * (1.25 + 1.0))
    assert op_sac_routed_bytes(m, t, 1.25, 2.0, 1, True) == pytest.approx(eager)  # ep 1: no all-to-all


def test_an_moe_layer_without_shared_experts_keeps_no_mlp_output():
    """Qwen3's MoE layer: the layer input, wq and wv's outputs, the attention output and its
    statistics; no w1 / w2 output (no shared experts), where a dense layer keeps them."""
    m = presets.model("qwen3-30b-a3b")
    s, h, q, kvd, a = m.seq_len, m.hidden, m.q_dim, m.kv_heads * m.head_dim, m.heads
    kept = layer_activation_bytes(m, 1, 1, False, Recompute.SELECTIVE, True, 2.0, 0, "op")
    assert kept == pytest.approx(2 * s * (h + q + kvd + q) + FLASH_STATS_BYTES * a * s)
    dense = layer_activation_bytes(m, 1, 1, False, Recompute.SELECTIVE, True, 2.0, 6144, "op")
    assert dense - kept == pytest.approx(2 * s * (6144 + h))  # w1 and w2 saved, w3 recomputed


def test_selective_memory_sits_between_full_and_none():
    none, op, full = (
        training_memory(_scenario("torchtitan", rc)).activations_bytes
        for rc in (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL)
    )
    assert float(full) < float(op) < 0.6 * float(none)


def test_saved_all_to_alls_add_their_tokens_to_every_layer_in_flight():
    """The eager preset with its all-to-alls saved (as compiled): each of the 48 layers in flight
    keeps 2 x tokens x k x h x (imbalance + 1) bytes more; the layer being rebuilt in the backward
    pass keeps it beside its working set, which the loss's logits outweigh on this plan (or not: 47)."""
    eager = _scenario("torchtitan", Recompute.SELECTIVE)
    saved = replace(eager, plan=replace(eager.plan, eager_kernels=False))
    m = eager.model
    more = float(training_memory(saved).activations_bytes - training_memory(eager).activations_bytes)
    per_layer = 2 * 4096 * m.experts_per_token * m.hidden * (eager.plan.expert_imbalance + 1.0)
    assert min(abs(more - n * per_layer) for n in (m.layers - 1, m.layers)) < 1e-9 * more


def test_the_rebuilt_routed_experts_hold_torchtitans_eager_inventory():
    """x_RD (h), w1's and w3's outputs, silu's output, their product (4 f) per received copy, and
    the combine's score multiply's copy of each returned one (fp32 eager: 4 bytes)."""
    m = presets.model("qwen3-30b-a3b")
    t, k, h, f = 4096.0, m.experts_per_token, m.hidden, m.expert_ffn_hidden
    assert rebuilt_routed_bytes(m, t, 1.25, 2.0, 4.0) == pytest.approx(t * k * (1.25 * 2 * (h + 4 * f) + 4 * h))


def test_hardware_flops_count_the_routed_forward_again():
    """Per MoE layer and sequence: wk and wo of the attention (no shared experts), the router's gate
    and the k experts' three GEMMs -- all of Qwen3's layers are MoE."""
    scn = _scenario("torchtitan", Recompute.SELECTIVE)
    m = scn.model
    model_flops, hardware_flops = flops_per_step(scn)
    s, h, q, kvd, f, k = m.seq_len, m.hidden, m.q_dim, m.kv_heads * m.head_dim, m.expert_ffn_hidden, m.experts_per_token
    per_layer = 2 * s * h * (kvd + q) + 2 * s * h * m.experts + k * 3 * 2 * s * h * f
    assert hardware_flops - model_flops == pytest.approx(8 * m.layers * per_layer, rel=1e-9)
    compiled = _scenario("torchtitan-compile", Recompute.SELECTIVE)
    w2 = k * 2 * s * h * f  # saved combine: w2's grouped GEMM is not redone
    assert np.subtract(*flops_per_step(compiled)[::-1]) == pytest.approx(8 * m.layers * (per_layer - w2), rel=1e-9)
    ep1 = replace(compiled, plan=replace(compiled.plan, ep=1))
    assert np.subtract(*flops_per_step(ep1)[::-1]) == pytest.approx(8 * m.layers * per_layer, rel=1e-9)
