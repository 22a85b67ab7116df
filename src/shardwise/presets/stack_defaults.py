"""What a framework preset states about a layout the user leaves open: the pipeline schedule its
trainer runs by default and whether its tensor parallelism runs with sequence parallelism, and the
host count of the other linear-layer mode it offers. Request-layer defaults, not `Plan` fields: a
flag given (`--schedule`, `--sequence-parallel`) wins, and without them the project's defaults
hold (1F1B, interleaved with --vpp > 1; sequence parallelism wherever tp > 1).

nanotron states both: `ParallelismArgs.__post_init__` (huggingface/nanotron
src/nanotron/config/parallelism_config.py, the same in v0.4, v0.5, 0e0a27ea of February 2025 and
main of 2026) sets `pp_engine = AllForwardAllBackwardPipelineEngine()` (every micro-batch's forward,
then every backward: GPipe's order, `Schedule.GPIPE`, at pp = 1 too),
`tp_mode = TensorParallelLinearMode.ALL_REDUCE` (no sequence parallelism) and
`tp_linear_async_communication = False` when a config leaves them out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardwise.errors import SpecError

DEFAULT_FIELDS = (
    "schedule",
    "pipeline_schedule",
    "sequence_parallel",
    "layer_host_ops_async_sp",
    "zero_stages",
    "pipeline_zero_stages",
    "schedules",
    "model_parallel",
    "default_recompute",
    "default_recompute_every",
)
# what a stack's trainer recomputes when its config leaves activation checkpointing out
RECOMPUTE_MODES = ("none", "selective", "full")
# the model-parallel axes a stack may implement (`model_parallel`): tensor, pipeline and context parallelism
AXIS_NAMES = {"tp": "tensor", "pp": "pipeline", "cp": "context"}
MODEL_PARALLEL_AXES = tuple(AXIS_NAMES)
# a preset's default schedule: one that needs no --vpp; the schedules a stack may implement
PRESET_SCHEDULES = ("gpipe", "1f1b", "zb-h1")
ALL_SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1")
MAX_HOST_OPS = 10_000


def check_default_fields(key: str, data: dict[str, Any]) -> None:
    """One line naming the field and what is allowed, for a preset's default fields."""
    for field in ("schedule", "pipeline_schedule"):
        schedule = data.get(field)
        if schedule is not None and schedule not in PRESET_SCHEDULES:
            allowed = ", ".join(PRESET_SCHEDULES)
            raise SpecError(f"framework {key!r}: {field}: {schedule!r} is not allowed; choose {allowed}")
    if "sequence_parallel" in data and not isinstance(data["sequence_parallel"], bool):
        value = data["sequence_parallel"]
        raise SpecError(f"framework {key!r}: sequence_parallel: {value!r} is not allowed; give true or false")
    schedules = data.get("schedules")
    if schedules is not None and (
        not isinstance(schedules, list) or not schedules or any(v not in ALL_SCHEDULES for v in schedules)
    ):
        allowed = ", ".join(ALL_SCHEDULES)
        raise SpecError(f"framework {key!r}: schedules: {schedules!r} is not allowed; give a list of {allowed}")
    for field in ("zero_stages", "pipeline_zero_stages"):
        stages = data.get(field)
        if stages is not None and (
            not isinstance(stages, list)
            or not stages
            or any(isinstance(v, bool) or v not in (0, 1, 2, 3) for v in stages)
        ):
            raise SpecError(f"framework {key!r}: {field}: {stages!r} is not allowed; give a list of 0, 1, 2 or 3")
    axes = data.get("model_parallel")
    if axes is not None and (not isinstance(axes, list) or any(v not in MODEL_PARALLEL_AXES for v in axes)):
        allowed = ", ".join(MODEL_PARALLEL_AXES)
        raise SpecError(f"framework {key!r}: model_parallel: {axes!r} is not allowed; give a list of {allowed} (or [])")
    recompute = data.get("default_recompute")
    if recompute is not None and recompute not in RECOMPUTE_MODES:
        allowed = ", ".join(RECOMPUTE_MODES)
        raise SpecError(f"framework {key!r}: default_recompute: {recompute!r} is not allowed; choose {allowed}")
    every = data.get("default_recompute_every")
    if every is not None and (isinstance(every, bool) or not isinstance(every, int) or every < 1):
        raise SpecError(
            f"framework {key!r}: default_recompute_every: {every!r} is not allowed; give a whole number >= 1 "
            "(every N-th layer recomputed whole)"
        )
    if "layer_host_ops_async_sp" in data:
        value = data["layer_host_ops_async_sp"]
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= MAX_HOST_OPS:
            raise SpecError(
                f"framework {key!r}: layer_host_ops_async_sp: {value!r} is not allowed; "
                f"give host operations per layer, 0-{MAX_HOST_OPS}"
            )


