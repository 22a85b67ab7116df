"""Runs far from the model's prediction, checked before a fit (`shardwise calibrate` and
`calibration.fit.fit` alike): a run more than MAX_MISS x off is explained (`calibration.explain`:
which parameter, at what value within its physical range, would make the model predict it) and
refused only when no parameter does (a unit slip: ms for s, per-GPU for total, or a run the model
cannot express)."""

from __future__ import annotations

import math
from typing import Any

from shardwise.errors import SpecError

MAX_MISS = 3.0


def far_runs(cases: list[Any], measured: Any, predicted: Any) -> list[int]:
    """The runs the model misses by more than MAX_MISS either way (a `shardwise measure` layer stack,
    which has no unit to slip, never)."""
    from shardwise.calibration.cases import LayerStackCase

    out = []
    for i, (case, m, t) in enumerate(zip(cases, measured, predicted, strict=True)):
        ratio = float(t) / float(m)
        if isinstance(case, LayerStackCase) or (math.isfinite(ratio) and 1 / MAX_MISS <= ratio <= MAX_MISS):
            continue
        out.append(i)
    return out


def refuse_unexplained(
    cases: list[Any],
    measured: Any,
    predicted: Any,
    where: list[str] | None = None,
    given: list[tuple[str, float]] | None = None,
) -> list[str]:
    """One line per far run (`far_runs`) saying what would explain it; a SpecError for the first far
    run that no parameter within its physical range explains (`shardwise calibrate` refuses it too):
    its first line quotes the column and value the user wrote (`given`, per run: ("", 0) for the
    measurement itself) beside the prediction in the same unit, the parameters tried on a second."""
    from shardwise.calibration.explain import describe, explain_run, head, tried

    notes = []
    for i in far_runs(cases, measured, predicted):
        ex = explain_run(cases[i], float(measured[i]))
        label = where[i] if where is not None else f"calibrate: run {i + 1}"
        metric, wrote = getattr(cases[i], "metric", "step_time_s"), given[i] if given else ("", 0.0)
        if not ex.found:
            line = head(label, metric, float(measured[i]), ex, wrote)
            raise SpecError(
                f"{line}, and no parameter within its physical range explains it: a unit slip? check the unit "
                f"(seconds, tokens/s per GPU, TFLOP/s per GPU) and the layout, or leave the run out\n  {tried(ex)}"
            )
        notes.append(describe(label, metric, float(measured[i]), ex, wrote))
    return notes
