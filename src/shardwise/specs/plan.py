"""The parallel plan (the "Execution" of Calculon's split): how one model is laid out and run.

Categorical fields (schedule, recompute) accept names ('1f1b'), enum members, integer codes,
or numpy arrays of codes, so a planner can evaluate many plans in one vectorized call.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import IntEnum

import numpy as np

from shardwise.specs import _checks as chk
from shardwise.specs._checks import Number, SpecError
from shardwise.specs.hardware import PRECISION_BYTES


class Schedule(IntEnum):
    """Pipeline schedules (Huang et al. 2019 GPipe; Narayanan et al. 2021 1F1B and interleaved;
    Qi et al. 2023 ZB-H1, which splits the backward pass into input and weight gradients)."""

    GPIPE = 0
    ONE_F_ONE_B = 1
    INTERLEAVED = 2
    ZB_H1 = 3

    @property
    def label(self) -> str:
        return {0: "gpipe", 1: "1f1b", 2: "interleaved", 3: "zb-h1"}[int(self)]


class Recompute(IntEnum):
    """Activation recomputation (Korthikanti et al. 2022): none, selective (attention core), full."""

    NONE = 0
    SELECTIVE = 1
    FULL = 2

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass(frozen=True)
class Plan:
    """tp x pp x dp GPUs; `vpp` virtual stages (model chunks) per GPU for the interleaved schedule.

    `global_batch` and `micro_batch` are in sequences; m = global_batch / (dp * micro_batch)
    micro-batches pass through the pipeline per step. Execution details that changed between
    Megatron-LM versions are explicit:
    `tp_comm_overlap`: the backward all-reduce of input gradients overlaps the weight-gradient
    GEMM (Megatron's async TP all-reduce); `overlap_grad_reduce`: the DP gradient reduction runs
    in buckets during the last backward pass; `scatter_gather`: pipeline sends carry 1/tp of the
    activation per rank, re-assembled by an all-gather inside the node (Narayanan et al. 2021 §4.1);
    `flash_attention`: fused attention that never writes the s x s score matrix (Dao et al. 2022).
    """

    tp: Number = 1
    pp: Number = 1
    dp: Number = 1
    global_batch: Number = 1
    micro_batch: Number = 1
    vpp: Number = 1
    schedule: Schedule | np.ndarray | str = Schedule.ONE_F_ONE_B
    recompute: Recompute | np.ndarray | str = Recompute.NONE
    sequence_parallel: bool | np.ndarray = False
    zero_stage: Number = 0
    precision: str = "bf16"
    flash_attention: bool | np.ndarray = True
    tp_comm_overlap: bool | np.ndarray = True
    overlap_grad_reduce: bool | np.ndarray = True
    scatter_gather: bool | np.ndarray = True

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp", "global_batch", "micro_batch", "vpp"):
            object.__setattr__(self, name, chk.positive_int(f"plan: {name}", getattr(self, name)))
        object.__setattr__(self, "schedule", chk.enum_codes("plan: schedule", self.schedule, Schedule))
        object.__setattr__(self, "recompute", chk.enum_codes("plan: recompute", self.recompute, Recompute))
        zero = np.asarray(self.zero_stage)
        if not np.issubdtype(zero.dtype, np.integer) and not np.all(np.mod(zero, 1) == 0):
            raise SpecError(f"plan: zero_stage {self.zero_stage!r} is not allowed; choose 0, 1, 2 or 3")
        if np.any((zero < 0) | (zero > 3)):
            bad = zero[(zero < 0) | (zero > 3)].flat[0] if zero.ndim else zero.item()
            raise SpecError(f"plan: zero_stage {bad} is not allowed; choose 0, 1, 2 or 3")
        if self.precision not in ("bf16", "fp16", "fp8"):
            raise SpecError(f"plan: precision {self.precision!r} is not allowed; choose bf16, fp16 or fp8")
        chk.divisible(
            "plan: global_batch",
            self.global_batch,
            "dp*micro_batch",
            np.asarray(self.dp) * self.micro_batch,
            "each data-parallel replica runs whole micro-batches",
        )
        sched, vpp = np.asarray(self.schedule), np.asarray(self.vpp)
        bad = (vpp > 1) & (sched != Schedule.INTERLEAVED)
        if np.any(bad):
            raise SpecError(
                f"plan: vpp={np.broadcast_to(vpp, bad.shape)[bad].flat[0]} needs schedule=interleaved "
                "(virtual stages only exist in the interleaved 1F1B schedule)"
            )
        bad = (sched == Schedule.INTERLEAVED) & (np.asarray(self.pp) < 2)
        if np.any(bad):
            raise SpecError("plan: schedule=interleaved needs pp >= 2 (it interleaves pipeline stages)")
        bad = (sched == Schedule.INTERLEAVED) & (np.mod(self.num_micro_batches, self.pp) != 0)
        if np.any(bad):
            raise SpecError(
                f"plan: schedule=interleaved needs the micro-batch count m={self.num_micro_batches} "
                f"to be a multiple of pp={self.pp} (Megatron-LM's rule for the interleaved schedule)"
            )

    @property
    def num_gpus(self) -> Number:
        return self.tp * self.pp * self.dp

    @property
    def num_micro_batches(self) -> Number:
        """m: micro-batches per pipeline per step."""
        return self.global_batch // (self.dp * self.micro_batch)

    @property
    def bytes_per_element(self) -> float:
        """Activation / weight bytes: fp8 training keeps bf16 activations between layers."""
        return max(PRECISION_BYTES[self.precision], 2.0)

    def with_(self, **changes: object) -> Plan:
        return replace(self, **changes)  # type: ignore[arg-type]
