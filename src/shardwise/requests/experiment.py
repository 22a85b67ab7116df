"""The words of `crossover`, `sweep` and `sensitivity` -- plans compared on links as one variable
moves -- turned into an `Experiment` (`specs.experiment`), with one set of defaults.

Defaults are the brief's experiment (Section 8 of the Russian article): its model (hidden 4096,
96 layers), 8 GPUs of 312 TFLOP/s (A100), TP=8 against PP=8, NVLink against PCIe. What the brief
leaves open is chosen and documented here: sequences of 2048 tokens, micro-batch 1 (so PP gets
as many micro-batches as the batch has sequences), a training step (forward + backward +
optimizer), bf16, FlashAttention, no recomputation. The fields and their defaults are
`requests.fields.EXPERIMENT_FIELDS`; the request is `requests.compare.ExperimentRequest`.
"""

from __future__ import annotations

from typing import Any

from shardwise.requests.experiment_words import AS_WRITTEN, describe_experiment, overlap_words

BRIEF_GPU = "a100-sxm4-80gb"  # the brief's 312 TFLOP/s GPU, where no --system or --gpu names one
BRIEF_GPUS_PER_NODE = 8
BRIEF_INTER_LINK = "ib-hdr"

__all__ = ["AS_WRITTEN", "describe_experiment", "overlap_words"]


def _framework_defaults(o: dict[str, Any]) -> dict[str, Any]:
    """The framework's execution flags without its default ZeRO stage: a plan is taken as written,
    ZeRO-0 unless its zero= key sets one."""
    from shardwise.requests.build import execution_kwargs

    flags = execution_kwargs({"framework": o.get("framework"), "precision": o.get("precision")})
    flags.pop("zero_stage", None)
    return flags


