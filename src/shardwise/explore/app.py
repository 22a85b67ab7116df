"""The explorer's Dash app: five pages, each a form over one shardwise command and its figures.

Every page runs its command through `runner.run` (the CLI itself, in-process, with --json), so the
numbers are the CLI's; a bad value gets the CLI's one-line message under the control it names.
The URL's query string holds every control (`state.encode`), so a view can be shared."""

from __future__ import annotations

import atexit
import base64
import csv
import io
import json
import shutil
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from dash import Dash, Input, Output, State, ctx, dcc, html, no_update

from shardwise import presets
from shardwise.explore import figures, runner, state
from shardwise.explore.runner import Outcome, run
from shardwise.units import parse_seconds

Files = tuple[str | None, str | None]  # (uploaded model file, uploaded calibration file)
Result = tuple[Outcome, list[Any], Any, str]  # (the command's outcome, figures, summary, its table as CSV)
TITLES = {
    "crossover": "Crossover",
    "winner-map": "Winner map",
    "planner": "Planner",
    "serving": "Serving",
    "timeline": "Timeline",
}
WORKLOADS = ["train", "forward", "prefill", "decode"]
BANDWIDTHS_GB_S = [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 900]
CSS = """
body { font-family: system-ui, sans-serif; margin: 0; color: #222; }
header { padding: 10px 18px; background: #1f2937; color: white; }
header h1 { font-size: 20px; margin: 0 0 4px 0; }
.page { display: flex; gap: 18px; padding: 12px 18px; }
.controls { width: 320px; flex: none; font-size: 14px; }
.controls label { display: block; font-weight: 600; margin-top: 10px; }
.controls input[type=text], .controls input[type=number] { width: 95%; padding: 4px; }
.output { flex: 1; min-width: 0; }
.msg { color: #b91c1c; font-size: 13px; min-height: 0; }
.error { color: #b91c1c; font-weight: 600; }
.command { background: #f3f4f6; padding: 8px; white-space: pre-wrap; font-size: 13px; }
.exports button { margin-right: 6px; }
.uploads { margin: 4px 0 6px 0; font-size: 13px; }
.uploads > span { display: inline-flex; align-items: center; gap: 4px; margin-right: 18px; }
.uploads > span > div { display: inline-block; }
.upload-name { color: #d1d5db; }
table.plans { border-collapse: collapse; font-size: 13px; }
table.plans td, table.plans th { border-bottom: 1px solid #ddd; padding: 3px 8px; text-align: right; }
"""
# which control a flag named at the start of an error message belongs to, per page
FLAGS = {
    "crossover": {
        "--model": "x-model",
        "--layers": "x-layers",
        "--hidden": "x-hidden",
        "--gpu": "x-gpu",
        "--intra-link": "x-links",
        "--plan": "x-plans",
        "plan": "x-plans",
        "--workload": "x-workload",
        "--vary": "x-vary",
        "--global-batch": "x-batch",
    },
    "winner-map": {
        "--model": "w-model",
        "--gpu": "w-gpu",
        "--intra-link": "w-link",
        "--plan": "w-plans",
        "plan": "w-plans",
        "--workload": "w-workload",
        "--vary": "w-x",
    },
    "planner": {
        "--model": "p-model",
        "--system": "p-system",
        "--nodes": "p-nodes",
        "--global-batch": "p-batch",
        "--objective": "p-objective",
    },
    "serving": {
        "--model": "s-model",
        "--system": "s-system",
        "--plan": "s-plans",
        "plan": "s-plans",
        "--input-len": "s-input",
        "--output-len": "s-output",
        "--ttft-max": "s-ttft",
        "--tpot-max": "s-tpot",
    },
    "timeline": {
        "--model": "t-model",
        "--system": "t-system",
        "--nodes": "t-nodes",
        "--tp": "t-tp",
        "--pp": "t-pp",
        "--vpp": "t-vpp",
        "--global-batch": "t-batch",
        "--schedule": "t-schedule",
    },
}
CONTROLS = state.CONTROLS


