"""Named GPUs, links, systems and models, read from the YAML files beside this module.

    >>> from shardwise import presets
    >>> presets.gpu("a100-sxm4-80gb").memory_bytes  # what CUDA reports: 79.35 GiB (gpus.yaml)
    85201413734.4

Names are case-insensitive; an unknown name raises `SpecError` listing the closest ones.
A path to a YAML file (one entry, or a mapping with the entry's fields) is accepted wherever a
name is, so users can bring their own hardware and models.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from shardwise import files, loaders, units
from shardwise.presets.stack_defaults import DEFAULT_FIELDS, check_default_fields
from shardwise.specs import Cluster, Gpu, Link, Model, SpecError
from shardwise.specs.experiment import LinkSpec
from shardwise.specs.plan import EXECUTION_FLAGS

HERE = Path(__file__).parent  # the preset files sit beside this module
KINDS = ("gpus", "links", "systems", "models", "frameworks")
# Old names still accepted for one release, not listed (`shardwise presets` shows the new ones).
ALIASES = {"models": {"brief": "gpt-96l-4096h"}}
# The Plan fields a framework preset sets (presets/frameworks.yaml).
FRAMEWORK_FLAGS = (*EXECUTION_FLAGS, "zero_stage")


# The preset files as parsed, with the CRC-32 of each YAML text they were parsed from
# (`python -m shardwise.presets` writes it): reading JSON spares a command importing PyYAML and
# parsing 45 KB of YAML (about 25 ms of `shardwise predict`). A YAML file whose text no longer
# matches its hash is parsed as it is, so an edit is never hidden; tests/test_presets.py checks
# that the snapshot is current.
SNAPSHOT = "presets.json"


@cache
def _snapshot() -> dict[str, Any]:
    path = HERE / SNAPSHOT
    if not path.is_file():
        return {}
    import json

    return json.loads(path.read_text(encoding="utf-8"))


def _checksum(text: str) -> int:
    """CRC-32 of a YAML text: any edit changes it (bar a 1 in 4 billion accident), and zlib loads
    in microseconds where hashlib takes milliseconds."""
    import zlib

    return zlib.crc32(text.encode("utf-8"))


def parse(kind: str, text: str) -> dict[str, dict[str, Any]]:
    """One preset file's YAML text as its mapping (names lower-case)."""
    return {str(k).lower(): v for k, v in loaders.parse_trusted_yaml(text, f"presets/{kind}.yaml").items()}


@cache
def raw(kind: str) -> dict[str, dict[str, Any]]:
    """The mapping of one preset file (cached): from the snapshot while it matches the YAML text,
    else parsed from the YAML."""
    if kind not in KINDS:
        raise ValueError(f"unknown preset kind {kind!r}; choose one of {', '.join(KINDS)}")
    text = (HERE / f"{kind}.yaml").read_text(encoding="utf-8")
    stored = _snapshot().get(kind)
    if stored is not None and stored.get("crc32") == _checksum(text):
        return stored["data"]
    return parse(kind, text)


def write_snapshot(folder: Path | None = None) -> Path:
    """Parse every preset file and write the snapshot beside them (`python -m shardwise.presets`)."""
    import json

    folder = folder or Path(__file__).parent
    snapshot = {}
    for kind in KINDS:
        text = (folder / f"{kind}.yaml").read_text(encoding="utf-8")
        snapshot[kind] = {"crc32": _checksum(text), "data": parse(kind, text)}
    out = folder / SNAPSHOT
    out.write_text(json.dumps(snapshot, indent=1) + "\n", encoding="utf-8")  # the files' order
    return out


def names(kind: str) -> list[str]:
    return list(raw(kind))


def _lookup(kind: str, name: str) -> tuple[str, dict[str, Any]]:
    """(canonical name, fields) for a preset name or a YAML file path."""
    if _looks_like_path(name):
        data = loaders.load_yaml(name)
        if not isinstance(data, dict):
            raise SpecError(f"{name}: expected a mapping of fields for one {kind[:-1]}")
        if len(data) == 1 and isinstance(next(iter(data.values())), dict):
            key, fields = next(iter(data.items()))
            return str(key), fields
        return Path(name).stem, data
    table = raw(kind)
    key = name.strip().lower()
    key = ALIASES.get(kind, {}).get(key, key)
    if key in table:
        return key, table[key]
    import difflib

    close = difflib.get_close_matches(key, table, n=3, cutoff=0.4)
    hint = f"; closest: {', '.join(close)}" if close else ""
    shown = name if len(name) <= 60 else f"{name[:57]}..."
    raise SpecError(f"unknown {kind[:-1]} {shown!r}{hint} (see `shardwise presets {kind}`)")


