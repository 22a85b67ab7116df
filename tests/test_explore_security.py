"""`shardwise explore` as a server anyone on this machine (or any web page its browser opens) can
send requests to: nothing a request carries is run or used as a path, a bad request gets a 4xx
and one line (never a 500), and computations run in worker processes, under a time limit, without
waiting for each other. Requests go through Flask's test client, or a real server on 127.0.0.1."""

import json
import os
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("dash", reason="the explorer is an optional extra: pip install 'shardwise[explore]'")

from shardwise.explore import state
from shardwise.explore.app import create_app

RUNS = Path(__file__).resolve().parents[1] / "examples" / "calibration" / "h100_runs.csv"
POOL = "shardwise-explore-pool"
SLOW_BATCH = 200_000  # a timeline of 3.2 million simulated operations: tens of seconds, far past any limit here
WAIT_S = 120  # only a guard against hanging: nothing is asserted about it


@pytest.fixture(scope="module")
def app():
    app = create_app()
    yield app
    pool = app.server.extensions.get(POOL)
    if pool is not None:
        pool.close()


@pytest.fixture(scope="module")
def client(app):
    return app.server.test_client()


def _key(app, output: str) -> str:
    return next(k for k in app.callback_map if output in k.split("@")[0])


def _body(app, output: str, values: dict[str, Any], changed: str) -> dict[str, Any]:
    """A callback request as the page sends it: every input and state the callback declares, with
    the controls' defaults unless `values` ("id" or "id.property") says otherwise."""
    key = _key(app, output)
    entry = app.callback_map[key]
    declared = entry["output"] if isinstance(entry["output"], list) else [entry["output"]]
    outputs = [{"id": o.component_id, "property": o.component_property} for o in declared]

    def item(d: dict[str, str]) -> dict[str, Any]:
        cid, prop = d["id"], d["property"]
        default = state.DEFAULTS.get(cid) if prop == "value" and cid != "x-bw" else None
        return {**d, "value": values.get(f"{cid}.{prop}", values.get(cid, default))}

    return {
        "output": key,
        "outputs": outputs if isinstance(entry["output"], list) else outputs[0],
        "inputs": [item(d) for d in entry["inputs"]],
        "state": [item(d) for d in entry.get("state", [])],
        "changedPropIds": [changed],
    }


def _post(client, body: Any, **kwargs: Any):
    if isinstance(body, (dict, list)):
        return client.post("/_dash-update-component", json=body, **kwargs)
    return client.post("/_dash-update-component", data=body, **kwargs)


def _one_line_4xx(response) -> None:
    assert 400 <= response.status_code < 500, (response.status_code, response.data[-300:])
    text = response.data.decode()
    assert text.count("\n") <= 1 and "Traceback" not in text, text


# The exploit as measured: a download ran the argument list the browser kept in the page's store.


@pytest.mark.parametrize("what", ["plan --csv", "calibrate -o"])
def test_a_forged_store_runs_nothing_and_writes_no_file(client, tmp_path, what):
    target = tmp_path / ("written.csv" if what == "plan --csv" else "written.yaml")
    plan = ["plan", "--model", "gpt3-175b", "--system", "dgx-a100", "--nodes", "8", "--global-batch", "64"]
    args = [*plan, "--csv", str(target)] if what == "plan --csv" else ["calibrate", str(RUNS), "-o", str(target)]
    body = {
        "output": "planner-download.data",
        "outputs": {"id": "planner-download", "property": "data"},
        "inputs": [
            {"id": "planner-csv", "property": "n_clicks", "value": 1},
            {"id": "planner-json", "property": "n_clicks", "value": None},
        ],
        "state": [{"id": "planner-store", "property": "data", "value": {"args": args}}],
        "changedPropIds": ["planner-csv.n_clicks"],
    }
    response = _post(client, body)
    assert not target.exists(), f"the request wrote {target}"
    _one_line_4xx(response)


@pytest.mark.parametrize(
    "forged",
    [
        {"p-model": ["plan", "--csv", "X.csv"]},  # an argument list where a name goes
        {"p-model": "--csv=X.csv"},
        {"p-nodes": "8 --csv X.csv"},
        {"model-file.data": {"digest": "../../X", "name": "x.json"}},  # a path where an upload's digest goes
        {"model-file.data": {"path": "X.yaml"}},
        {"planner-csv.n_clicks": "1; --csv X.csv"},
    ],
)
def test_forged_control_values_run_nothing_and_write_no_file(app, client, tmp_path, forged):
    """The download's own request, its controls' values replaced by arguments or paths: refused
    (400), or answered with a message and no download."""
    values = {k: json.loads(json.dumps(v).replace("X", str(tmp_path / "x"))) for k, v in forged.items()}
    response = _post(
        client, _body(app, "planner-download.data", {"planner-csv.n_clicks": 1, **values}, "planner-csv.n_clicks")
    )
    assert not list(tmp_path.iterdir()), list(tmp_path.iterdir())
    if response.status_code == 200:
        answer = response.get_json()["response"]
        assert "planner-download" not in answer and answer["planner-error"]["children"].startswith("download: ")
    else:
        _one_line_4xx(response)


