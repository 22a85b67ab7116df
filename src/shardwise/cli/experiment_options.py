"""Flags shared by `crossover`, `sweep` and `sensitivity`. Their defaults are the request layer's
(`requests.fields.EXPERIMENT_FIELDS`: the brief's experiment), and the Experiment they ask for is
built there (`requests.experiment`)."""

from __future__ import annotations

from typing import Any

import click

from shardwise.cli.options import LINK_NAME, NAME_OR_FILE, _stack, alias_option, an_input, cluster_options, model_name
from shardwise.cli.plan_flags import RECOMPUTE_HELP
from shardwise.precisions import TRAINING_PRECISIONS
from shardwise.requests.fields import EXPERIMENT_FIELDS, default


def _d(name: str) -> Any:
    return default(name, EXPERIMENT_FIELDS)


F = Any


def choice(values: Any) -> click.Choice:
    """A click.Choice matched without regard to case (`--workload Train` as `train`)."""
    return click.Choice(list(values), case_sensitive=False)


def shared_cluster_options(*names: str) -> F:
    """The options of `cluster_options` (predict's) called `names`, the same flags and help: each
    command that applies this decorator gets its own copies."""

    def apply(func: F) -> F:
        def donor() -> None: ...

        cluster_options(donor)
        found = {p.name: p for p in donor.__click_params__}  # type: ignore[attr-defined]
        if not hasattr(func, "__click_params__"):
            func.__click_params__ = []
        for name in reversed(names):  # click reverses the list it collects
            func.__click_params__.append(found[name])
        return func

    return apply


experiment_options = _stack(
    click.option(
        "--model",
        "model_name",
        metavar="NAME|FILE",
        default=_d("model"),
        show_default=True,
        callback=model_name,
        help="Model preset or YAML file.",
    ),
    click.option("--layers", type=int, help="Override the model's layers."),
    click.option(
        "--hidden",
        type=int,
        help=(
            "Override the hidden size; the model's head dim, heads per KV head and ffn/hidden ratio are kept "
            "(docs/commands/crossover.md; predict/plan/serve alike); --heads/--kv-heads/--ffn-hidden given win."
        ),
    ),
    click.option("--heads", type=int, help="Override the attention heads."),
    click.option("--kv-heads", type=int, help="Override the key/value heads (grouped-query attention)."),
    click.option("--ffn-hidden", type=int, help="Override the MLP hidden size."),
    click.option("--vocab", type=int, help="Override the vocabulary."),
    click.option("--family", type=choice(["gpt", "llama"]), help="Architecture defaults of the model."),
    click.option("--seq-len", type=int, help="Override the sequence length (tokens)."),
    click.option(
        "--gpu",
        "gpu_name",
        metavar="NAME|FILE",
        callback=an_input(NAME_OR_FILE),
        help="GPU preset (instead of, or overriding, the system's) [default: the system's, else a100-sxm4-80gb: "
        "the brief's 312 TFLOP/s].",
    ),
    shared_cluster_options("system"),
    alias_option(
        "--num-gpus",
        "gpus",
        old=("--gpus",),
        type=int,
        help="GPUs (a plan's dp fills what tp x pp leave) [default: one server of the system, else 8].",
    ),
    shared_cluster_options("nodes"),
    click.option("--gpus-per-node", type=int, help="GPUs per server [default: the system's, else 8]."),
    click.option(
        "--calibration",
        metavar="FILE",
        callback=an_input("give the YAML file `shardwise calibrate` wrote"),
        help="A calibration from `shardwise calibrate`: fitted GEMM efficiency, bandwidths and overheads, and "
        "the width of the 80% bands.",
    ),
    click.option(
        "--inter-link",
        metavar="NAME|FILE|RATE",
        callback=an_input(LINK_NAME),
        help="Each GPU's link across servers (used when --num-gpus exceeds a server) [default: the system's, "
        "else ib-hdr].",
    ),
    shared_cluster_options("nics_per_node", "link_latency"),
    alias_option(
        "--intra-link",
        "links",
        old=("--link",),
        multiple=True,
        metavar="[LABEL=]NAME|RATE[,latency=..]",
        callback=an_input(LINK_NAME),
        help="A link inside the server to compare (repeat); required with a --gpu whose servers do not use nvlink3. "
        "[default: the system's, else NVLink=nvlink3 PCIe=pcie4, A100 servers']",
    ),
    click.option(
        "--plan",
        "plans",
        multiple=True,
        metavar="tp=N[,pp=N,...]",
        help="A plan to compare (repeat): tp, pp (a number or 'all'), vpp, mb, schedule, recompute, sp, zero, "
        "shard (hybrid sharding group), first and last (layers on the first / last pipeline stage, e.g. "
        "pp=8,last=2), ep, etp (mixture of experts). [default: tp=8 pp=8]",
    ),
    alias_option(
        "--global-batch",
        "batch",
        old=("--batch",),
        type=int,
        default=_d("global_batch"),
        show_default=True,
        help="Sequences per step (or per forward pass / serving batch) when not varied.",
    ),
    click.option(
        "--micro-batch", type=int, default=_d("micro_batch"), show_default=True, help="Sequences per micro-batch."
    ),
    click.option(
        "--workload",
        type=choice(["train", "forward", "prefill", "decode"]),
        default=_d("workload"),
        show_default=True,
        help="train: a training step; forward: one forward pass of the batch; prefill: serving's time to first "
        "token for a batch of prompts; decode: serving's time per output token at that batch. prefill and decode: "
        "prompts of the model's sequence length, all-reduce by NCCL without an engine's custom kernel (`serve` "
        "defaults to 512-token prompts and tensorrt-llm's kernel, so its TPOT is lower).",
    ),
    click.option(
        "--cost-model",
        type=choice(["physical", "textbook"]),
        default=_d("cost_model"),
        show_default=True,
        help="physical: shardwise's model; textbook: the brief's Section 7 formulas, verbatim.",
    ),
    click.option(
        "--recompute",
        type=choice(["none", "selective", "full"]),
        default=_d("recompute"),
        help=RECOMPUTE_HELP,
    ),
    click.option(
        "--flash-attention/--no-flash-attention",
        default=_d("flash_attention"),
        help="Fused attention that never stores the s x s scores [default: the framework's].",
    ),
    click.option(
        "--precision",
        type=choice(TRAINING_PRECISIONS),
        default=_d("precision"),
        help="fp8: per-tensor scaling (Hopper and later); mxfp8: block scaling (Blackwell). [default: bf16; fp16 on "
        "a GPU without BF16, V100]",
    ),
    click.option(
        "--framework",
        default=_d("framework"),
        show_default=True,
        metavar="NAME|FILE",
        callback=an_input(NAME_OR_FILE),
        help="Software stack whose execution flags the plans use (see `shardwise presets frameworks`), or a YAML "
        "file of your own (`like: fsdp` and the fields that differ).",
    ),
    click.option(
        "--first-stage-layers",
        type=int,
        help="Layers on the first pipeline stage of every plan with pp > 1 (one plan's: its first= key) "
        "[default: even].",
    ),
    click.option(
        "--last-stage-layers",
        type=int,
        help="Layers on the last pipeline stage of every plan with pp > 1 (one plan's: its last= key) [default: even].",
    ),
    click.option(
        "--ignore-memory",
        is_flag=True,
        help="Compare times even where a plan does not fit in GPU memory (by default it cannot win).",
    ),
)
