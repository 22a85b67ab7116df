"""`shardwise plan`'s search flags (the dimensions it searches or is fixed to, and the search's
bounds); `calibrate` takes them too."""

from __future__ import annotations

from typing import Any

import click

from shardwise.cli.options import (
    _stack,
    cuda_graph_scope_option,
    execution_options,
    lora_rank_option,
    lora_targets_option,
    mtp_layers_option,
    offload_activations_option,
    offload_optimizer_option,
    packed_document_len_option,
    pipeline_flushes_option,
    recompute_modules_option,
)


def _ints(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[int, ...] | None:
    from shardwise.errors import SpecError
    from shardwise.requests.plan import _ints as parse

    if value is not None and not value.strip():  # given, but empty: a mistake, not "searched"
        raise click.BadParameter("'' is not allowed; give whole numbers (4 or 4,8), or leave the flag out to search")
    try:
        return parse(str(param.name), value)
    except SpecError as exc:
        raise click.BadParameter(str(exc).split(": ", 1)[1]) from None


def _names(allowed: tuple[str, ...]) -> Any:
    def parse(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[str, ...] | None:
        from shardwise.errors import SpecError
        from shardwise.requests.plan import _names as names

        if value is not None and not value.strip():  # given, but empty: a mistake, not "searched"
            raise click.BadParameter(f"'' is not allowed; choose from {', '.join(allowed)}, or leave the flag out")
        try:
            return names(str(param.name), value, allowed)
        except SpecError as exc:
            raise click.BadParameter(f"{str(exc).split(': ', 1)[1]} (comma-separated)") from None

    return parse


search_options = _stack(
    click.option("--global-batch", type=click.IntRange(min=1), required=True, help="Sequences per optimizer step."),
    click.option("--tp", callback=_ints, metavar="N[,N...]", help="Fix tensor parallelism to these values."),
    click.option("--pp", callback=_ints, metavar="N[,N...]", help="Fix pipeline stages to these values."),
    click.option("--dp", callback=_ints, metavar="N[,N...]", help="Fix data parallelism to these values."),
    click.option("--vpp", callback=_ints, metavar="N[,N...]", help="Fix virtual stages per GPU (1 = not interleaved)."),
    click.option(
        "--cp",
        callback=_ints,
        metavar="N[,N...]",
        help="Fix context parallelism to these values [default: searched from 8K-token sequences on, else 1].",
    ),
    click.option(
        "--ep",
        callback=_ints,
        metavar="N[,N...]",
        help="Fix expert parallelism to these values (mixture-of-experts models) [default: searched].",
    ),
    click.option("--micro-batch", callback=_ints, metavar="N[,N...]", help="Fix the micro-batch size."),
    click.option(
        "--schedule",
        callback=_names(("gpipe", "1f1b", "interleaved", "zb-h1")),
        metavar="NAME[,NAME...]",
        help="Allowed pipeline schedules: gpipe, 1f1b, interleaved, zb-h1 [default: all].",
    ),
    click.option(
        "--recompute",
        callback=_names(("none", "selective", "full")),
        metavar="MODE[,MODE...]",
        help="Allowed recomputation: none, selective, full [default: all; Megatron's selective (the "
        "attention core) only without flash attention, where it differs from none; other stacks' selective "
        "(torchtitan's per-op, JAX remat policies) always].",
    ),
    click.option(
        "--sequence-parallel",
        type=click.Choice(["on", "off", "any"], case_sensitive=False),
        default="any",
        show_default=True,
        help="Sequence parallelism (with tp > 1).",
    ),
    click.option("--zero", callback=_ints, metavar="N[,N...]", help="Allowed ZeRO stages (0-3) [default: all]."),
    lora_rank_option,
    lora_targets_option,
    packed_document_len_option,
    click.option(
        "--recompute-layers",
        type=click.IntRange(0, 100_000),
        help="Recompute the first N layers of every pipeline stage (model chunk) whole, the others as --recompute "
        "says (Megatron-LM --recompute-method block); 0 = none [default: searched where the framework does it: "
        "the fewest that fit, for each plan that does not fit recomputing nothing].",
    ),
    click.option(
        "--shard-group",
        callback=_ints,
        metavar="N[,N...]",
        help="Hybrid sharding (HSDP, FSDP HYBRID_SHARD, Megatron's distributed-optimizer instances): ZeRO shards over "
        "groups of N data-parallel ranks, replicated across them; 0 = every rank [default: 0, and one server's "
        "ranks where the framework does it at that ZeRO stage].",
    ),
    offload_activations_option,
    offload_optimizer_option,
    recompute_modules_option,
    cuda_graph_scope_option,
    mtp_layers_option,
    pipeline_flushes_option,
    click.option(
        "--zero-with-pp",
        is_flag=True,
        help="Also try ZeRO-2/3 with pipeline parallelism (PyTorch FSDP2 + PP; DeepSpeed's pipeline "
        "engine and Megatron-LM do not combine them).",
    ),
    click.option("--max-tp", type=click.IntRange(min=1), help="Largest tensor-parallel degree."),
    click.option(
        "--tp-within-node/--tp-across-nodes",
        default=True,
        show_default=True,
        help="Keep each TP group inside a server (on NVLink).",
    ),
    click.option(
        "--max-micro-batch",
        type=click.IntRange(min=1),
        default=16,
        show_default=True,
        help="Largest micro-batch searched.",
    ),
    click.option(
        "--max-vpp",
        type=click.IntRange(min=1),
        default=8,
        show_default=True,
        help="Most virtual stages per GPU searched.",
    ),
    click.option(
        "--memory-headroom",
        default="10%",
        show_default=True,
        metavar="BYTES|PCT",
        help="Memory to keep free on each GPU beyond the model's estimate, e.g. 8GB or 10% (a margin for the "
        "estimate's own error: see `shardwise validate memory`; 0 plans to the byte).",
    ),
    click.option(
        "--objective",
        type=click.Choice(["time", "throughput-per-gpu"], case_sensitive=False),
        default="time",
        show_default=True,
        help="time: the fastest step on all the GPUs; throughput-per-gpu: the most tokens/s per GPU, "
        "possibly on fewer servers.",
    ),
    execution_options,
)
