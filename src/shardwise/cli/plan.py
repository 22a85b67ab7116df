"""`shardwise plan`: search every TP x PP x DP layout (and micro-batch, schedule, recompute,
sequence parallelism, ZeRO) for a model, cluster and batch; print the best and why."""

from __future__ import annotations

from typing import Any

import click

from shardwise.cli.options import alias_option, cluster_options, emit_option, emit_version_option, model_options
from shardwise.cli.plan_options import search_options


@click.command()
@model_options
@cluster_options
@search_options
@click.option("--top", type=click.IntRange(min=1), default=5, show_default=True, help="Plans to show.")
@alias_option(
    "--output",
    "-o",
    "csv_path",
    old=("--csv",),
    metavar="FILE",
    help="Write every evaluated plan (.csv or .parquet, by the extension; - prints the CSV alone).",
)
@alias_option(
    "--plot",
    "heatmap_path",
    old=("--heatmap",),
    metavar="FILE",
    help="Heatmap of the best throughput of every (tp, pp) pair (.png/.svg/.pdf).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the search, the top plans and the why as JSON.")
@click.option(
    "--show-command",
    is_flag=True,
    help="Print the `shardwise predict` command of each plan shown: it gives the same numbers (--json carries it "
    "as each plan's `command`).",
)
@emit_option("the best plan's")
@emit_version_option
def plan(
    top: int,
    csv_path: str | None,
    heatmap_path: str | None,
    as_json: bool,
    show_command: bool,
    emit: str | None,
    emit_version: str | None,
    **options: Any,
) -> None:
    """Find the best TP x PP x DP layout of MODEL on the cluster for a global batch.

    Every valid combination of tp, pp, dp, virtual stages, micro-batch, schedule, recomputation,
    sequence parallelism and ZeRO stage is evaluated; plans that do not fit in memory are dropped
    and counted. For the best plan, each neighbour (one choice changed) is priced to say why it
    wins.

    \b
    Examples:
      shardwise plan --model gpt3-175b --system dgx-a100 --nodes 16 --global-batch 1536
      shardwise plan --model llama3-70b --system dgx-h100 --nodes 4 --global-batch 512 \\
          --tp 8 --memory-headroom 10% --plot plans.png
      shardwise plan --model gpt-1t --system dgx-a100 --nodes 384 --global-batch 3072 -o all.csv
    """
    from shardwise.cli.options import check_output_path, echo_notes
    from shardwise.cli.output import STDOUT
    from shardwise.errors import SpecError
    from shardwise.requests.plan import PlanRequest
    from shardwise.requests.plan_result import NothingFits

    request = PlanRequest.from_options({**options, "top": top, "emit": emit, "emit_version": emit_version})
    rows_out = csv_path == STDOUT  # every plan's row on stdout (alone), as sweep and crossover print theirs
    for flag in [f for f, given in (("--json", as_json), ("--emit", emit), ("--show-command", show_command)) if given]:
        if rows_out:
            raise SpecError(f"give {flag} or -o -, not both (both print)")
    for path, allowed, flag in (
        (None if rows_out else csv_path, (".csv", ".parquet"), "-o"),
        (heatmap_path, (".png", ".svg", ".pdf"), "--plot"),
    ):
        if path is not None:
            check_output_path(path, allowed, flag)
    try:
        outcome = request.run()
    except NothingFits as exc:  # -o holds every evaluated plan, fitting or not: these too
        # exit 0 only when every output asked for was made; otherwise exit 2 and no file changed
        others = [f for f, given in (("--plot", heatmap_path), ("--json", as_json), ("--emit", emit)) if given]
        if csv_path is None or others:
            kept = f"; {csv_path} not written (no plan for {' or '.join(others)})" if csv_path else ""
            raise SpecError(f"{exc}{kept}") from None
        _write_rows(exc.outcome, csv_path, rows_out)
        where = "on stdout" if rows_out else f"written to {csv_path}"
        click.echo(f"note: {exc}; all {exc.outcome.search.evaluated:,} evaluated plans {where}", err=True)
        return
    echo_notes(outcome.notes)
    result, figure = outcome.search, None
    if heatmap_path is not None:
        from shardwise import plots

        figure = plots.save(plots.plan_heatmap(result), heatmap_path)
    if csv_path is not None:
        _write_rows(outcome, csv_path, rows_out)
        if rows_out:
            return
    if as_json:
        from shardwise import export

        click.echo(export.dumps(outcome.as_dict()))
        return
    _print(result, outcome.rows, outcome.why, csv_path, figure, outcome.interval_basis, outcome.spread)
    if outcome.regret is not None:  # the pick's expected regret under the calibration (calibration.regret)
        click.echo(outcome.regret_text())
    if show_command:
        click.echo("the same numbers from predict, plan by plan:")
        for r in outcome.rows:
            click.echo(f"  {r['command']}")
    if outcome.launch is not None:
        from shardwise.emit.report import text

        click.echo(text(outcome.launch))


