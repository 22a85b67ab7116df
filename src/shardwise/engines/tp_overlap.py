"""The TP group's collectives on one micro-batch's activation, and what a collective adds when it
overlaps a GEMM (the SMs it takes from it, the chunk a pipelined overlap cannot hide)."""

from __future__ import annotations

import numpy as np

from shardwise.physics.casts import AMAX_REDUCTION_BYTES, sp_gather_bytes_per_element
from shardwise.physics.collectives import Fabric, Group
from shardwise.physics.compute import gemm_s
from shardwise.physics.flops import Gemm, gemm
from shardwise.specs import Scenario
from shardwise.specs._checks import Number
from shardwise.specs.hardware import Gpu


class TpComm:
    """The TP group's collectives on one micro-batch's activation (b s_q h e bytes), priced once
    and shared by the layers, the embedding, the output layer and the pipeline sends."""

    __slots__ = ("all_gather", "all_reduce", "gather_input", "gather_output_grad", "gather_wgrad_input", "group")
    __slots__ += ("amax_all_reduce", "message_bytes", "reduce_scatter")

    def __init__(self, group: Group, message_bytes: Number, gather_scales: tuple[float, float, float] = (1.0,) * 3):
        self.group, self.message_bytes = group, message_bytes
        self.all_reduce = group.all_reduce(message_bytes)
        self.reduce_scatter = group.reduce_scatter(message_bytes)
        self.all_gather = self.reduce_scatter  # same bytes, same ring
        # the sequence-parallel gathers in front of the linear layers, at the bytes the recipe gathers
        # (`physics.casts.sp_gather_bytes_per_element`, over the activation's): the forward's input,
        # the input again for the weight gradient, a row-parallel layer's output gradient
        priced = {1.0: self.all_gather}
        for scale in gather_scales:
            if scale not in priced:
                priced[scale] = group.all_gather(scale * message_bytes)
        self.gather_input, self.gather_wgrad_input, self.gather_output_grad = (priced[x] for x in gather_scales)
        # one quantised tensor's amax shared over the group (`physics.casts.reduces_amax`): a 4-byte all-reduce
        self.amax_all_reduce = group.all_reduce(AMAX_REDUCTION_BYTES)


def tp_comm(scn: Scenario, fabric: Fabric, tp_per_node: Number, q_len: Number | None = None) -> TpComm:
    model, plan = scn.model, scn.plan
    tokens = plan.micro_batch * (model.seq_len if q_len is None else q_len)
    e = plan.bytes_per_element
    scales = tuple(b / e for b in sp_gather_bytes_per_element(plan.precision, plan.fp8_recipe, e))
    return TpComm(fabric.group(plan.tp, tp_per_node), e * tokens * model.hidden, scales)  # type: ignore[arg-type]


# SMs a collective occupies while it overlaps a GEMM (the GEMM runs on the rest). Transformer
# Engine's userbuffers (NeMo's H100 configurations, e.g. userbuffers_bf16_h100_h8192_tp4_mbs1_
# seqlen8192): all-gathers by ring exchange on copy engines (1 SM), pipelined reduce-scatters
# overlapping the forward GEMMs 24 SMs, bulk all-gathers in the input-gradient GEMM 2 and bulk
# reduce-scatters in the weight-gradient GEMM 24 (QKV) or 2-4 (MLP up), here one value, 16, for
# both. NCCL kernels launched
# beside a GEMM (Megatron's asynchronous TP gradient reduction) run one CTA per channel, 16 on
# NVLink systems by default (NCCL_MIN_NCHANNELS unset; nccl src/graph/connect.cc).
UB_RING_EXCHANGE_SMS = 1
UB_PIPELINED_RS_SMS = 24
UB_BULK_AG_SMS = 2
UB_BULK_RS_SMS = 16
NCCL_OVERLAP_SMS = 16
# RCCL on ROCm runs one 256-thread workgroup per channel too (src/include/device.h NCCL_MAX_NTHREADS)
# and, on an 8-GPU MI300X platform, 56 channels: its topology model of that fully connected xGMI
# mesh lists 28 rings (src/graph/rome_models.cc rome_model_79, nLinks 7, ROCm 6.1 to 6.2.2 and
# develop of 2024-10), which ncclTopoPostset doubles while they fit under 64 (src/graph/connect.cc,
# gfx94x); a `Gpu.collective_sms` of 56 (the `mi300x`, `mi325x` presets: 18% of 304 CUs, where
# NCCL's 16 are 12% of an H100's 132 SMs). Smaller groups are not priced apart (RCCL raises them to
# 24-32 channels, src/init.cc: "NCCL_MIN_NCHANNELS=32" for 2 ranks).
# A pipelined overlap splits the GEMM into chunks and cannot hide the chunk of communication at
# its end (reduce-scatter: the last chunk's) or start (all-gather: the first): 1/splits of the
# collective stays exposed. Ring exchange moves one tp-th per step; the pipelined reduce-scatter
# uses 4 splits (NeMo's userbuffer configurations, num_splits 4).
UB_PIPELINED_RS_SPLITS = 4


