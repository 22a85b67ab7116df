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
from shardwise.presets.framework_fields import _framework_from_dict, with_like
from shardwise.presets.link_spec import parse_link_spec  # noqa: F401  (presets.parse_link_spec)
from shardwise.presets.model_files import is_hf_config, model_family_note, model_hf_id  # noqa: F401
from shardwise.presets.pcie_fields import host_cpu_of, pcie_from_dict
from shardwise.presets.stack_defaults import framework_pipeline_split, framework_plan_search  # noqa: F401
from shardwise.specs import Cluster, Gpu, Link, Model, SpecError

HERE = Path(__file__).parent  # the preset files sit beside this module
KINDS = ("gpus", "links", "systems", "models", "frameworks")
# Old names still accepted for one release, not listed (`shardwise presets` shows the new ones).
ALIASES = {"models": {"brief": "gpt-96l-4096h"}}


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


def _check_name(kind: str, name: Any) -> None:
    """A name or a path is text: else one line, not an AttributeError (review 37: `model(None)`)."""
    if not isinstance(name, str):
        raise SpecError(f"{kind[:-1]}: {name!r} is not allowed; give a preset's name or a file (`presets {kind}`)")


def _lookup(kind: str, name: str) -> tuple[str, dict[str, Any]]:
    """(canonical name, fields) for a preset name or a YAML file path."""
    _check_name(kind, name)
    if _looks_like_path(name):
        return _file_entry(kind, name, read_file(name))
    table = raw(kind)
    key = name.strip().lower()
    key = ALIASES.get(kind, {}).get(key, key)
    if key in table:
        return key, table[key]
    if name.strip() and files.is_dir(name):  # '/tmp' was told "unknown model '/tmp'; closest: mpt-7b"
        files_ = {"models": ", a YAML file or a config.json", "links": ""}.get(kind, " or a YAML file")
        raise SpecError(f"{name}: a directory" + (f"; give a {kind[:-1]} preset's name{files_}" if files_ else ""))
    import difflib

    close = difflib.get_close_matches(key, table, n=3, cutoff=0.4)
    hint = f"; closest: {', '.join(close)}" if close else ""
    shown = name if len(name) <= 60 else f"{name[:57]}..."
    raise SpecError(f"unknown {kind[:-1]} {shown!r}{hint} (see `shardwise presets {kind}`)")


def read_file(name: str) -> Any:
    """What a preset file states: a .json read as JSON (strictly, as a config.json: PyYAML would
    read `1e4` as text), anything else as YAML."""
    if name.lower().endswith(".json"):
        from shardwise import hf_config

        return hf_config.load(name, "JSON spec")
    return loaders.load_yaml(name)


def _file_entry(kind: str, name: str, data: Any) -> tuple[str, dict[str, Any]]:
    """(its name, its fields) of the one `kind` the file `name` states in `data` (its value)."""
    if not isinstance(data, dict):
        json = name.lower().endswith(".json")
        form = "a JSON object of fields" if json else "a YAML mapping of fields (key: value lines)"
        raise SpecError(f"{name}: expected {form} for one {kind[:-1]}")
    from shardwise.presets.like_files import with_like as over_like

    if len(data) == 1 and isinstance(next(iter(data.values())), dict):
        key, fields = next(iter(data.items()))
        return _own_name(kind, name, str(key)), over_like(kind, name, fields, raw(kind), ALIASES.get(kind, {}))
    named = data.get("name")  # the file's own name for it (name: 4090 too), else the file's
    named = str(named).strip() if isinstance(named, (str, int, float)) and not isinstance(named, bool) else ""
    from shardwise.presets.file_fields import checked_file_fields

    data = checked_file_fields(kind, data, name)  # nested files near it; quantities with units
    own = _own_name(kind, name, named or Path(name).stem, from_file_name=not named)
    return own, over_like(kind, name, data, raw(kind), ALIASES.get(kind, {}))


