"""Pipeline schedules as data: for each stage, the ordered list of operations it runs.

An operation is (kind, micro-batch, model chunk) with kind F (forward), B (backward; with a
split backward only the input gradient) or W (weight gradient). Micro-batch k of chunk c on
stage i is virtual stage c * p + i; activations flow from virtual stage s to s + 1 and
gradients back from s + 1 to s. The simulator only follows these lists, so a new schedule is a
new function here.

- GPipe (Huang et al. 2019): all m forwards, then all m backwards.
- 1F1B (Narayanan et al. 2021 Sec. 2.2.1; PipeDream-Flush): stage i warms up with
  min(p - i - 1, m) forwards, then alternates one forward and one backward, then cools down.
- Interleaved 1F1B (Narayanan et al. 2021 Sec. 2.2.2; Megatron-LM
  `forward_backward_pipelining_with_interleaving`): v chunks per stage, warm-up
  2 (p - i - 1) + (v - 1) p, chunk of the k-th forward (k mod p v) // p, of the k-th backward
  v - 1 minus that.
- ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", the H1 schedule; as in their
  DeepSpeed `ZeroBubbleH1Pipeline`): the backward split into B and W; stage i runs
  p - i - 1 warm-up forwards, then i (F, B) pairs whose W it defers, then (F, B, W) triples,
  then (B, W) pairs, then the i deferred W's, which fill the cool-down bubble. Same peak
  activation memory as 1F1B.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

F, B, W = 0, 1, 2
KIND_NAMES = {F: "F", B: "B", W: "W"}


class Op(NamedTuple):
    kind: int  # F, B or W
    micro_batch: int
    chunk: int


StageOps = list[list[Op]]


def gpipe(p: int, m: int, v: int = 1) -> StageOps:
    return [[Op(F, k, 0) for k in range(m)] + [Op(B, k, 0) for k in range(m)] for _ in range(p)]


def one_f_one_b(p: int, m: int, v: int = 1) -> StageOps:
    fwd = [Op(F, k, 0) for k in range(m)]
    bwd = [Op(B, k, 0) for k in range(m)]
    return [_one_f_one_b(fwd, bwd, min(p - i - 1, m)) for i in range(p)]


def _one_f_one_b(fwd: list[Op], bwd: list[Op], warmup: int) -> list[Op]:
    """`warmup` forwards, then one forward and one backward in turn, then the last backwards
    (`fwd` and `bwd` of equal length; built by slices)."""
    steady = len(fwd) - warmup
    pairs: list[Op] = [fwd[0]] * (2 * steady)
    pairs[0::2] = fwd[warmup:]
    pairs[1::2] = bwd[:steady]
    return fwd[:warmup] + pairs + bwd[steady:]


def interleaved(p: int, m: int, v: int) -> StageOps:
    if m % p:
        raise ValueError(f"the interleaved schedule needs m={m} to be a multiple of p={p}")
    total = m * v
    group = p * v
    # the k-th forward of a stage: chunk (k mod p v) // p, micro-batch (k // p v) p + k mod p;
    # the k-th backward: the same micro-batch, chunk v - 1 minus that (Megatron-LM)
    fwd = [Op(F, (k // group) * p + k % p, (k % group) // p) for k in range(total)]
    bwd = [Op(B, (k // group) * p + k % p, v - 1 - (k % group) // p) for k in range(total)]
    return [_one_f_one_b(fwd, bwd, min(total, 2 * (p - i - 1) + (v - 1) * p)) for i in range(p)]


def zb_h1(p: int, m: int, v: int = 1) -> StageOps:
    stages = []
    for i in range(p):
        ops: list[Op] = []
        f = b = w = 0
        for _ in range(min(p - i - 1, m)):
            ops.append(Op(F, f, 0))
            f += 1
        for _ in range(i):  # (F, B) pairs whose W waits for the cool-down
            if f == m:
                break
            ops += [Op(F, f, 0), Op(B, b, 0)]
            f, b = f + 1, b + 1
        while f < m:
            ops += [Op(F, f, 0), Op(B, b, 0), Op(W, w, 0)]
            f, b, w = f + 1, b + 1, w + 1
        while b < m:
            ops += [Op(B, b, 0), Op(W, w, 0)]
            b, w = b + 1, w + 1
        ops += [Op(W, k, 0) for k in range(w, m)]
        stages.append(ops)
    return stages


SCHEDULES: dict[str, Callable[[int, int, int], StageOps]] = {
    "gpipe": gpipe,
    "1f1b": one_f_one_b,
    "interleaved": interleaved,
    "zb-h1": zb_h1,
}
SPLIT_BACKWARD = {"zb-h1"}
