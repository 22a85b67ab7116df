"""`shardwise serve`'s report: the table of estimates, what each number is made of, and the
throughput-vs-latency frontier figure."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from shardwise.cli.serve_caps import cap_name, closed_loop_queue, engine_capped, overloaded
from shardwise.cli.serve_header import (
    budget_text,
    engine_text,
    kernel_text,
    lengths_text,
    memory_note,
    mix_over_context,
    pcie_text,
)
from shardwise.requests.serve_notes import all_reduce_text, table_notes


def print_estimates(
    model: Any,
    cluster: Any,
    workload: Any,
    rows: list[tuple[str, Any]],
    figure: Any,
    max_tp: bool,
    spreads: dict[str, tuple[float, str]],
    mix: Any = None,
) -> None:
    from rich import box
    from rich.table import Table

    from shardwise.cli.render import console
    from shardwise.cli.serve_caps import no_sequence_fits
    from shardwise.cli.serve_targets import replicas_label
    from shardwise.export_serving import memory_total_bytes
    from shardwise.units import format_bytes, format_seconds

    out = console()
    inter = cluster.inter_node_link
    multi = inter is not None and int(cluster.nodes) > 1
    across = f", {inter.name} across {int(cluster.nodes)} servers" if multi else ""
    # priced as asked (a note says)
    long = mix is None and workload.input_len + workload.output_len > model.serving_context
    beyond = f" (beyond {model.name}'s {model.context_words})" if long else ""
    out.print(
        f"[bold]{model.name}[/] on {int(cluster.num_gpus)} x {cluster.gpu.name} ({cluster.intra_node_link.name} "
        f"inside a server{across}); {lengths_text(workload, rows, mix)}{beyond}; "
        f"weights {workload.weight_precision} (GEMMs in {rows[0][1].scenario.plan.precision}), KV cache "
        f"{workload.kv_precision}; {engine_text(workload)}{kernel_text(workload, rows)}runtime {workload.runtime}; "
        + all_reduce_text(workload.custom_all_reduce, cluster)
        + ("" if cluster.p2p else "; P2P off (NCCL through host memory)")
        + pcie_text(cluster)
        + ("" if cluster.nvls or not cluster.intra_node_link.nvls_efficiency else "; NVLS off")
    )
    over = mix_over_context(mix, model)
    if over:
        out.print(f"[yellow]note: {over} (--seq-len to change it)[/]")
    inflight = rows[0][1].batching == "inflight"
    # one meaning per column: a closed loop's users (queued ones too), or the mean requests running
    users = not inflight or rows[0][1].users is not None
    table = Table(header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for col in (
        "plan",
        ("users" if users else "running\n(mean)") if inflight else "batch",
        "TTFT",
        "TPOT",
        "latency",
        "tok/s",
        "tok/s\nper user",
        "memory\nper GPU",
        "max\nbatch",
    ):
        if col == "plan":  # the plan's name folds onto more lines rather than being cut
            table.add_column(col, justify="left", overflow="fold", min_width=min(12, max(len(r[0]) for r in rows)))
        else:
            table.add_column(col, justify="right")
    for label, est in rows:
        fits = bool(est.fits_in_memory)
        style = None if fits else "red"
        name = replicas_label(label, int(est.scenario.plan.dp), est.scenario.plan)
        # a plan that does not fit has no times or rates: "-", in every mode (JSON: null)
        timed = fits and math.isfinite(float(est.tpot_s))
        table.add_row(
            (f"{name} \\[overloaded]" if overloaded(est) else name) if fits else f"{name} \\[does not fit]",
            _count(est.mean_running) if not users else f"{int(est.workload.batch):,}",
            format_seconds(float(est.ttft_s)) if fits else "-",
            _time(est.tpot_s) if fits else "-",
            format_seconds(float(est.e2e_s)) if fits else "-",
            f"{float(est.throughput_tokens_per_s):,.0f}" if fits else "-",
            f"{float(est.per_user_tokens_per_s):,.1f}" if timed else "-",
            format_bytes(float(memory_total_bytes(est))),
            f"{int(est.max_batch):,}",
            style=style,
        )
    out.print(table)
    out.print(
        "[dim]TTFT: time to first token (prefill); TPOT: time per output token (decode); latency: end to end "
        "per request; tok/s: generated tokens per second, all replicas; max batch: sequences per replica that "
        "fit the KV cache"
        + (f"; {USERS_NOTE if users else RUNNING_NOTE}" if inflight else "")
        + f"; {memory_note(workload)}[/]"
    )
    for note in table_notes(rows):
        out.print(f"[dim]{note}[/]")
    if inflight:
        _print_inflight(out, rows)
    from shardwise.calibration.spreads import Z80
    from shardwise.requests.serve_hints import UNMEASURED

    widest, basis = max(spreads.values())
    low, high = -math.expm1(-Z80 * widest), math.expm1(Z80 * widest)  # a log-normal band: -12%/+14% at 0.1
    out.print(
        f"[dim]80% interval of every time and rate: about -{low:.0%}/+{high:.0%}"
        f"{' unmeasured' if basis.startswith(UNMEASURED) else ''} ({basis.removeprefix(UNMEASURED)}; JSON: *_low, "
        "*_high)[/]"
    )
    capacity = float(cluster.gpu.memory_bytes)
    for label, est in rows:
        if int(est.max_batch) < 1:
            out.print(f"[red]{label}: does not fit: {no_sequence_fits(est, capacity)}; its times are not meaningful[/]")
        elif not bool(est.fits_in_memory):
            out.print(
                f"[red]{label}: batch {int(est.workload.batch)} does not fit: at most {int(est.max_batch):,} "
                "sequences per replica fit the KV cache[/]"
            )
    for label, est in [r for r in rows if bool(r[1].fits_in_memory)] if not inflight else []:
        dec = {k: float(v) for k, v in est.decode_s.items()}
        total = sum(dec.values())
        parts = ", ".join(f"{_part(k, est)} {v / total:.0%}" for k, v in dec.items() if v > 0)
        out.print(
            f"  {label}: each output token = {parts}; each stage busy "
            f"{float(est.decode_utilization):.0%} of a decode step"
        )
    waits = [est for _, est in rows if bool(est.fits_in_memory) and float(est.decode_s.get("pp_wait", 0.0)) > 0]
    if any(int(est.scenario.plan.pp) > 1 for est in waits):
        out.print(f"[dim]{PP_WAIT_NOTE}[/]")
    if any(int(est.scenario.plan.pp) == 1 for est in waits):
        out.print(f"[dim]{HOST_WAIT_NOTE}[/]")
    if max_tp and not inflight:
        out.print(
            "[dim]batch: the largest that fits the KV cache (at most the engine's cap per replica), all of it "
            "arriving at once: TTFT and latency include the prefill of every prompt[/]"
        )
    if figure is not None:
        out.print(f"figure: {figure}")


USERS_NOTE = "users: requests in flight, queued ones too"
RUNNING_NOTE = "running: requests admitted, mean over time"
# the parts of an iteration (or output token) as the report names them
PART_NAMES = {"tp_comm": "tp comm", "pp_p2p": "pp sends", "pp_wait": "pp wait"}
PP_WAIT_NOTE = (
    "pp sends: activations between stages; pp wait: a round of micro-batches waiting beyond the stages' GPU work "
    "(host steps, the heaviest micro-batch's pass, decodes stalled behind prefills)"
)


HOST_WAIT_NOTE = (
    "host wait: the GPU idle while the engine's process prepares the next step, one stage's host work outlasting "
    "its GPU work (h_0 + h_1 per request; engines/pipeline.py overlapped_host_floor_s)"
)


def _part(key: str, est: Any = None) -> str:
    if key == "pp_wait" and est is not None and int(est.scenario.plan.pp) == 1:
        return "host wait"  # one stage: the host step outlasting the GPU's (`engines.pipeline`)
    if key == "tp_comm" and est is not None:
        return _comm_name(est.scenario.plan)
    return PART_NAMES.get(key, key.replace("_", " "))


def _comm_name(plan: Any) -> str:
    """What `tp_comm` holds for a serving plan, by the groups that communicate (`engines.iteration`):
    the TP group's collectives, the experts' all-to-all where attention is data-parallel
    (`engines.dp_attention`: with tp = 1 there is no TP collective at all; "expert gather" where the
    engine gathers the tokens instead, vLLM's and SGLang's `Plan.moe_dispatcher`) and the
    context-parallel ranks' exchange; "tp comm" alone for a plan of TP only."""
    from shardwise.engines.dp_attention import dp_attention

    gathers = getattr(plan, "moe_dispatcher", "alltoall") in ("allgather", "dp-gather")
    groups = [
        name
        for name, on in (
            ("tp comm", int(plan.tp) > 1),
            ("expert gather" if gathers else "expert all-to-all", bool(np.any(dp_attention(plan)))),
            ("cp comm", int(plan.cp) > 1),
        )
        if on
    ]
    return " + ".join(groups) or "comm"


