"""The cases the invariant sweeps (tests/test_invariants*.py) found breaking a property, pinned as
regular tests after their fix: each the request that showed it."""

from __future__ import annotations

import numpy as np

from shardwise.engines.training import estimate_training_step
from shardwise.requests import TrainingRequest
from shardwise.specs import Scenario


def _steps(fields: dict, gpu_field: str, factors: tuple[float, ...]) -> list[float]:
    """Step times with the GPU's `gpu_field` multiplied by each factor."""
    scn = TrainingRequest(**fields).scenario()
    gpu = scn.cluster.gpu
    out = []
    for f in factors:
        cluster = scn.cluster.with_(gpu=gpu.with_(**{gpu_field: getattr(gpu, gpu_field) * f}))
        out.append(float(estimate_training_step(Scenario(scn.model, cluster, scn.plan)).step_time_s))
    return out


def _never_rise(times: list[float]) -> bool:
    return all(b <= a * (1 + 1e-12) for a, b in zip(times, times[1:]))


# host-bound stacks (host time per kernel): the wait was all put in the backward pass, so a faster
# GPU shortened the forward that ZeRO's gathers hide behind while the layer's time did not fall
HOST_BOUND_ZERO2 = {
    "model": "deepseek-v2-lite",
    "system": "dgx-h100",
    "nodes": 1,
    "cp": 2,
    "global_batch": 8,
    "zero": 2,
    "framework": "torchtitan",
    "precision": "fp16",
    "flash_attention": True,
    "tp_comm_overlap": True,
}
HOST_BOUND_ZERO1 = {
    "model": "deepseek-v2-lite",
    "system": "mi300x-8x",
    "nodes": 2,
    "cp": 2,
    "global_batch": 48,
    "micro_batch": 2,
    "zero": 1,
    "framework": "fsdp2",
}
HOST_BOUND_INTERNEVO = {
    "model": "qwen3-30b-a3b",
    "seq_len": 4096,
    "system": "dgx-h100",
    "nodes": 1,
    "expert_imbalance": 1.3,
    "global_batch": 16,
    "framework": "internevo",
    "tp_comm_overlap": True,
    "optimizer_state": "fp32-bf16-moments",
}


def test_shorter_kernel_launches_never_slow_a_host_bound_step():
    """Was 0.8629 s -> 0.8646 s with launches a third as long (ZeRO-2's exposure rose 3 ms)."""
    assert _never_rise(_steps(HOST_BOUND_ZERO2, "kernel_launch_s", (1.0, 0.8, 0.5, 1 / 3, 0.1, 0.0)))


def test_a_faster_gpu_never_slows_a_host_bound_step():
    """Was 1.2365 s -> 1.2376 s at twice the peak (ZeRO-1's gather behind the forward) and
    2.767 s -> 2.786 s (internevo, 64 experts)."""
    assert _never_rise(_steps(HOST_BOUND_ZERO1, "peak_flops_per_s_16bit", (1.0, 1.1, 1.5, 2.0, 4.0)))
    assert _never_rise(_steps(HOST_BOUND_INTERNEVO, "peak_flops_per_s_16bit", (1.0, 1.5, 2.0, 3.0)))


def test_the_host_wait_stretches_both_passes_alike():
    """A host-bound layer's wait is split between its passes in the shares of their GPU time
    (`engines.costs.pass_shares`): the whole is the layer's, each pass keeps its share."""
    from shardwise.engines.costs import pass_shares

    forward, backward = pass_shares(np.array([0.0, 3.0, 3.0]), np.array([1.0, 1.0, 0.0]), np.array([3.0, 3.0, 0.0]))
    np.testing.assert_allclose(forward, [0.0, 1.0, 0.0])
    np.testing.assert_allclose(forward + backward, [0.0, 3.0, 3.0])
