"""One colour per plan kind in every figure, the command line's (matplotlib) and the explorer's
(Plotly): TP blue, PP red, TP x PP green, DP only purple; a second plan of the same kind takes the
next shade; series that are not plans use OTHER_COLORS. One line style per link. No imports, so
the explorer can use it without matplotlib."""

from __future__ import annotations

import re
from collections.abc import Sequence

PLAN_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
KIND_SHADES = {
    "tp": ("#1f77b4", "#5aa3d9", "#0b3d6b", "#9ccbef"),
    "pp": ("#d62728", "#f0796f", "#8a1010", "#f6b2ab"),
    "hybrid": ("#2ca02c", "#74c476", "#145a14", "#b5e0a8"),
    "dp": ("#7b4fa8", "#b08fd4", "#4a2a6e", "#d9c6ee"),
}
OTHER_COLORS = ("#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22")
# One colour per term of a step's time (`StepBreakdown.as_dict`, serving's decode terms), in the command
# line's stacked bars (`plots.charts.stacked_bars`) and the explorer's (`explore.figures`) alike: a term
# keeps its colour whichever terms a figure shows and in which order.
TERM_COLORS = {
    "compute": "#4c72b0",
    "tp_comm": "#dd8452",
    "ep_comm": "#da8bc3",
    "offload": "#ccb974",
    "pp_p2p": "#55a868",
    "pp_wait": "#64b5cd",
    "pp_bubble": "#c44e52",
    "dp_comm": "#8172b3",
    "optimizer": "#937860",
    "overhead": "#8c8c8c",
}
TERM_NAMES = {
    "compute": "compute",
    "tp_comm": "TP communication",
    "ep_comm": "EP all-to-all",
    "offload": "activation offload",
    "pp_p2p": "PP sends",
    "pp_wait": "PP wait (host steps, heaviest micro-batch)",
    "pp_bubble": "PP bubble",
    "dp_comm": "DP communication",
    "optimizer": "optimizer",
    "overhead": "fixed overheads",
}


def term_colors(terms: Sequence[str]) -> list[str]:
    """Each term's fixed colour (TERM_COLORS); a term without one takes the next of OTHER_COLORS
    that no term of the figure uses."""
    spare = iter([c for c in OTHER_COLORS if c not in TERM_COLORS.values()] * (len(terms) + 1))
    return [TERM_COLORS.get(t) or next(spare) for t in terms]


LINK_STYLES = ["-", "--", ":", "-."]  # matplotlib's, one per link in the order given
LINK_DASHES = ["solid", "dash", "dot", "dashdot"]  # the same, as Plotly names them
_DEGREE = {k: re.compile(rf"\b{k}\s*=?\s*(\d+|all)\b", re.IGNORECASE) for k in ("tp", "pp")}


def plan_kind(label: str) -> str | None:
    """'tp', 'pp', 'hybrid' or 'dp' for a plan label ('tp=8', 'tp=2,pp=4', 'TP=8 PP=1'); None
    for a label that names no degree (not a plan)."""
    found = {k: (m.group(1) if (m := rx.search(label)) else None) for k, rx in _DEGREE.items()}
    if found["tp"] is None and found["pp"] is None:
        return "dp" if re.search(r"\bdp\s*=?\s*\d", label, re.IGNORECASE) else None
    tp, pp = (v not in (None, "1") for v in (found["tp"], found["pp"]))
    return "hybrid" if tp and pp else "tp" if tp else "pp" if pp else "dp"


def plan_colors(labels: Sequence[str]) -> list[str]:
    """A colour for each label: its plan kind's colour, the next shade for a repeated kind."""
    used: dict[str, int] = {}
    out = []
    for label in labels:
        kind = plan_kind(label) or "other"
        k = used.get(kind, 0)
        used[kind] = k + 1
        shades = KIND_SHADES.get(kind, OTHER_COLORS)
        out.append(shades[k % len(shades)])
    return out


def term_name(term: str, tp_comm: str | None = None) -> str:
    """A term's name in a legend; `tp_comm`: what the plans shown call theirs, 'CP communication' or
    'TP/CP communication' where they have context parallelism (`engines.result.tp_comm_name`, as
    the tables and why-lines say), else 'TP communication'."""
    if term == "tp_comm" and tp_comm:
        return tp_comm
    return TERM_NAMES.get(term, term.replace("_", " "))
