"""`shardwise calibrate`: fit the cost model's physical parameters to the user's measured runs."""

from __future__ import annotations

from typing import Any

import click


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
        out[key.strip().lower().replace("-", "_")] = value.strip()
    return out


@click.command()
@click.argument("runs", metavar="RUNS.csv|LOG...", nargs=-1, required=True, type=click.Path(dir_okay=False))
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
@click.option("--max-params", type=click.IntRange(min=0, max=7), help="Fit at most this many parameters.")
@click.option("--json", "as_json", is_flag=True, help="Print the fit as JSON (the calibration file's content).")
def calibrate(
    runs: tuple[str, ...],
    given: dict[str, str],
    output: str,
    params: tuple[str, ...] | None,
    max_params: int | None,
    as_json: bool,
) -> None:
    """Fit GEMM efficiency, link bandwidths and fixed overheads to your own measured runs.

    RUNS.csv has one run per row: model, system, num_gpus, tp, pp, global_batch (optional dp, cp,
    vpp, micro_batch, layers, seq_len, recompute, precision, framework, id) and one measurement:
    step_time_s, tokens_per_s_per_gpu or model_tflops_per_gpu. Other files are read as trainer
    logs (Megatron-LM/NeMo, torchtitan, DeepSpeed), one run each; --set gives what a log does not
    say. See docs/calibration.md.

    \b
    Examples:
      shardwise calibrate my_runs.csv -o h100.yaml
      shardwise calibrate logs/*.log --set system=dgx-h100 --set model=llama3-70b
      shardwise predict --model llama3-70b --system dgx-h100 --nodes 8 --tp 4 --pp 4 \\
          --global-batch 512 --calibration h100.yaml
    """
    from pathlib import Path

    import numpy as np

    from shardwise.atomic import check_writable
    from shardwise.calibration import fit as fitting
    from shardwise.calibration import store
    from shardwise.errors import SpecError

    for path in runs:
        try:
            same = Path(path).resolve() == Path(output).resolve()
        except OSError:
            same = False
        if same:
            raise SpecError(f"-o {output}: that is an input; writing the calibration there would destroy it")
    if Path(output).suffix.lower() not in (".yaml", ".yml"):
        raise SpecError(f"-o {output}: a calibration is a YAML file; give a name ending in .yaml")
    check_writable(output)
    if given and all(p.lower().endswith(".csv") for p in runs):
        raise SpecError("--set fills in what a trainer log does not state; a CSV states its columns itself")
    measured = _read(runs, given)
    steps = np.array([r.measured for r in measured])
    _check_plausible(measured, steps)
    result = fitting.fit([r.case for r in measured], steps, max_params, params)
    gpus = [r.scenario.cluster.gpu.name for r in measured]
    doc = store.document(result, list(runs), [r.run_id for r in measured], gpus, steps, [r.metric for r in measured])
    store.from_document(doc, output)  # never write a file that --calibration would refuse
    store.save(doc, output)
    if as_json:
        from shardwise import export

        click.echo(export.dumps({**doc, "output": output}))
        return
    _print(result, measured, steps, output)


# A run the model misses by more than this factor is refused: a unit slip (ms for s, per-GPU for
# total) or a run the model cannot express is far likelier than a stack three times off.
MAX_MISS = 3.0


def _check_plausible(measured: list[Any], values: Any) -> None:
    import numpy as np

    from shardwise.calibration.fit import Evaluator, LayerStackCase
    from shardwise.errors import SpecError

    predicted = Evaluator([r.case for r in measured]).step_s({})[0]
    for r, m, t in zip(measured, values, predicted, strict=True):
        if isinstance(r.case, LayerStackCase):  # written by `shardwise measure`: no unit to slip
            continue
        ratio = float(t / m)
        if not np.isfinite(ratio) or not 1 / MAX_MISS <= ratio <= MAX_MISS:
            raise SpecError(
                f"{r.where}: {r.metric} {m:.4g} but the model predicts {t:.4g} ({ratio:.3g} x): more than "
                f"{MAX_MISS:g} x apart; check the unit (seconds, tokens/s per GPU) and the layout, or leave the run out"
            )


def _read(paths: tuple[str, ...], given: dict[str, str]) -> list[Any]:
    """Runs from CSV files and trainer logs (one run per log)."""
    from shardwise.calibration.logs import read_log
    from shardwise.calibration.runs import check_distinct, from_rows, read_runs

    out = []
    for path in paths:
        if path.lower().endswith(".csv"):
            out += read_runs(path)
        else:
            out += from_rows([(read_log(path, given), path)])
    check_distinct(out)
    return out


def _print(result: Any, measured: list[Any], steps: Any, output: str) -> None:
    import numpy as np
    from rich.table import Table

    from shardwise.calibration.parameters import PARAMETERS
    from shardwise.cli.render import console
    from shardwise.units import format_seconds

    out = console()
    n, k = len(measured), len(result.fitted)
    out.print(f"{n} run(s); {k} of {len(PARAMETERS)} parameters fitted (80% intervals from the posterior)")
    table = Table(header_style="bold")
    for col in ("parameter", "value", "80% interval", ""):
        table.add_column(col, justify="left" if col in ("parameter", "") else "right")
    for p in PARAMETERS:
        value = result.values[p.name]
        if p.name in result.fitted:
            lo, hi = result.interval80(p.name)
            shown = (f"{value:.3f}", f"{lo:.3f}-{hi:.3f}") if p.log_scale else _seconds(value, lo, hi)
            table.add_row(p.name, *shown, p.description)
        else:
            table.add_row(f"[dim]{p.name}[/]", "[dim]not fitted[/]", "", f"[dim]{result.not_fitted.get(p.name, '')}[/]")
    out.print(table)
    if result.widened:
        from shardwise.calibration.fit import CONFLICT_Z, WIDEN

        out.print(
            f"note: the runs pull {', '.join(result.widened)} more than {CONFLICT_Z:g} prior sd from the presets' "
            f"value (a stack unlike the public ones): its prior was widened {WIDEN:g} x, which explains them better"
        )
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