def _time(seconds: Any) -> str:
    """A time, or '-' where there is none (no decode step with one output token)."""
    from shardwise.units import format_seconds

    x = float(seconds)
    return format_seconds(x) if math.isfinite(x) else "-"


def _count(x: float) -> str:
    return f"{x:,.0f}" if x >= 10 else f"{x:.2g}"


def _print_inflight(out: Any, rows: list[tuple[str, Any]]) -> None:
    """Percentiles, the rate each plan sustains, and what an iteration is made of."""
    from shardwise.units import format_seconds

    first = next((est for _, est in rows if bool(est.fits_in_memory)), rows[0][1])  # one that was simulated
    arrivals = "Poisson arrivals" if first.burstiness == 1.0 else f"gamma arrivals (burstiness {first.burstiness:g})"
    # at the maximum throughput: what bounds the requests in flight, the KV cache or the engine's cap
    capped = any(engine_capped(est) for _, est in rows if bool(est.fits_in_memory))
    full = "every sequence slot kept full (the KV cache's, or the engine's cap where lower)"
    full = full if capped else "the KV cache kept full"
    how = (
        f"{arrivals} at {first.request_rate_per_s:g} requests/s"
        if first.request_rate_per_s is not None
        else (
            f"{first.users:,} request{'s' if first.users != 1 else ''} always in flight"
            if first.users is not None
            else f"{full}, each finished request replaced at once (a sustained rate: the "
            "requests started spread over one request's lifetime, not sent in one burst)"
        )
    )
    rounds = any(int(est.round_tokens) > int(est.max_batched_tokens) for _, est in rows)
    per = " a micro-batch, pp a round" if rounds else " per iteration"
    simulated = (
        f"medians of {first.simulated_requests:,} simulated requests per replica"
        if first.simulated_requests
        else "no plan fits: nothing simulated"
    )
    out.print(
        f"[dim]in-flight batching, chunked prefill ({budget_text(rows, per)}), {how}: "
        f"{simulated} (--batching static: one batch)[/]"
    )
    for label, est in rows:
        if not bool(est.fits_in_memory):
            continue
        p = est.percentiles_s

        def pct(key: str, p: dict[str, dict[str, float]] = p) -> str:
            return " / ".join(_time(v) for v in p[key].values())

        dec = est.decode_s  # over the run's iterations, weighted by decodes (`engines.inflight.decode_parts`)
        total = sum(dec.values()) or 1.0
        # a decode token's wait by part; those under half a percent left out (the JSON has them)
        parts = ", ".join(f"{_part(k, est)} {v / total:.0%}" for k, v in dec.items() if v / total >= 0.005)
        it = "a round" if int(est.round_tokens) > int(est.max_batched_tokens) else "an iteration"
        queue = est.prefill_s["queueing"]
        waits = f" (queueing {format_seconds(queue)} of the median)" if queue > 0 else ""
        out.print(
            f"  {label}: TTFT p50/p90/p99 {pct('ttft_s')}{waits}, TPOT {pct('tpot_s')}; up to "
            f"{est.max_request_rate_per_s:,.3g} requests/s; a token's wait (+{est.mean_prompt_tokens:,.0f} prompt "
            f"tokens {it}) = {parts}"
        )
        held = closed_loop_queue(est)
        if held:
            out.print(f"  {label}: {held}")
        if engine_capped(est):
            out.print(
                f"  {label}: {int(est.max_sequences):,} run at once per replica ({cap_name(est)}; the KV cache "
                f"would hold {int(est.max_batch):,})"
            )
        if est.overloaded:
            out.print(
                f"[red]  {label}: overloaded: {est.request_rate_per_s:g} requests/s is more than the "
                f"{float(est.max_request_rate_per_s):,.3g} requests/s it serves: queues grow without bound, and its "
                "percentiles grow with --requests[/]"
            )
        elif est.short_of_offered:
            out.print(
                f"[yellow]  {label}: generates {float(est.throughput_tokens_per_s):,.0f} of the "
                f"{float(est.offered_tokens_per_s):,.0f} tok/s offered ({est.request_rate_per_s:g} requests/s x "
                f"{float(est.mean_output_len):,.0f} new tokens): its queue grew over the simulated window[/]"
            )


