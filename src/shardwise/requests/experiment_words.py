"""What a `crossover`, `sweep` or `sensitivity` experiment held fixed, in words
(`describe_experiment`), and what `sp=on` brings with it under a stack that overlaps TP
collectives (`overlap_words`); split from `requests.experiment`, which re-exports both."""

from __future__ import annotations

from typing import Any

# what crossover, sweep and sensitivity price of a training plan's layout (`analyses.evaluate.layout_as_written`)
AS_WRITTEN = (
    "plans as written: sequence parallelism off, ZeRO-0 unless a plan says sp=on or zero=N (predict and plan "
    "take the stack's)"
)


def overlap_words(exp: Any) -> str:
    """'; sp=on brings megatron-core's TP comm overlap ...' where a plan with tp > 1 says sp=on and
    the stack overlaps TP collectives with their GEMMs (its `tp_comm_overlap`); else ''."""
    if exp.workload != "train" or exp.cost_model == "textbook" or not exp.plan_defaults.get("tp_comm_overlap"):
        return ""
    sp = [p.label for p in exp.plans if p.plan_kwargs().get("sequence_parallel") and p.tp != 1]
    if not sp:
        return ""
    stack = exp.plan_defaults.get("framework") or "megatron-core"
    return (
        f"; {' and '.join(sp)}: sequence parallelism and with it {stack}'s TP comm overlap (Transformer Engine "
        "userbuffers, predict's --tp-comm-overlap)"
    )


def describe_experiment(exp: Any, variable: str | None = None, recompute: Any = None) -> str:
    """One paragraph: what was held fixed (the swept variable is named as such); `recompute`: the
    `presets.stack_defaults.RecomputeChoice` priced, named for a training step."""
    m = exp.model

    def fixed(name: str, text: str) -> str:
        return f"{name} swept" if variable == name else text

    links = ", ".join(
        f"{lk.label} = {lk.link.name} ("
        + fixed("bandwidth", f"{lk.link.bandwidth_bytes_per_s / 1e9:g} GB/s per direction")
        + ")"
        for lk in exp.links
    )
    if exp.cost_model == "textbook":
        from shardwise.requests.textbook_links import textbook_links_words

        return (
            f"the brief's Section 7 formulas, verbatim: {fixed('layers', f'{m.layers} layers')}, "
            f"{fixed('hidden', f'hidden {m.hidden}')}, {exp.gpu.peak_flops_per_s_16bit / 1e12:g} TFLOP/s per GPU; "
            f"batch = rows of X (tokens); PP micro-batch min(batch, 4); {textbook_links_words(exp.links)}"
        )
    stack = str(exp.plan_defaults.get("framework") or "megatron-core")
    if recompute is not None:
        stack = f"{stack}, recompute {recompute.words(0 if exp.model.is_moe else None)}"
        stack += " unless a plan says recompute=" if recompute.mode != "none" or recompute.every else ""
    work = {
        "train": f"training step (forward + backward + optimizer) under {stack}; {AS_WRITTEN}{overlap_words(exp)}",
        "forward": "forward pass latency",
        "prefill": "serving: time to first token of the batch",
        "decode": "serving: time per output token",
    }[exp.workload]
    shape = ", ".join(
        [
            fixed("layers", f"{m.layers} layers"),
            fixed("hidden", f"hidden {m.hidden}, {m.heads} heads"),
            fixed("seq_len", f"sequence {m.seq_len}"),
        ]
    )
    batching = "" if exp.workload in ("prefill", "decode") else f"; micro-batch {exp.micro_batch}"
    if exp.workload in ("prefill", "decode"):  # `analyses.evaluate._measure`'s request, unlike `serve`'s
        from shardwise.analyses.evaluate import SERVING_OUTPUT_LEN

        batching = (
            f" (the batch's requests at once, prompts of the sequence length {m.seq_len}, {SERVING_OUTPUT_LEN} "
            "new tokens; all-reduce by NCCL, no engine's custom kernel: `serve` defaults to 512-token prompts "
            "and tensorrt-llm's kernel)"
        )
    across = ""
    if (variable == "gpus" or exp.gpus > exp.gpus_per_node) and exp.inter_node_link is not None:
        nic = exp.inter_node_link
        rate = f"{nic.bandwidth_bytes_per_s / 1e9:.3g} GB/s per GPU"
        across = f"; across servers of {exp.gpus_per_node}: {nic.name} ({rate})"
    return (
        f"shardwise's physical model; {m.name}: {shape}; "
        f"{f'{exp.gpu.name}, the GPU count swept' if variable == 'gpus' else f'{exp.gpus} x {exp.gpu.name}'}; "
        f"{work}{batching}; links: {links}{across}"
    )
