"""A `--plan` value (`tp=8`, `tp=2,pp=4`, `tp=all`, with cp, vpp, mb, schedule, recompute, sp, zero,
shard, first, last, ep, etp) parsed into a `PlanSpec`, every problem one line naming the text."""

from __future__ import annotations

import re
from typing import Any

from shardwise.specs import SpecError
from shardwise.specs.experiment import PlanSpec

_SWITCH = {"on": True, "true": True, "yes": True, "1": True, "off": False, "false": False, "no": False, "0": False}


def parse_plan_spec(text: str) -> PlanSpec:
    """`tp=8`, `pp=8`, `tp=2,pp=4`, `tp=all`, with cp, vpp, mb, schedule, recompute, sp, zero, shard,
    first, last, ep, etp (see `PlanSpec`); checked here, one line per problem."""
    fields: dict[str, str] = {}
    for raw in text.split(","):  # 'tp=2 pp=4' was read as tp='2pp=4': "tp=2pp=4 is not allowed"
        pairs = re.findall(r"[^\s=,;]+\s*=\s*[^\s=,;]+", raw)
        if len(pairs) > 1:
            written = ",".join(p.replace(" ", "") for p in pairs)
            raise SpecError(f"--plan {text!r}: separate the KEY=VALUE pairs with commas ({written})")
    parts = [part for part in text.replace(" ", "").split(",") if part]
    if not parts:
        raise SpecError(f"--plan {text!r}: empty; give KEY=VALUE pairs such as tp=8 or tp=2,pp=4")
    for part in parts:
        key, sep, value = part.partition("=")
        if key == "dp":  # a --plan names the split of one replica; the replicas are what the GPUs leave
            raise SpecError(
                f"--plan {text!r}: dp is not a --plan key: data-parallel replicas fill the GPUs the plan leaves "
                "(GPUs / (tp x pp x cp)); set the GPUs with --num-gpus or --nodes (for a mixture of experts, an ep "
                "above tp spreads the experts over the replicas: data-parallel attention, e.g. tp=1,ep=8)"
            )
        if not sep or key not in PlanSpec.KEYS:
            raise SpecError(f"--plan {text!r}: {part!r} is not KEY=VALUE with KEY one of {', '.join(PlanSpec.KEYS)}")
        if key in fields:
            raise SpecError(f"--plan {text!r}: {key} is given twice")
        fields[key] = value

    def whole(key: str, low: int, high: int | None = None) -> int:
        value = fields[key]
        digits = value.isascii() and value.isdigit() and len(value) <= 15
        if not digits or int(value) < low or (high is not None and int(value) > high):
            allowed = f"{low}..{high}" if high is not None else f"a whole number >= {low}"
            raise SpecError(f"--plan {text!r}: {key}={value} is not allowed; use {allowed}")
        return int(value)

    degrees = {}
    for key in ("tp", "pp"):
        fields.setdefault(key, "1")
        degrees[key] = "all" if fields[key] == "all" else whole(key, 1)
    split = [f"{key}=" for key in ("first", "last") if key in fields]
    if split and degrees["pp"] == 1:  # one stage holds every layer: `serve` ignored them, `predict` refuses them
        one = len(split) == 1
        raise SpecError(
            f"--plan {text!r}: {' and '.join(split)} (layers of a pipeline's end stages) need{'s' if one else ''} "
            f"pp > 1; add pp=2 or more, or drop {'it' if one else 'them'}"
        )
    options: dict[str, Any] = {}
    if "vpp" in fields:
        options["vpp"] = whole("vpp", 1)
        options["schedule"] = "interleaved" if options["vpp"] > 1 else "1f1b"
    if "mb" in fields:
        options["micro_batch"] = whole("mb", 1)
    if "zero" in fields:
        options["zero_stage"] = whole("zero", 0, 3)
    if "shard" in fields:  # hybrid sharding: ZeRO over groups of this many dp x cp ranks (Plan.shard_group)
        options["shard_group"] = whole("shard", 0)
    for key, name in (
        ("first", "first_stage_layers"),
        ("last", "last_stage_layers"),
        ("cp", "cp"),
        ("ep", "ep"),
        ("etp", "etp"),
    ):
        if key in fields:
            options[name] = whole(key, 1)
    for key, allowed in (
        ("schedule", ("gpipe", "1f1b", "interleaved", "zb-h1")),
        ("recompute", ("none", "selective", "full")),
    ):
        if key in fields:
            if fields[key] not in allowed:
                raise SpecError(f"--plan {text!r}: {key}={fields[key]} is not allowed; choose {', '.join(allowed)}")
            options[key] = fields[key]
    if "sp" in fields:
        if fields["sp"].lower() not in _SWITCH:
            raise SpecError(f"--plan {text!r}: sp={fields['sp']} is not allowed; use on or off")
        options["sequence_parallel"] = _SWITCH[fields["sp"].lower()]
    return PlanSpec(label=text, tp=degrees["tp"], pp=degrees["pp"], options=tuple(options.items()))
