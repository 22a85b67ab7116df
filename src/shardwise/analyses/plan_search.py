"""The planner's answer (`PlanSearch`): every evaluated plan as flat arrays, which fit in memory,
the estimate of those that fit, their ranking (step time, or tokens/s per GPU with near-ties
broken by step time), each plan as a `Plan`, a scenario or a row, and the array-valued scenario
of many plans (`columns_scenario`) that the search prices (`analyses.planner`).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np

from shardwise.analyses.plan_space import expert_tp
from shardwise.analyses.search_space import RECOMPUTE_NAMES, SCHEDULE_NAMES, SearchSpace, for_candidates
from shardwise.engines.result import TrainingEstimate
from shardwise.engines.training import estimate_training_step
from shardwise.specs import Cluster, Model, Plan, Recompute, Scenario

TIE_TOLERANCE = 0.005  # throughput per GPU: rates this close count as a tie, broken by step time


def objective_text(objective: str) -> str:
    """What `plan` ranks by, with the tie rule of throughput per GPU (`PlanSearch.ranked`)."""
    if objective == "time":
        return "step time"
    return f"tokens/s per GPU (rates within {TIE_TOLERANCE:.1%} of the best are a tie, ranked by step time)"


@dataclass(frozen=True)
class PlanSearch:
    """Every evaluated plan (flat arrays, one entry per plan) and how the search went. Only the
    plans that fit in memory are priced during the search (`fitting`); `estimate`, every plan's,
    is priced when first read (a CSV of every plan reads it, the ranking does not)."""

    model: Model
    cluster: Cluster
    global_batch: int
    space: SearchSpace
    columns: dict[str, np.ndarray]  # COLUMNS, one value per plan
    fits: np.ndarray  # within memory with the headroom (`fits_with_headroom`; `fits_in_memory` is the GPU's)
    fitting: TrainingEstimate | None  # the plans that fit, in order (None: none does)
    seconds: float  # wall time of the search
    simulated: np.ndarray | None = None  # the step time is the simulator's (see CONFIRM_TOP)

    @property
    def evaluated(self) -> int:
        return int(self.fits.size)

    @property
    def dropped_for_memory(self) -> int:
        return int(np.sum(~self.fits))

    def fit_without_headroom(self) -> int:
        """How many plans fit in the GPU's whole memory (`fits_in_memory`, predict's test), the
        headroom left out: every plan's memory priced (`training_memory`), so read it where none
        fits with the headroom, to say so (`requests.plan_result.nothing_fits`)."""
        if self.space.memory_headroom_bytes <= 0:
            return int(np.sum(self.fits))
        from shardwise.engines.training import training_memory

        scn = columns_scenario(self.model, self.cluster, self.global_batch, self.space, self.columns)
        total = np.broadcast_to(np.asarray(training_memory(scn).total_bytes, dtype=float), self.fits.shape)
        return int(np.sum(total <= float(self.cluster.gpu.memory_bytes)))

    @functools.cached_property
    def _fit_index(self) -> np.ndarray:
        return np.flatnonzero(self.fits)

    def _fit_values(self, values: object) -> np.ndarray:
        """An array of the fitting estimate, one value per fitting plan."""
        return np.broadcast_to(np.asarray(values, dtype=float), self._fit_index.shape)

    @functools.cached_property
    def estimate(self) -> TrainingEstimate:
        """Every plan's estimate (aligned with columns), the simulator's step time where it
        confirmed a plan: the closed form priced for all of them on first read."""
        full = estimate_training_step(
            columns_scenario(self.model, self.cluster, self.global_batch, self.space, self.columns)
        )
        if self.fitting is None or self.simulated is None or not self.simulated.any():
            return full
        n = self.fits.size
        at = self.simulated[self._fit_index]
        where = self._fit_index[at]

        def overlay(whole: object, part: object) -> np.ndarray:
            out = np.array(np.broadcast_to(np.asarray(whole, dtype=float), (n,)))
            out[where] = self._fit_values(part)[at]
            return out

        parts = {
            f.name: overlay(getattr(full.breakdown, f.name), getattr(self.fitting.breakdown, f.name))
            for f in dataclasses.fields(full.breakdown)
        }
        return dataclasses.replace(
            full,
            step_time_s=overlay(full.step_time_s, self.fitting.step_time_s),
            breakdown=dataclasses.replace(full.breakdown, **parts),
            bubble_fraction=overlay(full.bubble_fraction, self.fitting.bubble_fraction),
        )

    @property
    def score(self) -> np.ndarray:
        """Higher is better: -step time, or tokens/s per GPU; plans that do not fit score -inf."""
        out = np.full(self.fits.shape, -np.inf)
        est = self.fitting
        if est is None:
            return out
        if self.space.objective == "time":
            out[self._fit_index] = -self._fit_values(est.step_time_s)
        else:
            out[self._fit_index] = self._fit_values(est.tokens_per_s) / self.columns["gpus"][self._fit_index]
        return out

    def ranked(self, top: int | None = None) -> np.ndarray:
        """Indices of the plans that fit, best first. For throughput per GPU, plans within
        TIE_TOLERANCE of the best rate come first, fastest step first (a 0.0001% better rate is
        no reason to take four times as long)."""
        score = self.score
        ok = np.flatnonzero(np.isfinite(score))
        order = ok[np.argsort(-score[ok], kind="stable")]
        if self.space.objective != "time" and order.size and self.fitting is not None:
            near = score[order] >= score[order[0]] * (1 - TIE_TOLERANCE)
            step = np.full(self.fits.shape, np.inf)
            step[self._fit_index] = self._fit_values(self.fitting.step_time_s)
            tied = order[near][np.argsort(step[order[near]], kind="stable")]
            order = np.concatenate([tied, order[~near]])
        return order if top is None else order[:top]

    def plan(self, i: int) -> Plan:
        c = {k: v[i].item() for k, v in self.columns.items()}
        execution = searched_out(for_candidates(self.space.execution, self.space.execution_sp, c["sequence_parallel"]))
        if c["recompute"] != Recompute.SELECTIVE:  # Megatron-Core's modules are selective recomputation's
            execution.pop("recompute_modules", None)
        return Plan(
            tp=c["tp"],
            pp=c["pp"],
            dp=c["dp"],
            global_batch=self.global_batch,
            micro_batch=c["micro_batch"],
            vpp=c["vpp"],
            schedule=c["schedule"],
            recompute=c["recompute"],
            sequence_parallel=bool(c["sequence_parallel"]),
            zero_stage=c["zero_stage"],
            first_stage_layers=c["first_stage_layers"],
            last_stage_layers=c["last_stage_layers"],
            ep=c["ep"],
            cp=c["cp"],
            recompute_layers=c["recompute_layers"],
            shard_group=c["shard_group"],
            etp=expert_tp(self.model),
            precision=self.space.precision,
            **execution,
        )

    def scenario(self, i: int) -> Scenario:
        gpus = int(self.columns["gpus"][i])
        return Scenario(self.model, cluster_for(self.cluster, gpus), self.plan(i))

    def row(self, i: int) -> dict[str, object]:
        """One plan as plain values (for tables, JSON and CSV)."""
        if self.fits[i] and self.fitting is not None:
            est, j, n = self.fitting, int(np.searchsorted(self._fit_index, i)), self._fit_index.size
        else:  # a plan that does not fit was not priced: price it alone
            est, j, n = estimate_training_step(self.scenario(i)), 0, 1

        def at(values: object) -> float:
            return float(np.broadcast_to(np.asarray(values, dtype=float), (n,))[j])

        out: dict[str, object] = {k: v[i].item() for k, v in self.columns.items()}
        out["schedule"] = SCHEDULE_NAMES[int(out["schedule"])]
        out["recompute"] = RECOMPUTE_NAMES[int(out["recompute"])]
        out["sequence_parallel"] = bool(out["sequence_parallel"])
        from shardwise.specs.stages import describe_split

        # null where every stage has the same layers, as predict's (review 40 #12: '')
        out["stage_layers"] = (
            describe_split(
                self.model.layers, int(out["pp"]), int(out["first_stage_layers"]), int(out["last_stage_layers"])
            )
            or None
        )
        out.update(
            step_time_s=at(est.step_time_s),
            tokens_per_s=at(est.tokens_per_s),
            tokens_per_s_per_gpu=at(est.tokens_per_s) / int(self.columns["gpus"][i]),
            mfu=at(est.mfu),
            # a dict of parts with its `total`, as `predict --json` and `serve --json` write it
            memory_bytes={k: at(v) for k, v in {**est.memory.as_dict(), "cached": est.memory.cached_bytes}.items()},
            # predict's: the GPU's capacity; the search's filter keeps the headroom free too
            fits_in_memory=at(est.memory.total_bytes) <= float(self.cluster.gpu.memory_bytes),
            fits_with_headroom=bool(self.fits[i]),
            # the step time is the discrete-event simulator's (`analyses.plan_confirm`), not the closed form's
            simulated=self.simulated is not None and bool(self.simulated[i]),
            breakdown_s=self._row_parts(i, {k: at(v) for k, v in est.breakdown.as_dict().items()}),
        )
        return out

    def by_tp_pp(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(tp values, pp values, best tokens/s per GPU of each (tp, pp) pair among the plans that
        fit -- nan where none does --, and whether the pair had any valid plan at all)."""
        tps, ti = np.unique(self.columns["tp"], return_inverse=True)
        pps, pi = np.unique(self.columns["pp"], return_inverse=True)
        best = np.full((tps.size, pps.size), -np.inf)
        if self.fitting is not None:
            fit = self._fit_index
            rate = self._fit_values(self.fitting.tokens_per_s) / self.columns["gpus"][fit]
            np.maximum.at(best, (ti[fit], pi[fit]), rate)
        seen = np.zeros((tps.size, pps.size), dtype=bool)
        seen[ti, pi] = True
        return tps, pps, np.where(np.isfinite(best), best, np.nan), seen

    def table_columns(self) -> dict[str, np.ndarray]:
        """Every evaluated plan as columns (for --csv)."""
        est = self.estimate
        cols: dict[str, np.ndarray] = dict(self.columns)
        cols["schedule"] = np.array([SCHEDULE_NAMES[int(v)] for v in range(4)], dtype=object)[self.columns["schedule"]]
        cols["recompute"] = np.array([RECOMPUTE_NAMES[int(v)] for v in range(3)], dtype=object)[
            self.columns["recompute"]
        ]
        cols["sequence_parallel"] = self.columns["sequence_parallel"].astype(bool)
        cols["step_time_s"] = np.asarray(est.step_time_s, dtype=float)
        cols["tokens_per_s"] = np.asarray(est.tokens_per_s, dtype=float)
        cols["tokens_per_s_per_gpu"] = cols["tokens_per_s"] / self.columns["gpus"]
        cols["mfu"] = np.asarray(est.mfu, dtype=float)
        cols["memory_bytes"] = np.asarray(est.memory.total_bytes, dtype=float)
        cols["fits_in_memory"] = cols["memory_bytes"] <= float(self.cluster.gpu.memory_bytes)  # as predict's
        cols["fits_with_headroom"] = self.fits  # the search's filter: the headroom kept free too
        cols["simulated"] = np.zeros(self.fits.shape, dtype=bool) if self.simulated is None else self.simulated
        for k, v in self._parts().items():
            cols[f"{k}_s"] = np.broadcast_to(np.asarray(v, dtype=float), self.fits.shape)
        return cols

    def _row_parts(self, i: int, parts: dict[str, float]) -> dict[str, float]:
        """One plan's terms, split as `_parts`."""
        from shardwise.engines.result import embedding_apart

        if self.model.is_moe:
            return parts
        one = int(self.columns["dp"][i]) * int(self.columns["cp"][i]) == 1
        return {k: float(v) for k, v in embedding_apart(parts, one).items()}

    def _parts(self) -> dict[str, np.ndarray]:
        """Each plan's time per term; a dense model's tied-embedding sync under `embedding_sync`
        where the plan runs one replica, as predict's JSON (`engines.result.embedding_apart`)."""
        from shardwise.engines.result import embedding_apart

        parts = {
            k: np.broadcast_to(np.asarray(v, dtype=float), self.fits.shape)
            for k, v in self.estimate.breakdown.as_dict().items()
        }
        if self.model.is_moe:
            return parts
        return embedding_apart(parts, self.columns["dp"] * self.columns["cp"] == 1)


