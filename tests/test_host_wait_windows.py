"""The host-bound wait in the data-parallel windows (`dp_step.backward_window_s`, `forward_window_s`,
`DpComm.zero3_phases`), checked against one GPU's timeline kernel by kernel: the host issues each
kernel after its own time, the compute stream runs it once issued and free, the collectives run on
their own stream. A gradient reduction launched in the backward hides behind what of the micro-batch
its forward's own time (after a host sync, its own wait for the host included) leaves, not behind
the whole wait booked in the backward; the gather after the optimizer keeps the whole wait."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from shardwise.engines.costs import StageCost
from shardwise.engines.dp_comm import DpComm, zero_stage_fields
from shardwise.engines.dp_step import backward_window_s, dp_comm, forward_window_s
from shardwise.engines.moe import stage_params
from shardwise.engines.simulated import simulate_training_step
from shardwise.engines.training import estimate_training_step
from shardwise.engines.training_stages import micro_batch_stages
from shardwise.physics.collectives import Fabric
from shardwise.physics.topology import placement
from shardwise.requests import TrainingRequest
from shardwise.specs import Scenario

US, MS = 1e-6, 1e-3
HOST_S = 10 * US  # the host's time per kernel
LAYERS = 16


def _timeline(gf: float, gb: float, kf: int, kb: int, m: int, zero: int, grad: float, gather: float) -> float:
    """One GPU's steady-state step (seconds) of LAYERS layers (forward `gf`, backward `gb` seconds
    of GPU time in `kf`, `kb` kernels each) over m micro-batches: the reduction one bucket per layer
    on the comm stream as each layer's backward ends (ZeRO-1: the last micro-batch; ZeRO-2: each),
    the compute stream and the host waiting for it at the backward's end (Megatron-Core's grad-norm
    `.item()`, DeepSpeed's `synchronize()`); the gather one bucket per layer after the optimizer,
    the stream waiting for each before its layer's first forward kernel (the host runs on)."""
    host = gpu = comm = 0.0
    ready = [0.0] * LAYERS
    ends = []
    for _ in range(3):
        begin = gpu
        for mb in range(m):
            for layer, k in itertools.product(range(LAYERS), range(kf)):
                host += HOST_S
                gpu = max(host, gpu, ready[layer] if mb == 0 and k == 0 else 0.0) + gf / kf
            reduce = zero == 2 or mb == m - 1
            for _layer in range(LAYERS):
                for _ in range(kb):
                    host += HOST_S
                    gpu = max(host, gpu) + gb / kb
                if reduce:
                    comm = max(comm, gpu) + grad / LAYERS
            if reduce:
                gpu = host = max(gpu, comm)
        comm = max(comm, gpu)
        for layer in range(LAYERS):
            comm += gather / LAYERS
            ready[layer] = comm
        ends.append(gpu - begin)
    return ends[-1]


def _closed_exposed(gf: float, gb: float, kf: int, kb: int, m: int, zero: int, grad: float, gather: float) -> float:
    """The closed form's exposed seconds of the same stage (`DpComm.exposed_s`, no contention)."""
    wait = LAYERS * max(0.0, (kf + kb) * HOST_S - gf - gb)
    own_forward = LAYERS * max(0.0, kf * HOST_S - gf)
    cost = StageCost(LAYERS * gf, LAYERS * gb + wait, 0.0, 0.0, host_wait_s=wait, forward_host_wait_s=own_forward)
    reduction = grad if zero == 1 else m * grad
    prices = {
        "reduce_scatter": grad,
        "bucket_reduce_scatter": grad / LAYERS,
        "all_gather": gather,
        "bucket_all_gather": gather / LAYERS,
    }
    fields = zero_stage_fields(zero, prices, backward_window_s(cost), forward_window_s(cost), 0.0, m, True)
    comm = DpComm(*fields, per_chunk=zero <= 1, host_wait_s=m * wait)
    assert float(comm.grad_s) == pytest.approx(reduction)
    return float(sum(comm.exposed_s(True)))


# a layer's GPU seconds and kernels, forward and backward (llama3.2-1b at 256 tokens, eager)
CASES = {
    "forward host-bound, backward not": (186.67 * US, 640.65 * US, 32, 64),
    "both host-bound": (160.96 * US, 576.45 * US, 32, 64),
    "backward host-bound, forward not": (400 * US, 500 * US, 32, 64),
    "neither": (400 * US, 900 * US, 32, 64),
}


def _exposed(case: str, m: int, zero: int, grad: float, gather: float) -> tuple[float, float]:
    """(the timeline's exposed seconds, the closed form's) of one case."""
    gf, gb, kf, kb = CASES[case]
    exposed = _timeline(gf, gb, kf, kb, m, zero, grad, gather) - _timeline(gf, gb, kf, kb, m, zero, 0.0, 0.0)
    return exposed, _closed_exposed(gf, gb, kf, kb, m, zero, grad, gather)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("zero,m", [(1, 1), (1, 4), (2, 1), (2, 4)])
def test_the_reduction_s_window_matches_one_gpu_s_timeline(case, zero, m):
    """The closed form's exposed reduction against the timeline's, within what the timeline's
    coarser buckets add (a bucket and a layer's backward per reduction: the first bucket waits for
    a whole layer's gradients). With the whole wait in the reduction's window, as until 2026-12,
    the forward-bound case (its wait falls in the forward, which the reduction never overlaps)
    exposed 1.63 ms of ZeRO-1's 14 ms reduction against the timeline's 4.39 ms (now 3.76 ms), and
    6.51 ms of ZeRO-2's 4 x 14 ms against 17.56 ms (now 15.04 ms)."""
    _, gb, _, kb = CASES[case]
    for grad_ms in (8, 12, 14, 20):
        exposed, closed = _exposed(case, m, zero, grad_ms * MS, 0.0)
        reductions = 1 if zero == 1 else m
        slack = reductions * (grad_ms * MS / LAYERS + max(gb, kb * HOST_S))
        assert abs(exposed - closed) <= slack, (case, zero, m, grad_ms, exposed, closed)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("m", [1, 4])
