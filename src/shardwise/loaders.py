"""Build specs from plain mappings (preset YAML, user YAML, CLI flags): the only place where
quantities with units ("600GB/s", "312 TFLOPS", "80GB", "2us") are parsed.

Every error names the field, the value and what is allowed, and raises `SpecError`. YAML files
are read by `yaml_files`, `--plan` text by `plan_text`; both are re-exported here.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from shardwise import units
from shardwise.plan_text import parse_plan_spec  # noqa: F401 (re-exported: the commands read it here)
from shardwise.si_keys import si_named as _si_named
from shardwise.specs import Cluster, GemmTable, Gpu, Link, Model, SpecError
from shardwise.specs._checks import _short
from shardwise.yaml_files import (  # noqa: F401 (re-exported: the presets and the commands read them here)
    load_yaml,
    parse_trusted_yaml,
    parse_yaml,
)

# Architectural defaults of model families (see presets/models.yaml).
FAMILIES: dict[str, dict[str, bool]] = {
    "gpt": {
        "gated_mlp": False,
        "tied_embeddings": True,
        "learned_positions": True,
        "bias": True,
        "rmsnorm": False,
        "dropout": True,
    },
    "llama": {
        "gated_mlp": True,
        "tied_embeddings": False,
        "learned_positions": False,
        "bias": False,
        "rmsnorm": True,
        "dropout": False,
    },
}

MAX_WHOLE = 2**53  # whole numbers beyond this are not exact as floats


def real(value: Any) -> float:
    """A finite real number (a YAML float or int, or its text); true/false, .inf and .nan are refused."""
    if isinstance(value, bool) or value is None:
        raise ValueError(f"{value!r} is not a number")
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{value!r} is not a number") from None
    if not math.isfinite(x):
        raise ValueError(f"{value!r} is not a finite number")
    return x


def whole(value: Any) -> int:
    """A whole number (4 or 4.0); true/false, fractions and numbers beyond 2**53 are refused."""
    x = real(value)
    if x != int(x) or abs(x) > MAX_WHOLE:
        raise ValueError(f"{value!r} is not a whole number")
    return int(x)


def yes_no(value: Any) -> bool:
    """A YAML boolean (true/false); anything else is refused."""
    if isinstance(value, bool):
        return value
    raise ValueError(f"{value!r} is not true or false")


_GPU_FIELDS = {
    "peak_16bit": ("peak_flops_per_s_16bit", units.parse_flops_per_s),
    "peak_fp8": ("peak_flops_per_s_fp8", units.parse_flops_per_s),
    "peak_fp4": ("peak_flops_per_s_fp4", units.parse_flops_per_s),
    "peak_int8": ("peak_ops_per_s_int8", units.parse_flops_per_s),
    "int8_mma": ("int8_mma", yes_no),
    "memory": ("memory_bytes", units.parse_bytes),
    "memory_bandwidth": ("memory_bandwidth_bytes_per_s", units.parse_rate_bytes_per_s),
    "matmul_efficiency": ("matmul_efficiency", real),
    "memory_efficiency": ("memory_efficiency", real),
    "kernel_launch": ("kernel_launch_s", units.parse_seconds),
    "matmul_efficiency_fp8": ("matmul_efficiency_fp8", real),
    "sm_count": ("sm_count", whole),
    "mxfp8": ("mxfp8", yes_no),
    "bf16": ("bf16", yes_no),
    "flash_attention": ("flash_attention", yes_no),
    "fp8_any_layout": ("fp8_any_layout", yes_no),
    "flash2_efficiency": ("flash2_efficiency", real),
    "flash2_backward_efficiency": ("flash2_backward_efficiency", real),
    "sdpa_flash_backend": ("sdpa_flash_backend", str),
    "tdp": ("tdp_w", units.parse_watts),
    "collective_sms": ("collective_sms", whole),
    "host_link": ("host_link_bytes_per_s", units.parse_rate_bytes_per_s),
    "host_adam": ("host_adam_params_per_s", real),  # parameters per second
    "gemm_kernels": ("gemm_kernels", str),
    "vendor": ("vendor", str),
    "l2": ("l2_bytes", units.parse_bytes),
    "l2_bandwidth": ("l2_bandwidth_bytes_per_s", units.parse_rate_bytes_per_s),
    "gemm_table": ("gemm_table", list),  # named here as allowed; built by gemm_table_from_list
}
_LINK_FIELDS = {
    "bandwidth": ("bandwidth_bytes_per_s", units.parse_rate_bytes_per_s),
    "efficiency": ("efficiency", real),
    "latency": ("latency_s", units.parse_seconds),
    "base_latency": ("base_latency_s", units.parse_seconds),
    "nvls_efficiency": ("nvls_efficiency", real),
    "ll_bandwidth": ("ll_bandwidth_bytes_per_s", units.parse_rate_bytes_per_s),
    "mesh_links": ("mesh_links", real),
}
_MODEL_INTS = (
    "layers",
    "hidden",
    "heads",
    "kv_heads",
    "ffn_hidden",
    "vocab",
    "seq_len",
    "head_dim",
    "experts",
    "experts_per_token",
    "expert_ffn_hidden",
    "shared_experts",
    "dense_layers",
    "moe_every",
    "kv_lora_rank",
    "q_lora_rank",
    "rope_head_dim",
    "v_head_dim",
    "mamba_heads",
    "mamba_head_dim",
    "mamba_state",
    "mamba_groups",
    "mamba_conv",
    "mamba_chunk",
    "sliding_window",
    "full_attention_every",
    "max_position_embeddings",
)
_MODEL_FLAGS = ("gated_mlp", "tied_embeddings", "learned_positions", "bias", "rmsnorm", "dropout", "glu_clamp")
_MODEL_FLAGS += ("yarn_rope", "head_dim_in_config")
_IGNORED = {"source", "kind", "notes", "name"}


def _convert(
    kind: str, name: str, data: Mapping[str, Any], fields: Mapping[str, tuple[str, Callable[[Any], Any]]]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key in _IGNORED:
            continue
        if key not in fields:
            raise SpecError(f"{kind} {name!r}: {unknown_field(key, fields)}")
        target, parse = fields[key]
        try:
            out[target] = parse(value)
        except (TypeError, ValueError, OverflowError) as exc:
            raise SpecError(f"{kind} {name!r}: {key}: {exc}") from None
    return out


# an example of each parser's unit, for a number written without one
_UNIT_EXAMPLES = {
    units.parse_flops_per_s: "989 TFLOPS",
    units.parse_bytes: "80GB",
    units.parse_rate_bytes_per_s: "600GB/s",
    units.parse_seconds: "5us",
    units.parse_watts: "700W",
}


def _spec(kind: str, name: str, data: Mapping[str, Any], fields: Mapping[str, Any], cls: Any) -> Any:
    """`cls` (Gpu, Link) from a file's fields; a value the spec refuses is named by the key the
    user wrote, not the SI field it became, and a number written without its unit is said to lack
    one (review 37: `peak_16bit: 989` read 'peak_flops_per_s_16bit: 989.0 is not allowed')."""
    try:
        return cls(name=name, **_convert(kind, name, data, fields))
    except SpecError as exc:
        text = str(exc).removeprefix(f"{kind} {name!r}: ")
        for key, (target, parse) in fields.items():
            if key in data and text.startswith(f"{target}: "):
                example = _UNIT_EXAMPLES.get(parse)
                if example is not None and units.is_bare_number(str(data[key]).strip()):
                    raise SpecError(
                        f"{kind} {name!r}: {key}: {data[key]!r} has no unit; write it with one, e.g. {key}: {example}"
                    ) from None
                # "5e+20 is not allowed; it must be between ... FLOP/s": the range in SI units, the value as read
                read, _, rest = text[len(target) + 2 :].partition(" is not allowed")
                given = f"{kind} {name!r}: {key}: {data[key]!r}"
                read_as = f" (read as {read})" if example is not None else ""  # a quantity converted to SI
                raise SpecError(f"{given} is not allowed{rest}{read_as}") from None
        raise


def unknown_field(key: object, allowed: Iterable[str], listed: bool = True) -> str:
    """'unknown field 'inter_node_lnk' (did you mean inter_node_link?); allowed: ...' (without the
    list of what is allowed when not `listed`)."""
    import difflib

    names = sorted(allowed)
    close = difflib.get_close_matches(str(key), names, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"unknown field {key!r}{hint}" + (f"; allowed: {', '.join(names)}" if listed else "")


def _require(kind: str, name: str, data: Mapping[str, Any], keys: tuple[str, ...], known: Iterable[str] = ()) -> None:
    """Every required key present; a missing one that a key given misspells is named with it
    (review 37: `memory_bandwith` was reported as "missing field(s) memory_bandwidth" alone);
    `known`: the fields of the kind, never taken for a misspelling."""
    import difflib

    missing = [k for k in keys if k not in data]
    if missing and len(data) > 1 and all(isinstance(v, Mapping) for v in data.values()):  # two entries in one file
        names = ", ".join(str(k) for k in data)
        raise SpecError(f"{kind} {name!r}: the file holds {len(data)} mappings ({names}); give one {kind} per file")
    if missing:
        given = [str(k) for k in data if str(k) not in set(known)]
        meant: dict[str, list[str]] = {}  # a key given -> the missing ones it may misspell, one line each
        for key in missing:
            close = difflib.get_close_matches(key, given, n=1, cutoff=0.6) or [g for g in given if g.startswith(key)]
            if close:
                meant.setdefault(close[0], []).append(key)
        typos = [f"{g!r} given: did you mean {' or '.join(keys)}?" for g, keys in meant.items()]
        hint = f" ({'; '.join(typos)})" if typos else ""
        raise SpecError(f"{kind} {name!r}: missing field(s) {', '.join(missing)}{hint}")


def gpu_from_dict(name: str, data: Mapping[str, Any]) -> Gpu:
    data = _si_named("gpu", name, data, _GPU_FIELDS)
    _require("gpu", name, data, ("peak_16bit", "memory", "memory_bandwidth"), _GPU_FIELDS)
    fields = {k: v for k, v in data.items() if k != "gemm_table"}  # built below, from the GPU's rates
    gpu = _spec("gpu", name, fields, _GPU_FIELDS, Gpu)
    if "gemm_table" not in data:
        return gpu
    return gpu.with_(gemm_table=gemm_table_from_list(name, data["gemm_table"], gpu))


def gemm_table_from_list(name: str, rows: Any, gpu: Gpu) -> GemmTable:
    """`gemm_table:` of a GPU, a list of {m, n, k, rate} (rate with its unit, "0.9 TFLOPS"), as
    rates relative to the GPU's sustained one (peak x matmul_efficiency; `specs.GemmTable`)."""
    where = f"gpu {name!r}: gemm_table"
    if not isinstance(rows, list) or not rows:
        raise SpecError(f"{where}: {_short(rows)} is not allowed; give a list of {{m, n, k, rate}}")
    sustained = float(gpu.peak_flops_per_s_16bit) * float(gpu.matmul_efficiency)
    table: dict[str, list[float]] = {"m": [], "n": [], "k": [], "relative_rate": []}
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping) or set(row) != {"m", "n", "k", "rate"}:
            raise SpecError(f"{where}[{i}]: {_short(row)} is not allowed; give {{m, n, k, rate}}")
        try:
            for key in ("m", "n", "k"):
                table[key].append(float(whole(row[key])))
            rate = units.parse_flops_per_s(row["rate"])
            if not rate <= gpu.peak_flops_per_s_16bit:  # a measured rate above the peak: a wrong unit
                raise ValueError(
                    f"rate {row['rate']} is above the GPU's 16-bit peak, "
                    f"{units.format_flops(gpu.peak_flops_per_s_16bit)}; no GEMM runs faster (check the unit)"
                )
            table["relative_rate"].append(rate / sustained)
        except (TypeError, ValueError, OverflowError) as exc:
            raise SpecError(f"{where}[{i}]: {exc}") from None
    return GemmTable(**{k: tuple(v) for k, v in table.items()})


