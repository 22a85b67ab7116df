"""`shardwise timeline` as a request: one training step simulated operation by operation."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from shardwise.requests import fields as F
from shardwise.requests.training import TrainingRequest


@dataclass(frozen=True)
class TimelineResult:
    """The simulated step (`engines.simulated.SimulatedStep`), the closed form's step time beside
    it, the 80% interval and what was assumed."""

    request: TimelineRequest
    simulated: Any
    closed_form_step_time_s: float
    step_time_s_low: float
    step_time_s_high: float
    interval_basis: str
    notes: tuple[str, ...]

    @property
    def step_time_s(self) -> float:
        """The simulated makespan plus the per-step overhead (0 unless calibrated)."""
        return float(self.simulated.estimate.step_time_s)

    def as_dict(self) -> dict[str, Any]:
        """The JSON `timeline --json` prints: the summary and every operation."""
        from shardwise import export
        from shardwise.presets.stack_defaults import resolve_recompute

        data = export.simulation_dict(self.simulated, self.closed_form_step_time_s)
        t, plan = self.request.training, self.simulated.estimate.scenario.plan
        data.update(
            # the recompute priced and where it came from, as `predict --json` says them (`resolve_recompute`)
            framework=str(plan.framework),
            recompute=plan.recompute.label,
            recompute_layers=int(plan.recompute_layers),
            recompute_source=resolve_recompute(t.framework, t.recompute, t.recompute_layers).source,
        )
        data.update(
            step_time_s=self.step_time_s,
            step_time_s_low=self.step_time_s_low,
            step_time_s_high=self.step_time_s_high,
            interval={"level": 0.8, "basis": self.interval_basis},
            # the memory as `predict --json` writes it: the step is simulated whether it fits or not
            memory_bytes=export.whole_bytes_parts(self.simulated.estimate.memory.as_dict()),
            gpu_memory_bytes=export.whole_bytes(self.simulated.estimate.scenario.cluster.gpu.memory_bytes),
            fits_in_memory=bool(self.simulated.estimate.fits_in_memory),
            notes=list(self.notes),  # what was assumed (the command line prints them on stderr)
            command=self.request.command(),
        )
        return data


@dataclass(frozen=True)
class TimelineRequest:
    """`shardwise timeline`: the step of `training` by the discrete-event simulation of its
    pipeline schedule, and the closed form for comparison."""

    training: TrainingRequest

    def __post_init__(self) -> None:
        from shardwise.requests.field_ranges import require

        require(self, "training", TrainingRequest)

    @classmethod
    def from_argv(cls, argv: list[str] | tuple[str, ...] | str) -> TimelineRequest:
        args = F.split_argv(argv)
        while args and args[0] in ("shardwise", "timeline"):
            args.pop(0)
        return cls(TrainingRequest.from_argv(args))

    def to_argv(self) -> list[str]:
        return ["timeline", *self.training.to_argv()]

    def command(self) -> str:
        return "shardwise " + shlex.join(self.to_argv())

    def run(self) -> TimelineResult:
        from shardwise.engines.simulated import simulate_training_step
        from shardwise.engines.training import estimate_training_step
        from shardwise.requests import build

        built = self.training.build()
        scn = built.scenario
        simulated = simulate_training_step(scn)
        closed = float(estimate_training_step(scn).step_time_s)
        spread = build.spread([scn], built.calibration)
        low, high = (float(x[0]) for x in spread.bounds(float(simulated.estimate.step_time_s)))
        return TimelineResult(self, simulated, closed, low, high, spread.basis, built.notes)
