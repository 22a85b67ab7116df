"""`shardwise crossover`: where one parallel plan overtakes another (the brief's experiment)."""

from __future__ import annotations

from typing import Any

import click

from shardwise.cli.experiment_options import experiment_options
from shardwise.cli.output import output_option
from shardwise.requests.compare import DEFAULT_VARY

OUTPUT_FORMATS = (".csv", ".json")  # the table, or what --json prints

MAX_PRINTED_ROWS = 2_000  # a terminal table longer than this belongs in a CSV file


@click.command()
@experiment_options
@click.option(
    "--vary",
    default=DEFAULT_VARY,
    show_default=True,
    metavar="NAME=VALUES",
    help="The swept variable: batch, bandwidth, latency, layers, hidden, seq_len or gpus, with values "
    "LO..HI[:N|:xF] or a list (e.g. bandwidth=1GB/s..900GB/s, layers=8,16,32).",
)
@click.option(
    "--plot",
    "plot_path",
    metavar="FILE",
    help="Figure to write (.png, .svg or .pdf) [default: crossover.png, none with --json or -o - unless given].",
)
@click.option("--no-plot", is_flag=True, help="Do not write a figure.")
@click.option("--all-rows", is_flag=True, help="Print every grid value (default: powers of two and the crossings).")
@click.option("--json", "as_json", is_flag=True, help="Print the series and crossings as JSON.")
@output_option(OUTPUT_FORMATS, "the series: every grid value, plan and link", old=("--csv",), stdout="the CSV")
def crossover(
    vary: str,
    plot_path: str | None,
    no_plot: bool,
    all_rows: bool,
    as_json: bool,
    output_path: str | None,
    **options: Any,
) -> None:
    """Time of each --plan on each --intra-link as one variable moves, and where the fastest plan changes.

    With no options: the brief's experiment. Hidden 4096, 96 layers, 8 A100s (312 TFLOP/s),
    TP=8 against PP=8, batch 1 to 32 sequences of 2048 tokens, NVLink (A100 NVLink3: 600 GB/s
    counting both directions, 300 per direction) against PCIe Gen4 (31.5 GB/s per direction), training step time.

    \b
    Examples:
      shardwise crossover
      shardwise crossover --cost-model textbook --plot textbook.png
      shardwise crossover --vary bandwidth=1GB/s..900GB/s --global-batch 8 --intra-link pcie4
      shardwise crossover --plan tp=8 --plan pp=8 --plan tp=2,pp=4 --workload forward
      shardwise crossover --system dgx-h100 --nodes 2 --plan tp=8 --plan pp=16 -o series.csv
    """
    from shardwise.cli import output
    from shardwise.cli.options import echo_notes
    from shardwise.errors import SpecError
    from shardwise.requests.compare import CrossoverRequest, ExperimentRequest

    if as_json and output_path == output.STDOUT:
        raise SpecError("give --json or -o -, not both (both print)")
    output.check(output_path, OUTPUT_FORMATS)
    quiet = as_json or output_path == output.STDOUT  # the output is data: a figure only when asked for by name
    figure_path = None if no_plot or (plot_path is None and quiet) else (plot_path or "crossover.png")
    if figure_path is not None:
        from shardwise.cli.options import check_output_path

        check_output_path(figure_path, (".png", ".svg", ".pdf"), "--plot")
    request = CrossoverRequest(ExperimentRequest.from_options(options), vary)
    answer = request.run(max_values=MAX_PRINTED_ROWS if all_rows and not quiet else None)
    echo_notes(answer.notes)
    result, assumptions = answer.result, answer.assumptions
    figure = None if figure_path is None else _plot(result, figure_path, assumptions, request)
    if output_path is not None:
        output.write_text(output_path, _document(answer, output_path))
    if as_json:
        click.echo(_document(answer, "x.json"), nl=False)
    elif output_path != output.STDOUT:
        _print(result, all_rows or len(result.values) <= 12, assumptions, figure, request.experiment)
        if output_path is not None:
            click.echo(f"series written to {output_path}")


def _document(answer: Any, path: str) -> str:
    """The series as `path`'s extension asks: JSON (what --json prints) or CSV (also for -)."""
    if path.lower().endswith(".json"):
        from shardwise import export

        return export.dumps(answer.as_dict()) + "\n"
    return str(answer.csv_text())


def _ylabel(exp: Any) -> str:
    if exp.cost_model == "textbook":
        return "time (s) as the brief's formulas compute it"
    return {
        "train": "training step time (s)",
        "forward": "forward latency (s)",
        "prefill": "time to first token (s)",
        "decode": "time per output token (s)",
    }[exp.workload]


