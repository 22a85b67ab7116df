"""Fields (by the names of `requests.fields`) -> a `Plan`: the layout given, data parallelism from
the GPUs left, the framework preset's execution flags and kernels (the fields given override
them), sequence parallelism and fused attention by default, and the pipeline split (given, or the
framework's own, `default_split`) (`requests.build`).
"""

from __future__ import annotations

from typing import Any

from shardwise.errors import SpecError


def execution_kwargs(o: dict[str, Any], sequence_parallel: bool | None = None, tp: int = 1) -> dict[str, Any]:
    """Plan keyword arguments from the framework and the execution fields given (which override
    it). Transformer Engine's userbuffer overlap needs sequence parallelism: a framework default
    that turns it on applies only where SP is on; asking for it without SP is an error."""
    from shardwise import presets
    from shardwise.presets import framework_fields
    from shardwise.specs.plan_choices import EXECUTION_FLAGS

    stack = o.get("framework") or "megatron-core"  # a preset's name or a framework file's path
    flags = presets.framework(stack)
    out: dict[str, Any] = {"framework": flags["framework"]}
    if "memory_stack" in flags:  # a file's `like:` (`presets.framework_fields.with_like`)
        out["memory_stack"] = flags["memory_stack"]
    for name in EXECUTION_FLAGS:
        given = o.get(name)
        out[name] = flags[name] if given is None else given
    # the stack's kernels (physics.stack): the preset's, where it states them, or the fields given
    for name in framework_fields.STACK_PLAN_FIELDS:
        if o.get(name) is not None:
            out[name] = o[name]
        elif name in flags:
            out[name] = flags[name]
    if o.get("zero3_buckets") is not None:  # the keys given over the framework's buckets (DeepSpeed's defaults)
        from shardwise.specs.zero3 import zero3_buckets_of

        buckets = zero3_buckets_of(o["zero3_buckets"], "--zero3-buckets", flags.get("zero3_buckets"))
        if buckets is not None and flags.get("zero3_buckets") is None:  # a stack that does not run DeepSpeed
            deepspeed = [k for k, v in presets.raw("frameworks").items() if v.get("zero3_buckets") is not None]
            raise SpecError(
                f"--zero3-buckets: {stack} runs ZeRO-3 as FSDP-style units, not DeepSpeed's stage 3; it applies to "
                f"{', '.join(deepspeed)}, or a framework file with zero3_buckets"
            )
        out["zero3_buckets"] = buckets
    if o.get("fsdp2_grad_sync") is not None and out.get("per_param_sharding") is not True:  # FSDP2's switch
        fsdp2 = [k for k, v in presets.raw("frameworks").items() if v.get("per_param_sharding") is True]
        raise SpecError(
            f"--fsdp2-grad-sync: {stack} does not run FSDP2 (per-parameter sharding); it applies to "
            f"{', '.join(fsdp2)}, or a framework file with per_param_sharding: true"
        )
    # fp16 training accumulates its gradients another way in some stacks (`physics.microbatch`)
    if o.get("unfused_accumulate_bytes") is None:
        accumulate = presets.framework_accumulate_bytes(stack, o.get("precision") or "bf16")
        if accumulate is not None:
            out["unfused_accumulate_bytes"] = accumulate
    # a stack with a second host count for its sequence-parallel asynchronous linears (nanotron's
    # REDUCE_SCATTER mode with tp_linear_async_communication) uses it where the plan runs them
    if o.get("layer_host_ops") is None and sequence_parallel and out["async_tp_grad"]:
        from shardwise.presets.stack_defaults import framework_async_sp_host_ops

        async_sp = framework_async_sp_host_ops(stack)
        if async_sp is not None:
            out["layer_host_ops"] = async_sp
    if sequence_parallel is not None and not sequence_parallel:
        if o.get("tp_comm_overlap") and tp > 1:
            raise SpecError(
                "--tp-comm-overlap needs --sequence-parallel (Transformer Engine overlaps the SP collectives)"
            )
        out["tp_comm_overlap"] = False
    if o.get("zero") is None:
        out["zero_stage"] = flags["zero_stage"]
    return out