def test_a_model_name_that_is_a_file_on_the_server_is_not_read(app, client, tmp_path):
    secret = tmp_path / "secret.yaml"
    secret.write_text("layers: 2\nhidden: 64\nheads: 2\nvocab: 100\n")
    response = _post(
        client, _body(app, "planner-graph.figure", {"page": "planner", "p-model": str(secret)}, "p-model.value")
    )
    assert response.status_code == 200
    answer = response.get_json()["response"]
    message = answer["p-model-msg"]["children"]
    assert message.startswith("--model: '/") and "is not one of the choices offered (load a model" in message
    assert not answer.get("planner-graph", {}).get("figure", {}).get("data")  # nothing computed: no figure


def test_the_download_is_built_from_the_controls_and_sent_from_memory(app, client):
    response = _post(
        client, _body(app, "timeline-download.data", {"timeline-csv.n_clicks": 1}, "timeline-csv.n_clicks")
    )
    assert response.status_code == 200
    sent = response.get_json()["response"]["timeline-download"]["data"]
    assert sent["filename"] == "timeline.csv" and sent["content"].startswith("stage,")


# Bad requests: a 4xx and one line, never a 500 (Dash itself answers 500 to several of these).


@pytest.mark.parametrize(
    "body, content_type",
    [
        ("not json", "application/json"),
        ("{}", "text/plain"),  # what a cross-site form may send without asking
        ("[1, 2]", "application/json"),
        ('{"output": 5}', "application/json"),
        ('{"output": "no-such.children"}', "application/json"),
        ('{"output": "planner-download.data"}', "application/json"),  # a callback of the old app
        ("x" * (5 << 20), "application/json"),  # over the size limit
        ("[" * 100_000, "application/json"),  # deeper than the JSON parser goes
    ],
)
def test_a_malformed_body_gets_a_4xx_and_one_line(client, body, content_type):
    _one_line_4xx(_post(client, body, content_type=content_type))


@pytest.mark.parametrize(
    "change",
    [
        lambda b: b.pop("inputs"),
        lambda b: b.update(inputs="page"),
        lambda b: b["inputs"].pop(),
        lambda b: b["inputs"][0].update(id="x-model"),
        lambda b: b["inputs"][3].update(value={"args": ["plan"]}),  # x-model: an object, not a name
        lambda b: b["inputs"].__setitem__(3, 17),
        lambda b: b.update(changedPropIds="x-model.value"),
        lambda b: b.update(outputs=[{"id": "x", "property": "y"}]),
    ],
)
def test_a_wrong_shape_or_type_gets_a_4xx_and_one_line(app, client, change):
    body = _body(app, "crossover-graph.figure", {}, "x-model.value")
    assert body["inputs"][3]["id"] == "x-model"
    change(body)
    _one_line_4xx(_post(client, body))


def test_a_slider_position_off_the_slider_gets_a_4xx(app, client):
    _one_line_4xx(_post(client, _body(app, "crossover-graph.figure", {"x-bw": 99}, "x-bw.value")))


def test_requests_addressed_to_another_name_or_from_another_site_are_refused(app, client):
    """DNS rebinding (a page whose name now points at 127.0.0.1) and cross-site POSTs."""
    _one_line_4xx(client.get("/", headers={"Host": "attacker.example:8050"}))
    body = _body(app, "timeline-graph.figure", {"page": "timeline"}, "page.value")
    _one_line_4xx(_post(client, body, headers={"Origin": "http://attacker.example"}))
    assert client.get("/", headers={"Host": "127.0.0.1:8050"}).status_code == 200


def test_a_bad_value_a_page_can_send_gets_its_message_under_the_control(app, client):
    response = _post(client, _body(app, "planner-graph.figure", {"page": "planner", "p-nodes": 10**9}, "p-nodes.value"))
    assert response.status_code == 200
    message = response.get_json()["response"]["p-nodes-msg"]["children"]
    assert message == "--nodes: 1000000000 is more than the explorer takes (at most 65,536)"


