"""The explorer's page layouts: the controls of each page, their labels, and where a command's
error message is shown (under the control it names)."""

from __future__ import annotations

import re
from typing import Any

from dash import dcc, html

from shardwise.explore import checks, state
from shardwise.explore.checks import BANDWIDTHS_GB_S
from shardwise.explore.runner import Outcome

TITLES = {
    "crossover": "Crossover",
    "winner-map": "Winner map",
    "planner": "Planner",
    "serving": "Serving",
    "timeline": "Timeline",
}
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
.upload-refused { color: #fca5a5; }
table.plans { border-collapse: collapse; font-size: 13px; }
table.plans td, table.plans th { border-bottom: 1px solid #ddd; padding: 3px 8px; text-align: right; }
.text { overflow-x: auto; }
@media (max-width: 760px) {  /* a phone: the controls above the figures, each the window's width */
  .page { flex-direction: column; padding: 8px; }
  .controls { width: auto; }
  header { padding: 8px; }
  header h1 { font-size: 16px; }
}
"""
# which control a flag named at the start of an error message belongs to, per page
FLAGS = {
    "crossover": {
        "--model": "x-model",
        "--layers": "x-layers",
        "--hidden": "x-hidden",
        "--heads": "x-heads",
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
        "--inter-link": "p-inter",
        "--nics-per-node": "p-nics",
        "--framework": "p-framework",
        "--precision": "p-precision",
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
        "--weight-precision": "s-weights",
        "--kv-precision": "s-kv",
        "--concurrency": "s-concurrency",
        "--request-rate": "s-rate",
        "--framework": "s-engine",
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


def _options(cid: str, blank: str | None = None) -> list[dict[str, str]]:
    """A choice control's options: what `checks` accepts, "" labelled `blank`."""
    return [{"label": blank if v == "" else v, "value": v} for v in checks.choices(cid) or [] if v or blank]


def _control(cid: str, default: Any) -> Any:
    kind = cid[2:]
    if kind == "model":
        blank = "the brief's model (96 layers, hidden 4096)" if cid in ("x-model", "w-model") else None
        return dcc.Dropdown(id=cid, options=_options(cid, blank), value=default, clearable=False)
    if kind in ("gpu", "system", "link", "framework", "precision", "weights", "kv", "engine"):
        return dcc.Dropdown(id=cid, options=_options(cid), value=default, clearable=False)
    if kind == "inter":
        return dcc.Dropdown(id=cid, options=_options(cid, "the system's network"), value=default, clearable=False)
    if kind == "links":
        return dcc.Checklist(id=cid, options=_options(cid), value=default, inline=True)
    if kind == "bw":
        marks = {i: str(b) for i, b in enumerate(BANDWIDTHS_GB_S)}  # every position labelled in GB/s
        return dcc.Slider(
            id=cid,
            min=0,
            max=len(BANDWIDTHS_GB_S) - 1,
            step=1,
            marks=marks,
            allow_direct_input=False,  # its box would show the position, not GB/s
            value=BANDWIDTHS_GB_S.index(default) if default in BANDWIDTHS_GB_S else 0,
        )
    if kind in ("workload", "objective", "schedule"):
        return dcc.RadioItems(id=cid, options=checks.choices(cid) or [], value=default, inline=True)
    numeric = isinstance(default, int) or cid in state.OPTIONAL_NUMBERS
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
    "inter": "network across servers",
    "nics": "network cards per server (blank: the system's)",
    "framework": "framework (software stack)",
    "precision": "precision",
    "weights": "weight precision",
    "kv": "KV-cache precision",
    "concurrency": "requests in flight (blank: one batch per plan's best)",
    "rate": "request rate, requests/s (blank: a closed loop)",
    "engine": "serving engine",
}


def figure_ids(page: str) -> list[str]:
    """The page's figures: one, and a second on the crossover (the breakdown at the switch point)
    and the planner (the (tp, pp) heatmap)."""
    return [f"{page}-graph", *([f"{page}-graph2"] if page in ("crossover", "planner") else [])]


def page_layout(page: str, values: dict[str, Any]) -> html.Div:
    fields: list[Any] = [html.Div(id=f"{page}-error", className="error")]
    for cid in CONTROLS[page]:
        label = LABELS[cid[2:]] + (" when not varied" if cid == "x-batch" else "")
        fields += [
            html.Label(label, htmlFor=cid),
            _control(cid, values[cid]),
            html.Div(id=f"{cid}-msg", className="msg"),
        ]
    graphs = [dcc.Graph(id=g, config={"displaylogo": False}) for g in figure_ids(page)]
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
            html.Div(id=f"{page}-text", className="text"),  # (a wide table scrolls in its own box)
            html.H4("The command that reproduces this view"),
            html.Pre(id=f"{page}-command", className="command"),
            exports,
        ],
        className="output",
    )
    return html.Div([html.Div(fields, className="controls"), output], id=f"view-{page}", className="page")


