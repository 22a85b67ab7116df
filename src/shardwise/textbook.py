"""The brief's own formulas, kept apart from the physics (`--cost-model textbook`).

Section 7 of the Russian article ("Пример кода (концептуальная симуляция)") defines
`simulate_tp` and `simulate_pp`; `simulate_pp` reads an undefined global `batch`, made an
argument here. Its driver runs PP with micro-batch min(batch, 4). The functions are vectorized
but otherwise verbatim, errors included, so shardwise can show what they predict and why
the physical model disagrees:

1. TP's all-reduce is sized by the weight matrix (4 h^2 bytes, fp32) instead of the
   activations (b s h x 2 bytes): it does not grow with the batch, and it is 10^3-10^4 x the
   real message at batch 1.
2. "forward+backward" compute is 2 b h^2 FLOPs: one h x h GEMM forward. A layer has 12 h^2
   weights (24 b h^2 forward FLOPs, 72 b h^2 with backward).
3. `simulate_pp` multiplies layers_per_stage twice (into compute_per_stage and again outside).
4. `simulate_pp` returns one micro-batch's time: the other batch/microbatch - 1 micro-batches
   cost nothing, so once the micro-batch reaches its cap of 4 PP stops slowing down with the batch.
5. The bubble term (p - 1)/(p + m - 1) is a fraction of the whole pipeline time but is
   multiplied by one stage's compute.
6. Section 4.1's worked example: 1 x 4096 x 4096 x 2 FLOP / 312e12 FLOP/s = 0.108 us, not ms;
   so the quoted 52% overhead is really 52,000%.
7. "NVLink 600 GB/s" is A100's bidirectional total; a collective sees 300 GB/s per direction
   (235 GB/s measured bus bandwidth). Its "PCIe ~32 GB/s" is one direction of PCIe 4.0 x16: the two
   figures are on different conventions (`requests.textbook_links` hands a named link to these
   formulas as the brief counts its kind: NVLink both directions, PCIe one).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardwise.specs._checks import Number

FP32_BYTES = 4  # the brief's "float32 all-reduce (4 bytes)"
PP_MAX_MICRO_BATCH = 4  # the brief's driver: simulate_pp(..., min(batch, 4), ...)


def simulate_tp(layers: Number, hidden: Number, batch: Number, gpus: Number, flops: Number, bw_bytes: Number) -> Number:
    """Section 7, verbatim: layers * (2 b h^2 / flops / gpus + 4 h^2 / bw)."""
    compute_per_layer = 2 * batch * hidden * hidden / flops  # "forward+backward"
    comm_per_layer = FP32_BYTES * hidden * hidden / bw_bytes  # "float32 all-reduce (4 bytes)"
    return layers * (compute_per_layer / gpus + comm_per_layer)


def simulate_pp(
    layers: Number, stages: Number, microbatch: Number, flops: Number, bw_bytes: Number, hidden: Number, batch: Number
) -> Number:
    """Section 7, verbatim, with the global `batch` as an argument."""
    layers_per_stage = layers / stages
    compute_per_stage = 2 * microbatch * layers_per_stage * hidden * hidden / flops
    bubble = (stages - 1) / (stages + (batch / microbatch) - 1)
    comm_per_stage = microbatch * hidden * FP32_BYTES / bw_bytes  # "send activations"
    return layers_per_stage * compute_per_stage + bubble * compute_per_stage + comm_per_stage


def brief_pp(layers: Number, stages: Number, flops: Number, bw_bytes: Number, hidden: Number, batch: Number) -> Number:
    """The brief's driver loop: PP with micro-batch min(batch, 4)."""
    return simulate_pp(layers, stages, np.minimum(batch, PP_MAX_MICRO_BATCH), flops, bw_bytes, hidden, batch)


@dataclass(frozen=True)
class WorkedNumber:
    """One number of the brief's Section 4.1: what it states and what its own inputs give."""

    quantity: str
    stated: str
    computed: float
    unit: str
    consistent: bool
    note: str = ""


def section_4_1(hidden: int = 4096, flops: float = 312e12, bw_bytes: float = 600e9) -> list[WorkedNumber]:
    """Recompute the worked example of Section 4.1 ("very small batch") from its own inputs."""
    size = 2 * hidden * hidden  # "2 x hidden^2 = 33.5 MB (with gradients)": 2 bytes per element
    t_ar = size / bw_bytes
    t1 = 1 * hidden * hidden * 2 / flops
    t4 = 4 * hidden * hidden * 2 / flops
    return [
        # `consistent`: the brief's arithmetic from its own inputs; the note says where the input is wrong
        WorkedNumber(
            "all-reduce size 2 x hidden^2",
            "33.5 MB",
            size / 1e6,
            "MB",
            abs(size / 1e6 - 33.5) < 0.1,
            "sizing wrong: TP all-reduces activations (b s h x 2 bytes), not weights",
        ),
        WorkedNumber(
            "all-reduce time at 600 GB/s",
            "0.056 ms",
            t_ar * 1e3,
            "ms",
            abs(t_ar * 1e3 - 0.056) < 0.001,
            "of that size, at both directions' total",
        ),
        WorkedNumber(
            "compute, batch 1", "0.108 ms", t1 * 1e3, "ms", False, f"= {t1 * 1e6:.3f} us: the text is off by 1000x"
        ),
        WorkedNumber(
            "communication overhead, batch 1",
            "~52%",
            t_ar / t1 * 100,
            "%",
            False,
            "0.056 ms / 0.108 us, not / 0.108 ms",
        ),
        WorkedNumber("compute, batch 4", "0.432 ms", t4 * 1e3, "ms", False, f"= {t4 * 1e6:.3f} us"),
        WorkedNumber("communication overhead, batch 4", "~13%", t_ar / t4 * 100, "%", False),
    ]
