"""A `Plan`'s checks: each field's when it is built (`check_fields`: whole numbers, the choices of
`specs.plan_choices`, the ranges of the stack's costs, the defaults that depend on other fields)
and the rules between fields (`check_rules`: whole micro-batches, stage counts, the interleaved
schedule's needs), kept per distinct combination of the fields they read (`check_rules_once`).
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from shardwise.arrays import any_true, as_array
from shardwise.precisions import COMPUTE_PRECISIONS, FP8_RECIPES
from shardwise.recompute_policies import SELECTIVE_POLICIES
from shardwise.specs import _checks as chk
from shardwise.specs._checks import SpecError
from shardwise.specs.memo import Memo
from shardwise.specs.plan_choices import (
    ATTENTION_KERNELS,
    BOOLEAN_FIELDS,
    CP_COMM_TYPES,
    FSDP2_GRAD_SYNCS,
    LOSS_KERNELS,
    MEMORY_STACKS,
    MOE_DISPATCHERS,
    OPTIMIZER_STATES,
    Recompute,
    Schedule,
)
from shardwise.specs.plan_fields import (
    cuda_graph_scope_of,
    lora_targets,
    recompute_modules_of,
    shard_group_of,
    stage_list_of,
)
from shardwise.specs.zero3 import zero3_buckets_of

_CHECKED = Memo("plan checks")
_INTERLEAVED = Schedule.INTERLEAVED

# the kernels of a dense layer priced apart (physics.layer_parts: 4 GEMMs and the attention kernel),
# the fewest a serving engine's count can hold (`Plan.serving_layer_kernels`)
PRICED_LAYER_KERNELS = 5


def _plain_rules_hold(
    global_batch: object,
    dp: object,
    micro_batch: object,
    pp: object,
    vpp: object,
    schedule: object,
    first_stage_layers: object,
    last_stage_layers: object,
) -> bool:
    """`Plan._check_rules` for one plan of plain whole numbers (already checked >= 1 or >= 0), in
    Python's arithmetic (the same truth as the check's, which takes these branches for such a
    plan): True when every rule holds; False when one is broken or the values are not plain ints,
    and the full check then runs (and names a broken rule)."""
    if type(schedule) is not Schedule or not (
        type(global_batch) is int
        and type(dp) is int
        and type(micro_batch) is int
        and type(pp) is int
        and type(vpp) is int
        and type(first_stage_layers) is int
        and type(last_stage_layers) is int
    ):
        return False
    per_step = dp * micro_batch  # type: ignore[operator]
    if global_batch % per_step != 0:  # type: ignore[operator]
        return False
    interleaved = schedule == _INTERLEAVED
    if interleaved and (pp < 2 or global_batch / max(per_step, 1) % pp != 0):  # type: ignore[operator]
        return False
    if pp == 1 and (first_stage_layers > 0 or last_stage_layers > 0):  # type: ignore[operator]
        return False
    return not (vpp > 1 and not interleaved)  # type: ignore[operator]


# What `Plan._check_rules` reads (tests/test_scalar_path.py checks the reads).
_RULE_FIELDS = ("global_batch", "dp", "micro_batch", "pp", "vpp", "schedule", "first_stage_layers", "last_stage_layers")
_RULE_GETTER = operator.attrgetter(*_RULE_FIELDS)


def check_fields(plan: Any) -> None:
    """Check and normalise each field of `plan` (a `Plan` being built) in place: the value types'
    one-line errors, plain numbers kept as they are."""
    for name in ("tp", "pp", "dp", "global_batch", "micro_batch", "vpp", "cp", "ep"):
        value = getattr(plan, name)
        if type(value) is not int or not 1 <= value <= chk.MAX_WHOLE:  # a plain one is kept as it is
            object.__setattr__(plan, name, chk.positive_int(f"plan: {name}", value))
    object.__setattr__(plan, "etp", chk.non_negative_int("plan: etp", plan.etp))
    object.__setattr__(plan, "lora_rank", chk.non_negative_int("plan: lora_rank", plan.lora_rank))
    object.__setattr__(plan, "lora_targets", lora_targets(plan.lora_targets))
    object.__setattr__(
        plan, "packed_document_len", chk.non_negative_int("plan: packed_document_len", plan.packed_document_len)
    )
    object.__setattr__(plan, "pipeline_flushes", chk.positive_int("plan: pipeline_flushes", plan.pipeline_flushes))
    object.__setattr__(plan, "recompute_layers", chk.non_negative_int("plan: recompute_layers", plan.recompute_layers))
    object.__setattr__(
        plan,
        "offload_activation_layers",
        chk.non_negative_int("plan: offload_activation_layers", plan.offload_activation_layers),
    )
    object.__setattr__(
        plan, "offload_optimizer", chk.within("plan: offload_optimizer", plan.offload_optimizer, 0.0, 1.0, "(a share)")
    )
    object.__setattr__(plan, "recompute_modules", recompute_modules_of(plan.recompute_modules))
    object.__setattr__(plan, "mtp_layers", chk.non_negative_int("plan: mtp_layers", plan.mtp_layers))
    object.__setattr__(plan, "cuda_graph_scope", cuda_graph_scope_of(plan.cuda_graph_scope))
    object.__setattr__(plan, "zero3_buckets", zero3_buckets_of(plan.zero3_buckets))
    imbalance = chk.positive("plan: expert_imbalance", plan.expert_imbalance)
    if any_true(as_array(imbalance) < 1.0):
        raise SpecError(
            f"plan: expert_imbalance {chk._short(plan.expert_imbalance)} is not allowed; it is the busiest "
            "expert rank's tokens over the mean, so >= 1 (1: a balanced router)"
        )
    object.__setattr__(plan, "expert_imbalance", imbalance)
    factor = chk.non_negative("plan: moe_capacity_factor", plan.moe_capacity_factor)
    object.__setattr__(plan, "moe_capacity_factor", factor)
    if plan.cp_comm not in CP_COMM_TYPES:
        raise SpecError(f"plan: cp_comm {plan.cp_comm!r} is not allowed; choose {', '.join(CP_COMM_TYPES)}")
    if plan.moe_dispatcher not in MOE_DISPATCHERS:
        raise SpecError(
            f"plan: moe_dispatcher {plan.moe_dispatcher!r} is not allowed; choose {', '.join(MOE_DISPATCHERS)}"
        )
    object.__setattr__(plan, "schedule", chk.enum_codes("plan: schedule", plan.schedule, Schedule))
    object.__setattr__(plan, "recompute", chk.enum_codes("plan: recompute", plan.recompute, Recompute))
    zero_ok = True
    try:
        zero = chk.non_negative_int("plan: zero_stage", plan.zero_stage)
    except SpecError:
        zero_ok = False
    if not zero_ok or any_true(as_array(zero) > 3):
        bad: object = plan.zero_stage  # None, (), a string: shown as given
        if zero_ok and np.ndim(zero) > 0:
            bad = np.asarray(zero)[np.asarray(zero) > 3].flat[0].item()
        raise SpecError(f"plan: zero_stage {chk._short(bad)} is not allowed; choose 0, 1, 2 or 3")
    object.__setattr__(plan, "shard_group", shard_group_of(plan.shard_group, plan.dp, plan.cp, zero))
    if not isinstance(plan.precision, str) or plan.precision not in COMPUTE_PRECISIONS:
        raise SpecError(
            f"plan: precision {plan.precision!r} is not allowed; choose bf16, fp16, fp8, mxfp8 or nvfp4 "
            "(fp4 is set by serving from FP4 weights)"
        )
    if not isinstance(plan.framework, str):
        raise SpecError(f"plan: framework {plan.framework!r} is not allowed; give a framework preset's name")
    if not isinstance(plan.memory_stack, str):
        raise SpecError(f"plan: memory_stack {plan.memory_stack!r} is not allowed; give a framework preset's name")
    if plan.memory_stack and plan.memory_stack not in MEMORY_STACKS:
        import difflib

        close = difflib.get_close_matches(plan.memory_stack, MEMORY_STACKS, n=1)
        hint = f" (closest: {close[0]})" if close else ""
        raise SpecError(
            f"plan: memory_stack {chk._short(plan.memory_stack)} is not a built-in stack's name{hint}; "
            "give one of `shardwise presets frameworks` or leave it empty (the framework's own)"
        )
    if plan.attention_kernel not in ATTENTION_KERNELS:
        raise SpecError(
            f"plan: attention_kernel {plan.attention_kernel!r} is not allowed; choose {', '.join(ATTENTION_KERNELS)}"
        )
    if plan.loss_kernel not in LOSS_KERNELS:
        raise SpecError(f"plan: loss_kernel {plan.loss_kernel!r} is not allowed; choose {', '.join(LOSS_KERNELS)}")
    if plan.fsdp2_grad_sync not in FSDP2_GRAD_SYNCS:
        raise SpecError(
            f"plan: fsdp2_grad_sync {plan.fsdp2_grad_sync!r} is not allowed; choose {', '.join(FSDP2_GRAD_SYNCS)}"
        )
    if plan.optimizer_state not in OPTIMIZER_STATES:
        raise SpecError(
            f"plan: optimizer_state {plan.optimizer_state!r} is not allowed; choose {', '.join(OPTIMIZER_STATES)}"
        )
    if plan.fp8_recipe not in FP8_RECIPES:
        raise SpecError(f"plan: fp8_recipe {plan.fp8_recipe!r} is not allowed; choose {', '.join(FP8_RECIPES)}")
    if plan.selective_policy not in SELECTIVE_POLICIES:
        raise SpecError(
            f"plan: selective_policy {plan.selective_policy!r} is not allowed; choose {', '.join(SELECTIVE_POLICIES)}"
        )
    if plan.recompute_modules:
        _check_modules_apply(plan.recompute_modules, plan.recompute, plan.selective_policy)
    object.__setattr__(plan, "host_kernel_s", chk.within("plan: host_kernel_s", plan.host_kernel_s, 0.0, 1e-3, "s"))
    object.__setattr__(
        plan,
        "unfused_accumulate_bytes",
        chk.within("plan: unfused_accumulate_bytes", plan.unfused_accumulate_bytes, 0.0, 64.0, "bytes"),
    )
    object.__setattr__(
        plan, "layer_host_ops", chk.within("plan: layer_host_ops", plan.layer_host_ops, 0.0, 10_000.0, "ops")
    )
    object.__setattr__(plan, "p2p_host_ops", chk.within("plan: p2p_host_ops", plan.p2p_host_ops, 0.0, 10_000.0, "ops"))
    object.__setattr__(
        plan,
        "loss_bytes_per_logit",
        chk.within("plan: loss_bytes_per_logit", plan.loss_bytes_per_logit, 0.0, 256.0, "bytes"),
    )
    step = chk.within("plan: optimizer_step_bytes", plan.optimizer_step_bytes, 0.0, 1024.0, "bytes")
    object.__setattr__(plan, "optimizer_step_bytes", step)
    for name, top, unit in (("serving_layer_kernels", 1_000.0, "kernels"), ("fused_residual_norms", 2.0, "adds")):
        chk.within(f"plan: {name}", getattr(plan, name), 0.0, top, unit)
        object.__setattr__(plan, name, chk.non_negative_int(f"plan: {name}", getattr(plan, name)))
    few = np.asarray(plan.serving_layer_kernels)
    if np.any((few > 0) & (few < PRICED_LAYER_KERNELS)):
        raise SpecError(
            f"plan: serving_layer_kernels {few[(few > 0) & (few < PRICED_LAYER_KERNELS)].flat[0]:g} is not allowed; "
            f"it must be 0 (the stack's count) or at least {PRICED_LAYER_KERNELS} (a layer's 4 GEMMs and attention)"
        )
    fusion = chk.non_negative("plan: norm_fusion_max_bytes", plan.norm_fusion_max_bytes)
    object.__setattr__(plan, "norm_fusion_max_bytes", fusion)
    fused = (few > 0) & (np.asarray(fusion) > 0) & (few < PRICED_LAYER_KERNELS + 2)  # the fusion takes 2 norms off
    if np.any(fused):
        raise SpecError(
            f"plan: serving_layer_kernels {few[fused].flat[0]:g} is not allowed with norm_fusion_max_bytes > 0; "
            f"it must be at least {PRICED_LAYER_KERNELS + 2} (the fused all-reduce takes two norms off the count)"
        )
    if plan.cuda_graph_scope and any_true(as_array(plan.layer_host_ops) > 0):
        raise SpecError(
            f"plan: cuda_graph_scope {','.join(plan.cuda_graph_scope)} is Megatron-Core's CUDA graphs; not with "
            "layer_host_ops (a stack's own host count, nanotron's, whose layers are not graphed)"
        )
    for name in BOOLEAN_FIELDS:
        value = getattr(plan, name)
        if type(value) is not bool and (value is not None or name != "overlap_p2p"):  # True/False kept
            object.__setattr__(plan, name, chk.boolean(f"plan: {name}", value))
    _capacity_rules(plan)
    for name in ("first_stage_layers", "last_stage_layers"):
        object.__setattr__(plan, name, chk.non_negative_int(f"plan: {name}", getattr(plan, name)))
    if plan.stage_layers is not None:
        object.__setattr__(plan, "stage_layers", stage_list_of(plan.stage_layers, plan.pp))
    if plan.overlap_p2p is None:
        schedule = plan.schedule
        if type(schedule) is Schedule:  # one plan: the numpy bool the array comparison gives, without numpy's probing
            interleaved: object = np.bool_(schedule == Schedule.INTERLEAVED)
        else:
            interleaved = np.asarray(schedule) == Schedule.INTERLEAVED
        object.__setattr__(plan, "overlap_p2p", interleaved)


def _capacity_rules(plan: Any) -> None:
    """Megatron-Core's rules of token dropping (transformer_config.py: padding to capacity needs a
    capacity factor; token_dispatcher.py: the flex dispatcher's DeepEP backend refuses the padding,
    and the all-gather one has no drop-and-pad path; a dropping alltoall preprocess that syncs with
    the host cannot be a CUDA graph)."""
    pad = np.asarray(plan.moe_pad_to_capacity, dtype=bool)
    if any_true(pad & (as_array(plan.moe_capacity_factor) <= 0)):
        raise SpecError(
            "plan: moe_pad_to_capacity needs moe_capacity_factor > 0 (Megatron-Core's rule: it pads each "
            "expert to its capacity); set moe_capacity_factor or drop moe_pad_to_capacity"
        )
    drops = (as_array(plan.moe_capacity_factor) > 0) & ~pad
    if any_true(drops) and plan.moe_dispatcher == "alltoall" and "moe_preprocess" in (plan.cuda_graph_scope or ()):
        raise SpecError(
            "plan: cuda_graph_scope moe_preprocess with token dropping unpadded (moe_capacity_factor without "
            "moe_pad_to_capacity): its preprocessing copies to the host, which Megatron-Core refuses to capture "
            "(arguments.py / transformer_config.py); pad to capacity or leave moe_preprocess out"
        )
    if any_true(pad) and plan.moe_dispatcher != "alltoall":
        raise SpecError(
            f"plan: moe_pad_to_capacity runs with the alltoall dispatcher, not {plan.moe_dispatcher} "
            "(Megatron-Core's drop-and-pad path); use moe_dispatcher alltoall or drop moe_pad_to_capacity"
        )


def check_rules_once(plan: Any) -> None:
    """The rules between `plan`'s fields, checked once per distinct plan of an array and, for one
    plan, once per combination of the fields they read (`specs.memo`)."""
    from shardwise.specs.distinct import _leaves, broadcast_shape, find_distinct

    leaves = _leaves(plan)
    if leaves:  # arrays that do not broadcast: one SpecError naming two (not numpy's, later)
        broadcast_shape("plan", leaves)
    try:  # many plans that repeat: each distinct one is checked (building them checks them)
        if find_distinct(plan) is not None:
            return
    except SpecError:
        pass  # the checks below name the first broken plan in the given order
    # one plan (plain numbers): the verdict kept under the fields the rules read (`specs.memo`)
    key = _RULE_GETTER(plan)
    if not _plain_rules_hold(*key):  # not plain numbers, or a rule broken: the full check decides
        _CHECKED.get_or_compute(key, plan._check_rules)


def check_rules(plan: Any) -> bool:
    """The rules between fields, over every plan: whole micro-batches, stage counts, the
    interleaved schedule's needs (True: they hold). They read _RULE_FIELDS alone."""
    from shardwise.specs.rules import batch_rules, raise_first

    whole_batches, interleave_multiple = batch_rules(
        plan.global_batch, plan.dp, plan.micro_batch, plan.pp, as_array(plan.schedule) == Schedule.INTERLEAVED
    )
    raise_first([whole_batches])
    pp_one = as_array(plan.pp) == 1
    given = (as_array(plan.first_stage_layers) > 0) | (as_array(plan.last_stage_layers) > 0)
    if chk.anywhere(pp_one & given):
        raise SpecError("plan: first/last_stage_layers need pp > 1 (with one stage every layer is on it)")
    sched, vpp = as_array(plan.schedule), as_array(plan.vpp)
    bad = (vpp > 1) & (sched != Schedule.INTERLEAVED)
    if chk.anywhere(bad):
        bad = np.asarray(bad)
        raise SpecError(
            f"plan: vpp={np.broadcast_to(vpp, bad.shape)[bad].flat[0]} needs schedule=interleaved "
            "(virtual stages only exist in the interleaved 1F1B schedule)"
        )
    bad = (sched == Schedule.INTERLEAVED) & (as_array(plan.pp) < 2)
    if chk.anywhere(bad):
        raise SpecError("plan: schedule=interleaved needs pp >= 2 (it interleaves pipeline stages)")
    raise_first([interleave_multiple])
    return True


def _check_modules_apply(modules: tuple[str, ...], recompute: object, policy: str) -> None:
    """Recompute modules are Megatron-Core's selective recomputation: they need recompute="selective"
    (an array of plans, as the planner searches, applies them to its selective ones) and the
    Megatron policy."""
    if np.ndim(recompute) == 0 and int(recompute) != Recompute.SELECTIVE:  # type: ignore[call-overload]
        raise SpecError(
            f"plan: recompute_modules {','.join(modules)} needs recompute='selective' "
            "(Megatron-Core's --recompute-granularity selective); it is not used with none or full"
        )
    if policy != "attention":
        raise SpecError(
            f"plan: recompute_modules {','.join(modules)} is Megatron-Core's; it needs selective_policy "
            f"'attention' (the Megatron stacks'), not {policy!r}"
        )
