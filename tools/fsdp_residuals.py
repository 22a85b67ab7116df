"""What the PyTorch FSDP stacks' remaining error is made of (issue #32 item 3): every dev row of
the FSDP family, predicted with its source left out (`analyses.loso.by_source`), its error
tabled against the run's variables and the breakdown's shares, and, where a source publishes one
layout at several micro-batches (Modalities' tables, gradient accumulation 1), the measured and
predicted step split into a part per micro-batch (the slope) and a part per step (the intercept).

Dev rows only (`split == dev`): the holdout rows are for reporting, never for choosing
(docs/validation.md). Nothing here is fitted into the model; the study is in docs/model.md
("Where the FSDP stacks' remaining error is").

    python tools/fsdp_residuals.py            # the tables
    python tools/fsdp_residuals.py --rows     # and every row
"""

from __future__ import annotations

import argparse
import itertools
from collections import defaultdict
from collections.abc import Callable

import numpy as np

from shardwise.analyses import loso
from shardwise.analyses import public_validation as pv
from shardwise.analyses.public_row import notes

# the framework presets that run PyTorch FSDP (FSDP1 or FSDP2) as their data-parallel engine
FSDP_FAMILY = ("fsdp", "fsdp2", "composer", "hf-transformers", "torchtitan", "torchtitan-compile", "nemo-automodel")


def dev_rows() -> list[dict[str, object]]:
    """Each FSDP-family dev row: its variables, leave-one-source-out error and breakdown shares."""
    from shardwise.engines.training import estimate_training_step

    raws = {r["id"]: pv.public_moe.resolved(r) for r in pv.raw_rows()}
    out: list[dict[str, object]] = []
    for source, preds in sorted(loso.by_source().items()):
        for x in preds:
            p = x.priced
            if p.stack not in FSDP_FAMILY or p.row.split != "dev":
                continue
            raw = raws[p.row.run_id]
            est = estimate_training_step(pv.scenario_for(raw))
            step = float(est.step_time_s)
            shares = {k: float(v) / step for k, v in est.breakdown.as_dict().items()}
            n = notes(raw)
            out.append(
                {
                    "id": p.row.run_id,
                    "source": source,
                    "stack": p.stack,
                    "gpu": p.gpu,
                    "system": raw["system"],
                    "model": raw["model"],
                    "seq": int(raw["seq_len"]),
                    "gpus": int(raw["num_gpus"]),
                    "mbs": int(raw["mbs"]),
                    "ga": raw["ga"],
                    "recompute": raw["recompute"] or "none",
                    "sharding": n.get("sharding", "full-shard" if raw["fsdp"] in ("", raw["dp"]) else "hybrid"),
                    "compile": n.get("compile", "off" if p.stack != "torchtitan-compile" else "on"),
                    "error": x.predicted_step_s / p.row.measured_step_s - 1.0,
                    "measured_s": p.row.measured_step_s,
                    "predicted_s": x.predicted_step_s,
                    "dp_exposed": shares["dp_comm"],
                    "optimizer": shares["optimizer"],
                    "host": shares["overhead"],
                    "compute": shares["compute"],
                }
            )
    return out


def _bins(edges: tuple[float, ...], unit: str = "") -> Callable[[float], str]:
    def name(v: float) -> str:
        for lo, hi in itertools.pairwise(edges):
            if lo <= v < hi:
                return f"{lo:g}-{hi:g}{unit}"
        return f">={edges[-1]:g}{unit}"

    return name


VARIABLES: dict[str, Callable[[dict[str, object]], object]] = {
    "GPU": lambda r: r["gpu"],
    "model": lambda r: r["model"],
    "GPUs": lambda r: _bins((1, 17, 65, 257))(float(r["gpus"])),  # type: ignore[arg-type]
    "sequence": lambda r: r["seq"],
    "micro-batch": lambda r: r["mbs"],
    "activation checkpointing": lambda r: r["recompute"],
    "sharding": lambda r: r["sharding"],
    "compile": lambda r: r["compile"],
    "exposed DP share": lambda r: _bins((0.0, 0.05, 0.1, 0.2))(float(r["dp_exposed"])),  # type: ignore[arg-type]
    "optimizer share": lambda r: _bins((0.0, 0.02, 0.05))(float(r["optimizer"])),  # type: ignore[arg-type]
    "host share": lambda r: _bins((0.0, 0.01, 0.05))(float(r["host"])),  # type: ignore[arg-type]
}


