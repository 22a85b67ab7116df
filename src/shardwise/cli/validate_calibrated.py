"""`shardwise validate --calibrated`: learning curves of calibration on the public runs."""

from __future__ import annotations

from typing import Any

import click

from shardwise.calibration.spreads import SERVING_MEASUREMENTS

SPLITS = ("dev", "holdout", "serving")
TITLES = {
    "dev": "training, dev split (the GEMM prior and the spreads were set on it)",
    "holdout": "training, holdout split (untouched)",
    "serving": (
        f"serving, the {SERVING_MEASUREMENTS} published measurements of `validate inference` "
        "(not split: they set no constant)"
    ),
}


def show_calibrated(as_json: bool, markdown: bool, plot: str | None, draws: int) -> None:
    import numpy as np

    from shardwise.analyses import calibration_validation as cv

    if plot:
        from shardwise.cli.options import check_output_path

        check_output_path(plot, (".png", ".svg", ".pdf"), "--plot")
    runs = cv.public_runs() + cv.serving_runs()
    total = sum(_fits(cv, runs, split, draws) for split in SPLITS)
    curves: list[Any] = []
    transfer: list[Any] = []
    from shardwise.cli.render import progress_bar

    with progress_bar(total, "calibrating") as step:
        for split in SPLITS:
            curves += cv.learning_curves(runs, split, draws=draws, progress=step)
            curves += cv.leave_one_out(runs, split, progress=step)
            if split != "serving":  # a serving group varies the workload, not the layout
                transfer += cv.layout_transfer(runs, split, progress=step)
    spreads = cv.dev_spreads([r for r in runs if r.split == "dev"])
    summary = {
        split: {
            k: {
                "mape": float(np.mean([p.mape for p in curves if p.split == split and p.k == k])),
                "coverage80": float(np.mean([p.coverage80 for p in curves if p.split == split and p.k == k])),
                "stacks": sum(1 for p in curves if p.split == split and p.k == k),
            }
            for k in (0, *cv.KS, cv.LOO)
            if any(p.split == split and p.k == k for p in curves)
        }
        for split in SPLITS
    }
    figure = _plot(curves, summary, plot) if plot else None
    if as_json:
        from dataclasses import asdict

        from shardwise import export

        click.echo(
            export.dumps(
                {
                    "draws": draws,
                    "dev_spreads": asdict(spreads),
                    "seed": cv.SEED,
                    "summary": summary,
                    "learning_curves": [asdict(p) for p in curves],
                    "layout_transfer": [asdict(t) for t in transfer],
                    "figure": figure,
                }
            )
        )
        return
    if markdown:
        _markdown(curves, transfer, summary, draws)
    else:
        _tables(curves, transfer, summary, draws)
    click.echo(
        f"\ndev spreads (log): uncalibrated RMS {spreads.uncalibrated_rms:.3f} over {spreads.runs} runs (the "
        f"uncalibrated interval); scatter inside a group {spreads.within_group:.3f}, group means beyond it "
        f"{spreads.between_groups:.3f} (the GEMM prior); calibrated residual {spreads.calibrated_residual:.3f} "
        "(a calibration's spread prior)"
    )
    if figure:
        click.echo(f"figure: {figure}")


def _fits(cv: Any, runs: list[Any], split: str, draws: int) -> int:
    from collections import Counter

    n = 0
    for members in cv._by_stack(runs, split).values():
        n += 1 + sum(draws for k in cv.KS if k <= len(members) - 2)  # the draws, then leave-one-out
        groups = Counter(r.group for r in members)
        n += sum(c for c in groups.values() if c >= 2) if split != "serving" else 0
    return n


COLUMNS = (0, 1, 2, 4, 8, -1)  # uncalibrated, k runs (calibration_validation.KS), leave one out (LOO)


def _header(k: int) -> str:
    return {0: "uncalibrated", -1: "all but one"}.get(k, f"k={k}")


def _cell(p: Any) -> str:
    return f"{p.mape:.1%} ({p.coverage80:.0%})"


def _tables(curves: list[Any], transfer: list[Any], summary: dict[str, Any], draws: int) -> None:
    from rich.table import Table

    from shardwise.cli.render import console

    out = console()
    for split in SPLITS:
        table = Table(
            title=f"{TITLES[split]}: mean absolute error of the runs left out (share inside the 80% interval), "
            f"calibrated on k runs of the same stack ({draws} random draws each) or on all but the one predicted",
            title_justify="left",
            header_style="bold",
        )
        table.add_column("stack (source / system)")
        table.add_column("runs", justify="right")
        for k in COLUMNS:
            table.add_column(_header(k), justify="right")
        stacks = list(dict.fromkeys(p.stack for p in curves if p.split == split))
        for s in stacks:
            pts = {p.k: p for p in curves if p.split == split and p.stack == s}
            runs = next(iter(pts.values())).runs
            table.add_row(s, str(runs), *(_cell(pts[k]) if k in pts else "" for k in COLUMNS))
        row = summary[split]
        table.add_row(
            "[bold]mean over stacks[/]",
            "",
            *(f"{row[k]['mape']:.1%} ({row[k]['coverage80']:.0%})" if k in row else "" for k in COLUMNS),
        )
        out.print(table)
    table = Table(
        title="calibrated on one layout, predicting the other layouts of the same model, system and GPU count",
        title_justify="left",
        header_style="bold",
    )
    for col in ("split", "stack", "pairs", "uncalibrated", "calibrated", "in 80% interval"):
        table.add_column(col, justify="left" if col in ("split", "stack") else "right")
    for t in transfer:
        before, after = f"{t.mape_before:.1%}", f"{t.mape_after:.1%}"
        table.add_row(t.split, t.stack, str(t.pairs), before, after, f"{t.coverage80:.0%}")
    out.print(table)
    out.print(
        "dev: the split looked at while developing (the priors' width and the spreads were set on it); "
        "holdout: untouched. See docs/calibration.md."
    )


def _markdown(curves: list[Any], transfer: list[Any], summary: dict[str, Any], draws: int) -> None:
    for split in SPLITS:
        click.echo(f"\n{TITLES[split]}, {draws} random draws per k:")
        click.echo("MAPE of the runs left out (share inside the 80% interval)")
        click.echo()
        click.echo("| stack | runs | " + " | ".join(_header(k) for k in COLUMNS) + " |")
        click.echo("|---|---:|" + "---:|" * len(COLUMNS))
        for s in dict.fromkeys(p.stack for p in curves if p.split == split):
            pts = {p.k: p for p in curves if p.split == split and p.stack == s}
            runs = next(iter(pts.values())).runs
            cells = " | ".join(_cell(pts[k]) if k in pts else "" for k in COLUMNS)
            click.echo(f"| {s} | {runs} | {cells} |")
        row = summary[split]
        cells = " | ".join(
            f"**{row[k]['mape']:.1%} ({row[k]['coverage80']:.0%})**" if k in row else "" for k in COLUMNS
        )
        click.echo(f"| **mean over stacks** | | {cells} |")
    click.echo("\n| split | stack | pairs | uncalibrated | calibrated on one layout | in 80% interval |")
    click.echo("|---|---|---:|---:|---:|---:|")
    for t in transfer:
        click.echo(
            f"| {t.split} | {t.stack} | {t.pairs} | {t.mape_before:.1%} | {t.mape_after:.1%} | {t.coverage80:.0%} |"
        )


def _plot(curves: list[Any], summary: dict[str, Any], path: str) -> str:
    from shardwise import plots
    from shardwise.plots.calibration import learning_curves

    return str(plots.save(learning_curves(curves, summary), path))
