"""Every rule a layout must obey, in one place, over arrays.

Each rule is a `Rule`: the rule in words, where it holds (a boolean array, so a sweep or a plan
search masks a whole grid at once), and the one-line error at the first point where it breaks. The
value types raise the first broken rule (`raise_first`); the sweeps and the planner use the same
masks, so no copy can drift.

Sources: Megatron-LM's argument checks (`megatron/training/arguments.py`: heads, KV heads and the
FFN split by tp; the global batch divisible by dp x micro-batch; the interleaved schedule's
micro-batch count a multiple of pp; sequence parallelism splits the sequence by tp), its
context-parallel ring attention (the sequence in 2 cp chunks), and the stage split of
`specs.stages`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from shardwise.arrays import as_array, as_bool, maximum, single
from shardwise.specs._checks import Number, SpecError

if TYPE_CHECKING:
    from shardwise.specs.stages import StageSplit


class Rule(NamedTuple):
    rule: str  # the rule in words (what a sweep's or a plan search's "invalid because" says)
    ok: np.ndarray  # where it holds
    error: Callable[[], str]  # the one-line error at the first point where it breaks


def raise_first(rules: Iterable[Rule]) -> None:
    """Raise SpecError for the first rule that breaks anywhere."""
    for r in rules:
        ok = r.ok
        if not (bool(ok) if isinstance(ok, (bool, np.bool_)) else np.all(ok)):
            raise SpecError(r.error())


def holds(rules: Iterable[Rule]) -> np.ndarray | bool:
    """Where every rule holds."""
    out: np.ndarray | bool = True
    for r in rules:
        out = out & r.ok
    return out


def _at(bad: np.ndarray, *arrays: Number) -> list[object]:
    """The values of `arrays` at the first point where `bad` holds."""
    shape = bad.shape
    i = int(np.flatnonzero(bad)[0]) if bad.ndim else 0
    return [np.broadcast_to(np.asarray(a), shape).flat[i].item() if shape else np.asarray(a).item() for a in arrays]


def divides(rule: str, field: str, value: Number, by_field: str, by: Number, why: str = "") -> Rule:
    """`value` is a multiple of `by`."""
    if single(value, by) and by != 0:  # one plan: Python's remainder (the same truth as np.mod's)
        a, b = value, by
        ok = np.bool_(a % b == 0)
    else:
        a, b = np.broadcast_arrays(np.asarray(value), np.asarray(by))
        ok = np.mod(a, b) == 0

    def error() -> str:
        x, y = _at(~ok, a, b)
        suffix = f" ({why})" if why else ""
        return f"{field}: {x} is not divisible by {by_field}={y}{suffix}"

    return Rule(rule, ok, error)


HEAD_DIM_WHY = "head dim = hidden / heads"
GQA_WHY = "GQA groups query heads"


def model_rules(
    hidden: Number, heads: Number, kv_heads: Number, prefix: str = "model", head_dim_given: bool = False
) -> list[Rule]:
    """The head dimension is hidden / heads unless the model gives it; query heads share KV heads."""
    gqa = divides("heads must be divisible by KV heads", f"{prefix}: heads", heads, "kv_heads", kv_heads, GQA_WHY)
    if head_dim_given:
        return [gqa]
    head_dim = divides("hidden must be divisible by heads", f"{prefix}: hidden", hidden, "heads", heads, HEAD_DIM_WHY)
    return [head_dim, gqa]


def batch_rules(global_batch: Number, dp: Number, micro_batch: Number, pp: Number, interleaved: Number) -> list[Rule]:
    """The global batch splits into whole micro-batches per replica; the interleaved schedule
    needs a micro-batch count that is a multiple of pp (Megatron-LM's rule)."""
    per_step = as_array(dp) * as_array(micro_batch)
    rules = [
        divides(
            "the batch must be divisible by dp x micro-batch",
            "plan: global_batch",
            global_batch,
            "dp*micro_batch",
            per_step,
            "each data-parallel replica runs whole micro-batches",
        )
    ]
    m = as_array(global_batch) / maximum(per_step, 1)
    ok = ~as_bool(interleaved) | ((m % pp == 0) if single(m, pp) else (np.mod(m, pp) == 0))

    def error() -> str:
        mm, p = _at(~ok, m, pp)
        return (
            f"plan: schedule=interleaved needs the micro-batch count m={mm:g} to be a multiple of pp={p} "
            "(Megatron-LM's rule for the interleaved schedule)"
        )

    rules.append(Rule("interleaving needs the micro-batch count to be a multiple of pp", ok, error))
    return rules


def fills_gpus(gpus: Number, tp: Number, pp: Number, dp: Number, cp: Number = 1) -> Number:
    """tp x pp x cp x dp use every GPU with a whole dp >= 1: plain ints give a bool (the
    planner's inner loop), arrays an array."""
    return (tp * pp * dp * cp == gpus) & (dp >= 1) & (dp % 1 == 0)


def gpu_rules(
    gpus: Number, tp: Number, pp: Number, dp: Number, cp: Number, context: str | Callable[[], str] = ""
) -> Rule:
    """tp x pp x cp x dp fill the GPUs exactly (`fills_gpus`); `context` (or what it returns,
    written only when the rule breaks) follows the message."""
    used = np.asarray(tp) * np.asarray(pp) * np.asarray(dp) * np.asarray(cp)
    ok = np.asarray(fills_gpus(np.asarray(gpus), np.asarray(tp), np.asarray(pp), np.asarray(dp), np.asarray(cp)))

    def error() -> str:
        u, g, c = _at(~ok, used, gpus, cp)
        name = "tp*pp*dp*cp" if c > 1 else "tp*pp*dp"
        text = context() if callable(context) else context
        suffix = f" ({text})" if text else ""
        return f"plan: {name}: {u:g} must equal GPUs in the cluster={g}{suffix}"

    return Rule("tp x pp must divide the GPU count (dp = GPUs / (tp x pp) is not whole)", ok, error)


def node_rules(tp: Number, gpus_per_node: Number, gpus: Number | None = None) -> list[Rule]:
    """A TP group fits inside a server or spans whole servers; the GPUs fill whole servers."""
    tp_a, g = np.broadcast_arrays(np.asarray(tp), np.asarray(gpus_per_node))
    ok = (np.mod(g, tp_a) == 0) | (np.mod(tp_a, g) == 0)

    def error() -> str:
        t, n = _at(~ok, tp_a, g)
        return (
            f"plan: tp={t} neither divides nor is a multiple of gpus_per_node={n}; "
            "a TP group must fit inside a node or span whole nodes"
        )

    rules = [Rule("a TP group must fit in a server or span whole servers", ok, error)]
    if gpus is not None:
        rules.append(divides("GPUs must fill whole servers", "cluster: GPUs", gpus, "gpus_per_node", gpus_per_node))
    return rules


def tp_rules(tp: Number, heads: Number, kv_heads: Number, ffn_hidden: Number) -> list[Rule]:
    """Each TP rank owns whole heads and KV heads and a whole column block of the MLP."""
    rule = "heads (and KV heads) must be divisible by tp"
    return [
        divides(rule, "model: heads", heads, "tp", tp, "each TP rank owns whole heads"),
        divides(rule, "model: kv_heads", kv_heads, "tp", tp, "each TP rank owns whole KV heads"),
        divides(rule, "model: ffn_hidden", ffn_hidden, "tp", tp, "the MLP is split by columns"),
    ]


def sequence_rules(
    seq_len: Number, tp: Number, cp: Number, sequence_parallel: Number, flash_attention: Number
) -> list[Rule]:
    """Context parallelism needs fused attention and the sequence in 2 cp chunks; sequence
    parallelism splits each rank's sequence by tp."""
    c = np.asarray(cp)
    ok_flash = ~(c > 1) | np.asarray(flash_attention, dtype=bool)
    s, c2 = np.broadcast_arrays(np.asarray(seq_len), c)
    ok_cp = (c2 <= 1) | (np.mod(s, 2 * c2) == 0)
    local = np.asarray(seq_len) // c
    sp = np.asarray(sequence_parallel, dtype=bool)
    ok_sp = ~sp | (np.mod(local, tp) == 0)

    def flash_error() -> str:
        return (
            "plan: context parallelism needs fused (flash) attention (Megatron-Core's ring attention is "
            "Transformer Engine's fused kernel); drop --no-flash-attention or use cp=1"
        )

    def cp_error() -> str:
        n, k = _at(~ok_cp, s, c2)
        return (
            f"model: seq_len={n} is not divisible by 2*cp={2 * k} (context parallelism "
            "splits each sequence into 2 cp chunks, two per rank, to balance the causal mask)"
        )

    def sp_error() -> str:
        n, t = _at(~np.asarray(ok_sp), local, tp)
        why = "sequence parallelism splits the sequence across the TP group"
        return f"model: seq_len={n} is not divisible by tp={t} ({why})"

    return [
        Rule("context parallelism needs fused (flash) attention", np.asarray(ok_flash), flash_error),
        Rule("context parallelism needs the sequence length divisible by 2 x cp", ok_cp, cp_error),
        Rule("sequence parallelism needs the sequence length divisible by tp", np.asarray(ok_sp), sp_error),
    ]


def stage_rule(split: StageSplit, layers: Number, pp: Number, vpp: Number) -> Rule:
    """Every pipeline stage holds at least one layer per model chunk, and the split adds up to
    the model's layers (`specs.stages`, whose `split_ok` and `check_split` say how)."""
    from shardwise.specs.stages import check_split, split_ok

    ok = np.asarray(split_ok(split, layers, pp, vpp))

    def error() -> str:
        try:
            check_split(split, layers, pp, vpp)
        except SpecError as exc:
            return str(exc)
        return "plan: every pipeline stage needs at least one layer per model chunk"  # pragma: no cover

    return Rule("every pipeline stage needs at least one layer per model chunk", ok, error)


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
            (n,) = _at(~ok, e_arr)
            return f"plan: ep={n} needs a mixture-of-experts model; model {model_name!r} has no experts (use ep=1)"

        return [Rule("expert parallelism needs a mixture-of-experts model", np.asarray(ok), dense_error)]
    whole = "each EP rank holds whole experts"
    columns = "expert tensor parallelism splits each expert's columns"
    folding = "Megatron-Core folds the expert ranks into each stage's tp x cp x dp GPUs"
    rules = [
        divides("experts must be divisible by ep", "model: experts", experts, "ep", ep, whole),
        divides("the expert FFN must be divisible by etp", "model: expert_ffn_hidden", expert_ffn, "etp", etp, columns),
        divides("ep x etp must divide tp x cp x dp", "plan: tp*cp*dp", np.asarray(tp) * cp * dp, "ep*etp",
                e_arr * etp, folding),
    ]  # fmt: skip
    return rules


def moe_training_rule(experts: int, tp: Number, sequence_parallel: Number) -> Rule:
    """Training a mixture of experts with TP needs sequence parallelism (Megatron-Core's MoE layer
    refuses otherwise; serving has no such rule)."""
    ok = ~np.asarray(bool(experts)) | (np.asarray(tp) <= 1) | np.asarray(sequence_parallel, dtype=bool)

    def error() -> str:
        (t,) = _at(~np.asarray(ok), np.broadcast_to(np.asarray(tp), np.shape(ok)))
        return (
            f"plan: tp={t} with a mixture of experts needs sequence parallelism when training (Megatron-Core's "
            "rule); add --sequence-parallel or use tp=1"
        )

    return Rule("training a mixture of experts with TP needs sequence parallelism", np.asarray(ok), error)


def lora_rule(experts: int, lora_rank: Number) -> Rule:
    """LoRA is modelled for dense models (adapters on the attention and dense MLP layers)."""
    ok = ~np.asarray(bool(experts)) | (np.asarray(lora_rank) == 0)

    def error() -> str:
        return (
            "plan: lora_rank with a mixture of experts is not modelled (the adapters of routed experts are not "
            "described); use lora_rank=0 (full training) or a dense model"
        )

    return Rule("LoRA needs a dense model", np.asarray(ok), error)


def packed_rule(seq_len: Number, document_len: Number, cp: Number) -> Rule:
    """Packed documents (`Plan.packed_document_len`) fit in a sequence and run without context
    parallelism (how Transformer Engine splits packed documents over CP ranks is not modelled)."""
    doc, s, c = np.broadcast_arrays(np.asarray(document_len), np.asarray(seq_len), np.asarray(cp))
    too_long = doc > s
    with_cp = (doc > 0) & (c > 1)
    ok = ~too_long & ~with_cp

    def error() -> str:
        if np.any(too_long):
            n, k = _at(too_long, doc, s)
            return f"plan: packed_document_len {n} is not allowed; at most the sequence length {k} (0: not packed)"
        return (
            "plan: packed_document_len with context parallelism is not modelled (how packed documents are split "
            "over the CP ranks is not described); use cp=1 or packed_document_len=0"
        )

    return Rule("packed documents fit in a sequence, without context parallelism", ok, error)


def flushes_rule(micro_batches: Number, flushes: Number, pp: Number) -> Rule:
    """`Plan.pipeline_flushes` splits the step's micro-batches into equal schedules of at least pp
    each (torch.distributed.pipelining's schedules need n_microbatches >= the stages per rank)."""
    m, f, p = np.broadcast_arrays(np.asarray(micro_batches), np.asarray(flushes), np.asarray(pp))
    ok = (f <= 1) | ((np.mod(m, f) == 0) & (m >= f * p))

    def error() -> str:
        n, k, q = _at(~ok, m, f, p)
        return (
            f"plan: pipeline_flushes {k} is not allowed with {n} micro-batches and pp={q}; it must divide the "
            "micro-batches into schedules of at least pp each (1: one schedule per step)"
        )

    return Rule("pipeline flushes split the micro-batches evenly", ok, error)


def recompute_layers_rule(experts: int, recompute_layers: Number) -> Rule:
    """Layers recomputed whole (`Plan.recompute_layers`) are modelled for dense models."""
    ok = ~np.asarray(bool(experts)) | (np.asarray(recompute_layers) == 0)

    def error() -> str:
        return (
            "plan: recompute_layers with a mixture of experts is not modelled (which of a chunk's first layers "
            "are MoE layers is not tracked); use recompute_layers=0 with --recompute full/selective/none"
        )

    return Rule("recompute_layers needs a dense model", np.asarray(ok), error)


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
) -> list[Rule]:
    """The rules of training a mixture of experts: sequence parallelism with TP, where the
    expert all-to-all overlap runs, no LoRA and no layers recomputed whole."""
    return [
        moe_training_rule(experts, tp, sequence_parallel),
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
        (p,) = _at(~needs_vpp, np.broadcast_to(np.asarray(pp), shape))
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
        a, b, c, r = _at(~ok, t, e, x, d)
        return (
            f"plan: ep={b} x etp={c} must equal tp={a} when serving (experts over a replica's TP GPUs) or tp x "
            f"dp={a * r} (data-parallel attention: experts over all GPUs); leave etp unset to have it derived"
        )

    return Rule("serving spreads the experts over the TP GPUs (ep x etp = tp) or all GPUs (= tp x dp)", ok, error)


def ulysses_rule(heads: Number, kv_heads: Number, tp: Number, cp: Number, cp_comm: str) -> Rule:
    """DeepSpeed-Ulysses context parallelism (`cp_comm` a2a) gives each CP rank whole heads: the
    heads and KV heads of a TP rank must divide by cp (Megatron-Core's a2a CP, Transformer Engine)."""
    rule = "a2a context parallelism needs the heads per TP rank divisible by cp"
    h, k, t, c = np.broadcast_arrays(np.asarray(heads), np.asarray(kv_heads), np.asarray(tp), np.asarray(cp))
    if cp_comm != "a2a":  # only Ulysses splits the heads
        return Rule(rule, np.broadcast_to(True, h.shape), str)
    ok = (c <= 1) | ((np.mod(h // t, c) == 0) & (np.mod(k // t, c) == 0))

    def error() -> str:
        a, b, x, y = _at(~ok, h, k, t, c)
        return (
            f"plan: cp={y} with cp_comm a2a needs the heads and KV heads of each tp={x} rank ({a // x} and "
            f"{b // x}) divisible by cp (each CP rank attends with whole heads); use cp_comm p2p or all_gather, "
            "or a smaller cp"
        )

    return Rule(rule, np.asarray(ok), error)
