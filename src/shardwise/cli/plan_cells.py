"""A plan row's cells in `plan`'s table and its best-plan line (rows of `PlanResult.as_dict`)."""

from __future__ import annotations

from typing import Any


def recompute_cell(row: dict[str, Any]) -> str:
    """A plan row's recompute cell: 'none', 'full', or '3 layers' (the first 3 layers of each stage,
    or model chunk, recomputed whole)."""
    n = int(row.get("recompute_layers", 0))
    if n == 0 or row["recompute"] == "full":
        return str(row["recompute"])
    return f"{n} layer{'s' * (n > 1)}" + ("" if row["recompute"] == "none" else f" + {row['recompute']}")


def plan_label(row: dict[str, Any]) -> str:
    sched = row["schedule"] + (f" v={row['vpp']}" if row["vpp"] > 1 else "")
    split = f", layers per stage {row['stage_layers']}" if row.get("stage_layers") else ""
    ep = f" ep={row['ep']}" if row.get("ep", 1) > 1 else ""
    ep += f" cp={row['cp']}" if row.get("cp", 1) > 1 else ""
    n = int(row.get("recompute_layers", 0))
    rc = f"recompute {row['recompute']}"
    if n and row["recompute"] != "full":
        whole = f"the first {n} layer{'s' * (n > 1)} of each {'model chunk' if row['vpp'] > 1 else 'stage'}"
        rc = f"recompute {whole} whole" + ("" if row["recompute"] == "none" else f", the others {row['recompute']}")
    shard = ""
    if row.get("shard_group", 0):
        replicas = row["dp"] * row["cp"] // row["shard_group"]
        shard = f" sharded over {row['shard_group']} ranks, {replicas} replicas (hybrid)"
    return (
        f"tp={row['tp']} pp={row['pp']} dp={row['dp']}{ep}, micro-batch {row['micro_batch']}, {sched}, {rc}, "
        f"SP {'on' if row['sequence_parallel'] else 'off'}, ZeRO-{row['zero_stage']}{shard}{split}"
    )
