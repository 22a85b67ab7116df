"""`shardwise calibrate`: fit the cost model's physical parameters to the user's measured runs."""

from __future__ import annotations

from typing import Any

import click
from click.core import ParameterSource

from shardwise.cli.options import cluster_options, model_options
from shardwise.cli.plan_options import search_options


def _names(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[str, ...] | None:
    from shardwise.calibration.parameters import BY_NAME

    if value is None:
        return None
    names = tuple(v.strip() for v in value.split(",") if v.strip())
    bad = [n for n in names if n not in BY_NAME]
    if bad or not names:
        raise click.BadParameter(f"{bad[0] if bad else value!r} is not a parameter; choose from {', '.join(BY_NAME)}")
    return names


def _settings(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise click.BadParameter(f"{item!r} is not KEY=VALUE (e.g. system=dgx-h100)")
        name = key.strip().lower().replace("-", "_")
        if name in out and out[name] != value.strip():  # the last one was kept without a word (review 37)
            raise click.BadParameter(f"{name} is given twice ({out[name]} and {value.strip()}); give it once")
        out[name] = value.strip()
    return out


@click.command()
@click.argument("runs", metavar="[RUNS.csv|LOG...]", nargs=-1, type=click.Path(dir_okay=False))
@click.option(
    "--set",
    "given",
    multiple=True,
    callback=_settings,
    metavar="KEY=VALUE",
    help="For logs: a run column the log does not state (system=dgx-h100, model=llama3-8b, tp=2, ...).",
)
@click.option(
    "--output",
    "-o",
    default="calibration.yaml",
    show_default=True,
    metavar="FILE",
    help="Where to write the calibration (YAML); give it to other commands with --calibration FILE.",
)
@click.option(
    "--params",
    callback=_names,
    metavar="NAME[,NAME...]",
    help="Fit only these parameters (default: as many as the runs allow, in the documented order).",
)
@click.option("--max-params", type=click.IntRange(min=0, max=8), help="Fit at most this many parameters.")
@click.option("--json", "as_json", is_flag=True, help="Print the fit (or the suggestions) as JSON.")
@click.option(
    "--suggest",
    type=click.IntRange(min=1, max=20),
    metavar="N",
    help="Suggest the N runs of your job (give it as `plan` takes it: --model, --system, --nodes, --global-batch) "
    "whose measurement most reduces the expected regret of the planner's pick, with launch commands; from the "
    "RUNS given, else --calibration FILE, else the presets.",
)
@click.option(
    "--emit",
    type=click.Choice(["megatron", "torchtitan", "deepspeed"], case_sensitive=False),
    help="With --suggest: the tool whose launch commands to print [default: the --framework's, else megatron].",
)
@click.option("--emit-version", metavar="VERSION", help="With --suggest: the tool version --emit writes for.")
@model_options
@cluster_options
@search_options
def calibrate(
    runs: tuple[str, ...],
    given: dict[str, str],
    output: str,
    params: tuple[str, ...] | None,
    max_params: int | None,
    as_json: bool,
    suggest: int | None,
    emit: str | None,
    emit_version: str | None,
    **job: Any,
) -> None:
    """Fit GEMM efficiency, link bandwidths and fixed overheads to your own measured runs.

    RUNS.csv has one run per row: model, system, num_gpus, tp, pp, global_batch (optional dp, cp,
    vpp, micro_batch, ep, etp, layers, seq_len, recompute, precision, framework, id, group) and one
    measurement: step_time_s, tokens_per_s_per_gpu or model_tflops_per_gpu (tflops_count: full-square,
    the default, causal or maxtext-6n-causal); a serving row: model,
    system, tp, input_len, output_len, concurrency and one of ttft_s, tpot_s, e2e_s,
    throughput_tokens_per_s. Other files are read as trainer
    logs (Megatron-LM/NeMo, torchtitan, DeepSpeed), one run each; --set gives what a log does not
    say. A run far from the prediction is explained (what would have to be true) and fitted; it is
    refused only when no parameter within its physical range explains it. See docs/calibration.md.

    With --suggest N and a job (the flags of `plan`), print the N runs to measure next.

    \b
    Examples:
      shardwise calibrate my_runs.csv -o h100.yaml
      shardwise calibrate logs/*.log --set system=dgx-h100 --set model=llama3-70b
      shardwise calibrate --suggest 3 --model llama3-8b --system dgx-h100 --nodes 64 --global-batch 512
      shardwise predict --model llama3-70b --system dgx-h100 --nodes 8 --tp 4 --pp 4 \\
          --global-batch 512 --calibration h100.yaml
    """
    from pathlib import Path

    from shardwise.atomic import check_writable
    from shardwise.calibration import store
    from shardwise.errors import SpecError

    if suggest is None and (emit or emit_version):
        raise SpecError("--emit and --emit-version go with --suggest N (the runs to measure next)")
    if suggest is None and _job_given(job):
        raise SpecError(
            "--model, --system, --nodes, ... describe a job for --suggest N; give --suggest, or leave them out"
        )
    if not runs:
        if suggest is None:
            raise SpecError("calibrate: give RUNS.csv (or trainer logs), or --suggest N with a job")
        if click.get_current_context().get_parameter_source("output") is not ParameterSource.DEFAULT:
            raise SpecError(f"-o {output}: --suggest without RUNS fits nothing to write; give RUNS, or drop -o")
        from shardwise.cli.calibrate_suggest import run_suggest
        from shardwise.cli.options import load_calibration

        cal = load_calibration(job)
        basis = f"calibration {cal.path} ({cal.runs} run(s))" if cal else "the presets' priors (no calibration yet)"
        run_suggest(suggest, cal.fit if cal else None, basis, job, emit, emit_version, as_json, [])
        return
    from shardwise.files import refuse_stdin

    for path in runs:  # as every command's input flags (a log piped in: save it, and give its name)
        refuse_stdin(path, "calibrate")
    if runs[0].lower() == "suggest" and not Path(runs[0]).exists():  # a subcommand it does not have
        raise SpecError(
            f"calibrate {runs[0]}: there is no such file; the runs to measure next are an option: "
            "shardwise calibrate --suggest N --model ... --system ... --nodes ... --global-batch ..."
        )
    if job.get("calibration"):
        raise SpecError("--calibration: give either RUNS to fit or a calibration to start from, not both")
    for path in runs:
        try:
            same = Path(path).resolve() == Path(output).resolve()
        except OSError:
            same = False
        if same:
            raise SpecError(f"-o {output}: that is an input; writing the calibration there would destroy it")
    if Path(output).suffix.lower() not in (".yaml", ".yml"):
        raise SpecError(f"-o {output}: a calibration is a YAML file; give a name ending in .yaml")
    from shardwise.cli.options import refuse_given_elsewhere

    refuse_given_elsewhere(output, "-o")  # a --framework or --calibration file given beside the runs
    check_writable(output)
    from shardwise.requests.calibrate import CalibrateRequest

    answer = CalibrateRequest(runs, tuple(given.items()), params, max_params).run()
    from shardwise.cli.options import echo_notes
    from shardwise.requests.calibrate import model_notes

    echo_notes(model_notes(answer.measured))
    measured, steps, notes, result = answer.measured, answer.values, list(answer.notes), answer.fit
    doc = answer.document()
    store.from_document(doc, output)  # never write a file that --calibration would refuse
    # -o left at its default: --suggest writes no file (its answer is the runs to measure; an earlier
    # calibration.yaml stays), a plain calibrate writes it and says when it replaced one
    named = click.get_current_context().get_parameter_source("output") is not ParameterSource.DEFAULT
    replaced = not named and Path(output).exists()
    if suggest is None or named:
        store.save(doc, output)
    if suggest is not None:
        from shardwise.cli.calibrate_suggest import run_suggest

        for note in notes:
            click.echo(f"note: {note}", err=True)
        for line in answer.checks():
            click.echo(f"check: {line}", err=True)
        runs_named = ", ".join(Path(r).name for r in runs)
        basis = (
            f"calibration {output} ({len(measured)} run(s))"
            if named
            else f"the fit of {runs_named} ({len(measured)} run(s))"
        )
        run_suggest(
            suggest,
            result,
            basis,
            job,
            emit,
            emit_version,
            as_json,
            [r.scenario for r in measured],
            ([r.case for r in measured], steps),
            answer.confounded,
        )
        if named:
            click.echo(f"calibration: {output} (use it with --calibration {output})", err=as_json)
        else:
            click.echo("note: no calibration file written: --suggest writes one only where -o FILE names it", err=True)
        return
    if as_json:
        from shardwise import export

        click.echo(export.dumps(answer.as_dict(output)))
        return
    _print(result, measured, steps, output, notes, answer.checks(), answer.why_not_fitted())
    if answer.widened_note():
        click.echo(f"note: {answer.widened_note()}", err=True)
    from shardwise.calibration.confound import lines

    for line in lines(answer.confounded):
        click.echo(f"note: {line}", err=True)
    if replaced:
        click.echo(f"note: {output} was there already and is replaced; -o FILE writes elsewhere", err=True)
    if answer.serving_note():
        click.echo(f"note: {answer.serving_note()}", err=True)


def _job_given(job: dict[str, Any]) -> bool:
    """Whether a job flag was given (they matter only with --suggest)."""
    return any(job.get(k) for k in ("model_name", "system", "gpu_name", "nodes", "num_gpus", "global_batch"))


BY_NEED_CELL = "left out by need"  # the table's cell for `requests.calibrate.LEFT_BY_NEED`


def _print(
    result: Any, measured: list[Any], steps: Any, output: str, notes: list[str], checks: list[str], why: dict[str, str]
) -> None:
    import numpy as np
    from rich.table import Table

    from shardwise.calibration.checks import at_limit, interval_at_limit, physical
    from shardwise.calibration.parameters import PARAMETERS
    from shardwise.cli.render import console
    from shardwise.requests.calibrate import LEFT_BY_NEED
    from shardwise.units import format_seconds

    out = console()
    for note in notes:
        out.print(f"far from the prediction: {note}", markup=False, highlight=False)
    n, k = len(measured), len(result.fitted)
    out.print(f"{n} run(s); {k} of {len(PARAMETERS)} parameters fitted (80% intervals from the posterior)")
    table = Table(header_style="bold")
    for col in ("parameter", "value", "80% interval", ""):
        table.add_column(col, justify="left" if col in ("parameter", "") else "right")
    limits, reaches = at_limit(result), interval_at_limit(result)
    for p in PARAMETERS:
        value = result.values[p.name]
        if p.name in result.fitted:
            lo, hi = result.interval80(p.name)
            if p.unit == "s":
                shown = _seconds(value, lo, hi)
            elif p.unit == "tokens":
                shown = (f"{value:,.0f} tokens", f"{lo:,.0f}-{hi:,.0f}")
            else:
                shown = (f"{value:.3f}", f"{lo:.3f}-{hi:.3f}")
            absolute = physical([r.scenario for r in measured], p.name, value)
            limit = f"[bold]at its {limits[p.name]} limit[/]" if p.name in limits else ""
            if p.name in reaches:
                side = {"both": "both limits"}.get(reaches[p.name], f"its {reaches[p.name]} limit")
                limit = f"[bold]interval reaches {side}: the runs hardly bound it[/]"
            table.add_row(p.name, *shown, ": ".join(x for x in (p.description, absolute, limit) if x))
        else:
            table.add_row(
                f"[dim]{p.name}[/]",
                "[dim]not fitted[/]",
                "",
                f"[dim]{BY_NEED_CELL if why.get(p.name) == LEFT_BY_NEED else why.get(p.name, '')}[/]",
            )
    out.print(table)
    if not k:
        out.print(
            "nothing fitted: no parameter explains the runs better than the presets do (they scatter about the "
            "prediction): with this file, predictions and their intervals stay the uncalibrated ones"
        )
    if LEFT_BY_NEED in why.values():
        out.print(f"{BY_NEED_CELL}: {LEFT_BY_NEED.split(': ', 1)[1]} (Laplace approximation; docs/calibration.md)")
    runs = Table(title="each run: measured and predicted", title_justify="left", header_style="bold")
    for col in ("run", "measured", "before", "error", "calibrated", "error"):
        runs.add_column(col, justify="left" if col == "run" else "right")
    for r, m, b, a in zip(measured, steps, result.before_log_error, result.after_log_error, strict=True):

        def show(v: float, metric: str = r.metric) -> str:
            return f"{v:,.0f} tok/s" if metric.startswith("throughput") else format_seconds(v)

        label = r.run_id if r.metric == "step_time_s" else f"{r.run_id} ({r.metric.removesuffix('_s')})"
        runs.add_row(
            label,
            show(m),
            show(m * np.exp(b)),
            f"{np.expm1(b):+.1%}",
            show(m * np.exp(a)),
            f"{np.expm1(a):+.1%}",
        )
    out.print(runs)
    for line in checks:
        out.print(f"check: {line}", markup=False, highlight=False)
    before = float(np.mean(np.abs(np.expm1(result.before_log_error))))
    after = float(np.mean(np.abs(np.expm1(result.after_log_error))))
    out.print(
        f"mean absolute error {before:.1%} before, {after:.1%} calibrated (on the runs fitted: an optimistic "
        f"figure; `shardwise validate --calibrated` measures it on runs left out); spread "
        f"{result.noise_log_sd:.3f} (log), so a calibrated prediction's 80% interval is at least "
        f"+-{np.expm1(1.2816 * result.noise_log_sd):.0%}"
    )
    out.print(f"calibration: {output} (use it with --calibration {output})")


def _seconds(value: float, lo: float, hi: float) -> tuple[str, str]:
    from shardwise.units import format_seconds

    return format_seconds(value), f"{format_seconds(lo)}-{format_seconds(hi)}"


# The job's global batch is required by `plan`, not by a calibration without --suggest.
for _param in calibrate.params:
    if _param.name == "global_batch":
        _param.required = False
