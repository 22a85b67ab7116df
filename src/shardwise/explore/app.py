"""The explorer's Dash app: five pages, each a form over one shardwise command and its figures.

Every page runs its command through `runner.run` (the CLI itself, in-process, with --json), so the
numbers are the CLI's; a bad value gets the CLI's one-line message under the control it names.
The URL's query string holds every control (`state.encode`), so a view can be shared."""

from __future__ import annotations

import atexit
import base64
import json
import shutil
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from dash import Dash, Input, Output, State, ctx, dcc, html, no_update

from shardwise.explore import runner, state
from shardwise.explore.layout import CONTROLS, CSS, TITLES, error_outputs, figure_ids, page_layout, values_of
from shardwise.explore.pages import COMPUTE, table
from shardwise.explore.runner import Outcome


def create_app() -> Dash:
    """The explorer (call `.run(host=..., port=...)` to serve it)."""
    tmp = Path(tempfile.mkdtemp(prefix="shardwise-explore-"))  # the tables the commands write
    atexit.register(shutil.rmtree, tmp, True)
    app = Dash(__name__, title="shardwise explorer")
    app.index_string = app.index_string.replace("{%css%}", "{%css%}<style>" + CSS + "</style>")
    app.layout = _layout  # built per visit, from the address the browser asks it for
    ids = list(state.IDS)

    @app.callback(Output("url", "search"), *[Input(i, "value") for i in ids], prevent_initial_call=True)
    def remember(*values: Any) -> str:
        """Controls -> the address (the address -> controls happens once, in `_layout`): one-way,
        so no page waits for it before recomputing."""
        return state.encode(values_of(ids, values))

    @app.callback(*[Output(f"view-{p}", "style") for p in state.PAGES], Input("page", "value"))
    def show(page: str) -> list[dict[str, str]]:
        return [{} if p == page else {"display": "none"} for p in state.PAGES]

    for kind in ("model", "calibration"):
        _register_upload(app, kind, tmp)
    for page in state.PAGES:
        _register(app, page, tmp)
    return app


def _layout() -> html.Div:
    """The page, its controls set from the query string of the address being opened (the browser
    sends it as the referrer of its request for the layout)."""
    import flask

    search = ""
    if flask.has_request_context() and flask.request.referrer:
        search = urlsplit(flask.request.referrer).query
    values = state.decode(search)
    tabs = dcc.Tabs(id="page", value=values["page"], children=[dcc.Tab(label=TITLES[p], value=p) for p in state.PAGES])
    return html.Div(
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
            *[page_layout(p, values) for p in state.PAGES],
        ]
    )


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
    graphs = figure_ids(page)
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
        *[State(g, "figure") for g in graphs[1:]],
    )
    def compute(active: str, model_file: str | None, calibration: str | None, *args: Any) -> list[Any]:
        args, shown_before = args[: len(controls)], args[len(controls) :]
        if active != page:
            return [no_update] * (len(graphs) + 4 + len(controls))
        start = time.perf_counter()
        try:
            outcome, figs, text = COMPUTE[page](values_of(controls, args), tmp, (model_file, calibration))
        except Exception as exc:  # a bug must not take the server down: say it, keep serving
            traceback.print_exc()
            outcome = Outcome(("explore",), error=f"internal error ({type(exc).__name__}: {exc}); please report it")
            figs, text = [no_update] * len(graphs), ""
        elapsed_ms = (time.perf_counter() - start) * 1e3
        errors = error_outputs(page, outcome)
        if outcome.error:
            return [*figs, no_update, _shown(outcome, tmp), no_update, *errors]
        for i, before in enumerate(shown_before, start=1):  # the same second figure: not drawn again
            if isinstance(figs[i], dict) and before and before.get("data") == figs[i]["data"]:
                figs[i] = no_update
        summary, *extra = text if isinstance(text, list) else [text]
        shown = html.Div(
            [
                html.P(summary, id=f"{page}-summary"),
                *extra,
                html.P(f"computed in {elapsed_ms:.0f} ms", id=f"{page}-elapsed"),
            ]
        )
        store = {"args": list(outcome.args)}  # a download runs the command again
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
            return {"content": table(page, store["args"]), "filename": f"{page}.csv"}
        return {"content": json.dumps(runner.run(store["args"]).data, indent=1), "filename": f"{page}.json"}

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
