"""`shardwise sensitivity` as a request: how the crossover batch of two plans moves with depth and
width, and which input moves their time ratio most (each input divided and multiplied by a
factor around the baseline batch)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from shardwise.errors import SpecError
from shardwise.requests import fields as F
from shardwise.requests.compare import ExperimentRequest, _split, _strip

MAX_FACTOR = 1000.0  # inputs divided and multiplied by more than this leave any sensible range
OWN = {
    "--layers-values": F.Field("layers_values", "str", "8..192:24"),
    "--hidden-values": F.Field("hidden_values", "str", "512..16384:x2"),
    "--max-batch": F.Field("max_batch", "int", 256),
    "--factor": F.Field("factor", "float", 2.0),
}
DEFAULTS = {f.name: f.default for f in OWN.values()}


@dataclass(frozen=True)
class SensitivityResult:
    request: SensitivityRequest
    experiment: Any  # specs.experiment.Experiment
    by_layers: list[Any]  # analyses.sensitivity curves, one per link
    by_hidden: list[Any]
    tornadoes: list[tuple[str, float, list[Any]]]  # (link, baseline ratio, bars)
    assumptions: str
    notes: tuple[str, ...]

    @property
    def plans(self) -> list[str]:
        return [p.label for p in self.experiment.plans]

    def ratio_basis(self) -> str:
        """Where the ratio's interval comes from (`analyses.bands.ratio_log_sd`)."""
        from shardwise.analyses.bands import calibrated

        if calibrated(self.experiment):
            return str(self.experiment.spread_basis)
        return "uncalibrated: the spread of two layouts' ratio on public runs"

    def as_dict(self) -> dict[str, Any]:
        """The JSON `sensitivity --json` prints."""
        from shardwise.analyses.experiment import SI_UNIT

        return {
            "assumptions": self.assumptions,
            **self.request.experiment.stack_fields(),  # the framework and recompute priced
            "plans": self.plans,
            "ignore_memory": self.request.experiment.ignore_memory,
            "crossover_batch_vs_layers": _curves(self.by_layers),
            "crossover_batch_vs_hidden": _curves(self.by_hidden),
            "one_at_a_time": {
                link: {
                    "baseline_ratio": base,
                    "baseline_interval": list(bars[0].band("base")) if bars else None,
                    "interval": {"level": 0.8, "basis": self.ratio_basis()},
                    "bars": [
                        {
                            "input": b.variable,
                            "low": b.low_value,
                            "high": b.high_value,
                            "unit": SI_UNIT.get(b.variable, ""),  # of low and high
                            "ratio_low": b.ratio_low,
                            "ratio_high": b.ratio_high,
                            "ratio_low_interval": list(b.band("low")),
                            "ratio_high_interval": list(b.band("high")),
                            # both plans fit in GPU memory there (the text's '*' where not); null where a
                            # plan is invalid there (ratio null, the text's 'invalid': never priced)
                            "fits_low": bool(b.fits_low) if b.ratio_low == b.ratio_low else None,
                            "fits_high": bool(b.fits_high) if b.ratio_high == b.ratio_high else None,
                        }
                        for b in bars
                    ],
                }
                for link, base, bars in self.tornadoes
            },
            "notes": list(self.notes),  # what was assumed (the command line prints them on stderr)
            "command": self.request.command(),
        }


def _curves(curves: list[Any]) -> dict[str, Any]:
    def last(c: Any, j: int) -> float | None:
        b = float(c.last_feasible_batch[j])
        return None if b != b else b

    return {
        c.link: [
            {
                c.variable: float(v),
                "crossover_batch": None if b != b else float(b),
                "winner_at_batch_1": w,
                "last_feasible_batch": last(c, j),  # the largest batch where both plans run and fit
            }
            for j, (v, b, w) in enumerate(zip(c.values, c.crossover_batch, c.winner_at_batch_1, strict=True))
        ]
        for c in curves
    }


@dataclass(frozen=True)
class SensitivityRequest:
    """Two plans of `experiment`: their crossover batch against layers and hidden size, and the
    one-at-a-time ranking of the inputs by how much they move the time ratio."""

    experiment: ExperimentRequest = field(default_factory=ExperimentRequest)
    layers_values: str = DEFAULTS["layers_values"]
    hidden_values: str = DEFAULTS["hidden_values"]
    max_batch: int = DEFAULTS["max_batch"]
    factor: float = DEFAULTS["factor"]

    def __post_init__(self) -> None:
        from shardwise.requests.field_ranges import require

        require(self, "experiment", ExperimentRequest)
        for f in OWN.values():  # the value grammars are checked when run (an empty one is refused there)
            if f.kind != "str":
                object.__setattr__(self, f.name, F.parse_value(f, getattr(self, f.name), f.name))
        if self.max_batch < 2:
            raise SpecError(f"--max-batch: {self.max_batch} is not allowed; it must be >= 2")
        if not 1 < self.factor <= MAX_FACTOR:  # NaN fails too
            raise SpecError(
                f"--factor: {self.factor:g} is not allowed; it must be a number > 1 and at most {MAX_FACTOR:g}"
            )

    @classmethod
    def from_argv(cls, argv: list[str] | tuple[str, ...] | str) -> SensitivityRequest:
        exp, own = _split(_strip(argv, "sensitivity"), OWN)
        return cls(exp, **own)

    def to_argv(self) -> list[str]:
        own = [
            a
            for flag, f in OWN.items()
            if (value := getattr(self, f.name)) != f.default
            for a in (flag, F._text(value))
        ]
        return ["sensitivity", *self.experiment.to_argv(), *own]

    def command(self) -> str:
        return "shardwise " + shlex.join(self.to_argv())

    def run(self) -> SensitivityResult:
        import numpy as np

        from shardwise.analyses.evaluate import why_invalid
        from shardwise.analyses.sensitivity import crossover_batch_vs, one_at_a_time
        from shardwise.requests.experiment import check_plans_valid

        built = self.experiment.build()
        exp = built.experiment
        if len(exp.plans) != 2:
            raise SpecError(f"sensitivity compares exactly two plans (got {len(exp.plans)} --plan)")
        check_plans_valid(exp, "batch", np.arange(1.0, min(self.max_batch, 4096) + 1.0))
        for plan in exp.plans:  # the one-at-a-time chart is about the baseline: both plans must run there
            rule = why_invalid(exp, plan, exp.links[0].link, {"batch": np.array([float(exp.batch)])})
            if rule:
                raise SpecError(f"--plan {plan.label}: invalid at the baseline --global-batch {exp.batch} ({rule})")
        layers = _values("layers", self.layers_values)
        hidden = _values("hidden", self.hidden_values)
        ignore = self.experiment.ignore_memory
        by_layers = crossover_batch_vs(exp, "layers", layers, self.max_batch, ignore)
        by_hidden = crossover_batch_vs(exp, "hidden", hidden, self.max_batch, ignore)
        tornadoes = [(lk.label, *one_at_a_time(exp, i, self.factor)) for i, lk in enumerate(exp.links)]
        return SensitivityResult(self, exp, by_layers, by_hidden, tornadoes, built.describe(), built.notes)


def _values(name: str, text: str) -> Any:
    """--layers-values / --hidden-values in the --vary grammar; the error names this flag."""
    from shardwise.analyses.vary import parse_vary

    try:
        return parse_vary(f"{name}={text}")[1]
    except SpecError as exc:
        reason = str(exc).removeprefix(f"--vary {f'{name}={text}'!r}: ")
        raise SpecError(f"--{name}-values {text!r}: {reason}") from None
