"""Plotly figures and tables of the explorer, built from the JSON (or CSV) the commands print."""

from __future__ import annotations

import csv
from typing import Any

import plotly.graph_objects as go

from shardwise.units import format_seconds

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
KIND_COLORS = {"F": "#4c78a8", "B": "#f58518", "W": "#54a24b", "send-F": "#bab0ac", "send-B": "#bab0ac"}


def _layout(fig: go.Figure, title: str, x: str, y: str, log_x: bool = False, log_y: bool = False) -> go.Figure:
    fig.update_layout(
        title=title,
        xaxis_title=x,
        yaxis_title=y,
        template="plotly_white",
        margin={"l": 60, "r": 20, "t": 60, "b": 50},
        legend={"orientation": "h", "y": -0.18},
        height=520,
    )
    if log_x:
        fig.update_xaxes(type="log")
    if log_y:
        fig.update_yaxes(type="log")
    return fig


def crossover(data: dict[str, Any]) -> go.Figure:
    """Time of each plan on each link against the varied variable, the switch points marked."""
    fig = go.Figure()
    xs = data["values"]
    for i, s in enumerate(data["series"]):
        color = COLORS[i % len(COLORS)]
        name = f"{s['plan']} on {s['link']}"
        fig.add_trace(
            go.Scatter(
                x=xs + xs[::-1],
                y=s["time_s_high"] + s["time_s_low"][::-1],
                fill="toself",
                opacity=0.12,
                line={"width": 0},
                fillcolor=color,
                hoverinfo="skip",
                showlegend=False,
                legendgroup=name,
            )
        )
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=s["time_s"],
                name=name,
                mode="lines+markers" if len(xs) <= 64 else "lines",
                line={"color": color},
                legendgroup=name,
                hovertemplate=f"{name}<br>{data['variable']} %{{x:.4g}}: %{{y:.4g}} s<extra></extra>",
            )
        )
    for c in data["crossings"]:
        fig.add_vline(x=c["at"], line={"dash": "dash", "color": "#555"})
        fig.add_annotation(
            x=c["at"],
            y=1.0,
            yref="paper",
            showarrow=False,
            yanchor="bottom",
            text=f"{c['link']}: {c['faster_above']} from {c['at']:.4g}",
            font={"size": 11},
        )
    unit = "s (80% band shaded)"
    title = f"{data['workload']} time against {data['variable']}"
    spread = max(xs) / min(xs) if xs and min(xs) > 0 else 1
    return _layout(fig, title, data["variable"], unit, log_x=spread >= 100, log_y=True)


def breakdown(parts: dict[str, dict[str, float]], at: float, variable: str) -> go.Figure:
    """Stacked bars: where each plan's time goes at the switch point."""
    fig = go.Figure()
    terms = [t for t in next(iter(parts.values())) if any(p.get(t, 0) > 0 for p in parts.values())]
    for i, term in enumerate(terms):
        values = [parts[plan].get(term, 0.0) for plan in parts]
        fig.add_trace(
            go.Bar(
                name=term.replace("_", " "),
                x=list(parts),
                y=values,
                marker_color=COLORS[i % 8],
                hovertemplate=f"{term}: %{{y:.4g}} s<extra></extra>",
            )
        )
    fig.update_layout(barmode="stack")
    return _layout(fig, f"where the time goes at {variable} = {at:.4g}", "plan", "s")


def read_table(path: str) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        return list(reader.fieldnames or []), rows


def winner_map(path: str) -> tuple[go.Figure, str]:
    """The fastest plan in each cell of a two-variable sweep (hover: every plan's time)."""
    header, rows = read_table(path)
    xname, yname = header[1], header[2]
    rows = [_in_gb_per_s(r, (xname, yname)) for r in rows]
    plans = [h[len("time_s[") : -1] for h in header if h.startswith("time_s[")]
    xs = sorted({float(r[xname]) for r in rows})
    ys = sorted({float(r[yname]) for r in rows})
    code = {p: i for i, p in enumerate(plans)}
    z = [[None] * len(xs) for _ in ys]
    text = [[""] * len(xs) for _ in ys]
    xi, yi = {x: i for i, x in enumerate(xs)}, {y: i for i, y in enumerate(ys)}
    counts = dict.fromkeys(plans, 0)
    for r in rows:
        i, j = yi[float(r[yname])], xi[float(r[xname])]
        z[i][j] = code.get(r["winner"])
        counts[r["winner"]] = counts.get(r["winner"], 0) + 1
        times = ", ".join(
            f"{p} {format_seconds(float(r[f'time_s[{p}]']))}" if r[f"time_s[{p}]"] not in ("", "nan") else f"{p} -"
            for p in plans
        )
        text[i][j] = f"{xname} {r[xname]}, {yname} {r[yname]}<br>fastest: {r['winner']}<br>{times}"
    n = max(len(plans), 1)
    scale = [[(k + (e == 1)) / n, COLORS[k % 8]] for k in range(n) for e in (0, 1)]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=xs,
            y=ys,
            text=text,
            hoverinfo="text",
            colorscale=scale,
            zmin=-0.5,
            zmax=n - 0.5,
            colorbar={"tickvals": list(range(n)), "ticktext": plans, "title": "fastest"},
        )
    )
    spread_x = xs[-1] / xs[0] if xs and xs[0] > 0 else 1
    spread_y = ys[-1] / ys[0] if ys and ys[0] > 0 else 1
    xlabel, ylabel = (n.replace("_bytes_per_s", " (GB/s)") for n in (xname, yname))
    _layout(fig, f"fastest plan by {xlabel} and {ylabel}", xlabel, ylabel, spread_x >= 100, spread_y >= 100)
    summary = "; ".join(f"{p} fastest in {counts.get(p, 0)} of {len(rows)} cells" for p in plans)
    return fig, summary


