"""What the planner may choose (`SearchSpace`: a tuple fixes a dimension, None searches it all; the
objective, the memory headroom, the execution flags of the runs planned) and the columns every
candidate plan is given in (`COLUMNS`; schedules and recomputation as codes, `SCHEDULE_NAMES` and
`RECOMPUTE_NAMES` their names). What the stack of the runs can do beyond the layout (recompute the
first layers of each chunk whole, shard over a group and replicate across) is its framework
preset's (`search_features`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from shardwise.errors import SpecError
from shardwise.specs import Recompute, Schedule

OBJECTIVES = ("time", "throughput-per-gpu")

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
    "recompute_layers",
    "shard_group",
)
SCHEDULE_NAMES = {int(s): s.label for s in Schedule}
RECOMPUTE_NAMES = {int(r): r.label for r in Recompute}


# the dimensions a tuple of values fixes (None: searched)
CHOICE_FIELDS = (
    *("tp", "pp", "dp", "vpp", "micro_batch", "schedule", "recompute", "sequence_parallel", "zero_stage"),
    *("ep", "cp", "shard_group", "hybrid_zero"),
)


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
    # layers of each model chunk recomputed whole (`Plan.recompute_layers`): None searches, where the
    # stack does it (`search_features`), the smallest count that fits for each plan; a number fixes it
    recompute_layers: int | None = None
    # hybrid sharding's group (`Plan.shard_group`; 0: every dp x cp rank): None searches full sharding
    # and, where the stack does it at the plan's ZeRO stage, one server's ranks; a tuple fixes the sizes
    shard_group: tuple[int, ...] | None = None
    # the ZeRO stages at which hybrid sharding is searched (None: the stack's `hybrid_shard`)
    hybrid_zero: tuple[int, ...] | None = None
    max_tp: int | None = None
    tp_within_node: bool = True
    max_micro_batch: int = 16  # unless micro_batch is fixed
    max_vpp: int = 8  # unless vpp is fixed
    zero_with_pipeline: bool = False  # allow ZeRO-2/3 with pp > 1 (FSDP2 + PP)
    uneven_stages: bool = True  # pp need not divide the layers (the split is searched)
    memory_headroom_bytes: float = 0.0  # keep this much of each GPU's memory free
    objective: str = "time"  # or "throughput-per-gpu" (may then use fewer GPUs, whole servers)
    precision: str = "bf16"
    # execution details of the runs being planned (as in Plan; lora_rank too); with `stack` given and
    # this empty, the stack's own (`stack_execution`)
    execution: dict[str, bool | int | str] = field(default_factory=dict)
    # the execution flags that differ where a candidate runs sequence parallelism, as a request
    # fixing SP resolves them (`requests.plan_build.execution_kwargs`: nanotron's host count of its
    # asynchronous REDUCE_SCATTER linears); each candidate takes them by its own SP (`for_candidates`)
    execution_sp: dict[str, bool | int | float | str] = field(default_factory=dict)
    # the framework as the user named it, a preset's name or a framework file's path, for what its
    # preset states beyond the Plan fields (`stack_of`; "": `execution`'s framework)
    stack: str = ""

    def __post_init__(self) -> None:
        for name in CHOICE_FIELDS:  # one value fixes the dimension to it; a list or an array is a tuple
            value = getattr(self, name)
            if isinstance(value, (list, np.ndarray)):
                object.__setattr__(self, name, tuple(np.asarray(value).tolist()))
            elif value is not None and not isinstance(value, tuple):
                object.__setattr__(self, name, (value.item() if isinstance(value, np.generic) else value,))
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
        for v in self.hybrid_zero or ():
            if v not in (1, 2, 3):
                raise SpecError(f"plan: hybrid sharding at ZeRO stage {v} is not allowed; choose 1, 2 or 3")
        if self.recompute_layers is not None and (isinstance(self.recompute_layers, bool) or self.recompute_layers < 0):
            raise SpecError(
                f"plan: recompute_layers {self.recompute_layers!r} is not allowed; give a whole number >= 0 "
                "(0: none), or leave it out to search"
            )
        for v in self.shard_group or ():
            if isinstance(v, bool) or v < 0:
                raise SpecError(f"plan: shard_group {v!r} is not allowed; give whole numbers >= 0 (0: every dp rank)")
        if self.stack:
            if not self.execution and not self.execution_sp:
                object.__setattr__(self, "execution_sp", stack_execution_sp(self.stack))
            object.__setattr__(self, "execution", stack_execution(self.stack, self.execution, self.precision))

    def features(self) -> tuple[bool, tuple[int, ...]]:
        """(whether the smallest count of layers recomputed whole that fits is searched, the ZeRO
        stages at which a server-sized shard group is searched): the stack's preset's
        (`presets.framework_plan_search`), narrowed by what is fixed."""
        return search_features(self)


def stack_execution(stack: str, execution: dict[str, bool | int | str], precision: str) -> dict[str, bool | int | str]:
    """The execution flags of the runs planned on `stack`: `execution` where it is that stack's
    (its `framework` the stack's name), the stack's own where it is empty (`presets.framework`, as
    `plan` gives them: ZeRO searched, the gradient accumulation's bytes at `precision`). One naming
    another framework, or none (Plan's defaults, Megatron-Core's), is refused: the search would
    read one stack's defaults and price the plans with another's flags."""
    from shardwise import presets

    flags = presets.framework(stack)
    if not execution:
        out = {k: v for k, v in flags.items() if k != "zero_stage"}  # the ZeRO stage is searched
        accumulate = presets.framework_accumulate_bytes(stack, precision)
        if accumulate is not None:
            out["unfused_accumulate_bytes"] = accumulate
        return out
    named = str(execution.get("framework", "megatron-core"))
    if named != flags["framework"]:
        raise SpecError(
            f"plan: execution's framework is {named!r} but the stack searched by is {stack!r} ({flags['framework']}); "
            "give execution=presets.framework(stack) (without zero_stage), or leave execution empty"
        )
    return execution


def stack_execution_sp(stack: str) -> dict[str, bool | int | float | str]:
    """The stack's own flags for the candidates that run sequence parallelism (`stack_execution`'s
    twin): its second host count where its linears then run asynchronously
    (`presets.stack_defaults.framework_async_sp_host_ops`), as `requests.plan_build.execution_kwargs`
    gives a request that fixes SP."""
    from shardwise import presets
    from shardwise.presets.stack_defaults import framework_async_sp_host_ops

    async_sp = framework_async_sp_host_ops(stack)
    return {"layer_host_ops": async_sp} if async_sp is not None and presets.framework(stack)["async_tp_grad"] else {}


def for_candidates(
    execution: dict[str, bool | int | str], execution_sp: dict[str, bool | int | float | str], sp: np.ndarray | bool
) -> dict[str, object]:
    """`execution` with each of `execution_sp`'s flags taken where the candidate runs sequence
    parallelism (`sp`, one per candidate, or one bool): every candidate priced as `predict` prices
    it with that SP (`requests.plan_build.execution_kwargs`)."""
    if not execution_sp:
        return dict(execution)
    on = np.asarray(sp, dtype=bool)
    out: dict[str, object] = dict(execution)
    for k, v in execution_sp.items():
        base = execution.get(k, 0.0 if isinstance(v, (int, float)) and not isinstance(v, bool) else False)
        out[k] = (v if bool(on) else base) if on.ndim == 0 else np.where(on, v, base)
    return out


def stack_of(space: SearchSpace) -> str:
    """The framework preset (a name) or file (a path) the planned runs use: what its preset's
    lookups take (`presets.stack_defaults`)."""
    return space.stack or str(space.execution.get("framework") or "megatron-core")


def search_features(space: SearchSpace) -> tuple[bool, tuple[int, ...]]:
    from shardwise import presets

    blocks, hybrid = presets.framework_plan_search(stack_of(space))
    if space.hybrid_zero is not None:
        hybrid = space.hybrid_zero
    return blocks and space.recompute_layers is None, hybrid if space.shard_group is None else ()


def pipeline_zero_stages(space: SearchSpace) -> tuple[int, ...] | None:
    """The ZeRO stages the planned stack runs under a pipeline, whatever --zero-with-pp says (its
    preset's `pipeline_zero_stages`: Colossal-AI's HybridParallelPlugin and DeepSpeed's PipelineEngine
    assert ZeRO <= 1 there); None: the stack states no such limit."""
    from shardwise.presets.stack_defaults import framework_pipeline_zero_stages

    return framework_pipeline_zero_stages(stack_of(space))