def _options(kind: str, blank: str | None = None) -> list[dict[str, str]]:
    out = [{"label": blank, "value": ""}] if blank else []
    names = presets.names(kind)
    if kind == "links":  # links inside a server: not the network cards
        names = [n for n in names if not n.startswith(("ib-", "eth-", "roce-"))]
    return out + [{"label": name, "value": name} for name in names]


def _control(cid: str) -> Any:
    default = state.DEFAULTS[cid]
    kind = cid[2:]
    if kind == "model":
        blank = "the brief's model (96 layers, hidden 4096)" if cid in ("x-model", "w-model") else None
        return dcc.Dropdown(id=cid, options=_options("models", blank), value=default, clearable=False)
    if kind == "gpu":
        return dcc.Dropdown(id=cid, options=_options("gpus"), value=default, clearable=False)
    if kind == "system":
        return dcc.Dropdown(id=cid, options=_options("systems"), value=default, clearable=False)
    if kind == "links":
        return dcc.Checklist(id=cid, options=_options("links"), value=default, inline=True)
    if kind == "link":
        return dcc.Dropdown(id=cid, options=_options("links"), value=default, clearable=False)
    if kind == "bw":
        marks = {i: str(b) if b in (0, 1, 4, 16, 64, 256, 900) else "" for i, b in enumerate(BANDWIDTHS_GB_S)}
        return dcc.Slider(
            id=cid,
            min=0,
            max=len(BANDWIDTHS_GB_S) - 1,
            step=1,
            marks=marks,
            value=BANDWIDTHS_GB_S.index(default) if default in BANDWIDTHS_GB_S else 0,
        )
    if kind == "workload":
        return dcc.RadioItems(id=cid, options=WORKLOADS, value=default, inline=True)
    if kind == "objective":
        return dcc.RadioItems(id=cid, options=["time", "throughput-per-gpu"], value=default, inline=True)
    if kind == "schedule":
        return dcc.RadioItems(id=cid, options=["1f1b", "gpipe", "interleaved", "zb-h1"], value=default, inline=True)
    numeric = isinstance(default, int) or kind in ("layers", "hidden", "heads")
    return dcc.Input(id=cid, type="number" if numeric else "text", value=default, debounce=True)


LABELS = {
    "model": "model",
    "layers": "layers (override)",
    "hidden": "hidden size (override)",
    "heads": "attention heads (override)",
    "gpu": "GPU",
    "links": "links inside the server",
    "bw": "and a link of this bandwidth (GB/s; 0: none)",
    "plans": "plans",
    "workload": "workload",
    "vary": "varied variable (NAME=LO..HI)",
    "batch": "global batch (sequences)",
    "link": "link inside the server",
    "x": "x axis (NAME=VALUES)",
    "y": "y axis (NAME=VALUES)",
    "system": "system",
    "nodes": "servers",
    "objective": "objective",
    "input": "prompt tokens",
    "output": "new tokens",
    "ttft": "TTFT target (e.g. 500ms)",
    "tpot": "TPOT target (e.g. 50ms)",
    "tp": "tp",
    "pp": "pp",
    "vpp": "virtual stages",
    "schedule": "schedule",
}


def _page(page: str) -> html.Div:
    fields: list[Any] = [html.Div(id=f"{page}-error", className="error")]
    for cid in CONTROLS[page]:
        label = LABELS[cid[2:]] + (" when not varied" if cid == "x-batch" else "")
        fields += [html.Label(label, htmlFor=cid), _control(cid), html.Div(id=f"{cid}-msg", className="msg")]
    graphs = [dcc.Graph(id=f"{page}-graph", config={"displaylogo": False})]
    if page in ("crossover", "planner"):
        graphs.append(dcc.Graph(id=f"{page}-graph2", config={"displaylogo": False}))
    exports = html.Div(
        [
            html.Button("CSV", id=f"{page}-csv"),
            html.Button("JSON", id=f"{page}-json"),
            html.Button("SVG", id=f"{page}-svg"),
            dcc.Download(id=f"{page}-download"),
            html.Span(" PNG: the camera icon above each figure"),
        ],
        className="exports",
    )
    output = html.Div(
        [
            *graphs,
            html.Div(id=f"{page}-text"),
            html.H4("The command that reproduces this view"),
            html.Pre(id=f"{page}-command", className="command"),
            exports,
            dcc.Store(id=f"{page}-store"),
        ],
        className="output",
    )
    return html.Div([html.Div(fields, className="controls"), output], id=f"view-{page}", className="page")


