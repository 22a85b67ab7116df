"""Does the model rank layouts as they measure? Within-group ranking of the public training runs.

A group is every published layout of one model on one cluster, one GPU count and one sequence
length (the public CSV's `group`) run by one software stack (`loso.stack_of`): the choice a user
of `shardwise plan` makes. Layouts are compared by tokens/s per GPU (a group's layouts may differ
in global batch); the same layout published twice counts once, at its mean. Per group with at
least `MIN_LAYOUTS` layouts:

- Spearman's rho between measured and predicted tokens/s per GPU (average ranks for ties;
  undefined, and left out of the medians, when every measured or every predicted value ties);
- top-1 regret: how much slower, in measured time per token, the layout the model ranks first is
  than the fastest measured one, best / chosen - 1 in tokens/s (0: the model picks the best).
  Layouts the model predicts tied for first (to 9 significant digits) share the pick: the regret
  is their mean, what picking one of them at random costs;
- releases: how many software releases (the CSV's `framework_version`: a NeMo container, a commit)
  the group's runs were measured under. Megatron-Bridge's performance summaries publish one layout
  per model, GPU and precision in each container, so their groups compare layouts measured in
  different releases, whose speed differs beyond the layout: Qwen3-30B-A3B on 16 H100 at PP2 VP12
  EP8 ran 5,113 tokens/s per GPU in 26.02 and at PP2 VP24 EP8 5,275 in 25.11 but 10,494 in 25.09
  (token dropping, `public_moe.DISPATCHER_EXCEPTIONS`); on 8 B200 at EP8, micro-batch 1, 9,299 and
  9,691 in 25.11 and 26.02 against 18,066 in 25.09. A group over several releases ranks software as
  well as layouts. The headline groups are therefore one release each (`public_groups()`); the
  groups over every release are kept as a second view (`public_groups(by_release=False)`).

The predictions are the leave-one-source-out ones (`loso.by_source`: the per-GPU efficiency scales
fitted without the group's source) for dense full training, and the shipped model for
mixture-of-experts and LoRA rows (which `loso` does not fold; their GPUs' shipped scales were fitted
on dense dev rows, some from the same sources). Nothing here is fitted.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

import numpy as np

from shardwise.analyses.public_validation import spearman

MIN_LAYOUTS = 3
DENSE, MOE, LORA = "dense", "mixture of experts", "LoRA"


@dataclass(frozen=True)
class Measured:
    """One published run of a layout: measured and predicted tokens/s per GPU."""

    group: str
    stack: str
    kind: str  # DENSE, MOE or LORA
    layout: str  # the distinct-layout key (public_validation's)
    label: str  # the layout as printed
    measured_tokens_per_s: float
    predicted_tokens_per_s: float
    release: str = ""  # the software release it ran (the CSV's framework_version; "" unstated)


@dataclass(frozen=True)
class GroupRanking:
    """The ranking of one group's layouts."""

    group: str
    stack: str
    kind: str
    layouts: int
    spearman: float  # nan: undefined (every measured or predicted value ties)
    regret: float  # measured slowdown of the predicted best against the measured best
    predicted_best: str
    measured_best: str
    releases: int = 1  # distinct software releases among its runs (module docstring)
    release: str = ""  # the one release of a group ranked within a release ("" unstated, or several)


@dataclass(frozen=True)
class StackRanking:
    """Ranking over the groups of one stack (and kind of run)."""

    stack: str
    kind: str
    groups: int
    layouts: int
    median_spearman: float
    min_spearman: float
    spearman_groups: int  # groups where rho is defined
    median_regret: float
    max_regret: float


def top1_regret(measured: np.ndarray, predicted: np.ndarray) -> float:
    """best / chosen - 1 in measured throughput, where `chosen` is the predicted best (the mean
    regret over layouts predicted tied for first). Both arrays: throughput, higher is better."""
    measured, predicted = np.asarray(measured, float), np.asarray(predicted, float)
    if measured.shape != predicted.shape or measured.size == 0:
        raise ValueError(f"top1_regret needs two equal non-empty arrays, got {measured.shape} and {predicted.shape}")
    chosen = measured[_first(predicted)]
    return float(np.mean(measured.max() / chosen - 1.0))


def _first(predicted: np.ndarray) -> np.ndarray:
    """Indices of the layouts predicted fastest, ties to 9 significant digits (a mean of equal
    predictions must tie with one of them, not differ in the last place)."""
    rounded = np.array([float(f"{p:.9g}") for p in predicted])
    return np.flatnonzero(rounded == rounded.max())


