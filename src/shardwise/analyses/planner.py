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
none / selective / full (Megatron's selective, the attention core, only without fused attention:
with it, selective keeps what none keeps and reruns the attention forward; another stack's
selective, torchtitan's per-op policy or a JAX remat policy, differs from none and is searched);
sequence parallelism when tp > 1 (always, for a mixture of experts); context parallelism from
8K-token sequences on (or as fixed); expert parallelism for a
mixture of experts (ep dividing the experts and the tp x dp ranks, experts kept whole: etp = 1);
ZeRO 0-3 when dp > 1; schedules GPipe, 1F1B, interleaved and
ZB-H1 when pp > 1. Ranks are placed as Megatron-LM does (tp-dp-pp: TP innermost, PP outermost),
so every collective is priced on the link it crosses.

The candidates are built as one vectorized join (`analyses.plan_space`), then evaluated
together; the answer is a `PlanSearch` (`analyses.plan_search`), whose best plans the simulator
re-times (`analyses.plan_confirm`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

# re-exported: the names the requests, the calibration, the benchmarks and the tests read here
from shardwise.analyses.plan_confirm import (  # noqa: F401
    CONFIRM_ROUNDS,
    CONFIRM_SINGLES,
    CONFIRM_TOP,
    CONFIRMED,
    confirm,
    confirmed_estimate,
    simulable,
)
from shardwise.analyses.plan_recompute import with_block_recompute
from shardwise.analyses.plan_search import TIE_TOLERANCE, PlanSearch, cluster_for  # noqa: F401
from shardwise.analyses.plan_search import columns_scenario as _scenario
from shardwise.analyses.plan_space import (
    COLUMNS,
    OBJECTIVES,
    SearchSpace,
    candidates,
    candidates_by_layout,  # noqa: F401  (re-exported)
    candidates_with_twins,
)
from shardwise.engines.training import estimate_training_step, training_memory, training_memory_floor_bytes
from shardwise.errors import SpecError
from shardwise.specs import Cluster, Model

__all__ = ["COLUMNS", "OBJECTIVES", "PlanSearch", "SearchSpace", "candidates", "cluster_for", "search"]


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
) -> tuple[np.ndarray, np.ndarray]:
    """Which plans fit in `capacity` bytes per GPU, and each plan's memory per GPU where it was
    priced (nan for the plans whose model state alone does not fit). The
    model state of a plan depends on its layout, ZeRO stage, shard group and stage split alone, so
    its floor (`training_memory_floor_bytes`) is priced once per such group; only plans above it
    get their whole memory priced (the others cannot fit, whatever their activations)."""
    from shardwise.engines.distinct import group_rows

    splits = 2  # the automatic split, or Megatron's with the embedding and the loss as layers
    # the shard group as a code: searched, 0 or the layout's server-sized group; fixed, one of its sizes
    sizes = np.array(sorted({0, *(space.shard_group or (1,))}), dtype=np.int64)
    shard = np.searchsorted(sizes, cols["shard_group"]) if space.shard_group is not None else cols["shard_group"] > 0
    key = ((layout * 4 + cols["zero_stage"]) * sizes.size + shard) * splits + (cols["first_stage_layers"] > 0)
    rows, group = group_rows(key, (int(layout.max()) + 1) * 4 * sizes.size * splits)
    floor = training_memory_floor_bytes(
        _scenario(model, cluster, global_batch, space, {k: v[rows] for k, v in cols.items()})
    )
    maybe = np.flatnonzero((np.broadcast_to(floor, rows.shape) <= capacity * (1 + FLOOR_MARGIN))[group])
    fits = np.zeros(layout.size, dtype=bool)
    total = np.full(layout.size, np.nan)
    if maybe.size:
        memory = training_memory(_scenario(model, cluster, global_batch, space, {k: v[maybe] for k, v in cols.items()}))
        total[maybe] = np.broadcast_to(np.asarray(memory.total_bytes), maybe.shape)
        fits[maybe] = total[maybe] <= capacity
    return fits, total


def _check_searchable(model: Any, cluster: Any, global_batch: Any) -> None:
    """One model on one cluster at one global batch (the planner lays out one job): else one SpecError."""
    from shardwise.specs.distinct import _leaves

    if not isinstance(model, Model) or not isinstance(cluster, Cluster):
        wrong = type(model).__name__ if not isinstance(model, Model) else type(cluster).__name__
        raise SpecError(f"plan: search takes a Model and a Cluster, not a {wrong} (presets.model, presets.system)")
    if np.ndim(global_batch) != 0:
        raise SpecError("plan: global_batch: one number per search (call search once per batch)")
    arrays = [".".join(path) for path, _ in (*_leaves(model, ("model",)), *_leaves(cluster, ("cluster",)))]
    if arrays:
        raise SpecError(f"plan: one model and one cluster per search; arrays in {', '.join(arrays[:3])}")


def search(model: Model, cluster: Cluster, global_batch: int, space: SearchSpace | None = None) -> PlanSearch:
    """Evaluate every plan of `space` for `global_batch` sequences per step; see the module
    docstring. Memory is priced for every plan first and time only for the plans that fit (the
    model prices each plan on its own, so this drops nothing the ranking could show)."""
    import time

    from shardwise.specs._checks import positive_int

    _check_searchable(model, cluster, global_batch)
    positive_int("global_batch", global_batch)  # before its divisors are listed
    space = space or SearchSpace()
    _check_shard_group(cluster, space)
    start = time.perf_counter()
    cols, layout, twin = candidates_with_twins(model, cluster, global_batch, space)
    if not cols:
        raise SpecError(_why_empty(model, cluster, global_batch, space))
    capacity = float(cluster.gpu.memory_bytes) - space.memory_headroom_bytes
    fits, memory = _fits(model, cluster, global_batch, space, cols, layout, capacity)
    if space.features()[0]:  # the fewest layers recomputed whole that fit, beside each plan that does not
        cols, fits = with_block_recompute(model, cluster, global_batch, space, cols, fits, memory, capacity, twin)
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
        fitting, newly = confirm(result, todo)
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
        fitting, newly = confirm(result, best[:1])
        checked[best[0]] = True
        simulated |= newly
        result = PlanSearch(model, cluster, global_batch, space, cols, fits, fitting, 0.0, simulated.copy())
    return dataclasses.replace(result, seconds=time.perf_counter() - start)


def _why_empty(model: Model, cluster: Cluster, global_batch: int, space: SearchSpace) -> str:
    n, g = int(cluster.num_gpus), int(cluster.gpus_per_node)
    if space.schedule is not None and set(space.schedule) == {"interleaved"}:  # needs pp >= 2 and vpp >= 2
        vpp = space.vpp if space.vpp is not None else (space.max_vpp,)
        flags = ["--pp 1"] if n >= 2 and space.pp is not None and max(space.pp) < 2 else []
        flags += [("--vpp 1" if space.vpp is not None else "--max-vpp 1")] if max(vpp) < 2 else []
        why = (["one GPU"] if n < 2 else []) + flags
        if why:
            drop = f", or drop {' and '.join(flags)}" if flags and n >= 2 else ""
            return (
                "plan: --schedule interleaved needs a pipeline (pp >= 2) of at least 2 model chunks a stage "
                f"(vpp >= 2), which {' and '.join(why)} rule{'s' * (len(why) == 1)} out; give another --schedule{drop}"
            )
    chunked = space.vpp is not None and 1 not in space.vpp
    if chunked and space.schedule is not None and "interleaved" not in space.schedule:  # predict's rule, named
        vpp = ",".join(map(str, space.vpp or ()))
        return (
            f"plan: --vpp {vpp} needs --schedule interleaved (virtual stages only exist in the interleaved 1F1B "
            f"schedule), which --schedule {','.join(space.schedule)} rules out; add interleaved, or drop --vpp"
        )
    fixed = _fixed_value_problem(model, cluster, global_batch, space)
    if fixed is not None:
        return fixed
    kv = f" and KV heads ({model.kv_heads})" if model.kv_heads != model.heads else ""
    heads = f"the heads ({model.heads}){kv}"
    hints = [f"the batch must be divisible by dp, tp must divide {heads} and pp be at most the layers ({model.layers})"]
    if space.tp is not None and space.tp_within_node and any(t > g for t in space.tp):
        hints.append(f"tp > {g} needs --tp-across-nodes")
    if space.micro_batch is not None:
        hints.append("the micro-batch must divide the batch per replica")
    if space.shard_group is not None:
        hints.append("a shard group (--shard-group) must divide dp x cp, hold whole CP groups and be at least 2")
    if any(getattr(space, k) is not None for k in ("tp", "pp", "dp", "vpp", "schedule", "zero_stage", "shard_group")):
        hints.append("and the fixed values given must allow a layout")
    return f"plan: no valid layout of {model.name} on {n} GPUs with global batch {global_batch}: " + "; ".join(hints)


def _fixed_value_problem(model: Model, cluster: Cluster, global_batch: int, space: SearchSpace) -> str | None:
    """The first rule that every value given for one axis (--tp, --pp, --cp, --dp) breaks on its
    own, in one line naming it, else None (the values only fail
    together, or nothing was fixed)."""
    from shardwise.analyses.plan_space import gpu_counts

    counts = gpu_counts(cluster, space)
    gpus = " or ".join(map(str, counts))

    def of_gpus(x: int) -> bool:
        return not any(n % x == 0 for n in counts)

    heads, kv, ffn, layers = (int(getattr(model, k)) for k in ("heads", "kv_heads", "ffn_hidden", "layers"))
    checks = {
        "tp": [
            (
                lambda t: heads % t,
                "the model's {heads} heads are not divisible by tp={x} (a TP rank owns whole heads)",
            ),
            (lambda t: kv % t, "the model's {kv} KV heads are not divisible by tp={x} (a TP rank owns whole ones)"),
            (lambda t: ffn % t, "the MLP width {ffn} is not divisible by tp={x} (TP splits it by columns)"),
            (of_gpus, "tp={x} does not divide the {gpus} GPUs"),
        ],
        "pp": [
            (lambda p: p > layers, "pp={x} is more stages than the {layers} layers (each stage holds at least one)"),
            (of_gpus, "pp={x} does not divide the {gpus} GPUs"),
        ],
        "cp": [(of_gpus, "cp={x} does not divide the {gpus} GPUs")],
        "dp": [
            (lambda d: global_batch % d, "the global batch {batch} is not divisible by dp={x}"),
            (of_gpus, "dp={x} does not divide the {gpus} GPUs"),
        ],
    }
    words = {"heads": heads, "kv": kv, "ffn": ffn, "layers": layers, "gpus": gpus, "batch": global_batch}
    for axis, rules in checks.items():
        given = getattr(space, axis)
        if not given:
            continue
        for broken, text in rules:
            if all(broken(int(x)) for x in given):
                flag = f"--{axis} {','.join(map(str, given))}"
                return f"plan: {flag}: " + text.format(x=given[0], **words)
    return None


def _check_shard_group(cluster: Cluster, space: SearchSpace) -> None:
    """A fixed --shard-group that divides no GPU count can shard no plan (a group divides the dp x cp
    ranks, which divide the GPUs): the search would keep ZeRO-0 alone without a word."""
    from shardwise.analyses.plan_space import gpu_counts

    counts = gpu_counts(cluster, space)
    groups = [int(g) for g in space.shard_group or ()]
    if groups and all(g > 0 and all(n % g for n in counts) for g in groups):
        n = max(counts)
        some = ", ".join(str(d) for d in range(2, n + 1) if n % d == 0)
        raise SpecError(
            f"plan: --shard-group {','.join(map(str, groups))}: a shard group divides the data-parallel ranks "
            f"(dp x cp), which divide the {' or '.join(map(str, counts))} GPUs, so no plan could shard over it "
            f"(only ZeRO-0 would be searched); give a divisor of {n} ({some}) or 0 (every rank), or leave it out"
        )
