"""Readable terminal output (rich), imported only when a table is printed."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.table import Table

from shardwise.cli.render_stack import attention_words, hfu_words, stack_flags
from shardwise.engines.result import TrainingEstimate, tp_comm_name
from shardwise.physics.params import total_params
from shardwise.units import format_bytes, format_capacity, format_seconds, format_seconds_range

BREAKDOWN_LABELS = {
    "compute": "compute",
    "tp_comm": "TP communication (exposed)",
    "ep_comm": "EP all-to-all (dispatch + combine)",
    "offload": "activation offload to host (exposed)",
    "pp_p2p": "PP point-to-point",
    "pp_wait": "PP wait (host steps, heaviest micro-batch)",
    "pp_bubble": "PP bubble (fill + drain)",
    "dp_comm": "DP communication (exposed)",
    "optimizer": "optimizer step",
    "overhead": "stack overhead (calibrated)",
}


# Output to a file or a pipe, where no terminal sets the width: COLUMNS where it is set, else 100
# columns, the width the documentation's console blocks are made at (tools/readme.py sets
# COLUMNS=100), so piped output reads as the docs do.
PIPED_WIDTH = 100
# Seconds below which a time shown as hidden behind another is float residue (the difference of two
# sums of the same terms), not an overlap: no collective or kernel takes under a nanosecond
RESIDUE_S = 1e-9
# the widest a piped table is printed at its own width (`_Console.natural_tables`)
MAX_NATURAL_WIDTH = 400


class _Rstripped:
    """A text stream that drops the spaces rich pads each line's last cell with (piped output
    only: a file or a pipe should not carry a table's padding to its full width)."""

    def __init__(self, stream: Any) -> None:
        self._stream, self._pending = stream, ""

    def write(self, text: str) -> int:
        lines = (self._pending + text).split("\n")
        self._pending = lines.pop()
        if lines:
            self._stream.write("".join(line.rstrip(" ") + "\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        if self._pending.strip(" ") or not self._pending:  # padding alone waits for its newline
            self._stream.write(self._pending)
            self._pending = ""
        self._stream.flush()  # what was written reaches the file either way

    def isatty(self) -> bool:
        return False

    @property
    def encoding(self) -> str:
        return getattr(self._stream, "encoding", "utf-8")


def piped_width(environ: Mapping[str, str]) -> int:
    """The width of output to a file or a pipe: COLUMNS where it is a positive number, else 100."""
    given = environ.get("COLUMNS", "").strip()
    return int(given) if given.isdigit() and int(given) > 0 else PIPED_WIDTH


class _Console(Console):
    """rich's Console, whose closed pipe ends the command as every other write to one does
    (`cli.main`: status 0, no message, as `| head -1` expects), not with rich's own status 1."""

    # piped with no COLUMNS given: a table wider than the default width is printed whole, at its own
    # width, not wrapped cell by cell into a column of fragments (review 35: `validate
    # inference_scaling | less` ran to 700 lines); a terminal's width, or COLUMNS, still binds
    natural_tables = False

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError

    def print(self, *objects: Any, **kwargs: Any) -> None:
        tables = [o for o in objects if isinstance(o, Table)] if self.natural_tables else []
        if not tables:
            super().print(*objects, **kwargs)
            return
        from rich.measure import Measurement

        wide = self.options.update(width=MAX_NATURAL_WIDTH)
        need = max(Measurement.get(self, wide, t).maximum for t in tables)
        width = self.width
        self.width = max(width, min(need, MAX_NATURAL_WIDTH))
        try:
            super().print(*objects, **kwargs)
        finally:
            self.width = width


def console() -> Console:
    import os
    import sys

    if sys.stdout.isatty():
        return _Console(highlight=False, soft_wrap=False)
    out = _Console(highlight=False, soft_wrap=False, width=piped_width(os.environ), file=_Rstripped(sys.stdout))
    out.natural_tables = not os.environ.get("COLUMNS", "").strip().isdigit()
    return out


def progress_console() -> Console:
    """Where a progress bar draws: stderr, so stdout holds only the answer (a bar on stdout left a
    blank line at the top of `serve --ttft-max`'s table when piped); none where it is not a terminal."""
    return Console(stderr=True)


def print_table(
    head: tuple[str, ...], cells: list[tuple[str, ...]], title: str, right: set[int], markdown: bool
) -> None:
    """A table of text cells: Markdown (as in the docs), or rich on the terminal; `right` holds the
    indices of the right-aligned (numeric) columns."""
    import click

    if markdown:
        click.echo("| " + " | ".join(head) + " |")
        click.echo("|" + "|".join("---:" if i in right else "---" for i in range(len(head))) + "|")
        for c in cells:
            click.echo("| " + " | ".join(c) + " |")
        return
    table = Table(title=title, title_justify="left")
    for i, col in enumerate(head):
        table.add_column(col, justify="right" if i in right else "left")
    for c in cells:
        table.add_row(*c)
    console().print(table)


def _bar(fraction: float, width: int = 24) -> str:
    n = round(max(0.0, min(1.0, fraction)) * width)
    return "█" * n + "·" * (width - n)


def _f(x: Any) -> float:
    return float(x)


def describe_scenario(est: TrainingEstimate, recompute_from: str = "") -> list[str]:
    """The header: model and cluster, plan, framework. `recompute_from`: where the recompute mode
    came from when the user gave none ("maxtext's default; ...", `presets.stack_defaults.recompute_origin`)."""
    scn = est.scenario
    m, c, p = scn.model, scn.cluster, scn.plan
    n = int(_f(c.num_gpus))
    inter = f", {across_servers(c)}" if c.inter_node_link is not None and int(_f(c.nodes)) > 1 else ""
    sched = p.schedule.label + (f" (v={p.vpp})" if int(p.vpp) > 1 else "")
    from shardwise.specs.stages import describe_split

    split = describe_split(m.layers, int(p.pp), int(p.first_stage_layers), int(p.last_stage_layers), p.stage_layers)
    cp = f" cp={p.cp}" if int(p.cp) > 1 else ""
    if m.is_moe and int(p.ep) > 1:  # the experts' layout: ep ranks each holding experts / ep, split etp ways
        cp += f" ep={p.ep} etp={p.expert_tp}"
    return [
        f"[bold]{m.name}[/] ({_params(_f(total_params(m)))} params, {m.layers} layer{'s' * (int(m.layers) != 1)}, "
        f"h={m.hidden}, "
        f"s={m.seq_len}) on [bold]{n} x {c.gpu.name}[/] ({servers_of(c)}, "
        f"{c.intra_node_link.name} inside{inter})",
        f"plan: tp={p.tp} pp={p.pp}{cp} dp={p.dp}, {sched}, global batch {p.global_batch} = dp {p.dp} x "
        f"{p.num_micro_batches} micro-batch{'es' * (int(p.num_micro_batches) != 1)} of {p.micro_batch}, "
        f"recompute={p.recompute.label}{_modules(p)}{_whole(p, int(m.layers))}"
        f"{f' ({recompute_from})' if recompute_from else ''}, "
        f"sequence-parallel={_sp(p)}, ZeRO-{p.zero_stage}, {p.precision}"
        + (
            f", hybrid sharding: state sharded over {p.shard_group} ranks, {p.replicas} replicas"
            if int(p.shard_group) > 0
            else ""
        )
        + (f", LoRA rank {p.lora_rank} (base weights frozen)" if int(p.lora_rank) > 0 else "")
        + (f" on {p.lora_targets}" if int(p.lora_rank) > 0 and p.lora_targets != "qkv,proj,fc1,fc2" else "")
        + (f", packed documents of {p.packed_document_len} tokens" if int(p.packed_document_len) > 0 else "")
        + (f", {p.pipeline_flushes} pipeline flushes" if int(p.pipeline_flushes) > 1 else "")
        + (f", layers per stage {split}" if split else ""),
        f"framework: {p.framework} ({stack_flags(p)}){attention_words(p, c.gpu)}"
        + (f", memory as {p.memory_stack}'s" if p.memory_stack and p.memory_stack != p.framework else ""),
    ]


def across_servers(c: Any) -> str:
    """The network as the answer's header names it, with the NIC count it was priced with:
    'eth-100g across nodes, 2 NICs per server of 8 GPUs: 3.12 GB/s per GPU nominal'. The per-GPU link
    is `loaders.per_gpu_nic`'s: named 'NIC xN/G' where G GPUs share N cards, the NIC itself
    where each GPU has one (or more)."""
    import re

    link, per_node = c.inter_node_link, int(_f(c.gpus_per_node))
    shared = re.fullmatch(r"(.+) x([0-9.e+]+)/(\d+)", str(link.name))
    # nominal (the line rate, or a calibration's scaling of it): `describe_link` gives the sustained rate too
    rate = f"{_f(link.bandwidth_bytes_per_s) / 1e9:.3g} GB/s per GPU nominal"
    if shared:
        name, nics = shared.group(1), float(shared.group(2))
        return f"{name} across servers, {nics:g} NIC{'s' if nics != 1 else ''} per server of {per_node} GPUs: {rate}"
    return f"{link.name} across servers, 1 NIC per GPU: {rate}"


def servers_of(c: Any) -> str:
    """'2 servers of 8' ('1 server of 8'): the words of the flags (--nodes: servers, --gpus-per-node)."""
    n = int(_f(c.nodes))
    return f"{n} server{'s' if n != 1 else ''} of {int(_f(c.gpus_per_node))}"


def _sp(p: Any) -> str:
    """Sequence parallelism as given, and that it changes nothing without TP (it splits TP's activations)."""
    return ("on" + (" (no effect at tp 1)" if int(p.tp) == 1 else "")) if p.sequence_parallel else "off"


def _modules(p: Any) -> str:
    """' (moe_act, layernorm)': the modules selective recomputation redoes (`Plan.recompute_modules`)."""
    if not p.recompute_modules or p.recompute.label != "selective":
        return ""
    return f" ({', '.join(p.recompute_modules)})"


def _whole(p: Any, layers: int) -> str:
    """' (+ the first 4 layers of each stage recomputed whole)' where `Plan.recompute_layers` applies;
    a count that reaches the fullest stage (model chunk) says every layer is (40 on a 32-layer stage)."""
    from shardwise.specs.stages import plan_split, stage_layer_list

    n = int(p.recompute_layers)
    if n == 0 or p.recompute.label == "full":
        return ""
    where, vpp = ("model chunk" if int(p.vpp) > 1 else "stage"), max(int(p.vpp), 1)
    fullest = max(-(-c // vpp) for c in stage_layer_list(plan_split(layers, p), int(p.pp)))
    if n >= fullest:
        return f" (+ every layer recomputed whole: the first {n} of each {where}, which holds at most {fullest})"
    return f" (+ the first {n} layer(s) of each {where} recomputed whole)"


def interval_words(low: float, high: float, centre: float, basis: str) -> str:
    """'80% interval -9%/+10%, BASIS': the interval's ends as shares of the prediction, then where
    its width comes from."""
    return f"80% interval {low / centre - 1:+.0%}/{high / centre - 1:+.0%}, {basis}"


def print_estimate(
    est: TrainingEstimate, interval: tuple[float, float, str] | None = None, recompute_from: str = ""
) -> None:
    """The estimate as tables; `interval` = (low, high, basis) of the step time's 80% interval;
    `recompute_from`: the header's words on a recompute mode the framework chose (`describe_scenario`)."""
    out = console()
    for line in describe_scenario(est, recompute_from):
        out.print(line)
    out.print()
    step = _f(est.step_time_s)
    head = Table(show_header=False, box=None, padding=(0, 2))
    tokens = _f(est.tokens_per_s)
    gpus = _f(est.scenario.plan.num_gpus)
    if interval is None:
        head.add_row("step time", f"[bold]{format_seconds(step)}[/]")
        head.add_row("throughput", f"{tokens:,.0f} tokens/s ({tokens / gpus:,.0f} per GPU)")
    else:
        lo, hi, basis = interval
        head.add_row("step time", f"[bold]{format_seconds(step)}[/] ({format_seconds_range(lo, hi)})")
        head.add_row("", f"[dim]{interval_words(lo, hi, step, basis)}[/]")
        t_lo, t_hi = tokens * step / hi, tokens * step / lo
        head.add_row(
            "throughput",
            f"{tokens:,.0f} tokens/s ({t_lo:,.0f}-{t_hi:,.0f}; {tokens / gpus:,.0f} per GPU)",
        )
    head.add_row(
        "model TFLOP/s per GPU",
        f"{_f(est.model_tflops_per_gpu):.1f}   MFU {_f(est.mfu):.1%}  (causal attention: its masked half not counted)",
    )
    head.add_row(  # the older published convention (Eq. 3), beside ours, so neither is compared blindly
        "  whole attention square",
        f"{_f(est.model_tflops_per_gpu_full_attention):.1f}   "
        "(Eq. 3: Megatron-LM before core 0.12, Megatron-DeepSpeed)",
    )
    head.add_row(
        "hardware TFLOP/s per GPU",
        f"{_f(est.hardware_tflops_per_gpu):.1f}   HFU {_f(est.hfu):.1%}  ({hfu_words(est)})",
    )
    if (
        est.scenario.cluster.gpu.peak_flops_per_s(est.scenario.plan.precision)
        != est.scenario.cluster.gpu.peak_flops_per_s_16bit
    ):
        head.add_row(  # MFU and HFU above divide by the precision's peak (FP8's); published FP8 MFU often by BF16's
            "MFU against 16-bit peak",
            f"{_f(est.mfu_16bit_peak):.1%}  (above: against the {est.scenario.plan.precision} peak)",
        )
    out.print(head)
    out.print()

    table = Table(title="time per step", title_justify="left", header_style="bold")
    table.add_column("part")
    table.add_column("time", justify="right")
    table.add_column("share", justify="right")
    table.add_column("")
    # a hidden time below RESIDUE_S is the float residue of a difference (review 43 #9: "+2.22e-06 ns hidden")
    hidden = {k: _f(v) if _f(v) > RESIDUE_S else 0.0 for k, v in est.hidden_comm_s.items()}
    p = est.scenario.plan
    one_replica = int(p.dp) * int(p.cp) == 1 and not est.scenario.model.is_moe
    for key, value in est.breakdown.as_dict().items():
        v = _f(value)
        if v == 0 and key != "compute" and hidden.get(key, 0.0) == 0:  # costs nothing here (no pipeline, ...)
            continue
        label = BREAKDOWN_LABELS[key]
        if key == "dp_comm" and one_replica:  # no data parallelism: the tied embedding's sync across stages
            label = "embedding sync (first and last stage)"
        if key == "tp_comm":  # the context-parallel ring shares the part
            label = f"{tp_comm_name(p.tp, p.cp)} (exposed)"
        if hidden.get(key, 0.0) > 0:  # above RESIDUE_S
            label += f" [dim](+{format_seconds(hidden[key])} hidden)[/]"
        if key == "compute" and _f(est.compute_parts_s.get("fsdp2_copies", 0.0)) > 0:
            label += f" [dim](of it {format_seconds(_f(est.compute_parts_s['fsdp2_copies']))} FSDP2 copies)[/]"
        table.add_row(label, format_seconds(v), f"{v / step:.1%}", _bar(v / step))
    table.add_row("[bold]total[/]", f"[bold]{format_seconds(step)}[/]", "100.0%", "")
    out.print(table)

    mem = est.memory.as_dict()
    capacity = _f(est.scenario.cluster.gpu.memory_bytes)
    mt = Table(title="memory per GPU (fullest stage)", title_justify="left", header_style="bold")
    mt.add_column("part")
    mt.add_column("bytes", justify="right")
    mt.add_column("of GPU", justify="right")
    for key in ("weights", "gradients", "optimizer", "activations", "buffers", "allocator", "reserved"):
        v = _f(mem[key])
        if key in ("buffers", "allocator") and v == 0:  # a stack without them (XLA, Megatron's buffers)
            continue
        mt.add_row(key, format_bytes(v), f"{v / capacity:.1%}")
    total = _f(mem["total"])
    fits = bool(est.fits_in_memory)
    verdict = "[green]fits[/]" if fits else "[red]does NOT fit[/]"
    mt.add_row("[bold]total[/]", f"[bold]{format_bytes(total)}[/]", f"{total / capacity:.1%}")
    if (cached := _f(est.memory.cached_bytes)) > 0:  # beside total, not in it: nvidia-smi shows it (docs/model.md)
        mt.add_row("[dim]cached (released before out of memory)[/]", f"[dim]{format_bytes(cached)}[/]", "")
    out.print(mt)
    out.print(f"{verdict} in {format_capacity(capacity)} per GPU")
    from shardwise.requests.training import plan_headroom_note

    if note := plan_headroom_note(est):  # `plan` keeps this free: it would drop this plan
        out.print(f"[yellow]{note}[/]")


@contextmanager
def progress_bar(total: int, label: str, disable: bool = False) -> Iterator[Callable[..., None]]:
    """A transient rich progress bar of `total` steps; yields `advance(n=1)` (a no-op bar when
    `disable`, e.g. under --json)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    where = progress_console()
    with Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        transient=True,
        disable=disable or not where.is_terminal,  # piped: no bar, and not the blank line rich ends it with
        console=where,
    ) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n=1: bar.advance(task, n)


def _params(n: float) -> str:
    """A parameter count as read: 8.0B, 125.2M, 36.9K (review 37: a 1-layer model read '0.0B params')."""
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            return f"{n / scale:.1f}{suffix}"
    return f"{n:.0f}"
