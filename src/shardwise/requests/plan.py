"""The planner's questions as requests: every plan a search ranks is also a `PredictRequest`, so
a plan row and its `predict` command give the same numbers by construction (a test compares
them on dense, mixture-of-experts, context-parallel and uneven-stage plans).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, fields, replace
from typing import Any

from shardwise.requests.plan_result import NothingFits, PlanResult, nothing_fits, with_intervals
from shardwise.requests.training import PLAN_MEMORY_HEADROOM, PredictRequest, TrainingRequest, checked_emit
from shardwise.units import share_or_bytes

# the fields of a request that say where and how the plans run (kept from the plan's own request);
# the layout fields are the row's
LAYOUT_FIELDS = (
    *("tp", "pp", "dp", "cp", "ep", "etp", "vpp", "micro_batch", "schedule", "recompute"),
    *("sequence_parallel", "zero", "first_stage_layers", "last_stage_layers", "stage_layers"),
    *("recompute_layers", "shard_group", "nodes", "num_gpus", "global_batch"),
)
# what each --emit target runs of the searched features: (the first N layers of each chunk recomputed
# whole, the ZeRO stages it emits with hybrid sharding): Megatron-LM's block recomputation and its
# distributed optimizer's instances (ZeRO-1), torchtitan's HSDP mesh (its FSDP2 is ZeRO-3; its
# activation checkpointing takes every layer or every N-th, not the first N); DeepSpeed neither (its
# MiCS needs the model built under MiCS_Init, Megatron-DeepSpeed's pretrain_gpt.py uses zero.Init)
EMIT_FEATURES = {"megatron": (True, (1,)), "torchtitan": (False, (1, 2, 3)), "deepspeed": (False, ())}


def row_request(search: Any, i: int, base: TrainingRequest) -> PredictRequest:
    """The `predict` request of plan `i` of a `plan_search.PlanSearch` run for `base` (the model, the
    cluster and the stack the plan command was given): the row's layout written out in full --
    expert TP, sequence parallelism and the ZeRO stage explicit, the GPUs it uses, and the
    simulator where the planner re-timed the plan with it."""
    from shardwise.analyses.plan_space import RECOMPUTE_NAMES, SCHEDULE_NAMES, expert_tp
    from shardwise.requests.plan_build import default_schedule, default_sequence_parallel

    c = {k: v[i].item() for k, v in search.columns.items()}
    kept = {k: v for k, v in base.values().items() if k not in LAYOUT_FIELDS}
    gpus = int(c["gpus"])
    if gpus == int(search.cluster.num_gpus) and (base.nodes is not None or base.num_gpus is not None):
        kept.update(nodes=base.nodes, num_gpus=base.num_gpus)  # all the GPUs, in the user's words
    else:
        kept.update(num_gpus=gpus)
    sp = bool(c["sequence_parallel"])
    etp = expert_tp(search.model)
    vpp = int(c["vpp"])
    schedule = SCHEDULE_NAMES[int(c["schedule"])]
    recompute = RECOMPUTE_NAMES[int(c["recompute"])]
    if recompute != "selective":  # Megatron-Core's modules are selective recomputation's (`Plan.recompute_modules`)
        kept["recompute_modules"] = None
        kept["selective_policy"] = None  # as is what selective recomputation keeps
    if recompute != "full":  # DeepSpeed partitions full recomputation's checkpoints (`Plan.partition_activations`)
        kept["partition_activations"] = None
    if int(c["cp"]) == 1:  # how CP ranks exchange keys and values: none without CP
        kept.pop("cp_comm", None)
    request = TrainingRequest(
        **kept,
        global_batch=int(search.global_batch),
        tp=int(c["tp"]),
        pp=int(c["pp"]),
        dp=int(c["dp"]),
        cp=int(c["cp"]),
        ep=int(c["ep"]),
        etp=etp or None,
        vpp=vpp,
        micro_batch=int(c["micro_batch"]),
        schedule=None if schedule == default_schedule({**kept, "vpp": vpp, "pp": int(c["pp"])}) else schedule,
        recompute=recompute,
        # the default where it agrees (the framework's, `requests.plan_build`)
        sequence_parallel=None if sp == default_sequence_parallel({**kept, "tp": int(c["tp"])}) else sp,
        zero=int(c["zero_stage"]),
        first_stage_layers=int(c["first_stage_layers"]) or None,
        last_stage_layers=int(c["last_stage_layers"]) or None,
        recompute_layers=int(c["recompute_layers"]),
        shard_group=int(c["shard_group"]),
    )
    simulated = search.simulated is not None and bool(search.simulated[i])
    return PredictRequest(request, "simulate" if simulated else "analytic")


# --- `shardwise plan` as a request -------------------------------------------------------------

SEARCHED_INTS = ("tp", "pp", "dp", "vpp", "cp", "ep", "micro_batch", "zero")
SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1")
RECOMPUTES = ("none", "selective", "full")
OBJECTIVES = ("time", "throughput-per-gpu")


def _ints(name: str, value: Any) -> tuple[int, ...] | None:
    """A searched dimension: None (searched), or the values it is fixed to ('4,8', 4 or (4, 8))."""
    from shardwise.errors import SpecError
    from shardwise.specs._checks import MAX_WHOLE, whole_range

    if value is None or value == "":
        return None
    items = value.split(",") if isinstance(value, str) else value if isinstance(value, (tuple, list)) else [value]
    flag = "--" + name.replace("_", "-")
    try:
        out = tuple(int(str(v).strip()) for v in items)
    except ValueError:
        raise SpecError(f"{flag}: {value!r}: give whole numbers separated by commas, e.g. 4,8") from None
    low, high = (0, 3) if name == "zero" else (0, MAX_WHOLE) if name == "shard_group" else (1, MAX_WHOLE)
    if not out or any(v < low or v > high for v in out):
        too_big = next((v for v in out if v > high), 0)
        allowed = "0, 1, 2 or 3" if name == "zero" else f"whole numbers {whole_range(too_big, low)}"
        raise SpecError(f"{flag}: {value!r}: values must be {allowed}")
    return out


def _names(name: str, value: Any, allowed: tuple[str, ...]) -> tuple[str, ...] | None:
    from shardwise.errors import SpecError

    if value is None or value == "":
        return None
    items = value.split(",") if isinstance(value, str) else value
    out = tuple(str(v).strip().lower() for v in items)
    bad = [v for v in out if v not in allowed]
    if bad or not out:
        flag = "--" + name.replace("_", "-")
        raise SpecError(f"{flag}: {bad[0] if bad else value!r} is not allowed; choose from {', '.join(allowed)}")
    return out


@dataclass(frozen=True)
class PlanRequest:
    """`shardwise plan`: search every layout of `training`'s model on its cluster for a global
    batch. `training` gives the model, the cluster and the stack (its layout fields are not read);
    a tuple fixes a searched dimension to those values, None searches it."""

    training: TrainingRequest
    global_batch: int
    tp: tuple[int, ...] | None = None
    pp: tuple[int, ...] | None = None
    dp: tuple[int, ...] | None = None
    vpp: tuple[int, ...] | None = None
    cp: tuple[int, ...] | None = None
    ep: tuple[int, ...] | None = None
    micro_batch: tuple[int, ...] | None = None
    zero: tuple[int, ...] | None = None
    schedule: tuple[str, ...] | None = None
    recompute: tuple[str, ...] | None = None
    recompute_layers: int | None = None  # None: the smallest count that fits, where the stack does it
    shard_group: tuple[int, ...] | None = None  # None: full, and a server's ranks where the stack does it
    sequence_parallel: str = "any"
    zero_with_pp: bool = False
    max_tp: int | None = None
    tp_within_node: bool = True
    max_micro_batch: int = 16
    max_vpp: int = 8
    memory_headroom: str = PLAN_MEMORY_HEADROOM
    objective: str = "time"
    top: int = 5
    emit: str | None = None
    emit_version: str | None = None

    def __post_init__(self) -> None:
        from shardwise.errors import SpecError
        from shardwise.requests.field_ranges import require

        require(self, "training", TrainingRequest)
        from shardwise.specs._checks import MAX_WHOLE, whole_range

        for name in SEARCHED_INTS:
            object.__setattr__(self, name, _ints(name, getattr(self, name)))
        object.__setattr__(self, "schedule", _names("schedule", self.schedule, SCHEDULES))
        object.__setattr__(self, "recompute", _names("recompute", self.recompute, RECOMPUTES))
        object.__setattr__(self, "shard_group", _ints("shard_group", self.shard_group))
        rl = self.recompute_layers
        if rl is not None and (isinstance(rl, bool) or not isinstance(rl, int) or not 0 <= rl <= MAX_WHOLE):
            raise SpecError(
                f"--recompute-layers: {rl!r} is not allowed; give a whole number {whole_range(rl, 0)} "
                "(0: none), or leave it out to search"
            )
        for name in ("global_batch", "max_micro_batch", "max_vpp", "top", "max_tp"):
            value = getattr(self, name)
            if value is None and name == "max_tp":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WHOLE:
                flag = "--" + name.replace("_", "-")
                raise SpecError(f"{flag}: {value!r} is not allowed; it must be a whole number {whole_range(value, 1)}")
        if self.sequence_parallel not in ("on", "off", "any"):
            raise SpecError(f"--sequence-parallel: {self.sequence_parallel!r} is not allowed; use on, off or any")
        if self.objective not in OBJECTIVES:
            raise SpecError(f"--objective: {self.objective!r} is not allowed; use one of {', '.join(OBJECTIVES)}")
        object.__setattr__(self, "emit", checked_emit(self.emit, self.emit_version, "`plan` lays out training"))

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> PlanRequest:
        """From `plan`'s parsed click options."""
        from shardwise.requests.fields import refuse_empty

        refuse_empty(options)
        own = {f.name for f in fields(cls)} - {"training"}
        skip = {*LAYOUT_FIELDS, "zero"} - {"nodes", "num_gpus"}
        training = TrainingRequest.from_options({k: v for k, v in options.items() if k not in skip})
        return cls(training, **{k: v for k, v in options.items() if k in own})

    @classmethod
    def from_argv(cls, argv: list[str] | tuple[str, ...] | str) -> PlanRequest:
        """From `plan`'s arguments (with or without the leading `shardwise plan`)."""
        from shardwise.requests import fields as F

        args = F.split_argv(argv)
        while args and args[0] in ("shardwise", "plan"):
            args.pop(0)
        args = ["--no-tp-within-node" if a == "--tp-across-nodes" else a for a in args]
        own = {
            **{
                f"--{n.replace('_', '-')}": F.Field(n, "str")
                for n in (*SEARCHED_INTS, "shard_group", "schedule", "recompute")
            },
            "--recompute-layers": F.Field("recompute_layers", "int"),
            "--sequence-parallel": F.Field("sequence_parallel", "str", "any", ("on", "off", "any")),
            **{f"--{n.replace('_', '-')}": F.Field(n, "bool") for n in ("zero_with_pp", "tp_within_node")},
            **{f"--{n.replace('_', '-')}": F.Field(n, "int") for n in ("max_tp", "max_micro_batch", "max_vpp", "top")},
            **{f"--{n.replace('_', '-')}": F.Field(n, "str") for n in ("memory_headroom", "objective", "emit")},
            "--emit-version": F.Field("emit_version", "str"),
        }
        values = F.parse_argv(args, own)
        names = {f.name for f in fields(cls)} - {"training"}
        if values.get("global_batch") is None:
            from shardwise.errors import SpecError

            raise SpecError("--global-batch is required (sequences per optimizer step)")
        training = TrainingRequest(**{k: v for k, v in values.items() if k not in names or k == "global_batch"})
        return cls(training.with_(global_batch=None), **{k: v for k, v in values.items() if k in names})

    def to_argv(self) -> list[str]:
        out = ["plan", *self.training.with_(global_batch=None).to_argv(), "--global-batch", str(self.global_batch)]
        defaults = PlanRequest(TrainingRequest(), 1)
        for f in fields(self):
            if f.name in ("training", "global_batch"):
                continue
            value = getattr(self, f.name)
            if value == getattr(defaults, f.name):
                continue
            flag = "--" + f.name.replace("_", "-")
            if f.name == "tp_within_node":
                out.append("--tp-within-node" if value else "--tp-across-nodes")
            elif isinstance(value, bool):
                out.append(flag)
            elif isinstance(value, tuple):
                out += [flag, ",".join(str(v) for v in value)]
            else:
                out += [flag, str(value)]
        return out

    def command(self) -> str:
        return "shardwise " + shlex.join(self.to_argv())

    def space(self, gpu_memory_bytes: float) -> Any:
        from shardwise import presets
        from shardwise.analyses.plan_space import SearchSpace
        from shardwise.presets.stack_defaults import framework_degrees, framework_schedules, framework_zero_stages
        from shardwise.requests.plan_build import sp_execution

        # what the stack does (its preset), less what the --emit target does not run
        blocks, hybrid = presets.framework_plan_search(self.training.framework or "megatron-core")
        if self.emit is not None:
            emit_blocks, emit_hybrid = EMIT_FEATURES[self.emit]
            blocks, hybrid = blocks and emit_blocks, tuple(z for z in hybrid if z in emit_hybrid)
        if self.training.offload_activations:  # Megatron-Core offloads without recomputation (`rules.offload_rule`)
            blocks = False
        return SearchSpace(
            tp=self.tp if self.tp is not None else framework_degrees(self.training.framework, "tp"),
            pp=self.pp if self.pp is not None else framework_degrees(self.training.framework, "pp"),
            dp=self.dp,
            vpp=self.vpp,
            cp=self.cp if self.cp is not None else framework_degrees(self.training.framework, "cp"),
            ep=self.ep,
            micro_batch=self.micro_batch,
            schedule=self.schedule if self.schedule is not None else framework_schedules(self.training.framework),
            recompute=self.recompute,
            recompute_layers=0 if self.recompute_layers is None and not blocks else self.recompute_layers,
            shard_group=self.shard_group,
            hybrid_zero=hybrid,
            sequence_parallel={"on": (True,), "off": (False,), "any": None}[self.sequence_parallel],
            zero_stage=self.zero if self.zero is not None else framework_zero_stages(self.training.framework),
            zero_with_pipeline=self.zero_with_pp,
            max_tp=self.max_tp,
            tp_within_node=self.tp_within_node,
            max_micro_batch=self.max_micro_batch,
            max_vpp=self.max_vpp,
            memory_headroom_bytes=share_or_bytes("--memory-headroom", self.memory_headroom, gpu_memory_bytes),
            objective=self.objective,
            precision=self.training.precision or "bf16",  # `_search` gives the GPU's (`requests.precision`)
            execution=self._execution(),
            execution_sp=sp_execution({**self.training.values(), "zero": 0}),
            stack=self.training.framework or "megatron-core",
        )

    def _execution(self) -> dict[str, Any]:
        """The framework's execution flags (and those given) for every searched plan; ZeRO is searched."""
        from shardwise.requests.build import execution_kwargs, flash_attention

        out = execution_kwargs({**self.training.values(), "zero": 0})
        out.pop("zero_stage", None)
        out["flash_attention"] = flash_attention(self.training.values())
        out["lora_rank"] = self.training.lora_rank
        out["lora_targets"] = self.training.lora_targets
        out["packed_document_len"] = self.training.packed_document_len
        out["mtp_layers"] = self.training.mtp_layers
        out["pipeline_flushes"] = self.training.pipeline_flushes
        out["offload_activation_layers"] = self.training.offload_activations
        out["offload_optimizer"] = self.training.offload_optimizer
        out["recompute_modules"] = self.training.recompute_modules or ()
        out["cuda_graph_scope"] = self.training.cuda_graph_scope or ()
        return out

    def search(self, fitted: dict[str, float] | None = None) -> Any:
        """The planner's search (`analyses.plan_search.PlanSearch`) on the request's cluster, calibrated
        by its calibration file, else by `fitted` values (`calibration.parameters`)."""
        from shardwise.requests import build

        return self._search(build.load_calibration(self.training.calibration), fitted, [])

    def _search(self, cal: Any, fitted: dict[str, float] | None, notes: list[str]) -> Any:
        from shardwise.analyses.planner import search
        from shardwise.errors import SpecError
        from shardwise.requests import build
        from shardwise.requests.precision import resolved

        layout = {"tp": 1, "pp": 1, "dp": None, "cp": 1, "vpp": 1, "micro_batch": 1, "global_batch": None}
        values = {**self.training.values(), **layout}
        # the --tp values given, which a rack's NVLink domains cut by --num-gpus must admit (`cluster_build`)
        cluster = build.build_cluster({**values, "domain_tp": tuple(self.tp or ())}, notes, cal, training=True)
        if fitted:
            from shardwise.calibration.parameters import apply

            cluster = apply(cluster, fitted)
        from shardwise.requests import attention

        precision = resolved(self.training.precision, cluster.gpu, "--precision", notes if fitted is None else None)
        kernels = attention.changes(values, cluster.gpu, notes if fitted is None else None)  # what runs there
        me = replace(self, training=self.training.with_(precision=precision, **kernels))  # the GPU's 16 bits by default
        space = me.space(float(cluster.gpu.memory_bytes))
        model = build.build_model(values, max(self.tp or (min(cluster.gpus_per_node, cluster.num_gpus),)))
        if fitted is None:  # once, not again for each refit
            notes += build.model_notes(values)
        if not model.is_moe and any(e != 1 for e in self.ep or ()):  # the search has no ep axis for it
            raise SpecError(
                f"--ep {','.join(map(str, self.ep or ()))}: ep needs a mixture-of-experts model; model "
                f"{model.name!r} has no experts (use --ep 1, or leave it out)"
            )
        return search(model, cluster, self.global_batch, space)

    def run(self) -> PlanResult:
        if self.emit is not None:  # searched under the stack the tool's launch runs (`requests.emit_stack`)
            from shardwise.requests.emit_stack import emit_training, searched_zero

            training, stack_notes = emit_training(self.training, self.emit, searched=True)
            zero, zero_note = searched_zero(self.zero, self.emit, training.framework)  # what the tool implements
            notes = [*stack_notes, *filter(None, [zero_note])]
            return replace(self, training=training, zero=zero)._run(notes)
        return self._run([])

    def _run(self, notes: list[str]) -> PlanResult:
        from shardwise.analyses.plan_explain import alternatives
        from shardwise.presets import stack_defaults as stack
        from shardwise.requests import build

        cal = build.load_calibration(self.training.calibration)
        result = self._search(cal, None, notes)
        cluster, space = result.cluster, result.space
        best = result.ranked(self.top)
        if best.size == 0:
            levers = ["more GPUs", "a shorter sequence"]
            levers += ["full recomputation"] * (space.recompute is not None and "full" not in space.recompute)
            zero3 = 3 in (stack.framework_zero_stages(self.training.framework) or (3,))  # nanotron has none
            piped = 3 in (stack.framework_pipeline_zero_stages(space.stack) or (3,))  # not DeepSpeed's engine
            if zero3 and ((piped and not space.zero_with_pipeline) or 3 not in (space.zero_stage or (3,))):
                levers.append("ZeRO-3" + " (--zero-with-pp to combine it with a pipeline)" * piped)
            if space.memory_headroom_bytes > 0:
                levers.append("less --memory-headroom")
            outcome = PlanResult(self, result, [], [], None, "", tuple(notes), cal)
            raise NothingFits(nothing_fits(result, levers), outcome)
        spread = build.spread([result.scenario(int(i)) for i in best], cal)
        rows = with_intervals(result, best, spread)
        for r, i in zip(rows, best, strict=True):
            request = row_request(result, int(i), self.training)
            # experts split over etp ranks; a dense model has none: null, as predict's and serve's (review 40 #12)
            r["etp"] = (request.training.etp or r["tp"]) if result.model.is_moe else None
            r["command"] = request.command()
        launch = None
        if self.emit is not None:
            from shardwise.emit.report import training_launch

            capacity = float(cluster.gpu.memory_bytes) - space.memory_headroom_bytes
            first = result.scenario(int(best[0]))
            launch = training_launch(first, self.emit, self.emit_version, capacity, rows[0]["step_time_s"])
        why = alternatives(result, int(best[0]))
        regret = None
        if cal is not None:  # the pick's expected regret under the calibration's posterior
            from shardwise.calibration.regret import plan_regret

            regret = plan_regret(result, cal.fit, spread.basis)
        return PlanResult(self, result, rows, why, launch, spread.basis, tuple(notes), cal, regret, spread)
