"""`shardwise presets`: what is built in, compact; `presets show NAME`: one preset in full."""

from __future__ import annotations

from typing import Any

import click

from shardwise.si_keys import SI_NAMES

KIND_CHOICES = ["gpus", "links", "systems", "models", "frameworks", "engines"]
# the kinds read from YAML presets (engines are built into the serving model: `engines.engine_describe`)
YAML_KINDS = KIND_CHOICES[:-1]
# the few numbers that identify each preset in the compact list (the rest: `presets show NAME`)
COLUMNS = {
    "gpus": ("peak_16bit", "memory", "memory_bandwidth", "sm_count"),
    "links": ("bandwidth", "efficiency", "latency"),
    "systems": ("gpu", "gpus_per_node", "intra_node_link", "inter_node_link", "nics_per_node"),
    "models": ("layers", "hidden", "heads", "kv_heads", "seq_len"),
    "frameworks": ("zero_stage", "tp_comm_overlap", "overlap_param_gather", "grad_accumulation_fusion"),
    "engines": ("version", "runtime", "h100_budget", "h100_sequences"),
}

HEADERS = {
    "gpus_per_node": "GPUs",
    "intra_node_link": "inside",
    "inter_node_link": "across",
    "nics_per_node": "NICs",
    "memory_bandwidth": "HBM",
    "peak_16bit": "16-bit peak",
    "tp_comm_overlap": "TP overlap",
    "overlap_param_gather": "param gather overlap",
    "grad_accumulation_fusion": "fused grad acc.",
    "h100_budget": "tokens/step (H100)",
    "h100_sequences": "max sequences (H100)",
}