def _error_outputs(page: str, outcome: Outcome) -> list[Any]:
    """The page's error line and each control's message: the error under the control it names."""
    msgs = {cid: "" for cid in CONTROLS[page]}
    top = ""
    if outcome.error:
        head = outcome.error.split(":", 1)[0].split()[0] if outcome.error.strip() else ""
        target = FLAGS[page].get(head)
        if target is None and head.startswith("--"):
            target = FLAGS[page].get(head.split("=")[0])
        if target:
            msgs[target] = outcome.error
        else:
            top = outcome.error
    return [top, *msgs.values()]


def _values(page: str, args: tuple[Any, ...]) -> dict[str, Any]:
    values = dict(zip(CONTROLS[page], args, strict=True))
    if "x-bw" in values:
        values["x-bw"] = BANDWIDTHS_GB_S[int(values["x-bw"] or 0)]
    return values


def _rows_csv(rows: list[dict[str, Any]]) -> str:
    scalars = [k for k, v in (rows[0] if rows else {}).items() if not isinstance(v, (dict, list))]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=scalars, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def _crossover(v: dict[str, Any], _: Path, files: Files) -> Result:
    outcome = run(state.with_files(state.crossover_args(v), *files))
    if outcome.error:
        return outcome, [no_update, no_update], "", ""
    data = outcome.data
    texts = [c["text"] for c in data["crossings"]] or ["no crossing: one plan is fastest throughout"]
    second = no_update
    first = next((c for c in data["crossings"] if c.get("breakdown")), None)
    if first is not None:
        second = figures.breakdown(first["breakdown"], first["at"], data["variable"])
    return outcome, [figures.crossover(data), second], " | ".join(texts), ""  # CSV made when asked for


def _winner_map(v: dict[str, Any], tmp: Path, files: Files) -> Result:
    path = str(tmp / "grid.csv")
    outcome = run(state.with_files(state.winner_map_args(v, path), *files))
    if outcome.error:
        return outcome, [no_update], "", ""
    fig, summary = figures.winner_map(path)
    return outcome, [fig], summary, Path(path).read_text(encoding="utf-8")


def _planner(v: dict[str, Any], tmp: Path, files: Files) -> Result:
    path = str(tmp / "plans.csv")
    outcome = run(state.with_files(state.planner_args(v, path), *files))
    if outcome.error:
        return outcome, [no_update, no_update], "", ""
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
    fig2 = figures.planner_heatmap(path, str(v["p-objective"]))
    return outcome, [_plans_figure(top), fig2], [text, _plans_table(top)], Path(path).read_text(encoding="utf-8")


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
            p["recompute"],
            f"{p['step_time_s']:.4g}",
            f"{p['tokens_per_s_per_gpu']:.4g}",
            f"{p['mfu']:.1%}",
            f"{p['memory_bytes'] / 1e9:.1f}",
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
    return figures.stacked(names, [p["breakdown_s"] for p in top], "the best plans: where each step's time goes")


def _serving(v: dict[str, Any], _: Path, files: Files) -> Result:
    command = state.with_files(state.serving_args(v), *files)
    outcome = run(command)
    if outcome.error:
        return outcome, [no_update], "", ""
    points: dict[str, list[tuple[float, float, int]]] = {}
    for batch in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512):
        static = run([*command, "--batching", "static", "--concurrency", str(batch)])
        if static.error:
            break
        for p in static.data["plans"]:
            if p["fits_in_memory"]:
                gpus = p["tp"] * p["pp"] * p["replicas"]
                points.setdefault(p["plan"], []).append(
                    (p["per_user_tokens_per_s"], p["throughput_tokens_per_s"] / gpus, batch)
                )
    rows = outcome.data["plans"]
    text = " | ".join(
        f"{p['plan']}: TTFT {p['ttft_s'] * 1e3:.4g} ms, TPOT {p['tpot_s'] * 1e3:.4g} ms, "
        f"{p['throughput_tokens_per_s']:.4g} tokens/s" + ("" if p["fits_in_memory"] else " (does not fit)")
        for p in rows
    )
    targets = f"; targets TTFT {v['s-ttft'] or '-'}, TPOT {v['s-tpot'] or '-'}" if v["s-ttft"] or v["s-tpot"] else ""
    fig = figures.frontier(points, targets)
    if v["s-tpot"]:
        figures.vline(fig, 1.0 / parse_seconds(str(v["s-tpot"])), "TPOT target", dash="dot")
    return outcome, [fig], text, _rows_csv(rows)


