"""Fields (by the names of `requests.fields`) -> a `Scenario`: the one place where a model, a cluster
and a plan are resolved from what a user gave -- presets, YAML files, Hugging Face configs, link
rates and a calibration file -- with one set of defaults and one validation.

Errors name the command-line flag (`--tp`); a caller reading a CSV row prefixes its line. What the
builder assumed on the user's behalf (a rate's latency, the NICs shared per server, a rack-scale
domain cut to the job) comes back as `notes`, for the face to show.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardwise.errors import SpecError


@dataclass(frozen=True)
class Built:
    """A built scenario, what was assumed to build it, and the calibration file's contents (or None)."""

    scenario: Any  # Scenario
    notes: tuple[str, ...] = ()
    calibration: Any = None  # calibration.store.Calibration


def scenario(values: dict[str, Any], model: Any = None) -> Built:
    """The Scenario of fully given fields (`TrainingRequest.values()`); `model`: a Model to use
    instead of the `model` field's (a shape that no preset or file names)."""
    from shardwise.specs import Scenario

    notes: list[str] = []
    model = build_model(values) if model is None else model
    cal = load_calibration(values.get("calibration"))
    cluster = build_cluster(values, notes, cal)
    plan = build_plan(values, int(cluster.num_gpus), model)
    try:
        scn = Scenario(model, cluster, plan)
    except SpecError as exc:
        if values.get("stage_layers") and "stage split" in str(exc):  # name the flag the split came from
            raise SpecError(f"--stage-layers {values['stage_layers']}: {exc}") from None
        raise
    return Built(scn, tuple(notes), cal)


def build_model(o: dict[str, Any]) -> Any:
    from shardwise import loaders, presets

    overrides = {
        k: o[k]
        for k in ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "seq_len")
        if o.get(k) is not None
    }
    if o.get("family"):
        overrides["family"] = o["family"]
    if o.get("model"):
        return presets.model(o["model"], **overrides)
    missing = [f"--{k}" for k in ("layers", "hidden", "heads") if k not in overrides]
    if missing:
        raise SpecError(f"model: give --model NAME or all of --layers --hidden --heads (missing {' '.join(missing)})")
    data = {"vocab": 51200, "seq_len": 2048, **overrides}
    return loaders.model_from_dict("custom", data)


def rack_domain(per_node: int, num_gpus: int) -> int:
    """A rack-scale NVLink domain (e.g. 72 GPUs) is used in whole multiples of its largest divisor
    of the job (256 GPUs on an NVL72: 4 x 64), as NVIDIA's GB200 runs are laid out; an ordinary
    server (8 GPUs or fewer) keeps its size."""
    if per_node <= 8 or num_gpus % per_node == 0 or num_gpus < per_node:
        return per_node
    return max(d for d in range(1, per_node + 1) if num_gpus % d == 0)


def build_cluster(o: dict[str, Any], notes: list[str], cal: Any = None) -> Any:
    """The cluster the plan runs on; --nodes / --num-gpus / tp*pp*dp decide its size."""
    from shardwise import loaders, presets

    both = o.get("nodes") is not None and o.get("num_gpus") is not None
    nic, nics, p2p, nvls = None, None, True, True
    if o.get("system"):
        base = presets.system(o["system"])
        gpu, per_node, p2p, nvls = base.gpu, base.gpus_per_node, base.p2p, base.nvls
        intra, name = base.intra_node_link, base.name
        nic, nics = presets.system_network(o["system"])
    elif o.get("gpu"):
        gpu, per_node, intra, name = None, 8, None, "custom"
    else:
        raise SpecError("cluster: give --system NAME (e.g. dgx-a100) or --gpu NAME with --intra-link")
    if o.get("gpu"):
        gpu = presets.gpu(o["gpu"])
    if o.get("gpus_per_node") is not None:
        per_node = o["gpus_per_node"]
    if per_node < 1:
        raise SpecError(f"--gpus-per-node: {per_node} is not allowed; it must be >= 1")
    latency_s = link_latency_s(o)
    if o.get("intra_link"):
        intra = link_flag(o["intra_link"], "intra-link", intra, latency_s)
        notes.append(f"inside a server: {describe_link(intra)}")
    if o.get("inter_link"):
        nic = link_flag(o["inter_link"], "inter-link", nic, latency_s)
        nics = nics if nics else float(per_node)
    if o.get("nics_per_node") is not None:
        loaders.check_nics_per_node(o["nics_per_node"], "--nics-per-node")
        if nic is None:
            raise SpecError("--nics-per-node needs a network: give --inter-link (e.g. ib-ndr or 100Gb/s)")
        nics = o["nics_per_node"]
    inter = loaders.per_gpu_nic(nic, nics, per_node) if nic is not None else None
    if o.get("inter_link") or o.get("nics_per_node") is not None:
        notes.append(
            f"across servers: {nics:g} x {describe_link(nic)} per server of {per_node} GPUs (--nics-per-node to change)"
        )
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
    if o.get("gpus_per_node") is None and (domain := rack_domain(per_node, n_gpus)) != per_node:
        notes.append(f"{n_gpus} GPUs on {per_node}-GPU NVLink domains: {n_gpus // domain} domains of {domain} GPUs")
        per_node = domain
    if n_gpus % per_node:
        raise SpecError(f"--num-gpus: {n_gpus} is not a multiple of gpus_per_node={per_node}")
    nodes = n_gpus // per_node
    if intra is None:
        if per_node > 1:
            raise SpecError(f"--intra-link is required with --gpu ({_link_hint(gpu.name)})")
        intra = link_flag("pcie4", "intra-link")
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
    return calibrated(cluster, cal, notes)


