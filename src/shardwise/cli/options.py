"""Flags shared by the commands that take a model, a cluster and a parallel plan, and the code
that turns them into a `Scenario` (heavy imports happen inside the functions). The plan's flags
are `plan_flags`, the click machinery `option_kit`; both are re-exported here."""

from __future__ import annotations

from typing import Any

import click

# re-exported: the names the commands read here
from shardwise.cli.option_kit import (  # noqa: F401
    LINK_NAME,
    NAME_OR_FILE,
    alias_option,
    an_input,
    model_name,
    non_empty,
)
from shardwise.cli.option_kit import stack_options as _stack
from shardwise.cli.plan_flags import (  # noqa: F401
    cuda_graph_scope_option,
    execution_options,
    lora_rank_option,
    lora_targets_option,
    mtp_layers_option,
    offload_activations_option,
    offload_optimizer_option,
    packed_document_len_option,
    pipeline_flushes_option,
    plan_layout_options,
    recompute_layers_option,
    recompute_modules_option,
    stage_options,
)
from shardwise.requests.fields import by_name

model_options = _stack(
    click.option(
        "--model",
        "model_name",
        metavar="NAME|FILE",
        callback=model_name,
        help="Model preset (see `shardwise presets models`), a YAML file, or a Hugging Face config.json.",
    ),
    click.option("--layers", type=int, help="Transformer layers (overrides the preset)."),
    click.option(
        "--hidden",
        type=int,
        help="Hidden size h. On a named model the heads, KV heads and MLP width follow it (its head dim, query "
        "heads per KV head and ffn/hidden kept, as crossover/sweep); --heads/--kv-heads/--ffn-hidden given win.",
    ),
    click.option("--heads", type=int, help="Attention heads a."),
    click.option("--kv-heads", type=int, help="Key/value heads (grouped-query attention); default: heads."),
    click.option("--ffn-hidden", type=int, help="MLP hidden size; default: 4 x hidden."),
    click.option("--vocab", type=int, help="Vocabulary size; default 51200 for a custom model."),
    click.option(
        "--family",
        type=click.Choice(["gpt", "llama"], case_sensitive=False),
        help="Architecture defaults for a custom model [default: gpt].",
    ),
    click.option("--seq-len", type=int, help="Sequence length s in tokens; default 2048 for a custom model."),
)


cluster_options = _stack(
    click.option(
        "--calibration",
        metavar="FILE",
        callback=an_input("give the YAML file `shardwise calibrate` wrote"),
        help="A calibration from `shardwise calibrate` (your measured runs): fitted GEMM efficiency, link "
        "bandwidths and overheads, and the error bars that come with them.",
    ),
    click.option(
        "--system",
        metavar="NAME|FILE",
        callback=an_input(NAME_OR_FILE),
        help="System preset (dgx-a100, dgx-h100, a100-pcie-8x, ...).",
    ),
    click.option(
        "--gpu",
        "gpu_name",
        metavar="NAME|FILE",
        callback=an_input(NAME_OR_FILE),
        help="GPU preset or YAML file (instead of, or overriding, the system's).",
    ),
    click.option("--gpus-per-node", type=int, help="GPUs per server [default: the system's, else 8]."),
    click.option(
        "--p2p",
        type=click.Choice(["on", "off"], case_sensitive=False),
        help="Can the GPUs of a server reach each other's memory? off: NCCL stages every transfer through "
        "host memory (GeForce cards on the stock driver, many VMs). [default: the system's, else on]",
    ),
    click.option(
        "--nvls",
        type=click.Choice(["on", "off"], case_sensitive=False),
        help="May NCCL reduce inside the NVLink switch (NVLink SHARP) for all-reduces in a server, where the "
        "link has it (H100 and later with NVSwitch)? off: as NCCL_NVLS_ENABLE=0. [default: the system's, else on]",
    ),
    click.option(
        "--intra-link",
        metavar="NAME|FILE|RATE",
        callback=an_input(LINK_NAME),
        help="Link inside a server: preset (nvlink3, pcie4, ...), YAML file, or a sustained rate like 600GB/s.",
    ),
    click.option(
        "--inter-link",
        metavar="NAME|FILE|RATE",
        callback=an_input(LINK_NAME),
        help="Each GPU's link across servers (ib-hdr, ib-ndr, ... or a rate).",
    ),
    click.option(
        "--nics-per-node",
        type=float,
        help="Network cards per server, shared by its GPUs across servers [default: the system's; 1 per GPU "
        "with --gpu].",
    ),
    click.option(
        "--link-latency",
        metavar="TIME",
        help="Per-step latency of the links given with --intra-link/--inter-link (e.g. 2us) [default: the "
        "replaced link's, or its kind's: NVLink 1us, PCIe 2us, network 5us].",
    ),
    click.option("--nodes", type=int, help="Servers in the cluster."),
    click.option("--num-gpus", type=int, help="GPUs in the cluster (instead of --nodes)."),
)


# a stack's own count of its optimizer step's traffic (`Plan.optimizer_step_bytes`), beside the execution flags
optimizer_step_option = click.option(
    "--optimizer-step-bytes",
    type=float,
    help="Bytes per parameter of the rank's shard the optimizer step moves, the stack's own count (the HF "
    "Trainer's AdamW under DeepSpeed 0.5 ZeRO-1: 124) [default: the framework's; 0: a fused step's 48].",
)
plan_options = _stack(plan_layout_options, stage_options, execution_options, optimizer_step_option)


