"""`shardwise sensitivity`: the brief's step 6 (crossover batch vs layers and hidden size, and a
one-at-a-time chart of which input moves the TP/PP ratio most)."""

from __future__ import annotations

from typing import Any

import click

from shardwise.cli.experiment_options import experiment_options
from shardwise.cli.options import alias_option, non_empty
from shardwise.cli.output import STDOUT, output_option
from shardwise.requests.sensitivity import DEFAULTS

OUTPUT_FORMATS = (".json",)
FIGURE_FORMATS = (".png", ".svg", ".pdf")
PARTS = ("layers", "hidden", "tornado")


@click.command()
@experiment_options
@click.option(
    "--layers-values",
    default=DEFAULTS["layers_values"],
    show_default=True,
    metavar="VALUES",
    help="Layer counts for the crossover-vs-layers curve (LO..HI[:N] or a list).",
)
@click.option(
    "--hidden-values",
    default=DEFAULTS["hidden_values"],
    show_default=True,
    metavar="VALUES",
    help=(
        "Hidden sizes for the crossover-vs-hidden curve (thin to wide layers; the model's head dim, heads per "
        "KV head and ffn/hidden ratio kept)."
    ),
)
@click.option(
    "--max-batch",
    type=int,
    default=DEFAULTS["max_batch"],
    show_default=True,
    help="Largest batch searched for a crossover.",
)
@click.option(
    "--factor",
    type=float,
    default=DEFAULTS["factor"],
    show_default=True,
    help="One-at-a-time chart: each input divided and multiplied by this.",
)
@alias_option(
    "--plot",
    "plot_prefix",
    old=("--plot-prefix",),
    metavar="FILE",
    callback=non_empty("give a file name ending in .png, .svg or .pdf, or --no-plot"),
    help="Figures: FILE's name with -layers, -hidden and -tornado added (sensitivity-layers.png, ...); .png, "
    ".svg or .pdf (a name without one: .png) [default: sensitivity.png, none with --json or -o - unless given].",
)
@click.option("--no-plot", is_flag=True, help="Do not write figures.")
@click.option("--json", "as_json", is_flag=True, help="Print the curves and the ranking as JSON.")
@output_option(OUTPUT_FORMATS, "the curves and the ranking as JSON", stdout="them, as --json")
def sensitivity(
    layers_values: str,
    hidden_values: str,
    max_batch: int,
    factor: float,
    plot_prefix: str | None,
    no_plot: bool,
    as_json: bool,
    output_path: str | None,
    **options: Any,
) -> None:
    """How the crossover batch of two plans moves with depth and width, and which input moves
    their time ratio most (each input halved and doubled around the --global-batch baseline)."""
    from shardwise.cli import output
    from shardwise.cli.options import echo_notes
    from shardwise.requests.compare import ExperimentRequest
    from shardwise.requests.sensitivity import SensitivityRequest

    output.check(output_path, OUTPUT_FORMATS, json_flag=as_json)
    as_json = as_json or output_path == STDOUT
    # the JSON is the output: figures beside it only when asked for by name (as crossover)
    plot = not no_plot and (plot_prefix is not None or not as_json)
    figure_names = figure_paths(plot_prefix or "sensitivity.png")
    if plot:
        from shardwise.cli.options import check_output_path

        for path in figure_names:
            check_output_path(path, FIGURE_FORMATS, "--plot")
    request = SensitivityRequest(
        ExperimentRequest.from_options(options), layers_values, hidden_values, max_batch, factor
    )
    answer = request.run()
    echo_notes(answer.notes)
    exp, plans = answer.experiment, answer.plans
    by_layers, by_hidden, tornadoes = answer.by_layers, answer.by_hidden, answer.tornadoes
    figures = []
    if plot:
        figures = _plots(exp, plans, by_layers, by_hidden, tornadoes, factor, max_batch, figure_names)
    if as_json or output_path is not None:
        from shardwise import export

        document = export.dumps(answer.as_dict())
        if output_path is not None and output_path != STDOUT:
            output.write_text(output_path, document + "\n")
        if as_json:
            click.echo(document)
            return
    basis = answer.ratio_basis()
    _print(exp, plans, by_layers, by_hidden, tornadoes, factor, max_batch, figures, answer.assumptions, basis)
    if output_path is not None:
        click.echo(f"curves and ranking written to {output_path}")


