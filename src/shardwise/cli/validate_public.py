"""`shardwise validate public`: the public runs left out one source (and one stack) at a time, the
headline; then per source and split, with the flat baseline."""

from __future__ import annotations

import math
from typing import Any

import click

SPLITS = (("dev", "dev (fitted)"), ("holdout", "holdout (untouched)"))
# The LoRA holdout rows prompted recipe readings (docs/validation.md, LoRA fine-tuning): not untouched.
INSPECTED = "holdout (inspected)"


def _pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.1%}"


def _signed(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:+.1%}"


def _rho(s: Any) -> str:
    return "-" if math.isnan(s.spearman) else f"{s.spearman:.2f} ({s.spearman_groups})"


def _pairs(x: float, n: int) -> str:
    return "-" if math.isnan(x) else f"{x:.0%} of {n}"


def _loso() -> Any:
    from shardwise.analyses import loso

    return loso


def summary_rows() -> list[tuple[str, str, Any]]:
    """(source, split label, TableSummary) for every source and split, round-1 tables first."""
    from shardwise.analyses import public_validation as pv

    out: list[tuple[str, str, Any]] = []
    first = pv.round_one_rows()
    for name, role in (
        ("Narayanan et al. 2021 Table 1", "sets the baseline's fraction"),
        ("Korthikanti et al. 2022 Table 5", "round 1 (untouched)"),
    ):
        out.append((name, role, pv.summarize(name, [r for r in first if r.source == name])))
    for split, label in SPLITS:
        for s in pv.summaries(split):
            if s.rows:
                out.append((s.name, INSPECTED if split == "holdout" and s.name == pv.LORA_TABLE else label, s))
    return out


def _table_json(source: str, label: str, summary: dict[str, Any]) -> dict[str, Any]:
    """One table of `public --json`: `split` keeps the values it had (the holdout's 'holdout
    (untouched)' for every holdout table), `inspected` marks the holdout tables whose rows prompted
    readings, `label` is the split as the printed table shows it."""
    inspected = label == INSPECTED
    split = dict(SPLITS)["holdout"] if inspected else label
    return {"source": source, "split": split, "inspected": inspected, "label": label, **summary}


def _accuracy(s: Any) -> tuple[str, ...]:
    """runs, MAPE, bias, the baseline's, Spearman and pairs ordered right of one summary."""
    return (
        str(s.rows),
        _pct(s.mape),
        _signed(s.bias),
        _pct(s.baseline_mape),
        _signed(s.baseline_bias),
        _rho(s),
        _pairs(s.pairs_right, s.pairs),
    )


def _loso_cells(tables: list[Any]) -> list[tuple[str, ...]]:
    return [
        (
            s.name,
            s.stack,
            *_accuracy(s),
            _pct(s.coverage),
            "-" if math.isnan(s.interval_pct) else f"±{s.interval_pct:.0%}",
        )
        for s in tables
    ]


LOSO_HEAD = (
    "left out",
    "stack",
    "runs",
    "MAPE",
    "bias",
    "baseline MAPE",
    "baseline bias",
    "Spearman (groups)",
    "pairs ordered right",
    "80% covers",
    "interval",
)


def show_loso(markdown: bool) -> None:
    """The headline: each source (then each stack) predicted with the fit made without it."""
    from shardwise.analyses import loso
    from shardwise.cli.render import console, print_table

    by_source, by_stack = loso.source_table(), loso.stack_table()
    print_table(LOSO_HEAD, _loso_cells(by_source), "leave one source out", set(range(2, 11)), markdown)
    print_table(LOSO_HEAD, _loso_cells(by_stack), "leave one stack out", set(range(2, 11)), markdown)
    note = (
        f"Each source (stack) is predicted by the model fitted without it ({loso.FIT_PROCEDURE}); its 80% "
        "interval is what the tool would give from what that fit knows: the other sources of its stack (none: "
        "how far the other stacks miss when each is left out whole), ± the fit of its GPU's efficiency "
        "(interval: the median half-width). Errors in step time, (predicted - measured) / measured."
    )
    note += " " + _thin_folds(loso)
    if markdown:
        click.echo(f"\n{note}\n")
    else:
        console().print(note)


def _thin_folds(loso) -> str:
    """The folds whose GPU scale rests on under half the dev rows that set it in the full fit."""
    folds = loso.fold_setters()
    full = {gpu: n for gpu, (n, _, _) in folds.pop("").items()}
    thin = [
        f"{fold}: {gpu} on {n} rows ({groups} groups, at most {most} of one source)"
        for fold, gpus in folds.items()
        for gpu, (n, groups, most) in gpus.items()
        if 2 * n < full.get(gpu, 0)
    ]
    counts = ", ".join(f"{gpu} {n}" for gpu, n in full.items())
    return (
        f"Dev rows setting each GPU's scale in the full fit: {counts}; folds left with under half: "
        + ("; ".join(thin) or "none")
        + "."
    )


