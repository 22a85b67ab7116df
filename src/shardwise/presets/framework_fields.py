"""The fields of a framework preset (presets/frameworks.yaml), checked: the Plan flags it sets,
the software stack's kernels and per-micro-batch costs (`physics.stack`, `physics.microbatch`),
and the request-layer defaults it states (`presets.stack_defaults`). Pure: a mapping in, Plan
keyword arguments out; the lookup by name is `presets.framework`."""

from __future__ import annotations

from typing import Any

from shardwise import loaders, units
from shardwise.errors import SpecError
from shardwise.presets.stack_defaults import DEFAULT_FIELDS, check_default_fields
from shardwise.specs.plan import EXECUTION_FLAGS
from shardwise.specs.zero3 import zero3_buckets_of

# The Plan fields a framework preset sets (presets/frameworks.yaml).
FRAMEWORK_FLAGS = (*EXECUTION_FLAGS, "zero_stage")

# The software stack's kernels (`physics.stack`), optional in a framework preset: the default is
# Megatron-Core's (fused kernels, Transformer Engine attention, no host bound).
# What it pays per micro-batch (`physics.microbatch`) is optional too: Megatron-LM's by default.
STACK_FIELDS = (
    "attention_kernel",
    "eager_kernels",
    "eager_rotary",
    "yarn_rotary_eager",
    "fp8_recipe",
    "selective_policy",
    "host_kernel",
    "flash_attention",
    "per_param_sharding",
    "fsdp2_grad_sync",
    "fsdp2_expert_mesh_of_one",
    "unfused_accumulate_bytes",
    "unfused_accumulate_bytes_fp16",
    "p2p_serial",
    "pipeline_split",
    "layer_host_ops",
    "loss_bytes_per_logit",
    "optimizer_step_bytes",
    "p2p_host_ops",
    "tp_shard_overlap",
    "eager_glu",
    "layout_copies",
    "head_copies",
    "hf_gpt2_ops",
    "cublas_before_11",
    "grad_reduce_bf16",
    "spmd_grad_reduce",
    "scan_unpipelined",
    "functional_a2a",
    "zero1_grad_all_reduce",
    "aligned_chunk_sync",
    "expandable_segments",
    "loss_kernel",
    "optimizer_state",
    "block_recompute",
    "hybrid_shard",
    "zero3_buckets",
    "partition_activations",
    *DEFAULT_FIELDS,  # the layout defaults the request layer reads (`presets.stack_defaults`)
)
# what `plan` searches on the stack beyond the layout (request-layer defaults, not Plan fields:
# `framework_plan_search`)
PLAN_SEARCH_FIELDS = ("block_recompute", "hybrid_shard")
# how a stack splits the layers over pipeline stages by default (`specs.stages`): even (Megatron's),
# balanced by compute with the output layer counted (nanotron's build_model), DeepSpeed's PipelineModule,
# or floor(layers / pp) each with the remainder on the last stages (InternEvo's partition_uniform)
PIPELINE_SPLITS = ("even", "compute", "deepspeed", "uniform-last")
# ... as the Plan keyword arguments `framework` returns: the same, the host time in seconds, less the
# keys that are no Plan field (flash_attention goes with the CLI's own flag, the fp16 accumulation
# bytes with the precision, the pipeline split with the request layer)
STACK_PLAN_FIELDS = tuple(
    "host_kernel_s" if key == "host_kernel" else key
    for key in STACK_FIELDS
    if key not in ("flash_attention", "unfused_accumulate_bytes_fp16", "pipeline_split", *PLAN_SEARCH_FIELDS)
    and key not in DEFAULT_FIELDS
)


