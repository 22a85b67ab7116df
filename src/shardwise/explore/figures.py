"""Plotly figures of the explorer, built from the JSON (or CSV) the commands print.

Figures are plain dicts in Plotly's JSON form, not `plotly.graph_objects`: the browser validates
and draws them, and building them costs nothing next to the command (graph objects took half the
time of a re-render)."""

from __future__ import annotations

import csv
import io
import operator
from collections.abc import Iterator
from typing import Any

from shardwise.colors import term_colors, term_name
from shardwise.units import format_seconds

Figure = dict[str, Any]
AXIS = {"gridcolor": "#e5e7eb", "zerolinecolor": "#d1d5db", "linecolor": "#9ca3af"}

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
KIND_COLORS = {"F": "#4c78a8", "B": "#f58518", "W": "#54a24b", "send-F": "#bab0ac", "send-B": "#bab0ac"}


TITLE_CHARS = 40  # a title's line at most: Plotly does not wrap, and a phone's figure is ~370 px wide


def _layout(fig: Figure, title: str, x: str, y: str, log_x: bool = False, log_y: bool = False) -> Figure:
    import textwrap

    lines = textwrap.wrap(title, TITLE_CHARS) or [""]
    fig["layout"].update(
        title={"text": "<br>".join(lines)},
        xaxis={**AXIS, "title": {"text": x}, **({"type": "log"} if log_x else {}), **fig["layout"].get("xaxis", {})},
        yaxis={**AXIS, "title": {"text": y}, **({"type": "log"} if log_y else {}), **fig["layout"].get("yaxis", {})},
        plot_bgcolor="white",
        paper_bgcolor="white",
        margin={"l": 60, "r": 20, "t": 60 + 20 * (len(lines) - 1), "b": 50},
        legend={"orientation": "h", "y": -0.18},
        height=520,
    )
    return fig


def axis(variable: str) -> tuple[str, float, str]:
    """A varied variable's axis label with its unit, the scale from its SI value to the unit shown
    and the unit (`--vary bandwidth=...` is in bytes/s inside and GB/s on the axis), as the
    command's own figures (`analyses.experiment.VARIABLES`); a sweep's column name
    (`bandwidth_bytes_per_s`) is taken for its variable."""
    from shardwise.analyses.experiment import DISPLAY_SCALE, DISPLAY_UNIT, VARIABLES
    from shardwise.analyses.sweep import COLUMN_NAMES

    name = {c: v for v, c in COLUMN_NAMES.items()}.get(variable, variable)
    spec = VARIABLES.get(name)
    return (spec.label if spec else name), DISPLAY_SCALE.get(name, 1.0), DISPLAY_UNIT.get(name, "")


def _figure(*data: dict[str, Any], **layout: Any) -> Figure:
    return {"data": list(data), "layout": dict(layout)}


def vline(fig: Figure, x: float, text: str, dash: str = "dash", row: int = 0) -> None:
    """A vertical line across the plot at x, labelled above it (`row` lifts the label by that many
    lines, so the labels of nearby lines do not print over each other). Call it once the x axis's
    type is set: on a log axis Plotly places a shape at x but an annotation at 10**x (one at x
    stretched the axis to 10**x and squeezed the curves into its left edge)."""
    import math

    layout = fig["layout"]
    log = layout.get("xaxis", {}).get("type") == "log" and x > 0
    layout.setdefault("shapes", []).append(
        {"type": "line", "x0": x, "x1": x, "y0": 0, "y1": 1, "yref": "paper", "line": {"dash": dash, "color": "#555"}}
    )
    layout.setdefault("annotations", []).append(
        {
            "x": math.log10(x) if log else x,
            "y": 1.0,
            "yref": "paper",
            "yshift": 14 * row,
            "showarrow": False,
            "yanchor": "bottom",
            "text": text,
            "font": {"size": 11},
        }
    )


def log_ticks(low: float, high: float) -> dict[str, Any]:
    """Ticks of a log axis at 1, 2 and 5 times the powers of ten between low and high, labelled
    as numbers (Plotly's own minor labels read as single digits: "3, 2, 10, 9, 8")."""
    import math

    if not (low > 0 and high >= low and math.isfinite(high)):
        return {}
    values: list[float] = []
    for mantissas in ((1, 2, 5), (1, 1.5, 2, 3, 4, 5, 6, 7, 8, 9)):  # finer where the range is narrow
        values = [
            m * 10.0**e
            for e in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
            for m in mantissas
            if low <= m * 10.0**e * 1.0000001 and m * 10.0**e <= high * 1.0000001
        ]
        if len(values) >= 3:
            break
    if len(values) < 3:  # inside one step: the ends and two between, to two significant digits
        values = sorted({float(f"{low * (high / low) ** (i / 3):.2g}") for i in range(4)})
    return {"tickvals": values, "ticktext": [f"{v:.4g}" for v in values]}