# what a link's `kind:` may say (informational: the presets table shows it; links.yaml uses each)
LINK_KINDS = ("nvlink", "xgmi", "pcie", "network")


def link_from_dict(name: str, data: Mapping[str, Any]) -> Link:
    data = _si_named("link", name, data, _LINK_FIELDS)
    _require("link", name, data, ("bandwidth",), _LINK_FIELDS)
    if "kind" in data and data["kind"] not in LINK_KINDS:
        raise SpecError(
            f"link {name!r}: kind: {_short(data['kind'])} is not allowed; choose one of {', '.join(LINK_KINDS)}"
        )
    return _spec("link", name, data, _LINK_FIELDS, Link)


def model_from_dict(name: str, data: Mapping[str, Any]) -> Model:
    known = {f.name for f in dataclasses.fields(Model)} | set(_IGNORED)
    _require("model", name, data, ("layers", "hidden", "heads", "vocab", "seq_len"), known)
    family = data.get("family", "gpt")
    if not isinstance(family, str):
        raise SpecError(f"model {name!r}: family {family!r} is not allowed; choose one of {', '.join(FAMILIES)}")
    family = family.lower()
    if family not in FAMILIES:
        raise SpecError(f"model {name!r}: family {family!r} is not allowed; choose one of {', '.join(FAMILIES)}")
    kwargs: dict[str, Any] = dict(FAMILIES[family])
    known = (*_MODEL_INTS, *_MODEL_FLAGS, "family", "hybrid_pattern", "hf_id", "hf_weights", "architecture")
    known = (*known, "rope_theta", "rope_local_theta", "activation")
    unknown = [k for k in data if k not in _IGNORED and k not in known]
    if len(unknown) > 1:  # every misspelt key, in one line (review 44: a second typo went unreported)
        each = "; ".join(unknown_field(k, known, listed=False) for k in unknown)
        raise SpecError(f"model {name!r}: {each}; allowed: {', '.join(sorted(known))}")
    for key, value in data.items():
        if key in _IGNORED or key == "family":
            continue
        if key == "hf_id":  # what a serving engine loads (`presets.model_hf_id`); not a Model field
            if not isinstance(value, str) or value.count("/") != 1:
                raise SpecError(f"model {name!r}: hf_id: {value!r} must be a Hugging Face id, ORG/NAME")
            continue
        if key == "hf_weights":  # what the hf_id's checkpoint stores (`hf_quant.model_checkpoint`); not a Model field
            from shardwise.precisions import STORAGE_PRECISIONS

            if value not in STORAGE_PRECISIONS:
                allowed = ", ".join(STORAGE_PRECISIONS)
                raise SpecError(f"model {name!r}: hf_weights: {value!r} is not allowed; choose one of {allowed}")
            continue
        if key in _MODEL_INTS:
            try:
                kwargs[key] = whole(value)
            except ValueError:
                raise SpecError(f"model {name!r}: {key}: {value!r} is not a whole number") from None
        elif key == "hybrid_pattern":
            if not isinstance(value, str):
                raise SpecError(f"model {name!r}: hybrid_pattern: {value!r} must be a string of M, *, - and E")
            kwargs[key] = value
        elif key == "architecture":  # Hugging Face's model_type (`specs.Model.architecture`); null: unknown
            if value is not None and not isinstance(value, str):
                raise SpecError(
                    f"model {name!r}: architecture: {value!r} must be the model_type of its Hugging Face "
                    "config.json, as text (e.g. mixtral)"
                )
            kwargs[key] = value
        elif key in ("rope_theta", "rope_local_theta"):  # rotary bases (`specs.Model.rope_theta`)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise SpecError(f"model {name!r}: {key}: {value!r} must be a number (the rotary base)")
            kwargs[key] = float(value)
        elif key == "activation":  # the MLP's (`specs.Model.activation`); Model names what is allowed
            if not isinstance(value, str):
                raise SpecError(f"model {name!r}: activation: {value!r} must be text (e.g. silu, gelu_tanh)")
            kwargs[key] = value
        elif key in _MODEL_FLAGS:
            if not isinstance(value, bool):
                raise SpecError(f"model {name!r}: {key}: {value!r} must be true or false")
            kwargs[key] = value
        else:
            raise SpecError(f"model {name!r}: {unknown_field(key, known)}")
    return Model(name=name, notes=str(data.get("source", "")), **kwargs)


