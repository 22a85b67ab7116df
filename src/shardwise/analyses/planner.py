"""The 3D-parallelism planner: every valid training layout of a model on a cluster, evaluated in
one vectorized call of the cost model, ranked.

The space (Narayanan et al. 2021 Sec. 3 gives the rules of thumb it generalises: TP inside a
server, PP across servers, DP on the rest): tp x pp x dp = the GPUs; tp divides the heads, the KV
heads and the MLP width, and (by default) the GPUs of a server; pp is at most the layers (when it
does not divide them, and the fullest stage is at most 10% above the mean, the split is searched:
as even as possible, and, where pp divides layers + 2, Megatron's split that counts the embedding
and the loss as a layer each); dp divides the global batch; the
micro-batch divides the batch per replica; virtual stages (interleaved schedule only, with the
micro-batch count a multiple of pp) divide the layers of every full stage, so each model chunk
holds whole layers; recompute
none / selective / full (selective only without fused attention: with it, selective keeps what
none keeps and reruns the attention forward);
sequence parallelism when tp > 1 (always, for a mixture of experts); context parallelism from
8K-token sequences on (or as fixed); expert parallelism for a
mixture of experts (ep dividing the experts and the tp x dp ranks, experts kept whole: etp = 1);
ZeRO 0-3 when dp > 1; schedules GPipe, 1F1B, interleaved and
ZB-H1 when pp > 1. Ranks are placed as Megatron-LM does (tp-dp-pp: TP innermost, PP outermost),
so every collective is priced on the link it crosses.

The candidates are built as one vectorized join (`analyses.plan_space`), then evaluated
together.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np

from shardwise.analyses.plan_space import (
    COLUMNS,
    OBJECTIVES,
    RECOMPUTE_NAMES,
    SCHEDULE_NAMES,
    SearchSpace,
    candidates,
    candidates_by_layout,
    expert_tp,
)
from shardwise.engines.result import TrainingEstimate
from shardwise.engines.training import estimate_training_step, training_memory, training_memory_floor_bytes
from shardwise.errors import SpecError
from shardwise.specs import Cluster, Model, Plan, Recompute, Scenario
from shardwise.specs.memo import Memo

__all__ = ["COLUMNS", "OBJECTIVES", "PlanSearch", "SearchSpace", "candidates", "cluster_for", "search"]

TIE_TOLERANCE = 0.005  # throughput per GPU: rates this close count as a tie, broken by step time
# The closed form searches, the discrete-event simulator confirms: the best CONFIRM_TOP plans (by
# the closed form) with a pipeline are re-timed operation by operation and re-ranked. The simulator
# prices what the closed form averages away: an interleaved schedule's sends hide behind compute
# in the steady state, but a micro-batch's v x p chunk hops are all on the fill and drain path, so
# over a slow link the closed form is optimistic (10% for Llama 3 8B, pp=2 v=8 over one 100 GbE
# link per server). Plans with more than CONFIRM_MAX_SLOTS (p x m x v) keep the closed form, which
# bounds the cost (about 7 ms per plan at 1,000 slots, 0.4 s at 65,000).
CONFIRM_TOP = 16
CONFIRM_ROUNDS = 4  # re-time the next CONFIRM_TOP while the best plan is an unchecked one
CONFIRM_MAX_SLOTS = 20_000
# then the best plan alone, re-timed until it is a checked one (at most this many more)
CONFIRM_SINGLES = 256


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
    fits: np.ndarray  # within memory (with the headroom)
    fitting: TrainingEstimate | None  # the plans that fit, in order (None: none does)
    seconds: float  # wall time of the search
    simulated: np.ndarray | None = None  # the step time is the simulator's (see CONFIRM_TOP)

    @property
    def evaluated(self) -> int:
        return int(self.fits.size)

    @property
    def dropped_for_memory(self) -> int:
        return int(np.sum(~self.fits))

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
        full = estimate_training_step(_scenario(self.model, self.cluster, self.global_batch, self.space, self.columns))
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
        execution = dict(self.space.execution)
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

        out["stage_layers"] = describe_split(
            self.model.layers, int(out["pp"]), int(out["first_stage_layers"]), int(out["last_stage_layers"])
        )
        out.update(
            step_time_s=at(est.step_time_s),
            tokens_per_s=at(est.tokens_per_s),
            tokens_per_s_per_gpu=at(est.tokens_per_s) / int(self.columns["gpus"][i]),
            mfu=at(est.mfu),
            memory_bytes=at(est.memory.total_bytes),
            memory_breakdown_bytes={k: at(v) for k, v in est.memory.as_dict().items()},
            fits_in_memory=bool(self.fits[i]),
            breakdown_s={k: at(v) for k, v in est.breakdown.as_dict().items()},
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
        cols["fits_in_memory"] = self.fits
        for k, v in est.breakdown.as_dict().items():
            cols[f"{k}_s"] = np.broadcast_to(np.asarray(v, dtype=float), self.fits.shape)
        return cols


def cluster_for(cluster: Cluster, gpus: np.ndarray | int) -> Cluster:
    """The same machines cut to `gpus` GPUs: whole servers, or part of one."""
    g = np.asarray(gpus)
    per_node = np.minimum(cluster.gpus_per_node, g)
    return cluster.with_(gpus_per_node=per_node, nodes=g // per_node)


def _scenario(
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
        etp=expert_tp(model),
        precision=space.precision,
        **space.execution,
    )
    return Scenario(model, cluster_for(cluster, cols["gpus"]), plan)


# Plans whose model state alone exceeds the GPU by more than this share are dropped without
# pricing their activations (the floor is exact; the share only keeps rounding out of it).
FLOOR_MARGIN = 1e-9


def _fits(
    model: Model,
    cluster: Cluster,
    global_batch: int,
    space: SearchSpace,
    cols: dict[str, np.ndarray],
    layout: np.ndarray,
    capacity: float,
) -> np.ndarray:
    """Which plans fit in `capacity` bytes per GPU. The model state of a plan depends on its
    layout, ZeRO stage and stage split alone, so its floor (`training_memory_floor_bytes`) is
    priced once per such group; only plans above it get their whole memory priced (the others
    cannot fit, whatever their activations)."""
    from shardwise.engines.distinct import group_rows

    splits = 2  # the automatic split, or Megatron's with the embedding and the loss as layers
    key = (layout * 4 + cols["zero_stage"]) * splits + (cols["first_stage_layers"] > 0)
    rows, group = group_rows(key, (int(layout.max()) + 1) * 4 * splits)
    floor = training_memory_floor_bytes(
        _scenario(model, cluster, global_batch, space, {k: v[rows] for k, v in cols.items()})
    )
    maybe = np.flatnonzero((np.broadcast_to(floor, rows.shape) <= capacity * (1 + FLOOR_MARGIN))[group])
    fits = np.zeros(layout.size, dtype=bool)
    if maybe.size:
        memory = training_memory(_scenario(model, cluster, global_batch, space, {k: v[maybe] for k, v in cols.items()}))
        fits[maybe] = np.broadcast_to(np.asarray(memory.total_bytes), maybe.shape) <= capacity
    return fits


def search(model: Model, cluster: Cluster, global_batch: int, space: SearchSpace | None = None) -> PlanSearch:
    """Evaluate every plan of `space` for `global_batch` sequences per step; see the module
    docstring. Memory is priced for every plan first and time only for the plans that fit (the
    model prices each plan on its own, so this drops nothing the ranking could show)."""
    import time

    from shardwise.specs._checks import positive_int

    positive_int("global_batch", global_batch)  # before its divisors are listed
    space = space or SearchSpace()
    start = time.perf_counter()
    cols, layout = candidates_by_layout(model, cluster, global_batch, space)
    if not cols:
        raise SpecError(_why_empty(model, cluster, global_batch, space))
    capacity = float(cluster.gpu.memory_bytes) - space.memory_headroom_bytes
    fits = _fits(model, cluster, global_batch, space, cols, layout, capacity)
    fit = np.flatnonzero(fits)
    fitting = None
    if fit.size:
        fitting = estimate_training_step(
            _scenario(model, cluster, global_batch, space, {k: v[fit] for k, v in cols.items()})
        )
    result = PlanSearch(model, cluster, global_batch, space, cols, fits, fitting, 0.0)
    checked = np.zeros(fits.size, dtype=bool)  # re-timed (or not simulable: the closed form stands)
    simulated = np.zeros(fits.size, dtype=bool)
    for _ in range(CONFIRM_ROUNDS):  # until the best plan is one that was checked
        todo = np.array([i for i in result.ranked(CONFIRM_TOP).tolist() if not checked[i]], dtype=np.int64)
        if todo.size == 0:
            break
        fitting, newly = _confirm(result, todo)
        checked[todo] = True
        simulated |= newly
        result = PlanSearch(model, cluster, global_batch, space, cols, fits, fitting, 0.0, simulated.copy())
        best = result.ranked(1)
        if best.size == 0 or checked[best[0]]:
            break
    # still an unchecked best (a slow network makes many interleaved plans optimistic in the
    # closed form): re-time the best alone until the best is one the simulator has timed
    for _ in range(CONFIRM_SINGLES):
        best = result.ranked(1)
        if best.size == 0 or checked[best[0]]:
            break
        fitting, newly = _confirm(result, best[:1])
        checked[best[0]] = True
        simulated |= newly
        result = PlanSearch(model, cluster, global_batch, space, cols, fits, fitting, 0.0, simulated.copy())
    return dataclasses.replace(result, seconds=time.perf_counter() - start)


def simulable(plan: Plan) -> bool:
    """Whether the planner confirms this plan with the simulator (see CONFIRM_TOP)."""
    slots = int(plan.pp) * int(plan.num_micro_batches) * int(plan.vpp)
    # the simulator runs one schedule per step: separate flushes stay with the closed form
    return int(plan.pp) > 1 and slots <= CONFIRM_MAX_SLOTS and int(plan.pipeline_flushes) == 1


def confirmed_estimate(scn: Scenario) -> TrainingEstimate:
    """One plan's estimate as the planner reports it: the simulator's where `simulable`, the
    closed form otherwise. A simulated estimate is kept per scenario (`CONFIRMED`): a request
    re-times its best plans in the search and again among the alternatives it explains."""
    if not simulable(scn.plan):
        return estimate_training_step(scn)
    from shardwise.engines.simulated import simulate_training_step

    est = CONFIRMED.get_or_compute(scn, lambda: simulate_training_step(scn, records=False).estimate)
    return est if est.scenario is scn else dataclasses.replace(est, scenario=scn)


CONFIRMED = Memo("planner.confirmed_estimate", size=256)


def _confirm(search: PlanSearch, indices: np.ndarray) -> tuple[TrainingEstimate | None, np.ndarray]:
    """The search's estimate of the plans that fit with the step time and breakdown of `indices`
    (plans that fit) from the simulator, and which of them it re-timed."""
    from dataclasses import replace

    est = search.fitting
    simulated = np.zeros(search.fits.size, dtype=bool)
    if est is None:
        return est, simulated
    fit = np.flatnonzero(search.fits)
    n = fit.size
    step = np.array(np.broadcast_to(np.asarray(est.step_time_s, dtype=float), (n,)))
    # the fields by name, not vars(): a breakdown gathered lazily (`engines.distinct`) holds only what was read
    fields = [f.name for f in dataclasses.fields(est.breakdown)]
    parts = {k: np.array(np.broadcast_to(np.asarray(getattr(est.breakdown, k), dtype=float), (n,))) for k in fields}
    for i in indices.tolist():
        scn = search.scenario(i)
        if not simulable(scn.plan):
            continue
        sim = confirmed_estimate(scn)
        simulated[i] = True
        j = int(np.searchsorted(fit, i))
        step[j] = float(np.asarray(sim.step_time_s))
        for k in parts:
            parts[k][j] = float(np.asarray(getattr(sim.breakdown, k)))
    if not simulated.any():
        return est, simulated
    breakdown = replace(est.breakdown, **parts)
    return replace(est, step_time_s=step, breakdown=breakdown, bubble_fraction=parts["pp_bubble_s"] / step), simulated


def _why_empty(model: Model, cluster: Cluster, global_batch: int, space: SearchSpace) -> str:
    n, g = int(cluster.num_gpus), int(cluster.gpus_per_node)
    hints = [
        f"the batch must be divisible by dp, tp must divide the heads ({model.heads}) and pp be at most "
        f"the layers ({model.layers})"
    ]
    if space.tp is not None and space.tp_within_node and any(t > g for t in space.tp):
        hints.append(f"tp > {g} needs --tp-across-nodes")
    if space.micro_batch is not None:
        hints.append("the micro-batch must divide the batch per replica")
    if any(getattr(space, k) is not None for k in ("tp", "pp", "dp", "vpp", "schedule", "zero_stage")):
        hints.append("and the fixed values given must allow a layout")
    return f"plan: no valid layout of {model.name} on {n} GPUs with global batch {global_batch}: " + "; ".join(hints)