def _looks_like_path(name: str) -> bool:
    return name.endswith((".yaml", ".yml")) or files.is_file(name)


def _in_file(name: str, build: Any, *args: Any) -> Any:
    """Build a spec; for a YAML file the error starts with the file's path."""
    if not _looks_like_path(name):
        return build(*args)
    try:
        return build(*args)
    except SpecError as exc:
        raise SpecError(f"{name}: {exc}") from None


def gpu(name: str) -> Gpu:
    key, data = _lookup("gpus", name)
    return _in_file(name, loaders.gpu_from_dict, key, data)


def link(name: str) -> Link:
    key, data = _lookup("links", name)
    return _in_file(name, loaders.link_from_dict, key, data)


def link_or_rate(
    spec: str,
    role: str = "intra",
    replaced: Link | None = None,
    latency_s: float | None = None,
    name: str | None = None,
) -> Link:
    """What a link flag names, the one parser for all of them: a sustained rate ('600GB/s': it
    keeps the latency and protocols of the link it `replaced`, see `loaders.link_from_rate`), a
    preset name or a YAML file. `latency_s` overrides the latency; `name` names a rate link."""
    if units.is_bare_number(spec):
        raise SpecError(f"{spec!r} has no unit; write a rate like {spec}GB/s, or a preset name")
    try:
        rate = units.parse_rate_bytes_per_s(spec)
    except SpecError:
        rate = None
    if rate is not None:
        return loaders.link_from_rate(name or spec, rate, role, replaced, latency_s)
    found = link(spec)
    return found if latency_s is None else found.with_(latency_s=latency_s)


def model(name: str, **overrides: Any) -> Model:
    """A model preset; `overrides` replace fields before defaults are derived (so a new
    `hidden` also moves the default `ffn_hidden` = 4 * hidden)."""
    if name.lower().endswith(".json"):  # a Hugging Face config.json
        from shardwise import hf_config

        path = Path(name)
        key = path.parent.name if path.stem == "config" and path.parent.name else path.stem
        fields = hf_config.read(path)
        if "seq_len" not in overrides:
            hf_config.note_seq_len(fields)
        return loaders.model_from_dict(key or "model", {**fields, **overrides})
    key, data = _lookup("models", name)
    return _in_file(name, loaders.model_from_dict, key, {**data, **overrides})


SYSTEM_FIELDS = ("gpu", "gpus_per_node", "intra_node_link", "inter_node_link", "nics_per_node", "p2p", "nvls", "pcie")
# A system's PCIe layout (`specs.pcie.PcieTopology`): counts, rates (e.g. 31.5GB/s), a flag.
PCIE_COUNTS = ("gpus_per_switch", "gpus_per_socket")
PCIE_RATES = ("uplink_bandwidth", "socket_link_bandwidth", "host_memory_bandwidth")


def system(name: str, nodes: int = 1) -> Cluster:
    """A cluster of `nodes` servers of a named system (dgx-a100, ...)."""
    key, data = _lookup("systems", name)
    return _in_file(name, _system_from_dict, key, data, nodes)


def _system_from_dict(key: str, data: dict[str, Any], nodes: int) -> Cluster:
    for field in data:
        if field not in (*SYSTEM_FIELDS, "source", "kind", "notes", "name"):
            raise SpecError(f"system {key!r}: {loaders.unknown_field(field, SYSTEM_FIELDS)}")
    for field in ("gpu", "gpus_per_node", "intra_node_link"):
        if data.get(field) is None:
            raise SpecError(f"system {key!r}: missing field {field}")
    try:
        per_node = loaders.whole(data["gpus_per_node"])
    except ValueError as exc:
        raise SpecError(f"system {key!r}: gpus_per_node: {exc}") from None
    if per_node < 1:
        raise SpecError(f"system {key!r}: gpus_per_node: {per_node} is not allowed; it must be >= 1")
    g = _field_part(key, "gpu", data, loaders.gpu_from_dict, gpu)
    intra = _field_part(key, "intra_node_link", data, loaders.link_from_dict, link)
    inter = None
    if data.get("inter_node_link") is not None:  # false, 0 or "" is a mistake, not "no network"
        nic = _field_part(key, "inter_node_link", data, loaders.link_from_dict, link)
        nics = loaders.check_nics_per_node(data.get("nics_per_node", per_node), f"system {key!r}: nics_per_node")
        inter = loaders.per_gpu_nic(nic, nics, per_node)
    cluster = loaders.cluster_from_parts(key, g, per_node, nodes, intra, inter, str(data.get("source", "")))
    flags = {flag: data.get(flag, True) for flag in ("p2p", "nvls")}
    for flag, value in flags.items():
        if not isinstance(value, bool):
            raise SpecError(f"system {key!r}: {flag}: {value!r} is not allowed; give true or false")
    if data.get("pcie") is not None:
        cluster = cluster.with_(pcie=pcie_from_dict(key, data["pcie"]))
    return cluster.with_(**flags) if not all(flags.values()) else cluster


