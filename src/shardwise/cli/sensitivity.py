"""`shardwise sensitivity`: the brief's step 6 (crossover batch vs layers and hidden size, and a
one-at-a-time chart of which input moves the TP/PP ratio most)."""

from __future__ import annotations

from typing import Any

import click

from shardwise.cli.experiment_options import experiment_options
from shardwise.cli.options import alias_option
from shardwise.cli.output import STDOUT, output_option

OUTPUT_FORMATS = (".json",)
FIGURE_FORMATS = (".png", ".svg", ".pdf")
PARTS = ("layers", "hidden", "tornado")

MAX_FACTOR = 1000.0  # --factor: inputs divided and multiplied by more than this leave any sensible range


def _values(name: str, text: str) -> Any:
    """--layers-values / --hidden-values in the --vary grammar; the error names this flag."""
    from shardwise.analyses.vary import parse_vary
    from shardwise.errors import SpecError

    try:
        return parse_vary(f"{name}={text}")[1]
    except SpecError as exc:
        reason = str(exc).removeprefix(f"--vary {f'{name}={text}'!r}: ")
        raise SpecError(f"--{name}-values {text!r}: {reason}") from None


@click.command()
@experiment_options
@click.option(
    "--layers-values",
    default="8..192:24",
    show_default=True,
    metavar="VALUES",
    help="Layer counts for the crossover-vs-layers curve (LO..HI[:N] or a list).",
)
@click.option(
    "--hidden-values",
    default="512..16384:x2",
    show_default=True,
    metavar="VALUES",
    help="Hidden sizes for the crossover-vs-hidden curve (thin to wide layers).",
)
@click.option("--max-batch", type=int, default=256, show_default=True, help="Largest batch searched for a crossover.")
@click.option(
    "--factor",
    type=float,
    default=2.0,
    show_default=True,
    help="One-at-a-time chart: each input divided and multiplied by this.",
)
@alias_option(
    "--plot",
    "plot_prefix",
    old=("--plot-prefix",),
    default="sensitivity.png",
    show_default=True,
    metavar="FILE",
    help="Figures: FILE's name with -layers, -hidden and -tornado added (sensitivity-layers.png, ...); .png, "
    ".svg or .pdf (a name without one: .png).",
)
@click.option("--no-plot", is_flag=True, help="Do not write figures.")
@click.option("--json", "as_json", is_flag=True, help="Print the curves and the ranking as JSON.")
@output_option(OUTPUT_FORMATS, "the curves and the ranking as JSON", stdout="them, as --json")
def sensitivity(
    layers_values: str,
    hidden_values: str,
    max_batch: int,
    factor: float,
    plot_prefix: str,
    no_plot: bool,
    as_json: bool,
    output_path: str | None,
    **options: Any,
) -> None:
    """How the crossover batch of two plans moves with depth and width, and which input moves
    their time ratio most (each input halved and doubled around the --global-batch baseline)."""
    from shardwise.analyses.sensitivity import crossover_batch_vs, one_at_a_time
    from shardwise.cli import output
    from shardwise.cli.experiment_options import build_experiment, check_plans_valid, describe_experiment
    from shardwise.errors import SpecError

    as_json = as_json or output_path == STDOUT
    output.check(output_path, OUTPUT_FORMATS)
    figure_names = figure_paths(plot_prefix)
    if not no_plot and not as_json:
        from shardwise.cli.options import check_output_path

        for path in figure_names:
            check_output_path(path, FIGURE_FORMATS, "--plot")
    exp = build_experiment(options)
    if len(exp.plans) != 2:
        raise SpecError(f"sensitivity compares exactly two plans (got {len(exp.plans)} --plan)")
    if max_batch < 2:
        raise SpecError(f"--max-batch: {max_batch} is not allowed; it must be >= 2")
    if not 1 < factor <= MAX_FACTOR:  # NaN fails too
        raise SpecError(f"--factor: {factor:g} is not allowed; it must be a number > 1 and at most {MAX_FACTOR:g}")
    import numpy as np

    from shardwise.analyses.evaluate import why_invalid

    check_plans_valid(exp, "batch", np.arange(1.0, min(max_batch, 4096) + 1.0))
    for plan in exp.plans:  # the one-at-a-time chart is about the baseline: both plans must run there
        rule = why_invalid(exp, plan, exp.links[0].link, {"batch": np.array([float(exp.batch)])})
        if rule:
            raise SpecError(f"--plan {plan.label}: invalid at the baseline --global-batch {exp.batch} ({rule})")
    plans = [p.label for p in exp.plans]
    layers, hidden = (_values(name, text) for name, text in (("layers", layers_values), ("hidden", hidden_values)))
    ignore = options["ignore_memory"]
    by_layers = crossover_batch_vs(exp, "layers", layers, max_batch, ignore)
    by_hidden = crossover_batch_vs(exp, "hidden", hidden, max_batch, ignore)
    tornadoes = [(lk.label, *one_at_a_time(exp, i, factor)) for i, lk in enumerate(exp.links)]
    figures = []
    if not no_plot and not as_json:
        figures = _plots(exp, plans, by_layers, by_hidden, tornadoes, factor, max_batch, figure_names)
    if as_json or output_path is not None:
        from shardwise import export

        document = export.dumps(
            {
                "assumptions": describe_experiment(exp),
                "plans": plans,
                "ignore_memory": ignore,
                "crossover_batch_vs_layers": _curves(by_layers),
                "crossover_batch_vs_hidden": _curves(by_hidden),
                "one_at_a_time": {
                    link: {
                        "baseline_ratio": base,
                        "baseline_interval": list(bars[0].band("base")) if bars else None,
                        "interval": {"level": 0.8, "basis": _ratio_basis(exp)},
                        "bars": [
                            {
                                "input": b.variable,
                                "low": b.low_value,
                                "high": b.high_value,
                                "ratio_low": b.ratio_low,
                                "ratio_high": b.ratio_high,
                                "ratio_low_interval": list(b.band("low")),
                                "ratio_high_interval": list(b.band("high")),
                            }
                            for b in bars
                        ],
                    }
                    for link, base, bars in tornadoes
                },
            }
        )
        if output_path is not None and output_path != STDOUT:
            output.write_text(output_path, document + "\n")
        if as_json:
            click.echo(document)
            return
    _print(exp, plans, by_layers, by_hidden, tornadoes, factor, max_batch, figures, describe_experiment(exp))
    if output_path is not None:
        click.echo(f"curves and ranking written to {output_path}")


