"""The explorer's HTTP edge, checked before Dash sees a request: a bad request gets a 4xx status
and one line saying why, never a 500 and a traceback.

- A request body is at most MAX_BODY_BYTES (413).
- When the server listens on a loopback address it answers only requests addressed to a loopback
  name (127.0.0.1, localhost, [::1]): a web page whose own name was pointed at 127.0.0.1 (DNS
  rebinding) is refused (403); so is a POST whose Origin is another site.
- A callback request must be JSON (415), an object naming a callback of the app, with exactly the
  inputs and states that callback declares, each a value its widget can send (400, `checks`).
- Anything a callback still raises becomes a 400 with its one line (Dash would answer 500 with a
  traceback)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from werkzeug.exceptions import BadRequest, Forbidden, HTTPException, UnsupportedMediaType

from shardwise.explore import checks, state

MAX_BODY_BYTES = 4 << 20  # an upload (at most 1 MiB, base64) and a figure sent back fit easily
LOOPBACK = ("127.0.0.1", "localhost", "::1")
MAX_SHOWN = 160


def protect(app: Any, hosts: tuple[str, ...] | None = LOOPBACK) -> None:
    """Check every request to `app` (a Dash app) as above; `hosts`: the names a request may be
    addressed to (None: any, for a server listening on every address)."""
    import flask

    server = app.server
    server.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    update = app.config.routes_pathname_prefix + "_dash-update-component"

    @server.before_request
    def check() -> None:
        request = flask.request
        name = urlsplit("//" + request.host).hostname or ""
        if hosts is not None and name not in hosts:
            raise Forbidden(f"this explorer answers only to {', '.join(hosts)} (not {_shown(request.host)})")
        origin = request.headers.get("Origin")
        if request.method == "POST" and origin and urlsplit(origin).netloc != request.host:
            raise Forbidden(f"a request from another site ({_shown(origin)}) is refused")
        if request.path != update or request.method != "POST":
            return
        if not request.is_json:
            raise UnsupportedMediaType("a callback request is JSON (Content-Type: application/json)")
        problem = callback_problem(request.get_json(silent=True), app.callback_map)
        if problem:
            raise BadRequest(problem)

    @server.errorhandler(HTTPException)
    def refused(exc: HTTPException) -> Any:
        return _line(exc.code or 400, f"{exc.name}: {exc.description}")

    @server.errorhandler(Exception)
    def failed(exc: Exception) -> Any:
        server.logger.warning("refused %s: %s: %s", flask.request.path, type(exc).__name__, exc)
        return _line(400, f"Bad Request: the request could not be handled ({type(exc).__name__}: {exc})")


def _line(code: int, text: str) -> Any:
    import flask

    line = " ".join(text.split())
    return flask.Response(line[:400] + "\n", status=code, mimetype="text/plain")


def callback_problem(body: Any, callbacks: dict[str, Any]) -> str | None:
    """What is wrong with a callback request's body (None: nothing) for an app's `callback_map`."""
    if not isinstance(body, dict):
        return "the body is not a JSON object"
    output = body.get("output")
    if not isinstance(output, str) or output not in callbacks:
        return f"'output' {_shown(output)} is not a callback of the explorer"
    callback = callbacks[output]
    problem = _outputs_problem(body.get("outputs"), callback["output"])
    if problem:
        return problem
    for key in ("inputs", "state"):
        problem = _values_problem(key, body.get(key, []), callback.get(key) or [])
        if problem:
            return problem
    changed = body.get("changedPropIds", [])
    inputs = {f"{d['id']}.{d['property']}" for d in callback["inputs"]}
    if not isinstance(changed, list) or not all(isinstance(c, str) and c in inputs for c in changed):
        return f"'changedPropIds' {_shown(changed)}: expected some of {', '.join(sorted(inputs))}"
    return None


def _outputs_problem(sent: Any, declared: Any) -> str | None:
    want = [(o.component_id, o.component_property) for o in (declared if isinstance(declared, list) else [declared])]
    items = sent if isinstance(declared, list) else [sent]
    if not isinstance(items, list) or len(items) != len(want):
        return f"'outputs': expected {len(want)} output(s)"
    for item, (cid, prop) in zip(items, want, strict=True):
        if not (isinstance(item, dict) and item.get("id") == cid and isinstance(item.get("property"), str)):
            return f"'outputs': expected {cid}.{prop}, got {_shown(item)}"
        if item["property"].split("@", 1)[0] != prop:
            return f"'outputs': expected {cid}.{prop}, got {_shown(item)}"
    return None


def _values_problem(key: str, sent: Any, declared: list[dict[str, str]]) -> str | None:
    if not isinstance(sent, list) or len(sent) != len(declared):
        return f"{key!r}: expected a list of {len(declared)}"
    for i, (item, want) in enumerate(zip(sent, declared, strict=True)):
        cid, prop = want["id"], want["property"]
        if not (isinstance(item, dict) and item.get("id") == cid and item.get("property") == prop):
            return f"{key!r}[{i}]: expected {cid}.{prop}, got {_shown(item)}"
        if not value_ok(cid, prop, item.get("value")):
            return f"{cid}.{prop}: {_shown(item.get('value'))} is not a value this widget sends"
    return None


def value_ok(cid: str, prop: str, value: Any) -> bool:
    """Whether `value` is of a kind the explorer's widget `cid` sends for `prop` (the server's
    callbacks check what it says: `checks.check`)."""
    if prop == "value":
        return cid in state.DEFAULTS and checks.well_formed(cid, value)
    if prop == "n_clicks":
        return value is None or (checks.is_whole(value) and value >= 0)
    if prop in ("contents", "filename"):
        return value is None or isinstance(value, str)
    if prop in ("data", "figure"):  # an upload's name and digest (`uploads`); a figure drawn before
        return value is None or isinstance(value, dict)
    return False


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 3] + "..."
