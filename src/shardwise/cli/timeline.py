"""`shardwise timeline`: simulate one training step operation by operation and draw it."""

from __future__ import annotations

from typing import Any

import click

from shardwise.cli.options import cluster_options, model_options, non_empty, plan_options

COMPACT_JSON_OPERATIONS = 50_000  # more operations than this: --json on one line


@click.command()
@model_options
@cluster_options
@plan_options
@click.option(
    "--plot",
    "plot_path",
    metavar="FILE",
    callback=non_empty("give a file name ending in .png, .svg or .pdf, or --no-plot"),
    help="Gantt chart to write (.png, .svg or .pdf) [default: timeline.png, none with --json unless given].",
)
@click.option("--no-plot", is_flag=True, help="Do not draw the Gantt chart.")
@click.option("--trace", "trace_path", metavar="FILE", help="Also write a Chrome trace (JSON; opens in Perfetto).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary and every operation as JSON.")
def timeline(plot_path: str | None, no_plot: bool, trace_path: str | None, as_json: bool, **options: Any) -> None:
    """Discrete-event simulation of one step of the pipeline schedule (same flags as predict):
    every forward, backward, weight-gradient pass and send with its start and end, the bubble of
    each stage and the activations each keeps in flight.

    \b
    Examples:
      shardwise timeline --model gpt3-175b --system dgx-a100 --nodes 8 --tp 8 --pp 8 \\
          --global-batch 32 --recompute full --trace step.json
      shardwise timeline --model gpt-96l-4096h --system dgx-a100 --pp 8 --global-batch 16 --schedule zb-h1
    """
    from shardwise.cli.options import check_output_path, echo_notes, request_of
    from shardwise.requests.timeline import TimelineRequest

    # the JSON is the output: a figure beside it only when asked for by name (as crossover)
    figure_path = None if no_plot or (plot_path is None and as_json) else (plot_path or "timeline.png")
    for path, allowed, flag in (
        (figure_path, (".png", ".svg", ".pdf"), "--plot"),
        (trace_path, (".json",), "--trace"),
    ):
        if path is not None:
            check_output_path(path, allowed, flag)
    request = request_of(options)
    result = TimelineRequest(request).run()
    echo_notes(result.notes)
    sim_step, scn = result.simulated, result.simulated.estimate.scenario
    sim = sim_step.simulation
    figure = None
    if figure_path is not None:
        from shardwise import plots

        title = gantt_title(scn, sim)
        unit, label = (1e-3, "ms") if sim.makespan_s < 1 else (1.0, "s")
        figure = plots.save(plots.gantt(sim, title, unit, label), figure_path, tight=False)
    if trace_path is not None:
        from shardwise.export_trace import write_chrome_trace

        write_chrome_trace(sim, trace_path)
    if as_json:
        from shardwise import export

        # a long run prints on one line through the C encoder (seconds saved per million operations)
        click.echo(export.dumps(result.as_dict(), compact=len(sim.records) > COMPACT_JSON_OPERATIONS))
        return
    interval = (result.step_time_s_low, result.step_time_s_high, result.interval_basis)
    from shardwise.requests.emit_stack import recompute_words

    recompute_from = recompute_words(
        request.framework, request.recompute, request.recompute_layers, scn.plan, scn.model
    )
    _print(sim_step, result.closed_form_step_time_s, figure, trace_path, interval, recompute_from)


