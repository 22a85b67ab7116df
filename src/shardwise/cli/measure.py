"""`shardwise measure`: run tensor, pipeline or data parallelism for real on torch.distributed and
put the measured step beside the predicted one (`shardwise.measure`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from shardwise.cli.option_kit import FiniteRange
from shardwise.cli.options import alias_option
from shardwise.errors import SpecError
from shardwise.requests.measure import KINDS


def _common(f: Any) -> Any:
    for option in reversed(
        [
            click.option(
                "--ranks", type=click.IntRange(2, 1024), default=2, show_default=True, help="Processes (GPUs)."
            ),
            click.option(
                "--device",
                type=click.Choice(["auto", "cpu", "cuda"], case_sensitive=False),
                default="auto",
                show_default=True,
                help="auto: NCCL on GPUs when there are any, else gloo on CPUs.",
            ),
            click.option(
                "--dtype",
                type=click.Choice(["bfloat16", "float32"], case_sensitive=False),
                default="bfloat16",
                show_default=True,
                help="Compute type (the prediction prices bf16; float32 only for checking).",
            ),
            click.option(
                "--timeout",
                "timeout_s",
                type=FiniteRange(1, 86400),
                default=600,
                show_default=True,
                help="Seconds before a hung run is ended (every rank).",
            ),
            click.option("--json", "as_json", is_flag=True, help="Print the result as JSON."),
        ]
    ):
        f = option(f)
    return f


def _workload(f: Any) -> Any:
    """What `measure tp|pp|dp` and `measure crossover` run, and the machine they predict it on."""
    for option in reversed(
        [
            click.option(
                "--model", "model_name", default="gpt-125m", show_default=True, help="A GPT-family model preset."
            ),
            click.option("--layers", type=click.IntRange(1, 1000), default=2, show_default=True, help="Layers to run."),
            click.option("--seq-len", type=click.IntRange(1, 1 << 20), default=256, show_default=True),
            click.option("--system", default=None, help="The machine as a system preset (from `measure micro`)."),
        ]
    ):
        f = option(f)
    return f


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def measure() -> None:
    """Run TP, PP or DP for real (torch.distributed: gloo on CPUs, NCCL on GPUs) and compare
    with the prediction.

    \b
    Needs PyTorch: pip install 'shardwise[measure]'. Spawns --ranks processes on this machine,
    or, under torchrun, runs as the rank torchrun gives it (several servers:
    torchrun --nnodes N --nproc-per-node 8 --rdzv-endpoint HOST:PORT -m shardwise measure ...).

    \b
    Examples:
      shardwise measure micro -o machine.yaml          # this machine as a system preset
      shardwise measure tp --system machine.yaml       # 2 layers of gpt-125m at tp=2
      shardwise measure pp --micro-batches 8 --system machine.yaml -o runs.csv
    """


@measure.command("micro")
@_common
@alias_option(
    "--output",
    "-o",
    "out",
    old=("--out",),
    default="machine.yaml",
    show_default=True,
    metavar="FILE",
    help="System preset YAML to write (.yaml or .yml).",
)
@click.option("--repeats", type=click.IntRange(1, 1000), default=5, show_default=True)
@click.option("--max-bytes", type=click.IntRange(4096, 2**34), default=64 * 2**20, show_default=True)
@click.option(
    "--model",
    "model_name",
    default=None,
    help="Also time this model's GEMMs, forward and backward (at --seq-len x --micro-batch tokens, a "
    "quarter and four times that, whole and split over --ranks for TP): the preset keeps each shape's rate "
    "(its GEMM table) and their median share of the best square GEMM's as its matmul efficiency.",
)
@click.option("--seq-len", type=click.IntRange(1, 1 << 20), default=256, show_default=True)
@click.option("--micro-batch", type=click.IntRange(1, 1 << 16), default=1, show_default=True)
def micro(
    ranks: int,
    device: str,
    dtype: str,
    timeout_s: float,
    as_json: bool,
    out: str,
    repeats: int,
    max_bytes: int,
    model_name: str | None,
    seq_len: int,
    micro_batch: int,
) -> None:
    """GEMM rate, memory bandwidth and collective curves -> a system preset (--system FILE)."""
    import yaml

    from shardwise.cli.options import check_output_path
    from shardwise.requests.measure import MicroRequest

    check_output_path(out, (".yaml", ".yml"), "-o")
    request = MicroRequest(
        ranks=ranks,
        device=device,
        dtype=dtype,
        timeout_s=timeout_s,
        model=model_name,
        seq_len=seq_len,
        repeats=repeats,
        max_bytes=max_bytes,
        micro_batch=micro_batch,
        name=Path(out).stem,
    )
    result = request.run()
    if result is None:  # under torchrun, a rank other than 0
        return
    preset = result.pop("preset")
    from shardwise.atomic import atomic_path

    with atomic_path(out) as tmp:
        Path(tmp).write_text(yaml.safe_dump(preset, sort_keys=False), encoding="utf-8")
    if as_json:
        from shardwise import export

        click.echo(export.dumps({**result, "preset": preset, "written": out}))
        return
    (spec,) = preset.values()
    click.echo(f"{result['ranks']} ranks, {result['backend']} on {result['device']}")
    from shardwise.measure.micro import fit_link, preset_summary
    from shardwise.units import format_rate, format_seconds

    for line in preset_summary(spec, dtype):
        click.echo(line)
    for k, curve in result["all_reduce_by_group_s"].items():
        base, bw = fit_link(curve, int(k))
        click.echo(f"  all-reduce over {k} ranks: {format_rate(bw)} bus, {format_seconds(base)} per call")
    curve = result["curves_s"]["all_reduce"]
    base, _ = fit_link(curve, result["ranks"])
    if curve[max(curve)] < 3 * base:
        click.echo(
            f"note: the largest message ({max(curve):,} bytes) takes less than 3 x the per-call latency: the "
            "bandwidth fit is loose; raise --max-bytes"
        )
    click.echo(f"written: {out} (use it as --system {out})")


def _step_command(kind: str) -> Any:
    @measure.command(kind, help=f"Measure {KINDS[kind]} over --ranks processes; beside it, the prediction.")
    @_common
    @_workload
    @click.option("--micro-batch", type=click.IntRange(1, 1 << 16), default=1, show_default=True)
    @click.option("--micro-batches", type=click.IntRange(1, 1 << 16), default=4, show_default=True)
    @click.option(
        "--schedule",
        type=click.Choice(["1f1b", "gpipe", "interleaved", "zb-h1"], case_sensitive=False),
        default="1f1b",
        show_default=True,
        help="pp only (interleaved: --chunks model chunks per stage; zb-h1: the backward split into input and "
        "weight gradients, the weight gradients deferred).",
    )
    @click.option(
        "--chunks", type=click.IntRange(2, 64), default=2, show_default=True, help="Interleaved: chunks per stage."
    )
    @click.option(
        "--sequence-parallel/--no-sequence-parallel",
        default=False,
        show_default=True,
        help="tp only: all-gather / reduce-scatter over sequence shards instead of all-reduces.",
    )
    @click.option("--iters", type=click.IntRange(1, 10000), default=5, show_default=True)
    @click.option("--warmup", type=click.IntRange(0, 10000), default=2, show_default=True)
    @alias_option(
        "--output",
        "-o",
        "out",
        old=("--out",),
        default=None,
        metavar="FILE",
        help="Append the run to this CSV (.csv; the format `shardwise calibrate` reads).",
    )
    @click.option("--trace", default=None, help="Write the last step as a Chrome trace (JSON), one track per rank.")
    @click.option("--plot", default=None, help="Figure of measured against predicted per term (PNG/SVG/PDF).")
    def command(**o: Any) -> None:
        run_step(kind, **o)

    return command


def _settle(o: dict[str, Any]) -> None:
    """Float32 runs are checks, not calibration data."""
    if o.get("dtype") == "float32" and (o.get("out") or o.get("system")):
        raise SpecError(
            "--dtype float32 is for checking the split only: the prediction and the CSV rows price bf16 "
            "(drop -o and --system, or use --dtype bfloat16)"
        )


def _step_request(kind: str, o: dict[str, Any]) -> Any:
    from shardwise.requests.measure import MeasureStepRequest

    keys = ("ranks", "device", "dtype", "timeout_s", "layers", "seq_len", "system", "micro_batch", "micro_batches")
    keys += ("schedule", "chunks", "sequence_parallel", "iters", "warmup")
    return MeasureStepRequest(kind=kind, model=o["model_name"], **{k: o[k] for k in keys})


def run_step(kind: str, **o: Any) -> None:
    from shardwise.cli.options import check_output_path
    from shardwise.measure.records import append_csv, existing_ids

    _settle(o)
    request = _step_request(kind, o)
    if o["out"]:
        check_output_path(o["out"], (".csv",), "-o")
        existing_ids(o["out"])  # measure's own columns, UTF-8: checked before minutes of measuring
        if not o["system"]:
            raise SpecError(
                "-o needs --system (the machine's preset, from `shardwise measure micro`): "
                "calibrate prices the rows on it"
            )
    if o["trace"]:
        check_output_path(o["trace"], (".json",), "--trace")
    if o["plot"]:
        check_output_path(o["plot"], (".png", ".svg", ".pdf"), "--plot")
        if not o["system"]:
            raise SpecError(
                "--plot needs --system (the machine's preset, from `shardwise measure micro`): "
                "it draws the prediction beside the measurement"
            )
    result = request.run()
    if result is None:  # under torchrun, a rank other than 0: rank 0 reports
        return
    o["ranks"] = result.request.ranks
    measured, predicted, row = result.measured, result.predicted, result.row
    if o["out"]:
        append_csv(o["out"], row)
    if o["trace"]:
        from shardwise.measure.trace import write_chrome_trace

        write_chrome_trace(kind, result.ranks, o["trace"])
    if o["plot"] and predicted is not None:
        from shardwise import plots
        from shardwise.measure.records import term_rows
        from shardwise.plots.measure import measured_terms

        title = f"{KINDS[kind]}: {o['ranks']} ranks, {o['layers']} layers of {o['model_name']}, sequence {o['seq_len']}"
        plots.save(measured_terms(term_rows(kind, measured["terms_s"], predicted), title), o["plot"])
    _report(kind, o, result)


def _report(kind: str, o: dict[str, Any], result: Any) -> None:
    from shardwise.units import format_seconds

    measured, predicted = result.measured, result.predicted
    if o["as_json"]:
        from shardwise import export

        click.echo(export.dumps(result.as_dict()))
        return
    comm = sum(measured["comm_s"].values())
    click.echo(
        f"{KINDS[kind]}: {o['ranks']} ranks, {o['layers']} layers of {o['model_name']}, sequence {o['seq_len']}, "
        f"{o['micro_batches']} micro-batch(es) of {o['micro_batch']}"
    )
    click.echo(
        f"measured step: {format_seconds(measured['step_s'])} (communication {format_seconds(comm)}: "
        + ", ".join(f"{k} {format_seconds(v)}" for k, v in measured["comm_s"].items())
        + ")"
    )
    if predicted:
        err = predicted.step_s / measured["step_s"] - 1.0
        click.echo(
            f"predicted step: {format_seconds(predicted.step_s)} ({err:+.0%}): "
            f"compute {format_seconds(predicted.compute_s)}, communication {format_seconds(predicted.comm_s)}, "
            f"bubble {format_seconds(predicted.bubble_s)}"
        )
        from shardwise.measure.records import term_rows

        click.echo("per term, the slowest rank's last step:  measured  predicted")
        for name, m, p in term_rows(kind, measured["terms_s"], predicted):
            click.echo(f"  {name:<38}{format_seconds(m):>10} {format_seconds(p):>10}")
    else:
        click.echo("(give --system machine.yaml, written by `shardwise measure micro`, for the prediction beside it)")
    if o["out"]:
        click.echo(f"appended to {o['out']}")
    if o["trace"]:
        click.echo(f"trace: {o['trace']} (open in https://ui.perfetto.dev or chrome://tracing)")
    if o["plot"]:
        click.echo(f"figure: {o['plot']}")


for _kind in KINDS:
    _step_command(_kind)


@measure.command("crossover")
@_common
@_workload
@click.option("--batches", default="1,2,4,8", show_default=True, help="Batches to run (sequences per step), a list.")
@click.option("--iters", type=click.IntRange(1, 10000), default=3, show_default=True)
@click.option("--warmup", type=click.IntRange(0, 10000), default=1, show_default=True)
@click.option("--plot", default=None, help="Write the figure (PNG/SVG/PDF).")
def crossover(**o: Any) -> None:
    """The articles' experiment for real: TP=N against PP=N over the batch on this machine.

    TP runs each batch as one micro-batch on every rank; PP splits it into micro-batches of one
    sequence through N stages (1F1B). Measured and predicted crossovers side by side."""
    from shardwise.requests.measure import MeasureCrossoverRequest

    _settle(o)
    keys = ("ranks", "device", "dtype", "timeout_s", "layers", "seq_len", "system", "batches", "iters", "warmup")
    request = MeasureCrossoverRequest(model=o["model_name"], **{k: o[k] for k in keys})
    if o["plot"]:
        from shardwise.cli.options import check_output_path

        check_output_path(o["plot"], (".png", ".svg", ".pdf"), "--plot")
    result = request.run()
    if result is None:  # under torchrun, a rank other than 0
        return
    o["ranks"] = result.request.ranks
    _crossover_report(o, result)


def _crossover_report(o: dict[str, Any], result: Any) -> None:
    from shardwise.plots.measure import crossings_text
    from shardwise.units import format_seconds

    batches, series = result.batches, result.series
    found = result.crossings()
    figure = None
    if o["plot"]:
        from shardwise import plots
        from shardwise.plots.measure import measured_crossover

        what = f"{o['layers']} layers of {o['model_name']}, sequence {o['seq_len']}"
        title = f"{' vs '.join(series)} on {o['ranks']} ranks, measured on this machine: {what}"
        figure = str(plots.save(measured_crossover(batches, series, title), o["plot"]))
    if o["as_json"]:
        from shardwise import export

        click.echo(export.dumps(result.as_dict(figure)))
        return
    plans = list(series)
    click.echo(f"{' vs '.join(plans)}: {o['layers']} layers of {o['model_name']}, sequence {o['seq_len']}")
    click.echo("batch  " + "  ".join(f"{p + ' measured':>14} {p + ' predicted':>15}" for p in plans))
    for i, b in enumerate(batches):
        cells = []
        for p in plans:
            pred = series[p]["predicted"]
            cells.append(
                f"{format_seconds(series[p]['measured'][i]):>14} {format_seconds(pred[i]) if pred else '-':>15}"
            )
        click.echo(f"{b:>5}  " + "  ".join(cells))
    for kind, at in found.items():
        if kind == "predicted" and not series[plans[0]]["predicted"]:
            click.echo("predicted crossover: give --system machine.yaml (from `shardwise measure micro`)")
            continue
        click.echo(f"{kind} crossover: {crossings_text(at)}")
    if figure:
        click.echo(f"figure: {figure}")
