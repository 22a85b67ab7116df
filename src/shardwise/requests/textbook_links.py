"""The links `--cost-model textbook` hands to the brief's formulas, counted as the brief counts each
kind (review 45 #9, review 46 #5).

The brief's "NVLink 600 GB/s" is A100's NVLink 3 counted in both directions: 12 links x 25 GB/s
each way x 2 (NVIDIA A100 datasheet, 2021: "600 GB/s" NVLink; `presets` nvlink3: 300 GB/s per
direction), and its Section 7 formulas divide bytes by that total; its "PCIe ~32 GB/s" is one
direction of PCIe 4.0 x16 (pcie4: 31.5 GB/s per direction). A link named by preset (`--intra-link
X=nvlink3`, a `--system`'s own link) carries its per-direction rate, so it is handed to the formulas
as the brief counts its kind: an NVLink-class link (named other than pcie*) at both directions'
total, 2 x that rate (nvlink3 gives the brief's 600 GB/s, not 300, which doubled the TP time), a PCIe
link at its per-direction rate (pcie4 gives the brief's ~32 GB/s, not 63). A rate given
(`NVLink=600GB/s`, the brief's own `PCIe=32GB/s`) is handed on as written, and the label says which.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

DIRECTIONS = 2  # a full-duplex link: both directions' total = 2 x the per-direction rate


def _is_rate(text: str) -> bool:
    """Whether an --intra-link names a rate (`NVLink=600GB/s`) rather than a preset (`X=nvlink3`)."""
    from shardwise import units
    from shardwise.errors import SpecError

    head = text.replace(" ", "").split(",")[0]
    value = head.partition("=")[2] or head
    try:
        units.parse_rate_bytes_per_s(value)
    except SpecError:
        return False
    return True


def textbook_links(links: tuple[Any, ...], texts: tuple[str, ...] | list[str], brief: bool) -> tuple[Any, ...]:
    """`links` (`LinkSpec`s) as the textbook model prices them: those named by preset as the brief
    counts their kind (NVLink both directions, PCIe one; `basis` says so), rates as given; `texts`:
    the --intra-link flags (empty for a system's link or the brief's); `brief`: the brief's own rates
    (as stated)."""
    given = [_is_rate(t) for t in texts] if texts else [brief] * len(links)
    out = []
    for spec, rate in zip(links, given, strict=True):
        if rate:
            out.append(replace(spec, basis="as stated" if brief else "as given"))
            continue
        per = spec.link.bandwidth_bytes_per_s
        if str(spec.link.name).startswith("pcie"):  # the brief's PCIe figure: one direction
            out.append(replace(spec, basis=f"{spec.link.name}: {per / 1e9:g} GB/s per direction"))
            continue
        link = spec.link.with_(bandwidth_bytes_per_s=DIRECTIONS * per)
        out.append(replace(spec, link=link, basis=f"{spec.link.name}: {DIRECTIONS} x {per / 1e9:g} GB/s per direction"))
    return tuple(out)


def textbook_links_words(links: tuple[Any, ...]) -> str:
    """The label: each link's rate as the formulas take it, and the convention."""
    shown = ", ".join(
        f"{lk.label} {lk.link.bandwidth_bytes_per_s / 1e9:g} GB/s"
        + (f" ({lk.basis})" if lk.basis not in ("", "as stated", "as given") else "")
        for lk in links
    )
    if all(lk.basis == "as stated" for lk in links):
        return (
            f"links as the brief states them: {shown} (its NVLink figure counts both directions, A100's 2 x 300 "
            "GB/s; its PCIe figure one direction of PCIe 4.0 x16)"
        )
    return (
        f"links: {shown} (a named link as the brief counts its kind: NVLink at both directions' total, as its "
        "600 GB/s is A100's 2 x 300 GB/s, PCIe one direction, as its 32 GB/s; a rate as given)"
    )
