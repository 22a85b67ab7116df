"""What `PlanRequest.run` answers: the search, the best rows with their 80% intervals and
`predict` commands, why the best wins, and its JSON."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from shardwise.errors import SpecError


def nothing_fits(search: Any, levers: list[str]) -> str:
    """plan's line where no plan fits: the capacity the search filtered on (the GPU's less the
    headroom, `--memory-headroom`), and how many plans fit the GPU's whole memory, as the
    `fits_in_memory` column of `plan -o` says (review 34: '...fits in 79.11 GiB' while 9 rows had
    fits_in_memory true)."""
    from shardwise.units import format_capacity, format_gib

    gpu_bytes, headroom = float(search.cluster.gpu.memory_bytes), float(search.space.memory_headroom_bytes)
    where = f"{format_capacity(gpu_bytes)} per GPU"
    if headroom > 0:
        where = f"{format_gib(gpu_bytes - headroom)} per GPU, the {format_capacity(gpu_bytes)}"
        where += f" less the --memory-headroom of {format_gib(headroom)}"
        n = search.fit_without_headroom()
        if n:
            where += f"; {n:,} fit{'s' if n == 1 else ''} without the headroom (fits_in_memory true)"
    return f"plan: none of the {search.evaluated:,} plans fits in {where}; try {', '.join(levers)}"


class NothingFits(SpecError):
    """No plan of the search fits in memory: the message says what to try; `outcome` is the search
    without rows, for `plan -o`, which writes every evaluated plan, fitting or not."""

    def __init__(self, message: str, outcome: PlanResult) -> None:
        super().__init__(message)
        self.outcome = outcome


@dataclass(frozen=True)
class PlanResult:
    """The search (every plan), the best rows with their 80% intervals and `predict` commands,
    why the best wins (its neighbours), the launch command asked for, what was assumed."""

    request: Any  # requests.plan.PlanRequest
    search: Any  # analyses.plan_search.PlanSearch
    rows: list[dict[str, Any]]
    why: list[Any]
    launch: dict[str, Any] | None
    interval_basis: str
    notes: tuple[str, ...]
    calibration: Any = None  # calibration.store.Calibration the plans were priced with
    regret: Any = None  # calibration.regret.Regret of the pick, with a calibration
    spread: Any = None  # calibration.intervals.Spread of the best rows (their ranges, their ratios')

    def regret_text(self) -> str | None:
        """The line `plan --calibration` prints under its table (None without a calibration)."""
        if self.regret is None:
            return None
        from shardwise.calibration.regret import describe, label

        return describe(self.regret, lambda i: label(self.search, i))

    def as_dict(self) -> dict[str, Any]:
        """The JSON `plan --json` prints."""
        from dataclasses import asdict

        from shardwise import export
        from shardwise.analyses.plan_explain import describe

        result = self.search
        return {
            "model": export.model_dict(result.model),
            "cluster": export.cluster_dict(result.cluster),
            "global_batch": result.global_batch,
            "objective": result.space.objective,
            **self.stack_fields(),  # the framework searched under, and whether the recompute was searched
            "evaluated": result.evaluated,
            "dropped_for_memory": result.dropped_for_memory,
            "search_time_s": result.seconds,  # the search's wall time (review 47 #11: was `seconds`)
            "plans": [{**r, "memory_bytes": export.whole_bytes_parts(r["memory_bytes"])} for r in self.rows],
            "interval": {"level": 0.8, "basis": self.interval_basis},
            "why": [{**asdict(a), "text": describe(a)} for a in self.why],
            "within_headroom": self._within_headroom(),
            "launch": self.launch,
            "notes": list(self.notes),  # what was assumed (the command line prints them on stderr)
            "command": self.request.command(),
            "regret": None
            if self.regret is None
            else {
                "expected": self.regret.expected,
                "chance_another_is_faster": self.regret.chance,
                "size_when_beaten": self.regret.size_when_beaten,
                "rival": None if self.regret.rival is None else self._label(self.regret.rival),
                "rival_chance": self.regret.rival_chance,
                "samples": self.regret.samples,
                "contending_plans": self.regret.pool_size,
                "text": self.regret_text(),
            },
        }

    def stack_fields(self) -> dict[str, Any]:
        """The framework the plans were searched under (`--framework`, or the --emit tool's stack) and
        where each row's `recompute` came from: "--recompute" where given (one mode or a list),
        "searched" where every mode was (the stack's default is one of them)."""
        from shardwise import presets

        stack = self.request.training.framework or "megatron-core"
        given = self.request.recompute is not None
        return {
            "framework": str(presets.framework(stack)["framework"]),
            "recompute_source": "--recompute" if given else "searched",
        }

    def _within_headroom(self, top: int = 10) -> dict[str, Any]:
        """The plans dropped only for the memory headroom (`analyses.plan_headroom`): how many, and the
        fastest `top` with their closed-form step time and memory, and which are faster than the best plan
        (`faster_than_best`, `faster_count`: the ones the text lists; review 42 F9)."""
        from shardwise.analyses.plan_headroom import within_headroom
        from shardwise.units import whole_bytes

        held = within_headroom(self.search)
        best = float(self.rows[0]["step_time_s"]) if self.rows else float("-inf")
        rows = [
            {
                "plan": self._label(int(i)),
                "step_time_s": float(t),
                "memory_bytes": whole_bytes(float(m)),  # whole bytes, as every other memory_bytes
                "faster_than_best": bool(t < best),
            }
            for i, t, m in zip(held.indices[:top], held.step_time_s[:top], held.memory_bytes[:top], strict=True)
        ]
        faster = int(sum(float(t) < best for t in held.step_time_s))
        return {"count": int(held.indices.size), "faster_count": faster, "fastest": rows}

    def table_columns(self) -> dict[str, Any]:
        """Every evaluated plan as `plan -o` writes it: the search's columns with the expert-TP degree
        (`etp`, after `ep`) and each plan's 80% interval (`step_time_s_low/high`, after `step_time_s`),
        as the JSON's rows have them. Uncalibrated, every plan's spread is the same (it depends on the
        GPU, the stack and the model family, which the search fixes: `intervals.spread`); with a
        calibration each plan's own (its gradient under the fit)."""
        import numpy as np

        from shardwise.analyses.plan_space import expert_tp
        from shardwise.requests import build

        search = self.search
        cols = search.table_columns()
        n = int(np.asarray(cols["tp"]).size)
        fitted = self.calibration is not None and self.calibration.fit is not None and self.calibration.fit.fitted
        which = range(n) if fitted else range(min(n, 1))
        spread = build.spread([search.scenario(i) for i in which], self.calibration)
        lo, hi = (np.broadcast_to(b, (n,)) for b in spread.bounds(1.0))  # the factors on each time
        etp = expert_tp(search.model)  # as each plan's `predict` command (`plan.row_request`)
        out: dict[str, Any] = {}
        for key, values in cols.items():
            out[key] = values
            if key == "ep":  # experts split over etp ranks, as the JSON rows' etp (dense: none, an empty cell)
                out["etp"] = np.full(n, int(etp)) if etp else np.full(n, np.nan)
            elif key == "memory_bytes":  # whole bytes, the JSON rows' total (units.whole_bytes)
                out[key] = np.rint(np.asarray(values, dtype=float)).astype(np.int64)
            elif key == "step_time_s":
                t = np.asarray(values, dtype=float)
                out["step_time_s_low"], out["step_time_s_high"] = t * lo, t * hi
        out["framework"] = np.full(n, self.stack_fields()["framework"], dtype=object)  # the stack priced
        return out

    def _label(self, i: int) -> str:
        from shardwise.calibration.regret import label

        return label(self.search, i)


def with_intervals(result: Any, best: Any, spread: Any) -> list[dict[str, Any]]:
    """The best plans' rows with their 80% intervals, and whether each is a tie with the next: where
    their ratio lies inside its 80% band, `spread.ratio_log_sd` (uncalibrated `spreads.PAIR_LOG_SD`,
    how far the model misses the ratio of two layouts' times, a bias they share cancelling; with a
    calibration its own, as `analyses.bands.ratio_log_sd` for sensitivity), not where one lies inside
    the other's absolute range (which a bias both share widens)."""
    from itertools import pairwise

    from shardwise.calibration.spreads import Z80

    rows = []
    for j, i in enumerate(best):
        r = dict(result.row(int(i)))
        lo, hi = spread.bounds(r["step_time_s"])
        r["step_time_s_low"], r["step_time_s_high"] = float(lo[j]), float(hi[j])
        for rate in ("tokens_per_s", "tokens_per_s_per_gpu"):  # the cluster's too, as predict's (review 40 #14)
            r[f"{rate}_low"] = r[rate] * r["step_time_s"] / r["step_time_s_high"]
            r[f"{rate}_high"] = r[rate] * r["step_time_s"] / r["step_time_s_low"]
        rows.append(r)
    key = "step_time_s" if result.space.objective == "time" else "tokens_per_s_per_gpu"
    for j, (a, b) in enumerate(pairwise(rows)):
        a["tie_with_next"] = bool(abs(math.log(a[key] / b[key])) <= Z80 * spread.ratio_log_sd(j, j + 1))
    if rows:
        rows[-1]["tie_with_next"] = None
    return rows
