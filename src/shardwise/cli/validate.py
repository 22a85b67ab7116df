"""`shardwise validate`: predicted vs published, per table, with the error."""

from __future__ import annotations

from typing import Any

import click

TABLE_CHOICES = ["narayanan21_table1", "korthikanti22_table5", "korthikanti22_table4", "inference"]


def _run(table: str) -> tuple[list[Any], str, str]:
    """(rows, citation, note) of one table."""
    if table == "inference":
        from shardwise.analyses.serving_validation import CITATION, validate_serving

        rows, skipped = validate_serving()
        return rows, CITATION, f"{skipped} FP4 (B200/GB200) measurements left out: FP4 is not modelled"
    from shardwise.analyses.validation import CITATIONS
    from shardwise.analyses.validation import validate as run

    return run(table), CITATIONS[table], ""


@click.command()
@click.argument("tables", nargs=-1, type=click.Choice(TABLE_CHOICES))
@click.option("--json", "as_json", is_flag=True, help="Print rows and mean absolute errors as JSON.")
@click.option("--markdown", is_flag=True, help="Print Markdown tables (as in the README).")
def validate(tables: tuple[str, ...], as_json: bool, markdown: bool) -> None:
    """Predict the published training runs and compare (all tables by default).

    narayanan21_table1: Narayanan et al. 2021 Table 1 (TFLOP/s per GPU);
    korthikanti22_table5: Korthikanti et al. 2022 Table 5 (seconds per iteration);
    korthikanti22_table4: Korthikanti et al. 2022 Table 4 (one layer, ms);
    inference: TensorRT-LLM's published throughput (FP8, H100/H200, Llama 3 8B/70B/405B) and
    FasterTransformer GPT-13B latencies (A100, TP 1 and 2).
    """
    from shardwise.analyses.validation import mean_absolute_error

    chosen = list(tables) or TABLE_CHOICES
    runs = {t: _run(t) for t in chosen}
    results = {t: r[0] for t, r in runs.items()}
    if as_json:
        from shardwise import export

        click.echo(
            export.dumps(
                {
                    t: {
                        "source": runs[t][1],
                        "mean_absolute_error": mean_absolute_error(rows),
                        "rows": [
                            {
                                "id": r.run_id,
                                "run": r.label,
                                "metric": r.metric,
                                "predicted": r.predicted,
                                "measured": r.measured,
                                "error": r.error,
                                "source": r.source,
                            }
                            for r in rows
                        ],
                    }
                    for t, rows in results.items()
                }
            )
        )
        return
    if markdown:
        for t, rows in results.items():
            click.echo(f"\n{runs[t][1]}: {_metric(rows)}, mean absolute error {mean_absolute_error(rows):.1%}\n")
            click.echo("| run | configuration | metric | predicted | measured | error |")
            click.echo("|---|---|---|---:|---:|---:|")
            for r in rows:
                click.echo(f"| {r.run_id} | {r.label} | {r.metric} | {r.predicted:,.2f} | {r.measured:,.2f} "
                           f"| {r.error:+.1%} |")
            if runs[t][2]:
                click.echo(f"\n{runs[t][2]}.")
        return
    from rich.table import Table

    from shardwise.cli.render import console

    out = console()
    for t, rows in results.items():
        mixed = len({r.metric for r in rows}) > 1
        table = Table(
            title=f"{t}: {_metric(rows)}  (mean absolute error {mean_absolute_error(rows):.1%})",
            title_justify="left",
            header_style="bold",
        )
        for col, just in (
            ("run", "left"),
            ("configuration", "left"),
            *((("metric", "left"),) if mixed else ()),
            ("predicted", "right"),
            ("measured", "right"),
            ("error", "right"),
        ):
            table.add_column(col, justify=just)  # type: ignore[arg-type]
        for r in rows:
            metric = (r.metric,) if mixed else ()
            table.add_row(r.run_id, r.label, *metric, f"{r.predicted:,.2f}", f"{r.measured:,.2f}", f"{r.error:+.1%}")
        out.print(table)
        out.print(f"source: {runs[t][1]}" + (f"; {runs[t][2]}" if runs[t][2] else "") + "\n")


def _metric(rows: list[Any]) -> str:
    metrics = list(dict.fromkeys(r.metric for r in rows))
    return metrics[0] if len(metrics) == 1 else "various metrics (relative errors)"