def framework_pipeline_split(name: str) -> str:
    """How the framework splits the layers over pipeline stages when the plan gives no split
    (`PIPELINE_SPLITS`; "even" where the preset says nothing). A request-layer default, not a
    `Plan` field."""
    from shardwise import presets

    return str(presets._checked_framework(name).get("pipeline_split", "even"))


def framework_plan_search(name: str) -> tuple[bool, tuple[int, ...]]:
    """What `plan` searches on the framework beyond the layout: whether it recomputes the first N
    layers of each model chunk whole (`block_recompute`), and the ZeRO stages it runs with hybrid
    sharding (`hybrid_shard`); (False, ()) where the preset says nothing."""
    from shardwise import presets

    data = presets._checked_framework(name)
    return bool(data.get("block_recompute", False)), tuple(int(z) for z in data.get("hybrid_shard", []))


def framework_zero_stages(name: str) -> tuple[int, ...] | None:
    """The ZeRO stages the stack implements, which the planner searches when none is given (None:
    all four). nanotron: 0 and 1 (helpers.py `init_optimizer_and_grad_accumulator`: any
    zero_stage > 0 builds its ZeroDistributedOptimizer, which shards the optimizer state only)."""
    from shardwise import presets

    value = presets._checked_framework(name).get("zero_stages")
    return None if value is None else tuple(int(v) for v in value)


def framework_pipeline_zero_stages(name: str) -> tuple[int, ...] | None:
    """The ZeRO stages the stack runs under a pipeline (pp > 1), where fewer than without one (None:
    its `zero_stages`): Colossal-AI's HybridParallelPlugin asserts zero_stage <= 1 when pp_size > 1,
    DeepSpeed's PipelineEngine "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism". The
    planner searches no other stage with a pipeline, --zero-with-pp or not."""
    from shardwise import presets

    value = presets._checked_framework(name).get("pipeline_zero_stages")
    return None if value is None else tuple(int(v) for v in value)


def framework_schedules(name: str) -> tuple[str, ...] | None:
    """The pipeline schedules the stack implements, which the planner searches when none is given
    (None: all four). nanotron: gpipe and 1f1b (pipeline_parallel/engine.py has
    AllForwardAllBackwardPipelineEngine and OneForwardOneBackwardPipelineEngine, no interleaving,
    no split backward)."""
    from shardwise import presets

    value = presets._checked_framework(name).get("schedules")
    return None if value is None else tuple(str(v) for v in value)


def framework_degrees(name: str | None, axis: str) -> tuple[int, ...] | None:
    """The `axis` ("tp", "pp" or "cp") degrees the planner searches on the stack when none is given:
    (1,) where its preset's `model_parallel` leaves the axis out (Composer: FSDP1 and tensor
    parallelism, no pipeline or context parallelism), None (any) otherwise."""
    from shardwise import presets

    axes = presets._checked_framework(name or "megatron-core").get("model_parallel")
    return None if axes is None or axis in axes else (1,)


def missing_axes(name: str, plan: object) -> str:
    """The model-parallel axes `plan` uses (degree > 1) that the stack does not implement, in words
    ("tensor parallelism (tp=2)"); "" for none."""
    out = [
        f"{AXIS_NAMES[axis]} parallelism ({axis}={int(getattr(plan, axis))})"
        for axis in MODEL_PARALLEL_AXES
        if int(getattr(plan, axis)) > 1 and framework_degrees(name, axis) is not None
    ]
    return " or ".join(out)


# the stacks whose pipeline runs on DeepSpeed's PipelineEngine, which asserts "ZeRO-2 and ZeRO-3 are
# incompatible with pipeline parallelism" (deepspeed/runtime/pipe/engine.py; `emit.deepspeed` re-prices them)
PIPE_ENGINE_STACKS = ("deepspeed", "megatron-deepspeed")


def builtin_of(name: str) -> str:
    """The built-in preset a framework is, or that a framework file starts from (its `like:`; a
    file without one: its path), for the tables keyed by a built-in's name."""
    from shardwise import presets

    return str(presets._checked_framework(name).get("like", name))


# how a note on the preset's default ZeRO-2/3 under DeepSpeed's PipelineEngine ends (`not_in_stack`)
ZERO1_HINT = " (--zero 1 prices what runs)"


def pipe_engine_zero(name: str, plan: Any) -> bool:
    """Whether `plan` runs ZeRO-2/3 under DeepSpeed's PipelineEngine (pp > 1, data-parallel ranks that
    shard), which asserts "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"
    (deepspeedai/DeepSpeed deepspeed/runtime/pipe/engine.py, PipelineEngine.__init__)."""
    sharded = int(plan.dp) * int(plan.cp) > 1
    return builtin_of(name) in PIPE_ENGINE_STACKS and int(plan.pp) > 1 and int(plan.zero_stage) >= 2 and sharded