def _timeline(v: dict[str, Any], _: Path, files: Files) -> Result:
    outcome = run(state.with_files(state.timeline_args(v), *files))
    if outcome.error:
        return outcome, [no_update], "", ""
    data = outcome.data
    parts = ", ".join(f"{k.replace('_', ' ')} {t:.3g} s" for k, t in data["breakdown_s"].items() if t > 0)
    text = f"step {data['step_time_s']:.4g} s (closed form {data['closed_form_step_time_s']:.4g} s): {parts}"
    return outcome, [figures.gantt(data)], text, _rows_csv(data["operations"])


COMPUTE = {
    "crossover": _crossover,
    "winner-map": _winner_map,
    "planner": _planner,
    "serving": _serving,
    "timeline": _timeline,
}


def create_app() -> Dash:
    """The explorer (call `.run(host=..., port=...)` to serve it)."""
    tmp = Path(tempfile.mkdtemp(prefix="shardwise-explore-"))  # the tables the commands write
    atexit.register(shutil.rmtree, tmp, True)
    app = Dash(__name__, title="shardwise explorer")
    app.index_string = app.index_string.replace("{%css%}", "{%css%}<style>" + CSS + "</style>")
    tabs = dcc.Tabs(
        id="page", value=state.DEFAULTS["page"], children=[dcc.Tab(label=TITLES[p], value=p) for p in state.PAGES]
    )
    app.layout = html.Div(
        [
            dcc.Location(id="url", refresh=False),
            html.Header(
                [
                    html.H1("shardwise explorer: when is tensor parallelism worse than pipeline parallelism?"),
                    html.Div(
                        [
                            _upload("model", "Load a model (Hugging Face config.json or YAML)"),
                            _upload("calibration", "Load a calibration (shardwise calibrate)"),
                        ],
                        className="uploads",
                    ),
                    tabs,
                ]
            ),
            dcc.Store(id="model-file"),
            dcc.Store(id="calibration-file"),
            *[_page(p) for p in state.PAGES],
        ]
    )
    ids = list(state.IDS)

    @app.callback(
        Output("url", "search"),
        *[Output(i, "value") for i in ids],
        Input("url", "search"),
        *[Input(i, "value") for i in ids],
    )
    def sync(search: str | None, *values: Any) -> list[Any]:
        """URL -> controls when the address changes (or on loading); controls -> URL otherwise."""
        if ctx.triggered_id in (None, "url"):
            decoded = state.decode(search)
            if "x-bw" in decoded:
                bw = decoded["x-bw"]
                decoded["x-bw"] = BANDWIDTHS_GB_S.index(bw) if bw in BANDWIDTHS_GB_S else 0
            return [no_update, *[decoded[i] for i in ids]]
        current = dict(zip(ids, values, strict=True))
        current["x-bw"] = BANDWIDTHS_GB_S[int(current["x-bw"] or 0)]
        return [state.encode(current), *[no_update] * len(ids)]

    @app.callback(*[Output(f"view-{p}", "style") for p in state.PAGES], Input("page", "value"))
    def show(page: str) -> list[dict[str, str]]:
        return [{} if p == page else {"display": "none"} for p in state.PAGES]

    for kind in ("model", "calibration"):
        _register_upload(app, kind, tmp)
    for page in state.PAGES:
        _register(app, page, tmp)
    return app


def _upload(kind: str, label: str) -> html.Span:
    return html.Span(
        [
            dcc.Upload(html.Button(label), id=f"{kind}-upload", style={"display": "inline-block"}),
            html.Span(id=f"{kind}-name", className="upload-name"),
            html.Button("forget", id=f"{kind}-forget", style={"marginRight": "18px"}),
        ]
    )


