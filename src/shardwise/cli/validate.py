"""`shardwise validate`: predicted vs published, per table, with the error."""

from __future__ import annotations

import click

TABLE_CHOICES = ["narayanan21_table1", "korthikanti22_table5", "korthikanti22_table4"]


@click.command()
@click.argument("tables", nargs=-1, type=click.Choice(TABLE_CHOICES))
@click.option("--json", "as_json", is_flag=True, help="Print rows and mean absolute errors as JSON.")
@click.option("--markdown", is_flag=True, help="Print Markdown tables (as in the README).")
def validate(tables: tuple[str, ...], as_json: bool, markdown: bool) -> None:
    """Predict the published training runs and compare (all tables by default).

    narayanan21_table1: Narayanan et al. 2021 Table 1 (TFLOP/s per GPU);
    korthikanti22_table5: Korthikanti et al. 2022 Table 5 (seconds per iteration);
    korthikanti22_table4: Korthikanti et al. 2022 Table 4 (one layer, ms).
    """
    from shardwise.analyses.validation import CITATIONS, mean_absolute_error
    from shardwise.analyses.validation import validate as run

    chosen = list(tables) or TABLE_CHOICES
    results = {t: run(t) for t in chosen}
    if as_json:
        from shardwise import export

        click.echo(
            export.dumps(
                {
                    t: {
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
            click.echo(f"\n{CITATIONS[t]}: {rows[0].metric}, mean absolute error {mean_absolute_error(rows):.1%}\n")
            click.echo("| run | configuration | predicted | measured | error |")
            click.echo("|---|---|---:|---:|---:|")
            for r in rows:
                click.echo(f"| {r.run_id} | {r.label} | {r.predicted:.2f} | {r.measured:.2f} | {r.error:+.1%} |")
        return
    from rich.table import Table

    from shardwise.cli.render import console

    out = console()
    for t, rows in results.items():
        table = Table(
            title=f"{t}: {rows[0].metric}  (mean absolute error {mean_absolute_error(rows):.1%})",
            title_justify="left",
            header_style="bold",
        )
        for col, just in (
            ("run", "left"),
            ("configuration", "left"),
            ("predicted", "right"),
            ("measured", "right"),
            ("error", "right"),
        ):
            table.add_column(col, justify=just)  # type: ignore[arg-type]
        for r in rows:
            table.add_row(r.run_id, r.label, f"{r.predicted:.2f}", f"{r.measured:.2f}", f"{r.error:+.1%}")
        out.print(table)
        out.print(f"source: {CITATIONS[t]}\n")