def pcie_from_dict(key: str, data: Any) -> Any:
    """A system's `pcie:` mapping as a `PcieTopology` (rates like 31.5GB/s, one direction)."""
    from shardwise.specs.pcie import PcieTopology

    where = f"system {key!r}: pcie"
    if not isinstance(data, dict):
        raise SpecError(f"{where}: {data!r} is not allowed; give a mapping of {', '.join(PCIE_COUNTS + PCIE_RATES)}")
    kwargs: dict[str, Any] = {"source": str(data.get("source", ""))}
    for field, value in data.items():
        try:
            if field in PCIE_COUNTS:
                kwargs[field] = loaders.whole(value)
            elif field in PCIE_RATES:
                kwargs[f"{field}_bytes_per_s"] = units.parse_rate_bytes_per_s(value)
            elif field == "p2p_beyond_switch":
                kwargs[field] = value
            elif field != "source":
                allowed = (*PCIE_COUNTS, *PCIE_RATES, "p2p_beyond_switch", "source")
                raise SpecError(f"{where}: {loaders.unknown_field(field, allowed)}")
        except ValueError as exc:
            raise SpecError(f"{where}: {field}: {exc}") from None
    return PcieTopology(**kwargs)


def system_network(name: str) -> tuple[Link | None, float]:
    """(one NIC of the system, NICs per server): what `system` shares out per GPU."""
    _, data = _lookup("systems", name)
    if data.get("inter_node_link") is None:
        return None, 0.0
    nic = _part("links", data["inter_node_link"], loaders.link_from_dict, link)
    nics = data.get("nics_per_node", data.get("gpus_per_node", 1))
    return nic, loaders.check_nics_per_node(nics, f"system {name!r}: nics_per_node")


def framework(name: str) -> dict[str, Any]:
    """The execution flags of a framework preset, as `Plan` keyword arguments (with `framework`
    set to its name); `zero_stage` is the framework's default optimizer sharding."""
    key, data = _lookup("frameworks", name)
    return _in_file(name, _framework_from_dict, key, data)


def _checked_framework(name: str) -> dict[str, Any]:
    """A framework preset's fields, the whole preset checked (looked up, or its file read, once)."""
    key, data = _lookup("frameworks", name)
    _in_file(name, _framework_from_dict, key, data)
    return data


def framework_pipeline_split(name: str) -> str:
    """How the framework splits the layers over pipeline stages when the plan gives no split
    (`PIPELINE_SPLITS`; "even" where the preset says nothing). A request-layer default, not a
    `Plan` field."""
    return str(_checked_framework(name).get("pipeline_split", "even"))


def framework_plan_search(name: str) -> tuple[bool, tuple[int, ...]]:
    """What `plan` searches on the framework beyond the layout: whether it recomputes the first N
    layers of each model chunk whole (`block_recompute`), and the ZeRO stages it runs with hybrid
    sharding (`hybrid_shard`); (False, ()) where the preset says nothing."""
    data = _checked_framework(name)
    return bool(data.get("block_recompute", False)), tuple(int(z) for z in data.get("hybrid_shard", []))


def framework_accumulate_bytes(name: str, precision: str) -> float | None:
    """Bytes per weight per micro-batch that the framework's unfused gradient accumulation moves
    when training in `precision` (`physics.microbatch`): its `unfused_accumulate_bytes_fp16` in
    fp16 where it states one, else its `unfused_accumulate_bytes`; None where it states neither."""
    data = _checked_framework(name)
    if precision == "fp16" and "unfused_accumulate_bytes_fp16" in data:
        return float(data["unfused_accumulate_bytes_fp16"])
    value = data.get("unfused_accumulate_bytes")
    return None if value is None else float(value)