def test_the_gather_s_window_holds_the_whole_wait(case, m):
    """ZeRO-1/2's gather after the optimizer: the stream waits for it, the host runs on, and the GPU
    catches up through the idle that follows, its own forward's and its backward's (the whole
    wait, `forward_window_s`): the timeline's within a bucket and a layer's forward at one
    micro-batch. With more, the GPU catches up through the later micro-batches' waits too (the
    launch queue allowing): the closed form, one micro-batch's, stays above the timeline."""
    gf, _, kf, _ = CASES[case]
    for gather_ms in (4, 6, 8, 10):
        exposed, closed = _exposed(case, m, 1, 0.0, gather_ms * MS)
        slack = gather_ms * MS / LAYERS + max(gf, kf * HOST_S)
        assert exposed - slack <= closed, (case, m, gather_ms, exposed, closed)
        if m == 1:
            assert closed <= exposed + slack, (case, m, gather_ms, exposed, closed)


# the worked example: a small model at 256 tokens a micro-batch under eager FSDP (forward host-bound,
# its backward not), dp 8 over a slow link so the reduction shows
WORKED = {
    "model": "llama3.2-1b",
    "seq_len": 256,
    "system": "dgx-h100",
    "nodes": 1,
    "dp": 8,
    "micro_batch": 1,
    "global_batch": 16,
    "framework": "fsdp",
    "intra_link": "100GB/s",
}


def _stage(zero: int) -> tuple[StageCost, DpComm]:
    """The worked example's first stage (its only one) and its data-parallel communication."""
    scn = TrainingRequest(**WORKED, zero=zero).scenario()
    (first, _, _, _), _ = micro_batch_stages(scn)
    fabric, plan = Fabric.of(scn.cluster), scn.plan
    params = stage_params(scn.model, plan, scn.split)[0]
    return first, dp_comm(scn, fabric, placement(plan, scn.cluster.gpus_per_node), params, first, 2)


@pytest.mark.parametrize("zero", [0, 1, 2])
def test_the_reduction_window_leaves_out_the_forward_s_own_wait(zero):
    """16 layers, each forward 32 kernels at 10 us against 186.7 us of GPU time: 133.3 us of it the
    forward's own wait, 2.13 ms a micro-batch, which the backward's window leaves out (the step books
    the layer's one wait, 132.7 us, in the backward). The gather after the optimizer keeps it all."""
    cost, comm = _stage(zero)
    own = float(cost.forward_host_wait_s)
    assert own == pytest.approx(LAYERS * (32 * HOST_S - 186.67e-6), rel=1e-3)
    assert float(cost.host_wait_s) > 0
    backward = float(cost.compute_backward_s + cost.tp_backward_s)
    per_step = 1 if zero <= 1 else 2
    assert float(comm.grad_window_s) == pytest.approx(per_step * (backward - own))
    if zero:
        assert float(comm.gather_window_s) == pytest.approx(float(forward_window_s(cost)))


@pytest.mark.parametrize("zero", [1, 2])
def test_closed_form_and_simulator_agree_on_the_worked_example(zero):
    scn = TrainingRequest(**WORKED, zero=zero).scenario()
    closed = estimate_training_step(scn)
    simulated = simulate_training_step(scn).estimate
    assert float(simulated.step_time_s) == pytest.approx(float(closed.step_time_s), rel=1e-9)
    assert float(simulated.breakdown.dp_comm_s) == pytest.approx(float(closed.breakdown.dp_comm_s), rel=1e-9)


@pytest.mark.parametrize("zero", [1, 2])
@pytest.mark.parametrize("field", ["peak_flops_per_s_16bit", "memory_bandwidth_bytes_per_s"])
def test_a_faster_gpu_never_slows_the_worked_example(zero, field):
    """The window is the micro-batch's time less the forward's own: a faster GPU shortens it by
    at most what it takes off the micro-batch."""
    scn = TrainingRequest(**WORKED, zero=zero).scenario()
    gpu, times = scn.cluster.gpu, []
    for f in (1.0, 1.2, 1.5, 2.0, 3.0, 5.0):
        cluster = scn.cluster.with_(gpu=gpu.with_(**{field: getattr(gpu, field) * f}))
        times.append(float(estimate_training_step(Scenario(scn.model, cluster, scn.plan)).step_time_s))
    assert all(b <= a * (1 + 1e-12) for a, b in itertools.pairwise(times))


def test_zero3_s_windows_together_are_the_stage_s_time_once():
    """ZeRO-3: the forward passes' gathers run through what the backward passes' collectives leave
    of the wait (`DpComm.zero3_phases`), never more: the compute and the wait they hide behind add
    up to the stage's time over the micro-batches, counted once."""
    cost, comm = _stage(3)
    m = 2
    forward_excess, backward_comm, backward_window = (float(np.asarray(x)) for x in comm.zero3_phases())
    forward_gathers = 0.5 * float(comm.gather_s)
    forward_window = m * float(cost.total_s - cost.backward_s)
    spare = forward_gathers - forward_window - forward_excess  # the wait the forward gathers ran through
    assert forward_excess > 0 and 0.0 <= spare <= m * float(cost.host_wait_s) + 1e-15
    hidden = (forward_gathers - forward_excess) + min(backward_comm, backward_window - spare)
    assert hidden <= m * float(cost.total_s) * (1 + 1e-12)
    assert backward_window == pytest.approx(m * float(cost.backward_s))
