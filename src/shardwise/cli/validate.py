"""`shardwise validate`: predicted vs published, per table, with the error."""

from __future__ import annotations

from typing import Any

import click

TABLE_CHOICES = [
    "narayanan21_table1",
    "korthikanti22_table5",
    "korthikanti22_table4",
    "inference",
    "public",
    "planner",
    "inference_pcie",
    "collectives",
    "inference_scaling",
    "memory",
    "ranking",
]
DEFAULT_TABLES = TABLE_CHOICES[:4]


def _run(table: str) -> tuple[list[Any], str, str]:
    """(rows, citation, note) of one table."""
    if table == "inference_pcie":
        from shardwise.analyses.serving_pcie import CITATION, LEFT_OUT, validate_pcie_serving

        rows = validate_pcie_serving()
        right = sum((r.predicted > 1) == (r.measured > 1) for r in rows)
        return rows, CITATION, f"the faster layout predicted right in {right} of {len(rows)}; {LEFT_OUT}"
    if table == "inference":
        from shardwise.analyses.serving_validation import CITATION, validate_serving

        rows, skipped = validate_serving()
        return (
            rows,
            CITATION,
            (f"{skipped} measurement(s) left out: model or GPU not in the presets" if skipped else ""),
        )
    from shardwise.analyses.validation import CITATIONS
    from shardwise.analyses.validation import validate as run

    return run(table), CITATIONS[table], ""


@click.command()
@click.argument("tables", nargs=-1, metavar="[TABLE]...", type=click.Choice(TABLE_CHOICES, case_sensitive=False))
@click.option("--json", "as_json", is_flag=True, help="Print rows and mean absolute errors as JSON.")
@click.option("--markdown", is_flag=True, help="Print Markdown tables (as in the README).")
@click.option(
    "--rows",
    "show_rows",
    type=click.Choice(["none", "dev", "holdout", "all"], case_sensitive=False),
    default="none",
    show_default=True,
    help="public, collectives: also list the runs (points) of this split, one per line; memory: the rows "
    "(dev, holdout: the predicted ones; all: also those left out); --runs: any value but none lists every run.",
)
@click.option(
    "--calibrated",
    is_flag=True,
    help="Instead: calibrate on k = 1, 2, 4, 8 runs of each public stack and predict its other runs "
    "(error and 80%-interval coverage against k).",
)
@click.option("--plot", metavar="FILE", help="--calibrated: write the learning-curve figure (PNG/SVG/PDF).")
@click.option(
    "--runs",
    "runs_file",
    metavar="RUNS.csv",
    type=click.Path(dir_okay=False),
    help="Instead: your own measured runs (the CSV `shardwise calibrate` reads), each predicted with its 80% "
    "interval: error, bias and coverage per group, and the ranking of your layouts.",
)
@click.option(
    "--calibration",
    metavar="FILE",
    type=click.Path(dir_okay=False),
    help="With --runs: price them with a calibration from `shardwise calibrate` (default: uncalibrated).",
)
@click.option(
    "--draws",
    type=click.IntRange(1, 100),
    default=4,
    show_default=True,
    help="--calibrated: random draws of the k calibration runs.",
)
def validate(
    tables: tuple[str, ...],
    as_json: bool,
    markdown: bool,
    show_rows: str,
    calibrated: bool,
    plot: str | None,
    draws: int,
    runs_file: str | None,
    calibration: str | None,
) -> None:
    """Predict the published training runs and compare (all tables by default).

    narayanan21_table1: Narayanan et al. 2021 Table 1 (TFLOP/s per GPU);
    korthikanti22_table5: Korthikanti et al. 2022 Table 5 (seconds per iteration);
    korthikanti22_table4: Korthikanti et al. 2022 Table 4 (one layer, ms);
    inference: TensorRT-LLM's published throughput (FP8 on H100/H200, FP4 on B200/GB200, Llama 3
    8B/70B/405B) and FasterTransformer GPT-13B latencies (A100, TP 1 and 2); with it, TP against a
    layer split on PCIe GPUs (llama.cpp, ExLlamaV2) as throughput ratios;
    public (only when named): about 1,300 public training runs (NVIDIA DGX Cloud benchmarking,
    Megatron-Bridge and NeMo performance summaries, ...), each source predicted by the model fitted
    without it, then per source and split (dev: looked at while developing and used to fit the
    sustained GPU efficiencies; holdout: untouched, but for the LoRA rows, inspected), with MAPE, bias, ranking of
    layouts within each group, and a flat baseline (Eq. 3 FLOPs at Narayanan Table 1's fraction of
    peak);
    planner (only when named): `shardwise plan`'s best plan beside each published run's plan;
    collectives (only when named): the collective model against 236 published nccl-tests and
    torch.distributed points (PCIe to NVLink SHARP, 1 to 64 servers), per curve and split;
    inference_scaling (only when named): serving scaling ratios, TP(k)/TP(k/2) on NVLink, TP
    against a layer split on PCIe, PP(k)/PP(1), EP(k)/TP(k) and PP(k)/TP(k), measured against
    predicted per GPU and link type, with the share of cases whose direction (gain or not) is right;
    memory (only when named): fits_in_memory against published runs that fit or ran out of memory,
    and the estimate against their published peaks, per source;
    ranking (only when named): within each group of published layouts (one model, cluster, GPU count
    and stack), Spearman's rho and the top-1 regret (how much slower the predicted best layout
    measures than the measured best), per group and per stack.

    With --runs RUNS.csv: your own runs instead (`shardwise calibrate`'s CSV), uncalibrated or with
    --calibration FILE: how far the model misses them, whether its 80% intervals hold them, and
    whether it ranks your layouts as they measured.
    """
    if not calibrated and _given("draws"):  # it was ignored without a word (review 37)
        from shardwise.errors import SpecError

        raise SpecError(
            f"--draws {draws}: it sets the random draws of --calibrated's learning curves; add --calibrated"
        )
    if runs_file is not None or calibration is not None:
        from shardwise.cli.validate_runs import check_options, show_runs

        check_options(tables, calibrated, calibration, runs_file, plot)
        show_runs(str(runs_file), calibration, as_json, markdown, show_rows)
        return
    if show_rows != "none" and (calibrated or not {"public", "collectives", "memory"} & set(tables)):
        from shardwise.errors import SpecError

        asked = (
            "--calibrated's learning curves have"
            if calibrated
            else f"the tables asked for ({', '.join(tables)}) have"
            if tables
            else "the default tables (no table named) have"
        )
        raise SpecError(
            f"--rows {show_rows} lists the runs of validate public, collectives or memory (or of --runs); "
            f"{asked} no such list"
        )
    if calibrated or plot:
        from shardwise.errors import SpecError

        if tables:
            raise SpecError("validate --calibrated uses the public runs; give no table names with it")
        if not calibrated:
            raise SpecError("--plot draws the learning curves of --calibrated; add --calibrated")
        from shardwise.cli.validate_calibrated import show_calibrated

        show_calibrated(as_json, markdown, plot, draws)
        return
    for alone in ("public", "collectives", "planner", "inference_scaling", "memory", "ranking"):
        if alone in tables and len(tables) > 1:
            from shardwise.errors import SpecError

            raise SpecError(f"validate {alone}: give it alone (it prints a different table)")
    if "public" in tables:
        from shardwise.cli.validate_public import show_public

        show_public(as_json, markdown, show_rows)
        return
    if "collectives" in tables:
        from shardwise.cli.validate_collectives import show_collectives

        show_collectives(as_json, markdown, show_rows)
        return
    if "planner" in tables:
        _planner(as_json, markdown)
        return
    if "inference_scaling" in tables:
        from shardwise.cli.validate_scaling import show_scaling

        show_scaling(as_json, markdown)
        return
    if "memory" in tables:
        from shardwise.cli.validate_memory import show_memory

        show_memory(as_json, markdown, show_rows)
        return
    if "ranking" in tables:
        from shardwise.cli.validate_ranking import show_ranking

        show_ranking(as_json, markdown)
        return
    from shardwise.analyses.validation import mean_absolute_error

    chosen = list(tables) or DEFAULT_TABLES
    if "inference" in chosen:  # the PCIe boxes' TP-against-layer-split ratios come with it
        chosen.insert(chosen.index("inference") + 1, "inference_pcie")
    runs = {t: _run(t) for t in dict.fromkeys(chosen)}
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
                click.echo(
                    f"| {r.run_id} | {r.label} | {r.metric} | {r.predicted:,.2f} | {r.measured:,.2f} | {r.error:+.1%} |"
                )
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


