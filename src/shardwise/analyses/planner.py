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
none / selective / full (selective only without fused attention, where it differs from none);
sequence parallelism when tp > 1 (always, for a mixture of experts); context parallelism from
8K-token sequences on (or as fixed); expert parallelism for a
mixture of experts (ep dividing the experts and the tp x dp ranks, experts kept whole: etp = 1);
ZeRO 0-3 when dp > 1; schedules GPipe, 1F1B, interleaved and
ZB-H1 when pp > 1. Ranks are placed as Megatron-LM does (tp-dp-pp: TP innermost, PP outermost),
so every collective is priced on the link it crosses.

Candidates are built per (GPU count, tp, pp) with numpy outer products (a few hundred small
blocks at most), then evaluated together.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field

import numpy as np

from shardwise.engines.result import TrainingEstimate
from shardwise.engines.training import estimate_training_step
from shardwise.errors import SpecError
from shardwise.specs import Cluster, Model, Plan, Recompute, Scenario, Schedule, rules

OBJECTIVES = ("time", "throughput-per-gpu")
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
# pp that does not divide the layers is searched when its fullest stage is at most this much above
# the mean (126 layers on 8 stages: 16 / 15.75 = 1.016; 128 layers on 100 stages, 2 / 1.28, is not)
MAX_STAGE_IMBALANCE = 1.10
COLUMNS = (
    "gpus",
    "tp",
    "pp",
    "dp",
    "vpp",
    "micro_batch",
    "schedule",
    "recompute",
    "sequence_parallel",
    "zero_stage",
    "first_stage_layers",
    "last_stage_layers",
    "ep",
    "cp",
)
SCHEDULE_NAMES = {int(s): s.label for s in Schedule}
RECOMPUTE_NAMES = {int(r): r.label for r in Recompute}