def rank_groups(
    runs: Iterable[Measured], min_layouts: int = MIN_LAYOUTS, by_release: bool = False
) -> list[GroupRanking]:
    """The ranking of every group with at least `min_layouts` distinct layouts; with `by_release`,
    each software release's runs of a group form a group of their own (the layouts one release ran)."""
    by_group: dict[tuple[str, str, str, str], dict[str, list[Measured]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        by_group[(r.group, r.stack, r.kind, r.release if by_release else "")][r.layout].append(r)
    out = []
    for (group, stack, kind, release), layouts in by_group.items():
        if len(layouts) < min_layouts:
            continue
        names = list(layouts)
        meas = np.array([np.mean([r.measured_tokens_per_s for r in layouts[n]]) for n in names])
        pred = np.array([np.mean([r.predicted_tokens_per_s for r in layouts[n]]) for n in names])
        first = _first(pred)
        out.append(
            GroupRanking(
                group=group,
                stack=stack,
                kind=kind,
                layouts=len(names),
                spearman=spearman(meas, pred),
                regret=top1_regret(meas, pred),
                predicted_best=layouts[names[first[0]]][0].label if len(first) == 1 else f"{len(first)} tied",
                measured_best=layouts[names[int(np.argmax(meas))]][0].label,
                releases=len({r.release for n in names for r in layouts[n]}),
                release=release,
            )
        )
    return sorted(out, key=lambda g: (g.kind != DENSE, g.kind, g.stack, g.group, g.release))


def summarize(stack: str, kind: str, groups: list[GroupRanking]) -> StackRanking:
    rhos = np.array([g.spearman for g in groups if not np.isnan(g.spearman)])
    regrets = np.array([g.regret for g in groups])

    def stat(x: np.ndarray, f) -> float:
        return float(f(x)) if len(x) else float("nan")

    return StackRanking(
        stack=stack,
        kind=kind,
        groups=len(groups),
        layouts=sum(g.layouts for g in groups),
        median_spearman=stat(rhos, np.median),
        min_spearman=stat(rhos, np.min),
        spearman_groups=len(rhos),
        median_regret=stat(regrets, np.median),
        max_regret=stat(regrets, np.max),
    )


def stack_table(groups: list[GroupRanking]) -> list[StackRanking]:
    """One line per (kind, stack), then one per kind over all its stacks."""
    from shardwise.analyses.loso import STACK_NAMES

    keyed: dict[tuple[str, str], list[GroupRanking]] = defaultdict(list)
    for g in groups:
        keyed[(g.kind, g.stack)].append(g)
    out = [summarize(STACK_NAMES.get(stack, stack), kind, gs) for (kind, stack), gs in keyed.items()]
    for kind in dict.fromkeys(g.kind for g in groups):
        mine = [g for g in groups if g.kind == kind]
        if len({g.stack for g in mine}) > 1:
            out.append(summarize("all stacks", kind, mine))
    return out


@cache
def public_runs() -> tuple[Measured, ...]:
    """Every priced public run as tokens/s per GPU: dense full training at its leave-one-source-out
    prediction, mixture-of-experts and LoRA runs at the shipped model's."""
    from shardwise.analyses import loso
    from shardwise.analyses import public_validation as pv

    def tps(row: pv.PublicRow, step_s: float) -> float:
        return row.tokens_per_step / (step_s * row.num_gpus)

    def label(row: pv.PublicRow) -> str:
        text = row.label.split(", ", 2)[-1]  # without its model and GPUs (the group's)
        recompute = next((w[len("recompute") :] for w in row.layout.split() if w.startswith("recompute")), "")
        return f"{text}, recompute {recompute}" if recompute else text

    raws = {r["id"]: pv.public_moe.resolved(r) for r in pv.raw_rows()}
    out = [
        Measured(
            x.priced.row.group,
            x.priced.stack,
            DENSE,
            x.priced.row.layout,
            label(x.priced.row),
            tps(x.priced.row, x.priced.row.measured_step_s),
            tps(x.priced.row, x.predicted_step_s),
            raws[x.priced.row.run_id]["framework_version"],
        )
        for preds in loso.by_source().values()
        for x in preds
    ]
    for r in pv.validate_public():
        if r.skip or not (r.moe or r.lora):
            continue
        kind = MOE if r.moe else LORA
        stack = loso.stack_of(raws[r.run_id])
        release = raws[r.run_id]["framework_version"]
        measured, predicted = tps(r, r.measured_step_s), tps(r, r.predicted_step_s)
        out.append(Measured(r.group, stack, kind, r.layout, label(r), measured, predicted, release))
    return tuple(out)


@cache
def public_groups(by_release: bool = True) -> tuple[GroupRanking, ...]:
    """The public groups ranked within one software release each (the choice a user makes, on one
    software version), or, `by_release` False, over every release a group's runs span (software
    drift ranked with the layouts: module docstring)."""
    return tuple(rank_groups(public_runs(), by_release=by_release))


def group_label(group: str) -> str:
    """`source|model|system|GPUs|sequence` -> `model, system, GPUs GPUs, seq sequence`."""
    parts = group.split("|")
    if len(parts) < 5:
        return group
    model, system, gpus, seq = parts[-4:]
    return f"{model}, {system}, {gpus} GPUs, seq {seq}"
