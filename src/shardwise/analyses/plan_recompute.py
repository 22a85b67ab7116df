"""The fewest layers recomputed whole that make a plan fit (`Plan.recompute_layers`: the first N
layers of every model chunk keep only their input, Megatron-LM's --recompute-granularity full
--recompute-method block --recompute-num-layers N, megatron/core/recompute.py): what engineers tune
when recomputing nothing does not fit and recomputing everything costs a whole forward pass.

For each plan that recomputes nothing, is over the memory and whose model state alone fits, the
memory model is asked directly: at N one layer short of every layer of the fullest chunk (more is
`recompute full`, searched already), then by bisection the smallest N that fits. Each step prices
the memory of every such plan at once, about log2(layers per chunk) steps in all. The kept
activations fall by a layer's activations less its input per layer recomputed while the backward
pass's rebuilt layer grows (`engines.training_memory`), so memory need not fall at every N: the
bisection keeps a count that fits at its upper end, the smallest where memory falls with N.
"""

from __future__ import annotations

import numpy as np

from shardwise.analyses.plan_search import columns_scenario
from shardwise.analyses.search_space import SearchSpace
from shardwise.engines.training import training_memory
from shardwise.specs import Cluster, Model, Recompute


def chunk_layers_max(model: Model, cluster: Cluster, global_batch: int, space: SearchSpace, cols: dict) -> np.ndarray:
    """The layers of each plan's fullest model chunk (its fullest stage over its virtual stages)."""
    split = columns_scenario(model, cluster, global_batch, space, cols).split
    fullest = np.maximum(np.maximum(np.asarray(split.first), np.asarray(split.last)), np.asarray(split.middle_max))
    return np.ceil(np.broadcast_to(fullest, cols["vpp"].shape) / cols["vpp"]).astype(np.int64)


def _fit_at(
    model: Model, cluster: Cluster, global_batch: int, space: SearchSpace, cols: dict, n: np.ndarray, capacity: float
) -> np.ndarray:
    at = {**cols, "recompute_layers": n}
    memory = training_memory(columns_scenario(model, cluster, global_batch, space, at))
    return np.broadcast_to(np.asarray(memory.total_bytes), n.shape) <= capacity


def smallest_fitting(
    model: Model, cluster: Cluster, global_batch: int, space: SearchSpace, cols: dict, capacity: float
) -> np.ndarray:
    """For each plan of `cols` (recomputing nothing), the fewest layers per model chunk recomputed
    whole that fit in `capacity`, short of every layer; 0 where none does."""
    most = chunk_layers_max(model, cluster, global_batch, space, cols) - 1
    out = np.zeros(most.shape, dtype=np.int64)
    can = np.flatnonzero(most >= 1)
    if can.size == 0:
        return out
    sub = {k: v[can] for k, v in cols.items()}
    hi = most[can]
    ok = _fit_at(model, cluster, global_batch, space, sub, hi, capacity)
    can, hi = can[ok], hi[ok]
    lo = np.zeros(can.size, dtype=np.int64)  # recomputing nothing does not fit
    while can.size and np.any(hi - lo > 1):
        todo = np.flatnonzero(hi - lo > 1)
        mid = (lo[todo] + hi[todo]) // 2
        fit = _fit_at(model, cluster, global_batch, space, {k: v[can[todo]] for k, v in cols.items()}, mid, capacity)
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
    over: np.ndarray,
    capacity: float,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """`cols` and `fits` with, after them, each plan of `over` (priced and over the memory) that
    recomputes nothing again with the fewest layers recomputed whole that fit (a dense model's:
    `rules.recompute_layers_rule`); full recomputation must be allowed, as the stack's flag is
    full granularity."""
    if model.is_moe or (space.recompute is not None and "full" not in space.recompute):
        return cols, fits
    base = np.flatnonzero(over & (cols["recompute"] == int(Recompute.NONE)) & (cols["recompute_layers"] == 0))
    if base.size == 0:
        return cols, fits
    n = smallest_fitting(model, cluster, global_batch, space, {k: v[base] for k, v in cols.items()}, capacity)
    base, n = base[n > 0], n[n > 0]
    if base.size == 0:
        return cols, fits
    added = {k: v[base] for k, v in cols.items()}
    added["recompute_layers"] = n
    out = {k: np.concatenate([v, added[k]]) for k, v in cols.items()}
    return out, np.concatenate([fits, np.ones(base.size, dtype=bool)])
