"""A mixture-of-experts layer on one GPU, per micro-batch: the attention and the shared experts
as a dense layer prices them (TP-split, with their TP collectives), plus the routed experts
(`physics.moe`) and their token dispatch.

Per MoE layer and micro-batch the routed part adds, on the rank that waits longest (the
busiest EP rank, `Plan.expert_imbalance` x the mean):

- forward: router, permutation, all-to-all dispatch over the EP group, (etp > 1: all-gather over
  the ETP group), the grouped expert GEMMs and their activation, (reduce-scatter), all-to-all
  combine, un-permutation;
- backward: the same collectives in reverse (the gradients travel the same way) and the input-
  and weight-gradient GEMMs of the router and the experts;
- full recomputation repeats the forward, collectives included.

The dispatch sends a copy per chosen expert (`Plan.moe_dispatcher` "alltoall", Megatron-Core's
default) or one per node and per rank ("flex": DeepEP / HybridEP, `physics.moe.dispatch_bytes`).
The all-to-alls are exposed: Megatron-Core runs them on the compute stream between the
permutation and the expert GEMMs that need their result. Expert weights, gradients and
optimizer state are held by expert_dp = tp cp dp / (ep etp) replicas and reduced over them
(`engines.training`).
"""

from __future__ import annotations

import numpy as np

from shardwise.engines.costs import StageCost, TpComm, layer_cost
from shardwise.errors import SpecError
from shardwise.physics.collectives import Fabric
from shardwise.physics.compute import (
    BACKWARD_MEMORY_RATIO,
    attention_precision,
    cast_bytes_per_element,
    linear_times,
    memory_s,
)
from shardwise.physics.moe import dispatch_bytes, experts_forward, routed_tokens
from shardwise.specs import Model, Recompute, Scenario
from shardwise.specs._checks import Number
from shardwise.specs.hardware import is_narrow
from shardwise.specs.stages import StageSplit, moe_split


def require_dense(model: Model, what: str) -> None:
    """Refuse, in one line, a model whose experts or latent attention `what` does not price yet."""
    if model.is_moe or model.kv_lora_rank:
        kind = "mixture-of-experts" if model.is_moe else "multi-head latent attention"
        raise SpecError(
            f"model {model.name!r}: {what} does not price {kind} models yet; training steps do "
            "(`shardwise predict`), and `shardwise presets show` gives their parameters"
        )


def model_moe_split(model: Model, split: StageSplit) -> StageSplit:
    """How many layers of each stage are mixture-of-experts."""
    return moe_split(split, int(model.layers), model.dense_layers, model.moe_every)


def experts_cost(scn: Scenario, fabric: Fabric, place: dict[str, Number]) -> StageCost:
    """The routed experts of one MoE layer (module docstring); `scn` as one CP rank sees it."""
    model, plan, gpu = scn.model, scn.plan, scn.cluster.gpu
    e = plan.bytes_per_element
    tokens = routed_tokens(model, plan.micro_batch, model.seq_len, plan.tp, plan.sequence_parallel)
    etp = plan.expert_tp
    ef = experts_forward(model, tokens, plan.ep, etp, e, plan.expert_imbalance)
    fused = plan.grad_accumulation_fusion
    up, down = (linear_times(g, gpu, plan.precision, fused) for g in ef.gemms)
    router = linear_times(ef.router, gpu, attention_precision(plan.precision), fused)  # a 16-bit GEMM
    elementwise = memory_s(ef.elementwise_bytes, gpu, ef.elementwise_kernels)
    cast_f = cast_b = 0.0
    if is_narrow(plan.precision):  # Transformer Engine's grouped linear layers cast like the others
        per_element = cast_bytes_per_element(plan.precision)
        cast_f = memory_s(per_element * sum(g.m * g.k * g.batch for g in ef.gemms), gpu, kernels=2)
        cast_b = memory_s(per_element * sum(g.m * g.n * g.batch for g in ef.gemms), gpu, kernels=2)
    flex = plan.moe_dispatcher == "flex"
    intra, inter = dispatch_bytes(model, tokens, plan.ep, place["ep"], e, plan.expert_imbalance, dedup=flex)
    a2a = fabric.group(plan.ep, place["ep"]).exchange(intra, inter)
    etp_group = fabric.group(etp, place["etp"])
    gather = 2 * np.where(np.asarray(etp) > 1, etp_group.all_gather(ef.etp_gather_bytes), 0.0)  # and scatter
    forward = router.forward_s + up.forward_s + down.forward_s + elementwise + cast_f
    grads = sum(g.input_grad_s + g.weight_grad_s for g in (router, up, down))
    backward = grads + BACKWARD_MEMORY_RATIO * elementwise + cast_b
    full = np.asarray(plan.recompute) == Recompute.FULL
    return StageCost(
        compute_forward_s=forward,
        compute_backward_s=backward + np.where(full, forward, 0.0),
        tp_forward_s=gather,
        tp_backward_s=gather + np.where(full, gather, 0.0),
        weight_grad_s=router.weight_grad_s + up.weight_grad_s + down.weight_grad_s,
        ep_forward_s=2 * a2a,  # dispatch and combine
        ep_backward_s=2 * a2a * np.where(full, 2.0, 1.0),  # their gradients (and the forward redone)
    )


def moe_layer_cost(
    scn: Scenario,
    comm: TpComm,
    fabric: Fabric,
    place: dict[str, Number],
    kv_len: Number,
    cp: Number,
    cp_step: Number,
) -> StageCost:
    """One MoE layer: attention and shared experts (a dense layer whose MLP is the shared
    experts, none without them) plus the routed experts."""
    model = scn.model
    shared = model.shared_experts * model.expert_ffn_hidden
    dense, _ = layer_cost(scn, comm, kv_len=kv_len, cp=cp, cp_step=cp_step, ffn=shared)
    routed = experts_cost(scn, fabric, place)
    return StageCost(*(getattr(dense, f) + getattr(routed, f) for f in dense.__dataclass_fields__))