def _in_gb_per_s(row: dict[str, str], names: tuple[str, ...]) -> dict[str, str]:
    """A bandwidth column (bytes/s) shown in GB/s."""
    out = dict(row)
    for name in names:
        if name.endswith("_bytes_per_s"):
            out[name] = f"{float(row[name]) / 1e9:.6g}"
    return out


def planner_heatmap(path: str, objective: str) -> go.Figure:
    """The best plan of each (tp, pp) pair that fits: step time, or tokens/s per GPU."""
    _, rows = read_table(path)
    per_gpu = objective == "throughput-per-gpu"
    key = "tokens_per_s_per_gpu" if per_gpu else "step_time_s"
    best: dict[tuple[int, int], float] = {}
    for r in rows:
        if r["fits_in_memory"] != "true" or r[key] in ("", "nan"):
            continue
        cell, value = (int(r["tp"]), int(r["pp"])), float(r[key])
        if cell not in best or (value > best[cell] if per_gpu else value < best[cell]):
            best[cell] = value
    tps = sorted({c[0] for c in best})
    pps = sorted({c[1] for c in best})
    z = [[best.get((tp, pp)) for tp in tps] for pp in pps]
    label = "tokens/s per GPU" if per_gpu else "step time (s)"
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=[str(t) for t in tps],
            y=[str(p) for p in pps],
            colorscale="Viridis",
            reversescale=not per_gpu,
            colorbar={"title": label},
            hovertemplate="tp=%{x}, pp=%{y}: %{z:.4g}<extra></extra>",
        )
    )
    return _layout(fig, f"best {label} of each (tp, pp) that fits", "tp", "pp")


def frontier(points: dict[str, list[tuple[float, float, int]]], targets: str) -> go.Figure:
    """Throughput per GPU against tokens/s per user, one line per plan over the batch sizes."""
    fig = go.Figure()
    for i, (plan, pts) in enumerate(points.items()):
        fig.add_trace(
            go.Scatter(
                x=[p[0] for p in pts],
                y=[p[1] for p in pts],
                name=plan,
                mode="lines+markers",
                line={"color": COLORS[i % 8]},
                text=[f"batch {p[2]}" for p in pts],
                hovertemplate=f"{plan}, %{{text}}<br>%{{x:.4g}} tokens/s per user<br>"
                "%{y:.4g} tokens/s per GPU<extra></extra>",
            )
        )
    return _layout(
        fig,
        f"throughput against latency (static batches){targets}",
        "tokens/s per user",
        "tokens/s per GPU",
        log_x=True,
        log_y=True,
    )


def gantt(data: dict[str, Any], max_ops: int = 20_000) -> go.Figure:
    """The pipeline schedule: one row per stage, one bar per operation (zoom to read it)."""
    ops = [op for op in data["operations"] if op["end_s"] > op["start_s"]][:max_ops]
    fig = go.Figure()
    for kind in dict.fromkeys(op["kind"] for op in ops):
        mine = [op for op in ops if op["kind"] == kind]
        fig.add_trace(
            go.Bar(
                orientation="h",
                name=kind,
                base=[op["start_s"] for op in mine],
                x=[op["end_s"] - op["start_s"] for op in mine],
                y=[f"stage {op['stage']}" for op in mine],
                marker_color=KIND_COLORS.get(kind, "#999"),
                text=[f"mb {op['micro_batch']}" for op in mine],
                textposition="inside",
                hovertemplate=f"{kind} %{{text}}<br>%{{base:.4g}} s + %{{x:.4g}} s<extra></extra>",
            )
        )
    fig.update_layout(barmode="overlay", bargap=0.2)
    fig.update_yaxes(autorange="reversed")
    title = (
        f"{data['schedule']}: {data['stages']} stages, {data['micro_batches']} micro-batches, "
        f"step {format_seconds(data['makespan_s'])}, bubble {data['bubble_fraction']:.0%}"
    )
    return _layout(fig, title, "time (s)", "")
