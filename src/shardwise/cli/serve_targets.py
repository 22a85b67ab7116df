"""`shardwise serve --ttft-max/--tpot-max`: the search's table, the best option and why."""

from __future__ import annotations

from typing import Any

SHOWN = 12


def replicas_label(label: str, replicas: int, plan: Any = None) -> str:
    """A served plan as both of serve's tables name it: its --plan label, and its replicas where
    there are several ('tp=1 (x8 replicas)'); under data-parallel attention (`plan` given) the
    ranks are one engine's, its experts spread over them ('tp=1,ep=16 (16 attention ranks)')."""
    if replicas <= 1:
        return label
    return f"{label} ({replicas} attention ranks)" if _attention_dp(plan) else f"{label} (x{replicas} replicas)"


def _attention_dp(plan: Any) -> bool:
    if plan is None:
        return False
    import numpy as np

    from shardwise.engines.dp_attention import dp_attention

    return bool(np.any(dp_attention(plan)))


def replicas_words(replicas: int, plan: Any = None) -> str:
    """'4 replicas', '1 replica', or '16 data-parallel attention ranks of one replica'."""
    if replicas > 1 and _attention_dp(plan):
        return f"{replicas} data-parallel attention ranks of one replica"
    return f"{replicas} replica{'s' if replicas != 1 else ''}"


def print_targets(found: Any) -> None:
    """The search's table (`requests.serve_targets.TargetsResult`), the best option and why."""
    s, req = found.setting, found.request
    _table(s.model, s.cluster, s.workload, found.options, req.ttft_max, req.tpot_max, found.percentile, req, found)


def _layouts_said(found: Any) -> list[str]:
    """Without --plan on a mixture of experts: which layouts were searched, those not shown after
    pricing and those not compared (as `serve` without targets says them); none for a dense model."""
    layouts = found.setting.layouts
    if not found.compared_layouts or layouts is None or not (layouts.experts or layouts.left_out):
        return []
    labels = {o.label for o in found.options} | {label for label, _ in found.dropped}
    out = []
    if layouts.experts:
        out.append(f"no --plan given: {len(labels)} layouts searched ({layouts.experts}; --plan to choose)")
    if found.dropped:
        pairs = ", ".join(f"{label} ({w})" for label, w in found.dropped)
        out.append(
            f"not shown: {pairs} (the experts whole inside the replica: the same weights per GPU as the same layout "
            "with ep 1, which does not fit either)"
        )
    out += [f"not compared: {line}" for line in layouts.left_out]
    return out


def _targets(ttft_max: str | None, tpot_max: str | None, pct: str) -> str:
    """'TTFT <= 500 ms and TPOT <= 50 ms at p90': each target as a time with its unit (`--ttft-max 1s`
    read 'TTFT <= 1' before; a bare number is refused, `requests.serve_flags.seconds_of`)."""
    from shardwise.units import format_seconds, parse_seconds

    parts = [
        f"{name} <= {format_seconds(parse_seconds(value))}"
        for name, value in (("TTFT", ttft_max), ("TPOT", tpot_max))
        if value
    ]
    return " and ".join(parts) + f" at {pct}"


def _table(
    model: Any,
    cluster: Any,
    wl: Any,
    options: list[Any],
    ttft_max: str | None,
    tpot_max: str | None,
    pct: str,
    request: Any,
    found: Any = None,
) -> None:
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    from shardwise.cli.render import console
    from shardwise.units import format_seconds

    out = console()
    out.print(
        f"[bold]{model.name}[/] on {int(cluster.num_gpus)} x {cluster.gpu.name}; {wl.input_len} prompt + "
        f"{wl.output_len} new tokens per request; targets: {_targets(ttft_max, tpot_max, pct)}; in-flight batching"
    )
    table = Table(header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for col in (
        "plan",
        "weights",
        "in flight\nper replica",
        f"TTFT\n{pct}",
        f"TPOT\n{pct}",
        "tok/s\nper GPU",
        "why not more",
    ):
        table.add_column(col, justify="left" if col in ("plan", "weights", "why not more") else "right")
    for o in options[:SHOWN]:
        est = o.estimate
        p = est.percentiles_s if est is not None else None
        replicas = int(est.scenario.plan.dp) if est is not None else 0
        name = replicas_label(o.label, replicas, est.scenario.plan if est is not None else None)
        table.add_row(
            name,
            o.weight_precision,
            f"{o.users_per_replica:,}" if o.meets else "-",
            format_seconds(p["ttft_s"][pct]) if p else "-",
            format_seconds(p["tpot_s"][pct]) if p else "-",
            f"{o.tokens_per_s_per_gpu:,.0f}" if o.meets else "-",
            o.why,
            style=None if o.meets else "dim",
        )
    out.print(table)
    if len(options) > SHOWN:
        out.print(f"[dim]{SHOWN} of {len(options)} options shown (--json for all)[/]")
    for line in _layouts_said(found) if found is not None else ():
        out.print(escape(line))
    best = options[0] if options and options[0].meets else None
    if best is None:
        out.print(
            "[red]no plan meets the targets at any load: loosen them, use more GPUs, or shorten the requests "
            "(the closest misses are above)[/]"
        )
        return
    replicas = int(best.estimate.scenario.plan.dp)
    out.print(
        f"[dim]why not more: the load (requests in flight per replica) at which the {pct} misses a target, "
        "or what else stops it[/]"
    )
    out.print(
        f"best: {best.label}, {replicas_words(replicas, best.estimate.scenario.plan)}, "
        f"{best.weight_precision} weights, "
        f"{best.users_per_replica:,} requests in flight per replica: {best.tokens_per_s_per_gpu:,.0f} tokens/s "
        f"per GPU; more load misses ({best.why})"
    )
    # the request searched, at the best option: its lengths, stack and budget kept
    import dataclasses

    full = dataclasses.replace(
        request,
        plans=(best.label,),
        weight_precision=best.weight_precision,
        kv_precision=best.kv_precision,
        concurrency=best.users_per_replica * replicas,
        ttft_max=None,
        tpot_max=None,
        slo_percentile=None,
    )
    out.print(f"[dim]in full: {full.command()}[/]")
    from shardwise.requests.serve_notes import lockstep_cliff
    from shardwise.units import parse_seconds

    cliff = lockstep_cliff(
        best, parse_seconds(ttft_max) if ttft_max else None, parse_seconds(tpot_max) if tpot_max else None, pct
    )
    if cliff:
        out.print(f"[yellow]note: {escape(cliff)}[/]")