def _plot(result: Any, path: str, subtitle: str, request: Any) -> Any:
    """The crossover figure; with the textbook cost model two panels, the physical model on the
    same inputs beside the brief's formulas (as docs/commands/crossover.md says), each with its
    own batch (sequences; the brief's rows of X, tokens) and only the physical model with a band."""
    from shardwise import plots

    exp = result.experiment
    plans = " vs ".join(p.label for p in exp.plans)
    if exp.cost_model == "textbook":
        from dataclasses import replace

        from shardwise.errors import SpecError
        from shardwise.requests.compare import CrossoverRequest

        try:
            physical = CrossoverRequest(replace(request.experiment, cost_model="physical"), request.vary).run()
        except SpecError as e:  # the physical model refuses these inputs: the formulas' panel alone
            title = f"{plans}: time vs {result.variable}, {exp.hardware} (the brief's formulas)"
            note = f"{subtitle}\nno physical-model panel: {e}"
            return plots.save(plots.crossover_figure(result, title, note, _ylabel(exp)), path)
        panels = [
            ("shardwise's physical model (training step)", physical.result, "training step time (s)", None),
            ("the brief's Section 7 formulas, verbatim", result, _ylabel(exp), None),
        ]
        title = f"{plans} against {result.variable}, {exp.hardware}: the same question, two cost models"
        fig = plots.side_by_side(panels, title, (physical.assumptions, subtitle))
        return plots.save(fig, path)
    title = f"{plans}: {_ylabel(exp).split(' (')[0]} vs {result.variable}, {exp.hardware} (physical model)"
    fig = plots.crossover_figure(result, title, subtitle, _ylabel(exp))
    return plots.save(fig, path)


def _rows_to_show(result: Any, all_rows: bool) -> list[int]:
    import numpy as np

    n = len(result.values)
    if all_rows:
        return list(range(n))
    x = result.values
    keep = {0, n - 1}
    keep |= {i for i in range(n) if x[i] > 0 and np.log2(x[i]) == int(np.log2(x[i]))}
    for c in result.crossings:
        keep |= {i for i in range(n) if c.low <= x[i] <= c.high and (x[i] == c.low or x[i] == c.high or x[i] == c.at)}
        keep |= {i for i in range(n) if x[i] == c.at or (i + 1 < n and x[i] < c.at <= x[i + 1])}
    return sorted(keep)


def _print(result: Any, all_rows: bool, assumptions: str, figure: Any, request: Any = None) -> None:
    from rich.table import Table

    from shardwise.analyses.crossover import describe_crossing
    from shardwise.analyses.experiment import DISPLAY_SCALE, VARIABLES
    from shardwise.cli.render import console
    from shardwise.units import format_seconds

    out = console()
    exp = result.experiment
    against = VARIABLES[result.variable].label
    if exp.cost_model == "textbook" and result.variable == "batch":
        against = "batch (the brief's rows of X: tokens)"
    out.print(f"[bold]{_ylabel(exp)}[/] against {against}")
    out.print(f"[dim]{assumptions}[/]")
    links = list(dict.fromkeys(s.link for s in result.series))
    table = Table(header_style="bold", show_lines=False)
    table.add_column(result.variable, justify="right")
    for link in links:
        for s in result.series_for(link):
            table.add_column(f"{s.plan}\n{link}", justify="right")
        table.add_column(f"faster\n{link}")
    scale = DISPLAY_SCALE.get(result.variable, 1.0)
    shown = _rows_to_show(result, all_rows)
    winners = {link: result.winners(link) for link in links}
    for j in shown:
        cells = [f"{result.values[j] * scale:g}"]
        for link in links:
            for s in result.series_for(link):
                t = s.time_s[j]
                cell = "invalid" if t != t else format_seconds(float(t))
                cells.append(cell + ("" if s.fits[j] or t != t else " *"))
            cells.append(winners[link][j])
        table.add_row(*cells)
    out.print(table)
    if len(shown) < len(result.values):
        out.print(f"[dim]{len(shown)} of {len(result.values)} grid values shown (--all-rows for all)[/]")
    if any((~s.fits & (s.time_s == s.time_s)).any() for s in result.series):
        out.print("[dim]* does not fit in GPU memory[/]")
    if not result.ignore_memory and any((~s.fits & (s.time_s == s.time_s)).any() for s in result.series):
        out.print("[dim]plans that do not fit are not counted as faster (--ignore-memory to compare anyway)[/]")
    out.print()
    shown_predict = request is None
    for link in links:
        changes = result.winner_changes(link)
        if not changes:
            out.print(f"{link}: no crossover in this range ({_throughout(winners[link])})")
        for c in changes:
            out.print(f"[bold]crossover[/]: {describe_crossing(c, result.variable)}")
            _print_why(out, result, c)
            if (note := _memory_note(result, c)) is not None:
                out.print(f"    [dim]{note}[/]")
            if not shown_predict and (line := _in_predict(request, result, c)) is not None:
                out.print(f"    [dim]{line}[/]")
                shown_predict = True
        for c in result.pair_crossings(link):
            out.print(f"  (not the fastest there) {describe_crossing(c, result.variable)}")
    if exp.cost_model == "textbook":
        _print_worked_example(out)
    if figure is not None:
        out.print(f"\nfigure: {figure}")


