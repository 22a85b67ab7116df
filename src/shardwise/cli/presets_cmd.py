"""`shardwise presets`: what is built in."""

from __future__ import annotations

import click

KIND_CHOICES = ["gpus", "links", "systems", "models"]


@click.command()
@click.argument("kind", type=click.Choice(KIND_CHOICES), required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the presets as JSON.")
def presets(kind: str | None, as_json: bool) -> None:
    """List built-in presets (all kinds, or one of KIND), with their key numbers and sources.

    Any NAME flag also accepts a YAML file with the same fields (see README).
    """
    from shardwise import presets as registry

    kinds = [kind] if kind else KIND_CHOICES
    if as_json:
        from shardwise import export

        click.echo(export.dumps({k: registry.describe(k) for k in kinds}))
        return
    from rich.table import Table

    from shardwise.cli.render import console

    out = console()
    columns = {
        "gpus": ("peak_16bit", "peak_fp8", "memory", "memory_bandwidth", "matmul_efficiency"),
        "links": ("bandwidth", "efficiency", "latency", "kind"),
        "systems": ("gpu", "gpus_per_node", "intra_node_link", "inter_node_link", "nics_per_node"),
        "models": ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len", "family"),
    }
    for k in kinds:
        table = Table(title=k, title_justify="left", header_style="bold")
        table.add_column("name")
        for col in columns[k]:
            table.add_column(col.replace("_", " "))
        table.add_column("source", overflow="fold", max_width=60)
        for row in registry.describe(k):
            table.add_row(row["name"], *(str(row.get(c, "")) for c in columns[k]), str(row.get("source", "")))
        out.print(table)