def load_calibration(path: str | None) -> Any:
    """The calibration file (a `calibration.store.Calibration`), or None."""
    if not path:
        return None
    from shardwise.calibration import store

    return store.load(path)


def calibrated(cluster: Any, cal: Any, notes: list[str]) -> Any:
    """The cluster with the calibration's fitted values (unchanged without one)."""
    if cal is None:
        return cluster
    from shardwise.calibration.parameters import apply

    gpu = str(cluster.gpu.name)
    other = f"; it was fitted on {', '.join(cal.gpus)}, not {gpu}" if cal.gpus and gpu not in cal.gpus else ""
    notes.append(f"calibrated by {cal.path} ({cal.runs} run(s){other})")
    return apply(cluster, cal.fit.values)


def spread(scenarios: list[Any], cal: Any) -> Any:
    """The 80% interval's spread of each scenario's step time (`calibration.intervals`)."""
    from shardwise.calibration.intervals import spread as spread_of

    if cal is None:
        return spread_of(scenarios, None)
    return spread_of(scenarios, cal.fit, f"calibration {cal.path} ({cal.runs} run(s))")


def link_latency_s(o: dict[str, Any]) -> float | None:
    """--link-latency in seconds (checked even when no link flag uses it: a silently ignored flag
    is a trap)."""
    from shardwise import units

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


def link_flag(spec: str, role: str, replaced: Any = None, latency_s: float | None = None) -> Any:
    """A link flag (`presets.link_or_rate`): a preset, a YAML file, or a sustained rate (which
    keeps the latency and NCCL protocols of the link it replaces, or takes its kind's latency;
    --link-latency sets it)."""
    from shardwise import presets

    kind = "inter" if role == "inter-link" else "intra"
    try:
        return presets.link_or_rate(spec, kind, replaced, latency_s)
    except SpecError as exc:
        raise SpecError(f"--{role}: {exc}; or give a YAML file or a rate like 600GB/s") from None


def describe_link(link: Any) -> str:
    from shardwise.units import format_seconds

    return (
        f"{link.name} ({float(link.effective_bandwidth_bytes_per_s) / 1e9:.4g} GB/s sustained per direction, "
        f"{format_seconds(float(link.latency_s))} per step)"
    )


WHOLE_FIELDS = ("nodes", "num_gpus", "tp", "pp", "dp", "cp", "vpp", "micro_batch", "global_batch")


def _cluster_gpus(o: dict[str, Any], per_node: int) -> int:
    from shardwise.specs._checks import MAX_WHOLE

    for flag in WHOLE_FIELDS:
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
    """Plan keyword arguments from the framework and the execution fields given (which override
    it). Transformer Engine's userbuffer overlap needs sequence parallelism: a framework default
    that turns it on applies only where SP is on; asking for it without SP is an error."""
    from shardwise import presets
    from shardwise.specs.plan import EXECUTION_FLAGS

    flags = presets.framework(o.get("framework") or "megatron-core")
    out: dict[str, Any] = {"framework": flags["framework"]}
    for name in EXECUTION_FLAGS:
        given = o.get(name)
        out[name] = flags[name] if given is None else given
    # the stack's kernels (physics.stack): the preset's, where it states them, or the fields given
    for name in presets.STACK_PLAN_FIELDS:
        if o.get(name) is not None:
            out[name] = o[name]
        elif name in flags:
            out[name] = flags[name]
    # fp16 training accumulates its gradients another way in some stacks (`physics.microbatch`)
    if o.get("unfused_accumulate_bytes") is None:
        accumulate = presets.framework_accumulate_bytes(flags["framework"], o.get("precision") or "bf16")
        if accumulate is not None:
            out["unfused_accumulate_bytes"] = accumulate
    if sequence_parallel is not None and not sequence_parallel:
        if o.get("tp_comm_overlap") and tp > 1:
            raise SpecError(
                "--tp-comm-overlap needs --sequence-parallel (Transformer Engine overlaps the SP collectives)"
            )
        out["tp_comm_overlap"] = False
    if o.get("zero") is None:
        out["zero_stage"] = flags["zero_stage"]
    return out