def sp_execution(o: dict[str, Any]) -> dict[str, Any]:
    """The execution flags that differ where a plan runs sequence parallelism (`execution_kwargs`
    with SP against without: nanotron's host count of its asynchronous REDUCE_SCATTER linears): the
    planner gives each candidate its own (`analyses.search_space.for_candidates`), as predict would."""
    base, on = execution_kwargs(o), execution_kwargs(o, True, 2)
    return {k: v for k, v in on.items() if k != "zero_stage" and base.get(k) != v}


def flash_attention(o: dict[str, Any]) -> bool:
    """Fused (flash) attention: as given (--flash-attention / --no-flash-attention), else as the
    framework preset states it (megatron-deepspeed: off, its --use-flash-attn flags are opt-in),
    else on."""
    from shardwise import presets

    if o.get("flash_attention") is not None:
        return bool(o["flash_attention"])
    return bool(presets.framework(o.get("framework") or "megatron-core").get("flash_attention", True))


def sequence_parallel(o: dict[str, Any]) -> bool:
    """Sequence parallelism: as given, else as the framework preset states it where tp > 1
    (nanotron's default tp_mode ALL_REDUCE: off, `presets.stack_defaults`), else on wherever tensor
    parallelism is (tp > 1): NeMo's and Megatron-Bridge's recipes and torchtitan run TP with it,
    and Korthikanti et al. 2022 show it never costs time and saves activation memory."""
    given = o.get("sequence_parallel")
    return default_sequence_parallel(o) if given is None else bool(given)


def default_sequence_parallel(o: dict[str, Any]) -> bool:
    """`sequence_parallel` when none is given (what a plan that states it may leave out)."""
    from shardwise.presets.stack_defaults import framework_sequence_parallel

    if o.get("tp", 1) <= 1:
        return False
    stated = framework_sequence_parallel(o.get("framework") or "megatron-core")
    return True if stated is None else stated


def default_schedule(o: dict[str, Any]) -> str:
    """The pipeline schedule when none is given: interleaved with --vpp > 1, else the framework's at
    the plan's pp (nanotron's AllForwardAllBackward engine: gpipe at any pp; MaxText's and Paxml's
    pipeline: gpipe under a pipeline only, `presets.stack_defaults.framework_schedule`), else 1F1B."""
    from shardwise.presets.stack_defaults import framework_schedule

    if (o.get("vpp") or 1) > 1:
        return "interleaved"
    return framework_schedule(o.get("framework") or "megatron-core", int(o.get("pp") or 1)) or "1f1b"


def default_recompute(o: dict[str, Any]) -> str:
    """The recompute mode when none is given: the framework's (`default_recompute`: MaxText's
    remat_policy 'full', Paxml's SAVE_NOTHING, torchtitan's per-op selective;
    `presets.stack_defaults.resolve_recompute`), else none."""
    from shardwise.presets.stack_defaults import resolve_recompute

    return resolve_recompute(o.get("framework"), o.get("recompute"), o.get("recompute_layers")).mode


def default_recompute_layers(o: dict[str, Any], pp: int, model: Any) -> int:
    """The layers of each model chunk recomputed whole when neither --recompute nor
    --recompute-layers is given, for a stack whose default checkpoints every N-th layer (a framework
    file's `default_recompute_every`: torchtitan's job config before pytorch/torchtitan#2357,
    activation_checkpoint mode "selective", selective_ac_option "2", `_apply_ac_to_transformer_block`
    wrapping every second block; examples/frameworks/torchtitan-before-2357.yaml): floor(layers of a chunk / N) of
    the even split; 0 otherwise, and for a mixture of experts (`stack_default_notes` says so)
    (`presets.stack_defaults.RecomputeChoice.layers`, as crossover, sweep and sensitivity count them)."""
    from shardwise.presets.stack_defaults import resolve_recompute

    if model is None:
        return 0
    choice = resolve_recompute(o.get("framework"), o.get("recompute"), o.get("recompute_layers"))
    return int(choice.layers(model.layers, pp, o.get("vpp") or 1, bool(getattr(model, "is_moe", False))))


