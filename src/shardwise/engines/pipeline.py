"""The pipeline's makespan in closed form, shared by the training, forward and serving engines.

With c_j one micro-batch's work on stage j (forward + backward + blocking sends in training; the
forward in inference), m micro-batches and v model chunks per GPU (Narayanan et al. 2021 Sec.
2.2): T = m max_j c_j + (sum_j c_j - max_j c_j) / v: exact for equal stages only. With unequal
stages the training engine prices non-interleaved 1F1B (v = 1) by its exact recurrence instead
(`engines.pipeline_1f1b`; docs/model.md) and GPipe by its exact makespan, `gpipe_makespan_s`, where
no stage is the slowest in both passes (`engines.pipeline_uneven`); for interleaved and zero-bubble
schedules it is an approximation (`plan` re-times its top plans with the simulator). Serving
engines that prepare every micro-batch on the host add their host time to that
(`pipelined_round_s`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from shardwise.arrays import where
from shardwise.specs._checks import Number

if TYPE_CHECKING:
    from shardwise.engines.engine_presets import EnginePreset


def pipeline_makespan_s(
    c_first: Number,
    c_middle: Number,
    c_last: Number,
    pp: Number,
    micro_batches: Number,
    vpp: Number = 1,
    c_middle_sum: Number | None = None,
    flushes: Number = 1,
) -> Number:
    """T = m max_j c_j + F (sum_j c_j - max_j c_j) / v for stages first, middle ones, last, the
    m micro-batches run as F schedules of m / F each (`Plan.pipeline_flushes`), each its own fill
    and drain.

    c_j is one micro-batch's forward + backward (+ sends) on stage j; `c_middle` is the slowest
    middle stage and `c_middle_sum` all middle stages together (default (p - 2) c_middle, equal
    stages). Equal stages give (m + (p - 1)/v) c: the bubble (p - 1)/m of GPipe and 1F1B
    (Narayanan et al. 2021 Sec. 2.2), divided by v with v model chunks per GPU (Sec. 2.2.2).
    With p = 1 the single stage is c_first.
    """
    p = np.asarray(pp, dtype=float)
    c_max = np.maximum(np.maximum(c_first, where(p > 2, c_middle, 0.0)), c_last)
    mids = (p - 2) * c_middle if c_middle_sum is None else c_middle_sum
    c_sum = where(p == 1, c_first, c_first + where(p > 2, mids, 0.0) + c_last)
    return micro_batches * c_max + flushes * (c_sum - c_max) / vpp


def gpipe_makespan_s(forward_s: Number, backward_s: Number, micro_batches: Number) -> np.ndarray:
    """GPipe's exact makespan with stages of forward f_j and backward b_j per micro-batch:
    sum f + (m - 1) max f + sum b + (m - 1) max b, over plans.

    GPipe runs every forward, then every backward (Huang et al. 2019, Fig. 2c): each half is a
    max-plus fill and drain of m alike micro-batches through the stages (a tandem line: the last
    of them leaves once the first has crossed every stage and the slowest stage has passed the
    other m - 1), and the backward starts on the last stage when its last forward ends (the other
    stages' forwards end earlier). The closed form `pipeline_makespan_s` with c_j = f_j + b_j is
    exact where one stage is the slowest in both passes (its c_j is then max c, and sum f + sum b
    = sum c), and falls short of it otherwise: f = [1, 3, 1], b = [5, 2, 2], m = 4 gives 38 s here
    (and in the simulator) against 32 s (review 44). Held to `engines.simulator` on random stages
    (`tests/test_pipeline_gpipe.py`).

    `forward_s`, `backward_s`: (n, p) or (p,) seconds (stages padded with zeros in front end as
    they would alone); `micro_batches`: m per plan (n,) or one. Returns (n,) seconds (0-d for (p,))."""
    f = np.asarray(forward_s, dtype=float)
    b = np.asarray(backward_s, dtype=float)
    k = np.asarray(micro_batches, dtype=float) - 1
    return f.sum(axis=-1) + k * f.max(axis=-1) + b.sum(axis=-1) + k * b.max(axis=-1)


def pipeline_host_s(preset: EnginePreset, requests: Number) -> Number:
    """Host seconds a stage spends on one micro-batch of `requests` requests before its kernels
    launch, h_0 + h_1 n (`engines.engine_presets`, "Host time of the Python engines")."""
    return preset.stage_host_s + preset.stage_host_per_request_s * np.asarray(requests, dtype=float)


def overlapped_host_floor_s(gpu_s: Number, preset: EnginePreset, requests: Number) -> Number:
    """A step of one stage (pp = 1) of `requests` requests whose GPU work takes `gpu_s`: the
    engines' overlap schedulers (TensorRT-LLM's PyExecutor `_executor_loop_overlap`, vLLM's async
    scheduling, SGLang's overlap scheduler) prepare step i + 1 on the host while the GPU runs step
    i, so the host's work hides behind the GPU's but a step never lasts less than the host work
    itself: max(gpu, h_0 + h_1 n), with the same h_0, h_1 as under pp (`pipeline_host_s`).
    The floor binds where the GPU's step is short against many requests: a small model, or a
    wide TP group dividing the GPU's work but not the host's (every TP rank's process schedules,
    prepares and samples the whole batch)."""
    return np.maximum(gpu_s, pipeline_host_s(preset, requests))


def pipelined_round_s(
    c_max: Number, c_last: Number, through: Number, m: Number, host: Number, sync_last: bool
) -> Number:
    """One round of m micro-batches through the stages when each stage's process spends `host`
    seconds on every micro-batch (0: the GPU-bound round, max(through, m c_max)).

    - A stage's process prepares one micro-batch at a time, ahead of its GPU: a stage passes a
      micro-batch every max(c, h) (the CPU leads while h < c).
    - Where the last stage waits for its sampled tokens before it prepares the next micro-batch
      (vLLM under pp), its host time adds to its work: c_last + h.
    - A micro-batch's next step is scheduled only once its tokens are back: each micro-batch's
      round trip is its pass through every stage plus one host step, through + h.
    T = max(m max(c_max, h, c_last + s h), through + h), s = 1 where the last stage synchronises."""
    period = np.maximum(np.maximum(c_max, host), np.where(sync_last, c_last + host, 0.0))
    return np.maximum(m * period, through + host)


def prefill_apart_round_s(
    work_s: Number,
    through_prefill_s: Number,
    through_decode_s: Number,
    prefills: Number,
    rounds: Number,
) -> Number:
    """The time in which every decoding sequence advances one token and the prompt tokens are
    prefilled, for an engine whose pipeline micro-batches are prefill-only or decode-only and
    whose stages take them in one fixed order (SGLang: `EnginePreset.prefill_apart`).

    - `work_s`: what the busiest stage does in that time, each micro-batch at max(c, h) (its
      process one micro-batch ahead of its GPU): m_d decode micro-batches and k = `prefills`
      prefill ones.
    - A stage takes micro-batch i + 1 only after micro-batch i, and a micro-batch's next step
      waits for its tokens: a loop round holding a prefill micro-batch lasts at least that
      micro-batch's pass through every stage plus a host step, `through_prefill_s` (the light
      micro-batches behind it cross the stages at its pace), and a round of decodes alone its
      own pass, `through_decode_s`. Of the R = max(1, (m_d + k) / p) loop rounds, r_p = min(k, R)
      hold a prefill micro-batch (prompts spread over the rounds as they arrive).
    - However small the prefill, each decode micro-batch still waits for its own tokens: the time
      lasts at least one decode micro-batch's pass (the round trip of `pipelined_round_s`), so a
      round never gets shorter for the prompt tokens added to it (`through_decode_s` = 0 where
      nothing decodes).
    T = max(work, r_p through_prefill + (R - r_p) through_decode, through_decode)."""
    k, r = np.asarray(prefills, dtype=float), np.asarray(rounds, dtype=float)
    r_p = np.minimum(k, r)
    passes = np.maximum(r_p * through_prefill_s + (r - r_p) * through_decode_s, through_decode_s)
    return np.maximum(work_s, passes)