def _register_upload(app: Dash, kind: str, tmp: Path) -> None:
    """An uploaded file is saved where the commands can read it; its path joins every command."""

    @app.callback(
        Output(f"{kind}-file", "data"),
        Output(f"{kind}-name", "children"),
        Input(f"{kind}-upload", "contents"),
        Input(f"{kind}-forget", "n_clicks"),
        State(f"{kind}-upload", "filename"),
        prevent_initial_call=True,
    )
    def save(contents: str | None, _forget: int | None, filename: str | None) -> tuple[Any, str]:
        if ctx.triggered_id == f"{kind}-forget" or not contents:
            return None, ""
        suffix = Path(filename or "").suffix.lower()
        if suffix not in (".json", ".yaml", ".yml"):
            return None, f" {filename}: give a .json (Hugging Face config) or .yaml file"
        path = tmp / f"{kind}-upload{suffix}"
        path.write_bytes(base64.b64decode(contents.split(",", 1)[1]))
        return str(path), f" {filename} "


def _shown(outcome: Outcome, tmp: Path) -> str:
    """The command for the user: the table written next to them, not in the explorer's folder."""
    return outcome.command.replace(f"{tmp}/", "")


def _register(app: Dash, page: str, tmp: Path) -> None:
    graphs = [f"{page}-graph", *([f"{page}-graph2"] if page in ("crossover", "planner") else [])]
    controls = CONTROLS[page]

    @app.callback(
        *[Output(g, "figure") for g in graphs],
        Output(f"{page}-text", "children"),
        Output(f"{page}-command", "children"),
        Output(f"{page}-store", "data"),
        Output(f"{page}-error", "children"),
        *[Output(f"{c}-msg", "children") for c in controls],
        Input("page", "value"),
        Input("model-file", "data"),
        Input("calibration-file", "data"),
        *[Input(c, "value") for c in controls],
    )
    def compute(active: str, model_file: str | None, calibration: str | None, *args: Any) -> list[Any]:
        if active != page:
            return [no_update] * (len(graphs) + 4 + len(controls))
        start = time.perf_counter()
        try:
            outcome, figs, text, table = COMPUTE[page](_values(page, args), tmp, (model_file, calibration))
        except Exception as exc:  # a bug must not take the server down: say it, keep serving
            traceback.print_exc()
            outcome = Outcome(("explore",), error=f"internal error ({type(exc).__name__}: {exc}); please report it")
            figs, text, table = [no_update] * len(graphs), "", ""
        elapsed_ms = (time.perf_counter() - start) * 1e3
        errors = _error_outputs(page, outcome)
        if outcome.error:
            return [*figs, no_update, _shown(outcome, tmp), no_update, *errors]
        summary, *extra = text if isinstance(text, list) else [text]
        shown = html.Div(
            [
                html.P(summary, id=f"{page}-summary"),
                *extra,
                html.P(f"computed in {elapsed_ms:.0f} ms", id=f"{page}-elapsed"),
            ]
        )
        store = {"json": outcome.data, "csv": table, "args": list(outcome.args)}
        return [*figs, shown, _shown(outcome, tmp), store, *errors]

    @app.callback(
        Output(f"{page}-download", "data"),
        Input(f"{page}-csv", "n_clicks"),
        Input(f"{page}-json", "n_clicks"),
        State(f"{page}-store", "data"),
        prevent_initial_call=True,
    )
    def download(_csv: int | None, _json: int | None, store: dict[str, Any] | None) -> Any:
        if not store:
            return no_update
        if ctx.triggered_id == f"{page}-csv":
            table = store["csv"] or runner.text([*store["args"], "--csv", "-"])  # crossover: the CLI's own CSV
            return {"content": table, "filename": f"{page}.csv"}
        return {"content": json.dumps(store["json"], indent=1), "filename": f"{page}.json"}

    app.clientside_callback(
        f"""function(n) {{
            if (!n) {{ return window.dash_clientside.no_update; }}
            const el = document.querySelector('#{page}-graph .js-plotly-plot');
            if (el) {{ Plotly.downloadImage(el, {{format: 'svg', filename: '{page}'}}); }}
            return '';
        }}""",
        Output(f"{page}-svg", "title"),
        Input(f"{page}-svg", "n_clicks"),
    )