def _planner(as_json: bool, markdown: bool) -> None:
    from dataclasses import asdict

    from shardwise.analyses.plan_validation import compare_published
    from shardwise.units import format_seconds

    rows = compare_published()
    agree = sum(r.layout.same for r in rows)
    close = sum(r.layout.gain(r.published_step_s) < 0.05 for r in rows)
    summary = (
        f"layout only: the planner picks the published plan for {agree} of {len(rows)} runs and is within 5% "
        f"of it for {close}"
    )
    if as_json:  # an object, as every other --json prints
        from shardwise import export

        click.echo(
            export.dumps(
                {
                    "rows": [asdict(r) for r in rows],
                    "runs": len(rows),
                    "same_layout": agree,
                    "within_5_percent": close,
                    "summary": summary,
                }
            )
        )
        return

    def cell(c: Any, published_s: float) -> tuple[str, str, str]:
        gain = "same plan" if c.same else f"{c.gain(published_s):+.1%}"
        return c.plan, format_seconds(c.step_s), gain

    if markdown:
        click.echo(
            "| run | model, GPUs, batch | published plan | its predicted step | planner, same recompute/SP "
            "| step | gain | where the published plan loses | planner, any feature of its time | step | gain |"
        )
        click.echo("|---|---|---|---:|---|---:|---:|---|---|---:|---:|")
        for r in rows:
            lay, free = cell(r.layout, r.published_step_s), cell(r.free, r.published_step_s)
            click.echo(
                f"| {r.run_id} | {r.model}, {r.gpus}, {r.global_batch} | {r.published} | "
                f"{format_seconds(r.published_step_s)} | {' | '.join(lay)} | {r.layout.why} | "
                f"{' | '.join(free)} |"
            )
        click.echo(f"\n{summary}.")
        return
    from rich.table import Table

    from shardwise.cli.render import console

    out = console()
    table = Table(
        title="the planner against the published plans (predicted step times)",
        title_justify="left",
        header_style="bold",
    )
    for col in ("run", "published", "step", "planner (same recompute, SP)", "step", "gain", "planner (free)", "gain"):
        table.add_column(col, justify="right" if col in ("step", "gain") else "left")
    for r in rows:
        lay, free = cell(r.layout, r.published_step_s), cell(r.free, r.published_step_s)
        table.add_row(r.run_id, r.published, format_seconds(r.published_step_s), *lay, free[0], free[2])
    out.print(table)
    out.print(summary)
    out.print("where each published plan loses against the planner's (same recompute and SP):")
    for r in rows:
        if not r.layout.same:
            out.print(f"  {r.run_id}: {r.layout.why}")


def _given(name: str) -> bool:
    """Whether option `name` was given on the command line (not its default)."""
    from click.core import ParameterSource

    return click.get_current_context().get_parameter_source(name) is ParameterSource.COMMANDLINE