def _write_rows(outcome: Any, csv_path: str, rows_out: bool) -> None:
    """Every evaluated plan, as -o writes them: to the file, or (-o -) the CSV alone on stdout."""
    from shardwise.tables import csv_text, write_columns

    if rows_out:
        click.echo(csv_text(outcome.table_columns()), nl=False)
    else:
        write_columns(outcome.table_columns(), csv_path)


def _print(
    result: Any,
    rows: list[dict[str, Any]],
    why: list[Any],
    csv_path: str | None,
    figure: Any,
    basis: str,
    spread: Any,
) -> None:
    import math
    import textwrap

    from rich import box
    from rich.table import Table

    from shardwise.analyses.plan_explain import PARTS, describe
    from shardwise.analyses.plan_search import objective_text
    from shardwise.calibration.spreads import Z80
    from shardwise.cli.plan_cells import plan_label, recompute_cell
    from shardwise.cli.render import across_servers, console, servers_of
    from shardwise.engines.result import tp_comm_name
    from shardwise.units import format_seconds, format_seconds_range

    out = console()
    m, c = result.model, result.cluster
    inter = f"; {across_servers(c)}" if c.inter_node_link is not None and int(c.nodes) > 1 else ""
    out.print(
        f"[bold]{m.name}[/] on {int(c.num_gpus)} x {c.gpu.name} ({servers_of(c)}, "
        f"{c.intra_node_link.name} inside{inter}); global batch {result.global_batch} x {m.seq_len} tokens; "
        f"objective: {objective_text(result.space.objective)}"
        + (f"; LoRA rank {rank}, base weights frozen" if (rank := result.space.execution.get("lora_rank")) else "")
        + (
            f" (adapters on {result.space.execution.get('lora_targets')})"
            if rank and result.space.execution.get("lora_targets", "qkv,proj,fc1,fc2") != "qkv,proj,fc1,fc2"
            else ""
        )
        + (f"; packed documents of {doc} tokens" if (doc := result.space.execution.get("packed_document_len")) else "")
        + (f"; {mtp} multi-token-prediction module(s)" if (mtp := result.space.execution.get("mtp_layers")) else "")
        + (
            f"; {flushes} pipeline flushes per step"
            if (flushes := result.space.execution.get("pipeline_flushes", 1)) > 1
            else ""
        )
        + (
            f"; the first {whole} layer(s) of each stage (model chunk) recomputed whole unless recompute is full"
            if (whole := result.space.recompute_layers)
            else ""
        )
    )
    fit = result.evaluated - result.dropped_for_memory
    out.print(
        f"searched {result.evaluated:,} plans; {result.dropped_for_memory:,} do not fit in memory and were "
        f"dropped, {fit:,} fit; the best {len(rows)}:"
    )
    table = Table(header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    many = result.space.objective != "time"  # plans may use fewer GPUs
    with_cp = any(r["cp"] > 1 for r in rows)
    hybrid = any(r["shard_group"] > 0 for r in rows)
    cols = [
        *(["GPUs"] if many else []),
        "tp",
        "pp",
        "dp",
        *(["ep", "etp"] if m.is_moe else []),
        *(["cp"] if with_cp else []),
        "mb",
        "schedule",
        "recompute",
        "SP",
        "ZeRO",
        *(["shard\ngroup"] if hybrid else []),
        "step",
        "80%\nrange",
        "tok/s\n/GPU",
        "MFU",
        "mem\nGB",
    ]
    for col in cols:
        table.add_column(
            col,
            justify="left" if col in ("schedule", "recompute", "SP") else "right",
            no_wrap=col in ("schedule", "step", "80%\nrange"),
        )
    for r in rows:
        sched = f"interl. v{r['vpp']}" if r["vpp"] > 1 else r["schedule"]
        table.add_row(
            *([str(r["gpus"])] if many else []),
            str(r["tp"]),
            str(r["pp"]),
            str(r["dp"]),
            *([str(r["ep"]), str(r["etp"])] if m.is_moe else []),
            *([str(r["cp"])] if with_cp else []),
            str(r["micro_batch"]),
            sched,
            recompute_cell(r),
            "on" if r["sequence_parallel"] else "off",
            str(r["zero_stage"]),
            *([str(r["shard_group"] or ("all" if r["zero_stage"] else "-"))] if hybrid else []),
            format_seconds(r["step_time_s"]) + ("*" if r.get("simulated") else ""),
            format_seconds_range(r["step_time_s_low"], r["step_time_s_high"]),
            f"{r['tokens_per_s_per_gpu']:,.0f}",
            f"{r['mfu']:.1%}",
            f"{r['memory_bytes']['total'] / 1e9:.1f}",
        )
    out.print(table)
    out.print(f"[dim]80% range: {basis}[/]")
    if any(r.get("simulated") for r in rows):
        out.print(
            "[dim]* step time simulated operation by operation (the model's for the rest: exact for 1F1B, "
            "GPipe and equal stages, an approximation for interleaved and zero-bubble schedules with unequal "
            "stages, whose order and sends the simulator follows)[/]"
        )
    r = rows[0]
    if len(rows) > 1 and r["tie_with_next"]:
        pair = f"({format_seconds(r['step_time_s'])} and {format_seconds(rows[1]['step_time_s'])})"
        band = f"80%: {math.expm1(Z80 * spread.ratio_log_sd(0, 1)):.0%} either way on their ratio"
        out.print(
            f"[bold]a tie at this confidence:[/] the best two plans {pair} are closer than the calibration "
            f"orders them ({band}); measure both"
            if spread.fit is not None
            else f"[bold]a tie at this confidence:[/] the best two plans {pair} are closer than the model orders "
            f"two layouts of one job ({band}); measure both, or calibrate on your runs"
        )
    names = {**PARTS, "tp_comm": tp_comm_name(r["tp"], r["cp"])}  # the context-parallel ring is in tp_comm
    parts = ", ".join(
        f"{names[k]} {v / r['step_time_s']:.0%}" for k, v in r["breakdown_s"].items() if v / r["step_time_s"] >= 0.005
    )
    out.print(f"best: {plan_label(r)}")
    out.print(f"  {format_seconds(r['step_time_s'])} per step = {parts}")
    out.print("why: each neighbour of the best plan (one choice changed) and what it pays")
    wrap = textwrap.TextWrapper(width=max(out.width, 60) - 1, initial_indent="  - ", subsequent_indent="    ")
    cannot = [a for a in why if a.framework_cannot]  # review 41: apart from the runnable neighbours
    shown = [a for a in why if (a.fits_in_memory or a.relative < 0) and not a.framework_cannot]
    for alt in shown:
        out.print(wrap.fill(describe(alt)), highlight=False, markup=False)
    rest = [a.change for a in why if a not in shown and not a.framework_cannot]
    if rest:
        out.print(wrap.fill(f"do not fit in memory: {'; '.join(rest)}"), markup=False)
    if cannot:
        stack = str(result.space.execution.get("framework") or "the framework")
        out.print(f"not runnable on {stack} (for scale, what the model says they would change):")
        for alt in cannot:
            out.print(wrap.fill(describe(alt)), highlight=False, markup=False)
    _print_headroom(out, result, r, wrap)
    if csv_path is not None:
        out.print(f"all {result.evaluated:,} plans: {csv_path}")
    if figure is not None:
        out.print(f"figure: {figure}")


def _print_headroom(out: Any, result: Any, best: dict[str, Any], wrap: Any) -> None:
    """The plans dropped only for the headroom (`analyses.plan_headroom`) that beat the best plan, the
    fastest three (none: nothing; `--json`'s `within_headroom` lists them all the same, each with
    `faster_than_best`). Review 42 F9: slower ones were listed beside them."""
    import textwrap

    import numpy as np

    from shardwise.analyses.plan_headroom import within_headroom
    from shardwise.cli.plan_cells import plan_label
    from shardwise.units import format_seconds

    held = within_headroom(result)
    faster = int(np.count_nonzero(held.step_time_s < best["step_time_s"]))
    if faster == 0:
        return
    free = result.space.memory_headroom_bytes / 1e9
    items = []
    for i, step, mem in zip(held.indices[:3], held.step_time_s[:3], held.memory_bytes[:3], strict=True):
        if step < best["step_time_s"]:
            gain = f"{1 - step / best['step_time_s']:.1%} faster than the best"
            items.append(f"{plan_label(result.row(int(i)))}: {format_seconds(float(step))}, {gain}, {mem / 1e9:.1f} GB")
    more = f" (fastest 3 of the {faster} faster than the best)" if faster > 3 else ""
    text = f"fits, but within the headroom ({free:.0f} GB kept free, --memory-headroom){more}: " + "; ".join(items)
    out.print(textwrap.fill(text, width=wrap.width), highlight=False, markup=False)
