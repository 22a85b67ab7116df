"""Plans compared on links as one variable moves, as requests: `ExperimentRequest` (the words of
`crossover`, `sweep` and `sensitivity`: model, GPUs, links, plans, batch, stack), and one request
per question -- `CrossoverRequest` (where the fastest plan changes), `SweepRequest` (a grid of
several variables) and `SensitivityRequest` (how the crossover moves with depth and width, and
which input moves the plans' ratio most).

    >>> from shardwise.requests.compare import CrossoverRequest, ExperimentRequest
    >>> req = CrossoverRequest(ExperimentRequest(plans=("tp=8", "pp=8")), vary="batch=1..32")
    >>> req.command()
    'shardwise crossover --plan tp=8 --plan pp=8'
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from shardwise.errors import SpecError
from shardwise.requests import fields as F
from shardwise.requests.field_names import check_framework
from shardwise.requests.field_ranges import check_experiment, require
from shardwise.requests.fields import EXPERIMENT_FIELDS as TABLE


def _d(name: str) -> Any:
    return F.default(name, TABLE)


@dataclass(frozen=True)
class ExperimentRequest:
    """The compared plans and links, as given (None: not given; the system's or the brief's value
    applies). Names are the flags with underscores, but `plans` (`--plan`, repeated) and
    `intra_links` (`--intra-link`, repeated)."""

    model: str = _d("model")
    layers: int | None = None
    hidden: int | None = None
    heads: int | None = None
    kv_heads: int | None = None
    ffn_hidden: int | None = None
    vocab: int | None = None
    family: str | None = None
    seq_len: int | None = None
    gpu: str | None = None
    system: str | None = None
    num_gpus: int | None = None
    nodes: int | None = None
    gpus_per_node: int | None = None
    calibration: str | None = None
    inter_link: str | None = None
    nics_per_node: float | None = None
    link_latency: str | None = None
    intra_links: tuple[str, ...] = _d("intra_links")
    plans: tuple[str, ...] = _d("plans")
    global_batch: int = _d("global_batch")
    micro_batch: int = _d("micro_batch")
    workload: str = _d("workload")
    cost_model: str = _d("cost_model")
    recompute: str | None = _d("recompute")  # None: the framework's (`default_recompute`)
    flash_attention: bool | None = _d("flash_attention")
    precision: str | None = _d("precision")  # None: bf16, fp16 on a GPU without BF16
    framework: str = _d("framework")
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    ignore_memory: bool = _d("ignore_memory")

    def __post_init__(self) -> None:
        F.normalize(self, TABLE)
        if isinstance(self.precision, str):  # as the command line's choice takes it: BF16 is bf16
            object.__setattr__(self, "precision", self.precision.lower())
        check_experiment(self)
        check_framework(self.framework)  # a preset's name or a file, as predict's request checks it

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], where: str = "") -> ExperimentRequest:
        """From a dict, a CSV row (repeated values split by ';') or the explorer's controls."""
        return cls(**F.values_of(data, TABLE, where))

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> ExperimentRequest:
        """From a click command's parsed options (click's names; the command's own are left out)."""
        return cls(**F.by_name(dict(options), TABLE))

    @classmethod
    def from_argv(cls, argv: list[str] | tuple[str, ...] | str) -> ExperimentRequest:
        args = F.split_argv(argv)
        return cls(**F.parse_argv(args, table=TABLE))

    def values(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def given(self) -> dict[str, Any]:
        return {f.name: v for f in TABLE if (v := getattr(self, f.name)) != f.default}

    def to_argv(self) -> list[str]:
        return F.argv_of(self.values(), TABLE)

    def to_row(self) -> dict[str, str]:
        """A CSV row of the fields given (lists joined by ';'); `from_mapping` reads it back."""
        out: dict[str, str] = {}
        for name, value in self.given().items():
            if isinstance(value, tuple):
                out[name] = ";".join(value)
            else:
                out[name] = ("yes" if value else "no") if isinstance(value, bool) else F._text(value)
        return out

    def with_(self, **changes: Any) -> ExperimentRequest:
        return replace(self, **changes)

    def build(self) -> BuiltExperiment:
        """The `Experiment`, presets, files and the calibration resolved once, and what was assumed."""
        from shardwise.requests.experiment import build_experiment

        notes: list[str] = []
        options = {f.key: getattr(self, f.name) for f in TABLE}
        return BuiltExperiment(build_experiment(options, notes), tuple(notes), self.recompute_choice())

    def recompute_choice(self) -> Any:
        """What a training step recomputes where a plan's `recompute=` key leaves it open, and where
        that came from (`presets.stack_defaults.resolve_recompute`, as predict reads it)."""
        from shardwise.presets.stack_defaults import resolve_recompute

        return resolve_recompute(self.framework, self.recompute)

    def stack_fields(self) -> dict[str, Any]:
        """What the JSON of crossover, sweep and sensitivity says of the stack priced: the framework,
        and for a training step the recompute mode, its every-N-th-layer default and its source."""
        choice = self.recompute_choice()
        out: dict[str, Any] = {"framework": choice.framework}
        return {**out, **choice.as_dict()} if self.workload == "train" and self.cost_model != "textbook" else out


@dataclass(frozen=True)
class BuiltExperiment:
    experiment: Any  # specs.experiment.Experiment
    notes: tuple[str, ...] = ()
    recompute: Any = None  # presets.stack_defaults.RecomputeChoice (None: not said)

    def describe(self, variable: str | None = None) -> str:
        """One paragraph: what was held fixed (the swept variable named as such)."""
        from shardwise.requests.experiment import describe_experiment

        return describe_experiment(self.experiment, variable, self.recompute)


def _strip(argv: list[str] | tuple[str, ...] | str, command: str) -> list[str]:
    args = F.split_argv(argv)
    while args and args[0] in ("shardwise", command):
        args.pop(0)
    return args


def _split(args: list[str], own: dict[str, F.Field]) -> tuple[ExperimentRequest, dict[str, Any]]:
    values = F.parse_argv(args, own, TABLE)
    names = {f.name for f in own.values()}
    return ExperimentRequest(**{k: v for k, v in values.items() if k not in names}), {
        k: v for k, v in values.items() if k in names
    }


# ------------------------------------------------------------------------------ crossover ---
DEFAULT_VARY = "batch=1..32"
CROSSOVER_OWN = {"--vary": F.Field("vary", "str", DEFAULT_VARY)}


@dataclass(frozen=True)
class CrossoverResult:
    """Each plan's time on each link over the swept values, and where the fastest plan changes."""

    request: CrossoverRequest
    result: Any  # analyses.crossover.CrossoverResult
    assumptions: str
    notes: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        """The JSON `crossover --json` prints."""
        from shardwise import export

        crossover = export.crossover_dict(self.result, self.assumptions)
        stack = self.request.experiment.stack_fields()  # the framework and recompute priced
        return {**crossover, **stack, "notes": list(self.notes), "command": self.request.command()}

    def csv_text(self) -> str:
        """The series as CSV: every grid value, plan and link (what `crossover -o FILE.csv` writes,
        `requests.crossover_csv`)."""
        from shardwise.requests.crossover_csv import crossover_csv

        return crossover_csv(self.result)


@dataclass(frozen=True)
class CrossoverRequest:
    """`shardwise crossover`: the experiment's plans on its links as `vary` moves."""

    experiment: ExperimentRequest = field(default_factory=ExperimentRequest)
    vary: str = DEFAULT_VARY

    def __post_init__(self) -> None:
        require(self, "experiment", ExperimentRequest)
        object.__setattr__(self, "vary", F.parse_value(CROSSOVER_OWN["--vary"], self.vary, "--vary"))
        self.values()  # the range checked when the request is built, as `--vary` is (not first in `.run()`)

    @classmethod
    def from_argv(cls, argv: list[str] | tuple[str, ...] | str) -> CrossoverRequest:
        exp, own = _split(_strip(argv, "crossover"), CROSSOVER_OWN)
        return cls(exp, own.get("vary", DEFAULT_VARY))

    def to_argv(self) -> list[str]:
        return ["crossover", *self.experiment.to_argv(), *(["--vary", self.vary] if self.vary != DEFAULT_VARY else [])]

    def command(self) -> str:
        return "shardwise " + shlex.join(self.to_argv())

    def values(self) -> tuple[str, Any]:
        """The swept variable and its values (`analyses.vary.parse_vary`)."""
        from shardwise.analyses.vary import parse_vary

        return parse_vary(self.vary)

    def run(self, max_values: int | None = None) -> CrossoverResult:
        """Every plan on every link at every value; a plan invalid at every value is an error.
        `max_values`: refuse a longer grid (the terminal table's limit)."""
        from shardwise.analyses.crossover import run_crossover
        from shardwise.requests.experiment import check_plans_valid

        built = self.experiment.build()
        exp = built.experiment
        variable, values = self.values()
        if max_values is not None and len(values) > max_values:
            raise SpecError(
                f"--all-rows prints at most {max_values:,} rows ({len(values):,} asked); "
                "write them with -o FILE or --json"
            )
        result = run_crossover(exp, variable, values, ignore_memory=self.experiment.ignore_memory)
        check_plans_valid(exp, variable, values, {s.plan: s.time_s for s in result.series_for(exp.links[0].label)})
        from shardwise.analyses.sweep_invalid import crossover_notes

        notes = built.notes + swept_notes(self.experiment, [variable]) + crossover_notes(exp, result)
        return CrossoverResult(self, result, built.describe(variable), notes)


# the flag whose value a --vary of each variable replaces: given beside it, it changes nothing
SWEPT_FLAGS = {"batch": "global_batch", "layers": "layers", "hidden": "hidden", "seq_len": "seq_len"}


def swept_notes(exp: ExperimentRequest, variables: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """A note per flag given that a swept variable replaces (the explorer sends both: not an error)."""
    given = exp.given()
    out = []
    for variable in variables:
        name = SWEPT_FLAGS.get(variable)
        if name is not None and given.get(name) is not None:
            flag = "--" + name.replace("_", "-")
            out.append(f"{flag} {given[name]} is not used: --vary {variable} sweeps it")
    return tuple(out)


# ---------------------------------------------------------------------------------- sweep ---
SWEEP_OWN = {"--vary": F.Field("vary", "list", ()), "--breakdown": F.Field("breakdown", "bool", False)}


@dataclass(frozen=True)
class SweepResult:
    request: SweepRequest
    result: Any  # analyses.sweep.SweepResult (or the streamed totals)
    elapsed_s: float
    notes: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        """The summary `sweep --json` prints."""
        from shardwise import export
        from shardwise.requests.experiment import stack_layout_fields

        return {
            **export.sweep_dict(self.result, self.elapsed_s),
            **self.request.experiment.stack_fields(),  # the framework and recompute priced
            **stack_layout_fields(self.request.experiment),  # predict's, not the plans' as written
            "notes": list(self.notes),
            "command": self.request.command(),
        }

    def columns(self) -> dict[str, Any]:
        """The grid, one row per link and point (what `sweep -o FILE` writes)."""
        return dict(self.result.columns())

    def csv_text(self) -> str:
        """The grid as CSV, what `sweep -o -` prints (as `CrossoverResult.csv_text`; review 40 #18)."""
        from shardwise.tables import csv_text

        return csv_text(self.columns())


@dataclass(frozen=True)
class SweepRequest:
    """`shardwise sweep`: every plan on every link over the outer product of the `vary` grids."""

    experiment: ExperimentRequest = field(default_factory=ExperimentRequest)
    vary: tuple[str, ...] = ()
    breakdown: bool = False

    def __post_init__(self) -> None:
        require(self, "experiment", ExperimentRequest)
        object.__setattr__(self, "vary", F.parse_value(SWEEP_OWN["--vary"], self.vary, "vary"))
        if not self.vary:
            raise SpecError("--vary: give at least one variable to sweep (e.g. --vary batch=1..64)")
        if self.breakdown and self.experiment.cost_model == "textbook":
            raise SpecError("--breakdown: the textbook cost model has no terms; use --cost-model physical")

    @classmethod
    def from_argv(cls, argv: list[str] | tuple[str, ...] | str) -> SweepRequest:
        exp, own = _split(_strip(argv, "sweep"), SWEEP_OWN)
        return cls(exp, own.get("vary", ()), own.get("breakdown", False))

    def to_argv(self) -> list[str]:
        varies = [a for v in self.vary for a in ("--vary", v)]
        return ["sweep", *self.experiment.to_argv(), *varies, *(["--breakdown"] if self.breakdown else [])]

    def command(self) -> str:
        return "shardwise " + shlex.join(self.to_argv())

    def grid(self) -> list[tuple[str, Any]]:
        """(variable, values) per --vary; each variable once."""
        from shardwise.analyses.vary import parse_vary

        grid = [parse_vary(v) for v in self.vary]
        if len({name for name, _ in grid}) != len(grid):
            raise SpecError("--vary: each variable may be varied once")
        return grid

    def configurations(self, exp: Any) -> int:
        total = len(exp.links) * len(exp.plans)
        for _, values in self.grid():
            total *= len(values)
        return total

    def run(self, progress: Any = None, hint: str = "", built: BuiltExperiment | None = None) -> SweepResult:
        """The whole grid in memory (`analyses.sweep.run_sweep`; at most `analyses.sweep.MAX_CONFIGURATIONS`
        configurations: `hint` is added to the refusal); a plan invalid everywhere is an error.
        `built`: the experiment already built (else built here)."""
        import time

        from shardwise.analyses.sweep import check_size, run_sweep

        built = built or self.experiment.build()
        exp, grid = built.experiment, self.grid()
        check_size(self.configurations(exp), hint=hint)
        start = time.perf_counter()
        ignore = self.experiment.ignore_memory
        result = run_sweep(exp, grid, breakdown=self.breakdown, progress=progress, ignore_memory=ignore)
        check_valid_somewhere(exp, result, grid)
        notes = (
            built.notes + swept_notes(self.experiment, [name for name, _ in grid]) + invalid_notes(exp, result, grid)
        )
        return SweepResult(self, result, time.perf_counter() - start, notes)

    def stream(self, write: Any, progress: Any = None, built: BuiltExperiment | None = None) -> SweepResult:
        """The grid handed to `write` block by block as it is evaluated (memory stays that of one
        block, whatever the grid); a plan invalid everywhere is an error after the last block."""
        import time

        from shardwise.analyses.sweep import stream_sweep

        built = built or self.experiment.build()
        exp, grid = built.experiment, self.grid()
        start = time.perf_counter()
        ignore = self.experiment.ignore_memory
        totals = stream_sweep(exp, grid, write, progress=progress, breakdown=self.breakdown, ignore_memory=ignore)
        check_valid_somewhere(exp, totals, grid)
        notes = (
            built.notes + swept_notes(self.experiment, [name for name, _ in grid]) + invalid_notes(exp, totals, grid)
        )
        return SweepResult(self, totals, time.perf_counter() - start, notes)


def invalid_notes(exp: Any, result: Any, grid: list[Any]) -> tuple[str, ...]:
    """A note per plan invalid on part of the grid (`analyses.sweep_invalid.invalid_notes`)."""
    from shardwise.analyses.sweep_invalid import invalid_notes as notes

    return notes(exp, result.invalid_tallies(), dict(grid))


def check_valid_somewhere(exp: Any, result: Any, grid: list[Any]) -> None:
    """A plan invalid at every point of the grid is a user error, named with the rule it breaks
    (not a plan that wins no cell)."""
    import numpy as np

    from shardwise.analyses.evaluate import why_invalid

    for plan in exp.plans:
        if not result.valid_somewhere(plan.label):
            first = {name: np.asarray(values)[:1] for name, values in grid}
            rule = why_invalid(exp, plan, exp.links[0].link, first)
            raise SpecError(f"--plan {plan.label}: invalid at every point of the grid ({rule or 'see the rules'})")
