"""Two costs of Megatron-Core's eager MoE training layer: the forward after the host's read of the
split sizes waits for its own host work (`physics.moe_grouped.post_sync_kernels`), which the rest of the
layer's GPU time cannot hide; and Transformer Engine's padding of the experts' token counts for
narrow GEMMs (`physics.moe_grouped.QUANTIZATION_PAD_*`) under the all-to-all and all-gather dispatchers."""

from __future__ import annotations

import numpy as np
import pytest

from shardwise import presets
from shardwise.engines.moe import experts_parts
from shardwise.physics.collectives import Fabric
from shardwise.physics.kernels import memory_s
from shardwise.physics.moe import experts_forward, routed_tokens
from shardwise.physics.moe_dispatch import SYNC_HOST_OPS
from shardwise.physics.moe_grouped import (
    MOE_POST_SYNC_KERNELS,
    QUANTIZATION_PAD_KERNELS,
    QUANTIZATION_PAD_PASSES,
    grouped_linear_host_ops,
    post_sync_kernels,
    quantization_padding_bytes,
)
from shardwise.physics.topology import placement
from shardwise.specs import Plan, Scenario


def _scenario(host_kernel_s: float, precision: str = "mxfp8", dispatcher: str = "alltoall", **kw) -> Scenario:
    plan = Plan(dp=8, ep=8, etp=1, global_batch=64, micro_batch=1, precision=precision,
                host_kernel_s=host_kernel_s, moe_dispatcher=dispatcher, **kw)  # fmt: skip
    return Scenario(presets.model("qwen3-30b-a3b"), presets.system("dgx-b200"), plan)


def _routed(scn: Scenario, training: bool = True):
    fabric = Fabric.of(scn.cluster)
    place = placement(scn.plan, scn.cluster.gpus_per_node, experts=True)
    return experts_parts(scn, fabric, place, training=training)


def _forward_s(host_kernel_s: float, **kw) -> float:
    cost, _, _ = _routed(_scenario(host_kernel_s, **kw))
    return float(np.asarray(cost.compute_forward_s))


def test_the_section_after_the_read_waits_for_its_host_work():
    """Micro-batches of 1 (16 local experts of 256 tokens each): past the point where the section is
    host-bound, each µs more per host operation costs the forward the section's operations plus the
    read itself, whatever GPU time the rest of the layer has to spare."""
    scn = _scenario(10e-6)
    model, plan = scn.model, scn.plan
    tokens = routed_tokens(model, plan.micro_batch, model.seq_len, plan.tp, plan.sequence_parallel)
    ef = experts_forward(model, tokens, plan.ep, plan.expert_tp, plan.bytes_per_element)
    own_f, _ = grouped_linear_host_ops(model.experts / plan.ep, plan.precision, plan.fp8_recipe)
    section = float(post_sync_kernels(ef, own_f))
    assert section == pytest.approx(MOE_POST_SYNC_KERNELS + 2 * 16 + float(own_f))
    slope = (_forward_s(60e-6) - _forward_s(50e-6)) / 10e-6
    assert slope == pytest.approx(section + SYNC_HOST_OPS, rel=1e-9)


def test_the_section_leaves_the_layers_one_wait():
    """What the section waits for is taken out of the layer's one host-bound wait: the kernels the
    layer hands on for it shrink by the section's operations (forward, and again where recomputation
    reruns it)."""
    _, kernels, busy = _routed(_scenario(10e-6))
    _, kernels_overlap, busy_overlap = _routed(_scenario(10e-6, dispatcher="flex", moe_overlap=True))
    assert float(kernels) < float(kernels_overlap)
    assert float(busy) < float(busy_overlap)


def test_no_section_wait_beside_combined_1f1b_or_without_a_host():
    """Combined 1F1B queues the other micro-batch's backward with the section: no wait of its own
    there (only the read); no host time, no wait."""
    with_host, without = _forward_s(50e-6, dispatcher="flex", moe_overlap=True), _forward_s(0.0, dispatcher="flex")
    assert with_host - without == pytest.approx(SYNC_HOST_OPS * 50e-6, rel=1e-9)


def test_padding_copies_under_the_all_to_all_dispatcher_in_narrow_precisions():
    """The all-to-all dispatcher's MXFP8 layer pays TE's padding and unpadding copies forward and
    backward; the flex dispatcher pads inside its permutation (none), 16-bit GEMMs need none."""
    scn = _scenario(0.0)
    model, plan, gpu = scn.model, scn.plan, scn.cluster.gpu
    tokens = routed_tokens(model, plan.micro_batch, model.seq_len, plan.tp, plan.sequence_parallel)
    ef = experts_forward(model, tokens, plan.ep, plan.expert_tp, plan.bytes_per_element)
    pad = quantization_padding_bytes(ef, model, plan.bytes_per_element)
    copies = float(ef.up.m * ef.up.batch)
    assert float(pad) == pytest.approx(QUANTIZATION_PAD_PASSES * 2 * model.hidden * copies)
    alltoall, _, _ = _routed(scn)
    flex, _, _ = _routed(_scenario(0.0, dispatcher="flex"))
    pad_s = float(memory_s(pad, gpu, kernels=QUANTIZATION_PAD_KERNELS))
    assert float(alltoall.compute_forward_s - flex.compute_forward_s) == pytest.approx(pad_s, rel=1e-9)
    assert float(alltoall.compute_backward_s - flex.compute_backward_s) == pytest.approx(pad_s, rel=1e-9)
    bf16_a, _, _ = _routed(_scenario(0.0, precision="bf16"))
    bf16_f, _, _ = _routed(_scenario(0.0, precision="bf16", dispatcher="flex"))
    assert float(bf16_a.compute_forward_s) == pytest.approx(float(bf16_f.compute_forward_s), rel=1e-12)
    serving_a, _, _ = _routed(scn, training=False)
    serving_f, _, _ = _routed(_scenario(0.0, dispatcher="flex"), training=False)
    assert float(serving_a.compute_forward_s) == pytest.approx(float(serving_f.compute_forward_s), rel=1e-12)