def figure_paths(plot: str) -> list[str]:
    """The three figures of `--plot FILE`: FILE's name with -layers, -hidden, -tornado added
    before its extension (a name without a figure extension, as --plot-prefix gave: .png)."""
    from pathlib import Path

    p = Path(plot)
    stem, suffix = (str(p.with_suffix("")), p.suffix) if p.suffix.lower() in FIGURE_FORMATS else (plot, ".png")
    return [f"{stem}-{part}{suffix}" for part in PARTS]


def _curves(curves: list[Any]) -> dict[str, Any]:
    return {
        c.link: [
            {c.variable: float(v), "crossover_batch": None if b != b else float(b), "winner_at_batch_1": w}
            for v, b, w in zip(c.values, c.crossover_batch, c.winner_at_batch_1, strict=True)
        ]
        for c in curves
    }


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
) -> None:
    from rich.table import Table

    from shardwise.analyses.experiment import DISPLAY_SCALE, DISPLAY_UNIT, SHORT_NAME
    from shardwise.cli.render import console

    out = console()
    out.print(f"[dim]{assumptions}[/]")
    for title, curves in (("layers", by_layers), ("hidden", by_hidden)):
        out.print(
            f"\ncrossover batch of {plans[0]} vs {plans[1]} against {title} (the plan in brackets is "
            f"faster below it; '-': it is faster up to batch {max_batch})"
        )
        table = Table(header_style="bold")
        table.add_column(title, justify="right")
        for c in curves:
            table.add_column(c.link, justify="right")
        for j, v in enumerate(curves[0].values):
            cells = [f"{v:g}"]
            for c in curves:
                b = c.crossover_batch[j]
                w = c.winner_at_batch_1[j]
                cells.append("no feasible batch" if not w else f"- ({w})" if b != b else f"{b:g} ({w})")
            table.add_row(*cells)
        out.print(table)
    for link, base, bars in tornadoes:
        lo, hi = bars[0].band("base")
        tie = " [bold]The interval includes 1: a tie at this confidence.[/]" if lo <= 1.0 <= hi else ""
        out.print(
            f"\n{link}, batch {exp.batch}: time({plans[0]}) / time({plans[1]}) = {base:.3f} ({lo:.3f}-{hi:.3f}, "
            f"80%; {_ratio_basis(exp)}).{tie} Each input / {factor:g} and x {factor:g}, largest effect first"
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
        out.print("[dim]invalid: a plan's layout is not possible there (e.g. layers not divisible by pp)[/]")
    for f in figures:
        out.print(f"figure: {f}")


def _ratio_cell(ratio: float, fits: bool, band: tuple[float, float]) -> str:
    if ratio != ratio:  # NaN: a plan is invalid at the scaled input
        return "invalid"
    return f"{ratio:.3f} ({band[0]:.2f}-{band[1]:.2f})" + ("" if fits else " *")


def _ratio_basis(exp: Any) -> str:
    """Where the ratio's interval comes from (`analyses.bands.ratio_log_sd`)."""
    from shardwise.analyses.bands import calibrated

    if calibrated(exp):
        return exp.spread_basis
    return "uncalibrated: the spread of two layouts' ratio on public runs"