def build_experiment(o: dict[str, Any], notes: list[str] | None = None) -> Any:
    """The `Experiment` of the options (click's names: `model_name`, `gpus`, `batch`, `links`,
    `plans`, ...); what was assumed is appended to `notes`."""
    from shardwise import presets
    from shardwise.analyses.experiment import BRIEF_LINKS, brief_experiment
    from shardwise.errors import SpecError
    from shardwise.loaders import parse_plan_spec
    from shardwise.presets import parse_link_spec
    from shardwise.presets.stack_defaults import resolve_recompute
    from shardwise.requests import attention
    from shardwise.requests.build import flash_attention, stage_kwargs
    from shardwise.requests.model_shape import hidden_overrides
    from shardwise.requests.precision import resolved
    from shardwise.specs._checks import MAX_WHOLE, whole_range
    from shardwise.specs.experiment import Experiment

    base = brief_experiment()
    overrides = {
        k: o[k] for k in ("layers", "seq_len", "heads", "kv_heads", "ffn_hidden", "vocab") if o.get(k) is not None
    }
    if o.get("family"):
        overrides["family"] = o["family"]
    names = {"gpus": "num-gpus", "batch": "global-batch"}
    for flag in ("gpus", "nodes", "gpus_per_node", "batch", "micro_batch", "hidden"):
        if o.get(flag) is not None and not 1 <= o[flag] <= MAX_WHOLE:
            raise SpecError(
                f"--{names.get(flag, flag.replace('_', '-'))}: {o[flag]} is not allowed; it must be a whole number "
                f"{whole_range(o[flag], 1)}"
            )
    hardware = _hardware(o)
    precision_given = o.get("precision") is not None
    o = {**o, "precision": resolved(o.get("precision"), hardware["gpu"], "--precision", notes)}
    o = {**o, **attention.changes(o, hardware["gpu"], notes)}  # what runs on the GPU (`requests.attention`)
    plans = tuple(parse_plan_spec(t) for t in o["plans"]) or base.plans
    if o.get("hidden") is not None:  # the model's ratios kept (`requests.model_shape`)
        tp_max = max(hardware["gpus"] if p.tp == "all" else p.tp for p in plans)
        overrides = hidden_overrides(o["model_name"], {**overrides, "hidden": o["hidden"]}, tp_max)
    model = presets.model(o["model_name"], **overrides)
    if notes is not None and (note := presets.model_family_note(o["model_name"])):
        notes.append(note)
    stored = None  # serving a quantised checkpoint: its weights as published, as `serve` prices them
    if o["workload"] in ("decode", "prefill") and not precision_given:
        from shardwise.requests.checkpoint_weights import checkpoint_weights

        stored = checkpoint_weights(o["model_name"], notes, "--precision")
    links = tuple(_with_latency(parse_link_spec(t), t, hardware["latency_s"]) for t in o["links"])
    if notes is not None:
        notes += [note for t in o["links"] if (note := _network_link_note(t, hardware["gpus"]))]
    if not links and hardware["system_link"] is not None:  # the system's own link inside a server
        links = (hardware["system_link"],)
    if not links and o["cost_model"] != "textbook" and o.get("gpu_name"):
        _check_default_links(hardware["gpu"].name, base.links)
    if not links:  # the textbook model takes the brief's figures literally
        links = BRIEF_LINKS if o["cost_model"] == "textbook" else base.links
    if o["cost_model"] == "textbook":  # one convention: both directions' total, as the brief's NVLink
        from shardwise.requests.textbook_links import textbook_links

        links = textbook_links(links, o["links"], brief=links == BRIEF_LINKS)
    if o["cost_model"] == "textbook" and o["workload"] != "train":
        raise SpecError("--cost-model textbook prices only the brief's step (--workload train)")
    if o["workload"] in ("prefill", "decode") and o["micro_batch"] != 1:
        raise SpecError(
            f"--micro-batch does not apply to --workload {o['workload']}: serving splits the batch into "
            "min(batch, pp) micro-batches itself"
        )
    if len({p.label for p in plans}) != len(plans) or len({lk.label for lk in links}) != len(links):
        raise SpecError("each --plan and each --intra-link label must be different")
    calibration: dict[str, Any] = {}
    if o.get("calibration") and o["cost_model"] == "textbook":
        raise SpecError("--calibration fits the physical model; the textbook model takes the brief's figures as given")
    if o.get("calibration"):
        from shardwise.calibration import store
        from shardwise.calibration.intervals import stack_bound, stack_note
        from shardwise.requests.cluster_build import stack_name

        cal = store.load(o["calibration"])
        calibration = {
            "calibration": tuple(sorted(cal.fit.values.items())),
            "prediction_log_sd": cal.fit.noise_log_sd,
            "calibration_fit": cal.fit,
            "calibration_gpus": tuple(cal.gpus),
            "spread_basis": f"calibration {cal.path} ({cal.runs} run(s))",
        }
        gpu_name = hardware["gpu"].name
        other = ""
        if cal.gpus and gpu_name not in cal.gpus:
            other = f"; it was fitted on {', '.join(cal.gpus)}, not {gpu_name}"
            calibration["spread_basis"] += f", on {gpu_name} at least the uncalibrated spread"
        stack_text = stack_note(cal, stack_name(o)) if o["workload"] == "train" else ""
        if stack_text and cal.stacks is not None:  # another stack's GEMMs or host time (`intervals.spread`)
            calibration["calibration_other_stack"] = stack_bound(cal.fit)
            calibration["spread_basis"] += ", under another stack the uncalibrated spread and the fit's shift"
        if notes is not None:
            notes.append(f"calibrated by {cal.path} ({cal.runs} run(s){other})")
            notes += [stack_text] if stack_text else []
    if not calibration and o["workload"] == "train" and o["cost_model"] == "physical":
        calibration = _pcie_basis(links, notes)
    recompute = resolve_recompute(o.get("framework"), o.get("recompute"))
    if notes is not None and recompute.every and model.is_moe and o["workload"] == "train":
        notes.append(
            f"{recompute.framework}'s default recomputes one layer in {recompute.every} whole, not priced for a "
            "mixture of experts: priced without recomputation (give --recompute)"
        )
    return Experiment(
        **calibration,
        model=model,
        gpu=hardware["gpu"],
        gpus=hardware["gpus"],
        gpus_per_node=hardware["gpus_per_node"],
        inter_node_link=hardware["inter_node_link"],
        host_cpu=hardware["host_cpu"],
        nvls=hardware["nvls"],
        pcie=hardware["pcie"],
        links=links,
        plans=plans,
        batch=o["batch"],
        micro_batch=o["micro_batch"],
        workload=o["workload"],
        cost_model=o["cost_model"],
        recompute_every=recompute.every if o["workload"] == "train" else 0,
        serving_weights=stored,
        plan_defaults={
            "recompute": recompute.mode,  # None given: the framework's (`resolve_recompute`)
            "flash_attention": flash_attention(o),
            "precision": o["precision"],
            **_framework_defaults(o),
            **stage_kwargs(o),
        },
    )


