"""Each public row's implied efficiency scale on one GPU, grouped by model, layout and precision.

`tools/fit_efficiency.py` sets a GPU's sustained matmul-efficiency scale so that the median signed
step-time error of its dev rows is zero. A row's *implied scale* is the grid point
(`analyses.loso.GRID`, steps of 0.005) at which its own predicted step is nearest its measured one:
rows whose layouts the model prices alike imply the same scale, and a group that implies another
carries a cost the model prices differently (docs/model.md, *GB200's fitted scale*). In-sample
(every source), nothing refitted, nothing written.

    python tools/implied_scales.py gb200                 # the dev rows that set GB200's scale
    python tools/implied_scales.py h100-sxm5-80gb --split holdout
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict

import numpy as np

from shardwise.analyses import loso
from shardwise.analyses import public_validation as pv


def implied_scale(p: loso.Priced) -> float:
    """The grid scale at which the row's predicted step is nearest its measured step."""
    return float(loso.GRID[int(np.argmin(np.abs(p.grid_s / p.row.measured_step_s - 1.0)))])


def _layout(raw: dict[str, str]) -> str:
    fsdp = " fsdp" if raw["fsdp"] not in ("", "0") else ""
    return f"tp{raw['tp']} pp{raw['pp']} cp{raw['cp']} vp{raw['vp'] or 1} gbs{raw['gbs']}{fsdp}"


def groups(gpu: str, split: str) -> dict[tuple[str, str, str], list[tuple[float, str, str]]]:
    """(model, layout, precision) -> [(implied scale, run id, software version)] of the GPU's rows
    in `split` (dev: the rows that set its scale)."""
    raws = {r["id"]: r for r in pv.raw_rows()}
    out: dict[tuple[str, str, str], list[tuple[float, str, str]]] = defaultdict(list)
    for p in loso.priced_rows():
        if p.gpu != gpu or p.row.split != split or (split == "dev" and not p.sets_scale):
            continue
        raw = raws[p.row.run_id]
        version = raw["framework_version"] or raw["commit_or_version"][:18]
        out[(raw["model"], _layout(raw), raw["precision"] or "?")].append((implied_scale(p), p.row.run_id, version))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Implied efficiency scale of each public row on one GPU.")
    parser.add_argument("gpu", help="a GPU preset with public rows (e.g. gb200, gb300, h100-sxm5-80gb)")
    parser.add_argument("--split", choices=("dev", "holdout"), default="dev")
    args = parser.parse_args(argv)
    found = groups(args.gpu, args.split)
    if not found:
        known = sorted({p.gpu for p in loso.priced_rows() if p.row.split == args.split})
        print(f"gpu: {args.gpu!r} has no priced {args.split} rows; GPUs with some: {', '.join(known)}", file=sys.stderr)
        raise SystemExit(2)
    for key in sorted(found):
        scales = [s for s, _, _ in found[key]]
        ids = " ".join(sorted(i for _, i, _ in found[key]))
        versions = ", ".join(sorted({v for _, _, v in found[key]}))
        print(
            f"{' '.join(key):60s} n={len(scales):2d}  {statistics.median(scales):.3f} "
            f"({min(scales):.3f}-{max(scales):.3f})  [{versions}]  {ids}"
        )


if __name__ == "__main__":
    main()
