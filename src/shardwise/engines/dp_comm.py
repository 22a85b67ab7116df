"""One stage's data-parallel communication (`DpComm`: the gradient reduction and ZeRO's gathers,
with the compute each may hide behind) and what of it stays exposed; its fields for each ZeRO
stage; and the same priced run by run over a distinct plan's rows, which come grouped by ZeRO
stage (`specs.distinct`): each run with its stage's branch alone. `engines.data_parallel` prices
the collectives, `engines.dp_step` composes the stages.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace

import numpy as np

from shardwise.arrays import as_bool, as_float, ifelse, maximum, minimum, one_value
from shardwise.engines.tp_overlap import NCCL_OVERLAP_SMS
from shardwise.specs._checks import Number
from shardwise.specs.distinct import MIN_CONFIGURATIONS
from shardwise.specs.memo import kept


@dataclass(frozen=True)
class DpComm:
    """One stage's data-parallel communication per step (seconds) and what it may hide behind.

    `grad_s`: gradient all-reduce (ZeRO-0) or reduce-scatter (ZeRO >= 1; ZeRO-2/3 one per
    micro-batch), `grad_window_s` the backward compute it overlaps when bucketed, `grad_bucket_s`
    the last bucket's share (never hidden); `gather_s`: the parameter all-gather (ZeRO-1/2 after
    the optimizer; ZeRO-3 before every forward and backward), `gather_window_s` what it may hide
    behind (ZeRO-1/2 with overlap_param_gather: the next step's first forward; ZeRO-3: all
    compute), `gather_bucket_s` the first bucket's share (needed at once).
    """

    grad_s: Number
    grad_window_s: Number
    grad_bucket_s: Number
    gather_s: Number
    gather_window_s: Number
    gather_bucket_s: Number
    # ZeRO-3 under a deferred gradient sync: the backward compute of the micro-batches before the
    # last, which the reductions cannot use (`zero3_phases`); 0 where they reduce every micro-batch
    early_window_s: Number = 0.0
    shared_window: Number = False  # ZeRO-3: gathers and reductions overlap the same compute
    # ZeRO-0/1: one reduction (and gather) per step, per model chunk (see `exposed_s`)
    per_chunk: Number = False
    # the share of the GPU's SMs NCCL's kernels hold while a hidden collective runs: the compute
    # beside it slows by that share of the collective's time (`tp_overlap.overlapped_exposed_s`)
    contention: Number = 0.0
    # the host-bound wait inside `grad_window_s` (`costs.StageCost.host_wait_s`, all micro-batches):
    # idle GPU time of either pass, booked in the backward; ZeRO-3's forward gathers may run
    # through what the backward's collectives leave of it (`zero3_phases`)
    host_wait_s: Number = 0.0

    @property
    def total_s(self) -> Number:
        return self.grad_s + self.gather_s

    def plus(self, other: DpComm) -> DpComm:
        """Two groups' communication over the same windows, one after the other (the dense
        parameters' and the routed experts'): their times and unhideable buckets add."""
        return replace(
            self,
            grad_s=self.grad_s + other.grad_s,
            grad_bucket_s=self.grad_bucket_s + other.grad_bucket_s,
            gather_s=self.gather_s + other.gather_s,
            gather_bucket_s=self.gather_bucket_s + other.gather_bucket_s,
        )

    def exposed_s(
        self,
        overlap_grad: Number,
        drain_s: Number = 0.0,
        chunks: Number = 1,
        rounds: Number = 1,
        head: Number | None = None,
        aligned: Number = True,
    ) -> tuple[Number, Number]:
        """(exposed gradient part, exposed gather part): each is what its window does not
        cover, and at least its unhideable bucket. ZeRO-3 (`shared_window`): the reductions
        hide behind the backward passes the gathers also use; both share the compute, so what
        exceeds it (or the unhideable buckets) is exposed. A scalar ZeRO stage or overlap flag
        prices only its own branch (the same numbers as selecting among all of them).

        The interleaved schedule (`chunks` = v model chunks per GPU, `rounds` = p micro-batches
        per chunk in the last round of backward passes; Megatron-Core core_v0.14.0): each chunk
        is its own DDP wrapper and reduces its gradients once its last backward pass is done, and
        the last round runs chunk v-1's p backward passes first, chunk 0's last, so chunk v-1's
        reduction has (v-1) p chunk-backward passes to hide behind. Chunk 0's waits whole:
        `align_grad_reduce` (Megatron-LM's default, Megatron-Bridge's DistributedInitConfig)
        makes schedules.py launch each chunk's whole `start_grad_sync` pp-rank virtual
        micro-batches after its last backward (backward_step_helper_postprocess; chunk 0's, the
        last, on pp rank 0 in that call right after its last backward, on later ranks, whose
        launch falls past the loop, after it: "Launch any remaining grad reductions"), with no
        compute left beside it (NeMo 2 never sets align_grad_reduce: docs/model.md); and
        `align_param_gather` (on with vp > 1 in Megatron-LM, NeMo's MegatronCommOverlapCallback
        and Megatron-Bridge's comm_overlap.py) dispatches chunks 0 and 1's all-gathers together
        before the first forward, every bucket of chunk 0 at once in bucket order, and the
        forward pre-hook of chunk 0's first layer waits for its bucket, the last of them
        (distributed_data_parallel.py `start_param_sync`, `_make_forward_pre_hook`; buckets only
        on chunk 0 of the first stage: `disable_bucketing` for chunks > 0 in
        megatron/training/training.py, `bucket_size = None` where pp_rank > 0).
        So the unhideable part is chunk 0's whole collective, `head` of the bytes (default 1/v;
        the first stage's chunk 0 also holds the embedding, `dp_step.chunk_head_shares`), or the
        last bucket where that is larger as priced. Without `aligned` (`Plan.aligned_chunk_sync`:
        stacks whose data parallelism is not Megatron-Core's DDP, whose dispatch was not read),
        chunk 0's 1/v hides behind its one chunk-backward pass (and the drain), the last bucket
        exposed. With v = 1 all of it reduces to the single window and the bucket."""
        overlap = as_bool(overlap_grad)
        z3 = as_bool(self.shared_window)
        if one_value(z3) and bool(z3):
            return self._shared_s(overlap, drain_s), 0.0
        grad = self._grad_s(overlap, drain_s, chunks, rounds, head, aligned)
        gather = self._gather_s(chunks, rounds, head, aligned)
        if one_value(z3):
            return grad, gather
        return np.where(z3, self._shared_s(overlap, drain_s), grad), np.where(z3, 0.0, gather)

    def _hidden_beside(
        self,
        total_s: Number,
        window_s: Number,
        bucket_s: Number,
        drain_s: Number,
        chunks: Number,
        rounds: Number,
        head: Number | None = None,
        aligned: Number = True,
    ) -> Number:
        """What of a collective of `total_s` stays exposed beside its compute `window_s` (+ the
        drain): per chunk where it is (see `exposed_s`), at least its unhideable part (the
        bucket; interleaved, chunk 0's whole share `head`) and the compute NCCL's SMs take while
        the rest hides (not `aligned`: chunk 0's 1/v behind its one chunk-pass); with no window, all
        of it."""
        v = ifelse(as_bool(self.per_chunk), as_float(chunks), 1.0)
        one = window_s / v  # one chunk's pass of the micro-batch
        whole = one * (1.0 + (v - 1.0) * as_float(rounds)) + drain_s
        share = 1.0 / v if head is None else ifelse(v > 1.0, head, 1.0)
        aligned = as_bool(aligned) & (v > 1.0)
        unhidden = ifelse(aligned, maximum(bucket_s, total_s * share), bucket_s)  # chunk 0's, whole
        floor = ifelse(whole > 0, unhideable_s(unhidden, total_s, self.contention), total_s)
        late = ifelse(aligned, 0.0, total_s / v - (one + drain_s))  # chunk 0's 1/v behind one chunk-pass
        return minimum(maximum(maximum(total_s - whole, late), floor), total_s)

    def _grad_s(
        self,
        overlap: np.ndarray,
        drain_s: Number,
        chunks: Number = 1,
        rounds: Number = 1,
        head: Number | None = None,
        aligned: Number = True,
    ) -> Number:
        if one_value(overlap) and not bool(overlap):  # no window: the whole reduction
            return self.grad_s
        window = ifelse(overlap, self.grad_window_s, 0.0)
        drain = ifelse(overlap, drain_s, 0.0)
        return self._hidden_beside(self.grad_s, window, self.grad_bucket_s, drain, chunks, rounds, head, aligned)

    def _gather_s(
        self, chunks: Number = 1, rounds: Number = 1, head: Number | None = None, aligned: Number = True
    ) -> Number:
        window = self.gather_window_s
        if one_value(window) and not window:  # no window: the whole gather
            return self.gather_s
        return self._hidden_beside(self.gather_s, window, self.gather_bucket_s, 0.0, chunks, rounds, head, aligned)

    def zero3_phases(self) -> tuple[Number, Number, Number]:
        """ZeRO-3's communication split at the end of the backward pass: (what of the forward
        passes' gathers their compute leaves exposed, the backward passes' gathers and reductions,
        the backward compute they hide behind). A reduction can start only once its unit's
        gradient is computed, and the step waits for every one before the optimizer: FSDP1's
        `_post_backward_final_callback` makes the compute stream wait for the post-backward (and,
        under HYBRID_SHARD, the all-reduce) stream (torch/distributed/fsdp/_runtime_utils.py,
        2.1 to 2.5), FSDP2's `FSDPState._root_post_backward_final_callback` waits for the last
        reduce-scatter; so the reductions hide behind the backward compute alone, never behind a
        forward pass, whose compute hides only its own gathers (the first half of `gather_s`: one
        gather per unit in each pass). Pooled with all the compute, a hybrid-sharded step's
        replicas' all-reduce across servers, much larger than its gathers inside a server, hid
        behind the forward too.

        A host-bound layer's wait (`host_wait_s`) is idle GPU time of both passes that the model
        books in the backward: the forward gathers run through what the backward's collectives
        leave of it (without that, a faster GPU shortened the forward window while the wait grew
        in the backward, and the step rose: tests/test_invariants.py).

        Under FSDP2's deferred gradient sync (`early_window_s` > 0: `dp_step.reduce_micro_batches` 1
        of m) the one reduction starts in the last micro-batch's backward: torch's
        `FSDPParamGroup.post_backward` returns before `foreach_reduce` while `reduce_grads` is off
        (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py), so the earlier backward passes hide
        only their own gathers (the backward gathers spread evenly over the m passes), and what they
        leave idle is lost to the reduction: added to the backward's collectives, so that the excess
        over the m passes is that of the last pass alone (the simulator hides the same sum behind
        the earlier passes, then the rest behind the last one's)."""
        forward_gathers = 0.5 * self.gather_s
        forward_window = maximum(self.gather_window_s - self.grad_window_s, 0.0)  # the compute beside the backward
        backward_gathers = self.gather_s - forward_gathers
        backward_s = self.grad_s + backward_gathers
        spare_wait = minimum(self.host_wait_s, maximum(self.grad_window_s - backward_s, 0.0))
        forward_excess = maximum(forward_gathers - forward_window - spare_wait, 0.0)
        early = self.early_window_s
        if one_value(early) and not np.any(early):
            return forward_excess, backward_s, self.grad_window_s
        early_share = ifelse(as_float(self.grad_window_s) > 0, early / maximum(self.grad_window_s, 1e-30), 0.0)
        lost = maximum(early - early_share * backward_gathers, 0.0)  # the early passes' idle compute
        return forward_excess, backward_s + lost, self.grad_window_s

    def _shared_s(self, overlap: np.ndarray, drain_s: Number) -> Number:
        both = self.grad_s + self.gather_s
        forward_excess, backward_s, backward_window = self.zero3_phases()
        backward_window = backward_window + ifelse(overlap, drain_s, 0.0)
        excess = forward_excess + maximum(backward_s - backward_window, 0.0)
        buckets = ifelse(overlap, self.grad_bucket_s, self.grad_s) + self.gather_bucket_s
        return minimum(both, maximum(excess, unhideable_s(buckets, both, self.contention)))


def zero_stage_fields(
    k: int,
    prices: Mapping[str, Number],
    backward: Number,
    forward: Number,
    total: Number,
    m: Number,
    overlap_param_gather: Number,
    grad_all_reduce: Number = False,
    reduce_m: Number | None = None,
) -> tuple[Number, ...]:
    """DpComm's fields for ZeRO stage k (`dp_step.dp_comm`) from the prices of its
    collectives and the stage's backward, forward and total seconds per micro-batch. `m`: the
    micro-batches whose collectives run; `reduce_m` (default `m`): those whose ZeRO-2/3 reductions
    run (`dp_step.reduce_micro_batches`: 1 where FSDP2 defers its gradient sync, each reduction then
    beside the last micro-batch's backward; ZeRO-3's backward gathers keep the m backward passes, its
    reductions the last alone: the 7th field, `DpComm.early_window_s`).

    `grad_all_reduce` (`Plan.zero1_grad_all_reduce`): ZeRO-1's gradients all-reduced whole after
    the backward passes, with nothing to hide behind: nanotron wraps no DDP when it accumulates in
    fp32 under ZeRO (huggingface/nanotron src/nanotron/trainer.py `init_model`: make_ddp = dp > 1
    and not (accumulate_grad_in_fp32 and zero_stage > 0)), so no hook reduces during the backward;
    `training_step` then calls `sync_gradients_across_dp(..., reduce_scatter=False)` ("too memory
    hungry, instead we run all_reduce"), which is `FP32GradientAccumulator.sync_gradients_across_dp`:
    one `dist.all_reduce` of the contiguous fp32 gradient buffer (optim/gradient_accumulator.py),
    the same at 0e0a27ea (2025-02) and on the nouamane/bench2 branch (2024-12)."""
    price = prices.__getitem__
    if k == 0:
        return price("all_reduce"), backward, price("bucket_all_reduce"), 0.0, 0.0, price("bucket_all_gather"), 0.0
    after_optimizer = ifelse(as_bool(overlap_param_gather), forward, 0.0)  # ZeRO-1/2's gather behind the next forward
    per_step = k == 1  # ZeRO-1 reduces once per step, ZeRO-2/3 once per micro-batch
    reduction = price("layer_reduce_scatter" if k == 3 else "reduce_scatter")  # ZeRO-3: one per layer
    rm = m if reduce_m is None else reduce_m
    grad = reduction if per_step else rm * reduction
    window = backward if per_step else (m if k == 3 else rm) * backward
    bucket = price("unit_reduce_scatter" if k == 3 else "bucket_reduce_scatter")
    whole = as_bool(grad_all_reduce)
    if per_step and not (one_value(whole) and not bool(whole)):  # the whole all-reduce, its own last bucket
        grad = ifelse(whole, price("all_reduce"), grad)
        window, bucket = ifelse(whole, 0.0, window), ifelse(whole, grad, bucket)
    if k < 3:
        return (
            grad,
            window,
            bucket,
            price("all_gather"),
            after_optimizer,
            price("bucket_all_gather"),
            0.0,
        )
    # ZeRO-3: two gathers per micro-batch, layer by layer (`data_parallel.collective_prices`),
    # prefetched behind all the compute but the first of each forward and backward pass
    gathers = 2 * m * price("layer_all_gather"), m * total, 2 * m * price("bucket_weights_all_gather")
    early = maximum(m - rm, 0.0) * backward  # a deferred sync: the passes before the reduction (`zero3_phases`)
    return grad, window, price("unit_reduce_scatter"), *gathers, early


def unhideable_s(bucket_s: Number, total_s: Number, contention: Number) -> Number:
    """What of a collective of `total_s` stays exposed however long the compute beside it: its
    unhideable bucket (`bucket_s`: the first gather before any compute, the last reduction after
    it), which runs with nothing beside it, plus the compute NCCL's SMs take (`contention`, a
    share) while the rest runs hidden. The two add: the bucket's time is serial, the contention
    slows the compute that hides the rest (before, the larger of the two was taken, which under
    FSDP2's whole-layer units (`physics.fsdp2`) hid the units behind the contention)."""
    return bucket_s + contention * maximum(total_s - bucket_s, 0.0)


@kept
def contention_share(sm_count: Number, comm_sms: Number = NCCL_OVERLAP_SMS) -> Number:
    """The share of the GPU's SMs NCCL's (RCCL's) kernels hold while a hidden collective runs:
    `comm_sms` of `sm_count` (`engines.tp_overlap.collective_sms`)."""
    sms = as_float(sm_count)
    return ifelse(sms > 0, as_float(comm_sms) / maximum(sms, 1.0), 0.0)


# At most this many runs of one ZeRO stage are priced run by run (`exposed_by_runs`).
MOST_RUNS = 8


def zero_stage_runs(zero_stage: Number) -> list[tuple[int, int, int]] | None:
    """(ZeRO stage, first row, end row) of each run of equal stages in a flat array of at least
    MIN_CONFIGURATIONS, when there are at most MOST_RUNS runs (a distinct plan's rows come
    grouped by ZeRO stage, `specs.distinct`), else None."""
    z = zero_stage
    if type(z) is not np.ndarray or z.ndim != 1 or z.size < MIN_CONFIGURATIONS:
        return None
    edges = np.flatnonzero(z[1:] != z[:-1]) + 1
    if edges.size >= MOST_RUNS:
        return None
    bounds = [0, *edges.tolist(), z.size]
    return [(int(z[lo]), lo, hi) for lo, hi in itertools.pairwise(bounds)]


def exposed_by_runs(
    runs: list[tuple[int, int, int]], prices: Mapping[str, Number], values: tuple[Number, ...], contention: Number
) -> tuple[np.ndarray, np.ndarray] | None:
    """(exposed, total) seconds of one stage's dense data-parallel communication (`dp_comm`, then
    `DpComm.exposed_s`), each run of one ZeRO stage priced with that stage's branch alone over
    slices (views) of the arrays, and the runs joined: the numbers of pricing every stage and
    choosing (a test compares), at a quarter of the passes. None where an array is not one value
    per row (a broadcast grid): priced as usual."""
    n = runs[-1][2]
    rows = getattr(prices, "rows", None)  # prices gathered when read (`engines.distinct.Gathered`): by slices
    arrays = [x for x in (*(() if rows else prices.values()), *values) if type(x) is np.ndarray and x.ndim > 0]
    if any(x.shape != (n,) for x in arrays) or (rows and getattr(prices, "_shape", None) != (n,)):
        return None
    exposed, totals = [], []
    for k, lo, hi in runs:

        def cut(x: Number, lo: int = lo, hi: int = hi) -> Number:
            return x[lo:hi] if type(x) is np.ndarray and x.ndim > 0 else x

        backward, forward, total, m, overlap_gather, overlap_grad, drain, v, rounds, whole, backward3, wait = (
            cut(x) for x in values[:12]
        )
        head, aligned, reduce_m = cut(values[12]), cut(values[13]), cut(values[14])
        part: Mapping[str, Number] = _RunPrices(rows, lo, hi) if rows else {name: cut(x) for name, x in prices.items()}
        window = backward3 if k == 3 else backward
        fields = zero_stage_fields(k, part, window, forward, total, m, overlap_gather, whole, reduce_m)
        comm = DpComm(*fields, shared_window=k == 3, per_chunk=k <= 1, contention=contention, host_wait_s=wait)
        grad, gather = comm.exposed_s(overlap_grad, drain, v, rounds, head, aligned)
        exposed.append(np.broadcast_to(grad + gather, (hi - lo,)))
        totals.append(np.broadcast_to(comm.total_s, (hi - lo,)))
    return np.concatenate(exposed), np.concatenate(totals)


class _RunPrices(Mapping[str, Number]):
    """One run's prices, each gathered for its rows when its ZeRO stage reads it."""

    def __init__(self, rows: Callable[[str, int, int], Number], lo: int, hi: int) -> None:
        self._rows, self._lo, self._hi = rows, lo, hi

    def __getitem__(self, name: str) -> Number:
        return self._rows(name, self._lo, self._hi)

    def __iter__(self) -> Iterator[str]:
        raise NotImplementedError  # read by name only

    def __len__(self) -> int:
        raise NotImplementedError
