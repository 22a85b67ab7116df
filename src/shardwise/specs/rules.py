"""Every rule a layout must obey, in one place, over arrays.

Each rule is a `Rule`: the rule in words, where it holds (a boolean array, so a sweep or a plan
search masks a whole grid at once), and the one-line error at the first point where it breaks. The
value types raise the first broken rule (`raise_first`); the sweeps and the planner use the same
masks, so no copy can drift.

Sources: Megatron-LM's argument checks (`megatron/training/arguments.py`: heads, KV heads and the
FFN split by tp; the global batch divisible by dp x micro-batch; the interleaved schedule's
micro-batch count a multiple of pp; sequence parallelism splits the sequence by tp), its
context-parallel ring attention (the sequence in 2 cp chunks), and the stage split of
`specs.stages`. `Rule` and `divides` are `specs.rule_core`'s, the mixture-of-experts rules
`specs.expert_rules`'s; both are re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from shardwise.arrays import as_array, as_bool, maximum, single
from shardwise.specs._checks import Number, SpecError

# re-exported: the names the value types, the sweeps and the planner read here
from shardwise.specs.expert_rules import (  # noqa: F401
    moe_rules,
    moe_training_rule,
    moe_training_rules,
    serving_expert_rule,
    serving_expert_tp,
)
from shardwise.specs.rule_core import Rule, at_first, divides, holds, raise_first  # noqa: F401

if TYPE_CHECKING:
    from shardwise.specs.stages import StageSplit

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
        mm, p = at_first(~ok, m, pp)
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
        u, g, c = at_first(~ok, used, gpus, cp)
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
        t, n = at_first(~ok, tp_a, g)
        return (
            f"plan: tp={t} neither divides nor is a multiple of gpus_per_node={n}; "
            "a TP group must fit inside a node or span whole nodes"
        )

    rules = [Rule("a TP group must fit in a server or span whole servers", ok, error)]
    if gpus is not None:
        rules.append(divides("GPUs must fill whole servers", "cluster: GPUs", gpus, "gpus_per_node", gpus_per_node))
    return rules


def tp_rules(tp: Number, heads: Number, kv_heads: Number, ffn_hidden: Number, replicate_kv: bool = False) -> list[Rule]:
    """Each TP rank owns whole heads and KV heads and a whole column block of the MLP. Serving
    (`replicate_kv`) also runs tp above the KV heads, each rank holding one of them
    (`kv_replica_rule`); training does not (Megatron-LM: num_query_groups divisible by tp)."""
    rule = "heads (and KV heads) must be divisible by tp"
    kv = (
        kv_replica_rule(tp, kv_heads)
        if replicate_kv
        else divides(rule, "model: kv_heads", kv_heads, "tp", tp, "each TP rank owns whole KV heads")
    )
    return [
        divides(rule, "model: heads", heads, "tp", tp, "each TP rank owns whole heads"),
        kv,
        divides(rule, "model: ffn_hidden", ffn_hidden, "tp", tp, "the MLP is split by columns"),
    ]


# the serving engines that run tp above the model's KV heads by replicating them (docs/serving.md
# "More TP ranks than KV heads"): vLLM and SGLang's QKVParallelLinear, TensorRT-LLM
KV_REPLICATING = ("vllm", "sglang", "tensorrt-llm")


def kv_replica_rule(tp: Number, kv_heads: Number) -> Rule:
    """Serving: the KV heads split by tp, or, with tp above them, tp a multiple of them: each TP rank
    holds one KV head, each head replicated tp / kv_heads times (vLLM's QKVParallelLinear,
    `num_kv_head_replicas = divide(tp_size, total_num_kv_heads)`; SGLang's the same; TensorRT-LLM's
    trtllm-bench sizes the cache with max(tp, kv_heads) heads)."""
    rule = "KV heads must be divisible by tp, or tp a multiple of them (replicated KV heads)"
    t, k = np.broadcast_arrays(np.asarray(tp), np.asarray(kv_heads))
    ok = np.where(t > k, np.mod(t, k) == 0, np.mod(k, t) == 0)

    def error() -> str:
        x, y = at_first(~ok, t, k)
        if x > y:
            return (
                f"plan: tp={x} is above the model's kv_heads={y} but not a multiple of them (each TP rank "
                "holds one KV head, replicated tp / kv_heads times: vLLM, SGLang, TensorRT-LLM)"
            )
        return f"model: kv_heads: {y} is not divisible by tp={x} (each TP rank owns whole KV heads)"

    return Rule(rule, ok, error)


def kv_training_rule(tp: Number, kv_heads: Number) -> Rule:
    """Training splits the KV heads by tp (Megatron-LM's arguments.py: num_query_groups divisible by
    tp); the scenario allows tp above them for serving (`kv_replica_rule`)."""
    rule = "heads (and KV heads) must be divisible by tp"
    why = "training splits the KV heads by tp; only serving replicates them"
    return divides(rule, "model: kv_heads", kv_heads, "tp", tp, why)


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
        n, k = at_first(~ok_cp, s, c2)
        return (
            f"model: seq_len={n} is not divisible by 2*cp={2 * k} (context parallelism "
            "splits each sequence into 2 cp chunks, two per rank, to balance the causal mask)"
        )

    def sp_error() -> str:
        n, t = at_first(~np.asarray(ok_sp), local, tp)
        why = "sequence parallelism splits the sequence across the TP group"
        fix = "give a sequence length that tp divides, or turn it off: --no-sequence-parallel"
        return f"model: seq_len={n} is not divisible by tp={t} ({why}); {fix}"

    return [
        Rule("context parallelism needs fused (flash) attention", np.asarray(ok_flash), flash_error),
        Rule("context parallelism needs the sequence length divisible by 2 x cp", ok_cp, cp_error),
        Rule("sequence parallelism needs the sequence length divisible by tp", np.asarray(ok_sp), sp_error),
    ]


def ulysses_rule(heads: Number, kv_heads: Number, tp: Number, cp: Number, cp_comm: str) -> Rule:
    """DeepSpeed-Ulysses context parallelism (`cp_comm` a2a) gives each CP rank whole heads: the
    heads and KV heads of a TP rank must divide by cp (Megatron-Core's a2a CP, Transformer Engine)."""
    rule = "a2a context parallelism needs the heads per TP rank divisible by cp"
    h, k, t, c = np.broadcast_arrays(np.asarray(heads), np.asarray(kv_heads), np.asarray(tp), np.asarray(cp))
    if cp_comm != "a2a":  # only Ulysses splits the heads
        return Rule(rule, np.broadcast_to(True, h.shape), str)
    ok = (c <= 1) | ((np.mod(h // t, c) == 0) & (np.mod(k // t, c) == 0))

    def error() -> str:
        a, b, x, y = at_first(~ok, h, k, t, c)
        return (
            f"plan: cp={y} with --cp-comm a2a needs the heads and KV heads of each tp={x} rank ({a // x} and "
            f"{b // x}) divisible by cp (each CP rank attends with whole heads); use --cp-comm p2p or all_gather, "
            "or a smaller cp"
        )

    return Rule(rule, np.asarray(ok), error)


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


def packed_rule(seq_len: Number, document_len: Number, cp: Number) -> Rule:
    """Packed documents (`Plan.packed_document_len`) fit in a sequence and run without context
    parallelism (how Transformer Engine splits packed documents over CP ranks is not modelled)."""
    doc, s, c = np.broadcast_arrays(np.asarray(document_len), np.asarray(seq_len), np.asarray(cp))
    too_long = doc > s
    with_cp = (doc > 0) & (c > 1)
    ok = ~too_long & ~with_cp

    def error() -> str:
        if np.any(too_long):
            n, k = at_first(too_long, doc, s)
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
        n, k, q = at_first(~ok, m, f, p)
        return (
            f"plan: pipeline_flushes {k} is not allowed with {n} micro-batches and pp={q}; it must divide the "
            "micro-batches into schedules of at least pp each (1: one schedule per step)"
        )

    return Rule("pipeline flushes split the micro-batches evenly", ok, error)


def offload_rule(layers: Number, offloaded: Number, pp: Number, recompute: Number, recompute_layers: Number) -> Rule:
    """Activation offload (`Plan.offload_activation_layers`) as Megatron-Core allows it
    (megatron/core/transformer/transformer_config.py `__post_init__`): fewer layers than the
    model's, pp = 1, no activation recomputation."""
    n, L, p, rc, whole = np.broadcast_arrays(
        np.asarray(offloaded), np.asarray(layers), np.asarray(pp), np.asarray(recompute), np.asarray(recompute_layers)
    )
    on = n > 0
    too_many, piped, recomputed = on & (n >= L), on & (p > 1), on & ((rc != 0) | (whole > 0))
    ok = ~(too_many | piped | recomputed)

    def error() -> str:
        if np.any(too_many):
            k, m = at_first(too_many, n, L)
            return f"plan: offload_activation_layers {k} is not allowed; it must be below the model's {m} layers"
        if np.any(piped):
            return (
                "plan: offload_activation_layers needs pp=1 (Megatron-Core: no pipeline parallelism with CPU "
                "offloading)"
            )
        return (
            "plan: offload_activation_layers needs --recompute none and no --recompute-layers (Megatron-Core: CPU "
            "offloading does not work with activation recomputation)"
        )

    return Rule("activation offload: fewer layers than the model's, pp = 1, no recomputation", ok, error)