def crossover(data: dict[str, Any]) -> Figure:
    """Time of each plan on each link against the varied variable, the switch points marked:
    each plan in its kind's colour and each link in its line style, as the command's figure."""
    from shardwise.colors import LINK_DASHES, plan_colors

    xlabel, scale, unit = axis(data["variable"])
    xs = [x * scale for x in data["values"]]
    traces = []
    plans = list(dict.fromkeys(s["plan"] for s in data["series"]))
    links = list(dict.fromkeys(s["link"] for s in data["series"]))
    colors = dict(zip(plans, plan_colors(plans), strict=True))
    for s in data["series"]:
        color = colors[s["plan"]]
        dash = LINK_DASHES[links.index(s["link"]) % len(LINK_DASHES)]
        name = f"{s['plan']} on {s['link']}"
        band = {
            "x": xs + xs[::-1],
            "y": s["time_s_high"] + s["time_s_low"][::-1],
            "fill": "toself",
            "opacity": 0.12,
            "line": {"width": 0},
            "fillcolor": color,
            "hoverinfo": "skip",
            "showlegend": False,
            "legendgroup": name,
            "type": "scatter",
        }
        line = {
            "x": xs,
            "y": s["time_s"],
            "name": name,
            "mode": "lines+markers" if len(xs) <= 16 else "lines",
            "line": {"color": color, "dash": dash},
            "legendgroup": name,
            "type": "scatter",
            "hovertemplate": f"{name}<br>{xlabel} %{{x:.4g}}: %{{y:.4g}} s<extra></extra>",
        }
        traces += [band, line]
    fig = _figure(*traces)
    title = f"{data['workload']} time against {xlabel.split(' (')[0]}"  # (the unit: on the axis)
    spread = max(xs) / min(xs) if xs and min(xs) > 0 else 1
    ylabel = f"{data['workload']} time (s; 80% band shaded)"
    fig = _layout(fig, title, xlabel, ylabel, log_x=spread >= 100, log_y=True)
    for i, c in enumerate(sorted(data["crossings"], key=lambda c: c["at"])):
        at = c["at"] * scale
        vline(fig, at, f"{c['link']}: {c['faster_above']} from {at:.4g}{unit}", row=i % 3)
    times = [t for s in data["series"] for t in (*s["time_s_low"], *s["time_s_high"]) if t and t > 0]
    if times:
        fig["layout"]["yaxis"].update(log_ticks(min(times), max(times)))
    if spread >= 100:
        fig["layout"]["xaxis"].update(log_ticks(min(xs), max(xs)))
    return fig


def breakdown(parts: dict[str, dict[str, float]], at: float, variable: str, tp_comm: str | None = None) -> Figure:
    """Stacked bars: where each plan's time goes at the switch point (`tp_comm`: `colors.term_name`)."""
    terms = [t for t in next(iter(parts.values())) if any(p.get(t, 0) > 0 for p in parts.values())]
    bars = [
        {
            "type": "bar",
            "name": term_name(term, tp_comm),
            "x": list(parts),
            "y": [parts[plan].get(term, 0.0) for plan in parts],
            "marker": {"color": color},
            "hovertemplate": f"{term}: %{{y:.4g}} s<extra></extra>",
        }
        for term, color in zip(terms, term_colors(terms), strict=True)
    ]
    label, scale, unit = axis(variable)
    title = f"where the time goes at {label.split(' (')[0]} = {at * scale:.4g}{unit}"
    return _layout(_figure(*bars, barmode="stack"), title, "plan", "time (s)")


def stacked(names: list[str], parts: list[dict[str, float]], title: str, tp_comm: str | None = None) -> Figure:
    """Stacked bars of time terms, one bar per name; each term in its fixed colour (`colors.TERM_COLORS`,
    the command line's), not by its position among the terms shown; `tp_comm`: `colors.term_name`."""
    terms = list(parts[0]) if parts else []
    bars = [
        {
            "type": "bar",
            "name": term_name(term, tp_comm),
            "x": names,
            "y": [p[term] for p in parts],
            "marker": {"color": color},
        }
        for term, color in zip(terms, term_colors(terms), strict=True)
    ]
    return _layout(_figure(*bars, barmode="stack"), title, "plan", "time (s)")


