"""Fit each GPU's sustained matmul efficiency on the DEV split of the public training runs.

The GEMM tile model needs the fraction of peak a tile's main loop reaches while a real training
job runs (clocks under the power limit included). Bekman's MAMF microbenchmark gives it for one
GEMM at its best shape; training jobs on Hopper and Blackwell run below that (GB200 and GB300 have
the same datasheet peaks but differ by 13% in the same recipes: the power limit sets the clock).
So for each GPU with public runs in the dev split, one scale s multiplies both its 16-bit and FP8
efficiencies, chosen so that the median signed step-time error of its dev rows is zero (robust to
a few odd rows). Only rows where compute is at least COMPUTE_SHARE of the predicted step take
part (where the step is mostly communication or bubble, the rest of the model would be fitted
instead); a GPU with fewer than MIN_GROUPS such groups uses all its dev rows. The holdout rows
are never read here.

    python tools/fit_efficiency.py            # print the fitted values (paste into presets/gpus.yaml)
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from shardwise import presets
from shardwise.analyses import public_validation as pv
from shardwise.engines.training import estimate_training_step

SCALES = np.round(np.arange(0.60, 1.2001, 0.0025), 4)
MIN_GROUPS = 2  # a GPU needs dev rows from at least this many groups to get its own value
COMPUTE_SHARE = 0.85  # rows whose predicted step is at least this much compute measure the GPU


def dev_rows_by_gpu() -> dict[str, list[dict[str, str]]]:
    out: dict[str, list[dict[str, str]]] = defaultdict(list)
    for row in pv.raw_rows():
        if row["split"] != "dev" or pv.skip_reason(row) or row["workload"] == "lora":  # full training only
            continue
        try:
            scn = pv.scenario_for(row)
        except pv.SpecError:  # an invalid layout is skipped by validate too
            continue
        out[scn.cluster.gpu.name].append(row)
    return out


def median_error(rows: list[dict[str, str]], scale: float) -> float:
    errs = []
    for row in rows:
        scn = pv.scenario_for(row)
        gpu = scn.cluster.gpu
        fast = gpu.with_(
            matmul_efficiency=gpu.matmul_efficiency * scale,
            matmul_efficiency_fp8=gpu.matmul_efficiency_fp8 * scale,
        )
        scn = type(scn)(scn.model, scn.cluster.with_(gpu=fast), scn.plan)
        pred = float(estimate_training_step(scn).step_time_s)
        flops = float(estimate_training_step(pv.scenario_for(row)).model_flops_per_step)
        errs.append(pred / pv.measured_step_s(row, flops) - 1.0)
    return float(np.median(errs))


def fit(rows: list[dict[str, str]]) -> float:
    """The scale whose median error is closest to zero (errors fall as the scale grows)."""
    lo, hi = 0, len(SCALES) - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if median_error(rows, float(SCALES[mid])) > 0:
            lo = mid
        else:
            hi = mid
    return float(min((SCALES[lo], SCALES[hi]), key=lambda s: abs(median_error(rows, float(s)))))


def compute_share(row: dict[str, str]) -> float:
    est = estimate_training_step(pv.scenario_for(row))
    return float(est.breakdown.compute_s) / float(est.step_time_s)


def main() -> None:
    for name, all_rows in sorted(dev_rows_by_gpu().items()):
        rows = [r for r in all_rows if compute_share(r) >= COMPUTE_SHARE]
        if len({r["group"] for r in rows}) < MIN_GROUPS:
            rows = all_rows
        groups = {r["group"] for r in rows}
        gpu = presets.gpu(name)
        if len(groups) < MIN_GROUPS:
            print(f"{name}: {len(rows)} dev rows in {len(groups)} group(s): too few, not fitted")
            continue
        s = fit(rows)
        print(
            f"{name}: {len(rows)} dev rows, {len(groups)} groups: scale {s:.4f} -> matmul_efficiency "
            f"{gpu.matmul_efficiency * s:.3f}, matmul_efficiency_fp8 {gpu.matmul_efficiency_fp8 * s:.3f} "
            f"(median error before {median_error(rows, 1.0):+.1%}, after {median_error(rows, s):+.1%})"
        )


if __name__ == "__main__":
    main()