# The software stack's kernels (`physics.stack`), optional in a framework preset: the default is
# Megatron-Core's (fused kernels, Transformer Engine attention, no host bound).
# What it pays per micro-batch (`physics.microbatch`) is optional too: Megatron-LM's by default.
STACK_FIELDS = (
    "attention_kernel",
    "eager_kernels",
    "eager_rotary",
    "fp8_recipe",
    "selective_policy",
    "host_kernel",
    "flash_attention",
    "per_param_sharding",
    "unfused_accumulate_bytes",
    "unfused_accumulate_bytes_fp16",
    "p2p_serial",
    "pipeline_split",
    "layer_host_ops",
    "loss_bytes_per_logit",
    "p2p_host_ops",
    "tp_shard_overlap",
    "eager_glu",
    "layout_copies",
    "grad_reduce_bf16",
    "spmd_grad_reduce",
    "expandable_segments",
    "loss_kernel",
    "block_recompute",
    "hybrid_shard",
    *DEFAULT_FIELDS,  # the layout defaults the request layer reads (`presets.stack_defaults`)
)
# what `plan` searches on the stack beyond the layout (request-layer defaults, not Plan fields:
# `framework_plan_search`)
PLAN_SEARCH_FIELDS = ("block_recompute", "hybrid_shard")
# how a stack splits the layers over pipeline stages by default (`specs.stages`): even (Megatron's) or
# balanced by compute with the output layer counted (nanotron's build_model)
PIPELINE_SPLITS = ("even", "compute", "deepspeed")
# ... as the Plan keyword arguments `framework` returns: the same, the host time in seconds, less the
# keys that are no Plan field (flash_attention goes with the CLI's own flag, the fp16 accumulation
# bytes with the precision, the pipeline split with the request layer)
STACK_PLAN_FIELDS = tuple(
    "host_kernel_s" if key == "host_kernel" else key
    for key in STACK_FIELDS
    if key not in ("flash_attention", "unfused_accumulate_bytes_fp16", "pipeline_split", *PLAN_SEARCH_FIELDS)
    and key not in DEFAULT_FIELDS
)


def _stack_fields(key: str, data: dict[str, Any]) -> dict[str, Any]:
    from shardwise.precisions import FP8_RECIPES
    from shardwise.specs.plan import ATTENTION_KERNELS, LOSS_KERNELS, SELECTIVE_POLICIES

    out: dict[str, Any] = {}
    choices_of = (
        ("attention_kernel", ATTENTION_KERNELS),
        ("selective_policy", SELECTIVE_POLICIES),
        ("fp8_recipe", FP8_RECIPES),
        ("loss_kernel", LOSS_KERNELS),
    )
    for field, choices in choices_of:
        if field in data:
            if data[field] not in choices:
                allowed = ", ".join(choices)
                raise SpecError(f"framework {key!r}: {field}: {data[field]!r} is not allowed; choose {allowed}")
            out[field] = data[field]
    booleans = (
        "eager_kernels", "eager_rotary", "flash_attention", "per_param_sharding", "p2p_serial", "tp_shard_overlap",
        "spmd_grad_reduce",
    )  # fmt: skip
    for field in (*booleans, "eager_glu", "layout_copies", "grad_reduce_bf16", "expandable_segments"):
        if field in data:
            if not isinstance(data[field], bool):
                raise SpecError(f"framework {key!r}: {field}: {data[field]!r} is not allowed; give true or false")
            out[field] = data[field]
    if "host_kernel" in data:
        out["host_kernel_s"] = units.parse_seconds(data["host_kernel"])
    check_default_fields(key, data)  # not Plan fields: `presets.stack_defaults`
    # not a Plan field: the request layer reads it through `framework_pipeline_split`
    if "pipeline_split" in data and data["pipeline_split"] not in PIPELINE_SPLITS:
        allowed = ", ".join(PIPELINE_SPLITS)
        raise SpecError(
            f"framework {key!r}: pipeline_split: {data['pipeline_split']!r} is not allowed; choose {allowed}"
        )
    # not Plan fields either: the planner reads them through `framework_plan_search`
    if "block_recompute" in data and not isinstance(data["block_recompute"], bool):
        raise SpecError(
            f"framework {key!r}: block_recompute: {data['block_recompute']!r} is not allowed; give true or false"
        )
    stages = data.get("hybrid_shard", [])
    if not isinstance(stages, list) or any(isinstance(z, bool) or z not in (1, 2, 3) for z in stages):
        raise SpecError(f"framework {key!r}: hybrid_shard: {stages!r} is not allowed; give a list of ZeRO stages 1-3")
    # bytes per weight per micro-batch; `_fp16`: when training in fp16, where that differs
    for field in ("unfused_accumulate_bytes", "unfused_accumulate_bytes_fp16"):
        if field in data:
            value = data[field]
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 64:
                raise SpecError(f"framework {key!r}: {field}: {value!r} is not allowed; give bytes per weight, 0-64")
            out[field] = float(value)
    # a stack's host operations per layer and its loss's bytes per logit, counted from its code
    for field, high, what in (
        ("layer_host_ops", 10_000, "host operations per layer"),
        ("p2p_host_ops", 10_000, "host operations per micro-batch"),
        ("loss_bytes_per_logit", 256, "bytes per logit"),
    ):
        if field in data:
            value = data[field]
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= high:
                raise SpecError(f"framework {key!r}: {field}: {value!r} is not allowed; give {what}, 0-{high}")
            out[field] = float(value)
    return out


