"""`shardwise plan`: search every TP x PP x DP layout (and micro-batch, schedule, recompute,
sequence parallelism, ZeRO) for a model, cluster and batch; print the best and why."""

from __future__ import annotations

from typing import Any

import click

from shardwise.cli.options import (
    _stack,
    alias_option,
    cluster_options,
    execution_options,
    lora_rank_option,
    model_options,
)


def _ints(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    try:
        out = tuple(int(v) for v in value.split(","))
    except ValueError:
        raise click.BadParameter(f"{value!r}: give whole numbers separated by commas, e.g. 4,8") from None
    from shardwise.specs._checks import MAX_WHOLE

    low, high = (0, 3) if param.name == "zero" else (1, MAX_WHOLE)
    if any(v < low or v > high for v in out):
        allowed = "0, 1, 2 or 3" if param.name == "zero" else f"whole numbers from 1 to {MAX_WHOLE:,}"
        raise click.BadParameter(f"{value!r}: values must be {allowed}")
    return out


def _execution(options: dict[str, Any]) -> dict[str, Any]:
    """The framework's execution flags (and those given) for every searched plan; ZeRO is searched."""
    from shardwise.cli.options import execution_kwargs

    out = execution_kwargs({**options, "zero": 0})
    out.pop("zero_stage", None)
    out["flash_attention"] = options["flash_attention"]
    out["lora_rank"] = options["lora_rank"]
    return out


def _names(allowed: tuple[str, ...]) -> Any:
    def parse(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[str, ...] | None:
        if value is None:
            return None
        out = tuple(v.strip() for v in value.split(","))
        bad = [v for v in out if v not in allowed]
        if bad:
            raise click.BadParameter(f"{bad[0]!r} is not allowed; choose from {', '.join(allowed)} (comma-separated)")
        return out

    return parse


search_options = _stack(
    click.option("--global-batch", type=click.IntRange(min=1), required=True, help="Sequences per optimizer step."),
    click.option("--tp", callback=_ints, metavar="N[,N...]", help="Fix tensor parallelism to these values."),
    click.option("--pp", callback=_ints, metavar="N[,N...]", help="Fix pipeline stages to these values."),
    click.option("--dp", callback=_ints, metavar="N[,N...]", help="Fix data parallelism to these values."),
    click.option("--vpp", callback=_ints, metavar="N[,N...]", help="Fix virtual stages per GPU (1 = not interleaved)."),
    click.option(
        "--cp",
        callback=_ints,
        metavar="N[,N...]",
        help="Fix context parallelism to these values [default: searched from 8K-token sequences on, else 1].",
    ),
    click.option(
        "--ep",
        callback=_ints,
        metavar="N[,N...]",
        help="Fix expert parallelism to these values (mixture-of-experts models) [default: searched].",
    ),
    click.option("--micro-batch", callback=_ints, metavar="N[,N...]", help="Fix the micro-batch size."),
    click.option(
        "--schedule",
        callback=_names(("gpipe", "1f1b", "interleaved", "zb-h1")),
        metavar="NAME[,NAME...]",
        help="Allowed pipeline schedules: gpipe, 1f1b, interleaved, zb-h1 [default: all].",
    ),
    click.option(
        "--recompute",
        callback=_names(("none", "selective", "full")),
        metavar="MODE[,MODE...]",
        help="Allowed recomputation: none, selective, full [default: all; selective only without "
        "flash attention, where it differs from none].",
    ),
    click.option(
        "--sequence-parallel",
        type=click.Choice(["on", "off", "any"]),
        default="any",
        show_default=True,
        help="Sequence parallelism (with tp > 1).",
    ),
    click.option("--zero", callback=_ints, metavar="N[,N...]", help="Allowed ZeRO stages (0-3) [default: all]."),
    lora_rank_option,
    click.option(
        "--zero-with-pp",
        is_flag=True,
        help="Also try ZeRO-2/3 with pipeline parallelism (PyTorch FSDP2 + PP; DeepSpeed's pipeline "
        "engine and Megatron-LM do not combine them).",
    ),
    click.option("--max-tp", type=click.IntRange(min=1), help="Largest tensor-parallel degree."),
    click.option(
        "--tp-within-node/--tp-across-nodes",
        default=True,
        show_default=True,
        help="Keep each TP group inside a server (on NVLink).",
    ),
    click.option(
        "--max-micro-batch",
        type=click.IntRange(min=1),
        default=16,
        show_default=True,
        help="Largest micro-batch searched.",
    ),
    click.option(
        "--max-vpp",
        type=click.IntRange(min=1),
        default=8,
        show_default=True,
        help="Most virtual stages per GPU searched.",
    ),
    click.option(
        "--memory-headroom",
        default="10%",
        show_default=True,
        metavar="BYTES|PCT",
        help="Memory to keep free on each GPU beyond the model's estimate, e.g. 8GB or 10% (a margin for the "
        "estimate's own error: see `shardwise validate memory`; 0 plans to the byte).",
    ),
    click.option(
        "--objective",
        type=click.Choice(["time", "throughput-per-gpu"]),
        default="time",
        show_default=True,
        help="time: the fastest step on all the GPUs; throughput-per-gpu: the most tokens/s per GPU, "
        "possibly on fewer servers.",
    ),
    execution_options,
)


@click.command()
@model_options
@cluster_options
@search_options
@click.option("--top", type=click.IntRange(min=1), default=5, show_default=True, help="Plans to show.")
@click.option("--csv", "csv_path", metavar="FILE", help="Write every evaluated plan (.csv or .parquet).")
@alias_option(
    "--plot",
    "heatmap_path",
    old=("--heatmap",),
    metavar="FILE",
    help="Heatmap of the best throughput of every (tp, pp) pair (.png/.svg/.pdf).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the search, the top plans and the why as JSON.")
@click.option(
    "--emit",
    type=click.Choice(["megatron", "torchtitan", "deepspeed", "vllm"], case_sensitive=False),
    help="Also print the best plan's launch command for this tool, re-priced where the tool runs it differently "
    "(docs/emit/). vllm serves: use `shardwise serve --emit vllm`.",
)
@click.option(
    "--emit-version",
    metavar="VERSION",
    help="The tool version --emit writes for: megatron main|core-0.13, torchtitan main, deepspeed master "
    "[default: the first].",
)
def plan(
    top: int,
    csv_path: str | None,
    heatmap_path: str | None,
    as_json: bool,
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
      shardwise plan --model gpt-1t --system dgx-a100 --nodes 384 --global-batch 3072 --csv all.csv
    """
    from shardwise.analyses.planner import SearchSpace, search
    from shardwise.cli.options import build_cluster, build_model, check_output_path

    emit = emit.lower() if emit else None
    if emit_version is not None and emit is None:
        from shardwise.errors import SpecError

        raise SpecError("--emit-version needs --emit TARGET")
    if emit == "vllm":
        from shardwise.errors import SpecError

        raise SpecError(
            "--emit vllm: vLLM serves models, and `plan` lays out training; use `shardwise serve ... --emit vllm`"
        )

    for path, allowed, flag in (
        (csv_path, (".csv", ".parquet"), "--csv"),
        (heatmap_path, (".png", ".svg", ".pdf"), "--plot"),
    ):
        if path is not None:
            check_output_path(path, allowed, flag)
    model = build_model(options)
    cluster = build_cluster({**options, "tp": 1, "pp": 1, "dp": None, "vpp": None, "micro_batch": None})
    space = SearchSpace(
        tp=options["tp"],
        pp=options["pp"],
        dp=options["dp"],
        vpp=options["vpp"],
        cp=options["cp"],
        ep=options["ep"],
        micro_batch=options["micro_batch"],
        schedule=options["schedule"],
        recompute=options["recompute"],
        sequence_parallel={"on": (True,), "off": (False,), "any": None}[options["sequence_parallel"]],
        zero_stage=options["zero"],
        zero_with_pipeline=options["zero_with_pp"],
        max_tp=options["max_tp"],
        tp_within_node=options["tp_within_node"],
        max_micro_batch=options["max_micro_batch"],
        max_vpp=options["max_vpp"],
        memory_headroom_bytes=_headroom(options["memory_headroom"], float(cluster.gpu.memory_bytes)),
        objective=options["objective"],
        precision=options["precision"],
        execution=_execution(options),
    )
    result = search(model, cluster, options["global_batch"], space)
    best = result.ranked(top)
    if best.size == 0:
        from shardwise.errors import SpecError

        levers = ["more GPUs", "a shorter sequence"]
        if space.recompute is not None and "full" not in space.recompute:
            levers.append("full recomputation")
        if space.zero_stage is not None or not space.zero_with_pipeline:
            levers.append("ZeRO-3 (--zero-with-pp to combine it with a pipeline)")
        if space.memory_headroom_bytes > 0:
            levers.append("less --memory-headroom")
        raise SpecError(
            f"plan: none of the {result.evaluated:,} plans fits in {float(cluster.gpu.memory_bytes) / 1e9:.0f} GB "
            f"per GPU; try {', '.join(levers)}"
        )
    from shardwise.analyses.plan_explain import alternatives
    from shardwise.cli.options import spread_of

    spread = spread_of([result.scenario(int(i)) for i in best], options)
    why = alternatives(result, int(best[0]))
    figure = None
    if heatmap_path is not None:
        from shardwise import plots

        figure = plots.save(plots.plan_heatmap(result), heatmap_path)
    if csv_path is not None:
        from shardwise.tables import write_columns

        write_columns(result.table_columns(), csv_path)
    launch = None
    rows = _with_intervals(result, best, spread)
    if emit is not None:
        from shardwise.emit.report import training_launch

        capacity = float(cluster.gpu.memory_bytes) - space.memory_headroom_bytes
        launch = training_launch(result.scenario(int(best[0])), emit, emit_version, capacity, rows[0]["step_time_s"])
    if as_json:
        _json(result, rows, why, launch, spread.basis)
        return
    _print(result, rows, why, csv_path, figure, spread.basis)
    if options.get("calibration"):  # the pick's expected regret under the calibration (calibration.regret)
        from shardwise.calibration.regret import text as regret_text
        from shardwise.cli.options import load_calibration

        click.echo(regret_text(result, load_calibration(options).fit, spread.basis))
    if launch is not None:
        from shardwise.emit.report import text

        click.echo(text(launch))


def _headroom(text: str, capacity_bytes: float) -> float:
    from shardwise.errors import SpecError
    from shardwise.units import parse_bytes

    t = text.strip()
    try:
        if t.endswith("%"):
            frac = float(t[:-1]) / 100
            if not 0 <= frac < 1:
                raise ValueError
            return frac * capacity_bytes
        value = parse_bytes(t)
    except (ValueError, SpecError):
        raise SpecError(f"--memory-headroom: {text!r} is not allowed; give bytes (8GB) or a percentage (10%)") from None
    if not 0 <= value < capacity_bytes:
        raise SpecError(f"--memory-headroom: {text!r} must be between 0 and the GPU's {capacity_bytes / 1e9:.0f} GB")
    return value


def _label(row: dict[str, Any]) -> str:
    sched = row["schedule"] + (f" v={row['vpp']}" if row["vpp"] > 1 else "")
    split = f", layers per stage {row['stage_layers']}" if row.get("stage_layers") else ""
    ep = f" ep={row['ep']}" if row.get("ep", 1) > 1 else ""
    ep += f" cp={row['cp']}" if row.get("cp", 1) > 1 else ""
    return (
        f"tp={row['tp']} pp={row['pp']} dp={row['dp']}{ep}, micro-batch {row['micro_batch']}, {sched}, recompute "
        f"{row['recompute']}, SP {'on' if row['sequence_parallel'] else 'off'}, ZeRO-{row['zero_stage']}{split}"
    )


def _with_intervals(result: Any, best: Any, spread: Any) -> list[dict[str, Any]]:
    """The best plans' rows with their 80% intervals, and whether each is a tie with the next:
    the next plan's value lies inside this one's interval (or this one's inside the next's)."""
    rows = []
    for j, i in enumerate(best):
        r = dict(result.row(int(i)))
        lo, hi = spread.bounds(r["step_time_s"])
        r["step_time_s_low"], r["step_time_s_high"] = float(lo[j]), float(hi[j])
        tok = r["tokens_per_s_per_gpu"]
        r["tokens_per_s_per_gpu_low"] = tok * r["step_time_s"] / r["step_time_s_high"]
        r["tokens_per_s_per_gpu_high"] = tok * r["step_time_s"] / r["step_time_s_low"]
        rows.append(r)
    key = "step_time_s" if result.space.objective == "time" else "tokens_per_s_per_gpu"
    from itertools import pairwise

    for a, b in pairwise(rows):
        a["tie_with_next"] = bool(
            a[f"{key}_low"] <= b[key] <= a[f"{key}_high"] or b[f"{key}_low"] <= a[key] <= b[f"{key}_high"]
        )
    if rows:
        rows[-1]["tie_with_next"] = None
    return rows


def _json(result: Any, rows: list[dict[str, Any]], why: list[Any], launch: dict[str, Any] | None, basis: str) -> None:
    from dataclasses import asdict

    from shardwise import export
    from shardwise.analyses.plan_explain import describe

    click.echo(
        export.dumps(
            {
                "model": export.model_dict(result.model),
                "cluster": export.cluster_dict(result.cluster),
                "global_batch": result.global_batch,
                "objective": result.space.objective,
                "evaluated": result.evaluated,
                "dropped_for_memory": result.dropped_for_memory,
                "seconds": result.seconds,
                "plans": rows,
                "interval": {"level": 0.8, "basis": basis},
                "why": [{**asdict(a), "text": describe(a)} for a in why],
                "launch": launch,
            }
        )
    )


def _print(
    result: Any, rows: list[dict[str, Any]], why: list[Any], csv_path: str | None, figure: Any, basis: str
) -> None:
    import textwrap

    from rich import box
    from rich.table import Table

    from shardwise.analyses.plan_explain import PARTS, describe
    from shardwise.cli.render import console
    from shardwise.units import format_seconds, format_seconds_range

    out = console()
    m, c = result.model, result.cluster
    inter = f", {c.inter_node_link.name} across" if c.inter_node_link is not None and int(c.nodes) > 1 else ""
    out.print(
        f"[bold]{m.name}[/] on {int(c.num_gpus)} x {c.gpu.name} ({c.nodes} server(s) of {c.gpus_per_node}, "
        f"{c.intra_node_link.name} inside{inter}); global batch {result.global_batch} x {m.seq_len} tokens; "
        f"objective: {'step time' if result.space.objective == 'time' else 'tokens/s per GPU'}"
        + (f"; LoRA rank {rank}, base weights frozen" if (rank := result.space.execution.get("lora_rank")) else "")
    )
    fit = result.evaluated - result.dropped_for_memory
    out.print(
        f"searched {result.evaluated:,} plans; {result.dropped_for_memory:,} do not fit in memory and were "
        f"dropped, {fit:,} fit; the best {len(rows)}:"
    )
    table = Table(header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    many = result.space.objective != "time"  # plans may use fewer GPUs
    with_cp = any(r["cp"] > 1 for r in rows)
    cols = [
        *(["GPUs"] if many else []),
        "tp",
        "pp",
        "dp",
        *(["ep"] if m.is_moe else []),
        *(["cp"] if with_cp else []),
        "mb",
        "schedule",
        "recompute",
        "SP",
        "ZeRO",
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
            *([str(r["ep"])] if m.is_moe else []),
            *([str(r["cp"])] if with_cp else []),
            str(r["micro_batch"]),
            sched,
            r["recompute"],
            "on" if r["sequence_parallel"] else "off",
            str(r["zero_stage"]),
            format_seconds(r["step_time_s"]),
            format_seconds_range(r["step_time_s_low"], r["step_time_s_high"]),
            f"{r['tokens_per_s_per_gpu']:,.0f}",
            f"{r['mfu']:.1%}",
            f"{r['memory_bytes'] / 1e9:.1f}",
        )
    out.print(table)
    out.print(f"[dim]80% range: {basis}[/]")
    r = rows[0]
    if len(rows) > 1 and r["tie_with_next"]:
        out.print(
            f"[bold]a tie at this confidence:[/] the best two plans are inside each other's 80% range "
            f"({format_seconds(r['step_time_s'])} and {format_seconds(rows[1]['step_time_s'])}); measure both"
            + ("" if basis.startswith("calibration") else ", or calibrate on your runs to narrow the ranges")
        )
    parts = ", ".join(
        f"{PARTS[k]} {v / r['step_time_s']:.0%}" for k, v in r["breakdown_s"].items() if v / r["step_time_s"] >= 0.005
    )
    out.print(f"best: {_label(r)}")
    out.print(f"  {format_seconds(r['step_time_s'])} per step = {parts}")
    out.print("why: each neighbour of the best plan (one choice changed) and what it pays")
    wrap = textwrap.TextWrapper(width=max(out.width, 60) - 1, initial_indent="  - ", subsequent_indent="    ")
    shown = [a for a in why if a.fits or a.relative < 0]
    for alt in shown:
        out.print(wrap.fill(describe(alt)), highlight=False, markup=False)
    rest = [a.change for a in why if a not in shown]
    if rest:
        out.print(wrap.fill(f"do not fit in memory: {'; '.join(rest)}"), markup=False)
    if csv_path is not None:
        out.print(f"all {result.evaluated:,} plans: {csv_path}")
    if figure is not None:
        out.print(f"figure: {figure}")
