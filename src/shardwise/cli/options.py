"""Flags shared by the commands that take a model, a cluster and a parallel plan, and the code
that turns them into a `Scenario` (heavy imports happen inside the functions)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from shardwise.precisions import TRAINING_PRECISIONS

F = Callable[..., Any]


class Aliased(click.Option):
    """An option whose old spellings (`hidden_aliases`) still work but are left out of --help:
    one name per meaning across the commands, the old ones kept for a release."""

    def __init__(self, *args: Any, hidden_aliases: tuple[str, ...] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hidden_aliases = hidden_aliases

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        shown, self.opts = self.opts, [o for o in self.opts if o not in self.hidden_aliases]
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts = shown


def alias_option(*decls: str, old: tuple[str, ...] = (), **kwargs: Any) -> F:
    """click.option with old spellings accepted but hidden (see `Aliased`)."""
    return click.option(*decls[:1], *old, *decls[1:], cls=Aliased, hidden_aliases=old, **kwargs)


def non_empty(hint: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A click callback that refuses an empty name (`--gpu ''` must not quietly mean "none given")."""

    def check(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        from shardwise.errors import SpecError

        for v in value if isinstance(value, tuple) else (value,):
            if isinstance(v, str) and not v.strip():
                flag = param.opts[0] if param.opts else param.name
                raise SpecError(f"{flag}: an empty name is not allowed; {hint}")
        return value

    return check


NAME_OR_FILE = "give a preset name or a YAML file"
LINK_NAME = "give a preset name, a YAML file or a rate like 600GB/s"


def _stack(*decorators: F) -> F:
    def apply(func: F) -> F:
        for d in reversed(decorators):
            func = d(func)
        return func

    return apply


model_options = _stack(
    click.option(
        "--model",
        "model_name",
        metavar="NAME|FILE",
        callback=non_empty(NAME_OR_FILE),
        help="Model preset (see `shardwise presets models`), a YAML file, or a Hugging Face config.json.",
    ),
    click.option("--layers", type=int, help="Transformer layers (overrides the preset)."),
    click.option("--hidden", type=int, help="Hidden size h."),
    click.option("--heads", type=int, help="Attention heads a."),
    click.option("--kv-heads", type=int, help="Key/value heads (grouped-query attention); default: heads."),
    click.option("--ffn-hidden", type=int, help="MLP hidden size; default: 4 x hidden."),
    click.option("--vocab", type=int, help="Vocabulary size; default 51200 for a custom model."),
    click.option(
        "--family", type=click.Choice(["gpt", "llama"]), help="Architecture defaults for a custom model [default: gpt]."
    ),
    click.option("--seq-len", type=int, help="Sequence length s in tokens; default 2048 for a custom model."),
)

cluster_options = _stack(
    click.option(
        "--calibration",
        metavar="FILE",
        callback=non_empty("give the YAML file `shardwise calibrate` wrote"),
        help="A calibration from `shardwise calibrate` (your measured runs): fitted GEMM efficiency, link "
        "bandwidths and overheads, and the error bars that come with them.",
    ),
    click.option(
        "--system",
        metavar="NAME|FILE",
        callback=non_empty(NAME_OR_FILE),
        help="System preset (dgx-a100, dgx-h100, a100-pcie-8x, ...).",
    ),
    click.option(
        "--gpu",
        "gpu_name",
        metavar="NAME|FILE",
        callback=non_empty(NAME_OR_FILE),
        help="GPU preset or YAML file (instead of, or overriding, the system's).",
    ),
    click.option("--gpus-per-node", type=int, help="GPUs per server [default: the system's, else 8]."),
    click.option(
        "--p2p",
        type=click.Choice(["on", "off"]),
        help="Can the GPUs of a server reach each other's memory? off: NCCL stages every transfer through "
        "host memory (GeForce cards on the stock driver, many VMs). [default: the system's, else on]",
    ),
    click.option(
        "--nvls",
        type=click.Choice(["on", "off"]),
        help="May NCCL reduce inside the NVLink switch (NVLink SHARP) for all-reduces in a server, where the "
        "link has it (H100 and later with NVSwitch)? off: as NCCL_NVLS_ENABLE=0. [default: the system's, else on]",
    ),
    click.option(
        "--intra-link",
        metavar="NAME|FILE|RATE",
        callback=non_empty(LINK_NAME),
        help="Link inside a server: preset (nvlink3, pcie4, ...), YAML file, or a sustained rate like 600GB/s.",
    ),
    click.option(
        "--inter-link",
        metavar="NAME|FILE|RATE",
        callback=non_empty(LINK_NAME),
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

# LoRA fine-tuning, on predict and on plan
lora_rank_option = click.option(
    "--lora-rank",
    type=click.IntRange(0, 65536),
    default=0,
    show_default=True,
    help="Fine-tune with LoRA adapters of this rank on the attention and MLP layers, the base weights "
    "frozen (Megatron-Bridge's default rank is 32); 0 = train every weight.",
)


plan_layout_options = _stack(
    click.option("--tp", type=int, default=1, show_default=True, help="Tensor-parallel degree."),
    click.option("--pp", type=int, default=1, show_default=True, help="Pipeline-parallel stages."),
    click.option("--dp", type=int, help="Data-parallel replicas [default: GPUs / (tp x pp x cp)]."),
    click.option(
        "--cp",
        type=int,
        default=1,
        show_default=True,
        help="Context-parallel ranks: each sequence split over cp GPUs (ring attention).",
    ),
    click.option(
        "--cp-comm",
        type=click.Choice(["p2p", "all_gather", "a2a"]),
        default="p2p",
        show_default=True,
        help="How CP ranks exchange keys and values (Megatron-Core --cp-comm-type): a ring overlapped with "
        "attention, an all-gather, or Ulysses all-to-alls over the heads.",
    ),
    click.option(
        "--ep",
        type=int,
        default=1,
        show_default=True,
        help="Expert-parallel ranks (mixture-of-experts models): each holds experts / ep experts; tokens reach "
        "them by all-to-all.",
    ),
    click.option("--etp", type=int, help="Ranks splitting each expert's matrices [default: tp, as Megatron-Core]."),
    click.option(
        "--expert-imbalance",
        type=float,
        default=1.0,
        show_default=True,
        help="Tokens of the busiest expert rank over the mean (1: a balanced router).",
    ),
    click.option(
        "--moe-dispatcher",
        type=click.Choice(["alltoall", "flex"]),
        default="alltoall",
        show_default=True,
        help="alltoall: a copy per chosen expert (Megatron-Core's default); flex: DeepEP/HybridEP, one copy per "
        "node and per rank.",
    ),
    click.option(
        "--moe-overlap/--no-moe-overlap",
        default=False,
        show_default=True,
        help="Hide the expert all-to-alls behind another micro-batch's compute (Megatron-Core's combined 1F1B, "
        "--overlap-moe-expert-parallel-comm; pp=1 or --vpp).",
    ),
    click.option(
        "--vpp",
        type=int,
        default=1,
        show_default=True,
        help="Virtual stages (model chunks) per GPU; > 1 selects the interleaved schedule.",
    ),
    click.option("--global-batch", type=int, help="Sequences per optimizer step (required)."),
    click.option("--micro-batch", type=int, default=1, show_default=True, help="Sequences per micro-batch."),
    click.option(
        "--schedule",
        type=click.Choice(["gpipe", "1f1b", "interleaved", "zb-h1"]),
        help="Pipeline schedule [default: 1f1b, interleaved if --vpp > 1].",
    ),
    click.option(
        "--recompute",
        type=click.Choice(["none", "selective", "full"]),
        default="none",
        show_default=True,
        help="Activation recomputation.",
    ),
    click.option(
        "--sequence-parallel/--no-sequence-parallel",
        default=False,
        show_default=True,
        help="Megatron sequence parallelism inside the TP group.",
    ),
    click.option(
        "--zero",
        type=click.IntRange(0, 3),
        help="ZeRO stage (0 = plain data parallelism, 1 = Megatron's distributed optimizer) [default: the "
        "framework's].",
    ),
    lora_rank_option,
)


def _switch(name: str, help_text: str) -> F:
    """--NAME/--no-NAME, default None: the framework preset decides."""
    return click.option(f"--{name}/--no-{name}", default=None, help=f"{help_text} [default: the framework's]")


execution_options = _stack(
    click.option(
        "--framework",
        default="megatron-core",
        show_default=True,
        metavar="NAME",
        callback=non_empty(NAME_OR_FILE),
        help="Software stack whose execution flags apply: megatron-core, megatron-lm-2022, megatron-lm-2021, "
        "megatron-deepspeed, fsdp, torchtitan (see `shardwise presets frameworks`); flags below override it.",
    ),
    click.option(
        "--precision",
        type=click.Choice(TRAINING_PRECISIONS),
        default="bf16",
        show_default=True,
        help="Compute precision: fp8 is per-tensor scaling (Hopper and later), mxfp8 block scaling (Blackwell).",
    ),
    click.option(
        "--flash-attention/--no-flash-attention",
        default=True,
        show_default=True,
        help="Fused attention that never stores the s x s scores.",
    ),
    _switch("async-tp-grad", "Overlap the backward TP collectives of QKV and MLP up with their own GEMMs (Megatron)."),
    _switch(
        "tp-comm-overlap",
        "Transformer Engine userbuffers: overlap every TP collective with its GEMM (Megatron-Core "
        "--tp-comm-overlap; needs --sequence-parallel).",
    ),
    _switch("overlap-grad-reduce", "Bucketed DP gradient reduction during the last backward pass."),
    _switch("overlap-param-gather", "Distributed optimizer: all-gather parameters behind the next forward pass."),
    _switch("grad-accumulation-fusion", "Weight-gradient GEMMs accumulate into the fp32 main_grad."),
    _switch("overlap-p2p", "Pipeline sends beside compute instead of blocking it."),
    _switch("pipeline-sync", "A device synchronisation after every blocking pipeline send/receive."),
    _switch("scatter-gather", "Pipeline sends of 1/tp per rank plus an in-node all-gather."),
)

stage_options = _stack(
    click.option(
        "--first-stage-layers",
        type=int,
        help="Layers on the first pipeline stage (Megatron --decoder-first-pipeline-num-layers) [default: even split].",
    ),
    click.option(
        "--last-stage-layers",
        type=int,
        help="Layers on the last pipeline stage (Megatron --decoder-last-pipeline-num-layers) [default: even split].",
    ),
    click.option(
        "--stage-layers",
        metavar="N,N,...",
        help="Layers of every pipeline stage, comma-separated (one per stage; they must add up to the model's).",
    ),
)

plan_options = _stack(plan_layout_options, stage_options, execution_options)


def _link_latency_s(o: dict[str, Any]) -> float | None:
    """--link-latency in seconds (checked even when no link flag uses it: a silently ignored flag
    is a trap)."""
    from shardwise import units
    from shardwise.specs import SpecError

    text = o.get("link_latency")
    if text is None:
        return None
    try:
        value = units.parse_seconds(text)
    except SpecError as exc:
        raise SpecError(f"--link-latency: {exc}") from None
    if not 0 <= value <= 1:  # NaN fails too
        raise SpecError(f"--link-latency: {text} is not allowed; it must be a time from 0 to 1 s (e.g. 2us)")
    if not o.get("intra_link") and not o.get("inter_link"):
        raise SpecError(
            f"--link-latency {text}: it sets the latency of a link given with --intra-link or --inter-link; "
            "give one of them (a preset link keeps its own latency)"
        )
    return value


def _link(spec: str, role: str, replaced: Any = None, latency_s: float | None = None) -> Any:
    """A link flag (`presets.link_or_rate`): a preset, a YAML file, or a sustained rate (which
    keeps the latency and NCCL protocols of the link it replaces, or takes its kind's latency;
    --link-latency sets it)."""
    from shardwise import presets
    from shardwise.specs import SpecError

    kind = "inter" if role == "inter-link" else "intra"
    try:
        return presets.link_or_rate(spec, kind, replaced, latency_s)
    except SpecError as exc:
        raise SpecError(f"--{role}: {exc}; or give a YAML file or a rate like 600GB/s") from None


def build_model(o: dict[str, Any]) -> Any:
    from shardwise import loaders, presets
    from shardwise.specs import SpecError

    overrides = {
        k: o[k]
        for k in ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len")
        if o.get(k) is not None
    }
    if o.get("family"):
        overrides["family"] = o["family"]
    if o.get("model_name"):
        return presets.model(o["model_name"], **overrides)
    missing = [f"--{k}" for k in ("layers", "hidden", "heads") if k not in overrides]
    if missing:
        raise SpecError(f"model: give --model NAME or all of --layers --hidden --heads (missing {' '.join(missing)})")
    data = {"vocab": 51200, "seq_len": 2048, **overrides}
    return loaders.model_from_dict("custom", data)


def build_cluster(o: dict[str, Any]) -> Any:
    """The cluster the plan runs on; --nodes / --num-gpus / tp*pp*dp decide its size."""
    from shardwise import loaders, presets
    from shardwise.specs import SpecError

    both = o.get("nodes") is not None and o.get("num_gpus") is not None
    nic, nics, p2p, nvls = None, None, True, True
    if o.get("system"):
        base = presets.system(o["system"])
        gpu, per_node, p2p, nvls = base.gpu, base.gpus_per_node, base.p2p, base.nvls
        intra, name = base.intra_node_link, base.name
        nic, nics = presets.system_network(o["system"])
    elif o.get("gpu_name"):
        gpu, per_node, intra, name = None, 8, None, "custom"
    else:
        raise SpecError("cluster: give --system NAME (e.g. dgx-a100) or --gpu NAME with --intra-link")
    if o.get("gpu_name"):
        gpu = presets.gpu(o["gpu_name"])
    if o.get("gpus_per_node") is not None:
        per_node = o["gpus_per_node"]
    if per_node < 1:
        raise SpecError(f"--gpus-per-node: {per_node} is not allowed; it must be >= 1")
    notes = []
    latency_s = _link_latency_s(o)
    if o.get("intra_link"):
        intra = _link(o["intra_link"], "intra-link", intra, latency_s)
        notes.append(f"inside a server: {_describe_link(intra)}")
    if o.get("inter_link"):
        nic = _link(o["inter_link"], "inter-link", nic, latency_s)
        nics = nics if nics else float(per_node)
    if o.get("nics_per_node") is not None:
        loaders.check_nics_per_node(o["nics_per_node"], "--nics-per-node")
        if nic is None:
            raise SpecError("--nics-per-node needs a network: give --inter-link (e.g. ib-ndr or 100Gb/s)")
        nics = o["nics_per_node"]
    inter = loaders.per_gpu_nic(nic, nics, per_node) if nic is not None else None
    if o.get("inter_link") or o.get("nics_per_node") is not None:
        notes.append(
            f"across servers: {nics:g} x {_describe_link(nic)} per server of {per_node} GPUs "
            f"(--nics-per-node to change)"
        )
    for note in notes:
        import click

        click.echo(f"note: {note}", err=True)
    if both:  # both given: they must say the same (--nodes N --num-gpus N x gpus per server)
        if o["nodes"] * per_node != o["num_gpus"]:
            raise SpecError(
                f"--nodes {o['nodes']} x {per_node} GPUs per server = {o['nodes'] * per_node}, but --num-gpus is "
                f"{o['num_gpus']}; give one of them, or values that agree"
            )
        o = {**o, "nodes": None}
    n_gpus = _cluster_gpus(o, per_node)
    if n_gpus < per_node:
        per_node = n_gpus  # part of one server
    if n_gpus % per_node:
        raise SpecError(f"--num-gpus: {n_gpus} is not a multiple of gpus_per_node={per_node}")
    nodes = n_gpus // per_node
    if intra is None:
        if per_node > 1:
            raise SpecError(f"--intra-link is required with --gpu ({_link_hint(gpu.name)})")
        intra = _link("pcie4", "intra-link")
    if nodes > 1 and inter is None:
        has_none = f"--system {o['system']} has no inter_node_link; " if o.get("system") else ""
        raise SpecError(f"{has_none}{nodes} nodes need --inter-link (e.g. ib-hdr, ib-ndr, or a rate like 25GB/s)")
    cluster = loaders.cluster_from_parts(name, gpu, per_node, nodes, intra, inter if nodes > 1 or inter else None)
    if o.get("p2p") is not None:
        p2p = o["p2p"] == "on"
    if not p2p:
        from shardwise.physics.custom_allreduce import is_nvlink_class

        if is_nvlink_class(intra):
            raise SpecError(
                f"--p2p off: {intra.name} is NVLink-class, and NVLink is peer-to-peer; P2P off is for PCIe "
                "(give --intra-link pcie4 or similar)"
            )
        cluster = cluster.with_(p2p=False)
    if o.get("nvls") is not None:
        nvls = o["nvls"] == "on"
    if not nvls:
        cluster = cluster.with_(nvls=False)
    return calibrated(cluster, o)


def load_calibration(o: dict[str, Any]) -> Any:
    """The `--calibration FILE` (a `calibration.store.Calibration`), or None."""
    if not o.get("calibration"):
        return None
    if "_calibration" not in o:
        from shardwise.calibration import store

        o["_calibration"] = store.load(o["calibration"])
    return o["_calibration"]


def calibrated(cluster: Any, o: dict[str, Any]) -> Any:
    """The cluster with the calibration's fitted values (unchanged without --calibration)."""
    cal = load_calibration(o)
    if cal is None:
        return cluster
    import click

    from shardwise.calibration.parameters import apply

    gpu = str(cluster.gpu.name)
    other = f"; it was fitted on {', '.join(cal.gpus)}, not {gpu}" if cal.gpus and gpu not in cal.gpus else ""
    click.echo(f"note: calibrated by {cal.path} ({cal.runs} run(s){other})", err=True)
    return apply(cluster, cal.fit.values)


def spread_of(scenarios: list[Any], o: dict[str, Any]) -> Any:
    """The 80% interval's spread of each scenario's step time (`calibration.intervals`)."""
    from shardwise.calibration.intervals import spread

    cal = load_calibration(o)
    if cal is None:
        return spread(scenarios, None)
    return spread(scenarios, cal.fit, f"calibration {cal.path} ({cal.runs} run(s))")


def _describe_link(link: Any) -> str:
    from shardwise.units import format_seconds

    return (
        f"{link.name} ({float(link.effective_bandwidth_bytes_per_s) / 1e9:.4g} GB/s sustained per direction, "
        f"{format_seconds(float(link.latency_s))} per step)"
    )


def _cluster_gpus(o: dict[str, Any], per_node: int) -> int:
    from shardwise.specs import SpecError
    from shardwise.specs._checks import MAX_WHOLE

    for flag in ("nodes", "num_gpus", "tp", "pp", "dp", "cp", "vpp", "micro_batch", "global_batch"):
        if o.get(flag) is not None and not 1 <= o[flag] <= MAX_WHOLE:  # before any work sized by it
            name = flag.replace("_", "-")
            raise SpecError(f"--{name}: {o[flag]} is not allowed; it must be a whole number from 1 to {MAX_WHOLE:,}")
    if o.get("nodes") is not None:
        if o["nodes"] * per_node > MAX_WHOLE:
            raise SpecError(f"--nodes: {o['nodes']} x {per_node} GPUs is not allowed; at most {MAX_WHOLE:,} GPUs")
        return o["nodes"] * per_node
    if o.get("num_gpus") is not None:
        return o["num_gpus"]
    if o.get("dp") is not None:
        return o["tp"] * o["pp"] * o["dp"] * (o.get("cp") or 1)
    return per_node


def execution_kwargs(o: dict[str, Any], sequence_parallel: bool | None = None, tp: int = 1) -> dict[str, Any]:
    """Plan keyword arguments from --framework and the execution flags given (which override it).
    Transformer Engine's userbuffer overlap needs sequence parallelism: a framework default that
    turns it on applies only where SP is on; asking for it without SP is an error."""
    from shardwise import presets
    from shardwise.specs import SpecError

    flags = presets.framework(o.get("framework") or "megatron-core")
    out: dict[str, Any] = {"framework": flags["framework"]}
    from shardwise.specs.plan import EXECUTION_FLAGS

    for name in EXECUTION_FLAGS:
        given = o.get(name)
        out[name] = flags[name] if given is None else given
    # the stack's kernels (physics.stack): the preset's, where it states them
    for name in presets.STACK_PLAN_FIELDS:
        if name in flags:
            out[name] = flags[name]
    if sequence_parallel is not None and not sequence_parallel:
        if o.get("tp_comm_overlap") and tp > 1:
            raise SpecError(
                "--tp-comm-overlap needs --sequence-parallel (Transformer Engine overlaps the SP collectives)"
            )
        out["tp_comm_overlap"] = False
    if o.get("zero") is None:
        out["zero_stage"] = flags["zero_stage"]
    return out


def _no_sharding_without_replicas(execution: dict[str, Any], dp: int, cp: int, given: int | None) -> None:
    """A framework's default ZeRO stage means nothing without data-parallel replicas."""
    if given is None and dp * cp == 1:
        execution["zero_stage"] = 0


def stage_kwargs(o: dict[str, Any], layers: int | None = None) -> dict[str, Any]:
    """Plan keyword arguments for an uneven pipeline split (empty: even split); with the model's
    `layers`, a stage may not hold more than the model has."""
    from shardwise.specs import SpecError
    from shardwise.specs._checks import MAX_WHOLE

    out: dict[str, Any] = {}
    for name in ("first_stage_layers", "last_stage_layers"):
        value = o.get(name)
        if value is not None:
            high = MAX_WHOLE if layers is None else min(int(layers), MAX_WHOLE)
            if not 1 <= value <= high:
                most = f"the model's {layers} layers" if layers is not None else f"{MAX_WHOLE:,}"
                raise SpecError(
                    f"--{name.replace('_', '-')}: {value} is not allowed; it must be a whole number from 1 to {most}"
                )
            out[name] = value
    if o.get("stage_layers"):
        if out:
            raise SpecError("give --stage-layers or --first/--last-stage-layers, not both")
        out["stage_layers"] = o["stage_layers"]
    return out


def build_plan(o: dict[str, Any], n_gpus: int) -> Any:
    from shardwise.specs import Plan, SpecError

    tp, pp, cp = o["tp"], o["pp"], o.get("cp") or 1
    dp = o.get("dp")
    if dp is None:
        if n_gpus % (tp * pp * cp):
            what = "--tp x --pp" + (" x --cp" if cp > 1 else "")
            raise SpecError(f"{what} = {tp * pp * cp} does not divide the {n_gpus} GPUs; set --dp or change --nodes")
        dp = n_gpus // (tp * pp * cp)
    if o.get("global_batch") is None:
        raise SpecError(
            f"--global-batch is required (sequences per step; a multiple of dp x micro-batch = {dp * o['micro_batch']})"
        )
    schedule = o.get("schedule") or ("interleaved" if o["vpp"] > 1 else "1f1b")
    execution = execution_kwargs(o, o["sequence_parallel"], tp)
    if o.get("zero") is not None:
        execution["zero_stage"] = o["zero"]
    _no_sharding_without_replicas(execution, dp, cp, o.get("zero"))
    return Plan(
        tp=tp,
        pp=pp,
        dp=dp,
        cp=cp,
        cp_comm=o.get("cp_comm") or "p2p",
        ep=o.get("ep") or 1,
        etp=o.get("etp") or 0,
        expert_imbalance=o.get("expert_imbalance") or 1.0,
        moe_dispatcher=o.get("moe_dispatcher") or "alltoall",
        moe_overlap=bool(o.get("moe_overlap")),
        global_batch=o["global_batch"],
        micro_batch=o["micro_batch"],
        vpp=o["vpp"],
        schedule=schedule,
        recompute=o["recompute"],
        sequence_parallel=o["sequence_parallel"],
        precision=o["precision"],
        flash_attention=o["flash_attention"] and execution.pop("flash_attention", True),
        lora_rank=o.get("lora_rank") or 0,
        **execution,
        **stage_kwargs(o),
    )


def build_scenario(o: dict[str, Any]) -> Any:
    from shardwise.specs import Scenario, SpecError

    model = build_model(o)
    cluster = build_cluster(o)
    plan = build_plan(o, int(cluster.num_gpus))
    try:
        return Scenario(model, cluster, plan)
    except SpecError as exc:
        if o.get("stage_layers") and "stage split" in str(exc):  # name the flag the split came from
            raise SpecError(f"--stage-layers {o['stage_layers']}: {exc}") from None
        raise


def check_output_path(path: str, allowed: tuple[str, ...], flag: str = "") -> None:
    """Fail before any work if `path` cannot be written: a known extension, an existing directory,
    and pyarrow for Parquet (`flag` names the option in that message)."""
    from pathlib import Path

    from shardwise.atomic import check_writable
    from shardwise.errors import SpecError

    p = Path(path)
    if p.suffix.lower() not in allowed:
        where = f"{flag} {path}" if flag else path
        raise SpecError(f"{where}: unknown file format {p.suffix!r}; use one of {', '.join(allowed)}")
    check_writable(p)
    if p.suffix.lower() == ".parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise SpecError(f"{flag} .parquet needs pyarrow: pip install 'shardwise[parquet]'") from None


def _link_hint(gpu_name: str) -> str:
    """What to give as --intra-link: the links of the system presets built on this GPU, if any."""
    from shardwise import presets

    systems = {name: data for name, data in presets.raw("systems").items() if data.get("gpu") == gpu_name}
    if not systems:
        return "e.g. nvlink3, pcie4, or a rate like 300GB/s; see `shardwise presets links`"
    links = sorted({str(data.get("intra_node_link")) for data in systems.values()})
    first = sorted(systems)[0]
    return f"{gpu_name} servers use {' or '.join(links)}: e.g. --intra-link {links[0]}, or --system {first}"
