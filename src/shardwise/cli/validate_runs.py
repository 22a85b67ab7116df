"""`shardwise validate --runs FILE`: your own measured runs against the model (`analyses.runs_check`)."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

import click

RATES = ("throughput_tokens_per_s",)  # measurements that are not times
GROUP_HEAD = ("group", "stack", "runs", "MAPE", "bias", "80% covers", "interval")
RANK_HEAD = ("group", "stack", "layouts", "Spearman", "top-1 regret", "predicted best", "measured best")


def _number(value: float, unit: str) -> str:
    if unit == "s":
        from shardwise.units import format_seconds

        return format_seconds(value)
    return f"{value:,.4g}"


def _short(name: str, width: int = 48) -> str:
    """A long group name (a source's whole citation) cut for the terminal; --markdown and --json keep it."""
    return name if len(name) <= width else name[: width - 3] + "..."


def _group_dict(g: Any) -> dict[str, Any]:
    """One group as `--json` writes it: under the keys the other tables use (review 40 #8:
    `mean_absolute_error`, as `validate --json`, where it was `mape`)."""
    return {
        "name": g.name,
        "stacks": g.stacks,
        "runs": g.runs,
        "mean_absolute_error": g.mape,
        "bias": g.bias,
        "coverage": g.coverage,
        "median_half_width": g.median_half_width,
    }


def _run_dict(r: Any) -> dict[str, Any]:
    """One run as `--json` writes it: `id` (as `validate --json`'s rows and calibrate's `residuals`),
    its 80% interval `predicted_low`/`predicted_high` (the `*_low`/`*_high` of every interval), and
    null, not '', where a run names no group (review 40 #8)."""
    return {
        "id": r.run_id,
        "where": r.where,
        "group": r.group or None,
        "stack": r.stack,
        "metric": r.metric,
        "measured": r.measured,
        "predicted": r.predicted,
        "predicted_low": r.low,
        "predicted_high": r.high,
        "label": r.label,
        "fits_in_memory": r.fits_in_memory,
        "error": r.error,
        "covered": r.covered,
    }


def show_runs(path: str, calibration: str | None, as_json: bool, markdown: bool, show_rows: str) -> None:
    from shardwise.analyses.runs_check import check_runs
    from shardwise.calibration.runs import read_runs

    runs = read_runs(path)
    from shardwise.cli.options import echo_notes
    from shardwise.requests.calibrate import model_notes

    notes = model_notes(runs)
    echo_notes(notes)
    fitted, basis = None, ""
    if calibration:
        from shardwise.calibration import store

        cal = store.load(calibration)
        fitted, basis = cal.fit, f"calibration {cal.path} ({cal.runs} run(s))"
    report = check_runs(runs, fitted)
    if fitted is not None:  # the fit's own spread (`intervals.spread`); runs it was fitted on are in-sample
        basis += ", its own spread and parameters' uncertainty (runs it was fitted on are in-sample here)"
    else:
        basis = report.basis
    if as_json:
        from shardwise import export

        click.echo(
            export.dumps(
                {
                    "runs_file": str(path),
                    "interval_basis": basis,
                    "groups": [_group_dict(g) for g in report.groups],
                    "ranking_within_groups": [{**asdict(g), "release": g.release or None} for g in report.rankings],
                    "runs": [_run_dict(r) for r in report.runs],
                    "notes": notes,
                }
            )
        )
        return
    from shardwise.cli.render import console, print_table

    cells = [
        (
            g.name if markdown else _short(g.name),
            g.stacks,
            str(g.runs),
            f"{g.mape:.1%}",
            f"{g.bias:+.1%}",
            f"{g.coverage:.0%}",
            f"-{1 - math.exp(-g.median_half_width):.0%}/+{math.exp(g.median_half_width) - 1:.0%}",
        )
        for g in report.groups
    ]
    title = f"{path}: each run predicted ({'calibrated' if fitted else 'uncalibrated'}) against its measurement"
    print_table(GROUP_HEAD, cells, title, {2, 3, 4, 5, 6}, markdown)
    if report.rankings:
        rank_cells = [
            (
                g.group if markdown else _short(g.group),
                g.stack,
                str(g.layouts),
                "-" if math.isnan(g.spearman) else f"{g.spearman:.2f}",
                f"{g.regret:.1%}",
                g.predicted_best,
                g.measured_best,
            )
            for g in report.rankings
        ]
        click.echo("")
        print_table(RANK_HEAD, rank_cells, "layouts ranked within each group (tokens/s per GPU)", {2, 3, 4}, markdown)
    note = (
        "Errors: (predicted - measured) / measured, in each run's own measurement (a step time for training). "
        f"80% interval: {basis}. Ranking: training runs of one model on one cluster, GPU count and sequence "
        "length by one stack (and group), 3 layouts or more; "
        + (
            "top-1 regret: how much slower the layout the model ranks first measured than the fastest"
            if report.rankings
            else "no group here has 3 layouts, so none is ranked"
        )
    )
    unfit = [r.run_id for r in report.runs if r.fits_in_memory is False]
    if unfit:
        shown = ", ".join(unfit[:8]) + (f" and {len(unfit) - 8} more" if len(unfit) > 8 else "")
        note += (
            f". {len(unfit)} of the training runs do not fit in memory as the model counts it ({shown}): they "
            "ran, so the memory model is short for them (`shardwise validate memory`); their times are priced anyway"
        )
    if any(r.metric != "step_time_s" for r in report.runs):
        note += (
            ". Serving runs are priced as `calibrate` prices them: a static batch of `concurrency` requests "
            "(`serve --batching static`)"
        )
    if markdown:
        click.echo(f"\n{note}.")
    else:
        console().print(f"{note}.")
    if show_rows != "none":
        click.echo("")
        for r in report.runs:
            unit = "" if r.metric in RATES else "s"
            inside = "inside" if r.covered else "outside"
            name = r.run_id if r.run_id == r.where else f"{r.run_id} ({r.where})"  # no id: the row's place
            click.echo(
                f"{name} {r.label}, {r.stack}: {r.metric} measured {_number(r.measured, unit)}, "
                f"predicted {_number(r.predicted, unit)} ({r.error:+.1%}), 80% "
                f"{_number(r.low, unit)}-{_number(r.high, unit)} ({inside})"
            )


def check_options(tables: tuple[str, ...], calibrated: bool, calibration: Any, runs: Any, plot: Any) -> None:
    """--runs stands alone; --calibration needs --runs."""
    from shardwise.errors import SpecError

    if calibration is not None and runs is None:
        raise SpecError("validate --calibration FILE prices your runs with it; give them with --runs FILE")
    if runs is not None and (tables or calibrated or plot):
        raise SpecError(
            "validate --runs FILE checks your own runs; give no table names, --calibrated or --plot with it"
        )
    from shardwise.files import refuse_stdin

    refuse_stdin(runs, "--runs")
    refuse_stdin(calibration, "--calibration")
    if runs == "":
        raise SpecError("--runs: '' is not a file; give the CSV of your runs (the columns: docs/calibration.md)")
    if runs is not None and not str(runs).lower().endswith(".csv"):  # a trainer log read as CSV (review 37)
        raise SpecError(
            f"--runs {runs}: give the CSV of your runs (the columns: docs/calibration.md); a trainer log is read "
            f"by `shardwise calibrate {runs} --set ...`, which writes the runs' calibration"
        )
