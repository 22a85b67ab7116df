"""`shardwise validate collectives`: the collective model against published nccl-tests curves."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import click

SPLITS = (("dev", "dev (set a constant)"), ("holdout", "holdout (untouched)"))
HEAD = ("curve", "GPUs", "collective", "split", "sizes", "points", "MAPE", "median error", "note")


def _binary(n_bytes: float) -> str:
    """nccl-tests' sizes: powers of two, in KiB, MiB, GiB."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.3g} {unit}"
    return f"{n_bytes:.0f} B"


def _sizes(points: list[Any]) -> str:
    if all(p.peak for p in points):
        return f"peak (priced at {_binary(points[0].size_bytes)})"
    low, high = min(p.size_bytes for p in points), max(p.size_bytes for p in points)
    return _binary(low) if low == high else f"{_binary(low)}-{_binary(high)}"


def _cells() -> tuple[list[tuple[str, ...]], list[Any], dict[str, dict[str, float]]]:
    from shardwise.analyses.collective_validation import curves, summary, validate_collectives

    points = validate_collectives()
    cells = []
    for curve in curves():
        mine = [p for p in points if p.curve == curve.key]
        s = summary(mine)
        ranks = sorted({p.ranks for p in mine})
        gpus = mine[0].hardware.split(" ", 1)[1]
        count = f"{ranks[0]}" if len(ranks) == 1 else f"{ranks[0]}-{ranks[-1]}"
        ops = ", ".join(dict.fromkeys(p.op.replace("_", "-") for p in mine))
        label = dict(SPLITS)[curve.split]
        cells.append(
            (
                curve.key,
                f"{count} {gpus}",
                ops,
                label,
                _sizes(mine),
                str(s["points"]),
                f"{s['mape']:.1%}",
                f"{s['median_error']:+.1%}",
                curve.note,
            )
        )
    totals = {split: summary([p for p in points if p.split == split]) for split, _ in SPLITS}
    return cells, points, totals


def show_collectives(as_json: bool, markdown: bool, show_rows: str) -> None:
    from shardwise.analyses.collective_validation import NOT_COMPARED

    cells, points, totals = _cells()
    listed = [p for p in points if show_rows == "all" or p.split == show_rows]
    if as_json:
        from shardwise import export

        rows = [{**asdict(p), "error": p.error} for p in points]
        curves = [dict(zip(HEAD, c, strict=True)) for c in cells]
        click.echo(export.dumps({"curves": curves, "splits": totals, "points": rows, "not_compared": NOT_COMPARED}))
        return
    total_text = "; ".join(
        f"{label}: {totals[split]['points']} points, MAPE {totals[split]['mape']:.1%}, median error "
        f"{totals[split]['median_error']:+.1%}"
        for split, label in SPLITS
    )
    note = (
        "Errors in the collective's time (predicted - measured) / measured, on the system preset of each curve's "
        "hardware; nccl-tests with NCCL's own per-call latency."
    )
    from shardwise.cli.render import console, print_table

    print_table(HEAD, cells, "the collective model against published measurements", {5, 6, 7}, markdown)
    if markdown:
        click.echo(f"\n{total_text}.\n\n{note} {NOT_COMPARED[0].upper()}{NOT_COMPARED[1:]}.")
    else:
        console().print(total_text)
        console().print(f"{note} {NOT_COMPARED}")
    if show_rows != "none":
        click.echo("")
        for p in listed:
            click.echo(
                f"{p.curve} [{p.split}] {p.ranks} GPUs, {p.op}, {p.size_bytes:.0f} B: "
                f"measured {p.measured_s * 1e6:.4g} us, predicted {p.predicted_s * 1e6:.4g} us ({p.error:+.1%})"
            )