def _stack_fields(key: str, data: dict[str, Any]) -> dict[str, Any]:
    from shardwise.precisions import FP8_RECIPES
    from shardwise.specs.plan import (
        ATTENTION_KERNELS,
        FSDP2_GRAD_SYNCS,
        LOSS_KERNELS,
        OPTIMIZER_STATES,
        SELECTIVE_POLICIES,
    )

    out: dict[str, Any] = {}
    choices_of = (
        ("attention_kernel", ATTENTION_KERNELS),
        ("selective_policy", SELECTIVE_POLICIES),
        ("fp8_recipe", FP8_RECIPES),
        ("loss_kernel", LOSS_KERNELS),
        ("optimizer_state", OPTIMIZER_STATES),
        ("fsdp2_grad_sync", FSDP2_GRAD_SYNCS),
    )
    for field, choices in choices_of:
        if field in data:
            if data[field] not in choices:
                allowed = ", ".join(choices)
                raise SpecError(f"framework {key!r}: {field}: {data[field]!r} is not allowed; choose {allowed}")
            out[field] = data[field]
    booleans = (
        "eager_kernels", "eager_rotary", "yarn_rotary_eager", "flash_attention", "per_param_sharding", "p2p_serial",
        "tp_shard_overlap",
        "spmd_grad_reduce", "zero1_grad_all_reduce", "scan_unpipelined", "functional_a2a",
        "aligned_chunk_sync",
    )  # fmt: skip
    for field in (
        *booleans,
        "eager_glu",
        "layout_copies",
        "head_copies",
        "hf_gpt2_ops",
        "cublas_before_11",
        "fsdp2_expert_mesh_of_one",
        "grad_reduce_bf16",
        "expandable_segments",
        "partition_activations",
    ):
        if field in data:
            if not isinstance(data[field], bool):
                raise SpecError(f"framework {key!r}: {field}: {data[field]!r} is not allowed; give true or false")
            out[field] = data[field]
    if "fsdp2_grad_sync" in data and data.get("per_param_sharding") is not True:  # FSDP2's alone
        raise SpecError(
            f"framework {key!r}: fsdp2_grad_sync: {data['fsdp2_grad_sync']!r} applies to FSDP2 only; "
            "state per_param_sharding: true or leave it out"
        )
    if "zero3_buckets" in data:  # DeepSpeed's stage-3 buckets, by its config keys (`specs.zero3`)
        out["zero3_buckets"] = zero3_buckets_of(data["zero3_buckets"], f"framework {key!r}: zero3_buckets")
    if "host_kernel" in data:
        out["host_kernel_s"] = _host_kernel_s(key, data["host_kernel"])
    check_default_fields(key, data)  # not Plan fields: `presets.stack_defaults`
    # not a Plan field: the request layer reads it through `framework_pipeline_split`
    if "pipeline_split" in data and data["pipeline_split"] not in PIPELINE_SPLITS:
        allowed = ", ".join(PIPELINE_SPLITS)
        raise SpecError(
            f"framework {key!r}: pipeline_split: {data['pipeline_split']!r} is not allowed; choose {allowed}"
        )
    # not Plan fields either: the planner reads them through `framework_plan_search`
    if "block_recompute" in data and not isinstance(data["block_recompute"], bool):
        raise SpecError(
            f"framework {key!r}: block_recompute: {data['block_recompute']!r} is not allowed; give true or false"
        )
    stages = data.get("hybrid_shard", [])
    if not isinstance(stages, list) or any(isinstance(z, bool) or z not in (1, 2, 3) for z in stages):
        raise SpecError(f"framework {key!r}: hybrid_shard: {stages!r} is not allowed; give a list of ZeRO stages 1-3")
    # bytes per weight per micro-batch; `_fp16`: when training in fp16, where that differs
    for field in ("unfused_accumulate_bytes", "unfused_accumulate_bytes_fp16"):
        if field in data:
            value = data[field]
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 64:
                raise SpecError(f"framework {key!r}: {field}: {value!r} is not allowed; give bytes per weight, 0-64")
            out[field] = float(value)
    # a stack's host operations per layer and its loss's bytes per logit, counted from its code
    for field, high, what in (
        ("layer_host_ops", 10_000, "host operations per layer"),
        ("p2p_host_ops", 10_000, "host operations per micro-batch"),
        ("loss_bytes_per_logit", 256, "bytes per logit"),
        ("optimizer_step_bytes", 1024, "bytes per parameter"),
    ):
        if field in data:
            value = data[field]
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= high:
                raise SpecError(f"framework {key!r}: {field}: {value!r} is not allowed; give {what}, 0-{high}")
            out[field] = float(value)
    return out


# host time per kernel a stack may state (`specs.plan_checks`: Plan.host_kernel_s in [0, 1 ms])
HOST_KERNEL_RANGE_S = (0.0, 1e-3)


def _host_kernel_s(key: str, value: Any) -> float:
    """`host_kernel:` in seconds, checked here so that `presets show FILE` refuses what predict
    would, naming the file's key (review 37: `host_kernel: -5us` passed `presets show` and predict
    said 'plan: host_kernel_s: -4.99e-06 is not allowed')."""
    where = f"framework {key!r}: host_kernel"
    if isinstance(value, bool) or (units.is_bare_number(str(value).strip()) and float(value) != 0):
        raise SpecError(f"{where}: {value!r} has no unit; write it with one, e.g. host_kernel: 10us")
    try:
        seconds = units.parse_seconds(value)
    except SpecError as exc:
        raise SpecError(f"{where}: {exc}") from None
    low, high = HOST_KERNEL_RANGE_S
    if not low <= seconds <= high:  # NaN fails too
        raise SpecError(f"{where}: {value!r} is not allowed; give a time from 0 to 1ms (e.g. 10us)")
    return seconds


# a built-in preset's own words, not taken by a file that starts from it (`with_like`)
NOT_INHERITED = ("description", "source", "kind", "notes", "name")


