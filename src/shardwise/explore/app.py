"""The explorer's Dash app: five pages, each a form over one shardwise command and its figures.

Every page builds its command on the server from its controls' values, checked (`checks`), and
runs it in a worker process under a time limit (`workers.Pool`: the CLI itself, with --json), so
the numbers are the CLI's; a bad value gets a one-line message under the control it names. Nothing
a browser sends is run or used as a path: downloads are built again from the controls and sent
from memory, uploads are kept under names the server makes (`uploads`), and every request is
checked before Dash sees it (`guard`). The URL's query string holds every control
(`state.encode`), so a view can be shared."""

from __future__ import annotations

import atexit
import dataclasses
import shutil
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from dash import Dash, Input, Output, State, ctx, dcc, html, no_update

from shardwise.explore import checks, guard, pages, state
from shardwise.explore.checks import ControlError
from shardwise.explore.layout import CONTROLS, CSS, TITLES, error_outputs, figure_ids, page_layout, values_of
from shardwise.explore.runner import Outcome
from shardwise.explore.uploads import MAX_UPLOAD_BYTES, Uploads
from shardwise.explore.workers import Pool


def create_app(pool: Pool | None = None, hosts: tuple[str, ...] | None = guard.LOOPBACK) -> Dash:
    """The explorer (call `.run(host=..., port=...)` to serve it). `pool`: the workers that run
    the commands (default: a new `Pool()`, stopped when the process exits; either way it is
    `app.server.extensions["shardwise-explore-pool"]`); `hosts`: the names a request may be
    addressed to (None: any, for a server listening on every address). The workers are started
    by multiprocessing ("forkserver"): a script that calls this must guard its own top level
    with `if __name__ == "__main__":`."""
    if pool is None:
        pool = Pool()
        atexit.register(pool.close)
    tmp = Path(tempfile.mkdtemp(prefix="shardwise-explore-"))  # the files loaded with the buttons
    atexit.register(shutil.rmtree, tmp, True)
    uploads = Uploads(tmp)
    app = Dash(__name__, title="shardwise explorer")
    app.server.extensions["shardwise-explore-pool"] = pool
    guard.protect(app, hosts)
    head = f"<style>{CSS}</style><script>{REFUSE_JS % MAX_UPLOAD_BYTES}</script>"
    app.index_string = app.index_string.replace("{%css%}", "{%css%}" + head)
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

    for system, precisions in (("p-system", ("p-precision",)), ("s-system", ("s-weights", "s-kv"))):
        _register_precisions(app, system, precisions)
    for kind in ("model", "calibration"):
        _register_upload(app, kind, uploads)
    for page in state.PAGES:
        _register(app, page, pool, uploads)
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


# The upload control (dcc.Upload) drops a file over its max_size without a word to the page or the
# server: this says so beside its button (the file's name set as text, never as HTML).
REFUSE_JS = """(function () {
  var most = %d;
  function check(files, target) {
    var box = target && target.closest ? target.closest('[id$="-upload"]') : null;
    var said = box && document.getElementById(box.id.replace(/-upload$/, '-refused'));
    if (!said || !files || !files.length) { return; }
    var f = files[0];
    said.textContent = f.size > most ? ' ' + f.name + ': ' + f.size.toLocaleString('en-US') +
      ' bytes; the explorer takes at most ' + most.toLocaleString('en-US') + ' bytes' : '';
  }
  document.addEventListener('change', function (e) {
    if (e.target && e.target.type === 'file') { check(e.target.files, e.target); }
  }, true);
  document.addEventListener('drop', function (e) { check(e.dataTransfer && e.dataTransfer.files, e.target); }, true);
})();"""


def _upload(kind: str, label: str) -> html.Span:
    return html.Span(
        [
            dcc.Upload(
                html.Button(label), id=f"{kind}-upload", max_size=MAX_UPLOAD_BYTES, style={"display": "inline-block"}
            ),
            html.Span(id=f"{kind}-name", className="upload-name"),
            html.Span(id=f"{kind}-refused", className="upload-refused"),  # written by REFUSE_JS only
            html.Button("forget", id=f"{kind}-forget", style={"marginRight": "18px"}),
        ]
    )


def _register_upload(app: Dash, kind: str, uploads: Uploads) -> None:
    """An uploaded file is kept by the server; the page keeps its name and digest, and the
    server's copy joins every command."""

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
        return uploads.save(kind, filename, contents)


def _no_result() -> dict[str, Any]:
    """An empty figure in place of one that no longer matches the controls."""
    return {
        "data": [],
        "layout": {
            "xaxis": {"visible": False},
            "yaxis": {"visible": False},
            "annotations": [
                {"text": "no result for these settings", "showarrow": False, "font": {"size": 16, "color": "#b91c1c"}}
            ],
        },
    }


