"""The planner against what the published runs chose (Narayanan et al. 2021 Table 1, Korthikanti
et al. 2022 Table 5): for each run, the same model, GPUs and global batch, searched with the
features its Megatron-LM had, and the planner's best plan beside the published one.

Features of the time (so the comparison is about the layout, not about later inventions):
- Narayanan et al. 2021: 1F1B or interleaved schedules, no or full recomputation, no sequence
  parallelism, no ZeRO (Megatron-LM 2021), fp16, standard attention, and the run's own
  communication settings (validation_runs.yaml);
- Korthikanti et al. 2022: the same plus selective recomputation and sequence parallelism, bf16.
Both keep tp inside a server, as the papers do.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardwise.analyses.plan_explain import compare
from shardwise.analyses.planner import SearchSpace, search
from shardwise.analyses.validation import CITATIONS, measured_runs, plan_label, scenario_for
from shardwise.engines.training import estimate_training_step
from shardwise.specs import Plan, Scenario
from shardwise.specs.plan import EXECUTION_FLAGS

TABLES = ("narayanan21_table1", "korthikanti22_table5")
ERA = {
    "narayanan21_table1": {"recompute": ("none", "full"), "sequence_parallel": (False,)},
    "korthikanti22_table5": {"recompute": ("none", "selective", "full"), "sequence_parallel": (False, True)},
}
EXECUTION = ("flash_attention", *EXECUTION_FLAGS)


@dataclass(frozen=True)
class Choice:
    """The planner's best plan under one set of freedoms, against the published plan."""

    plan: str
    step_s: float
    same: bool  # the published layout (tp, pp, dp, v, micro-batch, recompute, SP)
    why: str  # where the published plan loses (or gains) against this one

    def gain(self, published_step_s: float) -> float:
        """Predicted speed-up of this plan over the published one."""
        return published_step_s / self.step_s - 1.0


@dataclass(frozen=True)
class PlannerRow:
    run_id: str
    model: str
    gpus: int
    global_batch: int
    published: str  # the published plan, short
    published_step_s: float  # its predicted step time
    layout: Choice  # the run's own recomputation and sequence parallelism: only the layout is free
    free: Choice  # every feature of its time free (recomputation, SP where it existed)
    source: str


def _key(plan: Plan) -> tuple[object, ...]:
    return (
        int(plan.tp),
        int(plan.pp),
        int(plan.dp),
        int(plan.vpp),
        int(plan.micro_batch),
        int(plan.recompute),
        bool(plan.sequence_parallel),
    )


def _choose(published: Scenario, era: dict[str, tuple[object, ...]]) -> Choice:
    plan = published.plan
    space = SearchSpace(
        schedule=("1f1b", "interleaved"),
        zero_stage=(0,),
        precision=plan.precision,
        execution={**{k: bool(getattr(plan, k)) for k in EXECUTION}, "framework": plan.framework},
        uneven_stages=False,  # Megatron-LM of the time split the layers evenly
        **era,  # type: ignore[arg-type]
    )
    result = search(published.model, published.cluster, int(plan.global_batch), space)
    mine = result.scenario(int(result.ranked(1)[0]))
    est_pub, est_mine = estimate_training_step(published), estimate_training_step(mine)
    same = _key(plan) == _key(mine.plan)
    why = "the same plan" if same else compare(est_mine, est_pub, float(published.cluster.gpu.memory_bytes))
    return Choice(plan_label(mine.plan, " "), float(np.asarray(est_mine.step_time_s)), same, why)


def compare_run(run_id: str) -> PlannerRow:
    """Search the run's model, GPUs and batch with the features of its time; compare."""
    row = measured_runs()[run_id]
    published = scenario_for(run_id)
    plan = published.plan
    own = {"recompute": (plan.recompute.label,), "sequence_parallel": (bool(plan.sequence_parallel),)}
    return PlannerRow(
        run_id=run_id,
        model=published.model.name,
        gpus=int(np.asarray(plan.num_gpus)),
        global_batch=int(plan.global_batch),
        published=plan_label(plan, " "),
        published_step_s=float(np.asarray(estimate_training_step(published).step_time_s)),
        layout=_choose(published, own),
        free=_choose(published, ERA[row["group"]]),
        source=CITATIONS[row["group"]],
    )


def compare_published() -> list[PlannerRow]:
    """Every run of both tables."""
    return [compare_run(run_id) for run_id, row in measured_runs().items() if row["group"] in TABLES]
