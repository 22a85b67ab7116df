"""The rules of mixture-of-experts layouts, over arrays (see `specs.rules`): whole experts per
expert-parallel rank, the expert ranks folded into each stage's GPUs (Megatron-Core's "MoE parallel
folding"), what training a mixture of experts needs and leaves unmodelled (sequence parallelism
with TP; no LoRA, no layers recomputed whole), where the expert all-to-all overlap runs, and how
serving spreads the experts over the GPUs.
"""

from __future__ import annotations

import numpy as np

from shardwise.specs._checks import Number
from shardwise.specs.rule_core import Rule, at_first, divides


# Megatron-Core's MoE layer raises "sequence parallelism must be used" when training with TP > 1
# without it (megatron/core/transformer/moe/moe_layer.py: `moe_training_rule`); the expert layout folds into the GPUs of
# each stage (megatron/core/parallel_state.py `initialize_model_parallel`: world size divisible by
# expert_tensor_parallel_size x expert_model_parallel_size x pp; arguments.py: experts divisible by
# expert_model_parallel_size; "MoE parallel folding", megatron/core/transformer/moe/README.md).
def moe_rules(
    experts: int,
    expert_ffn: int,
    tp: Number,
    cp: Number,
    dp: Number,
    ep: Number,
    etp: Number,
    model_name: str,
) -> list[Rule]:
    """Expert parallelism needs experts; whole experts per EP rank; ep x etp fold into tp x cp x dp."""
    e_arr = np.asarray(ep)
    if not experts:
        ok = e_arr == 1

        def dense_error() -> str:
            (n,) = at_first(~ok, e_arr)
            return f"plan: ep={n} needs a mixture-of-experts model; model {model_name!r} has no experts (use ep=1)"

        return [Rule("expert parallelism needs a mixture-of-experts model", np.asarray(ok), dense_error)]
    whole = "each EP rank holds whole experts"
    columns = "expert tensor parallelism splits each expert's columns"
    folding = "the expert ranks fold into each stage's tp x cp x dp GPUs"  # said of every stack (nanotron's too)
    rules = [
        divides("experts must be divisible by ep", "model: experts", experts, "ep", ep, whole),
        divides("the expert FFN must be divisible by etp", "model: expert_ffn_hidden", expert_ffn, "etp", etp, columns),
        divides("ep x etp must divide tp x cp x dp", "plan: tp x cp x dp", np.asarray(tp) * cp * dp, "ep x etp",
                e_arr * etp, folding),
    ]  # fmt: skip
    return rules


def moe_training_rule(experts: int, tp: Number, sequence_parallel: Number, framework: str = "megatron-core") -> Rule:
    """Training a mixture of experts with TP needs sequence parallelism (Megatron-Core's MoE layer
    refuses otherwise; serving has no such rule). Priced so for every stack; the message names
    Megatron-Core only under it: `framework` is the built-in stack (`Plan.memory_stack_key`: a
    framework file's `like:`, as `presets.stack_defaults.builtin_of` reads it, else `Plan.framework`),
    so a file that starts from Megatron-Core is told Megatron-Core's rule."""
    ok = ~np.asarray(bool(experts)) | (np.asarray(tp) <= 1) | np.asarray(sequence_parallel, dtype=bool)
    why = "Megatron-Core's rule" if framework == "megatron-core" else "as shardwise prices a mixture of experts"

    def error() -> str:
        (t,) = at_first(~np.asarray(ok), np.broadcast_to(np.asarray(tp), np.shape(ok)))
        return (
            f"plan: tp={t} with a mixture of experts needs sequence parallelism when training ({why}); "
            "add --sequence-parallel or use tp=1"
        )

    return Rule("training a mixture of experts with TP needs sequence parallelism", np.asarray(ok), error)


def lora_rule(experts: int, lora_rank: Number) -> Rule:
    """LoRA is modelled for dense models (adapters on the attention and dense MLP layers)."""
    ok = ~np.asarray(bool(experts)) | (np.asarray(lora_rank) == 0)

    def error() -> str:
        return (
            "plan: --lora-rank with a mixture of experts is not modelled (the adapters of routed experts are not "
            "described); drop --lora-rank (full training) or use a dense model"
        )

    return Rule("LoRA needs a dense model", np.asarray(ok), error)


def recompute_layers_rule(experts: int, recompute_layers: Number) -> Rule:
    """Layers recomputed whole (`Plan.recompute_layers`) are modelled for dense models."""
    ok = ~np.asarray(bool(experts)) | (np.asarray(recompute_layers) == 0)

    def error() -> str:
        return (
            "plan: --recompute-layers with a mixture of experts is not modelled (which of a chunk's first layers "
            "are MoE layers is not tracked); drop it and use --recompute full/selective/none"
        )

    return Rule("recompute_layers needs a dense model", np.asarray(ok), error)


def training_dispatcher_rule(dispatcher: Number) -> Rule:
    """'dp-gather' is SGLang's serving pattern (`engines.moe`), no training dispatcher."""
    ok = np.asarray(dispatcher) != "dp-gather"

    def error() -> str:
        return "plan: moe_dispatcher 'dp-gather' is for serving only; train with alltoall, flex or allgather"

    return Rule("dp-gather is for serving", np.asarray(ok), error)