@click.command()
@click.argument("kind", metavar="[KIND | show NAME|FILE]", required=False)
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the presets (or the one shown) as JSON.")
def presets(kind: str | None, name: str | None, as_json: bool) -> None:
    """List the built-in presets compactly (all kinds, or one KIND: gpus, links, systems, models,
    frameworks, engines); `presets show NAME` prints one preset in full with its sources.

    Any NAME flag also accepts a YAML file with the same fields, and --model a Hugging Face
    config.json; `presets show FILE` prints what shardwise reads from such a file.
    """
    from shardwise import presets as registry
    from shardwise.errors import SpecError

    kind = kind.lower() if kind is not None else None
    if kind == "show":
        if not name:
            raise SpecError("presets show: give a preset NAME or a file (e.g. presets show dgx-h100)")
        from pathlib import Path

        if Path(name).is_dir() and registry.model_path(name) != name:  # a snapshot: its config.json, as --model
            name = registry.model_path(name)
        elif Path(name).is_dir():  # was "no preset named" (review 37)
            raise SpecError(
                f"presets show {name}: a folder without a config.json; give one of its files (a YAML file or a "
                "config.json)"
            )
        if _is_file_name(name):
            _show_file(registry, name, as_json)
        else:
            _show(registry, name, as_json)
        return
    if name is not None:
        raise SpecError(f"presets: unexpected {name!r}; use `presets KIND` or `presets show NAME|FILE`")
    if kind is not None and kind not in KIND_CHOICES:
        import difflib

        close = difflib.get_close_matches(kind, [*KIND_CHOICES, "show"], n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        raise SpecError(
            f"presets: {kind!r} is not allowed; {hint}choose one of {', '.join(KIND_CHOICES)}, or show NAME"
        )
    kinds = [kind] if kind else KIND_CHOICES
    if as_json:
        from shardwise import export

        click.echo(export.dumps({k: [si_fields(row) for row in _describe(registry, k)] for k in kinds}))
        return
    from rich import box
    from rich.table import Table

    from shardwise.cli.render import console

    out = console()
    for k in kinds:
        table = Table(title=k, title_justify="left", header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False)
        table.add_column("name", no_wrap=True)
        for col in COLUMNS[k]:
            table.add_column(HEADERS.get(col, col.replace("_", " ")), justify="right", overflow="fold")
        for row in _describe(registry, k):
            table.add_row(row["name"], *(_cell(row, c) for c in COLUMNS[k]))
        out.print(table)
    out.print("[dim]`shardwise presets show NAME` for every field and its source[/]")


def _describe(registry: Any, kind: str) -> list[dict[str, Any]]:
    """The rows of one kind: the YAML presets' fields, or the serving engines' (with their default
    token budget and sequence cap on an H100 for the compact list)."""
    if kind != "engines":
        return registry.describe(kind)
    from shardwise.engines.engine_describe import describe_engines
    from shardwise.engines.engine_presets import ENGINES

    rows = describe_engines()
    for row in rows:
        on_h100, e = row["defaults_by_gpu"]["h100-sxm5-80gb"], ENGINES[row["name"]]
        row["h100_budget"] = on_h100["token_budget"]
        # SGLang's and TensorRT-LLM's caps follow the KV cache or the workload, not the GPU alone
        by = "by the KV cache" if e.seqs_from_kv_pool else "by the workload" if e.slots_per_micro_batch else "-"
        row["h100_sequences"] = on_h100["max_sequences"] if on_h100["max_sequences"] is not None else by
    return rows


def _engine_fields(name: str, as_json: bool) -> dict[str, Any] | None:
    """`presets show ENGINE`'s fields (numbers for --json, words and units for reading), None for a
    name that is no engine."""
    from shardwise import units
    from shardwise.engines.engine_describe import describe_engines

    row = next((r for r in describe_engines() if r["name"] == name), None)
    if row is None:
        return None
    fields = {k: v for k, v in row.items() if k != "name"}
    if as_json:
        return fields
    by_gpu = fields.pop("defaults_by_gpu")
    fields["defaults_by_gpu"] = {
        gpu: f"{d['token_budget']:,} tokens a step"
        + (f", {d['max_sequences']:,} sequences" if d["max_sequences"] is not None else "")
        for gpu, d in by_gpu.items()
    }
    fields["weight_formats"] = ", ".join(fields["weight_formats"])
    for key in [k for k in fields if k.endswith("_s")]:
        fields[key] = units.format_seconds(fields[key]) if fields[key] else "0"
    return fields


# the compact tables' sizes and rates, parsed from the YAML's text and printed as every other command
# prints them (a space before the unit): the GPU's memory in GiB as `predict` and `serve` print its
# capacity, bandwidths in decimal B/s, peaks in TFLOP/s, latencies in s/ms/µs (`shardwise.units`)
CELL_UNITS = {
    "peak_16bit": ("parse_flops_per_s", "format_flops"),
    "memory": ("parse_bytes", "format_gib"),
    "memory_bandwidth": ("parse_rate_bytes_per_s", "format_rate"),
    "bandwidth": ("parse_rate_bytes_per_s", "format_rate"),
    "latency": ("parse_seconds", "format_seconds"),
}


def si_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """A preset's fields for --json (review 40 #10: '989.4 TFLOPS', '79.11GiB' a script had to parse;
    the text table keeps the display strings, `CELL_UNITS`): each quantity of `si_keys.SI_NAMES`,
    which preset files read back, parsed to SI under its unit-named
    key (bytes whole, as `units.whole_bytes`), nested objects (a system's `pcie`) too; the rest as is."""
    from shardwise import units

    out: dict[str, Any] = {}
    for key, value in fields.items():
        if isinstance(value, dict):
            out[key] = si_fields(value)
        elif key in SI_NAMES and isinstance(value, str | int | float) and not isinstance(value, bool):
            name, parse = SI_NAMES[key]
            out[name] = _si_number(name, getattr(units, parse)(value))
        else:
            out[key] = value
    return out


def _si_number(name: str, number: float) -> float | int:
    """A parsed quantity without the float residue of its unit's scaling (review 42: '2.039TB/s' was
    2039000000000.0002): 12 significant digits, more than any preset states; whole where it is whole
    (bytes always, as `units.whole_bytes`), seconds kept a float."""
    from shardwise import units

    if name.endswith("_bytes"):
        return units.whole_bytes(number)
    rounded = float(f"{number:.12g}")
    seconds = name.endswith("_s") and not name.endswith("_per_s")
    return int(rounded) if rounded.is_integer() and not seconds else rounded


def _cell(row: dict[str, Any], column: str) -> str:
    value = row.get(column)
    if column in CELL_UNITS and isinstance(value, (str, int, float)) and not isinstance(value, bool):
        from shardwise import units

        parse, fmt = CELL_UNITS[column]
        return str(getattr(units, fmt)(getattr(units, parse)(value)))
    if value is None:
        # a field left to its default: KV heads = heads (multi-head attention), no network, ...
        return str(row.get("heads", "-")) if column == "kv_heads" else "-"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, dict):
        return value.get("name", "inline")
    return str(value)


# the field that tells a YAML file's kind (the first kind with one of its fields wins)
KIND_FIELDS = {
    "models": ("layers", "hidden", "heads"),
    "systems": ("gpus_per_node", "intra_node_link", "inter_node_link"),
    "gpus": ("peak_16bit", "memory", "memory_bandwidth", "sm_count"),
    "links": ("bandwidth",),
    "frameworks": ("zero_stage", "tp_comm_overlap", "overlap_grad_reduce", "attention_kernel", "like"),
}
BUILDERS = {"models": "model", "systems": "system", "gpus": "gpu", "links": "link", "frameworks": "framework"}


def _is_file_name(name: str) -> bool:
    from shardwise import files

    return name.lower().endswith((".json", ".yaml", ".yml")) or files.is_file(name)


