"""A pipeline's stages from per-layer costs: each stage's micro-batch from its share of the
layers (`specs.stages`), the first with the embedding and the last with the output layer, and
`select` between two stage costs over arrays of plans."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from shardwise.engines.costs import FIELDS, StageCost
from shardwise.specs._checks import Number
from shardwise.specs.stages import StageSplit


def select(mask: Number, a: StageCost, b: StageCost) -> StageCost:
    """`a` where `mask` holds, else `b`, field by field (a field that is one and the same scalar in
    both, such as a dense model's expert all-to-alls, stays that scalar)."""

    def pick(x: Number, y: Number) -> Number:
        if np.ndim(x) == 0 and np.ndim(y) == 0 and float(x) == float(y):
            return x
        return np.where(mask, x, y)

    return StageCost(*(pick(getattr(a, f), getattr(b, f)) for f in FIELDS))


class Stages(NamedTuple):
    """Per micro-batch costs of the first stage, the fullest middle stage, the last stage, and
    all middle stages together (for the pipeline's sum over stages)."""

    first: StageCost
    middle: StageCost
    last: StageCost
    middle_sum: StageCost


def stages(
    split: StageSplit,
    layer: StageCost,
    emb: StageCost,
    head: StageCost,
    moe: tuple[StageCost, StageSplit] | None = None,
) -> Stages:
    """Stage costs from the split's layer counts: the first stage also runs the embedding and the
    last the output layer (a single stage has both). `moe`: a mixture-of-experts layer's cost
    and how many of each stage's layers are MoE (`specs.stages.moe_split`); the others cost
    `layer`."""
    one = (np.asarray(split.pp) == 1).astype(float)
    zero = StageSplit(split.pp, 0.0, 0.0, 0.0, 0.0, 0.0)
    moe_layer, n_moe = moe if moe is not None else (layer, zero)

    def per(f: str, n_dense: Number, n_moe_layers: Number) -> Number:
        if moe is None:  # every layer dense
            return n_dense * getattr(layer, f)
        return n_dense * getattr(layer, f) + n_moe_layers * (getattr(moe_layer, f) - getattr(layer, f))

    # a term that is 0 in every part (a dense model's expert all-to-alls) stays a scalar 0
    parts = (layer, emb, head, moe_layer)
    nil = {f for f in FIELDS if all(np.ndim(getattr(c, f)) == 0 and float(getattr(c, f)) == 0.0 for c in parts)}

    def stage(n: Number, n_moe_layers: Number, ends: tuple[StageCost, StageCost] | None = None) -> StageCost:
        values = []
        for f in FIELDS:
            if f in nil:
                values.append(0.0)
            elif ends is None:
                values.append(per(f, n, n_moe_layers))
            else:
                values.append(per(f, n, n_moe_layers) + getattr(ends[0], f) + one * getattr(ends[1], f))
        return StageCost(*values)

    middle = stage(split.middle_max, n_moe.middle_max)
    middle_sum = stage(split.middle_total, n_moe.middle_total)
    first = stage(split.first, n_moe.first, (emb, head))
    last = stage(split.last, n_moe.last, (head, emb))
    return Stages(first, middle, last, middle_sum)
