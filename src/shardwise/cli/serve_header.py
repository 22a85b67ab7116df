"""`shardwise serve`'s header and legend words (moved out of `cli.serve_report`, which prints them):
the system's PCIe layout, the engine and its attention kernel, the requests' lengths, each plan's
chunked-prefill budget and what the memory column adds up."""

from __future__ import annotations

from typing import Any

from shardwise.physics.memory import RUNTIME_RESERVED_BYTES

# the column is `export_serving.memory_total_bytes`: the reserve too (JSON `memory_bytes.runtime_reserve`;
# review 45 #10), the engine's pool under either batching (review 50 #9)
POOL_NOTE = (
    f"memory: weights + the engine's KV pool + a {RUNTIME_RESERVED_BYTES / 2**30:g} GiB runtime reserve "
    "(CUDA context, workspaces, NCCL)"
)
BATCH_NOTE = (
    f"memory: weights + the batch's KV cache (the engine allocates per batch) + a {RUNTIME_RESERVED_BYTES / 2**30:g} "
    "GiB runtime reserve (CUDA context, workspaces, NCCL)"
)


def memory_note(workload: Any) -> str:
    """What the memory column adds up (`export_serving.kv_pool_bytes`): the engine's pool, or a batch's cache."""
    from shardwise.engines.engine_presets import engine

    return POOL_NOTE if engine(workload.engine).continuous_batching else BATCH_NOTE


def budget_text(rows: list[tuple[str, Any]], per: str) -> str:
    """The chunked-prefill budget of each plan, one number where all share it ("<= 1,024 tokens per
    iteration for tp=1,ep=8, 8,192 for tp=8" where SGLang divides a data-parallel-attention plan's
    among its attention ranks; one shared number misled there, review 50 #10)."""
    budgets = {label: int(est.max_batched_tokens) for label, est in rows}
    if len(set(budgets.values())) == 1:
        return f"<= {next(iter(budgets.values())):,} tokens{per}"
    (first, b), *rest = budgets.items()
    return f"<= {b:,} tokens{per} for {first}, " + ", ".join(f"{b:,} for {label}" for label, b in rest)


def mix_over_context(mix: Any, model: Any) -> str:
    """What share of a table mix's requests (a --lengths CSV) is longer than the context the model
    serves (`Model.serving_context`), in words ("" for none, and for a log-normal mix, which is drawn
    within the context)."""
    if mix is None or getattr(mix, "input_lens", None) is None:
        return ""
    total = mix.input_lens + mix.output_lens
    long = total > model.serving_context
    if not long.any():
        return ""
    share = float(mix.weights[long].sum())
    return (
        f"{share:.0%} of the requests of {mix.name} (the longest {int(total.max()):,} tokens) are longer than "
        f"the model's {model.context_words}"
    )


def lengths_text(workload: Any, rows: list[tuple[str, Any]], mix: Any) -> str:
    """The requests' lengths: fixed, or the mix with its means and source."""
    if mix is None:
        return f"{workload.input_len} prompt + {workload.output_len} new tokens per request"
    from shardwise.requests.serve_result import mix_means

    mean_in, mean_out = mix_means(mix, rows[0][1])
    return f"request lengths {mix.name} (drawn, mean {mean_in:,.0f} prompt + {mean_out:,.0f} new tokens; {mix.source})"


def pcie_text(cluster: Any) -> str:
    """The system's PCIe layout, where its preset gives one (`specs.pcie`)."""
    top = getattr(cluster, "pcie", None)
    if top is None:
        return ""
    where = "each GPU on its own root port" if top.gpus_per_switch == 1 else f"{top.gpus_per_switch} GPUs per switch"
    beyond = "P2P" if top.p2p_beyond_switch and cluster.p2p else "staged through host memory"
    cpu = {"intel": " (Intel CPUs)", "amd": " (AMD CPUs)"}.get(top.cpu, "")
    return f"; PCIe: {where}, {top.gpus_per_socket} per socket{cpu}, hops beyond a switch {beyond}"


def kernel_text(workload: Any, rows: Any) -> str:
    """vLLM's and SGLang's attention kernel on this GPU, or the one asked for (`engines.engine_attention`)."""
    from shardwise.engines.engine_attention import KERNEL_ENGINES

    plan = rows[0][1].scenario.plan
    if workload.engine not in KERNEL_ENGINES or not bool(plan.flash_attention):
        return ""
    return f"attention {plan.attention_kernel}{'' if workload.attention_kernel else ' (its default here)'}; "


def engine_text(workload: Any) -> str:
    """The engine preset whose memory rule and defaults apply (`engines.engine_presets`)."""
    from shardwise.engines.engine_presets import engine

    preset = engine(workload.engine)
    version = "" if preset.version in ("", "-") else f" {preset.version}"  # plain PyTorch has none
    static = "" if preset.continuous_batching else " (no in-flight batching: static batches)"
    return f"engine {preset.name}{version}{static}; "