def with_like(key: str, data: dict[str, Any], table: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A framework file's fields over those of the built-in preset its `like:` names (the same
    fields otherwise: a file without `like:` states the Plan flags itself, `FRAMEWORK_FLAGS`, and
    takes Megatron-Core's kernels and memory where it is silent). The file's stack is priced with
    that built-in's memory (`Plan.memory_stack`); its interval stays a stack's without published runs
    (the runs are the built-in's, not the file's). `data` unchanged without `like:`."""
    if "like" not in data:
        return data
    like = data["like"]
    name = like.strip().lower() if isinstance(like, str) else None
    if name not in table:
        raise SpecError(
            f"framework {key!r}: like: {like!r} is not a built-in framework; name one of `shardwise presets frameworks`"
        )
    inherited = {k: v for k, v in table[name].items() if k not in NOT_INHERITED}
    own = {k: data[k] for k in ("name",) if k in data}  # shown first (`presets show FILE`)
    merged = {**own, "like": name, **inherited, **data}
    merged["like"] = name  # as the table spells it
    said = data.get("schedules")
    if "pipeline_schedule" not in data and (  # the file's own schedule (list) over the preset's pipeline default
        "schedule" in data or (said is not None and merged.get("pipeline_schedule") not in said)
    ):
        merged.pop("pipeline_schedule", None)
    if "zero3_buckets" in data and "zero3_buckets" in inherited:  # the file's keys over the preset's
        from shardwise.specs.zero3 import buckets_over

        where = f"framework {key!r}: zero3_buckets"
        merged["zero3_buckets"] = buckets_over(inherited["zero3_buckets"], data["zero3_buckets"], where)
    return merged


def inherited_fields(data: dict[str, Any], table: dict[str, dict[str, Any]]) -> tuple[str, ...]:
    """The fields of a framework file read from its `like:` preset (`with_like`), not stated by it."""
    if "like" not in data:
        return ()
    merged = with_like("file", data, table)
    return tuple(k for k in merged if k not in data)


def _check_own_defaults(key: str, data: dict[str, Any]) -> None:
    """A stack's default ZeRO stage among the stages it implements, and its default schedule among
    its schedules: a file with `like: fsdp`, `zero_stages: [0, 1]` and fsdp's `zero_stage: 3` would
    otherwise price every run at a stage it says it cannot run (a note at predict time only)."""
    stages, zero = data.get("zero_stages"), data["zero_stage"]
    if stages is not None and zero not in stages:
        listed = ", ".join(str(z) for z in stages)
        raise SpecError(
            f"framework {key!r}: zero_stage: {zero} is not among its zero_stages ({listed}); give one of them"
        )
    piped = data.get("pipeline_zero_stages")
    if piped is not None and stages is not None and not set(piped) <= set(stages):
        listed = ", ".join(str(z) for z in stages)
        raise SpecError(
            f"framework {key!r}: pipeline_zero_stages: {piped!r} is not among its zero_stages ({listed}); "
            "give some of them"
        )
    # the default under a pipeline: pipeline_schedule, else schedule, else 1f1b
    # (requests.plan_build.default_schedule); at pp 1 no schedule runs, whatever the list says
    schedules = data.get("schedules")
    field = "pipeline_schedule" if data.get("pipeline_schedule") else "schedule"
    schedule = data.get(field) or "1f1b"
    if schedules is not None and schedule not in schedules:
        hint = "" if data.get(field) else " (1f1b runs under a pipeline where none is stated: pipeline_schedule)"
        raise SpecError(
            f"framework {key!r}: {field}: {schedule} is not among its schedules ({', '.join(schedules)}); "
            f"give one of them{hint}"
        )


def _framework_from_dict(key: str, data: dict[str, Any]) -> dict[str, Any]:
    for field in data:
        if field not in (*FRAMEWORK_FLAGS, *STACK_FIELDS, *NOT_INHERITED, "like"):
            allowed = (*FRAMEWORK_FLAGS, *STACK_FIELDS, "like")
            raise SpecError(f"framework {key!r}: {loaders.unknown_field(field, allowed)}")
    missing = [f for f in FRAMEWORK_FLAGS if f not in data]
    if missing:
        raise SpecError(
            f"framework {key!r}: missing field(s) {', '.join(missing)}; state them, or start from a built-in "
            "framework with `like: NAME` (its fields where yours are silent)"
        )
    out: dict[str, Any] = {f: data[f] for f in FRAMEWORK_FLAGS}
    for f in FRAMEWORK_FLAGS:
        v = out[f]
        ok = (
            isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 3
            if f == "zero_stage"
            else (v is None and f == "overlap_p2p") or isinstance(v, bool)
        )
        if not ok:
            allowed = "0, 1, 2 or 3" if f == "zero_stage" else "true or false" + (" or null" * (f == "overlap_p2p"))
            raise SpecError(f"framework {key!r}: {f}: {v!r} is not allowed; give {allowed}")
    out.update(_stack_fields(key, data))
    _check_own_defaults(key, data)
    out.pop("unfused_accumulate_bytes_fp16", None)  # not a Plan field: `framework_accumulate_bytes`
    out["framework"] = key
    if "like" in data:  # a file started from a built-in (`with_like`): its memory is that one's
        out["memory_stack"] = data["like"]
    return out