def check_plans_valid(exp: Any, variable: str, values: Any, times: dict[str, Any] | None = None) -> None:
    """A plan that is invalid at every value is a user error: name the rule it breaks. `times`:
    each plan's seconds on the first link where already priced (else priced here)."""
    import numpy as np

    from shardwise.analyses.evaluate import times_s, why_invalid
    from shardwise.errors import SpecError

    for plan in exp.plans:
        t = times[plan.label] if times is not None else times_s(exp, plan, exp.links[0].link, variable, values)[0]
        if np.all(np.isnan(t)):
            rule = why_invalid(exp, plan, exp.links[0].link, {variable: np.asarray(values)[:1]})
            if rule is not None and "needs sequence parallelism" in rule:  # the fix, in the --plan's words
                rule += f"; write --plan {plan.label},sp=on"
            if rule is not None and variable == "batch" and "divisible by dp" in rule:  # the range, not the plan
                low, high = float(np.min(values)), float(np.max(values))
                rule += (
                    f"; the batches swept run {low:g} to {high:g} on {exp.gpus} GPUs: give --vary "
                    "batch=LOW..HIGH with multiples of dp x micro-batch, or fewer GPUs"
                )
            raise SpecError(
                f"--plan {plan.label}: invalid at every {variable} in the range ({rule or 'see the rules'})"
            )


def stack_layout(framework: str | None) -> dict[str, Any]:
    """The stack's own layout defaults that predict and plan take and a plan as written does not
    (review 45 #2): sequence parallelism where tp > 1 (`framework_sequence_parallel`, None: on) and
    the preset's ZeRO stage; `framework`: a preset's name or a framework file."""
    from shardwise import presets
    from shardwise.presets.stack_defaults import framework_sequence_parallel

    stack = framework or "megatron-core"
    return {
        "sequence_parallel": framework_sequence_parallel(stack) is not False,
        "zero_stage": int(presets.framework(stack)["zero_stage"]),
    }


def stack_layout_fields(req: Any) -> dict[str, Any]:
    """sweep's JSON `stack_layout` (`stack_layout`) for a training step of an `ExperimentRequest`."""
    train = req.workload == "train" and req.cost_model != "textbook"
    return {"stack_layout": stack_layout(req.framework)} if train else {}


def _check_default_links(gpu_name: str, links: Any) -> None:
    """The brief's links (NVLink=nvlink3 against PCIe=pcie4) are A100 SXM servers': with a --gpu whose
    servers use another link, --intra-link is required, as `predict` requires it with --gpu."""
    from shardwise import presets
    from shardwise.errors import SpecError
    from shardwise.requests.cluster_build import _link_hint

    servers = {str(d.get("intra_node_link")) for d in presets.raw("systems").values() if d.get("gpu") == gpu_name}
    if links[0].link.name not in servers:
        default = " against ".join(f"{lk.label}={lk.link.name}" for lk in links)
        raise SpecError(
            f"--intra-link is required with --gpu {gpu_name}: the default comparison ({default}) is "
            f"A100 servers' ({_link_hint(gpu_name)})"
        )


def _pcie_basis(links: tuple[Any, ...], notes: list[str] | None) -> dict[str, Any]:
    """The uncalibrated bands' basis where a compared link is PCIe, and a note saying so: a plan with a
    TP, CP or data-parallel group over it adds the PCIe collective spread (`analyses.bands.pcie_log_sd`)."""
    from shardwise.calibration.link_spread import MISSED
    from shardwise.physics.custom_allreduce import is_nvlink_class
    from shardwise.specs.experiment import Experiment

    pcie = [lk.label for lk in links if not is_nvlink_class(lk.link)]
    if not pcie:
        return {}
    text = (
        f"{', '.join(pcie)}: no published training run over PCIe, so a plan with a TP, CP or data-parallel group "
        f"in a server there has a wider band: plus {MISSED}"
    )
    if notes is not None:
        notes.append(text)
    default = Experiment.__dataclass_fields__["spread_basis"].default
    return {"spread_basis": f"{default}; {text}"}


