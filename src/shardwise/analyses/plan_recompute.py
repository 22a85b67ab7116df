"""The fewest layers recomputed whole that make a plan fit (`Plan.recompute_layers`: the first N
layers of every model chunk keep only their input, Megatron-LM's --recompute-granularity full
--recompute-method block --recompute-num-layers N, megatron/core/recompute.py): what engineers tune
when recomputing nothing does not fit and recomputing everything costs a whole forward pass.

For each plan that recomputes nothing, is over the memory and whose model state alone fits, the
memory model is asked directly: at N one layer short of every layer of the fullest chunk (more is
`recompute full`, searched already); where that fits, N is read off the line through it and no
layer recomputed (the kept activations fall by a layer's activations less its input per layer
recomputed, `engines.training_memory`), checked with N - 1 (or N + 1), and bisected where the
check fails. Each step prices the memory of every such plan at once: three steps where the line
holds. The backward pass's rebuilt layer grows with N, so memory need not fall at every N: the
search keeps a count that fits at its upper end, the smallest where memory falls with N. The plan
found takes the place of the plan that did not fit, so the plans evaluated are the candidates.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from shardwise.analyses.plan_search import columns_scenario
from shardwise.analyses.search_space import SearchSpace
from shardwise.engines.distinct import rows_of
from shardwise.engines.training import training_memory
from shardwise.specs import Cluster, Model, Recompute
from shardwise.specs.stages import stage_split


def chunk_layers_max(model: Model, cols: dict[str, np.ndarray]) -> np.ndarray:
    """The layers of each plan's fullest model chunk (its fullest stage over its virtual stages;
    the planner's plans give their split by first and last stage, `specs.stages.stage_split`)."""
    split = stage_split(int(model.layers), cols["pp"], cols["first_stage_layers"], cols["last_stage_layers"])
    fullest = np.maximum(np.maximum(np.asarray(split.first), np.asarray(split.last)), np.asarray(split.middle_max))
    return np.ceil(np.broadcast_to(fullest, cols["vpp"].shape) / cols["vpp"]).astype(np.int64)


def memory_pricer(
    model: Model, cluster: Cluster, global_batch: int, space: SearchSpace, cols: dict
) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """A function of (rows of `cols`, layers recomputed whole per chunk, one per row) to those
    plans' memory per GPU. The plans' scenario is built and checked once, each probe takes its
    rows with the count set (`engines.distinct.rows_of`): a count from 0 to a chunk's layers less
    one passes the checks wherever the plan did (`Plan.recompute_layers`)."""
    whole = columns_scenario(model, cluster, global_batch, space, cols) if cols["tp"].size >= 2 else None

    def memory(rows: np.ndarray, n: np.ndarray) -> np.ndarray:
        scn = None if whole is None else rows_of(whole, rows, {("plan", "recompute_layers"): n})
        if scn is None:
            scn = columns_scenario(
                model, cluster, global_batch, space, {**{k: v[rows] for k, v in cols.items()}, "recompute_layers": n}
            )
        return np.broadcast_to(np.asarray(training_memory(scn).total_bytes, dtype=float), n.shape)

    return memory


def smallest_fitting(
    model: Model,
    cluster: Cluster,
    global_batch: int,
    space: SearchSpace,
    cols: dict,
    none_bytes: np.ndarray,
    capacity: float,
) -> np.ndarray:
    """For each plan of `cols` (recomputing nothing, `none_bytes` per GPU), the fewest layers per
    model chunk recomputed whole that fit in `capacity`, short of every layer; 0 where none does.
    The memory falls about linearly with the layers recomputed, so the count is read off the line
    through no layer and all but one, checked with one less (or one more), and bisected where
    that check fails (the line bent)."""
    most = chunk_layers_max(model, cols) - 1
    out = np.zeros(most.shape, dtype=np.int64)
    can = np.flatnonzero(most >= 1)
    if can.size == 0:
        return out
    hi = most[can]
    memory_at = memory_pricer(model, cluster, global_batch, space, cols)
    at_hi = memory_at(can, hi)
    ok = at_hi <= capacity
    can, hi, at_hi = can[ok], hi[ok], at_hi[ok]
    if can.size == 0:
        return out
    lo = np.zeros(can.size, dtype=np.int64)  # recomputing nothing does not fit; hi fits
    drop = none_bytes[can] - at_hi
    guess = np.ceil(hi * (none_bytes[can] - capacity) / np.where(drop > 0, drop, np.inf))
    guess = np.clip(np.nan_to_num(guess, nan=1.0), 1, hi).astype(np.int64)
    for step in (0, -1, 1):  # the line's count, then one less where it fits, one more where it does not
        probe = guess + step if step else guess
        todo = np.flatnonzero((hi - lo > 1) & (probe > lo) & (probe < hi))
        if step == -1:
            todo = todo[hi[todo] == guess[todo]]
        elif step == 1:
            todo = todo[lo[todo] == guess[todo]]
        if todo.size:
            fit = memory_at(can[todo], probe[todo]) <= capacity
            hi[todo[fit]] = probe[todo[fit]]
            lo[todo[~fit]] = probe[todo[~fit]]
    while np.any(hi - lo > 1):  # the line bent: bisect what is left
        todo = np.flatnonzero(hi - lo > 1)
        mid = (lo[todo] + hi[todo]) // 2
        fit = memory_at(can[todo], mid) <= capacity
        hi[todo[fit]] = mid[fit]
        lo[todo[~fit]] = mid[~fit]
    out[can] = hi
    return out


def with_block_recompute(
    model: Model,
    cluster: Cluster,
    global_batch: int,
    space: SearchSpace,
    cols: dict[str, np.ndarray],
    fits: np.ndarray,
    memory_bytes: np.ndarray,
    capacity: float,
    full_twin: Callable[[np.ndarray], np.ndarray] | None = None,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """`cols` and `fits` where each plan that recomputes nothing and is over the memory (its
    `memory_bytes` priced: nan where its model state alone does not fit) becomes that plan with
    the fewest layers recomputed whole that fit, where some do (a dense model's:
    `rules.recompute_layers_rule`; in its place, so ties rank as before and the plans evaluated
    are the candidates); full recomputation must be allowed, as the stack's flag is full
    granularity. With `full_twin` (plans' indices -> their same plans under full recomputation,
    -1: none), only the plans whose twin fits are tried: recomputing all but one layer of a chunk keeps more than
    recomputing every one."""
    if model.is_moe or (space.recompute is not None and "full" not in space.recompute):
        return cols, fits
    over = ~fits & np.isfinite(memory_bytes)
    base = np.flatnonzero(over & (cols["recompute"] == int(Recompute.NONE)) & (cols["recompute_layers"] == 0))
    if full_twin is not None:
        twin = full_twin(base)
        base = base[(twin >= 0) & fits[np.maximum(twin, 0)]]
    if base.size == 0:
        return cols, fits
    sub = {k: v[base] for k, v in cols.items()}
    n = smallest_fitting(model, cluster, global_batch, space, sub, memory_bytes[base], capacity)
    base, n = base[n > 0], n[n > 0]
    if base.size == 0:
        return cols, fits
    layers = cols["recompute_layers"].copy()
    layers[base] = n
    fitting = fits.copy()
    fitting[base] = True
    return {**cols, "recompute_layers": layers}, fitting