def _own_name(kind: str, path: str, named: str, from_file_name: bool = False) -> str:
    """A file's name for what it describes, refused where it is a built-in's (a GPU's fitted interval
    and a stack's kernels are keyed by name: it would be priced partly as that one); `from_file_name`:
    the file states no `name:` and is named after itself (fsdp.yaml: 'fsdp'), which the error says."""
    key, what = named.strip().lower(), kind[:-1]
    if ALIASES.get(kind, {}).get(key, key) in raw(kind) and from_file_name:
        raise SpecError(
            f"{path}: states no name, so it takes its file's, {named!r}, the built-in {what}'s; "
            f"give it one of its own in the file (name: my-{named}) or use the built-in by name"
        )
    if ALIASES.get(kind, {}).get(key, key) in raw(kind):
        msg = f"name: {named!r} is the built-in {what}'s; give your file's {what} a name of its own"
        raise SpecError(f"{path}: {msg} (or use the built-in by name)")
    return named


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
    """A GPU preset or file; a file's `like:` built-in names the fit it carries (`like_files.gpu_fit`)."""
    key, data = _lookup("gpus", name)
    like = data.get("like", "")
    built = _in_file(name, loaders.gpu_from_dict, key, {k: v for k, v in data.items() if k != "like"})
    if not like:
        return built
    from shardwise.presets.like_files import gpu_fit

    return gpu_fit(built, gpu(like))


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
    typo = units.rate_typo(spec)
    if typo is not None:
        raise SpecError(typo)
    found = link(spec)
    return found if latency_s is None else found.with_(latency_s=latency_s)


def model_path(name: str) -> str:
    """`name`, or for a directory holding a config.json (a Hugging Face snapshot) that file's path."""
    if isinstance(name, str) and name.strip() and files.is_dir(name) and files.is_file(Path(name) / "config.json"):
        return str(Path(name) / "config.json")
    return name


def model(name: str, **overrides: Any) -> Model:
    """A model preset; `overrides` replace fields before defaults are derived (so a new
    `hidden` also moves the default `ffn_hidden` = 4 * hidden): single values; an array goes
    on the model built, `model(name).with_(layers=np.array([...]))`."""
    for field, value in overrides.items():
        if hasattr(value, "shape") and getattr(value, "ndim", 0) > 0:
            raise SpecError(
                f"model {name!r}: {field}: an array is not an override (overrides derive the defaults, "
                f"ffn_hidden from hidden, ...); give it to the model built: presets.model({name!r}).with_({field}=...)"
            )
    _check_name("models", name)
    name = model_path(name)
    if name.lower().endswith(".json"):  # a Hugging Face config.json, or shardwise's own fields
        from shardwise import hf_config

        path = Path(name)
        cfg = hf_config.load(path)
        if hf_config.states_own_fields(cfg):  # read as a model YAML file is
            key, data = _file_entry("models", name, cfg)
            return _in_file(name, loaders.model_from_dict, key, {**data, **overrides})
        # a snapshot's config.json takes its folder's name, ./config.json too (review 45 #10: "config")
        folder = path.resolve().parent.name
        key = folder if path.stem == "config" and folder else path.stem
        fields = hf_config.read(path, cfg)
        hf_config.note_seq_len(fields, seq_len_given="seq_len" in overrides)
        return loaders.model_from_dict(key or "model", {**fields, **overrides})
    key, data = _lookup("models", name)
    return _in_file(name, loaders.model_from_dict, key, {**data, **overrides})


SYSTEM_FIELDS = (
    "gpu",
    "gpus_per_node",
    "intra_node_link",
    "inter_node_link",
    "nics_per_node",
    "p2p",
    "nvls",
    "pcie",
    "host_cpu",
)


def system(name: str, nodes: int = 1) -> Cluster:
    """A cluster of `nodes` servers of a named system (dgx-a100, ...)."""
    key, data = _lookup("systems", name)
    return _in_file(name, _system_from_dict, key, data, nodes)


