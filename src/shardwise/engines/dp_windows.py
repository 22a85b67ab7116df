"""The windows of a stage's passes that its data-parallel collectives may hide behind
(`engines.dp_step`)."""

from __future__ import annotations

from shardwise.engines.costs import StageCost
from shardwise.specs._checks import Number


def backward_window_s(cost: StageCost, whole: bool = False) -> Number:
    """The backward's window for data-parallel collectives: compute and exposed TP (`whole`: all, ZeRO-3's)
    and the layer's whole host-bound wait (its forward part where passes drain: `physics.host_passes`)."""
    own = cost.backward_s if whole else cost.compute_backward_s + cost.tp_backward_s
    return own + cost.host_wait_forward_s


def forward_window_s(cost: StageCost) -> Number:
    """The seconds of a micro-batch's forward pass that data-parallel collectives may hide behind
    (ZeRO-1/2's gather after the optimizer, behind the next step's first forward): its compute and
    exposed TP collectives, and the layer's whole host-bound wait (`costs.StageCost.host_wait_s`):
    the GPU idles through it wherever it falls, so either pass's collectives run through it. Without
    it a faster GPU shortened the forward of a host-bound layer whose time did not fall, and the step
    rose (tests/test_invariants_pinned.py)."""
    return cost.compute_forward_s + cost.tp_forward_s + cost.host_wait_s - cost.host_wait_forward_s
