"""Context parallelism: the scenario as one context-parallel rank computes it, and the CP group's
communication per layer and micro-batch (ring, all-gather, all-to-all)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from shardwise.arrays import any_true, as_array
from shardwise.physics.attention import TORCH_RING_GRAD_BYTES
from shardwise.physics.collectives import Fabric
from shardwise.physics.gemm_ramp import ramped
from shardwise.specs import Cluster, Model, Plan, Scenario
from shardwise.specs._checks import Number
from shardwise.specs.plan import TORCH_RING_KERNELS


@dataclass(frozen=True)
class RankView:
    """A scenario as one context-parallel rank computes it (derived from a checked Scenario, so
    not checked again): sequences of seq_len / cp tokens."""

    model: Model
    cluster: Cluster
    plan: Plan


def context_parallel(scn: Scenario) -> Scenario:
    """The scenario as one context-parallel rank sees it: sequences of seq_len / cp tokens (TP
    messages, pipeline sends, activations, the output layer and the loss all shrink by cp); the
    attention still spans the whole sequence (`layer_cost(..., kv_len=seq_len)`)."""
    cp = as_array(scn.plan.cp)
    if not any_true(cp > 1):
        return scn
    local = scn.model.with_(seq_len=scn.model.seq_len // cp)
    return RankView(local, scn.cluster, scn.plan)  # type: ignore[return-value]


def micro_batch_view(scn: Scenario) -> Scenario:
    """The scenario as one context-parallel rank trains one micro-batch: `context_parallel`, with
    its GEMMs at the efficiency a micro-batch of that many tokens reaches (`physics.gemm_ramp`;
    unchanged unless the cluster has a calibrated ramp)."""
    local = context_parallel(scn)
    cluster = ramped(scn.cluster, np.asarray(scn.plan.micro_batch, dtype=float) * local.model.seq_len)
    return local if cluster is scn.cluster else RankView(local.model, cluster, scn.plan)  # type: ignore[return-value]


def cp_kv_chunk_bytes(scn: Scenario) -> Number:
    """Keys and values of one context-parallel rank's tokens, per layer (what the ring passes on).
    PyTorch's ring (the "flash2" and "sdpa-flash2" kernels: SDPA, torchtitan) passes the keys and values SDPA was
    called with, which torchtitan's Llama has already repeated to the query heads (`repeat_kv`)."""
    model, plan = scn.model, scn.plan
    local = model.seq_len / np.asarray(plan.cp)
    heads = model.heads if plan.attention_kernel in TORCH_RING_KERNELS else model.kv_heads
    return 2 * plan.bytes_per_element * plan.micro_batch * local * heads / plan.tp * model.head_dim


class CpComm(NamedTuple):
    """Context parallelism's communication per layer and micro-batch: a ring step (p2p, hidden
    behind the chunk attention as far as it goes) or collectives that stay exposed; PyTorch's
    ring instead gathers every rank's keys and values once (behind the first step only, forward
    and again backward) and passes the fp32 dK, dV on after every backward step (behind the
    next step; the last is awaited with nothing to hide behind)."""

    ring_step_s: Number = 0.0
    forward_s: Number = 0.0
    backward_s: Number = 0.0
    gather_s: Number = 0.0
    grad_step_s: Number = 0.0


def cp_step_s(scn: Scenario, fabric: Fabric, place: dict[str, Number]) -> CpComm:
    """Context parallelism's communication (`Plan.cp_comm`), on the CP group (over the network
    when it spans servers):
    - p2p: one ring step sends a rank's KV chunk (2 b s/cp k d / t elements) to the next rank;
      PyTorch's ring (the FlashAttention-2 kernels: torchtitan's `context_parallel`) all-gathers the
      chunks of every rank instead (its default rotate method, `_AllGatherRotater`; torchtitan's
      `context_parallel_rotate_method = "allgather"`), forward and again backward, and passes
      each backward step's dK, dV on to the next rank in fp32 (`_templated_ring_attention_backward`:
      `accum_dtype` float32, `permute_tensor`), twice the bytes of a 16-bit chunk;
    - all_gather: the whole sequence's keys and values gathered before attention (cp - 1 of cp
      chunks arrive), their gradients reduce-scattered after (Transformer Engine's KV all-gather
      attention);
    - a2a: DeepSpeed-Ulysses (Jacobs et al. 2023): an all-to-all of the local queries, keys and
      values turns the sequence split into a split of the heads, one of the attention output
      turns it back; backward the same with gradients."""
    model, plan = scn.model, scn.plan
    cp = np.asarray(plan.cp)
    crosses = place["cp"] < cp
    chunk = cp_kv_chunk_bytes(scn)
    on = cp > 1
    if plan.cp_comm == "p2p" and plan.attention_kernel in TORCH_RING_KERNELS:
        grads = chunk * TORCH_RING_GRAD_BYTES / plan.bytes_per_element
        gather = fabric.group(plan.cp, place["cp"], plan.tp).all_gather(chunk * cp)
        step = fabric.p2p(grads, crosses, place["cp"], plan.tp)
        return CpComm(gather_s=np.where(on, gather, 0.0), grad_step_s=np.where(on, step, 0.0))
    if plan.cp_comm == "p2p":
        return CpComm(np.where(on, fabric.p2p(chunk, crosses, place["cp"], plan.tp), 0.0))
    group = fabric.group(plan.cp, place["cp"], plan.tp)
    if plan.cp_comm == "all_gather":
        whole = chunk * cp  # the gathered keys and values
        return CpComm(
            0.0, np.where(cp > 1, group.all_gather(whole), 0.0), np.where(cp > 1, group.reduce_scatter(whole), 0.0)
        )
    per_head = plan.bytes_per_element * plan.micro_batch * model.seq_len / cp * model.head_dim / np.asarray(plan.tp)
    qkv, out = per_head * (model.heads + 2 * model.kv_heads), per_head * model.heads
    both = np.where(cp > 1, group.all_to_all(qkv) + group.all_to_all(out), 0.0)
    return CpComm(0.0, both, both)
