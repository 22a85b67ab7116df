"""`shardwise scenario`: the brief's scenarios, each with a figure and a two-line finding."""

from __future__ import annotations

import click

from shardwise.cli.options import alias_option, non_empty
from shardwise.cli.output import STDOUT, output_option

NAMES = [
    "small-batch",
    "slow-interconnect",
    "thin-layers",
    "batch1-inference",
    "shallow-model",
    "unbalanced-layers",
    "wide-layers",
    "ttft",
]


@click.command()
@click.argument("names", nargs=-1, type=click.Choice([*NAMES, "all"], case_sensitive=False))
@alias_option(
    "--plot",
    "out_dir",
    old=("--out-dir",),
    metavar="DIR",
    callback=non_empty("give a directory (. for this one), or --no-plot"),
    help="Where figures NAME.png go [default: ., none with --json or -o - unless given].",
)
@click.option("--no-plot", is_flag=True, help="Print the findings only.")
@click.option("--json", "as_json", is_flag=True, help="Print findings and their numbers as JSON.")
@output_option((".json",), "the findings and their numbers as JSON", stdout="them, as --json")
def scenario(
    names: tuple[str, ...], out_dir: str | None, no_plot: bool, as_json: bool, output_path: str | None
) -> None:
    """Run the brief's scenarios (all by default) and print what the model finds for each claim.

    \b
    small-batch        4.1  very small batch: does TP lose to PP below batch 4?
    slow-interconnect  4.2  PCIe instead of NVLink
    thin-layers        4.3  hidden 512 against wide layers
    batch1-inference   4.4  chatbot serving at batch 1
    shallow-model      5    fewer than 10 layers
    unbalanced-layers  5    one layer 10x heavier than the rest
    wide-layers        5    a layer too big for one GPU's memory
    ttft               5    latency-bound time to first token
    """
    from pathlib import Path

    from shardwise.analyses.scenarios import run
    from shardwise.cli import output
    from shardwise.errors import SpecError

    output.check(output_path, (".json",), json_flag=as_json)
    as_json = as_json or output_path == STDOUT
    names = tuple(n.lower() for n in names)
    chosen = NAMES if not names or "all" in names else list(dict.fromkeys(names))
    # the JSON is the output: figures beside it only when asked for by name (as crossover)
    plot = not no_plot and (out_dir is not None or not as_json)
    out_dir = out_dir or "."
    if plot and not Path(out_dir).is_dir():
        why = "is not a directory" if Path(out_dir).exists() else "does not exist"
        raise SpecError(f"--plot: {out_dir} {why} (the figures NAME.png go there)")
    if plot:
        from shardwise.atomic import check_writable

        check_writable(Path(out_dir) / "figure.png")  # the directory must take the figures
    reports = [run(name, plot) for name in chosen]
    if plot:
        from shardwise import plots

        for r in reports:
            if r.chart is not None:
                plots.save(plots.draw(r.chart), Path(out_dir) / f"{r.name}.png")
    if as_json or output_path is not None:
        from shardwise import export

        # an object, as every other --json (review 40 #9: a bare list, without `notes` or `command`);
        # the finding's line break is the terminal's layout (two lines); JSON carries the sentence whole
        scenarios = [
            {
                "name": r.name,
                "claim": r.title,
                "holds": bool(r.holds),  # the verdict the finding ends with
                "finding": r.finding.replace("\n", " "),
                "numbers": r.numbers,  # SI, the unit in each lower-case key
            }
            for r in reports
        ]
        command = " ".join(["shardwise scenario", *(chosen if names else [])])
        document = export.dumps({"scenarios": scenarios, "notes": [], "command": command})
        if output_path not in (None, STDOUT):
            output.write_text(output_path, document + "\n")
        if as_json:
            click.echo(document)
            return
    for r in reports:
        click.echo(f"[{r.name}] {r.title}")
        click.echo(r.finding)
        if plot:
            click.echo(f"figure: {Path(out_dir) / (r.name + '.png')}")
        click.echo()
    if output_path is not None:
        click.echo(f"findings written to {output_path}")