def _gone(pid: int) -> bool:
    """The process has ended (a zombie not yet reaped has ended too)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False


# Computations: in worker processes, under a time limit, one not waiting for another.


@pytest.fixture
def server_on_localhost():
    """A real server on a free port of 127.0.0.1 with two workers (and a time limit no test reaches)."""
    from werkzeug.serving import make_server

    from shardwise.explore.workers import Pool

    pool = Pool(workers=2, time_limit_s=600)
    app = create_app(pool)
    server = make_server("127.0.0.1", 0, app.server, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield app, pool, f"http://127.0.0.1:{server.server_port}"
    pool.close()
    server.shutdown()
    thread.join(timeout=WAIT_S)


def _http_post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        url + "/_dash-update-component", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=WAIT_S) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, {}


def test_a_slow_computation_does_not_hold_up_a_fast_one(server_on_localhost):
    app, pool, url = server_on_localhost
    slow_body = _body(app, "timeline-graph.figure", {"page": "timeline", "t-batch": SLOW_BATCH}, "t-batch.value")
    slow: list[Any] = []
    thread = threading.Thread(target=lambda: slow.append(_http_post(url, slow_body)))
    thread.start()
    deadline = time.monotonic() + WAIT_S
    while pool.busy() < 1 and time.monotonic() < deadline:  # the slow one has its worker
        time.sleep(0.01)
    assert pool.busy() == 1
    status, answer = _http_post(url, _body(app, "timeline-graph.figure", {"page": "timeline"}, "page.value"))
    assert status == 200 and "timeline-summary" in json.dumps(answer["response"]["timeline-text"])
    assert thread.is_alive() and not slow, "the fast request was answered only after the slow one"
    pool.close()  # the slow one's worker is killed: its request is answered, with a message
    thread.join(timeout=WAIT_S)
    assert slow and slow[0][0] == 200 and "without an answer" in slow[0][1]["response"]["timeline-error"]["children"]


def test_a_computation_past_the_time_limit_is_stopped_and_its_worker_replaced():
    from shardwise.explore.workers import Pool

    pool = Pool(workers=1, time_limit_s=1.0)
    try:
        app = create_app(pool)
        client = app.server.test_client()
        (before,) = pool.pids()
        slow = _body(app, "timeline-graph.figure", {"page": "timeline", "t-batch": SLOW_BATCH}, "t-batch.value")
        answer = _post(client, slow).get_json()["response"]
        assert answer["timeline-error"]["children"].startswith("stopped after 1 s (the explorer's time limit")
        assert "--global-batch 200000" in answer["timeline-command"]["children"]
        (after,) = pool.pids()
        assert after != before and _gone(before)
        fast = _post(client, _body(app, "timeline-graph.figure", {"page": "timeline"}, "page.value")).get_json()
        assert "timeline-summary" in json.dumps(fast["response"]["timeline-text"])
    finally:
        pool.close()


# The layers behind the HTTP edge, each on its own.


def test_every_default_is_taken_and_names_must_be_the_choices_offered():
    from shardwise.explore import checks

    assert checks.check(dict(state.DEFAULTS)) == state.DEFAULTS
    for cid, value in [
        ("x-gpu", "/etc/gpu.yaml"),
        ("p-system", "../systems.yaml"),
        ("x-links", ["nvlink3", "links.yaml"]),
        ("t-schedule", ["1f1b"]),
        ("x-bw", 3),  # GB/s the slider does not offer
        ("p-nodes", True),
        ("p-nodes", "8"),
        ("p-nodes", 10**7),
        ("p-nodes", 10**400),
        ("p-nodes", float("inf")),
        ("x-plans", "tp=8; --csv=x.csv"),
        ("x-vary", "--csv"),
        ("s-ttft", "500ms\n--csv"),
        ("x-vary", "batch=1.." + "9" * 300),
    ]:
        with pytest.raises(checks.ControlError) as caught:
            checks.check({**state.DEFAULTS, cid: value})
        assert caught.value.control == cid and "\n" not in str(caught.value), (cid, value)
    assert checks.check({**state.DEFAULTS, "p-nodes": 16.0})["p-nodes"] == 16


def test_the_winner_map_grid_is_bounded():
    from shardwise.explore import checks

    with pytest.raises(checks.ControlError, match=r"^--vary: the winner map draws at most 20,000 cells; "):
        checks.check({**state.DEFAULTS, "w-x": "batch=1..10000"})


def test_the_runner_runs_only_the_pages_commands_and_writes_only_its_own_tables(tmp_path):
    from shardwise.explore import runner

    for args in [
        state.crossover_args(state.DEFAULTS),
        state.winner_map_args(state.DEFAULTS),
        state.planner_args(state.DEFAULTS),
        [*state.serving_args(state.DEFAULTS), "--with-frontier", "--ttft-max", "1s"],
        state.timeline_args(state.DEFAULTS),
    ]:
        assert runner.refusal(args) is None, args
    target = tmp_path / "x.csv"
    for args in [
        ["calibrate", str(RUNS), "-o", str(tmp_path / "x.yaml")],
        [*state.planner_args(state.DEFAULTS, str(target))],
        [*state.planner_args(state.DEFAULTS), "--heatmap", str(tmp_path / "x.png")],
        ["crossover", "--vary", "--csv", str(target)],
        ["timeline", "--trace", str(tmp_path / "x.json")],
    ]:
        outcome = runner.run(args)
        assert outcome.error and outcome.data is None and runner.refusal(args) == outcome.error
    assert not list(tmp_path.iterdir())


def test_uploads_are_kept_under_names_the_server_makes(tmp_path):
    import base64

    from shardwise.explore.checks import ControlError
    from shardwise.explore.uploads import MAX_UPLOAD_BYTES, Uploads

    uploads = Uploads(tmp_path)
    kept, _ = uploads.save("model", "../../config.json", "data:;base64," + base64.b64encode(b"{}").decode())
    path = uploads.path("model", kept)
    assert path is not None and Path(path).parent.parent == tmp_path and Path(path).read_bytes() == b"{}"
    assert uploads.shown(f"shardwise plan --model {path}") == "shardwise plan --model model-upload.json"
    for forged in [{"digest": "0" * 64}, {"digest": "../x"}, {"path": "/etc/passwd"}, "x"]:
        with pytest.raises(ControlError):
            uploads.path("model", forged)
    with pytest.raises(ControlError):
        uploads.path("calibration", kept)  # a model's file is not a calibration
    assert uploads.save("model", "x.py", "data:;base64,AA==")[0] is None
    assert uploads.save("model", "x.json", "no data URL")[0] is None
    big = "data:;base64," + base64.b64encode(b" " * (MAX_UPLOAD_BYTES + 1)).decode()
    assert uploads.save("model", "x.json", big)[0] is None


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_explore_warns_when_it_listens_beyond_this_machine(cli, monkeypatch, host):
    import socket

    from shardwise.explore import app, workers

    made = {}

    class Served:
        def run(self, **kwargs):
            made["run"] = kwargs

    def pool(workers: int | None, time_limit_s: float) -> _Closing:
        made["pool"] = (workers, time_limit_s)
        return _Closing()

    def create_app(pool: Any, hosts: Any) -> Served:
        made["hosts"] = hosts
        return Served()

    monkeypatch.setattr(workers, "Pool", pool)
    monkeypatch.setattr(app, "create_app", create_app)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code, _, err = cli(["explore", "--no-browser", "--host", host, "--port", str(port), "--time-limit", "5"])
    assert code == 0 and made["pool"] == (None, 5.0) and made["run"]["host"] == host
    warning = f"warning: --host {host}: the explorer has no authentication: anyone who can reach port {port} can use it"
    if host == "0.0.0.0":
        assert err.splitlines()[0] == warning and made["hosts"] is None
    else:
        assert "warning" not in err and made["hosts"] == ("127.0.0.1", "localhost", "::1")


class _Closing:
    def close(self):
        pass


def test_a_loaded_file_s_error_names_the_user_s_file_not_the_server_s_folder(app, client):
    """A broken config.json's message ('not valid JSON') names the file as the user called it,
    as the command shown does, never the explorer's temporary folder."""
    import base64

    contents = "data:application/json;base64," + base64.b64encode(b"{not json").decode()
    body = _body(
        app,
        "model-file.data",
        {"model-upload.contents": contents, "model-upload.filename": "my config.json"},
        "model-upload.contents",
    )
    kept = _post(client, body).get_json()["response"]["model-file"]["data"]
    response = _post(
        client, _body(app, "crossover-graph.figure", {"model-file.data": kept, "x-bw": 0}, "model-file.data")
    )
    shown = response.get_json()["response"]
    error = shown["crossover-error"]["children"] or next(
        v["children"] for k, v in shown.items() if k.endswith("-msg") and v["children"]
    )
    assert "not valid JSON" in error and "my config.json" in error, error
    assert "shardwise-explore-" not in error and kept["digest"] not in error, error
