"""`shardwise validate ranking`: within each group of published layouts (one model, cluster, GPU
count and stack), does the model rank them as they measure? Spearman and top-1 regret."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

import click

STACK_HEAD = (
    "stack",
    "kind",
    "groups",
    "layouts",
    "median Spearman",
    "min Spearman",
    "median top-1 regret",
    "max top-1 regret",
)
GROUP_HEAD = (
    "group",
    "stack",
    "kind",
    "layouts",
    "release",
    "Spearman",
    "top-1 regret",
    "predicted best",
    "measured best",
)
NOTE = (
    "Groups: every published layout of one model on one cluster, GPU count and sequence length, run by one "
    "stack in one software release, with at least {n} layouts, ranked by tokens/s per GPU. Top-1 regret: how "
    "much slower (measured) the layout the model ranks first is than the fastest measured one. Dense runs: "
    "leave-one-source-out predictions; mixture-of-experts and LoRA runs: the shipped model. Spearman is "
    "undefined (-) where the model predicts every layout of a group the same. Across releases: the same groups "
    "over every release their runs span, which ranks what each release changed as well as the layouts."
)


def _rho(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.2f}"


def _pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.1%}"


def stack_cells(table: list[Any]) -> list[tuple[str, ...]]:
    return [
        (
            s.stack,
            s.kind,
            str(s.groups),
            str(s.layouts),
            _rho(s.median_spearman),
            _rho(s.min_spearman),
            _pct(s.median_regret),
            _pct(s.max_regret),
        )
        for s in table
    ]


def show_stack_table(markdown: bool) -> None:
    """The per-stack ranking table (also printed by `validate public`)."""
    from shardwise.analyses import ranking
    from shardwise.cli.render import console, print_table

    table = ranking.stack_table(list(ranking.public_groups()))
    title = "ranking within groups of published layouts (one software release each)"
    print_table(STACK_HEAD, stack_cells(table), title, set(range(2, 8)), markdown)
    across = ranking.stack_table(list(ranking.public_groups(by_release=False)))
    title = "the same groups across software releases (layouts and software drift)"
    print_table(STACK_HEAD, stack_cells(across), title, set(range(2, 8)), markdown)
    note = NOTE.format(n=ranking.MIN_LAYOUTS)
    if markdown:
        click.echo(f"\n{note}\n")
    else:
        console().print(note)


def json_payload() -> dict[str, Any]:
    from shardwise.analyses import ranking

    groups, across = list(ranking.public_groups()), list(ranking.public_groups(by_release=False))
    return {
        "min_layouts": ranking.MIN_LAYOUTS,
        "stacks": [asdict(s) for s in ranking.stack_table(groups)],
        "groups": [asdict(g) for g in groups],
        "stacks_across_releases": [asdict(s) for s in ranking.stack_table(across)],
        "groups_across_releases": [asdict(g) for g in across],
    }


def show_ranking(as_json: bool, markdown: bool) -> None:
    if as_json:
        from shardwise import export

        click.echo(export.dumps(json_payload()))
        return
    from shardwise.analyses import ranking
    from shardwise.analyses.loso import STACK_NAMES
    from shardwise.cli.render import print_table

    show_stack_table(markdown)
    cells = [
        (
            ranking.group_label(g.group),
            STACK_NAMES.get(g.stack, g.stack),
            g.kind,
            str(g.layouts),
            g.release or "-",
            _rho(g.spearman),
            _pct(g.regret),
            g.predicted_best,
            g.measured_best,
        )
        for g in ranking.public_groups()
    ]
    click.echo("")
    print_table(GROUP_HEAD, cells, "each group", {3, 4, 5, 6}, markdown)