def cluster_for(cluster: Cluster, gpus: np.ndarray | int) -> Cluster:
    """The same machines cut to `gpus` GPUs: whole servers, or part of one."""
    g = np.asarray(gpus)
    per_node = np.minimum(cluster.gpus_per_node, g)
    return cluster.with_(gpus_per_node=per_node, nodes=g // per_node)


def columns_scenario(
    model: Model, cluster: Cluster, global_batch: int, space: SearchSpace, cols: dict[str, np.ndarray]
) -> Scenario:
    """The array-valued scenario of the plans in `cols` (COLUMNS)."""
    plan = Plan(
        tp=cols["tp"],
        pp=cols["pp"],
        dp=cols["dp"],
        global_batch=global_batch,
        micro_batch=cols["micro_batch"],
        vpp=cols["vpp"],
        schedule=cols["schedule"],
        recompute=cols["recompute"],
        sequence_parallel=cols["sequence_parallel"].astype(bool),
        zero_stage=cols["zero_stage"],
        first_stage_layers=cols["first_stage_layers"],
        last_stage_layers=cols["last_stage_layers"],
        ep=cols["ep"],
        cp=cols["cp"],
        recompute_layers=cols["recompute_layers"],
        shard_group=cols["shard_group"],
        etp=expert_tp(model),
        precision=space.precision,
        **searched_out(for_candidates(space.execution, space.execution_sp, cols["sequence_parallel"])),
    )
    return Scenario(model, cluster_for(cluster, cols["gpus"]), plan)


def searched_out(execution: dict[str, object]) -> dict[str, object]:
    """The execution flags without the fields each plan's columns carry."""
    return {k: v for k, v in execution.items() if k not in ("recompute_layers", "shard_group")}