def read_table(text: str) -> tuple[list[str], list[dict[str, str]]]:
    """(the header, the rows) of a CSV table."""
    reader = csv.DictReader(io.StringIO(text, newline=""))
    rows = list(reader)
    return list(reader.fieldnames or []), rows


def read_columns(text: str, names: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    """The cells of the columns `names` of a CSV table, row by row (`read_table` builds a dict
    of every cell of every row: the planner's table of 2,652 plans took 19 ms)."""
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader, [])
    pick = operator.itemgetter(*(header.index(n) for n in names))
    return (pick(row) for row in reader if row)


def winner_map(table: str) -> tuple[Figure, str]:
    """The fastest plan in each cell of a two-variable sweep (its CSV table; hover: every plan's time)."""
    header, rows = read_table(table)
    xname, yname = header[1], header[2]
    (xlabel, xscale, _), (ylabel, yscale, _) = axis(xname), axis(yname)  # once per figure
    rows = _in_display_units(rows, {xname: xscale, yname: yscale})
    plans = [h[len("time_s[") : -1] for h in header if h.startswith("time_s[")]
    xs = sorted({float(r[xname]) for r in rows})
    ys = sorted({float(r[yname]) for r in rows})
    code = {p: i for i, p in enumerate(plans)}
    z: list[list[int | None]] = [[None] * len(xs) for _ in ys]
    text = [[""] * len(xs) for _ in ys]
    xi, yi = {x: i for i, x in enumerate(xs)}, {y: i for i, y in enumerate(ys)}
    counts = dict.fromkeys(plans, 0)
    for r in rows:
        i, j = yi[float(r[yname])], xi[float(r[xname])]
        z[i][j] = code.get(r["winner_plan"])
        counts[r["winner_plan"]] = counts.get(r["winner_plan"], 0) + 1
        times = ", ".join(
            f"{p} {format_seconds(float(r[f'time_s[{p}]']))}" if r[f"time_s[{p}]"] not in ("", "nan") else f"{p} -"
            for p in plans
        )
        text[i][j] = f"{xlabel} {r[xname]}, {ylabel} {r[yname]}<br>fastest: {r['winner_plan']}<br>{times}" + _terms(
            r, r["winner_plan"]
        )
    n = max(len(plans), 1)
    scale = [[(k + (e == 1)) / n, COLORS[k % 8]] for k in range(n) for e in (0, 1)]
    heat = {
        "type": "heatmap",
        "z": z,
        "x": xs,
        "y": ys,
        "text": text,
        "hoverinfo": "text",
        "colorscale": scale,
        "zmin": -0.5,
        "zmax": n - 0.5,
        "colorbar": {"tickvals": list(range(n)), "ticktext": plans, "title": {"text": "fastest"}},
    }
    spread_x = xs[-1] / xs[0] if xs and xs[0] > 0 else 1
    spread_y = ys[-1] / ys[0] if ys and ys[0] > 0 else 1
    title = f"fastest plan by {xlabel.split(' (')[0]} and {ylabel.split(' (')[0]}"  # (the units: on the axes)
    fig = _layout(_figure(heat), title, xlabel, ylabel, spread_x >= 100, spread_y >= 100)
    for name, values, spread in (("xaxis", xs, spread_x), ("yaxis", ys, spread_y)):
        if spread >= 100:
            fig["layout"][name].update(log_ticks(values[0], values[-1]))
    summary = "; ".join(f"{p} fastest in {counts.get(p, 0)} of {len(rows)} cells" for p in plans)
    return fig, summary


def _terms(row: dict[str, str], plan: str) -> str:
    """Where one plan's time goes, from the `TERM_s[PLAN]` columns of `sweep --breakdown`."""
    suffix = f"_s[{plan}]"
    shown = [
        f"{key[: -len(suffix)].replace('_', ' ')} {format_seconds(float(v))}"
        for key, v in row.items()
        if key.endswith(suffix) and key != f"time{suffix}" and v not in ("", "nan") and float(v) > 0
    ]
    return f"<br>{plan}: " + ", ".join(shown) if shown else ""


def _in_display_units(rows: list[dict[str, str]], scales: dict[str, float]) -> list[dict[str, str]]:
    """`rows` with the columns of `scales` (each its `axis` scale) in the units their axes show
    (bytes/s in GB/s, seconds in µs, ...)."""
    scaled = {name: scale for name, scale in scales.items() if scale != 1.0}
    if not scaled:
        return rows
    return [{**row, **{name: f"{float(row[name]) * scale:.6g}" for name, scale in scaled.items()}} for row in rows]


