"""A pipeline round's heaviest micro-batch where each prompt's chunk sits whole in one micro-batch
(`EnginePreset.whole_prompts`), and two micro-batches priced in one element-wise call (`stacked`,
`take`): helpers of `engines.iteration`, split out of it.
"""

from __future__ import annotations

import numpy as np

from shardwise.engines.engine_presets import EnginePreset
from shardwise.engines.forward import ForwardStages
from shardwise.engines.pipeline import pipeline_host_s, pipeline_makespan_s
from shardwise.specs._checks import Number
from shardwise.specs.serving import ServingWorkload


def heaviest_prompt_tokens(
    wl: ServingWorkload, q: np.ndarray, prompts: np.ndarray, m: np.ndarray, budget: float
) -> np.ndarray:
    """Prompt tokens of a round's heaviest micro-batch where each prompt's chunk sits whole in one
    micro-batch (`EnginePreset.whole_prompts`): the round's prompts spread as evenly as they come
    over its m micro-batches, ceil(prompts / m) in the heaviest (at most one budget of tokens, at
    least an even share), beside its 1/m of the decodes."""
    heavy_q = np.minimum(np.minimum(q, np.ceil(prompts / m) * wl.input_len), budget)
    return np.maximum(heavy_q, np.ceil(q / m))


def heaviest_pass_s(
    fs: ForwardStages, p: np.ndarray, preset: EnginePreset, per_decode: np.ndarray, requests: np.ndarray
) -> Number:
    """The pass through every stage, and its host step, of a round's heaviest micro-batch
    (`heaviest_prompt_tokens`; `fs` its stage costs with the sends, `requests` its prompts). A
    stage takes the micro-batches in one order, so the round lasts at least that pass
    (`engines.pipeline.pipelined_round_s` prices the even split)."""
    c = fs.per_stage
    through = pipeline_makespan_s(c[0], c[1], c[2], p, 1, 1, fs.middle_sum_s(p))
    return through + pipeline_host_s(preset, per_decode + requests)


def stacked(*pairs: tuple[Number, Number]) -> list[np.ndarray]:
    """Each pair of arrays broadcast together and stacked on a new leading axis (two micro-batches
    priced in one element-wise call)."""
    flat = np.broadcast_arrays(*(np.asarray(x, dtype=float) for pair in pairs for x in pair))
    return [np.stack(flat[2 * i : 2 * i + 2]) for i in range(len(pairs))]


def take(fs: ForwardStages, i: int, rank: int) -> ForwardStages:
    """The `i`-th of the micro-batches `stacked` put on the leading axis of inputs of `rank`
    dimensions; a part that does not vary along it (of a lower rank, or a scalar) is the same for
    both."""

    def one(x: Number) -> Number:
        if x is None or np.ndim(x) < rank:
            return x
        return np.asarray(x)[i if np.shape(x)[0] > 1 else 0]

    return ForwardStages(
        tuple(one(x) for x in fs.compute),  # type: ignore[arg-type]
        tuple(one(x) for x in fs.tp_comm),  # type: ignore[arg-type]
        one(fs.send_s),
        one(fs.middle_sum),
    )
