"""`shardwise calibrate` as a request: the user's measured runs (a CSV of runs and trainer logs,
with what a log does not state given as `--set KEY=VALUE`) fitted to the cost model's physical
parameters. `run()` reads and checks the runs, explains the far ones and fits; the calibration
file is written by the caller (`CalibrateResult.document`, then `calibration.store.save`).

    >>> from shardwise.requests.calibrate import CalibrateRequest
    >>> result = CalibrateRequest(("examples/calibration/h100_runs.csv",)).run()  # doctest: +SKIP
    >>> result.fit.values["matmul_efficiency"]  # doctest: +SKIP
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from typing import Any

from shardwise.errors import SpecError

LEFT_BY_NEED = "chosen by need: the evidence of the runs is better without it"


@dataclass(frozen=True)
class CalibrateRequest:
    """`runs`: CSV files of runs and trainer logs (one run per log; one path alone is one file);
    `given`: for logs, the run columns a log does not state ((key, value) pairs or a dict, e.g.
    ("system", "dgx-h100")); `params`: fit only these parameters (names, or "a,b" as --params takes
    them); `max_params`: at most this many."""

    runs: tuple[str, ...] = ()
    given: tuple[tuple[str, str], ...] = ()
    params: tuple[str, ...] | None = None
    max_params: int | None = None

    def __post_init__(self) -> None:
        # one file given as a string (or a path) is one file, not its characters
        runs = (self.runs,) if isinstance(self.runs, (str, os.PathLike)) else self.runs
        object.__setattr__(self, "runs", tuple(str(r) for r in runs))
        given = self.given.items() if isinstance(self.given, dict) else self.given
        object.__setattr__(self, "given", tuple((str(k).strip().lower().replace("-", "_"), str(v)) for k, v in given))
        if self.params is not None:
            from shardwise.calibration.parameters import BY_NAME

            # "a,b" as --params takes it
            params = self.params.split(",") if isinstance(self.params, str) else self.params
            names = tuple(str(n).strip() for n in params)
            bad = [n for n in names if n not in BY_NAME]
            if bad or not names:
                raise SpecError(
                    f"--params: {bad[0] if bad else ''!r} is not a parameter; choose from {', '.join(BY_NAME)}"
                )
            object.__setattr__(self, "params", names)
        if self.max_params is not None and not 0 <= self.max_params <= 8:
            raise SpecError(f"--max-params: {self.max_params} is not allowed; give a whole number from 0 to 8")
        if not self.runs:
            raise SpecError("calibrate: give RUNS.csv (or trainer logs), or --suggest N with a job")
        if self.given and all(p.lower().endswith(".csv") for p in self.runs):
            raise SpecError("--set fills in what a trainer log does not state; a CSV states its columns itself")

    def to_argv(self) -> list[str]:
        out = ["calibrate", *self.runs]
        for key, value in self.given:
            out += ["--set", f"{key}={value}"]
        if self.params is not None:
            out += ["--params", ",".join(self.params)]
        if self.max_params is not None:
            out += ["--max-params", str(self.max_params)]
        return out

    def command(self) -> str:
        return "shardwise " + shlex.join(self.to_argv())

    def read(self) -> list[Any]:
        """The runs (`calibration.runs.MeasuredRun`), each checked; the same run twice is refused."""
        from shardwise.calibration.logs import read_log
        from shardwise.calibration.runs import check_distinct, from_rows, read_runs

        given = dict(self.given)
        out = []
        for path in self.runs:
            if path.lower().endswith(".csv"):
                out += read_runs(path)
            else:
                out += from_rows([(read_log(path, given), path)])
        check_distinct(out)
        return out

    def run(self) -> CalibrateResult:
        import numpy as np

        from shardwise.calibration import fit as fitting

        measured = self.read()
        values = np.array([r.measured for r in measured])
        notes = explain_far(measured, values)
        if self.params is None:
            from shardwise.calibration.explain import explaining_fit

            result = explaining_fit([r.case for r in measured], values, self.max_params, check=False)
        else:
            result = fitting.fit([r.case for r in measured], values, self.max_params, self.params, check=False)
        from shardwise.calibration.confound import confounded

        pairs = confounded([r.case for r in measured], values, result)
        return CalibrateResult(self, measured, values, tuple(notes), result, pairs)


@dataclass(frozen=True)
class CalibrateResult:
    request: CalibrateRequest
    measured: list[Any]  # calibration.runs.MeasuredRun, in the order read
    values: Any  # each run's measurement (its metric: seconds or tokens/s)
    notes: tuple[str, ...]  # what would explain each far run
    fit: Any  # calibration.fit.FitResult
    confounded: tuple[Any, ...] = ()  # calibration.confound.Confound: parameters the runs cannot tell apart

    def document(self) -> dict[str, Any]:
        """The calibration file's contents (`calibration.store.document`)."""
        from shardwise.calibration import store
        from shardwise.calibration.checks import physical

        runs = self.measured
        gpus = [r.scenario.cluster.gpu.name for r in runs]
        return store.document(
            self.fit,
            list(self.request.runs),
            [r.run_id for r in runs],
            gpus,
            self.values,
            [r.metric for r in runs],
            self.left_out,
            [r.framework_file for r in runs if r.framework_file],
            {n: physical([r.scenario for r in runs], n, self.fit.values[n]) for n in self.fit.fitted},
            self.checks(),
            store.training_stacks([r.case for r in runs]),
        )

    @property
    def left_out(self) -> str:
        """Why a parameter the fit names no reason for stayed at its prior: without --params the
        parameters are chosen by need (`calibration.explain`), so one it left out was not "not asked
        for" (walkthrough): the evidence of the runs did without it."""
        return "not asked for" if self.request.params is not None else LEFT_BY_NEED

    def why_not_fitted(self) -> dict[str, str]:
        """Each parameter left at its prior, with why (as the calibration file says it)."""
        from shardwise.calibration.parameters import PARAMETERS

        fit = self.fit
        return {p.name: fit.not_fitted.get(p.name, self.left_out) for p in PARAMETERS if p.name not in fit.fitted}

    def checks(self) -> list[str]:
        """What to check before using the calibration (`calibration.checks`): fitted values at a limit
        of their range, runs on several GPUs or of several model families."""
        from shardwise.calibration.checks import limit_notes, misfit_notes, mixture_notes

        runs = self.measured
        return (
            limit_notes(self.fit)
            + misfit_notes(self.fit, [r.run_id for r in runs])
            + mixture_notes([r.scenario for r in runs], self.fit)
        )

    def serving_note(self) -> str | None:
        """How the serving runs were priced, where there are any: each as one static batch (what
        `calibration.runs` builds), which `serve` prices only with --batching static; its default
        keeps `concurrency` requests in flight, a longer TPOT at the same number (llama3-70b on
        eight RTX 4090s at 32: 70 ms static, 179 ms in flight)."""
        serving = sum(r.metric != "step_time_s" for r in self.measured)
        if not serving:
            return None
        return (
            f"the {serving} serving run(s) are priced as one static batch of `concurrency` sequences each, "
            "prefilled together then decoded together, as `serve --batching static` prices them; `serve` keeps "
            "`--concurrency` requests in flight by default, a different measurement at the same number: "
            "measure a fixed batch, and compare with --batching static"
        )

    def widened_note(self) -> str | None:
        """Where the runs pulled a parameter far from its prior: which, and how much its prior was
        widened (`fit.Fit.widened`); None where none was."""
        fit = self.fit
        if not fit.widened:
            return None
        from shardwise.calibration.fit import CONFLICT_Z
        from shardwise.calibration.parameters import BY_NAME

        widen = ", ".join(sorted({f"{BY_NAME[n].widen:g}" for n in fit.widened}))
        return (
            f"the runs pull {', '.join(fit.widened)} more than {CONFLICT_Z:g} prior sd from the presets' "
            f"value (a stack unlike the public ones): its prior was widened {widen} x, which explains them better"
        )

    def as_dict(self, output: str) -> dict[str, Any]:
        """The JSON `calibrate --json` prints: the file's contents, where it went, the far runs, how
        serving runs were priced (`serving_note`, null without them), the parameters whose prior was
        widened (`widened`), and the notes (model files without `family`, the widened priors)."""
        from shardwise.calibration.confound import lines

        widened = self.widened_note()
        return {
            **self.document(),
            "output": output,
            "explained": list(self.notes),
            "serving": self.serving_note(),
            "widened": list(self.fit.widened),
            "confounded": [
                {"fitted": c.fitted, "other": c.other, "score_gap": c.score_gap, "how": c.how()}
                for c in self.confounded
            ],
            "notes": model_notes(self.measured) + ([widened] if widened else []) + lines(self.confounded),
        }


def model_notes(runs: list[Any]) -> list[str]:
    """The family note of each model file without `family` the runs name, once each."""
    return list(dict.fromkeys(r.model_note for r in runs if r.model_note))


def explain_far(measured: list[Any], values: Any) -> list[str]:
    """One line per far run saying what would have to be true to explain it (`calibration.explain`);
    a SpecError naming what was tried for a run nothing explains."""
    from shardwise.calibration.cases import Evaluator
    from shardwise.calibration.far import refuse_unexplained

    cases = [r.case for r in measured]
    predicted = Evaluator(cases).step_s({})[0]
    given = [getattr(r, "given", ("", 0.0)) for r in measured]
    return refuse_unexplained(cases, values, predicted, [r.where for r in measured], given)