def collective_sms(gpu: Gpu) -> Number:
    """The SMs (CUs) one NCCL or RCCL collective holds on `gpu` while it overlaps compute: the GPU's
    `collective_sms`, else NCCL's `NCCL_OVERLAP_SMS`."""
    own = np.asarray(gpu.collective_sms, dtype=float)
    return np.where(own > 0, own, float(NCCL_OVERLAP_SMS))


def overlapped_exposed_s(
    comm_s: Number, window_s: Number, comm_sms: Number, sm_count: Number, splits: Number = np.inf
) -> Number:
    """Seconds a collective adds when it runs beside one GEMM of `window_s` that loses `comm_sms`
    of the GPU's `sm_count` SMs while the collective runs: the pair takes max(comm, window +
    comm * c / S), so the cost beyond the GEMM is max(comm - window, comm c / S), and at least
    comm / splits for a pipelined (chunked) overlap. Without a window (0) it is the whole
    collective."""
    share = np.where(np.asarray(sm_count) > 0, comm_sms / np.maximum(np.asarray(sm_count, dtype=float), 1.0), 0.0)
    tail = comm_s / splits
    return np.where(np.asarray(window_s) > 0, np.maximum(np.maximum(comm_s - window_s, comm_s * share), tail), comm_s)


def own_rows_split_s(g: Gemm, tp: Number, gpu: Gpu, precision: str) -> tuple[Number, Number]:
    """nanotron's asynchronous linears (`Plan.tp_shard_overlap`) multiply a gathered activation
    in pieces: the rank's own 1/tp of the rows while the all-gather runs, then the rows before
    and after them (`_ColumnLinearAsyncCommunication.forward`, `_RowLinearAsyncCommunication.
    backward`: up to three `torch.mm` into slices of one output). Returns (the own rows' GEMM, what
    the pieces of the slowest rank take beyond the whole GEMM): smaller GEMMs fill the GPU's last
    wave less, and the TP group waits for its slowest rank at the next collective. Ranks 0, 1 and
    the middle one are priced (the piece sizes of the others repeat theirs)."""
    t = np.maximum(np.asarray(tp, dtype=float), 1.0)
    rows = np.asarray(g.m, dtype=float) / t

    def piece(m: Number) -> Number:
        part = gemm(m, g.n, g.k, g.a_bytes, g.batch, g.b_bytes)._replace(out_bytes=g.out_bytes)
        return np.where(np.asarray(m) > 0, gemm_s(part, gpu, precision), 0.0)

    own = piece(rows)
    worst: Number = 0.0
    for rank in (np.zeros_like(t), np.minimum(1.0, t - 1.0), np.floor((t - 1.0) / 2.0)):
        worst = np.maximum(worst, piece(rank * rows) + own + piece((t - 1.0 - rank) * rows))
    return own, np.maximum(worst - gemm_s(g, gpu, precision), 0.0)