from shardwise.link_rates import RATE_LINK_BASE_LATENCY_S, RATE_LINK_LATENCY_S, link_from_rate  # noqa: E402, F401

MAX_NICS_PER_NODE = 1024  # network cards in one server: far beyond any built (8-16 today)


def check_nics_per_node(value: Any, field: str = "nics_per_node") -> float:
    """A server's NIC count: a finite number in (0, MAX_NICS_PER_NODE] (fractions model a shared
    NIC); `field` names the flag or field in the error."""
    try:
        x = real(value)
    except ValueError:
        x = float("nan")
    if not 0 < x <= MAX_NICS_PER_NODE:
        shown = f"{value:g}" if isinstance(value, float) else repr(value)
        raise SpecError(f"{field}: {shown} is not allowed; it must be > 0 and at most {MAX_NICS_PER_NODE}")
    return x


def per_gpu_nic(nic: Link, nics_per_node: float, gpus_per_node: int) -> Link:
    """A GPU's share of its server's NICs (the inter-node link per GPU)."""
    nics_per_node = check_nics_per_node(nics_per_node)
    if (share := min(1.0, nics_per_node / gpus_per_node)) == 1.0:
        return nic
    return nic.with_(
        name=f"{nic.name} x{nics_per_node:g}/{gpus_per_node}", bandwidth_bytes_per_s=nic.bandwidth_bytes_per_s * share
    )


def cluster_from_parts(
    name: str, gpu: Gpu, gpus_per_node: int, nodes: int, intra: Link, inter: Link | None, notes: str = ""
) -> Cluster:
    return Cluster(
        name=name,
        gpu=gpu,
        gpus_per_node=gpus_per_node,
        nodes=nodes,
        intra_node_link=intra,
        inter_node_link=inter,
        notes=notes,
    )