def _hardware(o: dict[str, Any]) -> dict[str, Any]:
    """The GPUs of an experiment from --system / --gpu / --num-gpus / --nodes / --gpus-per-node /
    --inter-link / --nics-per-node / --link-latency, with predict's rules (`options.build_cluster`):
    a system gives the GPU, the server size, its link inside a server (compared when no
    --intra-link is given) and its network; the flags override it. Without a system: the brief's
    A100 servers of 8 over ib-hdr."""
    from shardwise import loaders, presets
    from shardwise.errors import SpecError
    from shardwise.requests.build import link_flag as _link
    from shardwise.requests.build import link_latency_s as _link_latency_s
    from shardwise.requests.cluster_build import SystemTraits, system_traits
    from shardwise.specs.experiment import LinkSpec

    latency_s = _link_latency_s(
        {"link_latency": o.get("link_latency"), "intra_link": o.get("links"), "inter_link": o.get("inter_link")}
    )
    t = system_traits(o["system"]) if o.get("system") else SystemTraits(gpus_per_node=BRIEF_GPUS_PER_NODE)
    gpu, per_node, nic, nics, host_cpu, nvls = t.gpu, t.gpus_per_node, t.nic, t.nics, t.host_cpu, t.nvls
    system_link = None
    if o.get("system"):
        if not t.p2p:
            raise SpecError(
                f"--system {o['system']}: its GPUs cannot reach each other's memory (P2P off), which crossover, "
                "sweep and sensitivity do not model; use predict, plan or serve for it"
            )
        system_link = LinkSpec(label=str(t.intra_node_link.name), link=t.intra_node_link)
    if o.get("gpu_name") or not o.get("system"):
        gpu = presets.gpu(o.get("gpu_name") or BRIEF_GPU)
    if o.get("gpus_per_node") is not None:
        per_node = o["gpus_per_node"]
    gpus = o.get("gpus")
    if o.get("nodes") is not None:
        if gpus is not None and o["nodes"] * per_node != gpus:
            raise SpecError(
                f"--nodes {o['nodes']} x {per_node} GPUs per server = {o['nodes'] * per_node}, but --num-gpus is "
                f"{gpus}; give one of them, or values that agree"
            )
        gpus = o["nodes"] * per_node
    gpus = per_node if gpus is None else gpus
    if o.get("inter_link") or (nic is None and not o.get("system")):
        given = o.get("inter_link")
        nic = _link(given or BRIEF_INTER_LINK, "inter-link", nic, latency_s if given else None)
        nics = nics or float(per_node)
    if o.get("nics_per_node") is not None:
        if nic is None:
            raise SpecError("--nics-per-node needs a network: give --inter-link (e.g. ib-ndr or 100Gb/s)")
        nics = loaders.check_nics_per_node(o["nics_per_node"], "--nics-per-node")
    inter = loaders.per_gpu_nic(nic, nics, per_node) if nic is not None else None
    if inter is None and gpus > per_node:
        raise SpecError(
            f"--system {o['system']} has no inter_node_link; {gpus} GPUs span servers: give --inter-link "
            "(e.g. ib-hdr, ib-ndr, or a rate like 25GB/s)"
        )
    return {
        "gpu": gpu,
        "gpus": gpus,
        "gpus_per_node": per_node,
        "inter_node_link": inter,
        "host_cpu": host_cpu,
        "nvls": nvls,
        "pcie": t.pcie,
        "system_link": system_link,
        "latency_s": latency_s,
    }


def _with_latency(spec: Any, text: str, latency_s: float | None) -> Any:
    """A compared link with --link-latency, unless its own `latency=` says otherwise."""
    from dataclasses import replace

    keys = {part.partition("=")[0] for part in text.replace(" ", "").split(",")[1:]}
    if latency_s is None or "latency" in keys:
        return spec
    return replace(spec, link=spec.link.with_(latency_s=latency_s))


def _network_link_note(text: str, gpus: Any) -> str | None:
    """A note where `--intra-link` names a network preset (ib-hdr, eth-100g: `kind: network`): it
    is priced as given, as every link flag takes any preset, but no server joins its GPUs that way."""
    from shardwise import presets

    head = text.replace(" ", "").split(",")[0]
    name = head.partition("=")[2] or head
    if presets.raw("links").get(name, {}).get("kind") != "network":
        return None
    return (
        f"--intra-link {text!r}: {name} is a network link (between servers), not a server's own; priced as given, "
        f"it stands for GPUs that reach each other only through that network, about the times of --nodes {gpus} "
        f"--gpus-per-node 1 --inter-link {name}"
    )