def _show_file(registry: Any, path: str, as_json: bool) -> None:
    """What shardwise reads from a file a NAME flag accepts: a Hugging Face config.json (a model)
    or a YAML file of one GPU, link, system, model or framework (its kind told by its fields),
    checked as the flag would check it."""
    from pathlib import Path

    from shardwise import hf_config, loaders
    from shardwise.errors import SpecError

    # a .json that states none of a config's keys is read as a YAML file is (a model's or a GPU's fields)
    config = path.lower().endswith(".json") and hf_config.states_config(hf_config.load(path))
    if config:
        kind, fields = "models", hf_config.read(path)
    else:
        data = registry.read_file(path)
        if isinstance(data, dict) and len(data) == 1 and isinstance(next(iter(data.values())), dict):
            data = next(iter(data.values()))  # `name: {fields}`
        if not isinstance(data, dict):
            raise SpecError(f"{path}: expected a mapping of fields (a GPU, link, system, model or framework)")
        kind = next((k for k, keys in KIND_FIELDS.items() if any(f in data for f in keys)), None)
        if kind is None:
            every = ", ".join(f for keys in KIND_FIELDS.values() for f in keys)
            raise SpecError(f"{path}: no field tells what it describes (expected one of {every})")
        fields = dict(data)
    if kind == "models":  # built, and so checked, as --model would
        counts = {kind: _param_counts(registry, path)}
    else:  # checked as --gpu / --system / --intra-link / --framework would check it
        counts = {}
        getattr(registry, BUILDERS[kind])(path)
    inherited: tuple[str, ...] = ()
    if kind == "frameworks" and "like" in fields:  # the fields it takes from the built-in it names
        from shardwise.presets.framework_fields import inherited_fields, with_like

        inherited = inherited_fields(fields, registry.raw("frameworks"))
        fields = with_like(path, fields, registry.raw("frameworks"))
    label = None
    if kind == "models" and not config and "family" not in fields:
        # what --model fills in silently (`loaders.model_from_dict`): the gpt family's flags it leaves out
        given = set(fields)
        fields = {**fields, **{k: v for k, v in {"family": "gpt", **loaders.FAMILIES["gpt"]}.items() if k not in given}}
        inherited, label = tuple(k for k in fields if k not in given), "the default: no family given"
    fields.pop("notes", None)
    key = Path(path).name
    _print_fields([(kind, fields)], key, counts, as_json, inherited, label)


def _param_counts(registry: Any, name: str) -> dict[str, int]:
    """All parameters, and those one token uses (a mixture of experts: its routed experts only): counts,
    whole numbers (the JSON writes them as integers)."""
    from shardwise.physics.params import activated_params, total_params

    model = registry.model(name)
    return {"params": round(float(total_params(model))), "activated_params": round(float(activated_params(model)))}


def _show(registry: Any, name: str, as_json: bool) -> None:
    """Every field of the preset called NAME (whatever its kind), its source last."""
    import difflib

    from shardwise.errors import SpecError

    key = name.strip().lower()
    key = next((a[key] for a in registry.ALIASES.values() if key in a), key)
    found = [(k, registry.raw(k)[key]) for k in YAML_KINDS if key in registry.raw(k)]
    engine = _engine_fields(key, as_json)
    if engine is not None:
        found.append(("engines", engine))
    if not found:
        from shardwise.engines.engine_presets import ENGINES

        every = [n for k in YAML_KINDS for n in registry.names(k)] + list(ENGINES)
        close = difflib.get_close_matches(key, every, n=3, cutoff=0.6)  # none when nothing is close
        hint = f"; closest: {', '.join(close)}" if close else ""
        raise SpecError(f"presets show: no preset named {name!r}{hint} (see `shardwise presets`)")
    counts = {kind: _param_counts(registry, key) for kind, _ in found if kind == "models"}
    _print_fields(found, key, counts, as_json)


def _print_fields(
    found: list[tuple[str, dict[str, Any]]],
    key: str,
    counts: dict[str, dict[str, float]],
    as_json: bool,
    inherited: tuple[str, ...] = (),
    label: str | None = None,
) -> None:
    """Each (kind, fields) in full, the parameter counts of a model, its source last; `inherited`:
    the fields a framework file takes from the built-in its `like:` names, marked with its name (or
    those a model file without a family takes from the gpt family's defaults, marked `label`)."""
    if as_json:
        from shardwise import export

        named = [SI_NAMES.get(f, (f,))[0] for f in inherited]  # under the keys the fields have here
        extra = {("from_family_default" if label else "from_like"): named} if inherited else {}
        click.echo(
            export.dumps(
                {kind: {"name": key, **si_fields(fields), **counts.get(kind, {}), **extra} for kind, fields in found}
            )
        )
        return
    for kind, fields in found:
        click.echo(f"{key} ({kind[:-1]})")
        for field, value in fields.items():
            if isinstance(value, dict) and field != "source":  # an engine's defaults by GPU
                click.echo(f"  {field}:")
                for sub, text in value.items():
                    click.echo(f"    {sub}: {text}")
            elif field != "source":
                owner = label or f"{fields.get('like')}'s"
                click.echo(f"  {field}: {value}" + (f"  ({owner})" if field in inherited else ""))
        if kind in counts:
            c = counts[kind]
            click.echo(
                f"  parameters: {c['params'] / 1e9:,.2f}B"
                + (f", {c['activated_params'] / 1e9:,.2f}B per token" if c["params"] != c["activated_params"] else "")
            )
        if "source" in fields:
            click.echo(f"  source: {' '.join(str(fields['source']).split())}")
