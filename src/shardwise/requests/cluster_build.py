"""Fields (by the names of `requests.fields`) -> a `Cluster`: a system preset or a GPU, its links
(presets, YAML files or rates, with --link-latency), the NICs shared per server, the GPU count
(--nodes, --num-gpus or tp x pp x dp), a rack-scale NVLink domain cut to the job, P2P and NVLink
SHARP, and a calibration's fitted values. What was assumed goes to `notes` (`requests.build`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardwise.errors import SpecError

# GPUs one CPU socket of a PCIe server holds in the system presets' `pcie:` blocks (x16 each on
# its root ports or one switch: a Sapphire Rapids socket's 80 lanes hold 4 and a NIC); a group
# larger than this crosses the sockets there
SOCKET_GPUS = 4


@dataclass(frozen=True)
class SystemTraits:
    """What a system preset passes on to a cluster built from flags (`build_cluster`, an
    experiment's `_hardware`); the defaults are a custom cluster's (--gpu: 8 GPUs per server, no
    network, P2P and NVLink SHARP on, Intel hosts)."""

    name: str = "custom"
    gpu: Any = None  # specs.hardware.Gpu
    gpus_per_node: int = 8
    intra_node_link: Any = None  # specs.hardware.Link
    nic: Any = None  # one NIC's link (`presets.system_network`)
    nics: float = 0.0  # NICs per server
    p2p: bool = True
    nvls: bool = True
    host_cpu: str = "intel"
    pcie: Any = None  # specs.pcie.PcieTopology: its switches and sockets, where its preset gives them


def system_traits(name: str) -> SystemTraits:
    """The traits of the system preset `name` (`SystemTraits`)."""
    from shardwise import presets

    base = presets.system(name)
    nic, nics = presets.system_network(name)
    return SystemTraits(
        str(base.name), base.gpu, int(base.gpus_per_node), base.intra_node_link, nic, nics,
        bool(base.p2p), bool(base.nvls), str(base.host_cpu), base.pcie,
    )  # fmt: skip


def rack_domain(per_node: int, num_gpus: int) -> int:
    """A rack-scale NVLink domain (e.g. 72 GPUs) is used in whole multiples of its largest divisor
    of the job (256 GPUs on an NVL72: 4 x 64), as NVIDIA's GB200 runs are laid out; an ordinary
    server (8 GPUs or fewer) keeps its size."""
    if per_node <= 8 or num_gpus % per_node == 0 or num_gpus < per_node:
        return per_node
    return max(d for d in range(1, per_node + 1) if num_gpus % d == 0)


def domain_tp_refusal(tp: int, n_gpus: int, per_node: int, domain: int) -> str | None:
    """Why a TP group of `tp` cannot lie inside an NVLink domain (`rules.node_rules`), in the user's
    terms, where --num-gpus cut the rack's `per_node`-GPU domains to `domain` GPUs (100 GPUs on an
    NVL72: 2 domains of 50, which tp=4 does not divide), with the GPU counts nearby whose domains it
    divides; None where it can. Predict, plan and serve say it alike."""
    if tp <= 1 or domain % tp == 0 or tp % domain == 0:
        return None
    near = [n for n in range(max(tp, n_gpus - 64), n_gpus + 65) if rack_domain(per_node, n) % tp == 0 and n > per_node]
    below = [n for n in near if n < n_gpus][-1:]
    above = [n for n in near if n > n_gpus][:1]
    return (
        f"--num-gpus {n_gpus}: not a whole number of {per_node}-GPU NVLink domains, so laid out as "
        f"{n_gpus // domain} domains of {domain} GPUs, which a TP group of {tp} cannot tile; give a multiple of "
        f"{per_node} GPUs" + (f", or {' or '.join(map(str, below + above))}" if below + above else "")
    )


def domain_cut(o: dict[str, Any], cluster: Any) -> tuple[int, int] | None:
    """(the system's GPUs per NVLink domain, the domain `build_cluster` cut them to) where --num-gpus
    cut a rack's domains smaller, else None."""
    if not o.get("system") or o.get("gpus_per_node") is not None:
        return None
    per_node = min(system_traits(o["system"]).gpus_per_node, int(cluster.num_gpus))
    domain = int(cluster.gpus_per_node)
    return (per_node, domain) if domain != per_node else None


def _check_domain_tp(tps: Any, n_gpus: int, per_node: int, domain: int) -> None:
    """`domain_tp_refusal` for the TP degree given (predict) or those given (plan's --tp): refused
    where none of them tiles the cut domains."""
    given = [t for t in (tps if isinstance(tps, (tuple, list)) else (tps,)) if isinstance(t, int) and t >= 1]
    refusals = [domain_tp_refusal(t, n_gpus, per_node, domain) for t in given]
    if refusals and all(refusals):
        raise SpecError(str(refusals[0]))


def build_cluster(o: dict[str, Any], notes: list[str], cal: Any = None, training: bool = False) -> Any:
    """The cluster the plan runs on; --nodes / --num-gpus / tp*pp*dp decide its size; `training`: a
    training request, whose calibration notes where its runs ran another stack (`stack_name`)."""
    from shardwise import loaders, presets

    both = o.get("nodes") is not None and o.get("num_gpus") is not None
    if not o.get("system") and not o.get("gpu"):
        raise SpecError("cluster: give --system NAME (e.g. dgx-a100) or --gpu NAME with --intra-link")
    t = system_traits(o["system"]) if o.get("system") else SystemTraits()
    name, gpu, per_node, intra, nic, nics = t.name, t.gpu, t.gpus_per_node, t.intra_node_link, t.nic, t.nics
    p2p, nvls, host_cpu = t.p2p, t.nvls, t.host_cpu
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
        _check_domain_tp(o.get("domain_tp", o.get("tp")), n_gpus, per_node, domain)
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
    if host_cpu != cluster.host_cpu:  # the system's host CPU: NCCL's network post per ring step
        cluster = cluster.with_(host_cpu=host_cpu)
    from shardwise.physics.custom_allreduce import is_nvlink_class

    if t.pcie is not None and not is_nvlink_class(intra):  # its PCIe switches and sockets (`physics.pcie`)
        cluster = cluster.with_(pcie=t.pcie)

    if o.get("p2p") == "on" and is_nvlink_class(intra):  # accepted, but it changes nothing (review 45 #10)
        notes.append(f"--p2p on: {intra.name} is NVLink-class, always peer-to-peer; --p2p applies to PCIe GPUs")
    if o.get("p2p") is not None:
        p2p = o["p2p"] == "on"
    if not p2p:
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
    if not o.get("system") and per_node > SOCKET_GPUS and not is_nvlink_class(intra):
        notes.append(_uniform_pcie_note(gpu.name, per_node))
    return calibrated(cluster, cal, notes, stack_name(o) if training and cal is not None else None)


def _uniform_pcie_note(gpu_name: str, per_node: int) -> str:
    """--gpu on a PCIe link: one uniform link, no switches or sockets (`specs.pcie`), and which
    system presets describe such a server."""
    from shardwise import presets

    boxes = [name for name, data in presets.raw("systems").items() if data.get("gpu") == gpu_name and data.get("pcie")]
    where = f"--system {' or '.join(boxes)}" if boxes else "a system file with a pcie: block (docs/serving.md)"
    return (
        f"{per_node} GPUs on one uniform PCIe link: no switches or CPU sockets priced, so a group of more than "
        f"{SOCKET_GPUS} never crosses a socket; a server of {per_node} PCIe GPUs has two sockets: {where}"
    )


def calibrated(cluster: Any, cal: Any, notes: list[str], stack: str | None = None) -> Any:
    """The cluster with the calibration's fitted values (unchanged without one); a training `stack`
    its runs did not run is noted (`calibration.intervals.stack_note`)."""
    if cal is None:
        return cluster
    from shardwise.calibration.intervals import stack_note
    from shardwise.calibration.parameters import apply

    gpu = str(cluster.gpu.name)
    other = f"; it was fitted on {', '.join(cal.gpus)}, not {gpu}" if cal.gpus and gpu not in cal.gpus else ""
    notes.append(f"calibrated by {cal.path} ({cal.runs} run(s){other})")
    if stack is not None and (note := stack_note(cal, stack)):
        notes.append(note)
    return apply(cluster, cal.fit.values)


def stack_name(o: dict[str, Any]) -> str:
    """The framework preset's name a training request is priced under (a framework file's `name`)."""
    from shardwise import presets

    return str(presets.framework(o.get("framework") or "megatron-core")["framework"])


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
    from shardwise import presets, units

    kind = "inter" if role == "inter-link" else "intra"
    try:
        return presets.link_or_rate(spec, kind, replaced, latency_s)
    except SpecError as exc:
        # a rate out of range, or a bare number, says what to write already: no second suggestion
        try:
            units.parse_rate_bytes_per_s(spec)
            rate = True
        except SpecError:
            rate = units.is_bare_number(spec) or units.rate_typo(spec) is not None
        if spec.endswith((".yaml", ".yml")):  # a file was given: what is wrong is inside it
            rate = True
        raise SpecError(f"--{role}: {exc}" + ("" if rate else "; or give a YAML file or a rate like 600GB/s")) from None


def describe_link(link: Any) -> str:
    from shardwise.units import format_seconds

    line, sustained = (float(x) / 1e9 for x in (link.bandwidth_bytes_per_s, link.effective_bandwidth_bytes_per_s))
    return (
        f"{link.name} ({line:.4g} GB/s nominal, {sustained:.4g} GB/s sustained per direction, "
        f"{format_seconds(float(link.latency_s))} per step)"
    )


WHOLE_FIELDS = ("nodes", "num_gpus", "tp", "pp", "dp", "cp", "vpp", "micro_batch", "global_batch")


def _cluster_gpus(o: dict[str, Any], per_node: int) -> int:
    from shardwise.specs._checks import MAX_WHOLE, whole_range

    for flag in WHOLE_FIELDS:
        if o.get(flag) is not None and not 1 <= o[flag] <= MAX_WHOLE:  # before any work sized by it
            name = flag.replace("_", "-")
            raise SpecError(f"--{name}: {o[flag]} is not allowed; it must be a whole number {whole_range(o[flag], 1)}")
    if o.get("nodes") is not None:
        if o["nodes"] * per_node > MAX_WHOLE:
            raise SpecError(f"--nodes: {o['nodes']} x {per_node} GPUs is not allowed; at most {MAX_WHOLE:,} GPUs")
        return o["nodes"] * per_node
    if o.get("num_gpus") is not None:
        return o["num_gpus"]
    if o.get("dp") is not None:
        return o["tp"] * o["pp"] * o["dp"] * (o.get("cp") or 1)
    return per_node


def _link_hint(gpu_name: str) -> str:
    """What to give as --intra-link: the links of the system presets built on this GPU, if any."""
    from shardwise import presets

    systems = {name: data for name, data in presets.raw("systems").items() if data.get("gpu") == gpu_name}
    if not systems:
        return "e.g. nvlink3, pcie4, or a rate like 300GB/s; see `shardwise presets links`"
    links = sorted({str(data.get("intra_node_link")) for data in systems.values()})
    first = next(iter(systems))  # the presets' own order: the vendor's reference server before cloud instances
    return f"{gpu_name} servers use {' or '.join(links)}: e.g. --intra-link {links[0]}, or --system {first}"