def flash_attention(o: dict[str, Any]) -> bool:
    """Fused (flash) attention: as given (--flash-attention / --no-flash-attention), else as the
    framework preset states it (megatron-deepspeed: off, its --use-flash-attn flags are opt-in),
    else on."""
    from shardwise import presets

    if o.get("flash_attention") is not None:
        return bool(o["flash_attention"])
    return bool(presets.framework(o.get("framework") or "megatron-core").get("flash_attention", True))


def sequence_parallel(o: dict[str, Any]) -> bool:
    """Sequence parallelism: as given, else on wherever tensor parallelism is (tp > 1): NeMo's and
    Megatron-Bridge's recipes and torchtitan run TP with it, and Korthikanti et al. 2022 show it
    never costs time and saves activation memory."""
    given = o.get("sequence_parallel")
    return bool(o.get("tp", 1) > 1) if given is None else bool(given)


def stage_kwargs(o: dict[str, Any], layers: int | None = None) -> dict[str, Any]:
    """Plan keyword arguments for an uneven pipeline split (empty: even split); with the model's
    `layers`, a stage may not hold more than the model has."""
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


def build_plan(o: dict[str, Any], n_gpus: int, model: Any = None) -> Any:
    from shardwise.specs import Plan

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
    sp = sequence_parallel(o)
    schedule = o.get("schedule") or ("interleaved" if o["vpp"] > 1 else "1f1b")
    execution = execution_kwargs(o, sp, tp)
    if o.get("zero") is not None:
        execution["zero_stage"] = o["zero"]
    elif dp * cp == 1:  # a framework's default ZeRO stage means nothing without data-parallel replicas
        execution["zero_stage"] = 0
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
        recompute_layers=o.get("recompute_layers") or 0,
        recompute_modules=o.get("recompute_modules") or (),
        mtp_layers=o.get("mtp_layers") or 0,
        cuda_graph_scope=o.get("cuda_graph_scope") or (),
        sequence_parallel=sp,
        precision=o["precision"],
        flash_attention=flash_attention(o),
        lora_rank=o.get("lora_rank") or 0,
        lora_targets=o.get("lora_targets") or "qkv,proj,fc1,fc2",
        packed_document_len=o.get("packed_document_len") or 0,
        pipeline_flushes=o.get("pipeline_flushes") or 1,
        shard_group=o.get("shard_group") or 0,
        **execution,
        **(stage_kwargs(o) or default_split(o, pp, model)),
    )


def default_split(o: dict[str, Any], pp: int, model: Any) -> dict[str, Any]:
    """The framework's own pipeline split where it is not even (`presets.PIPELINE_SPLITS`): nanotron
    balances its blocks by compute, the output layer included (`specs.stages.compute_balanced_counts`),
    DeepSpeed's PipelineModule its transformer layers alone (`specs.stages.deepspeed_balanced_counts`),
    with one model chunk per stage; empty (the even split) otherwise."""
    from shardwise import presets
    from shardwise.specs.stages import compute_balanced_counts, deepspeed_balanced_counts

    rule = presets.framework_pipeline_split(o.get("framework") or "megatron-core")
    if rule == "even" or pp <= 1 or o["vpp"] > 1 or model is None:
        return {}
    if rule == "deepspeed":
        ds_counts = deepspeed_balanced_counts(int(model.layers), pp)
        return {} if ds_counts is None else {"stage_layers": ds_counts}
    h, f = model.hidden, model.ffn_hidden
    # LlamaModel.get_block_compute_costs: 4 h^2 for the attention's projections, 3 f h for the MLP
    layer_cost = 4.0 * h * h + (3.0 if model.gated_mlp else 2.0) * f * h
    counts = compute_balanced_counts(int(model.layers), pp, layer_cost, float(model.vocab * h))
    return {} if counts is None else {"stage_layers": counts}


def _link_hint(gpu_name: str) -> str:
    """What to give as --intra-link: the links of the system presets built on this GPU, if any."""
    from shardwise import presets

    systems = {name: data for name, data in presets.raw("systems").items() if data.get("gpu") == gpu_name}
    if not systems:
        return "e.g. nvlink3, pcie4, or a rate like 300GB/s; see `shardwise presets links`"
    links = sorted({str(data.get("intra_node_link")) for data in systems.values()})
    first = next(iter(systems))  # the presets' own order: the vendor's reference server before cloud instances
    return f"{gpu_name} servers use {' or '.join(links)}: e.g. --intra-link {links[0]}, or --system {first}"
