"""What each page of the explorer computes: its command, built from its checked controls and run
by `run` (a worker pool in the server, `runner.run` in tests), then its figures, its summary, from
what the command printed; and, for a download, its table. Nothing but the controls' values (checked
here, `checks.check`) and the server's own upload files goes into a command."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from collections.abc import Callable
from typing import Any

from dash import html, no_update

from shardwise.engines.result import tp_comm_name
from shardwise.explore import checks, figures, state
from shardwise.explore.runner import Outcome
from shardwise.units import parse_seconds

Files = tuple[str | None, str | None]  # (uploaded model file, uploaded calibration file): the server's paths
Result = tuple[Outcome, list[Any], Any]  # (the command's outcome, its figures, its summary)
Run = Callable[[list[str]], Outcome]  # `runner.run`, or a worker pool's `run`


def _rows_csv(rows: list[dict[str, Any]]) -> str:
    scalars = [k for k, v in (rows[0] if rows else {}).items() if not isinstance(v, (dict, list))]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=scalars, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def compute(page: str, values: dict[str, Any], files: Files, run: Run) -> Result:
    """A page's outcome, figures and summary for its controls' values (a ControlError for a
    value the explorer does not take)."""
    return COMPUTE[page](checks.check(values), files, run)


def _crossover(v: dict[str, Any], files: Files, run: Run) -> Result:
    outcome = run(state.with_files(state.crossover_args(v), *files))
    if outcome.error:
        return outcome, [no_update, no_update], ""
    data = outcome.data
    texts = [c["text"] for c in data["crossings"]] or ["no crossing: one plan is fastest throughout"]
    second = no_update
    first = next((c for c in data["crossings"] if c.get("breakdown_s")), None)
    if first is not None:
        second = figures.breakdown(first["breakdown_s"], first["at"], data["variable"], _tp_comm(first["breakdown_s"]))
    return outcome, [figures.crossover(data), second], " | ".join(texts)


def _winner_map(v: dict[str, Any], files: Files, run: Run) -> Result:
    outcome = run(state.with_files(state.winner_map_args(v), *files))
    if outcome.error:
        return outcome, [no_update], ""
    fig, summary = figures.winner_map(outcome.table or "")
    return outcome, [fig], summary


def _planner(v: dict[str, Any], files: Files, run: Run) -> Result:
    outcome = run(state.with_files(state.planner_args(v), *files))
    if outcome.error:
        return outcome, [no_update, no_update], ""
    data = outcome.data
    top = data["plans"]
    best = top[0] if top else None
    text = (
        f"best: tp={best['tp']}, pp={best['pp']}, dp={best['dp']}, vpp={best['vpp']}, micro-batch "
        f"{best['micro_batch']}, {best['recompute']} recompute: step {best['step_time_s']:.4g} s, "
        f"MFU {best['mfu']:.1%}. Why: " + "; ".join(w["text"] for w in data["why"][:4])
        if best
        else "no plan fits"
    )
    fig2 = figures.planner_heatmap(outcome.table or "", str(v["p-objective"]))
    return outcome, [_plans_figure(top), fig2], [text, _plans_table(top)]


def _plans_table(top: list[dict[str, Any]]) -> html.Table:
    head = (
        "tp",
        "pp",
        "dp",
        "vpp",
        "micro-batch",
        "schedule",
        "recompute",
        "step (s)",
        "tokens/s per GPU",
        "MFU",
        "memory (GB)",
    )
    rows = [
        (
            p["tp"],
            p["pp"],
            p["dp"],
            p["vpp"],
            p["micro_batch"],
            p["schedule"],
            # the first N layers of each stage recomputed whole (`plan`'s searched block recomputation)
            f"{n} layers whole" if (n := p.get("recompute_layers", 0)) and p["recompute"] == "none" else p["recompute"],
            f"{p['step_time_s']:.4g}",
            f"{p['tokens_per_s_per_gpu']:.4g}",
            f"{p['mfu']:.1%}",
            f"{p['memory_bytes']['total'] / 1e9:.1f}",
        )
        for p in top
    ]
    return html.Table(
        [html.Tr([html.Th(h) for h in head]), *[html.Tr([html.Td(str(c)) for c in r]) for r in rows]],
        className="plans",
        id="planner-table",
    )


def _plans_figure(top: list[dict[str, Any]]) -> Any:
    names = [f"tp={p['tp']},pp={p['pp']},dp={p['dp']},v={p['vpp']},mb={p['micro_batch']}" for p in top]
    tp_comm = tp_comm_name([p["tp"] for p in top], [p.get("cp", 1) for p in top]) if top else None
    title = "the best plans: where each step's time goes"
    return figures.stacked(names, [p["breakdown_s"] for p in top], title, tp_comm)


def _tp_comm(plans: dict[str, Any]) -> str | None:
    """What the plans labelled as --plan takes them ('tp=8', 'tp=4,cp=2') call their TP part
    (`engines.result.tp_comm_name`); None where a label is not such a plan."""
    from shardwise.errors import SpecError
    from shardwise.loaders import parse_plan_spec

    try:
        specs = [parse_plan_spec(label) for label in plans]
    except (SpecError, ValueError):
        return None
    return tp_comm_name([s.tp for s in specs], [dict(s.options).get("cp", 1) for s in specs]) if specs else None


def _serving(v: dict[str, Any], files: Files, run: Run) -> Result:
    command = state.with_files(state.serving_args(v), *files)
    outcome = run([*command, "--with-frontier"])
    targets = state.target_args(v)
    searched = run([*command, *targets]) if targets and not outcome.error else None
    if outcome.error or (searched is not None and searched.error):
        return searched if searched is not None and searched.error else outcome, [no_update], ""
    rows = outcome.data["plans"]
    points = {
        p["plan"]: list(
            zip(*(p["frontier"][k] for k in ("tokens_per_s_per_user", "tokens_per_s_per_gpu", "batch")), strict=True)
        )
        for p in rows
        if p["frontier"]["batch"]  # a plan that does not fit has no frontier
    }
    text = " | ".join(_served(p) for p in rows)
    if searched is not None:
        text += " | " + _meets(searched.data)
        outcome = dataclasses.replace(outcome, then=searched.args)  # both commands shown
    label = f"; targets TTFT {v['s-ttft'] or '-'}, TPOT {v['s-tpot'] or '-'}" if targets else ""
    fig = figures.frontier(points, label)
    if v["s-tpot"]:
        figures.vline(fig, 1.0 / parse_seconds(str(v["s-tpot"])), "TPOT target", dash="dot")
    return outcome, [fig], text


def _served(p: dict[str, Any]) -> str:
    """One plan's line: its times and throughput, or (no times: it does not fit, `serve --json`
    nulls them) the memory it needs per GPU and what would make it fit, as the command says."""
    if not p["fits_in_memory"] or p["ttft_s"] is None or p["tpot_s"] is None:
        hint = f"; would fit with {p['would_fit']}" if p.get("would_fit") else ""
        return f"{p['plan']}: does not fit ({p['memory_bytes']['total'] / 1e9:.1f} GB per GPU{hint})"
    overloaded = (
        f" (overloaded: sustains at most {p['max_request_rate_per_s']:.3g} requests/s; the queue grows without bound)"
        if p.get("overloaded") and p.get("max_request_rate_per_s")
        else ""
    )
    return (
        f"{p['plan']}: TTFT {_time(p['ttft_s'])}, TPOT {_time(p['tpot_s'])}, "
        f"{p['throughput_tokens_per_s']:.4g} tokens/s" + overloaded
    )


def _time(seconds: float) -> str:
    """A latency in ms to 4 digits, or in s from 10 s on (not '5.039e+04 ms')."""
    return f"{seconds * 1e3:.4g} ms" if seconds < 10 else f"{seconds:.4g} s"


def _meets(data: dict[str, Any]) -> str:
    """What `serve --ttft-max/--tpot-max` found: the best option that meets the targets."""
    best = next((o for o in data["options"] if o["meets"]), None)
    if best is None:
        return "no plan meets the targets"
    return (
        f"meets the targets: {best['plan']} ({best['weight_precision']} weights), "
        f"{best['tokens_per_s_per_gpu']:.4g} tokens/s per GPU at {best['requests_in_flight_per_replica']} requests "
        "in flight per replica"
    )


def _timeline(v: dict[str, Any], files: Files, run: Run) -> Result:
    outcome = run(state.with_files(state.timeline_args(v), *files))
    if outcome.error:
        return outcome, [no_update], ""
    data = outcome.data
    parts = ", ".join(f"{k.replace('_', ' ')} {t:.3g} s" for k, t in data["breakdown_s"].items() if t > 0)
    text = f"step {data['step_time_s']:.4g} s (closed form {data['closed_form_step_time_s']:.4g} s): {parts}"
    return outcome, [figures.gantt(data)], text


COMPUTE = {
    "crossover": _crossover,
    "winner-map": _winner_map,
    "planner": _planner,
    "serving": _serving,
    "timeline": _timeline,
}


COMMANDS = {
    "crossover": state.crossover_args,
    "winner-map": state.winner_map_args,
    "planner": state.planner_args,
    "serving": lambda v: [*state.serving_args(v), "--with-frontier"],  # as the page's figure
    "timeline": state.timeline_args,
}


def table(page: str, values: dict[str, Any], files: Files, run: Run) -> str:
    """The CSV a page's download gives: the command's own table, the command built again from the
    controls (nothing is kept between a view and its download); a ValueError says what went wrong."""
    args = state.with_files(COMMANDS[page](checks.check(values)), *files)
    outcome = run([*args, "--csv", "-"] if page == "crossover" else args)
    if outcome.error:
        raise ValueError(outcome.error)
    if page in ("crossover", "winner-map", "planner"):  # the table the command printed or wrote
        return outcome.table or ""
    return _rows_csv(outcome.data["plans"] if page == "serving" else outcome.data["operations"])


def json_text(page: str, values: dict[str, Any], files: Files, run: Run) -> str:
    """The JSON a page's download gives: what the command prints with --json."""
    outcome = run(state.with_files(COMMANDS[page](checks.check(values)), *files))
    if outcome.error:
        raise ValueError(outcome.error)
    return json.dumps(outcome.data, indent=1)
