"""The stack a training `--emit` prices under: the framework preset of the tool whose launch it
prints. `--emit deepspeed` writes Megatron-DeepSpeed's pretrain_gpt.py (emit/deepspeed.py), so its
plan is priced as `--framework megatron-deepspeed`, with FlashAttention-2 where the plan has it (the
launch passes `--use-flash-attn-v2` then); `--emit torchtitan` writes torch.compile as the plan is
priced (emit/torchtitan.py `_compile`): `torchtitan-compile` for a fused stack's plan, `torchtitan`
for an eager one; `--emit megatron` writes Megatron-LM main: `megatron-core`.

Where --framework is left at its default (megatron-core), `predict --emit` and `plan --emit` price
under the tool's stack and say so; where it names another stack, they price under that one and say
that the time is that stack's, not the emitted tool's."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from shardwise.emit import TARGET_STACKS

DEFAULT_FRAMEWORK = "megatron-core"


def emit_training(training: Any, target: str, searched: bool = False) -> tuple[Any, tuple[str, ...]]:
    """(the `requests.training.TrainingRequest` that `--emit target` prices, notes saying under
    which stack, where the request does not name the tool's own, and which recompute where it was
    left open: `launch_recompute`; not where `plan` searches it, `searched`)."""
    from shardwise.presets.stack_defaults import builtin_of
    from shardwise.requests.plan_build import flash_attention

    stacks = TARGET_STACKS[target]
    framework = training.framework or DEFAULT_FRAMEWORK
    recompute_note: str | None = None
    if training.recompute is None and not training.recompute_layers and not searched:
        training, recompute_note = launch_recompute(training, target, framework)
    if builtin_of(framework) in stacks:
        return training, _joined(recompute_note)
    if framework != DEFAULT_FRAMEWORK:
        return training, _joined(
            f"--emit {target}: the times are --framework {framework}'s, not those of {stacks[0]}, the stack "
            f"{target}'s launch runs (leave --framework out to price that)",
            recompute_note,
        )
    changes: dict[str, Any] = {"framework": stacks[0]}
    flags = f"--framework {stacks[0]}"
    if target == "torchtitan" and training.eager_kernels:  # the launch compiles nothing: torchtitan eager
        changes["framework"] = flags = "torchtitan"
        flags = "--framework torchtitan"
    if target == "deepspeed" and flash_attention(training.values()) and _runs_flash(training):
        # megatron-deepspeed leaves FlashAttention off (its --use-flash-attn-v2 is opt-in): the
        # launch passes it where the plan has it and the GPU runs it (`requests.attention`), so it
        # is priced with it
        changes["flash_attention"] = True
        flags += " --flash-attention"
    return replace(training, **changes), _joined(
        f"--emit {target}: priced under {changes['framework']}, the stack {target}'s launch runs (as if {flags} "
        "were given); to price under another stack, name it with --framework",
        recompute_note,
    )


def _joined(*notes: str | None) -> tuple[str, ...]:
    return tuple(n for n in notes if n)


def launch_recompute(training: Any, target: str, framework: str) -> tuple[Any, str | None]:
    """(`training` with the recompute mode its launch writes, a note or None) where --recompute and
    --recompute-layers are not given: the plan is priced as launched. torchtitan's launch names a
    config function (`--module llama3 --config llama3_70b`), whose own activation_checkpoint is
    what the job runs (torchtitan main: SelectiveAC, per-op, or FullAC; `TitanModel.recompute`):
    that mode is priced and written (the torchtitan preset's default, per-op selective, is the
    trainer's own since pytorch/torchtitan#2357). A framework file's every-N-th-layer default
    (torchtitan before #2357, `default_recompute_every`) is no option main's launch can state: its
    mode is written, with a note. The other tools: the stack's mode
    (`stack_defaults.resolve_recompute`; none for Megatron-LM and Megatron-DeepSpeed)."""
    from shardwise.presets.stack_defaults import builtin_of, resolve_recompute

    stacks = TARGET_STACKS[target]
    final = framework if framework != DEFAULT_FRAMEWORK or builtin_of(framework) in stacks else stacks[0]
    choice = resolve_recompute(final)
    if target == "torchtitan":
        from shardwise.emit.torchtitan import titan_model
        from shardwise.requests.build import build_model

        titan = titan_model(build_model(training.values()))
        if titan is not None:  # another shape: the emitter refuses it, in its own words
            kind = "SelectiveAC, per-op" if titan.recompute == "selective" else "FullAC"
            return replace(training, recompute=titan.recompute), (
                f"--emit torchtitan: recompute {titan.recompute}, as {titan.config}'s activation_checkpoint "
                f"({kind}; torchtitan main's config function) runs it, priced and written "
                "(give --recompute to choose another)"
            )
    if choice.every:
        return replace(training, recompute=choice.mode), (
            f"--emit {target}: recompute {choice.mode}, as the launch writes it ({choice.framework}'s default of "
            f"every {choice.every}-th layer whole is not an option the launch can state)"
        )
    return replace(training, recompute=choice.mode), None


def _runs_flash(training: Any) -> bool:
    """Whether the request's GPU runs FlashAttention-2 (`Gpu.flash_attention`: sm80+)."""
    from shardwise.requests.build import build_cluster

    return bool(getattr(build_cluster(training.values(), []).gpu, "flash_attention", True))


def searched_zero(
    zero: tuple[int, ...] | None, target: str, framework: str | None
) -> tuple[tuple[int, ...] | None, str | None]:
    """(the ZeRO stages `plan --emit target` searches, a note or None): those of `zero` (the stages
    --zero gave; None: the stack's own) that the tool's stack implements (its preset's `zero_stages`;
    torchtitan's FSDP2 has no ZeRO-1). Refused in one line where --zero names none of them."""
    from shardwise.emit import EmitError
    from shardwise.presets.stack_defaults import builtin_of, framework_zero_stages

    stacks = TARGET_STACKS[target]
    stack = framework if framework is not None and builtin_of(framework) in stacks else stacks[0]
    stages = framework_zero_stages(stack)
    if zero is None or stages is None:
        return zero, None
    kept = tuple(z for z in zero if z in stages)
    outside = ", ".join(str(z) for z in zero if z not in stages)
    if kept == tuple(zero):
        return zero, None
    listed = ", ".join(str(z) for z in stages)
    if not kept:
        raise EmitError(
            f"--zero {outside}: not allowed with --emit {target}; {stack}, the stack its launch runs, implements "
            f"ZeRO {listed} only: choose from those"
        )
    return kept, f"--emit {target}: ZeRO {outside} not searched ({stack} implements ZeRO {listed} only)"


def priced_launch(est: Any, target: str, version: str | None) -> dict[str, Any]:
    """The launch of the priced plan by `target` (`emit.report.training_launch`): refused when the
    plan, or what the tool runs of it, does not fit in the GPU's memory; what the tool cannot run at
    all (a model outside torchtitan's registry, a precision it lacks) is refused first, since no
    memory fix launches it (review 45 #8)."""
    from shardwise.emit import EmitError, adapt
    from shardwise.emit.report import training_launch
    from shardwise.units import format_capacity

    adapt(est.scenario, target, version)  # raises EmitError for what the tool cannot run
    capacity = float(est.scenario.cluster.gpu.memory_bytes)
    if not bool(est.fits_in_memory):
        plan = est.scenario.plan
        # the attention scores materialised (megatron-deepspeed's default): the launch would not
        # pass --use-flash-attn-v2 either
        runs = bool(getattr(est.scenario.cluster.gpu, "flash_attention", True))  # sm80+ (`requests.attention`)
        hint = "" if bool(plan.flash_attention) or not runs else "--flash-attention (the launch then asks for it), "
        raise EmitError(
            f"--emit {target}: this plan needs {float(est.memory.total_bytes) / 1e9:.1f} GB per GPU, more than "
            f"{format_capacity(capacity)}; fix the plan ({hint}--tp, --pp, --zero, --recompute, ...) until it fits"
        )
    return training_launch(est.scenario, target, version, capacity, float(est.step_time_s))


def titan_config_recompute(framework: str | None, given: str | None, recompute_layers: Any, model: Any) -> Any:
    """torchtitan's own config function for `model` (`emit.torchtitan.TitanModel`) where its
    activation checkpointing differs from what a request on a torchtitan stack without --recompute
    prices: the preset's default is the trainer's per-op SelectiveAC (pytorch/torchtitan#2357),
    while llama3_70b, llama3_405b and others set FullAC (torchtitan/models/*/config_registry.py
    @b5bcd76c), which `--emit torchtitan` prices (`launch_recompute`). None elsewhere (review 43 #3)."""
    from shardwise.emit.torchtitan import titan_model
    from shardwise.presets.stack_defaults import builtin_of, resolve_recompute

    if builtin_of(framework or DEFAULT_FRAMEWORK) not in TARGET_STACKS["torchtitan"]:
        return None
    choice = resolve_recompute(framework, given, recompute_layers)
    if choice.source != "framework default" or choice.every:
        return None
    titan = titan_model(model)
    return titan if titan is not None and titan.recompute != choice.mode else None


def recompute_words(framework: str | None, given: str | None, recompute_layers: Any, plan: Any, model: Any) -> str:
    """The plan line's words on where its recompute mode came from (`stack_defaults.recompute_origin`),
    and on a torchtitan stack where the model's own config runs another (`titan_config_recompute`):
    "torchtitan's trainer default; its llama3_70b config runs full AC: --recompute full"."""
    from shardwise.presets.stack_defaults import recompute_origin, resolve_recompute

    titan = titan_config_recompute(framework, given, recompute_layers, model)
    if titan is None:
        return recompute_origin(framework, given, recompute_layers, plan)
    shown = resolve_recompute(framework, given, recompute_layers).framework
    ac = "full AC" if titan.recompute == "full" else "per-op selective AC"
    return f"{shown}'s trainer default; its {titan.config} config runs {ac}: --recompute {titan.recompute}"


def titan_config_json(training: Any, model: Any, emitted: str | None) -> dict[str, Any]:
    """`predict --json`'s `torchtitan_config_recompute` ({"config": "llama3_70b", "recompute": "full"})
    where the plan line names the model's torchtitan config (`titan_config_recompute`); {} elsewhere,
    and where an --emit launch chose the recompute (`emitted`)."""
    t = training
    titan = None if emitted else titan_config_recompute(t.framework, t.recompute, t.recompute_layers, model)
    return (
        {} if titan is None else {"torchtitan_config_recompute": {"config": titan.config, "recompute": titan.recompute}}
    )