def _price(as_json: bool) -> None:
    """Price every public row, twice (as predicted, and over the LOSO fits' efficiency grid), under a
    progress bar on stderr (20-30 s): as sweep's, only where stderr is a terminal, none with --json.
    What follows reads the cached results."""
    from shardwise.analyses import public_validation as pv
    from shardwise.analyses.progress import reporting
    from shardwise.cli.render import progress_bar

    total = 2 * len(pv.raw_rows())
    with progress_bar(total, "pricing the public runs", disable=as_json) as advance, reporting(advance):
        pv.validate_public()
        _loso().priced_rows()


def show_public(as_json: bool, markdown: bool, show_rows: str) -> None:
    from shardwise.analyses import public_validation as pv
    from shardwise.analyses.family_spreads import family_coverage
    from shardwise.calibration.spreads import FAMILY_NAMES
    from shardwise.cli import validate_ranking

    _price(as_json)
    rows = summary_rows()
    listed = [r for r in pv.validate_public() if show_rows == "all" or r.split == show_rows]
    if as_json:
        from dataclasses import asdict

        from shardwise import export

        click.echo(
            export.dumps(
                {
                    "baseline_fraction_of_peak": pv.baseline_fraction(),
                    "leave_one_source_out": [asdict(t) for t in _loso().source_table()],
                    "leave_one_stack_out": [asdict(t) for t in _loso().stack_table()],
                    "ranking_within_groups": validate_ranking.json_payload()["stacks"],
                    "tables": [_table_json(src, label, asdict(s)) for src, label, s in rows],
                    "family_intervals": {
                        family: {"covered": covered, "runs": runs, "upper_fraction": upper}
                        for family, (covered, runs, upper) in family_coverage().items()
                    },
                    "skipped": {split: pv.skip_counts(split) for split, _ in SPLITS},
                    "rows": [asdict(r) for r in listed],
                }
            )
        )
        return
    head = (
        "source",
        "split",
        "runs",
        "MAPE",
        "bias",
        "baseline MAPE",
        "baseline bias",
        "Spearman (groups)",
        "pairs ordered right",
        "baseline pairs",
    )
    cells = [(src, split, *_accuracy(s), _pairs(s.baseline_pairs_right, s.pairs)) for src, split, s in rows]
    frac = pv.baseline_fraction()
    families = "; ".join(
        f"{FAMILY_NAMES[f]} {c} of {n} ({c / n:.0%}) at -{1 - 1 / (1 + u):.0%}/+{u:.0%}"
        for f, (c, n, u) in family_coverage().items()
    )
    note = (
        f"Errors in step time (predicted - measured) / measured. Baseline: Eq. 3 FLOPs at {frac:.1%} of the "
        "dense peak in the run's precision (Narayanan Table 1's mean). Ranking: layouts of one model on one "
        "system and GPU count, by tokens/s per GPU. Runs inside the 80% interval `predict` gives their model "
        f"family (its spread over them, wider than the stacks' measured on dense runs): {families}. "
        f"{INSPECTED}: the LoRA holdout rows prompted recipe readings, so theirs is not an untouched figure "
        "(docs/validation.md)."
    )
    skipped = {split: pv.skip_counts(split) for split, _ in SPLITS}
    skip_text = "; ".join(
        f"{label}: " + ", ".join(f"{n} {reason}" for reason, n in skipped[split].items()) for split, label in SPLITS
    )
    from shardwise.cli.render import console, print_table

    show_loso(markdown)
    click.echo("")
    validate_ranking.show_stack_table(markdown)
    click.echo("")
    print_table(head, cells, "public training runs: model against a flat baseline", set(range(2, 10)), markdown)
    if markdown:
        click.echo(f"\n{note}\n\nSkipped (not expressible yet): {skip_text}.")
    else:
        console().print(note)
        console().print(f"skipped (not expressible yet): {skip_text}")
    if listed:
        click.echo("")
        for r in listed:
            if r.skip:
                click.echo(f"{r.run_id} [{r.split}] {r.label}: skipped ({r.skip})")
            else:
                click.echo(
                    f"{r.run_id} [{r.split}] {r.label}: measured {r.measured_step_s:.3g} s, "
                    f"predicted {r.predicted_step_s:.3g} s ({r.error:+.1%}), baseline {r.baseline_error:+.1%}"
                )