def stack_default_notes(o: dict[str, Any], plan: Any) -> list[str]:
    """What a framework's own layout defaults chose where the fields left it open (`notes`)."""
    from shardwise.presets.stack_defaults import framework_schedule, framework_sequence_parallel, not_in_stack

    stack = o.get("framework") or "megatron-core"
    out: list[str] = []
    m, pp = int(plan.num_micro_batches), int(plan.pp)
    if o.get("schedule") is None and (o.get("vpp") or 1) == 1 and framework_schedule(stack, pp) == "gpipe" and m > 1:
        from shardwise.presets.stack_defaults import framework_schedules

        runs = framework_schedules(stack)  # suggest 1F1B only where the stack runs it (not MaxText, Paxml)
        other = f"; --schedule 1f1b holds at most {min(pp, m)}" if runs is None or "1f1b" in runs else ""
        out.append(
            f"{plan.framework}'s default schedule runs all {m} forwards, then all backwards, holding every "
            f"micro-batch's activations{other}"
        )
    if o.get("sequence_parallel") is None and o.get("tp", 1) > 1 and framework_sequence_parallel(stack) is False:
        out.append(
            f"{plan.framework}'s default TP all-reduces, without sequence parallelism (--sequence-parallel to split)"
        )
    if o.get("recompute") is None and not o.get("recompute_layers") and int(plan.recompute_layers) == 0:
        from shardwise.presets.stack_defaults import framework_recompute_every

        every = framework_recompute_every(stack)
        if every:  # a mixture of experts, or a chunk of fewer layers (`default_recompute_layers`)
            out.append(
                f"{plan.framework}'s default recomputes one layer in {every} whole, not priced here (a mixture of "
                f"experts, or fewer than {every} layers a chunk): priced without recomputation (give --recompute)"
            )
    from shardwise.presets.stack_defaults import ZERO1_HINT

    missing = not_in_stack(stack, plan, shown_as=str(plan.framework), zero_asked=o.get("zero") is not None)
    if missing:  # the preset's own ZeRO stage under a pipeline engine: its words say how it is priced
        out.append(missing if missing.endswith(ZERO1_HINT) else f"{missing}; priced as asked")
    return out


def stage_kwargs(o: dict[str, Any], layers: int | None = None) -> dict[str, Any]:
    """Plan keyword arguments for an uneven pipeline split (empty: even split); with the model's
    `layers`, a stage may not hold more than the model has."""
    from shardwise.specs._checks import MAX_WHOLE, whole_range

    out: dict[str, Any] = {}
    for name in ("first_stage_layers", "last_stage_layers"):
        value = o.get(name)
        if value is not None:
            high = MAX_WHOLE if layers is None else min(int(layers), MAX_WHOLE)
            if not 1 <= value <= high:
                most = f"from 1 to the model's {layers} layers" if layers is not None else whole_range(value, 1)
                raise SpecError(f"--{name.replace('_', '-')}: {value} is not allowed; it must be a whole number {most}")
            out[name] = value
    if o.get("stage_layers"):
        if out:
            raise SpecError("give --stage-layers or --first/--last-stage-layers, not both")
        out["stage_layers"] = o["stage_layers"]
    return out


