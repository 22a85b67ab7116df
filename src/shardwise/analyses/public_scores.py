"""How well predictions of the public runs score: a row's error, and per table the MAPE, the bias
and the ranking of layouts within each group (Spearman's rho, the share of pairs ordered right),
for the model and the flat baseline alike (see `public_validation`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

# Relative difference below which two measured layouts count as tied for ranking.
RANK_TIE = 0.01


@dataclass(frozen=True)
class PublicRow:
    """One public run, predicted (or skipped with `skip`)."""

    run_id: str
    source: str  # the table it belongs to (repository / document)
    locator: str
    label: str
    group: str
    layout: str  # distinct-layout key inside the group
    split: str
    measured_step_s: float
    predicted_step_s: float  # nan when skipped
    baseline_step_s: float  # nan when skipped
    tokens_per_step: float
    num_gpus: int
    skip: str = ""
    moe: bool = False  # a mixture-of-experts run (reported apart from the dense ones)
    lora: bool = False  # a LoRA fine-tuning run (reported apart from the full training ones)

    @property
    def error(self) -> float:
        return (self.predicted_step_s - self.measured_step_s) / self.measured_step_s

    @property
    def baseline_error(self) -> float:
        return (self.baseline_step_s - self.measured_step_s) / self.measured_step_s


@dataclass(frozen=True)
class TableSummary:
    """Accuracy of the model and the flat baseline on one set of rows."""

    name: str
    rows: int
    skipped: int
    mape: float
    bias: float
    baseline_mape: float
    baseline_bias: float
    spearman: float  # mean over groups with >= 3 distinct layouts (nan: none)
    spearman_groups: int
    pairs_right: float  # share of layout pairs within a group ordered right (nan: none)
    pairs: int
    baseline_pairs_right: float


def _ranking(rows: list[PublicRow], which: str) -> tuple[float, int, float, int]:
    """(mean Spearman rho, groups, share of pairs ordered right, pairs) for `which` prediction."""
    by_group: dict[str, dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        pred = r.predicted_step_s if which == "model" else r.baseline_step_s
        # tokens/s per GPU, measured and predicted (the GPU count is the group's)
        by_group[r.group][r.layout].append((r.tokens_per_step / r.measured_step_s, r.tokens_per_step / pred))
    rhos, right, total = [], 0.0, 0
    for layouts in by_group.values():
        if len(layouts) < 2:
            continue
        meas = np.array([np.mean([m for m, _ in v]) for v in layouts.values()])
        # to 9 significant digits: a mean of 5 equal predictions and of 2 must tie, not differ by
        # one unit in the last place
        pred = np.array([float(f"{np.mean([p for _, p in v]):.9g}") for v in layouts.values()])
        for i in range(len(meas)):
            for j in range(i + 1, len(meas)):
                if abs(meas[i] - meas[j]) <= RANK_TIE * max(meas[i], meas[j]):
                    continue
                total += 1
                agree = (meas[i] - meas[j]) * (pred[i] - pred[j])
                # a predicted tie says nothing: half a pair, as in Harrell's concordance index
                right += 1.0 if agree > 0 else (0.5 if pred[i] == pred[j] else 0.0)
        if len(meas) >= 3:
            rho = spearman(meas, pred)
            if not np.isnan(rho):  # undefined when every measured (or predicted) value ties
                rhos.append(rho)
    mean_rho = float(np.mean(rhos)) if rhos else float("nan")
    return mean_rho, len(rhos), (right / total if total else float("nan")), total


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation (average ranks for ties)."""

    def ranks(x: np.ndarray) -> np.ndarray:
        order = np.argsort(x, kind="stable")
        r = np.empty(len(x))
        r[order] = np.arange(len(x), dtype=float)
        for v in np.unique(x):  # average ties
            idx = x == v
            r[idx] = r[idx].mean()
        return r

    ra, rb = ranks(np.asarray(a, float)), ranks(np.asarray(b, float))
    if np.std(ra) == 0 or np.std(rb) == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def summarize(name: str, rows: list[PublicRow]) -> TableSummary:
    done = [r for r in rows if not r.skip]
    err = np.array([r.error for r in done])
    berr = np.array([r.baseline_error for r in done])
    rho, n_rho, pairs_right, n_pairs = _ranking(done, "model")
    _, _, b_pairs_right, _ = _ranking(done, "baseline")

    def stat(x: np.ndarray, f) -> float:
        return float(f(x)) if len(x) else float("nan")

    return TableSummary(
        name=name,
        rows=len(done),
        skipped=len(rows) - len(done),
        mape=stat(np.abs(err), np.mean),
        bias=stat(err, np.mean),
        baseline_mape=stat(np.abs(berr), np.mean),
        baseline_bias=stat(berr, np.mean),
        spearman=rho,
        spearman_groups=n_rho,
        pairs_right=pairs_right,
        pairs=n_pairs,
        baseline_pairs_right=b_pairs_right,
    )
