"""A measured training run's row as a `TrainingRequest`: the layout columns every runs CSV has, and
any field of the request's cluster, plan and stack (`requests.fields`, the command line's flags
with underscores) that says how the run ran -- `selective_policy` for a JAX remat policy,
`shard_group` for hybrid sharding, `inter_link` for a stated network, the kernels' switches -- so
that a run is priced as it ran, as `shardwise validate public` prices the public rows
(`analyses.public_runs.request_for`; `tools/calibration_showcase.py` writes its request's fields).
"""

from __future__ import annotations

import re
from typing import Any

from shardwise.errors import SpecError
from shardwise.requests.fields import CLUSTER_FIELDS, EXECUTION_FIELDS, PLAN_FIELDS

# the columns of the layout, read with the table's spellings (`runs.ALIASES`) and checks
LAYOUT = (
    *("model", "system", "layers", "seq_len", "num_gpus", "gpus_per_node", "tp", "pp", "cp", "dp", "vpp"),
    *("global_batch", "micro_batch", "ep", "etp", "recompute", "zero"),
)
# the request's other fields a run may state: every cluster, plan and stack field but the
# calibration (a runs file is what makes one), the server count (give num_gpus) and the layout's
REQUEST_COLUMNS = tuple(
    f.name
    for f in (*CLUSTER_FIELDS, *PLAN_FIELDS, *EXECUTION_FIELDS)
    if f.name not in ("calibration", "nodes", *LAYOUT)
)
ZERO_STAGES = ("0", "1", "2", "3", "0.0", "1.0", "2.0", "3.0")


def training_request(row: dict[str, str], where: str) -> Any:
    """The `TrainingRequest` of a run's row: its columns are the request's fields (the same
    defaults as `predict`: the framework's schedule, sequence parallelism, ZeRO stage and recompute),
    with the table's spellings (`recompute` 'full (uniform, 1 layer)', `fsdp` ranks = ZeRO-3)."""
    from shardwise.requests.training import TrainingRequest

    optional = ("cp", "dp", "vpp", "micro_batch", "ep", "etp")
    for key in ("num_gpus", "tp", "pp", "global_batch", *(k for k in optional if row.get(k))):
        _whole(row, key, where)
    recompute = (row.get("recompute") or "").lower()  # blank: the framework's default (`default_recompute`)
    found = re.match(r"(full|selective|none)\b", recompute)  # 'full (uniform, 1 layer)' is full
    zero = row.get("zero") or ""
    if zero and zero not in ZERO_STAGES:
        raise SpecError(f"{where}: zero: {zero!r} is not allowed; use 0, 1, 2 or 3 (the ZeRO stage)")
    if (row.get("fsdp") or "0") not in ("", "0"):
        zero = "3"
    fields = {
        **{k: row.get(k, "") for k in LAYOUT},
        **{k: row[k] for k in REQUEST_COLUMNS if row.get(k, "") != ""},
        "recompute": found[1] if found else recompute,
        "zero": zero,
    }
    try:
        return TrainingRequest.from_mapping(fields)
    except SpecError as exc:
        raise SpecError(f"{where}: {exc}") from None


def _whole(row: dict[str, str], key: str, where: str, default: int | None = None) -> int:
    text = row.get(key, "")
    if text == "":
        if default is None:
            raise SpecError(f"{where}: {key} is empty; give a whole number")
        return default
    try:
        value = float(text)
    except ValueError:
        raise SpecError(f"{where}: {key}: {text!r} is not a number") from None
    if not (value == value and 1 <= value <= 2**53 and value == int(value)):
        raise SpecError(f"{where}: {key}: {text} is not allowed; it must be a whole number >= 1")
    return int(value)