def build_plan(o: dict[str, Any], n_gpus: int, model: Any = None) -> Any:
    from shardwise.specs import Plan

    tp, pp, cp = o["tp"], o["pp"], o.get("cp") or 1
    if model is not None:  # the model's own limit first: it is the real problem, not the GPU count
        from shardwise.specs.rule_core import raise_first
        from shardwise.specs.rules import tp_rules

        raise_first(tp_rules(tp, model.heads, model.kv_heads, model.ffn_hidden))
    if (o.get("vpp") or 1) > 1 and pp < 2 and not o.get("schedule"):
        raise SpecError(f"--vpp {o['vpp']} needs --pp >= 2 (it splits each pipeline stage into chunks)")
    dp = o.get("dp")
    if dp is None:
        if n_gpus % (tp * pp * cp):
            what = "--tp x --pp" + (" x --cp" if cp > 1 else "")
            raise SpecError(f"{what} = {tp * pp * cp} does not divide the {n_gpus} GPUs; set --dp or change --nodes")
        dp = n_gpus // (tp * pp * cp)
    if o.get("global_batch") is None:
        raise SpecError(
            f"--global-batch is required (sequences per step; a multiple of dp x micro-batch = {dp * o['micro_batch']})"
        )
    sp = sequence_parallel(o)
    schedule = o.get("schedule") or default_schedule(o)
    if schedule == "interleaved" and (o.get("vpp") or 1) < 2:  # one chunk a stage: 1F1B under another name
        raise SpecError(
            "--schedule interleaved needs --vpp N, N >= 2 (model chunks per stage); with one chunk a stage "
            "the schedule is 1f1b"
        )
    execution = execution_kwargs(o, sp, tp)
    if o.get("zero") is not None:
        execution["zero_stage"] = o["zero"]
    elif dp * cp == 1:  # a framework's default ZeRO stage means nothing without data-parallel replicas
        execution["zero_stage"] = 0
    return Plan(
        tp=tp,
        pp=pp,
        dp=dp,
        cp=cp,
        cp_comm=o.get("cp_comm") or "p2p",
        ep=o.get("ep") or 1,
        etp=o.get("etp") or 0,
        expert_imbalance=o.get("expert_imbalance") or 1.0,
        moe_dispatcher=o.get("moe_dispatcher") or "alltoall",
        moe_overlap=bool(o.get("moe_overlap")),
        moe_capacity_factor=o.get("moe_capacity_factor") or 0.0,
        moe_pad_to_capacity=bool(o.get("moe_pad_to_capacity")),
        global_batch=o["global_batch"],
        micro_batch=o["micro_batch"],
        vpp=o["vpp"],
        schedule=schedule,
        recompute=o.get("recompute") or default_recompute(o),
        recompute_layers=o.get("recompute_layers") or default_recompute_layers(o, pp, model),
        offload_activation_layers=o.get("offload_activations") or 0,
        offload_optimizer=o.get("offload_optimizer") or 0.0,
        recompute_modules=o.get("recompute_modules") or (),
        mtp_layers=o.get("mtp_layers") or 0,
        cuda_graph_scope=o.get("cuda_graph_scope") or (),
        sequence_parallel=sp,
        precision=o.get("precision") or "bf16",  # `build.scenario` gives the GPU's (`requests.precision`)
        flash_attention=flash_attention(o),
        lora_rank=o.get("lora_rank") or 0,
        lora_targets=o.get("lora_targets") or "qkv,proj,fc1,fc2",
        packed_document_len=o.get("packed_document_len") or 0,
        pipeline_flushes=o.get("pipeline_flushes") or 1,
        shard_group=o.get("shard_group") or 0,
        **execution,
        **(stage_kwargs(o) or default_split(o, pp, model)),
    )


def default_split(o: dict[str, Any], pp: int, model: Any) -> dict[str, Any]:
    """The framework's own pipeline split where it is not even (`presets.framework_fields.PIPELINE_SPLITS`): nanotron
    balances its blocks by compute, the output layer included (`specs.stages.compute_balanced_counts`),
    DeepSpeed's PipelineModule its transformer layers alone (`specs.stages.deepspeed_balanced_counts`),
    InternEvo puts the remainder on the last stages (`specs.stages.uniform_last_counts`), with one model
    chunk per stage; empty (the even split) otherwise."""
    from shardwise import presets
    from shardwise.specs.stages import stack_split_counts

    rule = presets.framework_pipeline_split(o.get("framework") or "megatron-core")
    if rule == "even" or pp <= 1 or o["vpp"] > 1 or model is None:
        return {}
    counts = stack_split_counts(rule, model, pp)
    return {} if counts is None else {"stage_layers": counts}
