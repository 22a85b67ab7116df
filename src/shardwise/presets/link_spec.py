"""A link to compare, as the link flags give it (`--intra-link`, `--plot-link`, an experiment's links)."""

from __future__ import annotations

from shardwise import units
from shardwise.errors import SpecError
from shardwise.specs.experiment import LinkSpec


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
        from shardwise.presets import link_or_rate

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