def not_in_stack(name: str, plan: Any, *, searched: bool = False, shown_as: str = "", zero_asked: bool = True) -> str:
    """What of `plan` the stack `name` does not implement, in words ("" for nothing): the
    model-parallel axes its preset's `model_parallel` leaves out, a ZeRO stage outside its
    `zero_stages` (or, under a pipeline, its `pipeline_zero_stages`), a pipeline schedule outside its
    `schedules` under a pipeline. A request's note
    (`searched` False) names what was asked beside what the stack runs, a ZeRO stage only where the
    data-parallel ranks shard anything (dp x cp > 1), and ZeRO-2/3 under DeepSpeed's pipeline
    engine; the planner's reason why its search left a plan out (`searched` True) names what the
    stack runs ("... only"), for every ZeRO stage outside it (the search's own limit on ZeRO with a
    pipeline, `--zero-with-pp`, is the planner's). `shown_as`: the stack's name in the words where
    `name` is a framework file's path (its `Plan.framework`). `zero_asked` False: the ZeRO stage is the
    preset's default, not a --zero the user gave, and the words say so (review 47 #9)."""
    from shardwise.specs import Schedule

    shown = shown_as or name

    gaps: list[str] = []  # every one, in this order (review 49 #6: a ZeRO note hid the schedule's)
    axes = missing_axes(name, plan)
    if axes:
        gaps.append(f"{shown} runs no {axes}")
    stages, schedules = framework_zero_stages(name), framework_schedules(name)
    piped = framework_pipeline_zero_stages(name)
    zero, pp = int(plan.zero_stage), int(plan.pp)
    sharded = searched or int(plan.dp) * int(plan.cp) > 1
    if stages is not None and zero not in stages and sharded:
        listed = ", ".join(str(z) for z in stages)
        gaps.append(f"{shown} implements ZeRO {listed}" + (" only" if searched else f", not ZeRO-{zero}"))
    elif not searched and pipe_engine_zero(name, plan):
        engine = f"{shown}'s pipeline engine allows ZeRO-1 at most (DeepSpeed's PipelineEngine asserts)"
        if not zero_asked:
            gaps.append(f"{engine}, not the preset's default ZeRO-{zero}; priced at ZeRO-{zero}{ZERO1_HINT}")
        else:
            gaps.append(f"{engine}, not ZeRO-{zero}")
    elif piped is not None and pp > 1 and zero not in piped and sharded:
        listed = ", ".join(str(z) for z in piped)
        gaps.append(f"{shown} runs ZeRO {listed} under a pipeline" + (" only" if searched else f", not ZeRO-{zero}"))
    label = Schedule(int(plan.schedule)).label
    if schedules is not None and pp > 1 and label not in schedules:
        listed, noun = ", ".join(schedules), "schedules" if len(schedules) > 1 else "schedule"
        gaps.append(f"{shown} runs the {listed} " + (f"{noun} only" if searched else f"pipeline {noun}, not {label}"))
    return "; ".join(gaps)


def framework_schedule(name: str, pp: int = 1) -> str | None:
    """The framework's default schedule at `pp` stages (None: the project's, 1F1B): `schedule` at
    any pp (nanotron's AllForwardAllBackward engine runs its order at pp 1 too), `pipeline_schedule`
    under a pipeline only, where a stack with no pipeline accumulates one micro-batch's forward and
    backward at a time (MaxText's and Paxml's gradient accumulation, a scan over the micro-batches;
    their pipelines a forward loop differentiated whole: GPipe)."""
    from shardwise import presets

    data = presets._checked_framework(name)
    value = data.get("pipeline_schedule") if pp > 1 else None
    value = value or data.get("schedule")
    return None if value is None else str(value)


def framework_sequence_parallel(name: str) -> bool | None:
    """Whether the framework's tensor parallelism runs with sequence parallelism by default (None:
    the project's default, on wherever tp > 1)."""
    from shardwise import presets

    value = presets._checked_framework(name).get("sequence_parallel")
    return None if value is None else bool(value)


def framework_async_sp_host_ops(name: str) -> float | None:
    """The framework's host operations per layer and micro-batch when its linears run with sequence
    parallelism and asynchronous communication (`layer_host_ops` counts its default mode); None
    where it states no second count."""
    from shardwise import presets

    value = presets._checked_framework(name).get("layer_host_ops_async_sp")
    return None if value is None else float(value)


def framework_recompute(name: str | None) -> str:
    """What the stack's trainer recomputes when its config leaves activation checkpointing out
    (`default_recompute`; "none" where the preset says nothing): MaxText's base.yml remat_policy
    'full', Paxml's repeated layers under SAVE_NOTHING, torchtitan main's per-op SelectiveAC
    (pytorch/torchtitan#2357). A request-layer default: --recompute wins."""
    from shardwise import presets

    return str(presets._checked_framework(name or "megatron-core").get("default_recompute", "none"))