def figure_paths(plot: str) -> list[str]:
    """The three figures of `--plot FILE`: FILE's name with -layers, -hidden, -tornado added
    before its extension (a name without a figure extension, as --plot-prefix gave: .png)."""
    from pathlib import Path

    from shardwise.errors import SpecError

    p = Path(plot)
    if p.suffix and p.suffix.lower() not in FIGURE_FORMATS:
        raise SpecError(
            f"--plot {plot}: unknown figure format {p.suffix!r}; use one of {', '.join(FIGURE_FORMATS)} "
            "(a name without an extension: .png)"
        )
    stem, suffix = (str(p.with_suffix("")), p.suffix) if p.suffix.lower() in FIGURE_FORMATS else (plot, ".png")
    return [f"{stem}-{part}{suffix}" for part in PARTS]


def _plots(
    exp: Any,
    plans: list[str],
    by_layers: Any,
    by_hidden: Any,
    tornadoes: Any,
    factor: float,
    max_batch: int,
    paths: list[str],
) -> list[Any]:
    from shardwise import plots

    m = exp.model
    vs = f"{plans[0]} vs {plans[1]}"
    out = [
        plots.save(
            plots.crossover_curves(
                by_layers, plans, max_batch, f"{vs}: crossover batch vs depth (hidden {m.hidden}), {exp.hardware}"
            ),
            paths[0],
        ),
        plots.save(
            plots.crossover_curves(
                by_hidden, plans, max_batch, f"{vs}: crossover batch vs width ({m.layers} layers), {exp.hardware}"
            ),
            paths[1],
        ),
    ]
    link, base, bars = tornadoes[0]
    title = f"{vs} on {link}, batch {exp.batch}, {exp.hardware}: which input moves the ratio most"
    out.append(plots.save(plots.tornado(base, bars, plans, factor, title), paths[2]))
    return out


