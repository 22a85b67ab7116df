"""`shardwise validate memory`: `fits_in_memory` and the memory estimate against published runs."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict
from typing import Any

import click

HEAD = ("source", "stack", "runs", "ran out: called OOM", "fit: called OOM", "peaks", "peak error", "peak MAPE")


def _frac(hits: int, n: int) -> str:
    return f"{hits} of {n}" if n else "-"


def _cells(rows: list[Any]) -> list[tuple[str, ...]]:
    cells = []
    for source in dict.fromkeys(r.source for r in rows):
        mine = [r for r in rows if r.source == source]
        oom = [r for r in mine if r.outcome == "oom"]
        fit = [r for r in mine if r.outcome == "fits"]
        peaks = [r for r in mine if not math.isnan(r.measured_bytes)]
        errors = [r.error for r in peaks]
        kinds = ", ".join(dict.fromkeys(r.kind for r in peaks))
        cells.append(
            (
                source,
                ", ".join(dict.fromkeys(r.framework for r in mine)),
                str(len(mine)),
                _frac(sum(not r.fits for r in oom), len(oom)),
                _frac(sum(not r.fits for r in fit), len(fit)),
                f"{len(peaks)} ({kinds})" if peaks else "0",
                f"{sum(errors) / len(errors):+.1%}" if errors else "-",
                f"{sum(abs(e) for e in errors) / len(errors):.1%}" if errors else "-",
            )
        )
    return cells


def show_memory(as_json: bool, markdown: bool, show_rows: str) -> None:
    from shardwise.analyses.memory_published import published_runs_fit
    from shardwise.analyses.memory_validation import CITATION, validate_memory
    from shardwise.requests.training import PLAN_MEMORY_HEADROOM

    summary = validate_memory()
    share = float(PLAN_MEMORY_HEADROOM.rstrip("%")) / 100
    headroom_oom, headroom_fit = summary.headroom_calls(share)
    published = sorted(published_runs_fit(share), key=lambda p: (-p.called_oom, p.source))
    if as_json:
        from shardwise import export

        rows = [{**asdict(r), "fits": r.fits if not r.skip else None} for r in summary.rows]
        totals = {
            "oom_recall": summary.oom_recall,
            "false_oom_rate": summary.false_oom_rate,
            "fit_accuracy": summary.fit_accuracy,
            "peak_mape": summary.peak_mape,
            "peak_bias": summary.peak_bias,
            "plan_headroom": share,
            "plan_headroom_oom_called": headroom_oom,
            "plan_headroom_fits_called_oom": headroom_fit,
        }
        runs = [asdict(p) for p in published]
        click.echo(export.dumps({"source": CITATION, "summary": totals, "rows": rows, "published_runs": runs}))
        return
    from shardwise.cli.render import console, print_table

    predicted = list(summary.predicted)
    title = "fits_in_memory and the memory estimate against published runs"
    print_table(HEAD, _cells(predicted), title, {2, 3, 4, 5, 6, 7}, markdown)
    oom, fit = summary.oom, summary.fit
    text = (
        f"out of memory called for {_frac(sum(not r.fits for r in oom), len(oom))} runs that ran out of memory "
        f"(recall {summary.oom_recall:.0%}) and for {_frac(sum(not r.fits for r in fit), len(fit))} that fit "
        f"(false-OOM rate {summary.false_oom_rate:.0%}): right for "
        f"{_frac(sum(r.fits == (r.outcome == 'fits') for r in (*oom, *fit)), len(oom) + len(fit))} "
        f"(accuracy {summary.fit_accuracy:.0%}); with the {PLAN_MEMORY_HEADROOM} of each GPU `plan` keeps free, "
        f"{_frac(headroom_oom, len(oom))} and {_frac(headroom_fit, len(fit))}; peaks: {len(summary.peaks)}, mean error "
        f"{summary.peak_bias:+.1%}, MAPE {summary.peak_mape:.1%}"
    )
    n_runs, n_oom = sum(p.runs for p in published), sum(p.called_oom for p in published)
    by_source = ", ".join(f"{p.source} {p.called_oom} of {p.runs}" for p in published if p.called_oom)
    moe_runs, moe_oom = sum(p.moe_runs for p in published), sum(p.moe_called_oom for p in published)
    text += (
        f". Published training runs (data/public_training_runs.csv, all of which ran): called out of memory "
        f"{_frac(n_oom, n_runs)} ({by_source or 'none'}; mixture of experts {_frac(moe_oom, moe_runs)}), "
        f"{_frac(sum(p.over_headroom for p in published), n_runs)} with `plan`'s {PLAN_MEMORY_HEADROOM} kept free"
    )
    skipped = Counter(r.skip for r in summary.rows if r.skip)
    left_out = "; ".join(f"{n} {why}" for why, n in skipped.items())
    note = (
        "A peak is compared with the part of the estimate it measures (allocated: model state, activations, "
        "buffers and workspaces; reserved: also the allocator's share and, up to the GPU's memory, the blocks it "
        "keeps cached beside a flat-shard optimizer step; device: everything). Capacity is the GPU "
        f"preset's memory. Left out: {left_out}"
    )
    if markdown:
        click.echo(f"\n{text}.\n\n{note}.")
    else:
        console().print(text)
        console().print(f"{note}.\nsource: {CITATION}")
    if show_rows != "none":
        click.echo("")
        for r in summary.rows:
            if r.skip:
                if show_rows == "all":
                    click.echo(f"row {r.row} {r.label}: left out ({r.skip})")
                continue
            peak = ""
            if not math.isnan(r.measured_bytes):
                measured, predicted = r.measured_bytes / 2**30, r.predicted_bytes / 2**30
                peak = f"; {r.kind} peak {measured:.1f} GiB, predicted {predicted:.1f} GiB ({r.error:+.1%})"
            call = "fits" if r.fits else "OOM"
            click.echo(
                f"row {r.row} {r.label}: {r.outcome}, called {call} ({r.total_bytes / 1e9:.1f} of "
                f"{r.capacity_bytes / 1e9:.0f} GB){peak}"
            )
