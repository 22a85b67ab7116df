"""llama.cpp's layer placement and the CUDA launch queue under its 2024 pipelining
(engines.llamacpp: `layer_split_counts`, `prompt_layer_ops`, `queued_makespan_s`), checked against
the XiongjieDai notebooks' logs and an operation-by-operation reference walk."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from shardwise.analyses.serving_pcie import LAYER_SCALING, llama_cpp_plan, stage_ops
from shardwise.engines.llamacpp import (
    LAUNCH_QUEUE_OPS,
    layer_split_counts,
    layer_split_prompt_s,
    prompt_layer_ops,
    queued_makespan_s,
)


def _walk(c: list[float], n: list[int], m: int, queue: int = LAUNCH_QUEUE_OPS, copies: int = 4) -> float:
    """Reference: the host queues every operation one by one, each when its stream holds fewer
    than `queue`, a stage's operations retiring evenly over its cost."""
    p = len(c)
    last, pending, end = [0.0] * p, [collections.deque() for _ in range(p)], {}
    h = 0.0
    for k in range(m):
        for j in range(p):
            if k >= copies:
                h = max(h, end[k - copies, j])
            for i in range(n[j]):
                q = pending[j]
                while q and q[0] <= h:
                    q.popleft()
                if len(q) >= queue:
                    h = q[len(q) - queue]
                start = max(last[j], h, end[k, j - 1] if (i == 0 and j) else 0.0)
                last[j] = start + c[j] / n[j]
                q.append(last[j])
            end[k, j] = last[j]
    return max(last)


def test_layer_split_counts_match_the_notebooks_kv_buffers():
    # Llama 3 8B, 32 MiB of KV cache a layer at n_ctx 8192 (XiongjieDai's ./main logs):
    # L40S_4 and A100_PCIe_4 288/256/256/224 MiB, 3090_6 192/160/192/160/192/128,
    # 4090_8 160/128 x6/96, 4090_2 544/480
    assert layer_split_counts(32, 4) == (9, 8, 7)
    assert layer_split_counts(32, 6) == (6, 6, 4)
    assert layer_split_counts(32, 8) == (5, 4, 3)
    assert layer_split_counts(32, 2) == (17, 0, 15)
    assert layer_split_counts(80, 4) == (21, 20, 19)
    assert layer_split_counts(32, 1) == (32, 0, 32)


def test_prompt_ops_count_the_cublas_path_of_each_product():
    # 7 weight products: input to FP16 and output to FP32 beside the GEMM, dequantisation when quantised
    assert prompt_layer_ops(False) == 43
    assert prompt_layer_ops(True) - prompt_layer_ops(False) == 7


@pytest.mark.parametrize(
    ("layers", "per_layer", "m"),
    [((21, 20, 20, 19), 50, 2), ((21, 20, 20, 19), 50, 8), ((41, 39), 50, 4), ((9, 8, 8, 7), 50, 8),
     ((11, 10, 10, 10, 10, 10, 10, 9), 50, 6), ((30, 30, 30), 40, 5)],
)  # fmt: skip
def test_queued_makespan_matches_the_operation_walk(layers, per_layer, m):
    c = [x / 80 for x in layers]
    n = [x * per_layer for x in layers]
    p = len(layers)
    middle = c[1] if p > 2 else 0.0
    got = queued_makespan_s((c[0], middle, c[-1]), (n[0], n[1] if p > 2 else 0, n[-1]), p, m)
    assert float(got) == pytest.approx(_walk(c, n, m), rel=1e-6)  # equal middle stages, as the engine takes them


def test_a_stage_over_the_queue_chains_the_micro_batches():
    c, p, n = 1.0, 4, 2 * LAUNCH_QUEUE_OPS
    # the host leaves each stage with half of it to run: micro-batch 2 starts 3.5 stages after micro-batch 1
    assert float(queued_makespan_s((c, c, c), (n, n, n), p, 2)) == pytest.approx(4 * c + 3.5 * c)
    # a queue without limit: micro-batch 2 one stage behind
    assert float(queued_makespan_s((c, c, c), (n, n, n), p, 2, queue_ops=1e12)) == pytest.approx(5 * c)
    # one GPU: one after the other, whatever the queue
    assert float(queued_makespan_s((c, c, c), (n, n, n), 1, 3)) == pytest.approx(3 * c)


def test_queued_makespan_broadcasts_like_its_scalar_calls():
    ops = (np.array([450.0, 1050.0, 2100.0]), 1000.0, 950.0)
    got = queued_makespan_s((0.3, 0.25, 0.2), ops, np.array([[4], [2]]), np.array([[2], [8]]))
    for i, p, m in ((0, 4, 2), (1, 2, 8)):
        for j in range(3):
            want = queued_makespan_s((0.3, 0.25, 0.2), (ops[0][j], 1000.0, 950.0), p, m)
            assert got[i, j] == pytest.approx(float(want))


def test_layer_split_prompt_uses_the_queue_only_when_given_operations():
    per_stage, c_sum = (1.0, 1.0, 1.0), 4.0
    plain = layer_split_prompt_s(per_stage, 2.0, 4, 2, "events")
    assert float(plain) == pytest.approx(c_sum + 1.0)
    queued = layer_split_prompt_s(per_stage, 2.0, 4, 2, "events", (2048, 2048, 2048))
    assert float(queued) == pytest.approx(7.5)


def test_a_pair_places_its_layers_as_llama_cpp_does():
    pair = next(p for p in LAYER_SCALING if p.key == "xdai-h100pcie-70b-q4_k_m-pp1024-4v1")
    plan = llama_cpp_plan(pair, 1, 4)
    assert (plan.first_stage_layers, plan.last_stage_layers) == (21, 19)
    assert stage_ops(pair, 4) == (1050, 1000, 950)
    assert llama_cpp_plan(pair, 1, 1).first_stage_layers == 0