def _print(
    exp: Any,
    plans: list[str],
    by_layers: Any,
    by_hidden: Any,
    tornadoes: Any,
    factor: float,
    max_batch: int,
    figures: list[Any],
    assumptions: str,
    ratio_basis: str,
) -> None:
    from rich.table import Table

    from shardwise.analyses.experiment import DISPLAY_SCALE, DISPLAY_UNIT, SHORT_NAME
    from shardwise.cli.render import console

    out = console()
    out.print(f"[dim]{assumptions}[/]")
    for title, curves in (("layers", by_layers), ("hidden", by_hidden)):
        rows = []
        for j, v in enumerate(curves[0].values):
            cells = [f"{v:g}"]
            for c in curves:
                b = c.crossover_batch[j]
                w = c.winner_at_batch_1[j]
                cells.append(
                    "no feasible batch" if not w else _no_crossing(c, j, max_batch) if b != b else f"{b:g} ({w})"
                )
            rows.append(cells)
        short = any("both fit to" in cell for cells in rows for cell in cells)
        out.print(
            f"\ncrossover batch of {plans[0]} vs {plans[1]} against {title} (the plan in brackets is "
            f"faster below it; '-': it is faster up to batch {max_batch}"
            + (", or to the batch named, beyond which a plan does not fit)" if short else ")")
        )
        table = Table(header_style="bold")
        table.add_column(title, justify="right")
        for c in curves:
            table.add_column(c.link, justify="right")
        for cells in rows:
            table.add_row(*cells)
        out.print(table)
        for line in _why_none(exp, title, curves, max_batch):
            out.print(f"[dim]{line}[/]")
    for link, base, bars in tornadoes:
        lo, hi = bars[0].band("base")
        tie = " [bold]The interval includes 1: a tie at this confidence.[/]" if lo <= 1.0 <= hi else ""
        out.print(
            f"\n{link}, batch {exp.batch}: time({plans[0]}) / time({plans[1]}) = {base:.3f} ({lo:.3f}-{hi:.3f}, "
            f"80%; {ratio_basis}).{tie} Each input / {factor:g} and x {factor:g}, largest effect first"
        )
        table = Table(header_style="bold")
        for col in ("input", "baseline", f"ratio at /{factor:g}", f"ratio at x{factor:g}"):
            table.add_column(col, justify="left" if col == "input" else "right")
        for b in bars:
            scale, unit = DISPLAY_SCALE.get(b.variable, 1.0), DISPLAY_UNIT.get(b.variable, "")
            table.add_row(
                SHORT_NAME.get(b.variable, b.variable),
                f"{b.base_value * scale:g}{unit}",
                _ratio_cell(b.ratio_low, b.fits_low, b.band("low")),
                _ratio_cell(b.ratio_high, b.fits_high, b.band("high")),
            )
        out.print(table)
    cells = [
        (r, f)
        for _, _, bars in tornadoes
        for b in bars
        for r, f in ((b.ratio_low, b.fits_low), (b.ratio_high, b.fits_high))
    ]
    if any(r == r and not f for r, f in cells):
        out.print("[dim]* a plan does not fit in GPU memory there (the ratio is of times only)[/]")
    if any(r != r for r, _ in cells):
        from shardwise.analyses.sensitivity import broken_rules

        rules = [r for i, (_, _, bars) in enumerate(tornadoes) for r in broken_rules(exp, i, bars)]
        why = "; ".join(dict.fromkeys(rules)) or "a rule of the plan breaks"
        out.print(f"[dim]invalid: a plan's layout is not possible there ({why})[/]")
    for f in figures:
        out.print(f"figure: {f}")


def _why_none(exp: Any, variable: str, curves: Any, max_batch: int) -> list[str]:
    """Why a row reads 'no feasible batch' (review 51 #10: it read like memory where the width's
    heads do not split over tp=8, the rule crossover refuses such a width with): the layout rule a
    plan breaks there (`analyses.evaluate.why_invalid`), else that neither plan fits at any batch."""
    import numpy as np

    from shardwise.analyses.evaluate import why_invalid

    out = []
    for j, v in enumerate(curves[0].values):
        if all(c.winner_at_batch_1[j] for c in curves):
            continue
        broken = [
            f"{p.label} is invalid ({rule})"
            for p in exp.plans
            if (rule := why_invalid(exp, p, exp.links[0].link, {variable: np.array([float(v)])})) is not None
        ]
        why = (
            "; ".join(broken)
            or f"no plan fits in GPU memory at any batch to {max_batch} (--ignore-memory compares times)"
        )
        out.append(f"no feasible batch at {variable} {v:g}: {why}")
    return out


def _no_crossing(curve: Any, j: int, max_batch: int) -> str:
    """'- (tp=8)': faster at every batch to max_batch; '- (tp=8, both fit to 6)' when the other
    plan stops fitting first (walkthrough: 112 layers read as TP faster everywhere while PP=8 no
    longer fits from batch 7)."""
    w = curve.winner_at_batch_1[j]
    last = float(curve.last_feasible_batch[j])
    return f"- ({w}, both fit to {last:g})" if last == last and last < max_batch else f"- ({w})"


def _ratio_cell(ratio: float, fits: bool, band: tuple[float, float]) -> str:
    if ratio != ratio:  # NaN: a plan is invalid at the scaled input
        return "invalid"
    return f"{ratio:.3f} ({band[0]:.2f}-{band[1]:.2f})" + ("" if fits else " *")
