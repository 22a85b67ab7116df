"""The result of one training-step estimate: a time breakdown, a memory breakdown, rates."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from shardwise.physics.memory import MemoryBreakdown
from shardwise.specs import Scenario
from shardwise.specs._checks import Number


def tp_comm_name(tps: object, cps: object) -> str:
    """What `StepBreakdown.tp_comm` holds for plans of these TP and CP degrees (one plan's, or two
    plans' compared): 'TP communication', 'CP communication' (tp = 1: the context-parallel ring
    alone) or 'TP/CP communication' (both in one part)."""
    tp = int(np.max(np.asarray(tps))) > 1
    cp = int(np.max(np.asarray(cps))) > 1
    return "TP/CP communication" if tp and cp else "CP communication" if cp else "TP communication"


@dataclass(frozen=True)
class StepBreakdown:
    """Seconds of one step on the critical path; the parts add up to the step time.

    compute: kernels of the slowest stage for all its micro-batches (recomputation included);
    tp_comm: tensor-parallel collectives and the context-parallel ring (or all-gather) of keys and
    values not hidden behind compute (`tp_comm_name` says which a plan has); pp_p2p: pipeline sends and
    receives on the critical path; pp_bubble: pipeline fill and drain; dp_comm: data-parallel
    gradient (and ZeRO parameter) communication not hidden behind the backward pass, plus the
    tied-embedding gradient sync between first and last stage; optimizer: the Adam update;
    overhead: the software stack's fixed costs per micro-batch and per step (0 unless calibrated,
    see `Cluster`).
    """

    # every property is a function of the same element's fields (`engines.distinct._lazy`)
    ELEMENTWISE_PROPERTIES: ClassVar[bool] = True

    compute_s: Number
    tp_comm_s: Number
    pp_p2p_s: Number
    pp_bubble_s: Number
    dp_comm_s: Number
    optimizer_s: Number
    overhead_s: Number = 0.0
    ep_comm_s: Number = 0.0
    offload_s: Number = 0.0  # activation copies to and from host memory that compute does not hide

    @property
    def total_s(self) -> Number:
        return (
            self.compute_s
            + self.ep_comm_s
            + self.offload_s
            + self.tp_comm_s
            + self.pp_p2p_s
            + self.pp_bubble_s
            + self.dp_comm_s
            + self.optimizer_s
            + self.overhead_s
        )

    def as_dict(self) -> dict[str, Number]:
        return {
            "compute": self.compute_s,
            "tp_comm": self.tp_comm_s,
            "ep_comm": self.ep_comm_s,
            "offload": self.offload_s,
            "pp_p2p": self.pp_p2p_s,
            "pp_bubble": self.pp_bubble_s,
            "dp_comm": self.dp_comm_s,
            "optimizer": self.optimizer_s,
            "overhead": self.overhead_s,
        }


@dataclass(frozen=True)
class TrainingEstimate:
    """Estimate of one optimizer step. Array-valued where the scenario held arrays.

    `model_flops_per_step` counts the older Megatron-LM convention (3 passes of the GEMMs and the
    full s x s attention, Korthikanti et al. 2022 App. A; what Megatron-LM printed before
    NVIDIA/Megatron-LM@8873b55d, 2025-03-06, and most public model TFLOP/s use; Megatron-LM since
    then, Megatron-Bridge and NeMo count the causal half, as `useful_flops_per_step` does:
    `calibration.tflops_count`);
    `hardware_flops_per_step` adds the FLOPs that recomputation repeats (Narayanan et al. 2021
    Eq. 3 with full recomputation). A causal model needs only the unmasked part of the attention
    square, and a fused (flash) kernel computes only that: `masked_attention_flops_per_step` is
    the rest. MFU, HFU and the TFLOP/s per GPU count the work done, so they leave it out (HFU
    keeps it where standard attention computes the whole square): at long sequences the
    convention's MFU would otherwise exceed what the GEMMs reach.
    """

    # every property is a function of the same element's fields (`engines.distinct._lazy`)
    ELEMENTWISE_PROPERTIES: ClassVar[bool] = True

    scenario: Scenario
    step_time_s: Number
    breakdown: StepBreakdown
    memory: MemoryBreakdown
    model_flops_per_step: Number
    hardware_flops_per_step: Number
    # pp_bubble_s / step_time_s: the busiest stage's idle share of the whole step (optimizer included);
    # not the timeline's mean_stage_idle_fraction, nor the bubble ratio (p - 1) / m (docs/model.md)
    bubble_fraction: Number
    hidden_comm_s: dict[str, Number]  # communication overlapped with compute (not in the step time)
    masked_attention_flops_per_step: Number = 0.0  # in the convention's count, masked by causality
    # the attention forward selective recomputation reruns under a fused kernel, which the hardware
    # FLOPs leave out (`engines.training_flops.fused_attention_recompute_flops`)
    attention_recompute_flops_per_step: Number = 0.0
    # named work inside `breakdown.compute_s` that a stack adds (FSDP2's copies: "fsdp2_copies")
    compute_parts_s: dict[str, Number] = field(default_factory=dict)

    @property
    def tokens_per_s(self) -> Number:
        plan, model = self.scenario.plan, self.scenario.model
        return plan.global_batch * model.seq_len / self.step_time_s

    def _per_gpu(self, flops: Number) -> Number:
        return flops / (self.step_time_s * self.scenario.plan.num_gpus)

    @property
    def useful_flops_per_step(self) -> Number:
        """The model's FLOPs without the causally masked attention (what MFU counts)."""
        return self.model_flops_per_step - self.masked_attention_flops_per_step

    @property
    def executed_flops_per_step(self) -> Number:
        """The FLOPs the GPUs run: recomputation included (with a fused kernel, the attention forward
        selective recomputation reruns: `attention_recompute_flops_per_step`), the masked attention
        only where standard attention computes the whole square (what HFU counts)."""
        flash = np.asarray(self.scenario.plan.flash_attention, dtype=bool)
        masked = np.where(flash, self.masked_attention_flops_per_step, 0.0)
        return self.hardware_flops_per_step - masked + self.attention_recompute_flops_per_step

    @property
    def model_tflops_per_gpu(self) -> Number:
        return self._per_gpu(self.useful_flops_per_step) / 1e12

    @property
    def model_tflops_per_gpu_full_attention(self) -> Number:
        """Megatron-LM's "model TFLOP/s": the whole s x s attention square counted, 72 B s l h^2 (1 +
        s / 6h + V / 12lh) per step for GPT (Korthikanti et al. 2022 App. A; Narayanan et al. 2021
        Eq. 3 is the same count with the recomputed forward, 96), what published figures quote;
        `model_tflops_per_gpu` leaves out the causally masked half."""
        return self._per_gpu(self.model_flops_per_step) / 1e12

    @property
    def hardware_tflops_per_gpu(self) -> Number:
        return self._per_gpu(self.executed_flops_per_step) / 1e12

    @property
    def mfu(self) -> Number:
        """Model FLOPs utilisation: useful model FLOP/s per GPU over the dense peak of the plan's
        precision (an FP8 plan's: the FP8 peak, though its attention and logits run in 16 bits;
        `mfu_16bit_peak` divides by the 16-bit one)."""
        peak = self.scenario.cluster.gpu.peak_flops_per_s(self.scenario.plan.precision)
        return self._per_gpu(self.useful_flops_per_step) / peak

    @property
    def hfu(self) -> Number:
        """Hardware FLOPs utilisation: the FLOPs run (`executed_flops_per_step`: recomputation, and the
        whole s x s attention square under an unfused kernel) over the precision's dense peak."""
        peak = self.scenario.cluster.gpu.peak_flops_per_s(self.scenario.plan.precision)
        return self._per_gpu(self.executed_flops_per_step) / peak

    @property
    def mfu_16bit_peak(self) -> Number:
        """MFU against the GPU's dense 16-bit (BF16, else FP16) peak whatever the precision: how FP8
        training's MFU is often quoted, so FP8 and BF16 runs compare on one scale (NeMo's
        `calculate_mfu` divides by one fixed peak, `reference_mfu=1979.0` for H100, the FP8 one,
        whatever the run's precision: sources differ, so both are given). Equals `mfu` for 16-bit plans."""
        return self._per_gpu(self.useful_flops_per_step) / self.scenario.cluster.gpu.peak_flops_per_s_16bit

    @property
    def fits_in_memory(self) -> Number:
        return self.memory.total_bytes <= self.scenario.cluster.gpu.memory_bytes


def embedding_apart(parts: dict[str, Any], one_replica: Any) -> dict[str, Any]:
    """A breakdown (term -> seconds, scalars or arrays) with `dp_comm` split where `one_replica`
    (dp = cp = 1 of a dense model: what remains of dp_comm is the tied embedding's sync between the
    first and last stage, `StepBreakdown`): `embedding_sync` after it, 0 where dp_comm keeps it, as
    predict's JSON names it (`export.seconds_parts`); NaN kept. The table's form of it (sweep and
    plan CSV columns), every row with both keys."""
    if "dp_comm" not in parts:
        return parts
    dp = np.asarray(parts["dp_comm"], dtype=float)
    out: dict[str, Any] = {}
    for k, v in parts.items():
        if k == "dp_comm":
            out.update(dp_comm=np.where(one_replica, dp * 0.0, dp), embedding_sync=np.where(one_replica, dp, dp * 0.0))
        else:
            out[k] = v
    return out