@dataclass(frozen=True)
class SearchSpace:
    """What the planner may choose. A tuple fixes a dimension to those values; None searches all."""

    tp: tuple[int, ...] | None = None
    pp: tuple[int, ...] | None = None
    dp: tuple[int, ...] | None = None
    vpp: tuple[int, ...] | None = None
    micro_batch: tuple[int, ...] | None = None
    schedule: tuple[str, ...] | None = None
    recompute: tuple[str, ...] | None = None
    sequence_parallel: tuple[bool, ...] | None = None
    zero_stage: tuple[int, ...] | None = None
    ep: tuple[int, ...] | None = None
    cp: tuple[int, ...] | None = None
    max_tp: int | None = None
    tp_within_node: bool = True
    max_micro_batch: int = 16  # unless micro_batch is fixed
    max_vpp: int = 8  # unless vpp is fixed
    zero_with_pipeline: bool = False  # allow ZeRO-2/3 with pp > 1 (FSDP2 + PP)
    uneven_stages: bool = True  # pp need not divide the layers (the split is searched)
    memory_headroom_bytes: float = 0.0  # keep this much of each GPU's memory free
    objective: str = "time"  # or "throughput-per-gpu" (may then use fewer GPUs, whole servers)
    precision: str = "bf16"
    # execution details of the runs being planned (as in Plan)
    execution: dict[str, bool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise SpecError(f"plan: objective {self.objective!r} is not allowed; choose {', '.join(OBJECTIVES)}")
        for name in ("max_micro_batch", "max_vpp"):
            if getattr(self, name) < 1:
                raise SpecError(f"plan: {name} {getattr(self, name)} is not allowed; it must be >= 1")
        if self.max_tp is not None and self.max_tp < 1:
            raise SpecError(f"plan: max_tp {self.max_tp} is not allowed; it must be >= 1")
        if self.memory_headroom_bytes < 0:
            raise SpecError(f"plan: memory headroom {self.memory_headroom_bytes} is not allowed; it must be >= 0")
        for name, allowed in (("schedule", SCHEDULE_NAMES.values()), ("recompute", RECOMPUTE_NAMES.values())):
            for v in getattr(self, name) or ():
                if v not in allowed:
                    raise SpecError(f"plan: {name} {v!r} is not allowed; choose {', '.join(allowed)}")
        for v in self.zero_stage or ():
            if v not in (0, 1, 2, 3):
                raise SpecError(f"plan: zero stage {v} is not allowed; choose 0, 1, 2 or 3")


@dataclass(frozen=True)
class PlanSearch:
    """Every evaluated plan (flat arrays, one entry per plan) and how the search went."""

    model: Model
    cluster: Cluster
    global_batch: int
    space: SearchSpace
    columns: dict[str, np.ndarray]  # COLUMNS, one value per plan
    estimate: TrainingEstimate  # array-valued, aligned with columns
    fits: np.ndarray  # within memory (with the headroom)
    seconds: float  # wall time of the search
    simulated: np.ndarray | None = None  # the step time is the simulator's (see CONFIRM_TOP)

    @property
    def evaluated(self) -> int:
        return int(self.fits.size)

    @property
    def dropped_for_memory(self) -> int:
        return int(np.sum(~self.fits))

    @property
    def score(self) -> np.ndarray:
        """Higher is better: -step time, or tokens/s per GPU; plans that do not fit score -inf."""
        est = self.estimate
        if self.space.objective == "time":
            s = -np.asarray(est.step_time_s, dtype=float)
        else:
            s = np.asarray(est.tokens_per_s, dtype=float) / self.columns["gpus"]
        return np.where(self.fits, s, -np.inf)

    def ranked(self, top: int | None = None) -> np.ndarray:
        """Indices of the plans that fit, best first. For throughput per GPU, plans within
        TIE_TOLERANCE of the best rate come first, fastest step first (a 0.0001% better rate is
        no reason to take four times as long)."""
        score = self.score
        ok = np.flatnonzero(np.isfinite(score))
        order = ok[np.argsort(-score[ok], kind="stable")]
        if self.space.objective != "time" and order.size:
            near = score[order] >= score[order[0]] * (1 - TIE_TOLERANCE)
            step = np.asarray(self.estimate.step_time_s, dtype=float)
            tied = order[near][np.argsort(step[order[near]], kind="stable")]
            order = np.concatenate([tied, order[~near]])
        return order if top is None else order[:top]

    def plan(self, i: int) -> Plan:
        c = {k: v[i].item() for k, v in self.columns.items()}
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
            **self.space.execution,
        )

    def scenario(self, i: int) -> Scenario:
        gpus = int(self.columns["gpus"][i])
        return Scenario(self.model, cluster_for(self.cluster, gpus), self.plan(i))

    def row(self, i: int) -> dict[str, object]:
        """One plan as plain values (for tables, JSON and CSV)."""
        est = self.estimate
        out: dict[str, object] = {k: v[i].item() for k, v in self.columns.items()}
        out["schedule"] = SCHEDULE_NAMES[int(out["schedule"])]
        out["recompute"] = RECOMPUTE_NAMES[int(out["recompute"])]
        out["sequence_parallel"] = bool(out["sequence_parallel"])
        from shardwise.specs.stages import describe_split

        out["stage_layers"] = describe_split(
            self.model.layers, int(out["pp"]), int(out["first_stage_layers"]), int(out["last_stage_layers"])
        )
        step = float(np.asarray(est.step_time_s)[i])
        out.update(
            step_time_s=step,
            tokens_per_s=float(np.asarray(est.tokens_per_s)[i]),
            tokens_per_s_per_gpu=float(np.asarray(est.tokens_per_s)[i]) / int(self.columns["gpus"][i]),
            mfu=float(np.asarray(est.mfu)[i]),
            memory_bytes=float(np.asarray(est.memory.total_bytes)[i]),
            memory_breakdown_bytes={
                k: float(np.broadcast_to(np.asarray(v), self.fits.shape)[i]) for k, v in est.memory.as_dict().items()
            },
            fits_in_memory=bool(self.fits[i]),
            breakdown_s={k: float(np.asarray(v)[i]) for k, v in est.breakdown.as_dict().items()},
        )
        return out

    def by_tp_pp(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(tp values, pp values, best tokens/s per GPU of each (tp, pp) pair among the plans that
        fit -- nan where none does --, and whether the pair had any valid plan at all)."""
        tps, ti = np.unique(self.columns["tp"], return_inverse=True)
        pps, pi = np.unique(self.columns["pp"], return_inverse=True)
        rate = np.asarray(self.estimate.tokens_per_s, dtype=float) / self.columns["gpus"]
        best = np.full((tps.size, pps.size), -np.inf)
        np.maximum.at(best, (ti, pi), np.where(self.fits, rate, -np.inf))
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


def _divisors(n: int) -> np.ndarray:
    """The divisors of n, ascending, by trial division up to sqrt(n) (n may be a large batch)."""
    low = np.arange(1, int(np.sqrt(n)) + 1, dtype=np.int64)
    low = low[n % low == 0]
    return np.unique(np.concatenate([low, n // low]))


def _allowed(values: np.ndarray, fixed: tuple[int, ...] | None) -> np.ndarray:
    return values if fixed is None else values[np.isin(values, fixed)]


def gpu_counts(cluster: Cluster, space: SearchSpace) -> list[int]:
    """All the GPUs for the time objective; for throughput per GPU also fewer whole servers (or,
    on one server, any divisor of it)."""
    n, g = int(cluster.num_gpus), int(cluster.gpus_per_node)
    if space.objective == "time":
        return [n]
    if int(cluster.nodes) == 1:
        return [int(d) for d in _divisors(g)]
    return [k * g for k in range(1, int(cluster.nodes) + 1)]


def tp_values(model: Model, cluster: Cluster, gpus: int, space: SearchSpace) -> np.ndarray:
    g = min(int(cluster.gpus_per_node), gpus)
    t = _divisors(gpus)
    ok = rules.holds(rules.tp_rules(t, model.heads, model.kv_heads, model.ffn_hidden))
    # a TP group inside one server is the search space's default (a preference, not a rule)
    ok &= (g % t == 0) if space.tp_within_node else rules.holds(rules.node_rules(t, g))
    if space.max_tp is not None:
        ok &= t <= space.max_tp
    return _allowed(t[ok], space.tp)


def _imbalance(layers: int, pp: int) -> float:
    """The fullest stage of an automatic split over the mean stage."""
    return float(np.ceil(layers / pp) / (layers / pp))


def stage_splits(layers: int, pp: int) -> list[tuple[int, int, int]]:
    """Candidate (first, last, chunk unit) splits for pp stages: the automatic one (first = last
    = 0), and Megatron's split that counts the embedding and the loss as a layer each when pp
    divides layers + 2 (`--account-for-embedding-in-pipeline-split`, `--account-for-loss-...`).
    The chunk unit is what the virtual stages must divide so every model chunk holds whole layers
    (Megatron's rule): the layers of each full stage (0: no interleaving for this split)."""
    if pp == 1:
        return [(0, 0, layers)]
    from shardwise.specs.stages import stage_split

    auto = stage_split(layers, pp)
    first, last = int(auto.first), int(auto.last)
    if layers % pp == 0:
        unit = layers // pp
    elif pp > 2 and int(auto.middle_max) == int(auto.middle_min) and max(first, last) <= int(auto.middle_max):
        unit = int(auto.middle_max)  # uniform middle stages; the ends have a layer less
    else:
        unit = 0
    out = [(0, 0, unit)]
    if pp > 2 and (layers + 2) % pp == 0 and (layers + 2) // pp >= 2:
        u = (layers + 2) // pp
        if (u - 1, u - 1) != (first, last):
            out.append((u - 1, u - 1, u))  # the ends' missing layer is the embedding / the loss
    return out


def _block(
    model: Model, global_batch: int, gpus: int, tp: int, pp: int, space: SearchSpace, cp: int = 1
) -> np.ndarray | None:
    """Every valid plan with these (gpus, tp, pp, cp), as rows of COLUMNS."""
    dp = gpus // (tp * pp * cp)
    if not rules.fills_gpus(gpus, tp, pp, dp, cp) or (space.dp is not None and dp not in space.dp):
        return None
    if global_batch % dp:  # no micro-batch makes the batch rule hold
        return None
    if model.layers % pp and (not space.uneven_stages or _imbalance(model.layers, pp) > MAX_STAGE_IMBALANCE):
        return None
    per_replica = global_batch // dp
    mbs = _divisors(per_replica)
    # a fixed value overrides the default limit; a dimension the layout does not have (no
    # schedule at pp = 1, no ZeRO at dp = 1, no SP at tp = 1) is not filtered by it
    mbs = mbs[np.isin(mbs, space.micro_batch)] if space.micro_batch is not None else mbs[mbs <= space.max_micro_batch]
    if pp == 1:
        sched = [(int(Schedule.ONE_F_ONE_B), 1)]
        if space.vpp is not None and 1 not in space.vpp:
            return None
    else:
        # virtual stages: divide the layers of every full stage (whole layers per model chunk)
        # of an uneven one (each chunk holds at least one layer)
        units = [u for _, _, u in stage_splits(model.layers, pp) if u > 0]
        vpps = np.unique(np.concatenate([_divisors(u) for u in units])) if units else np.array([1])
        vpps = vpps[vpps >= 2]
        vpps = vpps[np.isin(vpps, space.vpp)] if space.vpp is not None else vpps[vpps <= space.max_vpp]
        sched = [(int(s), 1) for s in (Schedule.GPIPE, Schedule.ONE_F_ONE_B, Schedule.ZB_H1)]
        if space.vpp is not None and 1 not in space.vpp:
            sched = []
        sched += [(int(Schedule.INTERLEAVED), int(v)) for v in vpps]
        if space.schedule is not None:
            sched = [(s, v) for s, v in sched if SCHEDULE_NAMES[s] in space.schedule]
    # with fused (flash) attention, selective recomputation has nothing left to recompute: it is
    # the same plan as none, so it is searched only when asked for
    flash = space.execution.get("flash_attention", True)
    rc = [
        int(r)
        for r in Recompute
        if (r.label in space.recompute if space.recompute is not None else not (flash and r == Recompute.SELECTIVE))
    ]
    sp_rule = rules.sequence_rules(model.seq_len, tp, cp, True, True)[2]
    sp = [False, True] if tp > 1 and sp_rule.ok else [False]
    if tp > 1:
        sp = [q for q in sp if space.sequence_parallel is None or q in space.sequence_parallel]
        if model.is_moe:  # training a mixture of experts with TP needs it (rules.moe_training_rule)
            sp = [q for q in sp if q]
    eps = ep_values(model, tp * cp * dp, space)
    # ZeRO-2/3 shard gradients per micro-batch; DeepSpeed's pipeline engine refuses them and
    # Megatron-LM's distributed optimizer is ZeRO-1, so with pp > 1 they are opt-in
    # (PyTorch FSDP2 + PP, as in torchtitan, does combine them)
    zero = [0, 1, 2, 3] if dp > 1 else [0]
    if pp > 1 and not space.zero_with_pipeline:
        zero = [z for z in zero if z <= 1]
    if dp > 1:
        zero = [z for z in zero if space.zero_stage is None or z in space.zero_stage]
    if not (len(mbs) and sched and rc and sp and zero and eps):
        return None
    splits = stage_splits(model.layers, pp) if space.uneven_stages else [(0, 0, model.layers // pp)]
    grid = np.array(
        list(itertools.product(mbs.tolist(), range(len(sched)), rc, sp, zero, range(len(splits)), eps)), dtype=np.int64
    )
    mb, si = grid[:, 0], grid[:, 1]
    s_code = np.array([s for s, _ in sched])[si]
    v = np.array([v for _, v in sched])[si]
    first = np.array([f for f, _, _ in splits])[grid[:, 5]]
    last = np.array([lst for _, lst, _ in splits])[grid[:, 5]]
    unit = np.array([u for _, _, u in splits])[grid[:, 5]]
    chunks_whole = (v == 1) | ((unit > 0) & (np.mod(unit, v) == 0))
    interleave_multiple = rules.batch_rules(global_batch, dp, mb, pp, s_code == int(Schedule.INTERLEAVED))[1]
    ok = interleave_multiple.ok & chunks_whole
    n = int(ok.sum())
    if n == 0:
        return None
    const = np.array([[gpus, tp, pp, dp]] * n, dtype=np.int64)
    chosen = (v, mb, s_code, grid[:, 2], grid[:, 3], grid[:, 4], first, last, grid[:, 6], np.full(len(ok), cp))
    rest = np.column_stack([c[ok] for c in chosen])
    return np.hstack([const, rest])


def expert_tp(model: Model) -> int:
    """The planner keeps each expert whole on its rank (etp = 1, as NVIDIA's recipes run every
    mixture of experts they publish; Megatron-Core's default would be etp = tp); 0 (unused) for a
    dense model."""
    return 1 if model.is_moe else 0


# Context parallelism is searched by default from this sequence length on (NVIDIA's recipes use it
# for 8K-token and longer training: Llama 3.1 405B on GB200 at 8K, the long-context NeMo tables);
# shorter sequences keep cp = 1 unless --cp asks.
CP_FROM_SEQ_LEN = 8192


def cp_values(model: Model, ranks: int, space: SearchSpace) -> list[int]:
    """Context-parallel sizes to search among `ranks` = GPUs / (tp pp): those that split the
    sequence into 2 cp whole chunks (`rules.sequence_rules`), with fused attention; [1] below
    CP_FROM_SEQ_LEN unless fixed."""
    if space.cp is None and model.seq_len < CP_FROM_SEQ_LEN:
        return [1]
    if not space.execution.get("flash_attention", True):
        return [c for c in (1,) if space.cp is None or c in space.cp]
    cps = [c for c in _divisors(ranks).tolist() if model.seq_len % (2 * c) == 0 or c == 1]
    return [c for c in cps if space.cp is None or c in space.cp]


def ep_values(model: Model, ranks: int, space: SearchSpace) -> list[int]:
    """Expert-parallel sizes to search: the divisors of the experts that fold into the tp x dp
    ranks of a stage (`rules.moe_rules` with etp = 1); [1] for a dense model."""
    if not model.is_moe:
        return [1]
    eps = [e for e in _divisors(model.experts).tolist() if ranks % e == 0]
    return [e for e in eps if space.ep is None or e in space.ep]


def candidates(model: Model, cluster: Cluster, global_batch: int, space: SearchSpace) -> dict[str, np.ndarray]:
    """Every valid plan of the search space as flat columns (COLUMNS)."""
    blocks = []
    for gpus in gpu_counts(cluster, space):
        pps = _allowed(np.arange(1, model.layers + 1), space.pp)
        for tp in tp_values(model, cluster, gpus, space).tolist():
            for pp in pps.tolist():
                if gpus % (tp * pp):
                    continue
                for cp in cp_values(model, gpus // (tp * pp), space):
                    b = _block(model, global_batch, gpus, tp, pp, space, cp)
                    if b is not None:
                        blocks.append(b)
    if not blocks:
        return {}
    rows = np.vstack(blocks)
    return {name: rows[:, i] for i, name in enumerate(COLUMNS)}


def search(model: Model, cluster: Cluster, global_batch: int, space: SearchSpace | None = None) -> PlanSearch:
    """Evaluate every plan of `space` for `global_batch` sequences per step; see the module docstring."""
    import time

    from shardwise.specs._checks import positive_int

    positive_int("global_batch", global_batch)  # before its divisors are listed
    space = space or SearchSpace()
    start = time.perf_counter()
    cols = candidates(model, cluster, global_batch, space)
    if not cols:
        raise SpecError(_why_empty(model, cluster, global_batch, space))
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
    est = estimate_training_step(Scenario(model, cluster_for(cluster, cols["gpus"]), plan))
    capacity = float(cluster.gpu.memory_bytes) - space.memory_headroom_bytes
    fits = np.asarray(est.memory.total_bytes) <= capacity
    result = PlanSearch(model, cluster, global_batch, space, cols, est, fits, 0.0)
    checked = np.zeros(fits.size, dtype=bool)  # re-timed (or not simulable: the closed form stands)
    simulated = np.zeros(fits.size, dtype=bool)
    for _ in range(CONFIRM_ROUNDS):  # until the best plan is one that was checked
        todo = np.array([i for i in result.ranked(CONFIRM_TOP).tolist() if not checked[i]], dtype=np.int64)
        if todo.size == 0:
            break
        est, newly = _confirm(result, todo)
        checked[todo] = True
        simulated |= newly
        result = PlanSearch(model, cluster, global_batch, space, cols, est, fits, 0.0, simulated.copy())
        best = result.ranked(1)
        if best.size == 0 or checked[best[0]]:
            break
    return dataclasses.replace(result, seconds=time.perf_counter() - start)


def simulable(plan: Plan) -> bool:
    """Whether the planner confirms this plan with the simulator (see CONFIRM_TOP)."""
    slots = int(plan.pp) * int(plan.num_micro_batches) * int(plan.vpp)
    return int(plan.pp) > 1 and slots <= CONFIRM_MAX_SLOTS


def confirmed_estimate(scn: Scenario) -> TrainingEstimate:
    """One plan's estimate as the planner reports it: the simulator's where `simulable`, the
    closed form otherwise."""
    if not simulable(scn.plan):
        return estimate_training_step(scn)
    from shardwise.engines.simulated import simulate_training_step

    return simulate_training_step(scn).estimate


def _confirm(search: PlanSearch, indices: np.ndarray) -> tuple[TrainingEstimate, np.ndarray]:
    """The search's estimate with the step time and breakdown of `indices` from the simulator."""
    from dataclasses import replace

    est = search.estimate
    n = search.fits.size
    step = np.array(np.broadcast_to(np.asarray(est.step_time_s, dtype=float), (n,)))
    parts = {k: np.array(np.broadcast_to(np.asarray(v, dtype=float), (n,))) for k, v in vars(est.breakdown).items()}
    simulated = np.zeros(n, dtype=bool)
    for i in indices.tolist():
        scn = search.scenario(i)
        if not simulable(scn.plan):
            continue
        sim = confirmed_estimate(scn)
        simulated[i] = True
        step[i] = float(np.asarray(sim.step_time_s))
        for k in parts:
            parts[k][i] = float(np.asarray(getattr(sim.breakdown, k)))
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