def _print(
    sim_step: Any,
    closed_s: float,
    figure: Any,
    trace_path: str | None,
    interval: tuple[float, float, str],
    recompute_from: str = "",
) -> None:
    from rich.table import Table

    from shardwise.cli.render import console, describe_scenario, interval_words
    from shardwise.units import format_seconds, format_seconds_range

    out = console()
    est, sim = sim_step.estimate, sim_step.simulation
    for line in describe_scenario(est, recompute_from):
        out.print(line)
    step = float(est.step_time_s)
    gap = (step - closed_s) / closed_s
    gap = 0.0 if abs(gap) < 5e-4 else gap  # rounds to 0.0%: never "-0.0%" (review 40 #13)
    out.print(
        f"\nsimulated step {format_seconds(step)} ({format_seconds_range(interval[0], interval[1])}; closed form "
        f"{format_seconds(closed_s)}, {gap:+.1%}); {len(sim.records):,} operations"
    )
    out.print(f"[dim]{interval_words(interval[0], interval[1], step, interval[2])}[/]")
    table = Table(header_style="bold")
    # with virtual stages the simulator counts model chunks in flight, each 1/v of a micro-batch's
    # activations on the stage (`engines.simulator` peak_in_flight: chunk units / v)
    v = int(sim.v)
    held = "peak micro-batches in flight" if v == 1 else "peak in flight: chunks (micro-batches)"
    for col in ("stage", "busy", "idle", held):
        table.add_column(col, justify="right")
    show = list(range(sim.p)) if sim.p <= 10 else [0, 1, sim.p // 2, sim.p - 2, sim.p - 1]
    for i in show:
        peak = float(sim.peak_in_flight[i])
        table.add_row(
            str(i),
            format_seconds(float(sim.busy_s[i])),
            f"{sim.stage_idle_fraction[i]:.1%}",
            f"{peak:g}" if v == 1 else f"{round(peak * v)} ({peak:.2f})",
        )
    out.print(table)
    if v > 1:
        out.print(
            f"[dim]in flight: model chunks whose forward pass has run and backward not yet; with v={v} a chunk is "
            f"1/{v} of the stage's layers, so {v} chunks hold one micro-batch's activations on it[/]"
        )
    out.print(
        f"stages idle: {sim.mean_stage_idle_fraction:.1%} of the pipeline's span on average "
        f"({format_seconds(sim.pipeline_end_s)}); the rest of the step is {_after_pipeline(sim_step)}; "
        f"bubble: {float(est.bubble_fraction):.1%} of the step (the busiest stage idle, as predict counts it)"
    )
    if not bool(est.fits_in_memory):  # simulated all the same: say so, as predict does
        from shardwise.units import format_bytes, format_capacity

        out.print(
            f"[red]does NOT fit: {format_bytes(float(est.memory.total_bytes))} per GPU (the fullest stage) in "
            f"{format_capacity(float(est.scenario.cluster.gpu.memory_bytes))}; `predict` with these flags breaks "
            "it down[/]"
        )
    if figure is not None:
        out.print(f"figure: {figure}")
    if trace_path is not None:
        out.print(f"Chrome trace: {trace_path} (open in https://ui.perfetto.dev)")


def _after_pipeline(sim_step: Any) -> str:
    """What runs after the pipeline, in words: without a gradient reduction (one replica, no context
    parallelism: it said there was one) the tied embeddings' sync, where the model ties them, and
    the optimizer."""
    from shardwise.engines.simulator import KIND_NAMES
    from shardwise.units import format_seconds

    kinds = {kind for _, kind in sim_step.simulation.after_pipeline()}
    reduced = {KIND_NAMES.index("dp"), KIND_NAMES.index("dp-gather")} & kinds
    # a calibration's fixed time per step runs after the pipeline too (`engines.simulated`): say so,
    # else a 3 s rest reads as an optimizer step
    fixed = float(sim_step.estimate.scenario.cluster.step_overhead_s)
    tail = f", and {format_seconds(fixed)} of fixed time per step (calibrated)" if fixed > 0 else ""
    if reduced or int(sim_step.estimate.scenario.plan.dp) > 1:
        return "gradient reduction and the optimizer" + tail
    if KIND_NAMES.index("embedding-sync") in kinds:
        return "the tied embeddings' gradient sync (first and last stage) and the optimizer" + tail
    return "the optimizer" + tail


def gantt_title(scn: Any, sim: Any) -> str:
    """The Gantt chart's title: the model, the GPUs, the whole layout (review 51 #13: with only p
    and m, `--tp 8 --pp 8` read as pure PP) and the schedule, then the step and the idle share."""
    layout = ", ".join(
        f"{name}={int(getattr(scn.plan, name))}"
        for name in ("tp", "cp", "dp")
        if name != "cp" or int(getattr(scn.plan, name)) > 1
    )
    return (
        f"{scn.model.name} on {int(scn.cluster.num_gpus)} x {scn.cluster.gpu.name}, {layout}, {sim.schedule}, "
        f"p={sim.p}, m={sim.m}"
        + (f", v={sim.v}" if sim.v > 1 else "")
        + f": step {sim.makespan_s:.3g} s, stages idle {sim.mean_stage_idle_fraction:.1%} (mean)"
    )
