"""`shardwise presets`: what is built in."""

from __future__ import annotations

import click

KIND_CHOICES = ["gpus", "links", "systems", "models", "frameworks"]


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
        "gpus": ("peak_16bit", "peak_fp8", "memory", "memory_bandwidth", "sm_count", "matmul_efficiency"),
        "links": ("bandwidth", "efficiency", "latency", "kind"),
        "systems": ("gpu", "gpus_per_node", "intra_node_link", "inter_node_link", "nics_per_node"),
        "models": ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len", "family"),
        "frameworks": (
            "zero_stage",
            "async_tp_grad",
            "tp_comm_overlap",
            "overlap_grad_reduce",
            "overlap_param_gather",
            "grad_accumulation_fusion",
            "overlap_p2p",
            "pipeline_sync",
        ),
    }
    for k in kinds:
        if k == "frameworks":
            _frameworks(out, registry.describe(k), columns[k])
            continue
        table = Table(title=k, title_justify="left", header_style="bold")
        table.add_column("name", no_wrap=True)
        for col in columns[k]:
            table.add_column(col.replace("_", " "))
        table.add_column("source", overflow="fold", max_width=60)
        for row in registry.describe(k):
            cells = [
                "interleaved only" if c == "overlap_p2p" and row.get(c) is None else str(row.get(c, ""))
                for c in columns[k]
            ]
            table.add_row(row["name"], *cells, str(row.get("source", "")))
        out.print(table)


def _frameworks(out: object, rows: list[dict[str, object]], flags: tuple[str, ...]) -> None:
    """Frameworks side by side (one column each, one row per flag), then their sources."""
    from rich.table import Table

    table = Table(
        title="frameworks (execution flags; any flag given on the command line wins)",
        title_justify="left",
        header_style="bold",
    )
    table.add_column("flag", no_wrap=True)
    for row in rows:
        table.add_column(str(row["name"]).replace("-", "-\n", 1), justify="center")
    for flag in flags:
        cells = []
        for row in rows:
            value = row.get(flag)
            if value is None:
                cells.append("interleaved")
            elif isinstance(value, bool):
                cells.append("on" if value else "off")
            else:
                cells.append(str(value))
        table.add_row(flag.replace("_", " "), *cells)
    out.print(table)  # type: ignore[attr-defined]
    for row in rows:
        out.print(f"[bold]{row['name']}[/]: {row.get('description', '')}. Source: {row.get('source', '')}")  # type: ignore[attr-defined]