def error_outputs(
    page: str, outcome: Outcome, control: str | None = None, values: dict[str, Any] | None = None
) -> list[Any]:
    """The page's error line and each control's message: the error under `control` if given (and
    one of the page's), else under the control it is about (`_about`), else on the error line."""
    msgs = {cid: "" for cid in CONTROLS[page]}
    top = ""
    if outcome.error:
        target = control if control in msgs else _about(page, outcome.error, values or {})
        if target:
            msgs[target] = outcome.error
        else:
            top = outcome.error
    return [top, *msgs.values()]


# a model's field named in a message about the model ("model 'gpt-96l-4096h': layers: 0 is not allowed")
FIELDS = {"layers": "--layers", "hidden": "--hidden", "heads": "--heads"}


def _about(page: str, error: str, values: dict[str, Any]) -> str | None:
    """The control a command's message is about: the flag it starts with ("--vary 'batch=abc': ..."),
    or its option's name ("precision: fp8 is not supported ..."), else the first flag of the page it
    names ("each --plan ... must be different"), else a model field it names ("model 'x': layers:
    0 ..."), else a plan's key that is a control of the page ("plan: vpp=2 needs ..."). Of two
    controls with one flag (the winner map's two --vary), the one whose value the message quotes."""
    flags = FLAGS[page]
    head = error.split(":", 1)[0].split()[0] if error.strip() else ""
    # (not "model: ...": that can be a loaded file's problem, said on the page's line)
    flag = head if head in flags else f"--{head}" if f"--{head}" in flags and head != "model" else None
    if flag is None:
        flag = next((f for f in re.findall(r"--[a-z][a-z-]*", error) if f in flags), None)
    if flag is None and (field := re.search(r"\b(" + "|".join(FIELDS) + r"): ", error)):
        flag = FIELDS[field.group(1)]
    if flag is None and (key := re.search(r"\b(tp|pp|vpp)=", error)):
        flag = f"--{key.group(1)}"
    if flag not in flags:
        return None
    sharing = [c for c in CONTROLS[page] if checks.NAMES.get(c[2:]) == flag and values.get(c)]
    quoted = [c for c in sharing if repr(str(values[c])) in error or f" {values[c]}:" in error]
    return quoted[0] if len(quoted) == 1 else flags[flag]


def values_of(ids: list[str], args: tuple[Any, ...]) -> dict[str, Any]:
    """Controls' values as `state` holds them (the bandwidth slider moves over the indices of
    BANDWIDTHS_GB_S, state holds GB/s; a position off the slider becomes None, which
    `checks.check` refuses)."""
    values = dict(zip(ids, args, strict=True))
    if "x-bw" in values:
        i = values["x-bw"] or 0
        values["x-bw"] = BANDWIDTHS_GB_S[i] if checks.is_whole(i) and 0 <= i < len(BANDWIDTHS_GB_S) else None
    return values