def _in_predict(request: Any, result: Any, c: Any) -> str | None:
    """The predict command that prices the switch's two plans as crossover does (review 51 #7:
    predict takes the stack's sequence parallelism and ZeRO, a crossover plan those it says): the
    first plan's in full, the other's flags in place of its own."""
    from shardwise.errors import SpecError
    from shardwise.requests.experiment_predict import predict_request

    exp = result.experiment
    plans = {p.label: p for p in exp.plans}
    try:
        asked = [predict_request(request, exp, plans[n], c.link, result.variable, c.at) for n in (c.before, c.after)]
    except SpecError:  # a plan predict's flags cannot state: no line rather than a refusal of the crossover
        return None
    if any(a is None for a in asked):
        return None
    argv = [_flag_pairs(a.to_argv()) for a in asked]
    mine = [f for f in argv[0] if f not in argv[1]]
    theirs = [f for f in argv[1] if f not in argv[0]]
    swap = " ".join(" ".join(f) for f in theirs) + " in place of " + " ".join(" ".join(f) for f in mine)
    return f"in predict: {asked[0].command()} ({c.before}; {c.after}: {swap})"


def _flag_pairs(argv: list[str]) -> list[tuple[str, ...]]:
    """predict's arguments as (flag,) or (flag, value) tuples."""
    out: list[tuple[str, ...]] = []
    for token in argv[1:]:  # after "predict"
        if token.startswith("--"):
            out.append((token,))
        else:
            out[-1] = (*out[-1], token)
    return out


def _throughout(winners: list[str]) -> str:
    names = {w for w in winners if w}
    if not names:
        return "no plan is feasible anywhere in it"
    if names == {"tie"}:
        return "the plans take the same time throughout"
    names.discard("tie")
    return f"{names.pop()} is fastest wherever a plan is feasible" if len(names) == 1 else "see the table"


def _print_why(out: Any, result: Any, c: Any) -> None:
    """Where the time of the two plans goes at the switch point: the reason for the crossing."""
    from shardwise.analyses.crossover import crossing_breakdown
    from shardwise.units import format_seconds

    parts = crossing_breakdown(result, c)
    plans = {p.label: p for p in result.experiment.plans}
    for name, bd in (parts or {}).items():
        total = sum(bd.values())
        labels = _part_labels(result, plans[name], c.at)
        shown = ", ".join(
            f"{labels.get(k, k.replace('_', ' '))} {format_seconds(v)} ({v / total:.0%})"
            for k, v in bd.items()
            if v > 0
        )
        out.print(f"    {name}: {format_seconds(total)} = {shown}")


def _memory_note(result: Any, c: Any) -> str | None:
    """Why the winner changes where the plan that was faster still takes less time: it no longer
    fits in GPU memory there (walkthrough: a switch to the slower plan read as a speed crossover),
    and how far the plan left fits (review 36: tp=8 fits only at 162, no plan from 163 on)."""
    from shardwise.analyses.crossover_limits import memory_limit
    from shardwise.analyses.experiment import DISPLAY_SCALE, DISPLAY_UNIT, SHORT_NAME

    limit = memory_limit(result, c)
    if limit is None:
        return None
    v = result.variable
    return limit.describe(SHORT_NAME[v], DISPLAY_SCALE.get(v, 1.0), DISPLAY_UNIT.get(v, ""))


def _part_labels(result: Any, plan: Any, at: float) -> dict[str, str]:
    """Names of the time's parts for `plan`; with one data-parallel replica (dp = cp = 1, a dense
    model) what remains of `dp_comm` is the tied embedding's gradient sync between the first and
    last pipeline stage (`analyses.crossover.one_replica_at`), not data-parallel traffic."""
    from shardwise.analyses.crossover_parts import one_replica_at

    return {"dp_comm": "embedding sync"} if one_replica_at(result, plan, at) else {}


def _print_worked_example(out: Any) -> None:
    """The brief's Section 4.1 numbers, recomputed from its own inputs."""
    from rich.table import Table

    from shardwise import textbook

    table = Table(
        title="\nthe brief's Section 4.1 worked example, recomputed from its inputs (h = 4096, 312 TFLOP/s, 600 GB/s)",
        title_justify="left",
        header_style="bold",
    )
    for col in ("quantity", "the brief says", "its inputs give", "note"):
        table.add_column(col)
    for row in textbook.section_4_1():
        value = f"{row.computed:,.0f}%" if row.unit == "%" else f"{row.computed:.4g} {row.unit}"
        note = (f"arithmetic ok, {row.note}" if row.note else "ok") if row.consistent else (row.note or "inconsistent")
        table.add_row(row.quantity, row.stated, value, note)
    out.print(table)
