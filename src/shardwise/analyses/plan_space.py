"""The planner's search space: what it may choose (`SearchSpace`) and every valid plan in it as
flat columns (`candidates`).

The rules (Narayanan et al. 2021 Sec. 3 gives the rules of thumb they generalise) are listed in
`analyses.planner`'s docstring. The plans are built as a join, one dimension at a time: the
(GPU count, tp) pairs, then each pair once per allowed pp, cp, micro-batch, schedule, recompute,
sequence parallelism, ZeRO stage, stage split and expert parallelism, each step a boolean matrix
of rows x options whose true entries, in row-major order, become the next rows. The order is
the nested loops' (GPU count, tp, pp and cp ascending, then the options in that order), so
ties rank as they always did; `tests/test_plan_space.py` checks the columns against the loop
form row by row. What the planner may choose is `analyses.search_space`, the join's machinery
`analyses.plan_join`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache

import numpy as np

from shardwise.analyses.plan_hybrid import experts_follow_groups, zero_shard_options
from shardwise.analyses.plan_join import PlanJoin, per_pp_options, shifted_twins

# re-exported: the names the planner, the requests and the tests read here
from shardwise.analyses.search_space import (  # noqa: F401
    COLUMNS,
    OBJECTIVES,
    RECOMPUTE_NAMES,
    SCHEDULE_NAMES,
    SearchSpace,
    pipeline_zero_stages,
    stack_of,
)
from shardwise.arrays import sorted_distinct
from shardwise.specs import Cluster, Model, Recompute, Schedule
from shardwise.specs.rules import flushes_rule
from shardwise.specs.stages import stage_layer_list

# pp that does not divide the layers is searched when its fullest stage is at most this much above
# the mean (126 layers on 8 stages: 16 / 15.75 = 1.016; 128 layers on 100 stages, 2 / 1.28, is not)
MAX_STAGE_IMBALANCE = 1.10
# Context parallelism is searched by default from this sequence length on (NVIDIA's recipes use it
# for 8K-token and longer training: Llama 3.1 405B on GB200 at 8K, the long-context NeMo tables);
# shorter sequences keep cp = 1 unless --cp asks.
CP_FROM_SEQ_LEN = 8192


def divisors(n: int) -> np.ndarray:
    """The divisors of n, ascending, by trial division up to sqrt(n) (n may be a large batch)."""
    low = np.arange(1, math.isqrt(n) + 1, dtype=np.int64)
    low = low[n % low == 0]
    return sorted_distinct(np.concatenate([low, n // low]))


def _allowed(values: np.ndarray, fixed: tuple[int, ...] | None) -> np.ndarray:
    return values if fixed is None else values[np.isin(values, fixed)]


def gpu_counts(cluster: Cluster, space: SearchSpace) -> list[int]:
    """All the GPUs for the time objective; for throughput per GPU also fewer whole servers (or,
    on one server, any divisor of it)."""
    n, g = int(cluster.num_gpus), int(cluster.gpus_per_node)
    if space.objective == "time":
        return [n]
    if int(cluster.nodes) == 1:
        return [int(d) for d in divisors(g)]
    return [k * g for k in range(1, int(cluster.nodes) + 1)]


def _imbalance(layers: int, pp: int) -> float:
    """The fullest stage of an automatic split over the mean stage."""
    return float(np.ceil(layers / pp) / (layers / pp))


@lru_cache(maxsize=4096)
def stage_splits(layers: int, pp: int) -> tuple[tuple[int, int, int], ...]:
    """Candidate (first, last, chunk unit) splits for pp stages: the automatic one (first = last
    = 0), and Megatron's split that counts the embedding and the loss as a layer each when pp
    divides layers + 2 (`--account-for-embedding-in-pipeline-split`, `--account-for-loss-...`).
    The chunk unit is what the virtual stages must divide so every model chunk holds whole layers
    (Megatron's rule): the layers of each full stage (0: no interleaving for this split)."""
    if pp == 1:
        return ((0, 0, layers),)
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
    return tuple(out)


def stack_split_rule(space: SearchSpace) -> str:
    """How the stack of the planned runs splits its layers (`presets.framework_pipeline_split`)."""
    from shardwise import presets

    return presets.framework_pipeline_split(stack_of(space))


def split_options(model: Model, pp: int, space: SearchSpace, rule: str = "even") -> list[tuple[int, int, int, int]]:
    """The (first, last, chunk unit, one-chunk) splits searched at pp stages: `stage_splits` (the
    automatic one alone with uneven_stages off), each for any virtual stages (one-chunk 1). A stack
    with its own split `rule` (`stack_split_rule`: nanotron, Megatron-DeepSpeed) places one chunk
    per stage its way (`specs.stages.stack_split_counts`, as `predict` prices it): that split alone
    at one chunk (first and last given, chunk unit 0), the automatic one only for interleaving
    (one-chunk 0), and Megatron's embedding-and-loss split, a Megatron flag, not at all. Where the
    stack's split is the automatic one (or leaves a stage empty) nothing changes."""
    layers = int(model.layers)
    auto = stage_splits(layers, pp) if space.uneven_stages else ((0, 0, layers // pp),)
    counts = None if rule == "even" else stack_counts(rule, model, pp)
    if counts is None:
        return [(f, last, u, 1) for f, last, u in auto]
    first, last, unit = counts[0], counts[-1], auto[0][2]
    return [(first, last, 0, 1), *([(0, 0, unit, 0)] if unit > 0 else [])]


@lru_cache(maxsize=4096)
def stack_counts(rule: str, model: Model, pp: int) -> tuple[int, ...] | None:
    """The stack's own split at pp stages where it differs from the automatic one and the
    engines' (first, last, middle) shape holds it exactly; None otherwise."""
    from shardwise.specs.stages import stack_split_counts, stage_split

    counts = stack_split_counts(rule, model, pp)
    if counts is None:
        return None
    layers = int(model.layers)
    if counts == tuple(stage_layer_list(stage_split(layers, pp), pp)):
        return None
    given, exact = stage_split(layers, pp, counts[0], counts[-1]), stage_split(layers, pp, explicit=counts)
    same = all(
        float(np.asarray(getattr(given, k))) == float(np.asarray(getattr(exact, k)))
        for k in ("first", "last", "middle_total", "middle_max", "middle_min")
    )
    return counts if same else None


def _schedules(layers: int, pp: int, space: SearchSpace) -> list[tuple[int, int]]:
    """(schedule code, virtual stages) allowed at pp stages. Interleaving needs v >= 2 dividing the
    layers of every full stage of some split (whole layers per model chunk); a fixed vpp without
    1 leaves only the interleaved schedule (and nothing at pp = 1)."""
    if pp == 1:  # no pipeline, stored as 1F1B; not where only interleaving was asked for (it needs pp >= 2)
        only_interleaved = space.schedule is not None and set(space.schedule) == {"interleaved"}
        fixed_chunks = space.vpp is not None and 1 not in space.vpp
        return [] if only_interleaved or fixed_chunks else [(int(Schedule.ONE_F_ONE_B), 1)]
    units = [u for _, _, u in stage_splits(layers, pp) if u > 0]
    vpps = sorted_distinct(np.concatenate([divisors(u) for u in units])) if units else np.array([1])
    vpps = vpps[vpps >= 2]
    if space.vpp is not None:  # a fixed vpp: chunks of whole layers even when v does not divide them
        vpps = np.array(sorted({v for v in space.vpp if 2 <= v <= max(units, default=0)}), dtype=np.int64)
    else:
        vpps = vpps[vpps <= space.max_vpp]
    sched = [(int(s), 1) for s in (Schedule.GPIPE, Schedule.ONE_F_ONE_B, Schedule.ZB_H1)]
    if space.vpp is not None and 1 not in space.vpp:
        sched = []
    sched += [(int(Schedule.INTERLEAVED), int(v)) for v in vpps]
    if space.schedule is not None:
        sched = [(s, v) for s, v in sched if SCHEDULE_NAMES[s] in space.schedule]
    return sched


def _layouts(model: Model, cluster: Cluster, global_batch: int, space: SearchSpace) -> dict[str, np.ndarray]:
    """Every (gpus, tp, pp, cp, dp) the plans may use: tp divides the heads, the KV heads and the
    MLP width (and, by default, the GPUs of a server; else it fits in or spans whole servers);
    pp is at most the layers (uneven within MAX_STAGE_IMBALANCE); cp splits the sequence into
    2 cp chunks; dp divides the global batch."""
    gpus = np.array(gpu_counts(cluster, space), dtype=np.int64)
    rows = PlanJoin({"gpus": gpus, "node": np.minimum(int(cluster.gpus_per_node), gpus)})
    tps = divisors(math.gcd(int(model.heads), int(model.kv_heads), int(model.ffn_hidden)))
    if space.max_tp is not None:
        tps = tps[tps <= space.max_tp]
    tps = _allowed(tps, space.tp)
    g, t = rows["node"][:, None], tps[None, :]
    # a TP group inside one server is the search space's default (a preference, not a rule)
    in_node = (g % t == 0) if space.tp_within_node else (g % t == 0) | (t % g == 0)
    rows.add((gpus[:, None] % t == 0) & in_node, carry=("tp",), tp=tps)
    layers = int(model.layers)
    pps = _allowed(np.arange(1, layers + 1, dtype=np.int64), space.pp)
    even = np.array([layers % p == 0 for p in pps.tolist()], dtype=bool)
    if space.uneven_stages:
        even |= np.array([_imbalance(layers, p) <= MAX_STAGE_IMBALANCE for p in pps.tolist()], dtype=bool)
    pps = pps[even]
    if space.execution.get("offload_activation_layers"):  # Megatron-Core offloads with pp = 1 (`rules.offload_rule`)
        pps = pps[pps == 1]
    rows.add(rows["gpus"][:, None] % (rows["tp"][:, None] * pps[None, :]) == 0, carry=("pp",), pp=pps)
    if space.cp is None and model.seq_len < CP_FROM_SEQ_LEN:
        cps = np.array([1], dtype=np.int64)
    elif not space.execution.get("flash_attention", True) or space.execution.get("packed_document_len"):
        # no ring attention without fused attention; packed documents are priced without CP (`rules.packed_rule`)
        cps = _allowed(np.array([1], dtype=np.int64), space.cp)
    else:  # 1, or cp splitting the sequence into 2 cp whole chunks (`rules.sequence_rules`)
        s = int(model.seq_len)
        cps = sorted_distinct(np.concatenate([[1], divisors(s // 2) if s >= 2 and s % 2 == 0 else []])).astype(np.int64)
        cps = _allowed(cps, space.cp)
    ranks = rows["gpus"] // (rows["tp"] * rows["pp"])
    rows.add(ranks[:, None] % cps[None, :] == 0, carry=("cp",), cp=cps)
    dp = rows["gpus"] // (rows["tp"] * rows["pp"] * rows["cp"])
    ok = global_batch % dp == 0
    if space.dp is not None:
        ok &= np.isin(dp, space.dp)
    rows.keep(ok)
    out = rows.columns()
    out["dp"] = out["gpus"] // (out["tp"] * out["pp"] * out["cp"])
    return out


def candidates(model: Model, cluster: Cluster, global_batch: int, space: SearchSpace) -> dict[str, np.ndarray]:
    """Every valid plan of the search space as flat columns (COLUMNS); {} when there is none."""
    return candidates_by_layout(model, cluster, global_batch, space)[0]


def candidates_by_layout(
    model: Model, cluster: Cluster, global_batch: int, space: SearchSpace
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """`candidates_with_twins` without the twins."""
    cols, layout, _ = candidates_with_twins(model, cluster, global_batch, space)
    return cols, layout


def candidates_with_twins(
    model: Model, cluster: Cluster, global_batch: int, space: SearchSpace
) -> tuple[dict[str, np.ndarray], np.ndarray, Callable[[np.ndarray], np.ndarray] | None]:
    """`candidates`, for each plan the index of its (GPU count, tp, pp, cp, dp) layout among
    the search's layouts (plans of one layout share it; numbered in order from 0). Two joins
    follow the layouts: (micro-batch, schedule and virtual stages), then (recompute, sequence
    parallelism, ZeRO stage, stage split, expert parallelism), each over the product of its
    options in that order (the nested loops' order); each ZeRO stage comes with its shard groups
    (`analyses.plan_hybrid`), the layers recomputed whole are the space's fixed count (or 0: the
    planner searches them after memory, `analyses.plan_recompute`), and the full-recomputation
    twins of plans that recompute nothing (a function of their indices: the index of the same plan
    with recompute full, -1 where it is not one of the plans; None where the space has not both)."""
    rows = PlanJoin(_layouts(model, cluster, global_batch, space))
    layers = int(model.layers)
    distinct_pp = sorted_distinct(rows.layouts["pp"]).tolist()
    keys, sched, sched_ok = per_pp_options({p: _schedules(layers, p, space) for p in distinct_pp}, 2)
    rows.layouts["pp_code"] = np.searchsorted(keys, rows.layouts["pp"])
    code, dp, pp = rows["pp_code"], rows["dp"], rows["pp"]
    # micro-batch: divides the batch per replica (a fixed value overrides the default limit);
    # interleaving needs the micro-batch count a multiple of pp
    # (only the divisors of a replica's batch: the others are never whole, and a huge
    # --max-micro-batch stays bounded)
    per_replica = sorted_distinct(global_batch // dp).tolist()
    mbs = sorted_distinct(np.concatenate([np.ones(1, np.int64), *(divisors(int(b)) for b in per_replica)]))
    mbs = mbs[mbs <= space.max_micro_batch]
    if space.micro_batch is not None:
        mbs = np.array(sorted({m for m in space.micro_batch if m >= 1}), dtype=np.int64)
    m = global_batch // (dp[:, None] * mbs[None, :])
    whole = (global_batch // dp)[:, None] % mbs[None, :] == 0
    plain = (sched[code, :, 0] != int(Schedule.INTERLEAVED))[:, None, :]
    ok = whole[:, :, None] & sched_ok[code][:, None, :] & (plain | ((m % pp[:, None]) == 0)[:, :, None])
    # separate pipeline schedules split the micro-batches evenly, at least pp each (`rules.flushes_rule`)
    flushes = int(space.execution.get("pipeline_flushes", 1))
    if flushes > 1:
        ok &= flushes_rule(m, flushes, pp[:, None]).ok[:, :, None]
    k = sched.shape[1]
    rows.add(
        ok.reshape(rows.size, mbs.size * k),
        carry=("vpp",),
        micro_batch=lambda r, o: mbs[o // k],
        schedule=lambda r, o: sched[code[r], o % k, 0],
        vpp=lambda r, o: sched[code[r], o % k, 1],
    )
    # Megatron's selective policy (Korthikanti et al. 2022: the attention core, `selective_policy`
    # "attention", --recompute-modules core_attn) under fused (flash) attention keeps what none keeps
    # and reruns the attention forward: never better than none, so it is searched only when asked for.
    # Any other policy differs from none and is searched (torchtitan's per-op SAC, "op", which saves
    # about half the matmul outputs: torchtitan/distributed/activation_checkpoint.py @b5bcd76c
    # `_op_sac_save_list`; JAX remat policies; more Megatron modules) (review 43 #4)
    modules = space.execution.get("recompute_modules") or ()
    modules = set(modules.split(",") if isinstance(modules, str) else modules) - {""}
    redundant = (
        space.execution.get("flash_attention", True)
        and space.execution.get("selective_policy", "attention") == "attention"
        and modules <= {"core_attn"}
    )
    rc = [
        int(r)
        for r in Recompute
        if (r.label in space.recompute if space.recompute is not None else not (redundant and r == Recompute.SELECTIVE))
    ]
    if space.execution.get("offload_activation_layers"):  # and without recomputation (`rules.offload_rule`)
        rc = [r for r in rc if r == int(Recompute.NONE)]
    rc_ok = np.ones((rows.size, len(rc)), dtype=bool)
    # sequence parallelism: with tp > 1 when each rank's sequence splits by tp; a mixture of
    # experts trained with TP needs it (rules.moe_training_rule)
    tp, cp, dp, pp = rows["tp"], rows["cp"], rows["dp"], rows["pp"]
    multi = tp > 1

    def asked(q: bool) -> bool:
        return space.sequence_parallel is None or q in space.sequence_parallel

    sp_ok = np.column_stack([~multi | (asked(False) and not model.is_moe), multi & asked(True)])
    sp_ok[:, 1] &= (model.seq_len // cp) % tp == 0
    # ZeRO 0-3 with dp > 1: DeepSpeed's pipeline engine refuses ZeRO-2/3 and Megatron-LM's
    # distributed optimizer is ZeRO-1, so with pp > 1 they are opt-in (PyTorch FSDP2 + PP, as in
    # torchtitan, does combine them)
    zs = np.arange(4, dtype=np.int64)
    zero_ok = (dp[:, None] > 1) | (zs[None, :] == 0)
    if not space.zero_with_pipeline:
        zero_ok &= (pp[:, None] == 1) | (zs[None, :] <= 1)
    piped = pipeline_zero_stages(space)  # what the stack runs under a pipeline (Colossal-AI: ZeRO <= 1)
    if piped is not None:
        zero_ok &= (pp[:, None] == 1) | np.isin(zs, piped)[None, :]
    if space.zero_stage is not None:
        zero_ok &= (dp[:, None] == 1) | np.isin(zs, space.zero_stage)[None, :]
    # each ZeRO stage with its shard groups: full sharding, and a server's ranks (`analyses.plan_hybrid`)
    zero_ok, shard, zero_of = zero_shard_options(zero_ok, rows["node"], tp, cp, dp, space)
    # stage split: each model chunk holds whole layers; one model chunk a stage takes the stack's own split
    rule = stack_split_rule(space)
    _, split, split_exists = per_pp_options({p: split_options(model, p, space, rule) for p in distinct_pp}, 4)
    code, v = rows["pp_code"], rows["vpp"][:, None]
    unit = split[code, :, 2]
    # (searched: v divides them, Megatron's classic rule; a fixed vpp: chunks of whole layers that
    # need not be equal, as Megatron-Core's --pipeline-model-parallel-layout runs them)
    whole = (unit >= v) if space.vpp is not None else (unit % np.maximum(v, 1) == 0)
    split_ok = split_exists[code] & (((v == 1) & (split[code, :, 3] == 1)) | ((v > 1) & (unit > 0) & whole))
    # expert parallelism: divides the experts and the tp x cp x dp ranks of a stage
    eps = _allowed(divisors(int(model.experts)), space.ep) if model.is_moe else np.ones(1, dtype=np.int64)
    ep_ok = (tp * cp * dp)[:, None] % eps[None, :] == 0 if model.is_moe else np.ones((rows.size, 1), dtype=bool)
    masks = (rc_ok, sp_ok, zero_ok, split_ok, ep_ok)
    ok = masks[0]
    for mask in masks[1:]:  # the product of the options, the last varying fastest
        ok = (ok[:, :, None] & mask[:, None, :]).reshape(rows.size, ok.shape[1] * mask.shape[1])
    # each option of the product as its (recompute, SP, ZeRO, split, EP) indices, the last fastest
    digits = np.indices([mask.shape[1] for mask in masks]).reshape(len(masks), -1)
    if model.is_moe and shard.any():
        ok &= experts_follow_groups(shard[:, digits[2]], eps[digits[4]][None, :], tp, cp, dp)
    split_of = digits[3]

    def stage_layers(field: int) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
        return lambda r, o: split[code[r], split_of[o], field]

    twin: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {}
    none, full = int(Recompute.NONE), int(Recompute.FULL)
    width = ok.shape[1]
    shift = (rc.index(full) - rc.index(none)) * (width // len(rc)) if none in rc and full in rc else 0
    if shift:  # recompute is the product's slowest option: each plan's key, to find its twin by
        twin["twin_key"] = lambda r, o: r * width + o

    rows.add(
        ok,
        recompute=np.asarray(rc, dtype=np.int64)[digits[0]],
        sequence_parallel=digits[1],
        zero_stage=zero_of[digits[2]],
        shard_group=lambda r, o: shard[r, digits[2][o]],
        recompute_layers=np.full(digits.shape[1], space.recompute_layers or 0, dtype=np.int64),
        first_stage_layers=stage_layers(0),
        last_stage_layers=stage_layers(1),
        ep=eps[digits[4]],
        **twin,
    )
    if rows.size == 0:
        return {}, np.zeros(0, dtype=np.int64), None
    cols = rows.columns(COLUMNS)
    keys = cols.get("twin_key")
    full_twin = None if keys is None else lambda rows: shifted_twins(keys, rows, shift)
    return {name: cols[name] for name in COLUMNS}, rows.layout, full_twin


def expert_tp(model: Model) -> int:
    """The planner keeps each expert whole on its rank (etp = 1, as NVIDIA's recipes run every
    mixture of experts they publish; Megatron-Core's default would be etp = tp); 0 (unused) for a
    dense model."""
    return 1 if model.is_moe else 0