def framework_recompute_every(name: str | None) -> int:
    """N where the stack's default checkpoints every N-th layer whole (torchtitan's job config before
    pytorch/torchtitan#2357: activation_checkpoint mode "selective", selective_ac_option "2"; no
    built-in preset since, a framework file's field); 0 where the preset says nothing."""
    from shardwise import presets

    return int(presets._checked_framework(name or "megatron-core").get("default_recompute_every", 0))


@dataclass(frozen=True)
class RecomputeChoice:
    """What a training step recomputes and where that came from (`resolve_recompute`): the one
    reading of a stack's default that predict, timeline, crossover, sweep, sensitivity and --emit
    share. `mode`: none | selective | full; `every`: N where every N-th layer of a dense model is
    recomputed whole by the stack's default (a framework file's `default_recompute_every`:
    torchtitan's job config before pytorch/torchtitan#2357, selective_ac_option "2"), else 0;
    `source`: "--recompute", "--recompute-layers" (the mode the stack's, the layers given) or
    "framework default"; `framework`: the stack's name as shown."""

    mode: str
    every: int
    source: str
    framework: str

    def layers(self, layers: Any, pp: Any, vpp: Any = 1, moe: bool = False) -> Any:
        """The layers of each model chunk recomputed whole under `every` (arrays allowed):
        floor(layers of a chunk of the even split / N); 0 without it, and for a mixture of experts
        (layers recomputed whole are priced for dense models only, `rules.recompute_layers_rule`).
        Which layers of a chunk does not change the step time or the memory (`Plan.recompute_layers`)."""
        from shardwise.specs.stages import every_nth_whole

        return 0 if moe else every_nth_whole(layers, pp, vpp, self.every)

    def words(self, recomputed_layers: Any = None) -> str:
        """The mode in a header's words: "none", "full (maxtext's default)", "every second layer
        whole (torchtitan-before-2357's default)"; `recomputed_layers`: the plan's count where known
        (0: the every-N-th-layer default was not priced, a mixture of experts)."""
        import numpy as np

        own = "" if self.source != "framework default" else f" ({self.framework}'s default)"
        priced = recomputed_layers is None or bool(np.any(np.asarray(recomputed_layers) > 0))
        if self.every and priced:
            nth = "second" if self.every == 2 else f"{self.every}-th"
            return f"every {nth} layer whole{own}"
        if self.every:
            nth = "second" if self.every == 2 else f"{self.every}-th"
            return f"{self.mode} ({self.framework}'s every-{nth}-layer default not priced for a mixture of experts)"
        return f"{self.mode}{own}"

    def as_dict(self) -> dict[str, Any]:
        """What a command's JSON says of the recompute it priced (`recompute_source` and the rest)."""
        return {"recompute": self.mode, "recompute_every": self.every, "recompute_source": self.source}


def resolve_recompute(name: str | None, given: str | None = None, recompute_layers: Any = 0) -> RecomputeChoice:
    """What a training step of stack `name` recomputes: `given` (--recompute) where given, else the
    stack's default mode (`framework_recompute`), with its every-N-th-layer default
    (`framework_recompute_every`) only where neither --recompute nor --recompute-layers is given."""
    from shardwise import presets

    shown = str(presets.framework(name or "megatron-core")["framework"])
    if given is not None:
        return RecomputeChoice(str(given), 0, "--recompute", shown)
    mode = framework_recompute(name)
    if recompute_layers:
        return RecomputeChoice(mode, 0, "--recompute-layers", shown)
    return RecomputeChoice(mode, framework_recompute_every(name), "framework default", shown)


def recompute_origin(name: str | None, given: str | None, recompute_layers: int = 0, plan: Any = None) -> str:
    """Where a plan's recompute mode came from, in words, where it is not what the user asked nor
    "none": "maxtext's default; --recompute none to turn it off" ("" otherwise), with --recompute-layers
    too (the mode is still the stack's). `recompute_layers`: the --recompute-layers given (the stack's
    every-N-th-layer default applies only without it);
    `plan`: the plan priced (a mixture of experts takes no every-N-th-layer default)."""
    choice = resolve_recompute(name, given, recompute_layers)
    if choice.source == "--recompute":  # --recompute-layers keeps the stack's mode (torchtitan's selective)
        return ""
    whole = None if plan is None else plan.recompute_layers
    if choice.mode == "none" and (choice.every == 0 or (whole is not None and int(whole) == 0)):
        return ""
    if choice.mode != "none":
        return f"{choice.framework}'s default; --recompute none to turn it off"
    nth = "second" if choice.every == 2 else f"{choice.every}-th"
    return f"{choice.framework}'s default, every {nth} layer recomputed whole; --recompute none to turn it off"