def moe_training_rules(
    experts: int,
    tp: Number,
    sequence_parallel: Number,
    ep: Number = 1,
    pp: Number = 1,
    interleaved: Number = False,
    full_recompute: Number = False,
    overlap: Number = False,
    lora_rank: Number = 0,
    recompute_layers: Number = 0,
    dispatcher: str = "alltoall",
    framework: str = "megatron-core",
) -> list[Rule]:
    """The rules of training a mixture of experts: sequence parallelism with TP, where the
    expert all-to-all overlap runs, no LoRA and no layers recomputed whole."""
    return [
        training_dispatcher_rule(dispatcher),
        moe_training_rule(experts, tp, sequence_parallel, framework),
        *moe_overlap_rules(overlap, ep, pp, interleaved, full_recompute, dispatcher),
        lora_rule(experts, lora_rank),
        recompute_layers_rule(experts, recompute_layers),
    ]


# Megatron-Core's combined 1F1B (`--overlap-moe-expert-parallel-comm`, transformer_config.py):
# needs expert parallelism, the virtual (interleaved) pipeline when pp > 1, and no full
# recomputation (it schedules the forward and the backward of two micro-batches layer by layer).
def moe_overlap_rules(
    overlap: Number, ep: Number, pp: Number, interleaved: Number, full_recompute: Number, dispatcher: str = "alltoall"
) -> list[Rule]:
    """Where the expert all-to-all overlap can run (training): with the alltoall or flex
    dispatcher only (transformer_config.py: "supported with alltoall/flex token dispatcher")."""
    on = np.asarray(overlap, dtype=bool)
    shape = np.broadcast_shapes(*(np.shape(x) for x in (overlap, ep, pp, interleaved, full_recompute)))
    by_a2a = np.broadcast_to(~on | (dispatcher != "allgather"), shape)
    needs_ep = np.broadcast_to(~on | (np.asarray(ep) > 1), shape)
    needs_vpp = np.broadcast_to(~on | (np.asarray(pp) <= 1) | np.asarray(interleaved, dtype=bool), shape)
    no_full = np.broadcast_to(~on | ~np.asarray(full_recompute, dtype=bool), shape)

    def ep_error() -> str:
        return "plan: moe_overlap needs ep > 1 (it hides the expert all-to-alls); add --ep or drop --moe-overlap"

    def vpp_error() -> str:
        (p,) = at_first(~needs_vpp, np.broadcast_to(np.asarray(pp), shape))
        return (
            f"plan: moe_overlap with pp={p} needs the interleaved schedule (Megatron-Core's combined 1F1B runs "
            "with pp=1 or virtual stages); add --vpp 2 or more, or drop --moe-overlap"
        )

    def full_error() -> str:
        return "plan: moe_overlap does not run with full recomputation (Megatron-Core's rule); use selective or none"

    def dispatcher_error() -> str:
        return (
            "plan: moe_overlap runs with the alltoall or flex dispatcher, not allgather (Megatron-Core's rule); "
            "use --moe-dispatcher alltoall or drop --moe-overlap"
        )

    return [
        Rule("the expert all-to-all overlap needs the alltoall or flex dispatcher", by_a2a, dispatcher_error),
        Rule("the expert all-to-all overlap needs ep > 1", needs_ep, ep_error),
        Rule("the expert all-to-all overlap needs pp = 1 or the interleaved schedule", needs_vpp, vpp_error),
        Rule("the expert all-to-all overlap does not run with full recomputation", no_full, full_error),
    ]


def serving_expert_tp(tp: Number, ep: Number, etp: Number, dp: Number = 1) -> Number:
    """etp for serving: as given, or, where it is unset (0) and ep > 1, tp / ep when ep <= tp (the
    experts spread over a replica's TP GPUs) and tp dp / ep when ep > tp (data-parallel attention:
    the experts spread over all dp x tp GPUs), at least 1 (`serving_expert_rule`)."""
    e, t = np.asarray(ep), np.asarray(tp)
    unset = (np.asarray(etp) == 0) & (e > 1)
    group = np.where(e > t, t * np.asarray(dp), t)
    out = np.where(unset, np.maximum(group // np.maximum(e, 1), 1), etp).astype(int)
    return out.item() if out.ndim == 0 else out


def serving_expert_rule(tp: Number, ep: Number, etp: Number, dp: Number = 1) -> Rule:
    """Serving with expert parallelism spreads the experts over a replica's TP GPUs, which all
    hold every token after attention (vLLM `--enable-expert-parallel`, SGLang `--ep-size`,
    TensorRT-LLM `moe_expert_parallel_size` x `moe_tensor_parallel_size` = tp): ep x etp = tp; or,
    with data-parallel attention (vLLM `--data-parallel-size` with `--enable-expert-parallel`,
    SGLang `--enable-dp-attention`, TensorRT-LLM `enable_attention_dp`), over all the dp x tp GPUs
    of a pipeline stage: ep x etp = tp x dp (`engines.dp_attention`)."""
    t, e, x, d = np.broadcast_arrays(np.asarray(tp), np.asarray(ep), np.asarray(etp), np.asarray(dp))
    ok = (e <= 1) | (e * x == t) | (e * x == t * d)

    def error() -> str:
        a, b, c, r = at_first(~ok, t, e, x, d)
        return (
            f"plan: ep={b} x etp={c} must equal tp={a} when serving (experts over a replica's TP GPUs) or tp x "
            f"dp={a * r} (data-parallel attention: experts over all GPUs): ep must divide one of them, etp (derived "
            "from it where unset) splits each expert over the rest"
        )

    return Rule("serving spreads the experts over the TP GPUs (ep x etp = tp) or all GPUs (= tp x dp)", ok, error)
