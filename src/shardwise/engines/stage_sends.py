"""One pipeline send of a micro-batch's activations (or gradients) between neighbouring stages
(Narayanan et al. 2021 Sec. 4.1's scatter/gather; the link-level transfer is
`physics.collectives.p2p_time_s`)."""

from __future__ import annotations

import numpy as np

from shardwise.engines.tp_overlap import TpComm
from shardwise.physics.collectives import Fabric
from shardwise.specs import Scenario
from shardwise.specs._checks import Number


def slowest_stage_send_s(scn: Scenario, fabric: Fabric, place: dict[str, Number], comm: TpComm) -> Number:
    """Seconds of one pipeline send (`stage_send_time_s`) of a micro-batch's activations (or
    gradients) between stages, over the slowest boundary (across nodes when the PP group spans
    nodes); 0 without pipelining. One transfer: training pays 2 v of them per micro-batch
    (`training.stage_sends_per_micro_batch_s`), a forward pass one."""
    crosses = place["pp"] < scn.plan.pp
    return np.where(np.asarray(scn.plan.pp) > 1, stage_send_time_s(scn, fabric, comm, crosses), 0.0)


def stage_send_time_s(scn: Scenario, fabric: Fabric, comm: TpComm, crosses_node: Number) -> Number:
    """Seconds of one pipeline send of a micro-batch's activations (or gradients) from a stage to
    its neighbour over a boundary that does or does not cross nodes (the link-level transfer is
    `physics.collectives.p2p_time_s`, via `Fabric.p2p`).

    With scatter/gather (Narayanan et al. 2021 Sec. 4.1) each TP rank sends 1/t of the tensor
    and the receivers all-gather it over the node's links; with sequence parallelism the tensor
    is already split by t.
    """
    plan = scn.plan
    t = np.asarray(plan.tp, dtype=float)
    sp = np.asarray(plan.sequence_parallel, dtype=bool)
    split = sp | np.asarray(plan.scatter_gather, dtype=bool)
    msg = comm.message_bytes
    # on a PCIe topology at the ring rate of the stages in a server, tp x cp x dp GPUs apart (`Fabric.p2p`)
    stride = t * np.asarray(plan.cp) * np.asarray(plan.dp)
    members = np.minimum(np.asarray(plan.pp), np.maximum(np.asarray(scn.cluster.gpus_per_node) // stride, 2))
    send = fabric.p2p(np.where(split, msg / t, msg), crosses_node, members, stride)
    return send + np.where(split & ~sp, comm.all_gather, 0.0)