def draw_frontier(
    model: Any,
    cluster: Any,
    specs: list[Any],
    workload: Any,
    second: Any,
    path: str,
    stages: dict[str, Any] | None = None,
    spread: tuple[float, str] = (0.0, ""),
    inflight: bool = True,
    mix: Any = None,
) -> Any:
    from shardwise import plots
    from shardwise.analyses.serving import frontier, frontier_inflight
    from shardwise.requests.serve_plans import scenario as _scenario

    panels = {}
    links = [(f"the system's own link ({cluster.intra_node_link.name})", cluster.intra_node_link)]
    if second.link != cluster.intra_node_link:  # the same link twice would be a duplicate panel
        links.append((f"{second.label} ({second.link.name})", second.link))
    for label, link in links:
        c = cluster.with_(intra_node_link=link)
        lines = {
            spec.label: (
                frontier_inflight(_scenario(model, c, spec, stages, workload.engine), workload, mix=mix)
                if inflight
                else frontier(_scenario(model, c, spec, stages, workload.engine), workload)
            )
            for spec in specs
        }
        panels[label] = {k: v for k, v in lines.items() if v[0].size}
    if not any(panels.values()):
        from shardwise.errors import SpecError

        raise SpecError("--plot: no plan fits in memory at any batch; try more GPUs or narrower weights")
    title = (
        f"{model.name} on {int(cluster.num_gpus)} x {cluster.gpu.name}: "
        + (f"{workload.input_len} in, {workload.output_len} out, " if mix is None else f"{mix.name} lengths, ")
        + (
            "in-flight batching, 1 to 2048 requests in flight per replica (labels)"
            if inflight
            else "static batches of 1 to 2048 per replica (labels: batch)"
        )
    )
    return plots.save(plots.serving_frontier(panels, title, *spread), path)
