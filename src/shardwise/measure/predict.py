"""What the cost model predicts for exactly what `shardwise measure` runs: `layers` transformer
layers, forward and backward of m micro-batches, no embedding, no output layer, no optimizer.

It uses the model's own layer costs (`engines.costs.layer_cost`: GEMMs, attention, element-wise
kernels, and the TP all-reduces on the link) composed as the measured run is:

- TP: every micro-batch runs every layer forward and backward on every rank; the all-reduces are
  synchronous (measure does not overlap them): step = m L (f + b), communication = m L (c_f + c_b).
- PP (GPipe or 1F1B, which have the same bubble): step = (m + p - 1)(L / p)(f + b) plus, on the
  critical path, 2 (p - 1) transfers of one micro-batch's activations (the first forward and the
  last backward cross every stage boundary) and 2 (m - 1) more on the slowest stage (Narayanan et
  al. 2021 §2.2: the bubble is (p - 1) / m of the ideal time). Interleaved with v chunks per
  stage: the bubble divided by v (§2.2.2), and v times the transfers (2 (p v - 1) + 2 (m - 1) v).
- DP: one stage's m L (f + b) plus the all-reduce of every layer's gradients.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardwise.specs import Cluster, Model, Plan, Scenario


@dataclass(frozen=True)
class Predicted:
    """Seconds (floats, or arrays where the cluster holds arrays: a calibration's parameter sets)."""

    step_s: Any
    compute_s: Any
    comm_s: Any  # TP all-reduces, PP sends, or the DP all-reduce on the critical path
    bubble_s: Any = 0.0

    def floats(self) -> Predicted:
        return Predicted(float(self.step_s), float(self.compute_s), float(self.comm_s), float(self.bubble_s))


def _layer(model: Model, cluster: Cluster, plan: Plan) -> tuple[Any, Any, Any, Any, Any]:
    """(compute forward, compute backward, TP forward, TP backward, the backward's weight-gradient
    part) of one layer, one micro-batch."""
    from shardwise.engines.context_parallel import context_parallel
    from shardwise.engines.costs import layer_cost
    from shardwise.engines.tp_overlap import tp_comm
    from shardwise.physics.collectives import Fabric
    from shardwise.physics.topology import placement

    scn = Scenario(model, cluster, plan)
    fabric = Fabric.of(cluster)
    local = context_parallel(scn)
    cost, _ = layer_cost(
        local, tp_comm(local, fabric, placement(plan, cluster.gpus_per_node)["tp"]), kv_len=model.seq_len
    )
    return cost.compute_forward_s, cost.compute_backward_s, cost.tp_forward_s, cost.tp_backward_s, cost.weight_grad_s


def _plan(
    kind: str, ranks: int, micro_batch: int, micro_batches: int, precision: str, sequence_parallel: bool = False
) -> Plan:
    tp, pp, dp = {"tp": (ranks, 1, 1), "pp": (1, ranks, 1), "dp": (1, 1, ranks)}[kind]
    return Plan(
        tp=tp,
        pp=pp,
        dp=dp,
        micro_batch=micro_batch,
        global_batch=micro_batch * micro_batches * dp,
        precision=precision,
        sequence_parallel=sequence_parallel and tp > 1,
        async_tp_grad=False,  # measure's all-reduces are synchronous
        flash_attention=True,  # torch's fused scaled_dot_product_attention
    )


def predict(
    kind: str,
    model: Model,
    cluster: Cluster,
    ranks: int,
    micro_batch: int,
    micro_batches: int,
    precision: str,
    sequence_parallel: bool = False,
    chunks: int = 1,
    schedule: str = "1f1b",
) -> Predicted:
    """The predicted step of `measure KIND` (see the module docstring)."""
    from shardwise.physics.collectives import Fabric

    plan = _plan(kind, ranks, micro_batch, micro_batches, precision, sequence_parallel)
    cf, cb, tf, tb, wg = _layer(model, cluster, plan)
    layers, m = int(model.layers), micro_batches
    if kind == "tp":
        compute, comm = m * layers * (cf + cb), m * layers * (tf + tb)
        return Predicted(compute + comm, compute, comm)
    if kind == "pp":
        v = chunks
        stage = layers // ranks * (cf + cb)
        bytes_ = micro_batch * int(model.seq_len) * int(model.hidden) * plan.bytes_per_element
        send = Fabric.of(cluster).p2p(bytes_, False)
        sends = (2 * (ranks * v - 1) + 2 * (m - 1) * v) * send
        compute = m * stage
        bubble = (ranks - 1) * stage / v
        if schedule == "zb-h1":  # deferred weight gradients fill the cool-down (engines.training)
            bubble = (ranks - 1) * max(stage - 2 * (layers // ranks) * wg, 0.0)
        return Predicted(compute + bubble + sends, compute, sends, bubble)
    from shardwise.physics.params import layer_params

    compute = m * layers * (cf + cb)
    grads = layers * float(layer_params(model)) * plan.bytes_per_element
    fabric = Fabric.of(cluster)
    comm = fabric.group(ranks, cluster.gpus_per_node).all_reduce(grads)
    return Predicted(compute + comm, compute, comm)
