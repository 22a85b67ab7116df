"""The uncalibrated interval of a training step that runs a collective group over a link no
published training run measured: PCIe inside a server (`calibration.spreads.PCIE_LINK_LOG_SD`,
added in quadrature to its stack's, GPU's and family's spread, `spreads.uncalibrated_log_sd`).
Used by predict's interval (`calibration.intervals`) and the experiments' bands (crossover, sweep)."""

from __future__ import annotations

import numpy as np

from shardwise.calibration.spreads import PCIE_LINK_LOG_SD, PCIE_LINK_POINTS
from shardwise.physics.custom_allreduce import NVLINK_CLASS_BYTES_PER_S
from shardwise.physics.topology import group_placement
from shardwise.specs._checks import Number

MISSED = (
    f"how far the collective model missed {PCIE_LINK_POINTS} published PCIe points, held out (validate collectives)"
)
BASIS = f"no published training run over PCIe: plus {MISSED}"


def over_pcie(scn: object) -> Number:
    """Whether a training scenario's TP, CP or data-parallel (with CP) group has more than one GPU
    inside a server whose link is below NVLink class (`physics.custom_allreduce.NVLINK_CLASS_BYTES_PER_S`):
    per plan and per link rate where the plan or the link holds arrays. The pipeline's sends, a few MB
    per micro-batch, are left out."""
    cluster, plan = scn.cluster, scn.plan  # type: ignore[attr-defined]
    # per point where the link is a swept grid (crossover --vary bandwidth=...): 900 GB/s is NVLink-class
    pcie = np.asarray(cluster.intra_node_link.bandwidth_bytes_per_s) < NVLINK_CLASS_BYTES_PER_S
    if not np.any(pcie):
        return np.zeros(np.shape(np.asarray(plan.tp)), dtype=bool)
    place = group_placement(plan.tp, plan.dp, plan.pp, cluster.gpus_per_node, plan.cp)
    inside = [np.asarray(place[k]) > 1 for k in ("tp", "cp", "dpcp")]
    return np.logical_and(*np.broadcast_arrays(np.logical_or.reduce(np.broadcast_arrays(*inside)), pcie))


def link_widened_log_sd(log_sd: Number, unmeasured: Number) -> Number:
    """`log_sd` with the PCIe collective spread added in quadrature where `unmeasured`."""
    return np.where(unmeasured, np.hypot(log_sd, PCIE_LINK_LOG_SD), log_sd)