def _register_precisions(app: Dash, system: str, controls: tuple[str, ...]) -> None:
    """The precision controls offer only what the system's GPU computes in (`checks.precision_choices`);
    a value it does not take falls back to the GPU's 16-bit default."""

    @app.callback(
        *[Output(c, "options") for c in controls],
        *[Output(c, "value") for c in controls],
        Input(system, "value"),
        *[State(c, "value") for c in controls],
    )
    def offer(name: Any, *values: Any) -> list[Any]:
        picked = [checks.precision_choices(c, name) for c in controls]
        options = [[{"label": v, "value": v} for v in offered] for offered, _ in picked]
        pairs = zip(picked, values, strict=True)
        # a value the GPU does not take (bf16 on V100, fp8 before Hopper) becomes its 16-bit default
        return [*options, *(no_update if v in offered else (half or "bf16") for (offered, half), v in pairs)]


def _register(app: Dash, page: str, pool: Pool, uploads: Uploads) -> None:
    graphs = figure_ids(page)
    controls = CONTROLS[page]
    files = [State("model-file", "data"), State("calibration-file", "data")]

    @app.callback(
        *[Output(g, "figure") for g in graphs],
        Output(f"{page}-text", "children"),
        Output(f"{page}-command", "children"),
        Output(f"{page}-error", "children"),
        *[Output(f"{c}-msg", "children") for c in controls],
        Input("page", "value"),
        Input("model-file", "data"),
        Input("calibration-file", "data"),
        *[Input(c, "value") for c in controls],
        *[State(g, "figure") for g in graphs[1:]],
    )
    def compute(active: str, model_file: Any, calibration: Any, *args: Any) -> list[Any]:
        args, shown_before = args[: len(controls)], args[len(controls) :]
        if active != page:
            return [no_update] * (len(graphs) + 3 + len(controls))
        start = time.perf_counter()
        control, values = None, values_of(controls, args)
        try:
            loaded = (uploads.path("model", model_file), uploads.path("calibration", calibration))
            outcome, figs, text = pages.compute(page, values, loaded, pool.run)
        except ControlError as exc:  # a value the explorer does not take: said under its control
            outcome, control = Outcome((page,), error=str(exc)), exc.control
            figs, text = [no_update] * len(graphs), ""
        except Exception as exc:  # a bug must not take the server down: say it, keep serving
            traceback.print_exc()
            outcome = Outcome(("explore",), error=f"internal error ({type(exc).__name__}: {exc}); please report it")
            figs, text = [no_update] * len(graphs), ""
        elapsed_ms = (time.perf_counter() - start) * 1e3
        names = {"model": model_file, "calibration": calibration}
        if outcome.error:  # a loaded file named as the user's own, not by its place in the explorer's folder
            outcome = dataclasses.replace(outcome, error=uploads.shown(outcome.error, names))
        errors = error_outputs(page, outcome, control, values)
        shown_command = uploads.shown(outcome.command, names) if control is None else no_update
        if outcome.error:  # no answer for these settings: the last figures and verdict no longer hold
            stale = [_no_result() for _ in graphs]
            return [*stale, html.P("no result for these settings: see the message", id=f"{page}-summary"),
                    shown_command, *errors]  # fmt: skip
        for i, before in enumerate(shown_before, start=1):  # the same second figure: not drawn again
            if isinstance(figs[i], dict) and isinstance(before, dict) and before.get("data") == figs[i]["data"]:
                figs[i] = no_update
        summary, *extra = text if isinstance(text, list) else [text]
        shown = html.Div(
            [
                html.P(summary, id=f"{page}-summary"),
                *extra,
                html.P(f"computed in {elapsed_ms:.0f} ms", id=f"{page}-elapsed"),
            ]
        )
        return [*figs, shown, shown_command, *errors]

    @app.callback(
        Output(f"{page}-download", "data"),
        Output(f"{page}-error", "children", allow_duplicate=True),
        Input(f"{page}-csv", "n_clicks"),
        Input(f"{page}-json", "n_clicks"),
        *[State(c, "value") for c in controls],
        *files,
        prevent_initial_call=True,
    )
    def download(_csv: int | None, _json: int | None, *args: Any) -> tuple[Any, Any]:
        """The page's table or JSON, its command built again from the controls, sent from memory."""
        values, (model_file, calibration) = values_of(controls, args[: len(controls)]), args[len(controls) :]
        as_csv = ctx.triggered_id == f"{page}-csv"
        try:
            loaded = (uploads.path("model", model_file), uploads.path("calibration", calibration))
            if as_csv:
                return dcc.send_string(pages.table(page, values, loaded, pool.run), f"{page}.csv"), ""
            return dcc.send_string(pages.json_text(page, values, loaded, pool.run), f"{page}.json"), ""
        except ValueError as exc:  # a ControlError, or the command's own message
            return no_update, "download: " + uploads.shown(str(exc), {"model": model_file, "calibration": calibration})
        except Exception as exc:  # a bug must not take the server down: say it, keep serving
            traceback.print_exc()
            return no_update, f"download: internal error ({type(exc).__name__}: {exc}); please report it"

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
