"""The memory of a training step (`training_memory.memory_breakdown`), kept for one configuration
per layout and micro-batches in flight, and over many plans priced once per group of plans that
hold the same layout and the same micro-batches in flight (issue 38).

The memory reads the number of micro-batches m only through the layer-micro-batches each stage
keeps in flight (`physics.memory.layers_in_flight`), and those stop growing with m under every
schedule but GPipe: 1F1B and ZB-H1 keep at most p micro-batches on a stage, Megatron-LM's
interleaved schedule at most its warm-up's chunks. So plans that differ only in the global batch
share their memory once m passes that (`micro_batches_held`): a million random plans, a third of
them distinct, hold about a third as many groups of a layout and the micro-batches it holds.
"""

from __future__ import annotations

import numpy as np

from shardwise.arrays import as_float, one_value
from shardwise.engines import distinct
from shardwise.engines.context_parallel import context_parallel
from shardwise.engines.distinct import evaluate_grouped
from shardwise.engines.training_layout import LAYOUT_IGNORES, Layout, stage_params_of, trainable_of
from shardwise.engines.training_memory import MemoryTerms, memory_breakdown, memory_terms
from shardwise.physics.memory import MemoryBreakdown, layers_in_flight
from shardwise.specs import Scenario, Schedule, memo
from shardwise.specs._checks import Number
from shardwise.specs.memo import Memo

# One configuration's memory breakdown, kept per layout and micro-batches in flight on each stage
# (the only way it reads the number of micro-batches; a mixture of experts' layout key holds
# the batch): plans of a layout whose in-flight counts saturate (1F1B with m >= p) share it.
MEMORY = Memo("training memory")


def step_memory(scn: Scenario, lay: Layout, m: Number, layout: tuple[object, ...]) -> MemoryBreakdown:
    """`memory_breakdown` of the step (of one CP rank's scenario, `context_parallel`), kept per
    configuration's layout (`layout`: its `layout_key`) and in-flight counts; many plans of a
    dense model priced once per group of a layout and the micro-batches it holds
    (`micro_batches_held`)."""
    plan, split = scn.plan, lay.split

    def compute() -> MemoryBreakdown:
        local = context_parallel(scn)
        return memory_breakdown(local, lay.params, m, split, lay.expert_params, lay.moe_split, lay.trained)

    batch = plan.global_batch
    if distinct.GROUPING and type(batch) is np.ndarray and batch.size > 1 and not scn.model.is_moe:
        held = micro_batches_held(plan.pp, plan.vpp, plan.num_micro_batches, plan.schedule)
        return evaluate_grouped(_dense_step_memory, scn, LAYOUT_IGNORES, also=held)
    if not memo.ENABLED or not one_value(m):  # memos off, or many configurations: nothing kept
        return compute()
    p = as_float(plan.pp)
    in_flight = (
        layers_in_flight(layers, p, plan.vpp, m, plan.schedule, i)
        for layers, i in ((split.first, 0), (split.middle_max, 1), (split.last, p - 1))
    )
    return MEMORY.get_or_compute((layout, *in_flight), compute)  # type: ignore[no-any-return]


def micro_batches_held(pp: Number, vpp: Number, micro_batches: Number, schedule: Number) -> np.ndarray:
    """The fewest micro-batches that leave every stage's layer-micro-batches in flight
    (`physics.memory.layers_in_flight`) what `micro_batches` leave them: GPipe keeps all m; 1F1B
    and ZB-H1 keep min(p - i, m) and min(p, m) on stage i, so at most p; the interleaved warm-up
    min(2 (p - i - 1) + (v - 1) p + 1, m v) chunks, the most on stage 0, so at most
    ceil((2 (p - 1) + (v - 1) p + 1) / v) (whole numbers; a test holds the counts equal)."""
    p, v, m = (np.asarray(x, dtype=np.int64) for x in (pp, vpp, micro_batches))
    sched = np.asarray(schedule)
    warm_up = -(-(2 * (p - 1) + (v - 1) * p + 1) // v)  # ceil division
    cap = np.where(sched == Schedule.INTERLEAVED, warm_up, p)
    return np.where(sched == Schedule.GPIPE, m, np.minimum(m, cap))


def _dense_step_memory(scn: Scenario) -> MemoryBreakdown:
    """The step's memory of a dense model from its fields alone (its stages' parameters found
    again: the same functions of the same fields as the layout terms'), what the micro-batches
    in flight do not change priced once per layout."""
    model, plan = scn.model, scn.plan
    split = scn.split
    params, expert_params = stage_params_of(model, plan, split)
    trained = trainable_of(model, plan, split, params)
    terms = evaluate_grouped(_memory_terms, scn, LAYOUT_IGNORES)
    m = as_float(plan.num_micro_batches)
    return memory_breakdown(context_parallel(scn), params, m, split, expert_params, None, trained, terms)


def _memory_terms(scn: Scenario) -> MemoryTerms:
    """`memory_terms` of a dense model's step (its stages' parameters found again)."""
    model, plan = scn.model, scn.plan
    split = scn.split
    params, expert_params = stage_params_of(model, plan, split)
    return memory_terms(context_parallel(scn), params, expert_params, trainable_of(model, plan, split, params))