class AliasChoice(click.Choice):
    """A click.Choice that also takes `aliases` (another name of one choice: serve's `--framework
    trtllm`, the --emit name of tensorrt-llm), converted before the check; the choices listed stay
    the canonical ones (help, the explorer's menus)."""

    def __init__(self, choices: list[str], aliases: dict[str, str]) -> None:
        super().__init__(choices, case_sensitive=False)
        self.aliases = aliases

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        if isinstance(value, str) and value.lower() in self.aliases:
            value = self.aliases[value.lower()]
        return super().convert(value, param, ctx)


def emit_option(whose: str, where: str = "docs/emit/") -> Any:
    """`predict --emit` and `plan --emit`: the launch command of `whose` plan for a tool."""
    return click.option(
        "--emit",
        type=click.Choice(["megatron", "torchtitan", "deepspeed", "vllm"], case_sensitive=False),
        help=f"Also print {whose} launch command for this tool, re-priced where the tool runs it differently "
        f"({where}). Priced under the tool's stack (deepspeed: megatron-deepspeed with --flash-attention; "
        "torchtitan: torchtitan-compile) unless --framework names another. vllm serves: use `shardwise serve "
        "--emit vllm`.",
    )


# `predict --emit` and `plan --emit`: which version of the tool the launch is written for
emit_version_option = click.option(
    "--emit-version",
    metavar="VERSION",
    help="The tool version --emit writes for: megatron main|core-0.13, torchtitan main, deepspeed master "
    "[default: the first].",
)


def echo_notes(notes: tuple[str, ...] | list[str]) -> None:
    """What the request layer assumed, on stderr (stdout stays the answer)."""
    for note in notes:
        click.echo(f"note: {note}", err=True)


def request_of(o: dict[str, Any]) -> Any:
    """The `TrainingRequest` of a command's parsed options."""
    from shardwise.requests.training import TrainingRequest

    return TrainingRequest.from_options(o)


def build_model(o: dict[str, Any]) -> Any:
    from shardwise.requests.build import build_model as build

    return build(by_name(o))


def build_cluster(o: dict[str, Any]) -> Any:
    """The cluster of the options (`requests.cluster_build.build_cluster`); its notes go to stderr."""
    from shardwise.requests.build import build_cluster as build

    notes: list[str] = []
    cluster = build(by_name(o), notes, load_calibration(o))
    echo_notes(notes)
    return cluster


def load_calibration(o: dict[str, Any]) -> Any:
    """The `--calibration FILE` (a `calibration.store.Calibration`), or None."""
    if not o.get("calibration"):
        return None
    if "_calibration" not in o:
        from shardwise.requests.build import load_calibration as load

        o["_calibration"] = load(o["calibration"])
    return o["_calibration"]


def execution_kwargs(o: dict[str, Any], sequence_parallel: bool | None = None, tp: int = 1) -> dict[str, Any]:
    from shardwise.requests.build import execution_kwargs as kwargs

    return kwargs(by_name(o), sequence_parallel, tp)


def stage_kwargs(o: dict[str, Any], layers: int | None = None) -> dict[str, Any]:
    from shardwise.requests.build import stage_kwargs as kwargs

    return kwargs(by_name(o), layers)


def check_output_path(path: str, allowed: tuple[str, ...], flag: str = "") -> None:
    """Fail before any work if `path` cannot be written: a known extension, an existing directory,
    and pyarrow for Parquet (`flag` names the option in that message)."""
    from pathlib import Path

    from shardwise.atomic import check_writable
    from shardwise.errors import SpecError

    p = Path(path)
    where = f"{flag} {path}" if flag else path
    if path == "-":  # the commands that print to stdout take `-` before this check (cli/output.py)
        raise SpecError(f"{where}: this option writes a file, not stdout; give a name ending in {' or '.join(allowed)}")
    if not p.suffix:
        raise SpecError(f"{where}: the format is told by the extension; give a name ending in {' or '.join(allowed)}")
    if p.suffix.lower() not in allowed:
        raise SpecError(f"{where}: unknown file format {p.suffix!r}; use one of {', '.join(allowed)}")
    refuse_given_elsewhere(path, flag)
    check_writable(p)
    if p.suffix.lower() == ".parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise SpecError(f"{flag} .parquet needs pyarrow: pip install 'shardwise[parquet]'") from None


def refuse_given_elsewhere(path: str, flag: str) -> None:
    """Before any work: refuse an output `path` (given to `flag`) that another option of the running
    command also names -- an input (`--model m.json -o m.json` would destroy the config) or a second
    output (`-o a.png --plot a.png`: one would replace the other). The files an input names in turn
    (a system YAML's link file) are guarded when written (`files.watching_inputs`)."""
    from shardwise.errors import SpecError
    from shardwise.files import resolved

    ctx = click.get_current_context(silent=True)
    target = resolved(path)
    if ctx is None or target is None:
        return
    where = f"{flag} {path}" if flag else path
    own = {p.name for p in ctx.command.params if flag and (flag in p.opts or flag in p.secondary_opts)}
    for param in ctx.command.params:
        if param.name in own:
            continue
        value = ctx.params.get(param.name)
        for v in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(v, str) and v not in ("", "-") and resolved(v) == target:
                other = max(param.opts, key=len) if isinstance(param, click.Option) else param.human_readable_name
                raise SpecError(
                    f"{where}: {other} names that file too; writing there would destroy it "
                    "(give the output its own name)"
                )