def _framework_from_dict(key: str, data: dict[str, Any]) -> dict[str, Any]:
    for field in data:
        if field not in (*FRAMEWORK_FLAGS, *STACK_FIELDS, "description", "source", "kind", "notes", "name"):
            raise SpecError(f"framework {key!r}: {loaders.unknown_field(field, (*FRAMEWORK_FLAGS, *STACK_FIELDS))}")
    missing = [f for f in FRAMEWORK_FLAGS if f not in data]
    if missing:
        raise SpecError(f"framework {key!r}: missing field(s) {', '.join(missing)}")
    out: dict[str, Any] = {f: data[f] for f in FRAMEWORK_FLAGS}
    for f in FRAMEWORK_FLAGS:
        v = out[f]
        ok = (
            isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 3
            if f == "zero_stage"
            else (v is None and f == "overlap_p2p") or isinstance(v, bool)
        )
        if not ok:
            allowed = "0, 1, 2 or 3" if f == "zero_stage" else "true or false" + (" or null" * (f == "overlap_p2p"))
            raise SpecError(f"framework {key!r}: {f}: {v!r} is not allowed; give {allowed}")
    out.update(_stack_fields(key, data))
    out.pop("unfused_accumulate_bytes_fp16", None)  # not a Plan field: `framework_accumulate_bytes`
    out["framework"] = key
    return out


def _field_part(key: str, field: str, data: dict[str, Any], from_dict: Any, by_name: Any) -> Any:
    """`_part` for one field of system `key`; the error names the field."""
    try:
        return _part("gpus" if field == "gpu" else "links", data[field], from_dict, by_name)
    except SpecError as exc:
        raise SpecError(f"system {key!r}: {field}: {exc}") from None


def _part(kind: str, value: Any, from_dict: Any, by_name: Any) -> Any:
    """A system's GPU or link: a preset name, a YAML path, or the fields inline."""
    if isinstance(value, dict):
        return from_dict(str(value.get("name", f"custom-{kind[:-1]}")), value)
    if not isinstance(value, str):
        raise SpecError(f"{kind[:-1]} {value!r} is not allowed; give a preset name, a YAML file or the fields")
    return by_name(value)


def describe(kind: str) -> list[dict[str, Any]]:
    """Rows for `shardwise presets`: name plus the fields of each preset."""
    return [{"name": k, **v} for k, v in raw(kind).items()]


def parse_link_spec(text: str, flag: str = "--intra-link") -> LinkSpec:
    """A link to compare: `nvlink3` (preset), `pcie=pcie4`, `nvlink=600GB/s`,
    `pcie=32GB/s,latency=2us,efficiency=0.76`. A bare rate is the sustained rate (efficiency 1)."""
    head, *extras = text.replace(" ", "").split(",")
    label, sep, value = head.partition("=")
    if not sep:
        label, value = head, head
    if not label or not value:
        raise SpecError(f"{flag} {text!r}: give LABEL=LINK (a preset like pcie4 or a rate like 32GB/s)")
    try:
        link = link_or_rate(value, "intra", name=label)
    except SpecError as exc:
        hint = "; or give LABEL=RATE like nvlink=600GB/s" if str(exc).startswith("unknown link") else ""
        raise SpecError(f"{flag} {text!r}: {exc}{hint}") from None
    for extra in extras:
        key, _, v = extra.partition("=")
        if key == "latency":
            link = link.with_(latency_s=units.parse_seconds(v))
        elif key == "efficiency":
            try:
                efficiency = float(v)
            except ValueError:
                raise SpecError(f"{flag} {text!r}: efficiency={v} is not allowed; give a fraction like 0.8") from None
            link = link.with_(efficiency=efficiency)
        elif key == "base_latency":
            link = link.with_(base_latency_s=units.parse_seconds(v))
        else:
            raise SpecError(f"{flag} {text!r}: unknown option {key!r}; allowed: latency, efficiency, base_latency")
    return LinkSpec(label=label, link=link)
