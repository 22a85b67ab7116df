"""The latency-target search's answer (`serve --ttft-max/--tpot-max`): every option, best first."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TargetsResult:
    """The latency-target search: every option, best first."""

    request: Any  # requests.serve.ServeRequest
    setting: Any  # requests.serve.ServeSetting
    options: list[Any]  # analyses.serving_targets.Option
    ttft_max_s: float | None
    tpot_max_s: float | None
    percentile: str
    # without --plan, the expert layouts x precisions left out after pricing (`analyses.serving_targets.without_twins`)
    dropped: tuple[tuple[str, str], ...] = ()

    @property
    def compared_layouts(self) -> bool:
        """No --plan was given: the machine's layouts were searched."""
        return not self.request.plans

    def as_dict(self) -> dict[str, Any]:
        """The JSON `serve --ttft-max ... --json` prints."""
        from shardwise.requests.serve_notes import header_dict, search_notes

        wl = self.setting.workload
        found = self.setting.layouts
        layouts = {
            "searched": len({o.label for o in self.options} | {label for label, _ in self.dropped}),
            "experts": (found.experts or None) if found is not None else None,  # null: none compared (review 40 #12)
            "not_shown": [{"plan": label, "weight_precision": w} for label, w in self.dropped],
            "not_compared": list(found.left_out) if found is not None else [],
        }
        return {
            # the model, system, GPUs and engine, as `serve --json` without targets (review 40 #9)
            **header_dict(self.setting.model, self.setting.cluster, wl, self.request.target.system),
            "targets": {"ttft_max_s": self.ttft_max_s, "tpot_max_s": self.tpot_max_s, "percentile": self.percentile},
            "workload": {"input_len": wl.input_len, "output_len": wl.output_len},
            "options": [
                {
                    "plan": o.label,
                    "weight_precision": o.weight_precision,
                    "kv_precision": o.kv_precision,
                    "meets": o.meets,
                    "requests_in_flight_per_replica": o.users_per_replica,
                    "tokens_per_s_per_gpu": o.tokens_per_s_per_gpu,
                    "replicas": int(o.estimate.scenario.plan.dp) if o.estimate is not None else None,
                    "percentiles_s": o.estimate.percentiles_s if o.estimate is not None else None,
                    "why": o.why,
                }
                for o in self.options
            ],
            **({"layouts": layouts} if self.compared_layouts else {}),
            "notes": search_notes(self),
            "command": self.request.command(),
        }
