"""The windows of a stage's passes that its data-parallel collectives may hide behind
(`engines.dp_step`).

A window is the wall time of the pass a collective runs beside: its GPU work, its exposed TP
collectives and the host-bound wait inside it (`costs.StageCost.host_wait_s`). That wait is idle GPU
time, not time the GPU computes, but it stays in the window: the collective's NCCL kernel, enqueued
before it on its own stream, runs while the compute stream waits for the host's next launch (review
44 asked for the GPU's compute time alone; that would expose a collective the idle GPU was running).

Where the passes drain (`physics.host_passes.drained_passes`: Megatron-LM's blocking sends end in
`torch.cuda.synchronize()`, megatron/core/pipeline_parallel/p2p_communication.py, which waits for
every stream of the device, the data-parallel ones included), a collective still in flight at the
pass's end holds the host at that sync: it hides behind its own pass alone, whose wait is known
(`host_wait_forward_s` in the forward, the rest in the backward). So each window holds its own pass's
wait and not the other's. Elsewhere the wait is one number for the layer's two passes, booked in the
backward; the GPU idles through it wherever it falls, so the forward's window holds it too
(`forward_window_s`; the backward's holds it in `compute_backward_s`).
"""

from __future__ import annotations

from shardwise.arrays import where
from shardwise.engines.costs import StageCost
from shardwise.specs._checks import Number


def backward_window_s(cost: StageCost, whole: bool = False) -> Number:
    """The backward's window for data-parallel collectives: compute and exposed TP (`whole`: all, ZeRO-3's),
    with the host-bound wait booked in it (all of it; where passes drain, the backward's own alone). Until
    review 44 it added the forward's part back where passes drain: a window across the device sync."""
    return cost.backward_s if whole else cost.compute_backward_s + cost.tp_backward_s


def forward_window_s(cost: StageCost, drained: Number = False) -> Number:
    """The seconds of a micro-batch's forward pass that data-parallel collectives may hide behind
    (ZeRO-1/2's gather after the optimizer, behind the next step's first forward): its compute and
    exposed TP collectives, and the layer's whole host-bound wait (`costs.StageCost.host_wait_s`):
    the GPU idles through it wherever it falls, so either pass's collectives run through it. Without
    it a faster GPU shortened the forward of a host-bound layer whose time did not fall, and the step
    rose (tests/test_invariants_pinned.py). Where passes drain (`drained`, module docstring) the
    forward's own wait alone, which `compute_forward_s` holds."""
    other = where(drained, 0.0, cost.host_wait_s - cost.host_wait_forward_s)
    return cost.compute_forward_s + cost.tp_forward_s + other


def spare_wait_s(cost: StageCost, m: Number, drained: Number = False) -> Number:
    """The host-bound wait of m micro-batches that ZeRO-3's forward gathers may run through beside
    the backward's collectives (`dp_comm.DpComm.host_wait_s`): none where passes drain, whose sync
    ends each pass (module docstring)."""
    return where(drained, 0.0, m * cost.host_wait_s)
