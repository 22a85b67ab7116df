"""Why a pipeline serves more, or less, than k times a replica without stages: PP(k) / PP(1) at
full load (the KV cache kept full, in-flight batching) split into what the pipeline's memory buys
and what the pipeline costs.

Notation: X_1 the generated tokens/s of one replica without pipeline stages (the same TP group,
pp = 1), N_1 the sequences its KV cache holds; X_k and N_k the same for the replica split into k
stages (k times the GPUs); X_1' the pp = 1 replica run as if its memory held N_k / k sequences,
as many as the pipeline holds per TP group of GPUs (`engines.inflight.Replica.holding`: the same
kernels and engine, only more or less KV cache). Then

    X_k / X_1 = k x G x E,   G = X_1' / X_1 (capacity gain),   E = X_k / (k X_1') (pipeline efficiency).

- G: each GPU of the pipeline keeps 1/k of the layers' weights and of every sequence's KV cache,
  so k GPUs hold far more than k replicas of one GPU where the weights fill most of a GPU (Llama 3
  8B in 16 bits takes 16 of an RTX 4090's 24 GB). G > 1 where the replica without stages is
  bound by its KV cache: its decode steps read all the weights for the few sequences it holds, and
  holding more shares those reads. G is near 1 where the GPU is compute-bound already (long
  prompts, many sequences), and below 1 where the engine caps the pipeline's sequences lower than
  its memory would (vLLM's `max_num_seqs` for the whole batch queue).
- E: what the pipeline loses against one GPU doing the same work per sequence: the sends between
  stages, the bubble, the host time per micro-batch (`engines.pipeline`). At most about 1.

PP(k) > k PP(1) only where G > 1 / E: the replica without stages is memory-bound (its KV cache
too small to share its weight reads). `shardwise serve` prints this split for every pipeline plan
that serves more than k times its replica without stages, and `--json` gives it for every
pipeline plan (`pipeline_scaling`).

Not in E: micro-batches of unequal work chasing each other around the pipeline (a micro-batch
carrying a prompt passes every stage more slowly than the decode-only ones behind it), which the
simulator prices as equal shares of each round (docs/serving.md, "Budgets of the pipeline's
micro-batches").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardwise.engines.inflight import SIMULATED_REQUESTS, Replica, Traffic
from shardwise.specs import Scenario
from shardwise.specs.request_mix import RequestMix
from shardwise.specs.serving import ServingWorkload


@dataclass(frozen=True)
class PipelineScaling:
    """PP(k) / PP(1) at full load and its split (module docstring); throughputs per replica, in
    generated tokens per second."""

    stages: int  # k
    base_label: str  # the replica without stages, as a plan ("tp=1")
    base_gpus: int  # its GPUs (the TP group)
    base_sequences: int  # N_1
    pipeline_sequences: int  # N_k
    base_tokens_per_s: float  # X_1
    pipeline_tokens_per_s: float  # X_k
    held_tokens_per_s: float  # X_1', the replica without stages holding N_k / k sequences
    base_weights_bytes: float  # weights on one GPU of the replica without stages
    gpu_memory_bytes: float

    @property
    def ratio(self) -> float:
        """X_k / X_1."""
        return self.pipeline_tokens_per_s / self.base_tokens_per_s

    @property
    def capacity_gain(self) -> float:
        """G = X_1' / X_1."""
        return self.held_tokens_per_s / self.base_tokens_per_s

    @property
    def efficiency(self) -> float:
        """E = X_k / (k X_1')."""
        return self.pipeline_tokens_per_s / (self.stages * self.held_tokens_per_s)

    @property
    def superlinear(self) -> bool:
        """More than k times the replica without stages."""
        return self.ratio > self.stages

    @property
    def held_sequences(self) -> int:
        """N_k / k, the sequences per TP group of the pipeline."""
        return round(self.pipeline_sequences / self.stages)

    def why(self, label: str) -> str:
        """One line: the ratio and its two factors, in words."""
        from shardwise.units import format_bytes

        k, base, held = self.stages, self.base_label, self.held_sequences
        per = "per GPU" if self.base_gpus == 1 else f"per {self.base_gpus} GPUs"
        weights, memory = format_bytes(self.base_weights_bytes), format_bytes(self.gpu_memory_bytes)
        return (
            f"{label}: at full load {self.ratio:.2f}x {base}'s tokens/s on {k}x the GPUs, more than {k}x as "
            f"{base}'s KV cache holds only {self.base_sequences:,} sequences (weights take {weights} of each GPU's "
            f"{memory}) "
            f"against {held:,} {per} in the pipeline: holding {held:,}, {base} would serve {self.capacity_gain:.2f}x "
            f"(each decode step's weight reads shared by more sequences), and the pipeline keeps "
            f"{self.efficiency:.2f} of that (sends, bubble, host time)"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "stages": self.stages,
            "base_plan": self.base_label,
            "base_gpus": self.base_gpus,
            "ratio": self.ratio,
            "capacity_gain": self.capacity_gain,
            "pipeline_efficiency": self.efficiency,
            "superlinear": self.superlinear,
            "base_sequences": self.base_sequences,
            "pipeline_sequences": self.pipeline_sequences,
            "held_sequences": self.held_sequences,
            "base_tokens_per_s": self.base_tokens_per_s,
            "pipeline_tokens_per_s": self.pipeline_tokens_per_s,
            "held_tokens_per_s": self.held_tokens_per_s,
        }


def saturated_tokens_per_s(replica: Replica, requests: int, seed: int) -> float:
    """One replica's generated tokens/s with its KV cache kept full, as `engines.inflight.estimate_inflight`
    runs it for the rate it sustains."""
    return replica.run(Traffic(users=replica.slots, requests=requests, seed=seed)).throughput_tokens_per_s


def pipeline_scaling(
    pipeline: Scenario,
    base: Scenario,
    wl: ServingWorkload,
    max_batched_tokens: int,
    base_label: str,
    mix: RequestMix | None = None,
    seed: int = 0,
    requests: int = SIMULATED_REQUESTS,
    built: tuple[Replica | None, Replica | None] = (None, None),
) -> PipelineScaling | None:
    """PP(k) / PP(1) of `pipeline` (k stages) against `base` (the same plan with pp = 1), split
    (module docstring); None where either replica holds no request. `built`: the (pipeline, base)
    replicas where already built from the same arguments (`serve` prices both as its rows)."""
    k = int(pipeline.plan.pp)
    piped = Replica(pipeline, wl, max_batched_tokens, mix, seed) if built[0] is None else built[0]
    one = Replica(base, wl, max_batched_tokens, mix, seed) if built[1] is None else built[1]
    if piped.table is None or one.table is None:
        return None
    held = one.holding(max(1, round(piped.slots / k)))
    return PipelineScaling(
        stages=k,
        base_label=base_label,
        base_gpus=int(base.plan.tp) * int(base.plan.cp),
        base_sequences=int(one.slots),
        pipeline_sequences=int(piped.slots),
        base_tokens_per_s=saturated_tokens_per_s(one, requests, seed),
        pipeline_tokens_per_s=saturated_tokens_per_s(piped, requests, seed),
        held_tokens_per_s=saturated_tokens_per_s(held, requests, seed),
        base_weights_bytes=float(one.weights_bytes),
        gpu_memory_bytes=float(base.cluster.gpu.memory_bytes),
    )