def _system_from_dict(key: str, data: dict[str, Any], nodes: int) -> Cluster:
    for field in data:
        if field not in (*SYSTEM_FIELDS, "source", "host_cpu_source", "kind", "notes", "name"):
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
    # a preset, a file, the fields inline or a rate, as --intra-link takes them (review 37)
    intra = _field_part(key, "intra_node_link", data, loaders.link_from_dict, lambda v: link_or_rate(v, "intra"))
    inter = None
    if data.get("inter_node_link") is not None:  # false, 0 or "" is a mistake, not "no network"
        nic = _field_part(key, "inter_node_link", data, loaders.link_from_dict, lambda v: link_or_rate(v, "inter"))
        nics = loaders.check_nics_per_node(data.get("nics_per_node", per_node), f"system {key!r}: nics_per_node")
        inter = loaders.per_gpu_nic(nic, nics, per_node)
    cluster = loaders.cluster_from_parts(key, g, per_node, nodes, intra, inter, str(data.get("source", "")))
    flags = {flag: data.get(flag, True) for flag in ("p2p", "nvls")}
    for flag, value in flags.items():
        if not isinstance(value, bool):
            raise SpecError(f"system {key!r}: {flag}: {value!r} is not allowed; give true or false")
    if data.get("pcie") is not None:
        block = data["pcie"]
        if isinstance(block, dict) and "cpu" not in block and data.get("host_cpu"):
            block = {**block, "cpu": data["host_cpu"]}  # the maker stated once, for NCCL's PCIe rules too
        cluster = cluster.with_(pcie=pcie_from_dict(key, block))
    host = host_cpu_of(key, data, cluster.pcie.cpu if cluster.pcie is not None else "")
    if host != cluster.host_cpu:
        cluster = cluster.with_(host_cpu=host)
    return cluster.with_(**flags) if not all(flags.values()) else cluster


def system_network(name: str) -> tuple[Link | None, float]:
    """(one NIC of the system, NICs per server): what `system` shares out per GPU."""
    _, data = _lookup("systems", name)
    if data.get("inter_node_link") is None:
        return None, 0.0
    nic = _part("links", data["inter_node_link"], loaders.link_from_dict, lambda v: link_or_rate(v, "inter"))
    nics = data.get("nics_per_node", data.get("gpus_per_node", 1))
    return nic, loaders.check_nics_per_node(nics, f"system {name!r}: nics_per_node")


def framework(name: str) -> dict[str, Any]:
    """The execution flags of a framework preset or file, as `Plan` keyword arguments (with `framework`
    set to its name); `zero_stage` is the framework's default optimizer sharding."""
    return _in_file(name, _framework_from_dict, *_framework_entry(name))


def _framework_entry(name: str) -> tuple[str, dict[str, Any]]:
    """(name, fields) of a framework preset, or of a file over the built-in its `like:` names."""
    key, data = _lookup("frameworks", name)
    return key, _in_file(name, with_like, key, data, raw("frameworks")) if _looks_like_path(name) else data


def _checked_framework(name: str) -> dict[str, Any]:
    """A framework preset's fields, the whole preset checked (looked up, or its file read, once)."""
    key, data = _framework_entry(name)
    _in_file(name, _framework_from_dict, key, data)
    return data


def framework_accumulate_bytes(name: str, precision: str) -> float | None:
    """Bytes per weight per micro-batch that the framework's unfused gradient accumulation moves
    when training in `precision` (`physics.microbatch`): its `unfused_accumulate_bytes_fp16` in
    fp16 where it states one, else its `unfused_accumulate_bytes`; None where it states neither."""
    data = _checked_framework(name)
    if precision == "fp16" and "unfused_accumulate_bytes_fp16" in data:
        return float(data["unfused_accumulate_bytes_fp16"])
    value = data.get("unfused_accumulate_bytes")
    return None if value is None else float(value)


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