def planner_heatmap(table: str, objective: str) -> Figure:
    """The best plan of each (tp, pp) pair that fits with the planner's headroom (its CSV table's
    `fits_with_headroom`, the plans it ranks): step time, or tokens/s per GPU."""
    per_gpu = objective == "throughput-per-gpu"
    key = "tokens_per_s_per_gpu" if per_gpu else "step_time_s"
    best: dict[tuple[int, int], float] = {}
    for tp, pp, fits, x in read_columns(table, ("tp", "pp", "fits_with_headroom", key)):
        if fits != "true" or x in ("", "nan"):
            continue
        cell, value = (int(tp), int(pp)), float(x)
        if cell not in best or (value > best[cell] if per_gpu else value < best[cell]):
            best[cell] = value
    tps = sorted({c[0] for c in best})
    pps = sorted({c[1] for c in best})
    label = "tokens/s per GPU" if per_gpu else "step time (s)"
    heat = {
        "type": "heatmap",
        "z": [[best.get((tp, pp)) for tp in tps] for pp in pps],
        "x": [str(t) for t in tps],
        "y": [str(p) for p in pps],
        "colorscale": "Viridis",
        "reversescale": not per_gpu,
        "colorbar": {"title": {"text": label}},
        "hovertemplate": "tp=%{x}, pp=%{y}: %{z:.4g}<extra></extra>",
    }
    fig = _figure(heat, xaxis={"type": "category"}, yaxis={"type": "category"})
    return _layout(fig, f"best {label} of each (tp, pp) that fits", "tp", "pp")


def frontier(points: dict[str, list[tuple[float, float, int]]], targets: str) -> Figure:
    """Throughput per GPU against tokens/s per user, one line per plan over the batch sizes (each
    plan in its kind's colour, as the command's figure)."""
    from shardwise.colors import plan_colors

    colors = plan_colors(list(points))
    lines = [
        {
            "type": "scatter",
            "x": [p[0] for p in pts],
            "y": [p[1] for p in pts],
            "name": plan,
            "mode": "lines+markers",
            "line": {"color": colors[i]},
            "text": [f"batch {p[2]}" for p in pts],
            "hovertemplate": f"{plan}, %{{text}}<br>%{{x:.4g}} tokens/s per user<br>"
            "%{y:.4g} tokens/s per GPU<extra></extra>",
        }
        for i, (plan, pts) in enumerate(points.items())
    ]
    fig = _layout(
        _figure(*lines),
        f"throughput against latency (static batches){targets}",
        "tokens/s per user",
        "tokens/s per GPU",
        log_x=True,
        log_y=True,
    )
    for axis, k in (("xaxis", 0), ("yaxis", 1)):
        values = [p[k] for pts in points.values() for p in pts if p[k] and p[k] > 0]
        if values:
            fig["layout"][axis].update(log_ticks(min(values), max(values)))
    return fig


def gantt(data: dict[str, Any], max_ops: int = 20_000) -> Figure:
    """The pipeline schedule: one row per stage, one bar per operation (zoom to read it)."""
    ops = [op for op in data["operations"] if op["end_s"] > op["start_s"]][:max_ops]
    bars = []
    for kind in dict.fromkeys(op["kind"] for op in ops):
        mine = [op for op in ops if op["kind"] == kind]
        bars.append(
            {
                "type": "bar",
                "orientation": "h",
                "name": kind,
                "base": [op["start_s"] for op in mine],
                "x": [op["end_s"] - op["start_s"] for op in mine],
                "y": [f"stage {op['stage']}" for op in mine],
                "marker": {"color": KIND_COLORS.get(kind, "#999")},
                "text": [f"mb {op['micro_batch']}" if op["micro_batch"] >= 0 else kind for op in mine],
                "textposition": "inside",
                "hovertemplate": f"{kind} %{{text}}<br>%{{base:.4g}} s + %{{x:.4g}} s<extra></extra>",
            }
        )
    title = (
        f"{data['schedule']}: {data['stages']} stages, {data['micro_batches']} micro-batches, "
        f"step {format_seconds(data['makespan_s'])}, stages idle {data['mean_stage_idle_fraction']:.0%}"
    )
    fig = _figure(*bars, barmode="overlay", bargap=0.2, yaxis={"autorange": "reversed"})
    return _layout(fig, title, "time (s)", "")
