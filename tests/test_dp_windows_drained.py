"""Review 44's leftover 4: where a pipeline's passes drain (Megatron-LM's blocking sends end in
`torch.cuda.synchronize()`, which waits for the data-parallel streams too), a data-parallel
collective hides behind the pass it runs beside alone: each window holds that pass's own host-bound
wait, not the other pass's (`engines.dp_windows`). Before, the backward window added the forward's
wait and the forward window the backward's. The pass's own wait stays in its window: the GPU idles
through it, and the collective's kernel, enqueued before it, runs (review 44 asked for compute alone)."""

from __future__ import annotations

import itertools

import pytest

from shardwise.engines.dp_windows import backward_window_s, forward_window_s
from shardwise.engines.training import estimate_training_step
from shardwise.engines.training_stages import micro_batch_stages
from shardwise.physics.host_passes import drained_passes
from shardwise.requests import TrainingRequest
from shardwise.specs import Scenario

# small layers, pp 2 over two servers: host-bound in both passes, each pass ending in a device sync
DRAINED = {
    "layers": 8,
    "hidden": 512,
    "heads": 4,
    "vocab": 32000,
    "seq_len": 512,
    "family": "llama",
    "system": "dgx-h100",
    "nodes": 2,
    "pp": 2,
    "global_batch": 64,
    "micro_batch": 1,
    "zero": 1,
    "framework": "megatron-core",
}


def _first_stage(**changes):
    scn = TrainingRequest(**(DRAINED | changes)).scenario()
    (first, _, _, _), _ = micro_batch_stages(scn)
    return scn, first


def test_each_window_holds_its_own_pass_where_passes_drain():
    scn, cost = _first_stage()
    drained = bool(drained_passes(scn.plan))
    forward_wait, backward_wait = float(cost.host_wait_forward_s), float(cost.host_wait_s - cost.host_wait_forward_s)
    assert drained and forward_wait > 0 and backward_wait > 0  # both passes host-bound
    # before: + the forward's wait (backward) and + the backward's (forward)
    assert float(backward_window_s(cost)) == pytest.approx(float(cost.compute_backward_s + cost.tp_backward_s))
    assert float(forward_window_s(cost, drained)) == pytest.approx(float(cost.compute_forward_s + cost.tp_forward_s))
    # each still holds its own pass's wait: compute_*_s carries it
    assert float(forward_window_s(cost, drained)) >= forward_wait


def test_elsewhere_the_forward_window_holds_the_whole_wait():
    scn, cost = _first_stage(framework="torchtitan")  # no device sync between passes
    assert not bool(drained_passes(scn.plan)) and float(cost.host_wait_s) > 0 and float(cost.host_wait_forward_s) == 0
    whole = cost.compute_forward_s + cost.tp_forward_s + cost.host_wait_s
    assert float(forward_window_s(cost, drained_passes(scn.plan))) == pytest.approx(float(whole))


@pytest.mark.parametrize(("zero", "hidden", "seq_len"), [(0, 512, 512), (1, 512, 512), (1, 2048, 128)])
def test_a_faster_gpu_or_host_never_slows_a_drained_step(zero, hidden, seq_len):
    scn = TrainingRequest(**(DRAINED | {"zero": zero, "hidden": hidden, "seq_len": seq_len})).scenario()
    gpu = scn.cluster.gpu
    for field, factors in (("peak_flops_per_s_16bit", (1.0, 1.5, 2.0, 4.0)), ("kernel_launch_s", (1.0, 0.5, 0.0))):
        times = []
        for f in factors:
            cluster = scn.cluster.with_(gpu=gpu.with_(**{field: getattr(gpu, field) * f}))
            times.append(float(estimate_training_step(Scenario(scn.model, cluster, scn.plan)).step_time_s))
        assert all(b <= a * (1 + 1e-12) for a, b in itertools.pairwise(times)), (field, times)