def table(rows: list[dict[str, object]], name: str, key: Callable[[dict[str, object]], object]) -> None:
    groups: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        groups[str(key(r))].append(float(r["error"]))  # type: ignore[arg-type]
    print(f"  {name}")
    for k in sorted(groups):
        e = np.array(groups[k])
        print(
            f"    {k:28} {len(e):4} rows  bias {100 * e.mean():+6.1f}%  MAPE {100 * np.abs(e).mean():5.1f}%"
            f"  ({100 * e.min():+.1f}% .. {100 * e.max():+.1f}%)"
        )


def slopes(rows: list[dict[str, object]]) -> None:
    """Per layout published at several micro-batches (one step per micro-batch: ga 1), the
    least-squares line of the step in the micro-batch, measured and predicted."""
    series: dict[tuple[object, ...], list[dict[str, object]]] = defaultdict(list)
    for r in rows:
        if r["ga"] in ("", "1"):
            series[(r["system"], r["model"], r["gpus"], r["seq"], r["sharding"], r["recompute"])].append(r)
    print("  step = intercept + slope x micro-batch (layouts published at 3 or more micro-batches)")
    for key, rs in sorted(series.items(), key=str):
        mbs = np.array([float(r["mbs"]) for r in rs])  # type: ignore[arg-type]
        if len(set(mbs)) < 3:
            continue
        meas = np.polyfit(mbs, [float(r["measured_s"]) for r in rs], 1)  # type: ignore[arg-type]
        pred = np.polyfit(mbs, [float(r["predicted_s"]) for r in rs], 1)  # type: ignore[arg-type]
        system, model, gpus, seq, sharding, rec = key
        listed = ", ".join(str(int(m)) for m in sorted(set(mbs)))
        print(
            f"    {system} {model} {gpus} GPUs s{seq} {sharding} rec={rec} (mb {listed}):"
            f" slope {1e3 * meas[0]:.0f} ms measured, {1e3 * pred[0]:.0f} predicted ({pred[0] / meas[0] - 1:+.0%});"
            f" intercept {1e3 * meas[1]:.0f} ms measured, {1e3 * pred[1]:.0f} predicted"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", action="store_true", help="print every row")
    args = parser.parse_args()
    rows = dev_rows()
    print(f"FSDP-family dev rows, leave-one-source-out error: {len(rows)} rows")
    table(rows, "source", lambda r: f"{r['source']} ({r['stack']})")
    for name, key in VARIABLES.items():
        table(rows, name, key)
    by_gpu: dict[object, list[dict[str, object]]] = defaultdict(list)
    for r in rows:
        by_gpu[r["gpu"]].append(r)
    for gpu, rs in sorted(by_gpu.items(), key=str):
        if len(rs) < 8:
            continue
        print(f"within {gpu} ({len(rs)} rows)")
        for name in ("model", "GPUs", "sequence", "micro-batch", "activation checkpointing", "sharding"):
            table(rs, name, VARIABLES[name])
    slopes(rows)
    if args.rows:
        for r in rows:
            print(
                f"{r['id']} {r['gpu']} {r['model']} s{r['seq']} {r['gpus']} GPUs mb{r['mbs']} {r['sharding']}"
                f" rec={r['recompute']}: {100 * float(r['error']):+.1f}%"  # type: ignore[arg-type]
                f" (compute {float(r['compute']):.2f}, DP {float(r['dp_exposed']):.2f},"  # type: ignore[arg-type]
                f" optimizer {float(r['optimizer']):.2f})"  # type: ignore[arg-type]
            )


if __name__ == "__main__":
    main()
